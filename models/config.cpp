#include "headroom/models/config.h"

#include <cstdio>
#include <utility>
#include <vector>

#include "headroom/models/mae.h"
#include "headroom/models/mha.h"
#include "headroom/models/moa.h"
#include "headroom/models/moh.h"
#include "headroom/models/transformer.h"

namespace headroom {

StringMap AttentionSpec::options_for(int64_t layer) const {
  StringMap merged = options;
  auto it = layer_options.find(layer);
  if (it != layer_options.end())
    for (const auto& [key, value] : it->second) merged[key] = value;
  return merged;
}

// ---- metadata ----------------------------------------------------------------

namespace {

template <typename E>
using EnumNames = std::vector<std::pair<E, const char*>>;

const EnumNames<Activation>& names_of(Activation) {
  static const EnumNames<Activation> names = {{Activation::relu, "relu"},
                                              {Activation::gelu, "gelu"},
                                              {Activation::gelu_tanh, "gelu_tanh"},
                                              {Activation::silu, "silu"}};
  return names;
}
const EnumNames<NormPlacement>& names_of(NormPlacement) {
  static const EnumNames<NormPlacement> names = {{NormPlacement::pre, "pre"}, {NormPlacement::post, "post"}};
  return names;
}
const EnumNames<PositionKind>& names_of(PositionKind) {
  static const EnumNames<PositionKind> names = {{PositionKind::sinusoidal, "sinusoidal"},
                                                {PositionKind::learned, "learned"}};
  return names;
}
const EnumNames<Pooling>& names_of(Pooling) {
  static const EnumNames<Pooling> names = {{Pooling::cls, "cls"}, {Pooling::mean, "mean"}};
  return names;
}

// Calls visit(name, field) for every serialised field of a ModelConfig (const
// or not), so writing, reading and comparing share one list.
template <typename Config, typename Visit>
void visit_fields(Config& c, Visit&& visit) {
  visit("vocab", c.vocab);
  visit("src_vocab", c.src_vocab);
  visit("dim", c.dim);
  visit("heads", c.heads);
  visit("encoder_layers", c.encoder_layers);
  visit("decoder_layers", c.decoder_layers);
  visit("ffn_hidden", c.ffn_hidden);
  visit("activation", c.activation);
  visit("dropout", c.dropout);
  visit("attn_dropout", c.attn_dropout);
  visit("norm", c.norm);
  visit("positions", c.positions);
  visit("max_len", c.max_len);
  visit("tie_embeddings", c.tie_embeddings);
  visit("scale_embeddings", c.scale_embeddings);
  visit("norm_eps", c.norm_eps);
  visit("image_size", c.image_size);
  visit("patch_size", c.patch_size);
  visit("channels", c.channels);
  visit("classes", c.classes);
  visit("pooling", c.pooling);
}

std::string format(int64_t v) { return std::to_string(v); }
std::string format(bool v) { return v ? "true" : "false"; }
std::string format(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", v);  // 17 digits: the double reads back exactly
  return buf;
}
template <typename E>
std::string format(E v) {
  for (const auto& [value, name] : names_of(v))
    if (value == v) return name;
  HEADROOM_FAIL("[ModelConfig] enum value without a name");
}

// what: "[owner] key", naming where the text came from.
[[noreturn]] void bad_value(const std::string& what, const std::string& text, const char* expected) {
  HEADROOM_FAIL(what, " = '", text, "' is not ", expected);
}

void parse(const std::string& what, const std::string& text, int64_t& out) {
  size_t used = 0;
  try { out = std::stoll(text, &used); } catch (const std::exception&) { used = 0; }
  if (used == 0 || used != text.size()) bad_value(what, text, "an integer");
}
void parse(const std::string& what, const std::string& text, double& out) {
  size_t used = 0;
  try { out = std::stod(text, &used); } catch (const std::exception&) { used = 0; }
  if (used == 0 || used != text.size()) bad_value(what, text, "a number");
}
void parse(const std::string& what, const std::string& text, bool& out) {
  if (text == "true" || text == "1") out = true;
  else if (text == "false" || text == "0") out = false;
  else bad_value(what, text, "true/false");
}
template <typename E>
void parse(const std::string& what, const std::string& text, E& out) {
  std::string allowed;
  for (const auto& [value, name] : names_of(out)) {
    if (text == name) {
      out = value;
      return;
    }
    allowed += (allowed.empty() ? "" : "|") + std::string(name);
  }
  bad_value(what, text, allowed.c_str());
}

const std::string kModel = "model.", kAttention = "attention.", kOption = "attention.option.",
                  kLayer = "attention.layer.";

bool starts_with(const std::string& s, const std::string& prefix) { return s.compare(0, prefix.size(), prefix) == 0; }

// "attention.layer.<i>.<name>" -> (i, name)
std::pair<int64_t, std::string> parse_layer_key(const std::string& key) {
  const std::string rest = key.substr(kLayer.size());
  const size_t dot = rest.find('.');
  HEADROOM_CHECK(dot != std::string::npos && dot + 1 < rest.size(), "[ModelConfig] metadata key ", key,
                 " should read attention.layer.<index>.<option>");
  int64_t layer = 0;
  parse("[ModelConfig] " + key, rest.substr(0, dot), layer);
  return {layer, rest.substr(dot + 1)};
}

}  // namespace

StringMap ModelConfig::to_metadata() const {
  StringMap out;
  visit_fields(*this, [&](const char* name, const auto& field) { out[kModel + name] = format(field); });
  out[kAttention + "type"] = attention.type;
  for (const auto& [key, value] : attention.options) out[kOption + key] = value;
  for (const auto& [layer, options] : attention.layer_options)
    for (const auto& [key, value] : options) out[kLayer + std::to_string(layer) + "." + key] = value;
  return out;
}

ModelConfig ModelConfig::from_metadata(const StringMap& metadata) {
  ModelConfig c;
  for (const auto& [key, text] : metadata) {
    if (starts_with(key, kModel)) {
      bool known = false;
      visit_fields(c, [&, &key = key, &text = text](const char* name, auto& field) {
        if (key == kModel + name) parse("[ModelConfig] " + key, text, field), known = true;
      });
      HEADROOM_CHECK(known, "[ModelConfig] unknown metadata field ", key);
    } else if (key == kAttention + "type") {
      c.attention.type = text;
    } else if (starts_with(key, kOption)) {
      c.attention.options[key.substr(kOption.size())] = text;
    } else if (starts_with(key, kLayer)) {
      auto [layer, name] = parse_layer_key(key);
      c.attention.layer_options[layer][name] = text;
    } else {
      HEADROOM_CHECK(!starts_with(key, kAttention), "[ModelConfig] unknown metadata field ", key);
    }
  }
  return c;
}

bool operator==(const ModelConfig& a, const ModelConfig& b) { return a.to_metadata() == b.to_metadata(); }

// ---- options -----------------------------------------------------------------

const std::string* OptionReader::find(const std::string& key) {
  auto it = options_.find(key);
  if (it == options_.end()) return nullptr;
  used_.insert(key);
  return &it->second;
}

int64_t OptionReader::get_int(const std::string& key, int64_t fallback) {
  const std::string* text = find(key);
  if (text) parse("[" + owner_ + "] option " + key, *text, fallback);
  return fallback;
}

double OptionReader::get_double(const std::string& key, double fallback) {
  const std::string* text = find(key);
  if (text) parse("[" + owner_ + "] option " + key, *text, fallback);
  return fallback;
}

bool OptionReader::get_bool(const std::string& key, bool fallback) {
  const std::string* text = find(key);
  if (text) parse("[" + owner_ + "] option " + key, *text, fallback);
  return fallback;
}

std::string OptionReader::get_string(const std::string& key, const std::string& fallback) {
  const std::string* text = find(key);
  return text ? *text : fallback;
}

void OptionReader::check_all_used() const {
  std::string unknown;
  for (const auto& [key, value] : options_)
    if (!used_.count(key)) unknown += (unknown.empty() ? "" : ", ") + key;
  HEADROOM_CHECK(unknown.empty(), "[", owner_, "] unknown option(s): ", unknown);
}

// ---- the attention factory ------------------------------------------------------

const char* role_name(AttentionRole role) {
  switch (role) {
    case AttentionRole::encoder_self: return "encoder_self";
    case AttentionRole::decoder_self: return "decoder_self";
    case AttentionRole::cross: return "cross";
  }
  HEADROOM_FAIL("[role_name] unknown attention role");
}

namespace {
// The position of options[key] in `names` (the first name is the default);
// throws listing the allowed values otherwise.
size_t choose(OptionReader& options, const std::string& key, const std::vector<std::string>& names) {
  const std::string value = options.get_string(key, names.front());
  for (size_t i = 0; i < names.size(); ++i)
    if (names[i] == value) return i;
  std::string allowed;
  for (const std::string& n : names) allowed += (allowed.empty() ? "" : ", ") + n;
  HEADROOM_FAIL("[make_attention] option ", key, "='", value, "' is not one of: ", allowed);
}
}  // namespace

std::shared_ptr<Attention> make_attention(const ModelConfig& config, int64_t layer, AttentionRole role,
                                          Generator& gen) {
  const std::string& type = config.attention.type;
  OptionReader options("make_attention " + type + " layer " + std::to_string(layer) + " " + role_name(role),
                       config.attention.options_for(layer));
  std::shared_ptr<Attention> made;
  // One branch per method; each reads its options from `options`.
  MHAConfig mha{config.dim, config.heads, 0, true, config.attn_dropout};
  if (type != "moa") {
    mha.kv_heads = options.get_int("kv_heads", 0);
    mha.bias = options.get_bool("bias", true);
  }
  if (type == "mha") {
    made = std::make_shared<MultiHeadAttention>(mha, gen);
  } else if (type == "moa") {
    MoAConfig moa;
    moa.dim = config.dim;
    moa.num_experts = options.get_int("experts", 8);
    moa.k = options.get_int("k", 2);
    moa.head_dim = options.get_int("head_dim", config.dim / config.heads);
    moa.attn_dropout = config.attn_dropout;
    moa.w_switch = options.get_double("w_switch", moa.w_switch);
    moa.w_z = options.get_double("w_z", moa.w_z);
    moa.w_cv = options.get_double("w_cv", moa.w_cv);
    moa.noisy_gating = options.get_bool("noisy_gating", false);
    moa.sample_topk = options.get_int("sample_topk", 0);
    choose(options, "aux_normalisation", {"reference", "mean"});  // used by training_loss
    made = std::make_shared<MoAAttention>(moa, gen);
  } else if (type == "moh") {
    MoHConfig moh;
    moh.mha = mha;
    moh.shared_heads = options.get_int("shared_heads", 2);
    moh.routed_k = options.get_int("routed_k", 2);
    moh.scaling = choose(options, "scaling", {"code", "paper"}) == 0 ? MoHConfig::GateScaling::code
                                                                     : MoHConfig::GateScaling::paper;
    moh.router = choose(options, "router", {"learned", "qnorm"}) == 0 ? MoHConfig::Router::learned
                                                                      : MoHConfig::Router::qnorm;
    moh.load_balance = choose(options, "load_balance", {"code", "paper"}) == 0 ? MoHConfig::LoadBalance::code
                                                                               : MoHConfig::LoadBalance::paper;
    moh.beta = options.get_double("beta", moh.beta);
    made = std::make_shared<MoHAttention>(moh, gen);
  } else if (type == "mae") {
    MAEConfig mae;
    mae.mha = mha;
    mae.gate_input = static_cast<MAEConfig::GateInput>(
        choose(options, "gate_input", {"auto", "seq_mean", "prefix_mean", "source_mean"}));
    mae.gate_hidden = options.get_int("gate_hidden", 0);
    mae.gate_activation = static_cast<MAEConfig::GateActivation>(choose(options, "gate_activation", {"relu", "tanh"}));
    mae.sample_per = static_cast<MAEConfig::SamplePer>(choose(options, "sample_per", {"auto", "sequence", "token"}));
    mae.inference = static_cast<MAEConfig::Inference>(choose(options, "inference", {"mixture", "top1"}));
    made = std::make_shared<MAEAttention>(mae, gen);
  } else {
    HEADROOM_FAIL("[make_attention] unknown attention type '", type, "' (known: mha, moa, moh, mae)");
  }
  options.check_all_used();
  return made;
}

AttentionFactory default_attention_factory(const ModelConfig& config, Generator& gen) {
  return [config, &gen](int64_t layer, AttentionRole role) { return make_attention(config, layer, role, gen); };
}

Tensor training_loss(const ModelConfig& config, const Tensor& task_mean_loss,
                     const std::vector<Tensor>& aux_losses, int64_t target_tokens) {
  const std::string& type = config.attention.type;
  OptionReader options("training_loss " + type, config.attention.options);
  if (type == "moa") {
    bool reference = choose(options, "aux_normalisation", {"reference", "mean"}) == 0;
    Tensor nll_sum = task_mean_loss * double(target_tokens);
    return moa_total_loss(nll_sum, sum_aux(aux_losses, task_mean_loss.device()), target_tokens,
                          reference ? MoAAuxNormalisation::reference : MoAAuxNormalisation::mean);
  }
  if (type == "moh")
    return task_mean_loss + mean_aux(aux_losses, task_mean_loss.device()) * options.get_double("beta", 0.01);
  return task_mean_loss;
}

}  // namespace headroom
