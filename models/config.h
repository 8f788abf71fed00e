#pragma once
// ModelConfig: everything that shapes a transformer model (models/transformer.h),
// including which attention method its layers use, and its round trip through
// a flat string map for checkpoint metadata (safetensors __metadata__).
//
//   ModelConfig cfg;
//   cfg.vocab = 100, cfg.dim = 64, cfg.heads = 4, cfg.decoder_layers = 2, cfg.ffn_hidden = 256;
//   cfg.attention.type = "mha";
//   cfg.attention.options["kv_heads"] = "2";
//   save_module(model, path, cfg.to_metadata());
//   ModelConfig again = ModelConfig::from_metadata(load_safetensors(path).metadata);
//
// Attention layers are built by an AttentionFactory; make_attention() is the
// default one and the single place that maps AttentionSpec::type to a class.
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>

#include "headroom/core/rng.h"
#include "headroom/models/attention.h"
#include "headroom/models/layers.h"

namespace headroom {

using StringMap = std::map<std::string, std::string>;

enum class AttentionRole { encoder_self, decoder_self, cross };
const char* role_name(AttentionRole role);

// One attention layer's method and its options as strings (parsed by
// make_attention, so a checkpoint can carry any method's settings).  As an
// override, an empty type keeps the method it overrides.
struct AttentionChoice {
  std::string type;   // "mha", "moa", "moh", "mae"
  StringMap options;  // e.g. {"kv_heads", "2"}, {"bias", "false"}
};
bool operator==(const AttentionChoice& a, const AttentionChoice& b);

// The attention of every layer of a model.  Layer i (counted from 0 within
// its stack: encoder and decoder layers each start at 0) in role r gets
// `type` and `options`, then the overrides roles[r], layers[i] and
// at[{r, i}], in that order.  An override's options are merged over the
// options it inherits; an override that changes the type starts from that
// method's defaults (the inherited options belong to another method), except
// for the options every method takes (rope, rope_theta, dropout): those are
// model-wide choices, so a RoPE model keeps RoPE in a layer of another method.
//
//   c.attention = {"moh", {{"routed_k", "2"}}};         // every layer: MoH
//   c.attention.layers[0] = {"mha", {}};                 // ... but a dense first layer
//   c.attention.roles[AttentionRole::cross] = {"mha", {{"kv_heads", "1"}}};  // MQA cross-attention
struct AttentionSpec {
  AttentionSpec(std::string type_ = "mha", StringMap options_ = {})
      : type(std::move(type_)), options(std::move(options_)) {}
  std::string type;
  StringMap options;
  std::map<AttentionRole, AttentionChoice> roles;
  std::map<int64_t, AttentionChoice> layers;
  std::map<std::pair<AttentionRole, int64_t>, AttentionChoice> at;

  AttentionChoice resolve(int64_t layer, AttentionRole role) const;
  // Sets one entry by its metadata key without the "attention." prefix:
  // "type", "option.<name>", "<role>.type", "layer.<i>.option.<name>",
  // "<role>.layer.<i>.type", ... (the binaries' --attn-set).  Throws naming
  // the key when it has another form.
  void set(const std::string& key, const std::string& value);
};

enum class NormPlacement { pre, post };  // pre-LN: x + f(LN(x)); post-LN: LN(x + f(x))
// The MLP of every block: plain fc2(act(fc1 x)) (MLP), or gated
// down_proj(act(gate_proj x) ⊙ up_proj x) (GatedMLP: SwiGLU with silu).
enum class MlpKind { plain, gated };
// Added to the token embeddings; none: positions come from the attention
// layers alone (their option rope=true).
enum class PositionKind { sinusoidal, learned, none };
enum class Pooling { cls, mean };  // ViT: class token or mean over patch tokens

// What a TransformerBlock is built from (models/transformer.h); its
// attention layers come separately, each from its own config.
struct BlockConfig {
  int64_t dim = 0;                           // d, the residual stream's width
  int64_t ffn_hidden = 0;                    // MLP hidden width
  Activation activation = Activation::relu;  // the MLP's (a gated MLP's gate)
  double dropout = 0;                        // residual branches and the MLP hidden layer
  NormPlacement norm = NormPlacement::pre;
  NormKind norm_kind = NormKind::layernorm;
  double norm_eps = 1e-5;
  MlpKind mlp = MlpKind::plain;
  bool mlp_bias = true;  // biases on the MLP's projections
  bool causal = false;   // self-attention: query t sees keys s <= t
};

struct ModelConfig {
  // ---- sequence models --------------------------------------------------------
  int64_t vocab = 0;      // target / language-model vocabulary
  int64_t src_vocab = 0;  // EncoderDecoder source vocabulary (0: same as vocab)
  int64_t dim = 0;        // d
  int64_t heads = 0;      // attention heads per layer (methods read it through the factory)
  int64_t encoder_layers = 0;
  int64_t decoder_layers = 0;
  int64_t ffn_hidden = 0;  // MLP hidden width
  Activation activation = Activation::relu;
  double dropout = 0;       // embeddings, residual branches and the MLP hidden layer
  double attn_dropout = 0;  // attention probabilities
  NormPlacement norm = NormPlacement::pre;
  PositionKind positions = PositionKind::sinusoidal;
  // The context: the longest sequence the model is trained and run at (an LM's
  // training windows, a seq2seq model's longest source or target).  Learned
  // positions cover exactly these; decoding slides its window past them
  // (models/decoding.h); other position kinds accept longer inputs.
  int64_t max_len = 512;
  bool tie_embeddings = false;    // LM head shares the (target) token embedding
  bool scale_embeddings = false;  // multiply token embeddings by √d (Vaswani et al., fairseq)
  double norm_eps = 1e-5;
  // ---- architecture of the blocks and the head (LLaMA: rmsnorm, gated, silu, no biases)
  NormKind norm_kind = NormKind::layernorm;  // every norm: the blocks' and the final one
  MlpKind mlp = MlpKind::plain;              // gated: ffn_hidden is the width of gate_proj and up_proj
  bool mlp_bias = true;                      // biases on the MLP's projections (fc1, fc2 or gate/up/down_proj)
  bool head_bias = false;                    // a bias on the LM head, which must then be untied
  // The attention projections' biases are the methods' option bias (mha, moh,
  // mae; MoA has none); the ViT's classifier head always has a bias.
  // ---- ViT ----------------------------------------------------------------------
  int64_t image_size = 0;  // square images of image_size × image_size pixels
  int64_t patch_size = 0;
  int64_t channels = 3;
  int64_t classes = 0;
  Pooling pooling = Pooling::cls;
  // ---- attention ---------------------------------------------------------------
  AttentionSpec attention;

  int64_t source_vocab() const { return src_vocab > 0 ? src_vocab : vocab; }
  // The blocks of a stack whose self-attention has `role` (decoder_self: causal).
  BlockConfig block(AttentionRole role) const;

  // Flat map with keys "model.<field>" and the attention's
  // "attention[.<role>][.layer.<i>].type" and
  // "attention[.<role>][.layer.<i>].option.<name>" (AttentionSpec::set).
  StringMap to_metadata() const;
  // The inverse.  Keys outside "model." and "attention." are ignored (a
  // checkpoint carries other metadata too); unknown "model." fields and
  // unparsable values throw, naming the key.  Absent fields keep their
  // defaults (hand-written metadata, e.g. a PyTorch fixture's).
  static ModelConfig from_metadata(const StringMap& metadata);
  // from_metadata for a file this library wrote: every "model." field and
  // attention.type must be present, so nothing silently takes a default;
  // errors name the key and `source` (the file).  The exception: norm_kind,
  // mlp, mlp_bias and head_bias, which checkpoints written before they
  // existed lack; such a file was written by a model of their defaults.
  static ModelConfig from_checkpoint_metadata(const StringMap& metadata, const std::string& source);
};

bool operator==(const ModelConfig& a, const ModelConfig& b);
inline bool operator!=(const ModelConfig& a, const ModelConfig& b) { return !(a == b); }

// Strict reads of one metadata entry: the key must be present and a number
// must be the whole text (no spaces, no sign on unsigned values, no fraction
// on integers) and in range.  Errors name `source` (the file), the key and
// the value.
const std::string& metadata_entry(const StringMap& metadata, const std::string& key, const std::string& source);
int64_t metadata_int(const StringMap& metadata, const std::string& key, const std::string& source, int64_t min,
                     int64_t max);
uint64_t metadata_uint64(const StringMap& metadata, const std::string& key, const std::string& source);

// ---- building attention layers --------------------------------------------

// Builds the attention of layer `layer` (counted within its stack) in `role`.
using AttentionFactory = std::function<std::shared_ptr<Attention>(int64_t layer, AttentionRole role)>;

// The default factory: config.attention.resolve(layer, role) picks the class
// and its options; the model's dim, heads and attn_dropout are the defaults
// of the matching options.  Unknown types and unknown or malformed options
// throw.  The options, with their defaults:
//   every method   dropout (attn_dropout), rope (false: rotary positions in
//                  self-attention), rope_theta (10000)
//   mha, moh, mae  heads (config.heads), head_dim (0: dim / heads), kv_heads (0: = heads),
//                  bias (true)
//   moh            shared_heads (-1: heads / 4, at least 1), routed_k (-1: the same),
//                  scaling (code|paper), router (learned|qnorm), load_balance (code|paper),
//                  beta (0.01), ste (selected|all: qnorm's straight-through estimator over
//                  the selected or all routed heads), balance_padding (include|exclude),
//                  allow_full_routing (false)
//   moa            experts (8), k (2), head_dim (dim / heads), w_switch (0.01),
//                  w_z (0.001), w_cv (0), noisy_gating (false), sample_topk (0),
//                  aux_normalisation (reference|mean), allow_full_routing (false)
//   mae            gate_input (auto|seq_mean|prefix_mean|source_mean), gate_hidden (0: d),
//                  gate_activation (relu|tanh), sample_per (auto|sequence|token),
//                  inference (mixture|top1)
std::shared_ptr<Attention> make_attention(const ModelConfig& config, int64_t layer, AttentionRole role,
                                          Generator& gen = default_generator());
AttentionFactory default_attention_factory(const ModelConfig& config, Generator& gen = default_generator());

// The method and every option of a built layer (defaults filled in), such
// that make_attention rebuilds the same layer: what a model records in its
// config for layers a custom factory made.  The type is empty for a class
// other than MultiHeadAttention, MoAAttention, MoHAttention, MAEAttention.
AttentionChoice attention_choice(const Attention& layer);

// Typed reads from a method's option map; every key must be read, so a
// misspelt option fails loudly in check_all_used().
class OptionReader {
 public:
  OptionReader(std::string owner, StringMap options) : owner_(std::move(owner)), options_(std::move(options)) {}
  int64_t get_int(const std::string& key, int64_t fallback);
  double get_double(const std::string& key, double fallback);
  bool get_bool(const std::string& key, bool fallback);  // "true"/"false"/"1"/"0"
  std::string get_string(const std::string& key, const std::string& fallback);
  void check_all_used() const;  // throws naming every option nobody read

 private:
  const std::string* find(const std::string& key);
  std::string owner_;
  StringMap options_;
  std::set<std::string> used_;
};

}  // namespace headroom
