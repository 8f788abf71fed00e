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

#include "headroom/core/rng.h"
#include "headroom/models/attention.h"
#include "headroom/models/layers.h"

namespace headroom {

using StringMap = std::map<std::string, std::string>;

// Which attention method, and its options as strings (parsed by the method's
// factory branch, so a checkpoint can carry any method's settings).
struct AttentionSpec {
  std::string type = "mha";  // "mha"; the methods add "moa", "moh", "mae"
  StringMap options;         // e.g. {"kv_heads", "2"}, {"bias", "false"}
  // Per-layer overrides (e.g. MoH's head budgets per layer): layer_options[i]
  // replaces entries of `options` for layer i.  Layers count from 0 within
  // their stack (encoder layers and decoder layers each start at 0) and an
  // override applies to every attention of that layer (self and cross).
  std::map<int64_t, StringMap> layer_options;

  StringMap options_for(int64_t layer) const;  // options merged with layer i's overrides
};

enum class NormPlacement { pre, post };        // pre-LN: x + f(LN(x)); post-LN: LN(x + f(x))
enum class PositionKind { sinusoidal, learned };
enum class Pooling { cls, mean };              // ViT: class token or mean over patch tokens

struct ModelConfig {
  // ---- sequence models --------------------------------------------------------
  int64_t vocab = 0;          // target / language-model vocabulary
  int64_t src_vocab = 0;      // EncoderDecoder source vocabulary (0: same as vocab)
  int64_t dim = 0;            // d
  int64_t heads = 0;          // attention heads per layer (methods read it through the factory)
  int64_t encoder_layers = 0;
  int64_t decoder_layers = 0;
  int64_t ffn_hidden = 0;     // MLP hidden width
  Activation activation = Activation::relu;
  double dropout = 0;         // embeddings, residual branches and the MLP hidden layer
  double attn_dropout = 0;    // attention probabilities
  NormPlacement norm = NormPlacement::pre;
  PositionKind positions = PositionKind::sinusoidal;
  int64_t max_len = 512;      // longest sequence the learned positions cover
  bool tie_embeddings = false;    // LM head shares the (target) token embedding
  bool scale_embeddings = false;  // multiply token embeddings by √d (Vaswani et al., fairseq)
  double norm_eps = 1e-5;
  // ---- ViT ----------------------------------------------------------------------
  int64_t image_size = 0;     // square images of image_size × image_size pixels
  int64_t patch_size = 0;
  int64_t channels = 3;
  int64_t classes = 0;
  Pooling pooling = Pooling::cls;
  // ---- attention ---------------------------------------------------------------
  AttentionSpec attention;

  int64_t source_vocab() const { return src_vocab > 0 ? src_vocab : vocab; }

  // Flat map with keys "model.<field>", "attention.type",
  // "attention.option.<name>" and "attention.layer.<i>.<name>".
  StringMap to_metadata() const;
  // The inverse.  Keys outside "model." and "attention." are ignored (a
  // checkpoint carries other metadata too); unknown "model." fields and
  // unparsable values throw, naming the key.
  static ModelConfig from_metadata(const StringMap& metadata);
};

bool operator==(const ModelConfig& a, const ModelConfig& b);
inline bool operator!=(const ModelConfig& a, const ModelConfig& b) { return !(a == b); }

// ---- building attention layers --------------------------------------------

enum class AttentionRole { encoder_self, decoder_self, cross };
const char* role_name(AttentionRole role);

// Builds the attention of layer `layer` (counted within its stack) in `role`.
using AttentionFactory = std::function<std::shared_ptr<Attention>(int64_t layer, AttentionRole role)>;

// The default factory: config.attention.type picks the class ("mha":
// MultiHeadAttention with dim, heads, attn_dropout from the config and the
// options kv_heads (0), bias (true)).  Unknown types and unknown or
// malformed options throw.
std::shared_ptr<Attention> make_attention(const ModelConfig& config, int64_t layer, AttentionRole role,
                                          Generator& gen = default_generator());
AttentionFactory default_attention_factory(const ModelConfig& config, Generator& gen = default_generator());

// The training loss of a model: the task's mean loss over its target tokens
// plus the attention layers' auxiliary losses, by each method's convention:
//   moa: aux summed over every MoA layer, added to the summed NLL and divided
//        by the target-token count (option aux_normalisation=reference, the
//        official code) or added to the mean loss (aux_normalisation=mean);
//        the layers already weight their terms (w_switch, w_z, w_cv);
//   moh: β (option beta, 0.01) times the mean over routed layers;
//   mha, mae: no auxiliary loss.
Tensor training_loss(const ModelConfig& config, const Tensor& task_mean_loss,
                     const std::vector<Tensor>& aux_losses, int64_t target_tokens);

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
