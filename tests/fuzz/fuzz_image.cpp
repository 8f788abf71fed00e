// Images (core/image.h, through stb_image).  The first input byte picks the
// channel count a loader asks for and the file's extension; the rest is the file.
#include "headroom/core/image.h"
#include "fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  static const char* const extensions[] = {".png", ".jpg", ".bmp"};
  const int channels = data[0] % 5;  // 0 keeps the file's, 1..4 converts
  const char* extension = extensions[data[0] / 5 % 3];
  const std::string path = headroom::fuzz::write_input(data + 1, size - 1, extension);
  headroom::fuzz::expect_clean([&] { headroom::load_image(path, channels); });
  return 0;
}
