#include "headroom/examples/common/model_options.h"

#include <algorithm>

#include "headroom/models/moa.h"
#include "headroom/models/moh.h"

namespace headroom::examples {

ModelConfig ModelOptions::config() const {
  HEADROOM_CHECK(dim > 0 && heads > 0 && layers > 0 && ffn > 0 && dim % heads == 0,
                 "[model] expected positive --dim, --heads, --layers, --ffn with --dim divisible by --heads, got dim ",
                 dim, ", heads ", heads, ", layers ", layers, ", ffn ", ffn);
  ModelConfig c;
  c.dim = dim, c.heads = heads, c.ffn_hidden = ffn;
  c.encoder_layers = layers, c.decoder_layers = layers;
  c.activation = Activation::gelu;
  c.dropout = dropout;
  c.attention.type = attn;
  c.attention.options = parse_options(attn_opt);
  return c;
}

void add_model_flags(Flags& flags, ModelOptions& m) {
  flags.add("attn", &m.attn, "attention: mha | moa | moh | mae");
  flags.add("attn-opt", &m.attn_opt, "the method's options, key=value,... (e.g. shared_heads=2,routed_k=4)");
  flags.add("dim", &m.dim, "model width d");
  flags.add("heads", &m.heads, "attention heads h (MoA: d / h is the default expert width)");
  flags.add("layers", &m.layers, "transformer layers (per stack)");
  flags.add("ffn", &m.ffn, "MLP hidden width");
  flags.add("dropout", &m.dropout, "dropout on embeddings, residual branches and the MLP");
}

StringMap parse_options(const std::string& text) {
  StringMap options;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find(',', start);
    if (end == std::string::npos) end = text.size();
    std::string entry = text.substr(start, end - start);
    size_t equals = entry.find('=');
    if (equals == std::string::npos || equals == 0)
      throw UsageError("--attn-opt entries are key=value, got '" + entry + "'");
    options[entry.substr(0, equals)] = entry.substr(equals + 1);
    start = end + 1;
  }
  return options;
}

namespace {

// Layer 0 of the model's attention, built on a scratch generator: the
// method's resolved options (defaults filled in) without building the model.
std::shared_ptr<Attention> first_attention_layer(const ModelConfig& config) {
  Generator scratch(0);
  return make_attention(config, 0, AttentionRole::decoder_self, scratch);
}

}  // namespace

double active_head_fraction(const ModelConfig& config) {
  auto layer = first_attention_layer(config);
  if (auto moh = std::dynamic_pointer_cast<MoHAttention>(layer))
    return double(moh->active_heads()) / double(config.heads);
  if (auto moa = std::dynamic_pointer_cast<MoAAttention>(layer))
    return double(moa->config.k * moa->config.head_dim) / double(config.dim);
  return 1.0;
}

int64_t shared_head_count(const ModelConfig& config) {
  auto moh = std::dynamic_pointer_cast<MoHAttention>(first_attention_layer(config));
  return moh ? moh->moh_config.shared_heads : 0;
}

ModelOptions method_preset(const std::string& method, ModelOptions base) {
  const int64_t h = base.heads;
  HEADROOM_CHECK(h >= 4 && h % 4 == 0, "[compare] the presets need --heads divisible by 4, got ", h);
  auto set = [&](const std::string& type, const std::string& options) {
    base.attn = type, base.attn_opt = options;
    return base;
  };
  auto count = [](int64_t n) { return std::to_string(n); };
  if (method == "mha") return set("mha", "");
  if (method == "moa") return set("moa", "experts=" + count(2 * h - 1) + ",k=" + count(h / 2));
  if (method == "moh75") return set("moh", "shared_heads=" + count(h / 4) + ",routed_k=" + count(h / 2));
  if (method == "moh50") return set("moh", "shared_heads=" + count(h / 4) + ",routed_k=" + count(h / 4));
  // The library's default gate width, d, would add 7-12% parameters.
  if (method == "mae") return set("mae", "gate_hidden=" + count(std::max<int64_t>(base.dim / 8, 1)));
  throw UsageError("unknown method '" + method + "' (known: mha, moa, moh75, moh50, mae)");
}

}  // namespace headroom::examples
