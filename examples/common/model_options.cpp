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
  c.attention.options = parse_options(attn_opt, "--attn-opt");
  for (const auto& [key, value] : parse_options(attn_set, "--attn-set")) c.attention.set(key, value);
  return c;
}

void add_model_flags(Flags& flags, ModelOptions& m) {
  flags.add("attn", &m.attn, "attention: mha | moa | moh | mae");
  flags.add("attn-opt", &m.attn_opt, "the method's options, key=value,... (e.g. shared_heads=2,routed_k=4)");
  flags.add("attn-set", &m.attn_set,
            "attention per layer or role, key=value,... with keys [<role>.][layer.<i>.]type or ...option.<name>, "
            "roles encoder_self, decoder_self, cross (e.g. layer.0.type=mha,cross.option.kv_heads=1)");
  flags.add("dim", &m.dim, "model width d");
  flags.add("heads", &m.heads, "attention heads h (MoA: d / h is the default expert width)");
  flags.add("layers", &m.layers, "transformer layers (per stack)");
  flags.add("ffn", &m.ffn, "MLP hidden width");
  flags.add("dropout", &m.dropout, "dropout on embeddings, residual branches and the MLP");
}

StringMap parse_options(const std::string& text, const std::string& flag) {
  StringMap options;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find(',', start);
    if (end == std::string::npos) end = text.size();
    std::string entry = text.substr(start, end - start);
    size_t equals = entry.find('=');
    if (equals == std::string::npos || equals == 0)
      throw UsageError(flag + " entries are key=value, got '" + entry + "'");
    options[entry.substr(0, equals)] = entry.substr(equals + 1);
    start = end + 1;
  }
  return options;
}

double active_head_fraction(const Module& model) {
  auto layers = collect_modules<Attention>(model);
  if (layers.empty()) return 1.0;
  double total = 0;
  for (const auto& layer : layers) {
    if (auto moh = std::dynamic_pointer_cast<MoHAttention>(layer))
      total += double(moh->active_heads()) / double(moh->config.heads);
    else if (auto moa = std::dynamic_pointer_cast<MoAAttention>(layer))
      total += double(moa->config.k * moa->config.head_dim) / double(moa->config.dim);
    else total += 1.0;
  }
  return total / double(layers.size());
}

int64_t shared_head_count(const Module& model) {
  auto moh = collect_modules<MoHAttention>(model);
  return moh.empty() ? 0 : moh.front()->moh_config.shared_heads;
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
