// TSV sentence pairs (examples/common/parallel_data.h); what it reads must
// write and read back to the same pairs.
#include "headroom/examples/common/parallel_data.h"
#include "fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace headroom::examples;
  const std::string path = headroom::fuzz::write_input(data, size, ".tsv");
  headroom::fuzz::expect_clean([&] {
    SentencePairs pairs = read_tsv(path);
    write_tsv(path, pairs);
    if (read_tsv(path) != pairs) __builtin_trap();
  });
  return 0;
}
