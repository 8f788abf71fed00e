// safetensors files (core/safetensors.h): header length, JSON header, dtypes,
// shapes and offsets, read from a file as a checkpoint or fixture would be.
#include "headroom/core/safetensors.h"
#include "fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = headroom::fuzz::write_input(data, size, ".safetensors");
  headroom::fuzz::expect_clean([&] {
    headroom::SafetensorsFile file = headroom::load_safetensors(path);
    for (const auto& entry : file.tensors) entry.second.contiguous();  // touch every byte it claims
  });
  return 0;
}
