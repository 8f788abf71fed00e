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
// The largest image side (--image-size, --patch), vocabulary (bytes, BPE
// merges and special tokens) and class count a model may have.
constexpr int64_t kMaxImageSize = 1024, kMaxVocab = int64_t(1) << 21, kMaxClasses = int64_t(1) << 20;

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

// `stacks`: the model's, so that --attn-set's help names only the roles it has.
void add_model_flags(Flags& flags, ModelOptions& options, ModelStacks stacks);

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

// The batches a run's memory estimate covers: its training step, its
// evaluation batches (forwards without gradients) and its decoding (train_mt's
// BLEU decodes), each at the longest the flags allow.
struct RunShape {
  int64_t rows = 0;           // sequences, sentence pairs or images per training step
  int64_t tokens = 0;         // positions per row: an LM's context, a ViT's patches and class token, a source
  int64_t target_tokens = 0;  // an encoder-decoder's decoder positions per row (0 for the other models)
  int64_t eval_rows = 0;      // rows per evaluation batch
  int64_t decode_rows = 0;    // rows an encoder-decoder decodes at once: batch x beam (0: no decoding)
  double data_bytes = 0;      // the task's data held as tensors beside the model (a ViT's images on the CPU)
};

// The memory of a run of `config`'s model, in f32, from the sizes alone,
// before anything is allocated (so a model too large to build is refused,
// not built to be counted):
//   weights      the parameters of the embeddings, every block (its attention
//                by its method's size options, its MLP and norms) and the head
//   optimizer    3 x weights: the gradients and AdamW's two moments
//   activations  the largest of three, 4 bytes x floats:
//     a training step: rows x per-token floats that autograd keeps for the
//       backward pass, counted per block from what the layers save (each
//       norm's input and output, the MLP's hidden layer before and after its
//       activation; MHA, MoH and MAE: the queries of the heads that run, their
//       head-major copy and the attention output, the keys and values, one
//       log-sum-exp per head, and the routers' logits, probabilities and gates;
//       MoA: the k chosen experts' queries and outputs, the shared keys and
//       values and their copies; MAE: its per-token gate input and hidden layer
//       under prefix_mean; a cross-attention's keys and values per source
//       token), plus the patch rows or the final norm and logits, and the
//       largest gradient beside them (logits or MLP hidden layer);
//     an evaluation batch: eval_rows x per-token floats of the widest block
//       and the model's input and output layers (no gradients: one block's
//       tensors at a time);
//     decoding: decode_rows x the keys and values every decoder attention
//       caches for each source and target position, the encoder's output and
//       one token's forward;
//   data         shape.data_bytes.
// There is no h x T^2 term: the attention kernel recomputes the
// probabilities in its backward pass.  An estimate, not a measurement:
// checked against the measured peaks in tests/test_tasks.cpp.
MemoryEstimate estimate_memory(const ModelConfig& config, const RunShape& shape);

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
// (checked to be a training checkpoint and by check_checkpoint_config), for
// settling the task's flags before the data is read.
ModelConfig checkpoint_config(const TrainOptions& train, ModelStacks stacks);

// Holds a checkpoint's model config to what the model flags accept (a
// checksum proves a file intact, not sane): its stacks must be `stacks`'s
// (a checkpoint of another task is named as such: "a translation model's
// checkpoint (train_mt)"), and every size that reaches a division, an
// allocation or an index lies in the flags' range.  Throws headroom::Error
// naming `path`, the field and the range.
void check_checkpoint_config(const ModelConfig& config, ModelStacks stacks, const std::string& path);

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
