#include "headroom/models/config.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>
#include <optional>
#include <utility>
#include <vector>

#include "headroom/models/mae.h"
#include "headroom/models/mha.h"
#include "headroom/models/moa.h"
#include "headroom/models/moh.h"

namespace headroom {

bool operator==(const AttentionChoice& a, const AttentionChoice& b) {
  return a.type == b.type && a.options == b.options;
}

namespace {
// The options every method takes (rope, rope_theta, dropout): model-wide
// choices, which a layer that switches to another method keeps.
bool every_method_option(const std::string& key) { return key == "rope" || key == "rope_theta" || key == "dropout"; }

void apply(AttentionChoice& into, const AttentionChoice& override_) {
  if (!override_.type.empty() && override_.type != into.type) {
    AttentionChoice switched{override_.type, {}};
    for (const auto& [key, value] : into.options)
      if (every_method_option(key)) switched.options[key] = value;
    into = std::move(switched);
  }
  for (const auto& [key, value] : override_.options) into.options[key] = value;
}
template <typename Map, typename Key>
void apply_if_present(AttentionChoice& into, const Map& overrides, const Key& key) {
  auto it = overrides.find(key);
  if (it != overrides.end()) apply(into, it->second);
}
}  // namespace

AttentionChoice AttentionSpec::resolve(int64_t layer, AttentionRole role) const {
  AttentionChoice choice{type, options};
  apply_if_present(choice, roles, role);
  apply_if_present(choice, layers, layer);
  apply_if_present(choice, at, std::make_pair(role, layer));
  return choice;
}

// ---- metadata ----------------------------------------------------------------

namespace {

template <typename E> using EnumNames = std::vector<std::pair<E, const char*>>;

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
const EnumNames<NormKind>& names_of(NormKind) {
  static const EnumNames<NormKind> names = {{NormKind::layernorm, "layernorm"}, {NormKind::rmsnorm, "rmsnorm"}};
  return names;
}
const EnumNames<MlpKind>& names_of(MlpKind) {
  static const EnumNames<MlpKind> names = {{MlpKind::plain, "plain"}, {MlpKind::gated, "gated"}};
  return names;
}
const EnumNames<PositionKind>& names_of(PositionKind) {
  static const EnumNames<PositionKind> names = {
      {PositionKind::sinusoidal, "sinusoidal"}, {PositionKind::learned, "learned"}, {PositionKind::none, "none"}};
  return names;
}
const EnumNames<Pooling>& names_of(Pooling) {
  static const EnumNames<Pooling> names = {{Pooling::cls, "cls"}, {Pooling::mean, "mean"}};
  return names;
}

// Calls visit(name, field) for every serialised field of a ModelConfig (const
// or not), so writing, reading and comparing share one list.
template <typename Config, typename Visit> void visit_fields(Config& c, Visit&& visit) {
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
  visit("norm_kind", c.norm_kind);
  visit("mlp", c.mlp);
  visit("mlp_bias", c.mlp_bias);
  visit("head_bias", c.head_bias);
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
template <typename E> std::string format(E v) {
  for (const auto& [value, name] : names_of(v))
    if (value == v) return name;
  HEADROOM_FAIL("[ModelConfig] enum value without a name");
}

// what: "[owner] key", naming where the text came from.
[[noreturn]] void bad_value(const std::string& what, const std::string& text, const std::string& expected) {
  HEADROOM_FAIL(what, " = '", text, "' is not ", expected);
}

// from_chars reads the number or nothing: no spaces, no '+', no locale.
template <typename T> bool read_whole(const std::string& text, T& value) {
  const char* end = text.data() + text.size();
  auto [stop, error] = std::from_chars(text.data(), end, value);
  return error == std::errc() && stop == end;
}

template <typename T> T parse_integer(const std::string& what, const std::string& text, T min, T max) {
  T value{};
  if (!read_whole(text, value) || value < min || value > max)
    bad_value(what, text, "an integer from " + std::to_string(min) + " to " + std::to_string(max));
  return value;
}

void parse(const std::string& what, const std::string& text, int64_t& out) {
  out = parse_integer(what, text, std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max());
}
void parse(const std::string& what, const std::string& text, double& out) {
  if (!read_whole(text, out) || !std::isfinite(out)) bad_value(what, text, "a finite number");
}
void parse(const std::string& what, const std::string& text, bool& out) {
  if (text == "true" || text == "1") out = true;
  else if (text == "false" || text == "0") out = false;
  else bad_value(what, text, "true/false");
}
template <typename E> void parse(const std::string& what, const std::string& text, E& out) {
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

const std::string kModel = "model.", kAttention = "attention.";

bool starts_with(const std::string& s, const std::string& prefix) { return s.compare(0, prefix.size(), prefix) == 0; }

const AttentionRole kRoles[] = {AttentionRole::encoder_self, AttentionRole::decoder_self, AttentionRole::cross};

// Where an AttentionSpec entry lives: the spec itself, a role, a layer or both.
struct Scope {
  std::optional<AttentionRole> role;
  std::optional<int64_t> layer;
  std::string prefix() const {
    std::string p = role ? std::string(role_name(*role)) + "." : "";
    return layer ? p + "layer." + std::to_string(*layer) + "." : p;
  }
};

// key: "[<role>.][layer.<i>.]type" or "[<role>.][layer.<i>.]option.<name>"
// -> the scope and the rest ("type" or "option.<name>").
std::pair<Scope, std::string> parse_scope(const std::string& key) {
  Scope scope;
  std::string rest = key;
  for (AttentionRole role : kRoles)
    if (starts_with(rest, std::string(role_name(role)) + "."))
      scope.role = role, rest = rest.substr(rest.find('.') + 1);
  if (starts_with(rest, "layer.")) {
    const size_t dot = rest.find('.', 6);
    HEADROOM_CHECK(dot != std::string::npos, "[AttentionSpec] key '", key,
                   "' should read layer.<index>.type or "
                   "layer.<index>.option.<name>");
    int64_t layer = 0;
    parse("[AttentionSpec] layer index in '" + key + "'", rest.substr(6, dot - 6), layer);
    HEADROOM_CHECK(layer >= 0, "[AttentionSpec] key '", key, "' names layer ", layer, "; layers count from 0");
    scope.layer = layer;
    rest = rest.substr(dot + 1);
  }
  HEADROOM_CHECK(rest == "type" || (starts_with(rest, "option.") && rest.size() > 7), "[AttentionSpec] key '", key,
                 "' should end in type or option.<name>, optionally after <role>. (encoder_self, decoder_self, "
                 "cross) and layer.<index>.");
  return {scope, rest};
}

void write_choice(StringMap& out, const Scope& scope, const std::string& type, const StringMap& options) {
  const std::string prefix = kAttention + scope.prefix();
  if (!type.empty()) out[prefix + "type"] = type;
  for (const auto& [key, value] : options) out[prefix + "option." + key] = value;
}

}  // namespace

void AttentionSpec::set(const std::string& key, const std::string& value) {
  auto [scope, rest] = parse_scope(key);
  AttentionChoice* target = nullptr;
  if (scope.role && scope.layer) target = &at[{*scope.role, *scope.layer}];
  else if (scope.role) target = &roles[*scope.role];
  else if (scope.layer) target = &layers[*scope.layer];
  std::string& type_field = target ? target->type : type;
  StringMap& option_fields = target ? target->options : options;
  HEADROOM_CHECK(target != nullptr || rest != "type" || !value.empty(),
                 "[AttentionSpec] the base attention type is empty; expected one of mha, moa, moh, mae");
  if (rest == "type") type_field = value;
  else option_fields[rest.substr(7)] = value;
}

StringMap ModelConfig::to_metadata() const {
  StringMap out;
  visit_fields(*this, [&](const char* name, const auto& field) { out[kModel + name] = format(field); });
  write_choice(out, Scope{}, attention.type, attention.options);
  for (const auto& [role, choice] : attention.roles) write_choice(out, Scope{role, {}}, choice.type, choice.options);
  for (const auto& [layer, choice] : attention.layers) write_choice(out, Scope{{}, layer}, choice.type, choice.options);
  for (const auto& [where, choice] : attention.at)
    write_choice(out, Scope{where.first, where.second}, choice.type, choice.options);
  return out;
}

namespace {

// source: the file the metadata came from, or empty.
ModelConfig config_from(const StringMap& metadata, const std::string& source) {
  const std::string where = "[ModelConfig] " + (source.empty() ? "" : source + ": ");
  ModelConfig c;
  for (const auto& [key, text] : metadata) {
    if (starts_with(key, kModel)) {
      bool known = false;
      visit_fields(c, [&, &key = key, &text = text](const char* name, auto& field) {
        if (key == kModel + name) parse(where + key, text, field), known = true;
      });
      HEADROOM_CHECK(known, where, "unknown metadata field ", key);
    } else if (starts_with(key, kAttention)) {
      c.attention.set(key.substr(kAttention.size()), text);
    }
  }
  return c;
}

}  // namespace

ModelConfig ModelConfig::from_metadata(const StringMap& metadata) { return config_from(metadata, ""); }

namespace {
// The fields added after checkpoints were first written (issue 47): a
// checkpoint without them holds the architecture of their defaults, which
// is the only one there was.
bool added_later(const std::string& name) {
  return name == "norm_kind" || name == "mlp" || name == "mlp_bias" || name == "head_bias";
}
}  // namespace

ModelConfig ModelConfig::from_checkpoint_metadata(const StringMap& metadata, const std::string& source) {
  const ModelConfig defaults;
  visit_fields(defaults, [&](const char* name, const auto&) {
    if (!added_later(name)) metadata_entry(metadata, kModel + name, source);
  });
  metadata_entry(metadata, kAttention + "type", source);
  return config_from(metadata, source);
}

const std::string& metadata_entry(const StringMap& metadata, const std::string& key, const std::string& source) {
  auto found = metadata.find(key);
  HEADROOM_CHECK(found != metadata.end(), "[metadata] ", source, " has no '", key, "' entry");
  return found->second;
}

int64_t metadata_int(const StringMap& metadata, const std::string& key, const std::string& source, int64_t min,
                     int64_t max) {
  return parse_integer("[metadata] " + source + ": " + key, metadata_entry(metadata, key, source), min, max);
}

uint64_t metadata_uint64(const StringMap& metadata, const std::string& key, const std::string& source) {
  return parse_integer("[metadata] " + source + ": " + key, metadata_entry(metadata, key, source), uint64_t(0),
                       std::numeric_limits<uint64_t>::max());
}

BlockConfig ModelConfig::block(AttentionRole role) const {
  BlockConfig b;
  b.dim = dim;
  b.ffn_hidden = ffn_hidden;
  b.activation = activation;
  b.dropout = dropout;
  b.norm = norm;
  b.norm_kind = norm_kind;
  b.norm_eps = norm_eps;
  b.mlp = mlp;
  b.mlp_bias = mlp_bias;
  b.causal = role == AttentionRole::decoder_self;
  return b;
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

// Option values of each enum, in the enum's order (the first is the default).
const std::vector<std::string> kMoHScaling = {"code", "paper"}, kMoHRouter = {"learned", "qnorm"},
                               kMoHLoadBalance = {"code", "paper"}, kMoANormalisation = {"reference", "mean"},
                               kMAEGateInput = {"auto", "seq_mean", "prefix_mean", "source_mean"},
                               kMAEGateActivation = {"relu", "tanh"}, kMAESamplePer = {"auto", "sequence", "token"},
                               kMAEInference = {"mixture", "top1"}, kMoHSte = {"selected", "all"},
                               kMoHBalancePadding = {"include", "exclude"};

// options[key] as the enum whose values are named `names`; throws listing them otherwise.
template <typename E> E choose(OptionReader& options, const std::string& key, const std::vector<std::string>& names) {
  const std::string value = options.get_string(key, names.front());
  for (size_t i = 0; i < names.size(); ++i)
    if (names[i] == value) return static_cast<E>(i);
  std::string allowed;
  for (const std::string& n : names) allowed += (allowed.empty() ? "" : ", ") + n;
  HEADROOM_FAIL("[make_attention] option ", key, "='", value, "' is not one of: ", allowed);
}
template <typename E> std::string name_of(E value, const std::vector<std::string>& names) {
  return names.at(static_cast<size_t>(value));
}

// ---- each method's options, read (make_attention) and written (attention_choice)

MHAConfig read_mha(OptionReader& o, const ModelConfig& c) {
  MHAConfig m;
  m.dim = c.dim;
  m.heads = o.get_int("heads", c.heads);
  m.kv_heads = o.get_int("kv_heads", 0);
  m.bias = o.get_bool("bias", true);
  m.attn_dropout = o.get_double("dropout", c.attn_dropout);
  m.head_dim = o.get_int("head_dim", 0);
  m.rope = o.get_bool("rope", false);
  m.rope_theta = o.get_double("rope_theta", m.rope_theta);
  return m;
}
void write_mha(StringMap& o, const MHAConfig& m) {
  o["heads"] = format(m.heads), o["kv_heads"] = format(m.kv_heads), o["bias"] = format(m.bias);
  o["dropout"] = format(m.attn_dropout), o["head_dim"] = format(m.head_dim);
  o["rope"] = format(m.rope), o["rope_theta"] = format(m.rope_theta);
}

MoHConfig read_moh(OptionReader& o, const ModelConfig& c) {
  MoHConfig m;
  m.mha = read_mha(o, c);
  m.shared_heads = o.get_int("shared_heads", m.shared_heads);
  m.routed_k = o.get_int("routed_k", m.routed_k);
  m.scaling = choose<MoHConfig::GateScaling>(o, "scaling", kMoHScaling);
  m.router = choose<MoHConfig::Router>(o, "router", kMoHRouter);
  m.load_balance = choose<MoHConfig::LoadBalance>(o, "load_balance", kMoHLoadBalance);
  m.beta = o.get_double("beta", m.beta);
  m.ste = choose<MoHConfig::Ste>(o, "ste", kMoHSte);
  m.balance_padding = choose<MoHConfig::BalancePadding>(o, "balance_padding", kMoHBalancePadding);
  m.allow_full_routing = o.get_bool("allow_full_routing", false);
  return m;
}
void write_moh(StringMap& o, const MoHConfig& m) {
  write_mha(o, m.mha);
  o["shared_heads"] = format(m.shared_heads), o["routed_k"] = format(m.routed_k);
  o["scaling"] = name_of(m.scaling, kMoHScaling), o["router"] = name_of(m.router, kMoHRouter);
  o["load_balance"] = name_of(m.load_balance, kMoHLoadBalance), o["beta"] = format(m.beta);
  o["ste"] = name_of(m.ste, kMoHSte), o["balance_padding"] = name_of(m.balance_padding, kMoHBalancePadding);
  o["allow_full_routing"] = format(m.allow_full_routing);
}

MoAConfig read_moa(OptionReader& o, const ModelConfig& c) {
  MoAConfig m;
  m.dim = c.dim;
  m.num_experts = o.get_int("experts", m.num_experts);
  m.k = o.get_int("k", m.k);
  m.head_dim = o.get_int("head_dim", c.heads > 0 ? c.dim / c.heads : 0);
  m.attn_dropout = o.get_double("dropout", c.attn_dropout);
  m.w_switch = o.get_double("w_switch", m.w_switch);
  m.w_z = o.get_double("w_z", m.w_z);
  m.w_cv = o.get_double("w_cv", m.w_cv);
  m.noisy_gating = o.get_bool("noisy_gating", false);
  m.sample_topk = o.get_int("sample_topk", 0);
  m.aux_normalisation = choose<MoAAuxNormalisation>(o, "aux_normalisation", kMoANormalisation);
  m.allow_full_routing = o.get_bool("allow_full_routing", false);
  m.rope = o.get_bool("rope", false);
  m.rope_theta = o.get_double("rope_theta", m.rope_theta);
  return m;
}
void write_moa(StringMap& o, const MoAConfig& m) {
  o["experts"] = format(m.num_experts), o["k"] = format(m.k), o["head_dim"] = format(m.head_dim);
  o["dropout"] = format(m.attn_dropout), o["w_switch"] = format(m.w_switch), o["w_z"] = format(m.w_z);
  o["w_cv"] = format(m.w_cv), o["noisy_gating"] = format(m.noisy_gating), o["sample_topk"] = format(m.sample_topk);
  o["aux_normalisation"] = name_of(m.aux_normalisation, kMoANormalisation);
  o["allow_full_routing"] = format(m.allow_full_routing);
  o["rope"] = format(m.rope), o["rope_theta"] = format(m.rope_theta);
}

MAEConfig read_mae(OptionReader& o, const ModelConfig& c) {
  MAEConfig m;
  m.mha = read_mha(o, c);
  m.gate_input = choose<MAEConfig::GateInput>(o, "gate_input", kMAEGateInput);
  m.gate_hidden = o.get_int("gate_hidden", 0);
  m.gate_activation = choose<MAEConfig::GateActivation>(o, "gate_activation", kMAEGateActivation);
  m.sample_per = choose<MAEConfig::SamplePer>(o, "sample_per", kMAESamplePer);
  m.inference = choose<MAEConfig::Inference>(o, "inference", kMAEInference);
  return m;
}
void write_mae(StringMap& o, const MAEConfig& m) {
  write_mha(o, m.mha);
  o["gate_input"] = name_of(m.gate_input, kMAEGateInput), o["gate_hidden"] = format(m.gate_hidden);
  o["gate_activation"] = name_of(m.gate_activation, kMAEGateActivation);
  o["sample_per"] = name_of(m.sample_per, kMAESamplePer), o["inference"] = name_of(m.inference, kMAEInference);
}

}  // namespace

namespace {
// RoPE rotates self-attention only: a model-wide rope=true builds
// cross-attention without it (so its MACs count no rotated queries), and a
// cross-attention override asking for it is refused rather than ignored.
void drop_rope(const AttentionSpec& spec, int64_t layer, AttentionChoice& choice) {
  auto refuse_rope = [&](const AttentionChoice& own) {
    auto rope = own.options.find("rope");
    HEADROOM_CHECK(rope == own.options.end() || rope->second == "false", "[make_attention] layer ", layer,
                   " cross: rope=", rope->second,
                   " asked for cross-attention, which is not rotated (RoPE applies to self-attention only)");
  };
  if (auto role = spec.roles.find(AttentionRole::cross); role != spec.roles.end()) refuse_rope(role->second);
  if (auto own = spec.at.find({AttentionRole::cross, layer}); own != spec.at.end()) refuse_rope(own->second);
  choice.options.erase("rope");
  choice.options.erase("rope_theta");
}
}  // namespace

std::shared_ptr<Attention> make_attention(const ModelConfig& config, int64_t layer, AttentionRole role,
                                          Generator& gen) {
  AttentionChoice choice = config.attention.resolve(layer, role);
  if (role == AttentionRole::cross) drop_rope(config.attention, layer, choice);
  const std::string& type = choice.type;
  OptionReader options("make_attention " + type + " layer " + std::to_string(layer) + " " + role_name(role),
                       choice.options);
  std::shared_ptr<Attention> made;
  if (type == "mha") made = std::make_shared<MultiHeadAttention>(read_mha(options, config), gen);
  else if (type == "moa") made = std::make_shared<MoAAttention>(read_moa(options, config), gen);
  else if (type == "moh") made = std::make_shared<MoHAttention>(read_moh(options, config), gen);
  else if (type == "mae") made = std::make_shared<MAEAttention>(read_mae(options, config), gen);
  else
    HEADROOM_FAIL("[make_attention] layer ", layer, " ", role_name(role), ": unknown attention type '", type,
                  "' (known: mha, moa, moh, mae)");
  options.check_all_used();
  return made;
}

AttentionFactory default_attention_factory(const ModelConfig& config, Generator& gen) {
  return [config, &gen](int64_t layer, AttentionRole role) { return make_attention(config, layer, role, gen); };
}

AttentionChoice attention_choice(const Attention& layer) {
  AttentionChoice choice{layer.kind(), {}};
  // Derived classes first: MoH and MAE are MultiHeadAttentions too.
  if (auto* moh = dynamic_cast<const MoHAttention*>(&layer)) write_moh(choice.options, moh->moh_config);
  else if (auto* mae = dynamic_cast<const MAEAttention*>(&layer)) write_mae(choice.options, mae->mae_config);
  else if (auto* moa = dynamic_cast<const MoAAttention*>(&layer)) write_moa(choice.options, moa->config);
  else if (auto* mha = dynamic_cast<const MultiHeadAttention*>(&layer)) write_mha(choice.options, mha->config);
  else choice.type.clear();  // a class of the user's own
  return choice;
}

}  // namespace headroom
