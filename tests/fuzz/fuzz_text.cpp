// UTF-8 text corpora (examples/common/text_data.h): read_text_file accepts a
// file exactly when invalid_utf8_offset finds no bad byte, and that offset
// must lie inside the text.
#include "headroom/examples/common/text_data.h"
#include "fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace headroom::examples;
  const std::string text(reinterpret_cast<const char*>(data), size);
  const size_t bad = invalid_utf8_offset(text);
  if (bad != std::string::npos && bad >= size) __builtin_trap();
  const std::string path = headroom::fuzz::write_input(data, size, ".txt");
  bool accepted = false;
  headroom::fuzz::expect_clean([&] { accepted = read_text_file(path) == text; });
  if (accepted != (bad == std::string::npos && size > 0)) __builtin_trap();
  return 0;
}
