#pragma once
// The model flags the training binaries share: the attention method and its
// options, and the transformer's size.
//
//   ModelOptions m;                       // defaults: the small CPU models
//   add_model_flags(flags, m);            // --attn --attn-opt --attn-set --dim --heads --layers --ffn --dropout
//   ModelConfig config = m.config();      // then set vocab / image fields per task
//
// --attn-opt takes the method's options as "key=value,key=value"; they are
// checked by make_attention (models/config.h lists them with their
// defaults), so a misspelt option fails before training.  --attn-set takes
// AttentionSpec::set keys for layers and roles that differ:
//   --attn moh --attn-set layer.0.type=mha,cross.type=mha,cross.option.kv_heads=1
#include <cstdint>
#include <string>

#include "headroom/examples/common/cli.h"
#include "headroom/examples/common/trainer.h"
#include "headroom/models/config.h"

namespace headroom::examples {

// The largest sizes the model flags accept (docs/training.md, "Flag and
// input limits"); a stack's weights are also bounded, 2^31 (8 GiB of f32).
constexpr int64_t kMaxDim = 16384, kMaxHeads = 1024, kMaxLayers = 256, kMaxFfn = 65536;
constexpr int64_t kMaxStackWeights = int64_t(1) << 31;
// The largest batch (sequences, sentence pairs or images per step), sequence
// length and tokens per batch (batch × length) the task flags accept.
constexpr int64_t kMaxBatch = 65536, kMaxContext = 65536, kMaxBatchTokens = int64_t(1) << 24;

// The stacks of a task's model: an LM's decoder, a ViT's encoder, a
// translation model's both.
enum class ModelStacks { decoder, encoder, encoder_decoder };

struct ModelOptions {
  std::string attn = "mha";
  std::string attn_opt;  // "key=value,..."
  std::string attn_set;  // "<AttentionSpec::set key>=value,..."
  int64_t dim = 128, heads = 8, layers = 4, ffn = 512;
  double dropout = 0.1;
  // The command line's flags (add_model_flags sets it), to tell a flag given
  // from a default; null: none given (a run built in code).
  const Flags* flags = nullptr;
  bool given(const std::string& flag) const {
    return flags != nullptr && flags->declares(flag) && flags->was_set(flag);
  }
  // The transformer part of a ModelConfig (pre-LN, GELU, sinusoidal positions,
  // attention spec) with `layers` in each of `stacks`.  Throws UsageError for
  // sizes whose weights exceed kMaxStackWeights, an unknown method or option
  // name, and an --attn-set key the model would ignore: a role or layer it
  // lacks (cross.type in a decoder-only model, layer.7 of 2), an index not
  // written plainly (layer.01, layer.-1), an empty value.
  ModelConfig config(ModelStacks stacks) const;
};

void add_model_flags(Flags& flags, ModelOptions& options);

// Where a run's model comes from.  For --resume and --eval-only the
// checkpoint is the source of truth: its config and task entries (e.g. the
// tokenizer) rebuild the model with no model flags typed again.
struct ModelSource {
  ModelConfig config;       // the flags' (ModelOptions::config) or the checkpoint's
  StringMap task_metadata;  // the checkpoint's task entries; empty for a new run
  bool from_checkpoint = false;
};

// The checkpoint's config for --resume and --eval-only, else the flags' for
// a model of `stacks`.  A model flag given on the command line that
// contradicts the checkpoint, or an --attn-set key its model lacks, throws
// UsageError naming the flag, the checkpoint's field and both values.
ModelSource model_source(const ModelOptions& options, const TrainOptions& train, ModelStacks stacks);

// The memory of a training step of `rows` sequences (or images) of `tokens`
// positions each (an LM's context, a translation model's source and target
// length, a ViT's patches and class token) with `config`'s model, in f32,
// from the sizes alone, before anything is allocated (so a model too large
// to build is refused, not built to be counted):
//   weights      the parameters of the embeddings, every block (its attention
//                by its method's size options, its MLP and norms) and the head
//   optimizer    3 × weights: the gradients and AdamW's two moments
//   activations  4 bytes × rows · tokens · per-token floats: per block what
//                autograd saves, 6 d (residual stream, norms' inputs and
//                outputs, dropout masks) + 3 ffn (the MLP's hidden layer
//                before and after its activation, its mask) + 4 (w + w_kv)
//                (q of width w = heads · head_dim, k and v of w_kv, their
//                head-major copies, the attention output and its merge; MoA:
//                k experts' queries and outputs and one shared K and V) +
//                heads (one log-sum-exp per head: the kernel recomputes the
//                T × T probabilities in its backward pass, so there is no
//                h · T term), a cross-attention and its norm again in a
//                decoder after an encoder; plus the embeddings and final norm
//                (4 d) and the logits with their softmax (2 vocab).
// An estimate, not a measurement: the backward pass's temporaries and the
// data come on top, fused kernels save less.
MemoryEstimate estimate_memory(const ModelConfig& config, int64_t rows, int64_t tokens);

// A task flag whose value the trained model fixes: an LM's --context, a
// translation model's --max-tokens, a ViT's --image-size.  For --resume and
// --eval-only, not given, it takes `trained` (the checkpoint's value); given
// and different, --resume refuses (a resumed run trains at the trained
// value), and --eval-only accepts what `eval_accepts` says, printing a line
// that the value differs from training.  Never silent.
enum class EvalAccepts {
  trained_only,  // e.g. a ViT's image size: its patch grid is fixed
  smaller,       // e.g. a context within a learned position table
  any,           // e.g. a context with sinusoidal, rotary or no positions
};
void settle_trained_value(const Flags& flags, const TrainOptions& train, const std::string& flag, int64_t& value,
                          int64_t trained, EvalAccepts eval_accepts);

// The config of the checkpoint that --resume and --eval-only start from
// (checked to be a training checkpoint), for settling the task's flags
// before the data is read.
ModelConfig checkpoint_config(const TrainOptions& train);

// "a=1,b=x" -> {a: 1, b: x}; throws UsageError naming `flag` on an entry
// without '=' or without a value and on a key given twice.
StringMap parse_options(const std::string& text, const std::string& flag = "--attn-opt");

// The share of attention heads that run for each token, averaged over the
// model's attention layers: MoH (h_s + K_r) / h, MoA k · d_h / d (k experts
// of width d_h), MHA and MAE (whose mixture runs every head) 1.
double active_head_fraction(const Module& model);

// The shared heads of the model's first MoH layer (0 without one).
int64_t shared_head_count(const Module& model);

// The method presets of `compare`, for h = base.heads heads of width d / h,
// sized so that every preset's parameters stay within a few percent of MHA's:
//   mha    dense multi-head attention
//   moa    2h − 1 experts of width d_h, top-k = h / 2
//   moh75  h / 4 shared + top-h/2 of the routed heads: 75% of the heads per token
//   moh50  h / 4 shared + top-h/4 of the routed heads: 50%
//   mae    h experts of h − 1 heads, gate MLP of width d / 8
// Throws UsageError for another name; needs h divisible by 4.
ModelOptions method_preset(const std::string& method, ModelOptions base);

}  // namespace headroom::examples
