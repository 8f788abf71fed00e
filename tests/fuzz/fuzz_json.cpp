// The JSON reader of safetensors headers (core/json.h); what it parses must
// dump and parse back to the same text.
#include "headroom/core/json.h"
#include "fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  headroom::fuzz::expect_clean([&] {
    std::string dumped = headroom::json::dump(headroom::json::parse(text, "fuzz input"));
    if (headroom::json::dump(headroom::json::parse(dumped, "dumped")) != dumped) __builtin_trap();
  });
  return 0;
}
