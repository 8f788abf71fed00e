#include "headroom/models/config.h"

#include <cstdio>
#include <utility>
#include <vector>

#include "headroom/models/mha.h"

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

std::shared_ptr<Attention> make_attention(const ModelConfig& config, int64_t layer, AttentionRole role,
                                          Generator& gen) {
  const std::string& type = config.attention.type;
  OptionReader options("make_attention " + type + " layer " + std::to_string(layer) + " " + role_name(role),
                       config.attention.options_for(layer));
  std::shared_ptr<Attention> made;
  // One branch per method; each reads its options from `options`.
  if (type == "mha") {
    MHAConfig mha{config.dim, config.heads, options.get_int("kv_heads", 0), options.get_bool("bias", true),
                  config.attn_dropout};
    made = std::make_shared<MultiHeadAttention>(mha, gen);
  } else {
    HEADROOM_FAIL("[make_attention] unknown attention type '", type, "' (known: mha)");
  }
  options.check_all_used();
  return made;
}

AttentionFactory default_attention_factory(const ModelConfig& config, Generator& gen) {
  return [config, &gen](int64_t layer, AttentionRole role) { return make_attention(config, layer, role, gen); };
}

}  // namespace headroom
