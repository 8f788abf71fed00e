#include "headroom/examples/common/model_options.h"

#include <algorithm>
#include <cstdio>
#include <functional>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include "headroom/models/moa.h"
#include "headroom/models/moh.h"

namespace headroom::examples {

namespace {

// The option names of attention `type`, read off a small layer built with
// its defaults; an unknown type throws UsageError naming the known ones.
std::vector<std::string> option_names(const std::string& type) {
  const std::vector<std::string> methods{"mha", "moa", "moh", "mae"};
  if (std::find(methods.begin(), methods.end(), type) == methods.end())
    throw UsageError("unknown attention type '" + type + "'" + known_names_hint(type, methods));
  ModelConfig probe;
  probe.dim = 16, probe.heads = 4, probe.attention.type = type;
  Generator gen(0);
  std::vector<std::string> names;
  for (const auto& [name, value] :
       attention_choice(*make_attention(probe, 0, AttentionRole::encoder_self, gen)).options)
    names.push_back(name);
  return names;
}

// The attention roles of c's model, each with the layers of its stack:
// encoder_self with an encoder, decoder_self with a decoder, cross with both.
std::vector<std::pair<AttentionRole, int64_t>> model_roles(const ModelConfig& c) {
  std::vector<std::pair<AttentionRole, int64_t>> roles;
  if (c.encoder_layers > 0) roles.emplace_back(AttentionRole::encoder_self, c.encoder_layers);
  if (c.decoder_layers > 0) roles.emplace_back(AttentionRole::decoder_self, c.decoder_layers);
  if (c.encoder_layers > 0 && c.decoder_layers > 0) roles.emplace_back(AttentionRole::cross, c.decoder_layers);
  return roles;
}

// "decoder_self attention in layers 0 to 1, ...": what an --attn-set key can name.
std::string describe_roles(const std::vector<std::pair<AttentionRole, int64_t>>& roles) {
  std::string text;
  for (const auto& [role, layers] : roles)
    text += (text.empty() ? "" : ", ") + std::string(role_name(role)) + " attention in layers 0 to " +
            std::to_string(layers - 1);
  return text;
}

// Refuses an --attn-set key the model would ignore or misread: a role it
// lacks, a layer past its stack, an index not written plainly ("01", "-1"),
// another form than [<role>.][layer.<i>.]type or ...option.<name>.
void check_attention_keys(const ModelConfig& c, const std::string& attn_set) {
  const auto roles = model_roles(c);
  for (const auto& [key, value] : parse_options(attn_set, "--attn-set")) {
    auto refuse = [&, &key = key, &value = value](const std::string& why) {
      throw UsageError("--attn-set " + key + "=" + value + ": " + why + "; the model has " + describe_roles(roles));
    };
    std::string rest = key;
    int64_t layers = 0;  // of the stacks the key can name
    for (const auto& [role, count] : roles) layers = std::max(layers, count);
    for (AttentionRole role : {AttentionRole::encoder_self, AttentionRole::decoder_self, AttentionRole::cross}) {
      const std::string prefix = std::string(role_name(role)) + ".";
      if (rest.rfind(prefix, 0) != 0) continue;
      auto held = std::find_if(roles.begin(), roles.end(), [&](const auto& r) { return r.first == role; });
      if (held == roles.end()) refuse("this model has no " + std::string(role_name(role)) + " attention");
      layers = held->second, rest = rest.substr(prefix.size());
      break;
    }
    if (rest.rfind("layer.", 0) == 0) {
      const std::string index = rest.substr(6, rest.find('.', 6) - 6);
      // Written as the checkpoint's keys write it: digits, no sign, no leading zero.
      const std::optional<uint64_t> layer = parse_uint64(index);
      if (!layer || std::to_string(*layer) != index)
        refuse("a layer index is written 0, 1, 2, ..., got '" + index + "'");
      if (*layer >= uint64_t(layers)) refuse("layer " + index + " is past the last layer");
      rest = rest.substr(std::min(rest.size(), 7 + index.size()));
    }
    if (rest != "type" && (rest.rfind("option.", 0) != 0 || rest.size() == 7))
      refuse("expected a key [<role>.][layer.<i>.]type or [<role>.][layer.<i>.]option.<name>");
  }
}

// The size options of the methods (models/config.h) with the values the
// binaries accept: the flags' limits, so that no option alone sizes a layer
// past what --dim, --heads and --ffn could.
struct SizeOption {
  const char* name;
  int64_t min, max;
};
constexpr SizeOption kSizeOptions[] = {
    {"heads", 1, kMaxHeads},     {"head_dim", 0, kMaxDim},  {"kv_heads", 0, kMaxHeads}, {"shared_heads", -1, kMaxHeads},
    {"routed_k", -1, kMaxHeads}, {"experts", 1, kMaxHeads}, {"k", 1, kMaxHeads},        {"sample_topk", 0, kMaxHeads},
    {"gate_hidden", 0, kMaxFfn},
};

// Refuses a size option of `choice` outside its range, naming the flag that
// set it: --attn-opt when it is the base option (`base`), else --attn-set.
void check_option_sizes(const AttentionChoice& choice, const StringMap& base) {
  for (const SizeOption& size : kSizeOptions) {
    auto found = choice.options.find(size.name);
    if (found == choice.options.end()) continue;
    const std::optional<int64_t> value = parse_int64(found->second);
    if (value && *value >= size.min && *value <= size.max) continue;
    auto in_base = base.find(size.name);
    const bool from_base = in_base != base.end() && in_base->second == found->second;
    throw UsageError(std::string(from_base ? "--attn-opt " : "--attn-set ") + size.name + "=" + found->second + ": " +
                     size.name + " expects an integer in [" + std::to_string(size.min) + ", " +
                     std::to_string(size.max) + "]");
  }
}

// Checks every method and option name the layers of `c` resolve to, before
// any data is read: a misspelt one is refused with the nearest known name,
// a size out of its range with the range.
void check_attention_names(const ModelConfig& c, const ModelOptions& m) {
  std::map<std::string, std::vector<std::string>> names_of;  // per type, each probed once
  for (const auto& [role, layers] : model_roles(c))
    for (int64_t layer = 0; layer < layers; ++layer) {
      const AttentionChoice choice = c.attention.resolve(layer, role);
      if (!names_of.count(choice.type)) names_of[choice.type] = option_names(choice.type);
      const std::vector<std::string>& names = names_of[choice.type];
      for (const auto& [key, value] : choice.options) {
        if (std::find(names.begin(), names.end(), key) != names.end()) continue;
        const std::string flag = c.attention.options.count(key) ? "--attn-opt" : "--attn-set";
        throw UsageError(flag + " " + (flag == "--attn-opt" ? m.attn_opt : m.attn_set) + ": " + choice.type +
                         " attention has no option '" + key + "'" + known_names_hint(key, names));
      }
      check_option_sizes(choice, c.attention.options);
    }
}

// How each model flag's value lands in a ModelConfig; --layers sets the
// stacks the checkpoint's task uses (an LM has no encoder, a ViT no decoder).
using ConfigEdit = std::function<void(ModelConfig&)>;
std::vector<std::pair<std::string, ConfigEdit>> model_flag_edits(const ModelOptions& m) {
  return {
      {"attn", [&](ModelConfig& c) { c.attention.type = m.attn; }},
      {"attn-opt",
       [&](ModelConfig& c) {
         for (const auto& [key, value] : parse_options(m.attn_opt, "--attn-opt")) c.attention.options[key] = value;
       }},
      {"attn-set",
       [&](ModelConfig& c) {
         for (const auto& [key, value] : parse_options(m.attn_set, "--attn-set")) c.attention.set(key, value);
       }},
      {"dim", [&](ModelConfig& c) { c.dim = m.dim; }},
      {"heads", [&](ModelConfig& c) { c.heads = m.heads; }},
      {"layers",
       [&](ModelConfig& c) {
         if (c.encoder_layers > 0) c.encoder_layers = m.layers;
         if (c.decoder_layers > 0) c.decoder_layers = m.layers;
       }},
      {"ffn", [&](ModelConfig& c) { c.ffn_hidden = m.ffn; }},
      {"dropout", [&](ModelConfig& c) { c.dropout = m.dropout; }},
  };
}

// Refuses each given model flag that would change a field of the saved config.
void check_flags_agree(const ModelOptions& m, const ModelConfig& saved, const std::string& path) {
  const StringMap saved_fields = saved.to_metadata();
  for (const auto& [flag, edit] : model_flag_edits(m)) {
    if (!m.given(flag)) continue;
    ModelConfig edited = saved;
    edit(edited);
    for (const auto& [field, value] : edited.to_metadata()) {
      auto found = saved_fields.find(field);
      if (found != saved_fields.end() && found->second == value) continue;
      const std::string saved_value = found == saved_fields.end() ? "unset (the default)" : "'" + found->second + "'";
      throw UsageError("--" + flag + " " + m.flags->value(flag) + " contradicts the checkpoint " + path + ": its " +
                       field + " is " + saved_value + ", the flag makes it '" + value +
                       "'; the checkpoint sets the model, so drop the flag (or start a new --ckpt directory)");
    }
  }
}

// A size option of `choice`; `fallback` when it is absent or not positive (0 and -1 mean a default).
double size_option(const AttentionChoice& choice, const std::string& key, int64_t fallback) {
  auto found = choice.options.find(key);
  const std::optional<int64_t> value = found == choice.options.end() ? std::nullopt : parse_int64(found->second);
  return double(value && *value > 0 ? *value : fallback);
}

bool option_is(const AttentionChoice& choice, const std::string& key, const std::string& value) {
  auto found = choice.options.find(key);
  return found != choice.options.end() && found->second == value;
}

// The width of the queries a layer computes: every head's, or only the
// active heads' (h_s + K_r, h / 4 each by default) for MoH with its learned
// router and no RoPE.
double query_width(const AttentionChoice& choice, int64_t heads, double width) {
  if (choice.type != "moh" || option_is(choice, "router", "qnorm") || option_is(choice, "rope", "true"))
    return double(heads) * width;
  const int64_t quarter = std::max<int64_t>(1, heads / 4);
  return (size_option(choice, "shared_heads", quarter) + size_option(choice, "routed_k", quarter)) * width;
}

// Whether an MAE layer's gate reads every token (prefix_mean, which `auto`
// picks for the causal self-attention of a decoder-only model), not one mean per sequence.
bool gate_per_token(const AttentionChoice& choice, const ModelConfig& c, AttentionRole role) {
  if (option_is(choice, "gate_input", "prefix_mean")) return true;
  const bool automatic = choice.options.count("gate_input") == 0 || option_is(choice, "gate_input", "auto");
  return automatic && role == AttentionRole::decoder_self && c.encoder_layers == 0;
}

// Parameters, and the floats kept per token (estimate_memory): saved for a
// training step's backward pass per query token and per token of the memory
// a cross-attention reads, cached by decoding per position, and the most
// that one block saves (a bound on what a forward without gradients holds).
struct Footprint {
  double weights = 0, saved = 0, saved_memory = 0, cached = 0, widest_block = 0;
  Footprint& operator+=(const Footprint& other) {
    weights += other.weights;
    saved += other.saved;
    saved_memory += other.saved_memory;
    cached += other.cached;
    widest_block = std::max(widest_block, other.widest_block);
    return *this;
  }
};

Footprint moa_footprint(const AttentionChoice& choice, const ModelConfig& c, bool cross) {
  const double d = double(c.dim);
  const double experts = size_option(choice, "experts", MoAConfig().num_experts);
  const double k = size_option(choice, "k", MoAConfig().k);
  const double width = size_option(choice, "head_dim", c.dim / c.heads);
  Footprint f;
  f.weights = 2 * experts * d * width + 2 * d * width + d * experts;  // E query and output experts, K and V, router
  // The k chosen experts' queries, outputs and log-sum-exps; the router's logits, probabilities and gates.
  f.saved = 2 * k * width + k + 3 * experts;
  const double keys = 4 * width;  // the shared K and V and their head-major copies
  if (cross) f.saved_memory = keys;
  else f.saved += keys;
  f.cached = 2 * width;
  return f;
}

Footprint attention_footprint(const AttentionChoice& choice, const ModelConfig& c, AttentionRole role) {
  const bool cross = role == AttentionRole::cross;
  if (choice.type == "moa") return moa_footprint(choice, c, cross);
  const double d = double(c.dim);
  const int64_t heads = int64_t(size_option(choice, "heads", c.heads));
  const double width = size_option(choice, "head_dim", c.dim / heads);
  const double w = double(heads) * width, w_kv = size_option(choice, "kv_heads", heads) * width;
  const bool biases = !option_is(choice, "bias", "false") && !option_is(choice, "bias", "0");
  Footprint f;
  f.weights = 2 * d * w + 2 * d * w_kv + (biases ? w + 2 * w_kv + d : 0);
  // The queries of the heads that run, their head-major copy and the attention output; a log-sum-exp per head.
  f.saved = 3 * query_width(choice, heads, width) + double(heads);
  if (cross) f.saved_memory = 2 * w_kv;  // the keys and values, per token of the memory
  else f.saved += 2 * w_kv;
  f.cached = 2 * w_kv;
  if (choice.type == "moh") {  // the routers of routed and shared heads and their mix: logits, probabilities, gates
    f.weights += d * double(heads + 2);
    f.saved += 3 * double(heads + 2);
  }
  // MAE: the gate MLP; the mixture over the experts, and a per-token gate's input and hidden layer.
  if (choice.type == "mae") {
    const double hidden = size_option(choice, "gate_hidden", c.dim);
    f.weights += (d + 1) * hidden + (hidden + 1) * double(heads);
    f.saved += 3 * double(heads) + (gate_per_token(choice, c, role) ? 2 * d + 2 * hidden : 0);
  }
  return f;
}

// The weights of one norm of c's kind: LayerNorm's weight and bias, RMSNorm's weight.
double norm_weights(const ModelConfig& c) { return double(c.dim) * (c.norm_kind == NormKind::rmsnorm ? 1 : 2); }

// A block's MLP: its weights (biases when c.mlp_bias), and the floats it
// saves per token: the hidden layer before and after its activation
// (plain), or the gate's and the up projection's outputs, the activated gate
// and the product (gated).
Footprint mlp_footprint(const ModelConfig& c) {
  const double d = double(c.dim), ffn = double(c.ffn_hidden);
  const bool gated = c.mlp == MlpKind::gated;
  const double hidden_matrices = gated ? 2 : 1;  // [ffn, d]: fc1, or gate_proj and up_proj; then one [d, ffn]
  Footprint f;
  f.weights = (hidden_matrices + 1) * d * ffn + (c.mlp_bias ? hidden_matrices * ffn + d : 0);
  f.saved = (gated ? 4 : 2) * ffn;
  return f;
}

// `layers` blocks of self-attention in `role`, each with a cross-attention when `cross`.
Footprint stack_footprint(const ModelConfig& c, AttentionRole role, int64_t layers, bool cross) {
  const double d = double(c.dim), norms = cross ? 3 : 2;
  // Each norm's input, output and statistics (mean and 1/σ; rms_norm keeps both too).
  Footprint mlp_and_norms = mlp_footprint(c);
  mlp_and_norms.weights += norms * norm_weights(c);
  mlp_and_norms.saved += norms * (2 * d + 2);
  Footprint stack;
  for (int64_t layer = 0; layer < layers; ++layer) {
    Footprint block = attention_footprint(c.attention.resolve(layer, role), c, role);
    if (cross) block += attention_footprint(c.attention.resolve(layer, AttentionRole::cross), c, AttentionRole::cross);
    block += mlp_and_norms;
    block.widest_block = block.saved;
    stack += block;
  }
  return stack;
}

// Token embeddings (learned positions too), the final norms and the output layer.
double edge_weights(const ModelConfig& c, int64_t tokens) {
  const double d = double(c.dim), vocab = double(c.vocab);
  const double positions = c.positions == PositionKind::learned ? double(c.max_len) * d : 0;
  const double head = c.tie_embeddings ? 0 : vocab * d + (c.head_bias ? vocab : 0);
  double weights = 0;
  if (c.decoder_layers > 0) weights += vocab * d + head + positions + norm_weights(c);
  if (c.encoder_layers > 0 && c.decoder_layers > 0)
    weights += double(c.source_vocab()) * d + positions + norm_weights(c);
  if (c.decoder_layers == 0) {  // a ViT: patch embedding and its bias, class token, positions, final norm, head
    const double patch = double(c.channels * c.patch_size * c.patch_size), classes = double(c.classes);
    weights += (patch + 1) * d + d + double(tokens) * d + norm_weights(c) + classes * (d + 1);
  }
  return weights;
}

// The floats per row of a training step, an evaluation batch and decoding.
struct RowFloats {
  double train = 0, eval = 0, decode = 0;
};

// A ViT: per token its image's pixels and their patch rows, and the final
// norm; per image the logits and their softmax.
RowFloats vit_row_floats(const ModelConfig& c, const RunShape& shape, const Footprint& encoder) {
  const double d = double(c.dim), tokens = double(shape.tokens);
  const double patch = double(c.channels * c.patch_size * c.patch_size);
  const double edge = 2 * patch + 2 * d + 2, head = 2 * double(c.classes);
  const double largest_gradient = double(c.ffn_hidden);
  RowFloats row;
  row.train = tokens * (encoder.saved + edge + largest_gradient) + head;
  row.eval = tokens * (encoder.widest_block + edge) + head;
  return row;
}

// A decoder-only LM (no encoder: `encoder` empty) or an encoder-decoder: per
// source token the encoder's blocks and final norm and the keys and values
// the cross-attentions make of it; per target token the decoder's blocks,
// the final norm and the logits, and in training the largest gradient beside them.
RowFloats text_row_floats(const ModelConfig& c, const RunShape& shape, const Footprint& encoder,
                          const Footprint& decoder) {
  const bool has_encoder = c.encoder_layers > 0;
  const double d = double(c.dim), vocab = double(c.vocab);
  const double sources = has_encoder ? double(shape.tokens) : 0;
  const double targets = double(has_encoder ? shape.target_tokens : shape.tokens);
  const double source_edge = has_encoder ? 2 * d + 2 + decoder.saved_memory : 0;
  const double target_edge = vocab + 2 * d + 2;
  const double largest_gradient = std::max(vocab, double(c.ffn_hidden));
  RowFloats row;
  row.train = sources * (encoder.saved + source_edge) + targets * (decoder.saved + target_edge + largest_gradient);
  row.eval = sources * (encoder.widest_block + source_edge) + targets * (decoder.widest_block + target_edge);
  if (has_encoder)  // every decoder attention's keys and values for each position, the encoder's output, one token
    row.decode = (sources + targets) * decoder.cached + sources * d + decoder.widest_block + target_edge;
  return row;
}

}  // namespace

MemoryEstimate estimate_memory(const ModelConfig& c, const RunShape& shape) {
  Footprint encoder, decoder;
  if (c.encoder_layers > 0) encoder = stack_footprint(c, AttentionRole::encoder_self, c.encoder_layers, false);
  if (c.decoder_layers > 0)
    decoder = stack_footprint(c, AttentionRole::decoder_self, c.decoder_layers, c.encoder_layers > 0);
  const RowFloats row =
      c.decoder_layers == 0 ? vit_row_floats(c, shape, encoder) : text_row_floats(c, shape, encoder, decoder);
  const std::vector<std::pair<double, std::string>> passes{{double(shape.rows) * row.train, "a training step"},
                                                           {double(shape.eval_rows) * row.eval, "evaluation"},
                                                           {double(shape.decode_rows) * row.decode, "decoding"}};
  const auto largest =
      std::max_element(passes.begin(), passes.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  MemoryEstimate e;
  const double weights = edge_weights(c, shape.tokens) + encoder.weights + decoder.weights;
  e.parameters = int64_t(weights);
  e.weights = 4 * weights;
  e.optimizer = 3 * e.weights;
  e.activations = 4 * largest->first;
  e.activations_of = largest->second;
  e.data = shape.data_bytes;
  return e;
}

ModelConfig ModelOptions::config(ModelStacks stacks) const {
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
  c.encoder_layers = stacks == ModelStacks::decoder ? 0 : layers;
  c.decoder_layers = stacks == ModelStacks::encoder ? 0 : layers;
  c.activation = Activation::gelu;
  c.dropout = dropout;
  c.attention.type = attn;
  c.attention.options = parse_options(attn_opt, "--attn-opt");
  check_attention_keys(c, attn_set);
  for (const auto& [key, value] : parse_options(attn_set, "--attn-set")) c.attention.set(key, value);
  check_attention_names(c, *this);
  return c;
}

namespace {

// The stacks of `c`'s model and, for a message, whose checkpoint it is.
std::optional<ModelStacks> stacks_of(const ModelConfig& c) {
  if (c.encoder_layers > 0 && c.decoder_layers > 0) return ModelStacks::encoder_decoder;
  if (c.decoder_layers > 0) return ModelStacks::decoder;
  if (c.encoder_layers > 0) return ModelStacks::encoder;
  return std::nullopt;
}

std::string task_of(ModelStacks stacks) {
  if (stacks == ModelStacks::decoder) return "a language model's checkpoint (train_lm)";
  if (stacks == ModelStacks::encoder) return "an image classifier's checkpoint (train_vit)";
  return "a translation model's checkpoint (train_mt)";
}

void check_field(const std::string& path, const char* field, int64_t value, int64_t min, int64_t max) {
  HEADROOM_CHECK(value >= min && value <= max, "[checkpoint] ", path, ": model.", field, " is ", value,
                 ", outside the range [", min, ", ", max, "] a model accepts");
}

void check_real_field(const std::string& path, const char* field, double value, double min, double below) {
  HEADROOM_CHECK(value >= min && value < below, "[checkpoint] ", path, ": model.", field, " is ", value,
                 ", outside the range [", min, ", ", below, ") a model accepts");
}

// The ViT fields: an image of whole patches, channels and classes in range.
void check_image_fields(const ModelConfig& c, const std::string& path) {
  check_field(path, "image_size", c.image_size, 1, kMaxImageSize);
  check_field(path, "patch_size", c.patch_size, 1, c.image_size);
  HEADROOM_CHECK(c.image_size % c.patch_size == 0, "[checkpoint] ", path, ": model.image_size ", c.image_size,
                 " is not a whole number of model.patch_size ", c.patch_size, " patches");
  check_field(path, "channels", c.channels, 1, 4);
  check_field(path, "classes", c.classes, 1, kMaxClasses);
}

// Every attention layer's method and options, as --attn-opt and --attn-set would be checked.
void check_checkpoint_attention(const ModelConfig& c, const std::string& path) {
  ModelOptions as_flags;
  try {
    check_attention_names(c, as_flags);
  } catch (const UsageError& error) {
    HEADROOM_FAIL("[checkpoint] ", path, ": its attention settings are not ones a model accepts: ", error.what());
  }
}

}  // namespace

void check_checkpoint_config(const ModelConfig& c, ModelStacks stacks, const std::string& path) {
  const std::optional<ModelStacks> held = stacks_of(c);
  HEADROOM_CHECK(held.has_value(), "[checkpoint] ", path, ": model.encoder_layers and model.decoder_layers are both 0");
  HEADROOM_CHECK(*held == stacks, "[checkpoint] ", path, " is ", task_of(*held), ", not ", task_of(stacks),
                 "; pass it to the binary of its task");
  check_field(path, "dim", c.dim, 1, kMaxDim);
  check_field(path, "heads", c.heads, 1, kMaxHeads);
  HEADROOM_CHECK(c.dim % c.heads == 0, "[checkpoint] ", path, ": model.dim ", c.dim,
                 " is not divisible by model.heads ", c.heads);
  check_field(path, "encoder_layers", c.encoder_layers, 0, kMaxLayers);
  check_field(path, "decoder_layers", c.decoder_layers, 0, kMaxLayers);
  check_field(path, "ffn_hidden", c.ffn_hidden, 1, kMaxFfn);
  const int64_t mlp_matrices = c.mlp == MlpKind::gated ? 3 : 2;
  const int64_t stack_weights =
      std::max(c.encoder_layers, c.decoder_layers) * (4 * c.dim * c.dim + mlp_matrices * c.dim * c.ffn_hidden);
  HEADROOM_CHECK(stack_weights <= kMaxStackWeights, "[checkpoint] ", path, ": a stack of its model has ", stack_weights,
                 " weights, over the limit of ", kMaxStackWeights);
  check_real_field(path, "dropout", c.dropout, 0, 1);
  check_real_field(path, "attn_dropout", c.attn_dropout, 0, 1);
  HEADROOM_CHECK(c.norm_eps > 0 && c.norm_eps <= 1, "[checkpoint] ", path, ": model.norm_eps is ", c.norm_eps,
                 ", outside the range (0, 1] a model accepts");
  if (stacks == ModelStacks::encoder) {
    check_image_fields(c, path);
  } else {
    check_field(path, "vocab", c.vocab, 1, kMaxVocab);
    check_field(path, "src_vocab", c.src_vocab, 0, kMaxVocab);
    check_field(path, "max_len", c.max_len, 1, kMaxContext + 1);
    HEADROOM_CHECK(!(c.head_bias && c.tie_embeddings), "[checkpoint] ", path,
                   ": model.head_bias is true with model.tie_embeddings true, but a tied head has no bias");
  }
  check_checkpoint_attention(c, path);
}

ModelConfig checkpoint_config(const TrainOptions& train, ModelStacks stacks) {
  if (train.ckpt_dir.empty()) throw UsageError("--resume and --eval-only need --ckpt DIR");
  const std::string path = checkpoint_path(train.ckpt_dir);
  ModelConfig config = ModelConfig::from_checkpoint_metadata(read_checkpoint_metadata(train.ckpt_dir), path);
  check_checkpoint_config(config, stacks, path);
  return config;
}

void settle_trained_value(const Flags& flags, const TrainOptions& train, const std::string& flag, int64_t& value,
                          int64_t trained, EvalAccepts eval_accepts) {
  if (!train.resume && !train.eval_only) return;
  if (!flags.was_set(flag)) {
    value = trained;
    return;
  }
  if (value == trained) return;
  const std::string given = "--" + flag + " " + std::to_string(value) + " differs from the " + std::to_string(trained) +
                            " that the checkpoint " + checkpoint_path(train.ckpt_dir) + " was trained at";
  if (train.resume)
    throw UsageError(given + "; a resumed run trains at " + std::to_string(trained) + " (drop the flag)");
  if (eval_accepts == EvalAccepts::trained_only || (eval_accepts == EvalAccepts::smaller && value > trained))
    throw UsageError(given + "; its model takes " + (eval_accepts == EvalAccepts::smaller ? "at most " : "only ") +
                     std::to_string(trained) + " (drop the flag)");
  std::printf("note: %s; evaluating at %lld\n", given.c_str(), (long long)value);
}

ModelSource model_source(const ModelOptions& m, const TrainOptions& train, ModelStacks stacks) {
  if (!train.resume && !train.eval_only) return {m.config(stacks), {}, false};
  if (train.ckpt_dir.empty()) throw UsageError("--resume and --eval-only need --ckpt DIR");
  const std::string path = checkpoint_path(train.ckpt_dir);
  const StringMap metadata = read_checkpoint_metadata(train.ckpt_dir);
  ModelSource source{ModelConfig::from_checkpoint_metadata(metadata, path), task_metadata(metadata), true};
  check_checkpoint_config(source.config, stacks, path);
  check_attention_keys(source.config, m.attn_set);
  check_flags_agree(m, source.config, path);
  return source;
}

void add_model_flags(Flags& flags, ModelOptions& m, ModelStacks stacks) {
  m.flags = &flags;
  flags.add("attn", &m.attn, "attention: mha | moa | moh | mae");
  flags.add("attn-opt", &m.attn_opt, "the method's options, key=value,... (e.g. shared_heads=2,routed_k=4)");
  const std::string roles =
      stacks == ModelStacks::encoder_decoder
          ? "roles encoder_self, decoder_self, cross (e.g. layer.0.type=mha,cross.option.kv_heads=1)"
          : std::string("role ") + (stacks == ModelStacks::decoder ? "decoder_self" : "encoder_self") +
                " (e.g. layer.0.type=mha,layer.1.option.kv_heads=1)";
  flags.add(
      "attn-set", &m.attn_set,
      "attention per layer or role, key=value,... with keys [<role>.][layer.<i>.]type or ...option.<name>, " + roles);
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
    if (equals + 1 == entry.size())
      throw UsageError(flag + " gives the key '" + entry.substr(0, equals) + "' no value");
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
