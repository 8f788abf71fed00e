#pragma once
// Transformer models around the Attention interface: the block, a
// decoder-only language model, an encoder-decoder and a ViT.  Every
// attention layer comes from an AttentionFactory (config.h), so dense MHA,
// MoA, MoH and MAE plug in without the models knowing their classes.
//
// Each forward returns its attention layers' auxiliary losses explicitly
// (ModelOutput::aux_losses, one per layer that has one, each already weighted
// by its method); training_loss() adds them to the task loss.  A model built
// with a custom AttentionFactory records what each layer is in its config,
// so config.to_metadata() rebuilds it.
//
// Parameter names (PyTorch-style module paths), e.g. for a DecoderLM:
//   embed.tokens.weight [V, d]           embed.positions.weight [max_len, d] (learned only)
//   decoder.blocks.<i>.self_attn_norm.{weight,bias}   decoder.blocks.<i>.self_attn.<attention params>
//   decoder.blocks.<i>.mlp_norm.{weight,bias}         decoder.blocks.<i>.mlp.fc{1,2}.{weight,bias}
//   decoder.norm.{weight,bias} (pre-LN only)          lm_head.{weight [V, d], bias [V]} (untied only)
// Decoder blocks of an EncoderDecoder add cross_attn_norm and cross_attn.
// The config's architecture fields change them:
//   norm_kind rmsnorm  every norm has a weight only (RMSNorm)
//   mlp gated          mlp.gate_proj, mlp.up_proj [ffn_hidden, d] and mlp.down_proj [d, ffn_hidden]
//                      (Hugging Face LLaMA's names) instead of mlp.fc1 and mlp.fc2
//   mlp_bias false     the MLP's projections have a weight only
//   head_bias true     lm_head.bias [V] (the head must be untied)
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "headroom/models/config.h"

namespace headroom {

// What a block or a model returns: its output and its attention layers' extras.
struct ModelOutput {
  Tensor out;                       // the block's [B, T, d], logits, or the encoder's memory
  std::vector<AuxLoss> aux_losses;  // per attention layer, in layer order; layers without one are skipped
  std::vector<RoutingStats> stats;  // per attention layer, in layer order (all of them)

  void add(const AttentionOutput& attn);  // records one attention layer's aux loss and stats
  void append(const ModelOutput& other);  // records another output's layers after this one's
};

// The loss to train on: the task's mean loss over its target_tokens target
// tokens plus every layer's aux loss (each weighted by its layer), those that
// join the summed loss divided by target_tokens:
//   task_mean_loss + Σ aux + (Σ aux joining the summed loss) / target_tokens
// MoA: Σ over its layers (aux_normalisation reference: per target token);
// MoH: beta · mean over its routed layers; MHA, MAE: none.
Tensor training_loss(const Tensor& task_mean_loss, const std::vector<AuxLoss>& aux_losses, int64_t target_tokens);

// Vaswani et al.'s sinusoids for positions start .. start+length-1, interleaved:
// PE[p, 2i] = sin(p / 10000^(2i/d)), PE[p, 2i+1] = cos(p / 10000^(2i/d)).  [length, dim]
// Computed on the host (in double) and copied to `device`.
Tensor sinusoidal_positions(int64_t start, int64_t length, int64_t dim, DType dtype = DType::f32,
                            Device device = Device::cpu());

// Per-layer attention caches of one incremental decoding run.
struct DecoderCache {
  std::vector<AttentionCache> self, cross;  // one per decoder layer (cross empty for a DecoderLM)
  int64_t position = 0;                     // tokens consumed so far: the position of the next token
  int64_t reserved = 0;  // positions every self-attention cache reserves (AttentionCache::reserve); 0: none

  // Keeps batch row rows[i] of every cached tensor as row i (beam search):
  // index_select along dimension 0 of k, v and extra (methods keep `extra`
  // batch-major for this).  rows: i32 [N'].
  void reorder(const Tensor& rows);
};

// ---- the block ----------------------------------------------------------------

struct BlockInput {
  explicit BlockInput(Tensor x_, Tensor padding_ = Tensor(), Tensor memory_ = Tensor(),
                      Tensor memory_padding_ = Tensor())
      : x(std::move(x_)),
        padding(std::move(padding_)),
        memory(std::move(memory_)),
        memory_padding(std::move(memory_padding_)) {}
  Tensor x;                              // [B, T, d]
  Tensor padding;                        // b8 [B, T], 1 = padded token (query padding and self-attention key padding)
  Tensor memory;                         // [B, S, d] encoder output, for blocks with cross-attention
  Tensor memory_padding;                 // b8 [B, S]
  AttentionCache* self_cache = nullptr;  // incremental decoding: x holds only the new tokens
  AttentionCache* cross_cache = nullptr;
};

// Self-attention [+ cross-attention] + MLP, each a residual branch with dropout:
//   pre-LN:  x = x + drop(f(LN(x)))        post-LN: x = LN(x + drop(f(x)))
// LN is the config's norm kind (LayerNorm or RMSNorm), the MLP its MLP kind.
//
//   BlockConfig b;  b.dim = 64, b.ffn_hidden = 256, b.causal = true;
//   TransformerBlock block(b, std::make_shared<MultiHeadAttention>(MHAConfig{64, 4}));
class TransformerBlock : public Module {
 public:
  // cross_attn: null for encoder and decoder-only blocks.
  TransformerBlock(const BlockConfig& config, std::shared_ptr<Attention> self_attn,
                   std::shared_ptr<Attention> cross_attn = nullptr, Generator& gen = default_generator());
  ModelOutput forward(const BlockInput& in);  // out: [B, T, d]
  int64_t macs(int64_t T, int64_t S) const;   // one sequence, T queries, S memory positions

  std::shared_ptr<Norm> self_attn_norm, cross_attn_norm, mlp_norm;
  std::shared_ptr<Attention> self_attn, cross_attn;
  std::shared_ptr<FeedForward> mlp;  // an MLP, or a GatedMLP (config.mlp gated)
  std::shared_ptr<Dropout> drop;
  BlockConfig config;

 private:
  // One residual branch around `f` with its norm, in the configured placement.
  template <typename F> Tensor residual(const Tensor& x, const Norm& norm, F&& f) const;
};

// ---- shared model pieces ------------------------------------------------------

// Token embedding (N(0, 1/d) init, × √d when config.scale_embeddings), plus
// sinusoidal or learned positions, then dropout.
class TokenEmbedding : public Module {
 public:
  TokenEmbedding(const ModelConfig& config, int64_t vocab, Generator& gen);
  Tensor forward(const Tensor& tokens, int64_t start = 0) const;  // i32 [B, T] -> [B, T, d]
  std::shared_ptr<Embedding> tokens, positions;                   // positions: learned only
  std::shared_ptr<Dropout> drop;
  ModelConfig config;

 private:
  // Sinusoids of positions start .. start+T-1 in x's dtype and device: rows
  // of a table kept for the last dtype and device and grown on demand, so a
  // step on CUDA does not copy it from the host.
  Tensor sinusoids(int64_t start, int64_t T, const Tensor& x) const;
  mutable Tensor sinusoid_table_;
};

// A stack of blocks and, for pre-LN, the final norm (of the config's norm kind).
class TransformerStack : public Module {
 public:
  // role: encoder_self (bidirectional), decoder_self (causal); with_cross adds cross-attention.
  TransformerStack(const ModelConfig& config, int64_t layers, AttentionRole role, bool with_cross,
                   const AttentionFactory& factory, Generator& gen);
  // cache: incremental decoding (one entry per layer is created on first use).
  ModelOutput forward(BlockInput in, DecoderCache* cache = nullptr);
  int64_t macs(int64_t T, int64_t S) const;
  // One line per attention layer: path, summary, parameters and forward MACs.
  std::string describe_layers(const std::string& path, int64_t T, int64_t S) const;
  size_t size() const { return blocks->size(); }
  std::shared_ptr<TransformerBlock> block(size_t i) const { return blocks->at<TransformerBlock>(i); }

  std::shared_ptr<ModuleList> blocks;
  std::shared_ptr<Norm> norm;  // pre-LN only
};

// ---- models ---------------------------------------------------------------------

// Decoder-only language model: embed -> causal blocks -> final norm (pre-LN) -> LM head.
// The head is lm_head (with a bias when config.head_bias), or the token
// embedding's transpose when config.tie_embeddings.
class DecoderLM : public Module {
 public:
  // An empty factory means default_attention_factory(config, gen).  gen must
  // outlive the model (its dropout layers draw from it).
  explicit DecoderLM(const ModelConfig& config, Generator& gen = default_generator(),
                     const AttentionFactory& factory = {});
  // tokens: i32 [B, T]; padding: b8 [B, T] or undefined -> out = logits [B, T, V].
  // With a cache, tokens are the next ones after cache->position (padding
  // must then be undefined) and the cache is extended.
  ModelOutput forward(const Tensor& tokens, const Tensor& padding = Tensor(), DecoderCache* cache = nullptr);
  int64_t forward_macs(int64_t T) const;  // one sequence of T tokens
  std::string describe(int64_t T) const;  // config, parameters and MACs at length T

  ModelConfig config;
  std::shared_ptr<TokenEmbedding> embed;
  std::shared_ptr<TransformerStack> decoder;
  std::shared_ptr<Linear> lm_head;  // undefined when tied to embed.tokens
};

// Encoder-decoder (Vaswani et al.): encoder self-attention; decoder causal
// self-attention + cross-attention over the encoder memory.
class EncoderDecoder : public Module {
 public:
  explicit EncoderDecoder(const ModelConfig& config, Generator& gen = default_generator(),
                          const AttentionFactory& factory = {});
  // src: i32 [B, S]; src_padding: b8 [B, S] or undefined -> out = memory [B, S, d]
  ModelOutput encode(const Tensor& src, const Tensor& src_padding = Tensor());
  // tgt: i32 [B, T] (teacher forcing input) -> out = logits [B, T, V].
  // With a cache, as DecoderLM::forward; the memory is read on the first call only.
  ModelOutput decode(const Tensor& tgt, const Tensor& memory, const Tensor& src_padding = Tensor(),
                     const Tensor& tgt_padding = Tensor(), DecoderCache* cache = nullptr);
  int64_t forward_macs(int64_t S, int64_t T) const;  // one source of S and target of T tokens
  std::string describe(int64_t S, int64_t T) const;

  ModelConfig config;
  std::shared_ptr<TokenEmbedding> src_embed, tgt_embed;
  std::shared_ptr<TransformerStack> encoder, decoder;
  std::shared_ptr<Linear> lm_head;  // undefined when tied to tgt_embed.tokens
};

// Vision transformer: non-overlapping patches flattened in (C, p, p) order
// and embedded by a Linear (= a stride-p convolution), a class token (cls
// pooling) or mean pooling, learned positions, encoder blocks, final LN
// (pre-LN) and a classifier head.
class ViT : public Module {
 public:
  explicit ViT(const ModelConfig& config, Generator& gen = default_generator(), const AttentionFactory& factory = {});
  ModelOutput forward(const Tensor& images);  // f32 [B, C, H, W] with H = W = image_size -> logits [B, classes]
  int64_t num_patches() const;
  int64_t forward_macs() const;  // one image
  std::string describe() const;

  ModelConfig config;
  std::shared_ptr<Linear> patch_embed;  // [d, C·p·p]
  Tensor cls_token;                     // [1, 1, d], cls pooling only
  Tensor pos_embed;                     // [tokens, d], tokens = patches (+1 with a class token)
  std::shared_ptr<Dropout> drop;
  std::shared_ptr<TransformerStack> encoder;
  std::shared_ptr<Linear> head;
};

// ---- loading ----------------------------------------------------------------------

// Rebuilds a model in one call from a file whose metadata holds its config:
// a training checkpoint (runs/lm/checkpoint.safetensors; its optimizer state
// is skipped) or what save_module(model, path, model.config.to_metadata())
// wrote.  PyTorch users know it as from_pretrained:
//   std::shared_ptr<DecoderLM> lm = load_model<DecoderLM>("runs/lm/checkpoint.safetensors");
// M is DecoderLM, EncoderDecoder or ViT.  Throws naming the file when it holds
// another kind of model, misses a config field or a tensor, or fails its
// checksum.  `gen` drives the model's dropout, as in the constructors.
template <typename M> std::shared_ptr<M> load_model(const std::string& path, Generator& gen = default_generator());

}  // namespace headroom
