// IDX files (examples/common/idx.h), as train_vit reads MNIST-style data.
#include "headroom/examples/common/idx.h"
#include "fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = headroom::fuzz::write_input(data, size, "-idx3-ubyte");
  headroom::fuzz::expect_clean([&] { headroom::examples::read_idx(path); });
  return 0;
}
