// GNU gettext catalogs (.mo, examples/common/parallel_data.h), train_mt's data.
#include "headroom/examples/common/parallel_data.h"
#include "fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = headroom::fuzz::write_input(data, size, ".mo");
  headroom::fuzz::expect_clean([&] { headroom::examples::read_mo(path); });
  return 0;
}
