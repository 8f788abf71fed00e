// Checkpoint metadata: the model config (ModelConfig::from_metadata,
// models/config.h) and the tokenizer train_mt stores (Tokenizer::from_text,
// examples/common/tokenizer.h).  The input is the metadata map, one
// "key=value" entry per NUL-separated record (values may hold newlines, as the
// tokenizer's does).  What is accepted must survive a write and read back.
#include "headroom/examples/common/tokenizer.h"
#include "headroom/models/config.h"
#include "fuzz_input.h"

namespace {

headroom::StringMap decode_metadata(const std::string& input) {
  headroom::StringMap metadata;
  size_t start = 0;
  while (start <= input.size()) {
    size_t end = input.find('\0', start);
    if (end == std::string::npos) end = input.size();
    const std::string record = input.substr(start, end - start);
    const size_t equals = record.find('=');
    if (equals != std::string::npos) metadata[record.substr(0, equals)] = record.substr(equals + 1);
    start = end + 1;
  }
  return metadata;
}

void check_config(const headroom::StringMap& metadata) {
  const headroom::ModelConfig config = headroom::ModelConfig::from_metadata(metadata);
  if (headroom::ModelConfig::from_metadata(config.to_metadata()) != config) __builtin_trap();
}

void check_tokenizer(const std::string& text) {
  using headroom::examples::Tokenizer;
  const Tokenizer tokenizer = Tokenizer::from_text(text);
  if (Tokenizer::from_text(tokenizer.to_text()).to_text() != tokenizer.to_text()) __builtin_trap();
  const std::string sample = "Das Haus ist klein. \xc3\xa4\xc3\xb6\xc3\xbc 12345";
  if (tokenizer.decode(tokenizer.encode(sample)) != sample) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const headroom::StringMap metadata = decode_metadata(std::string(reinterpret_cast<const char*>(data), size));
  headroom::fuzz::expect_clean([&] { check_config(metadata); });
  auto tokenizer = metadata.find("tokenizer");
  if (tokenizer != metadata.end()) headroom::fuzz::expect_clean([&] { check_tokenizer(tokenizer->second); });
  return 0;
}
