#include "headroom/examples/common/model_options.h"

#include <algorithm>

#include "headroom/models/moa.h"
#include "headroom/models/moh.h"

namespace headroom::examples {

ModelConfig ModelOptions::config() const {
  HEADROOM_CHECK(dim > 0 && heads > 0 && layers > 0 && ffn > 0 && dim % heads == 0,
                 "[model] expected positive --dim, --heads, --layers, --ffn with --dim divisible by --heads, got dim ",
                 dim, ", heads ", heads, ", layers ", layers, ", ffn ", ffn);
  HEADROOM_CHECK(dim <= kMaxDim && ffn <= kMaxFfn && layers <= kMaxLayers, "[model] --dim ", dim, ", --ffn ", ffn,
                 " and --layers ", layers, " must be at most ", kMaxDim, ", ", kMaxFfn, " and ", kMaxLayers);
  // Attention (4 d²) and MLP (2 d · ffn) weights of a stack; the ranges keep this below 2^40.
  const int64_t stack_weights = layers * (4 * dim * dim + 2 * dim * ffn);
  if (stack_weights > kMaxStackWeights)
    throw UsageError("--layers " + std::to_string(layers) + " of --dim " + std::to_string(dim) + " and --ffn " +
                     std::to_string(ffn) + " make " + std::to_string(stack_weights) + " weights per stack, over the " +
                     "limit of " + std::to_string(kMaxStackWeights));
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
  flags.add("dim", &m.dim, "model width d", {1, kMaxDim});
  flags.add("heads", &m.heads, "attention heads h (MoA: d / h is the default expert width)", {1, kMaxHeads});
  flags.add("layers", &m.layers, "transformer layers (per stack)", {1, kMaxLayers});
  flags.add("ffn", &m.ffn, "MLP hidden width", {1, kMaxFfn});
  flags.add("dropout", &m.dropout, "dropout on embeddings, residual branches and the MLP",
            {0, 1, End::closed, End::open});
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
    // A repeated key would silently keep only its last value.
    if (!options.emplace(entry.substr(0, equals), entry.substr(equals + 1)).second)
      throw UsageError(flag + " gives the key '" + entry.substr(0, equals) + "' twice");
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
