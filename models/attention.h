#pragma once
// The attention interface shared by dense MHA, MoA, MoH and MAE, so that a
// transformer block can use any of them (models/transformer.h chooses by
// config).  Each method lives in its own file: mha.h, moa.h, moh.h, mae.h.
//
// Shapes: x [B, T, d] queries' source; memory [B, S, d] keys'/values' source
// (undefined: self-attention, S = T); output [B, T, d].
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "headroom/core/communicator.h"
#include "headroom/models/module.h"
#include "headroom/ops/attention.h"

namespace headroom {

// Per-layer state for incremental (token by token) decoding, for inference
// (under NoGradGuard).  Self-attention appends the new tokens' keys and
// values in place: they are written into preallocated storage (reserved, or
// doubled when full), so a decode of L tokens copies O(L) cache entries, not
// O(L²), and k and v are views of the storage's valid prefix, which the CPU
// and CUDA attention kernels read in place.  Cross-attention computes its keys and
// values once from the memory and reuses them.  Methods that need more
// state (MAE's running prefix sum) keep it in `extra`.
struct AttentionCache {
  Tensor k, v;   // [B, h_kv, S_so_far, d_h], undefined before the first call
  Tensor extra;  // method-specific running state (see each method)
  int64_t extra_count = 0;
  int64_t length() const { return k.defined() ? k.size(2) : 0; }
  // Positions the storage holds before it must grow (0 for cross-attention).
  int64_t capacity() const { return k_storage_.defined() ? k_storage_.size(2) : 0; }
  // k_new, v_new [B, h_kv, S_new, d_h] after the cached ones.  The storage
  // doubles when full, or grows to the reserved positions if more.
  void append(const Tensor& k_new, const Tensor& v_new);
  // Room for at least `positions` (e.g. prompt + new tokens, as generation
  // reserves): grows the storage now, or sizes its first allocation, so a
  // decode within it never grows and holds no unused half.
  void reserve(int64_t positions);
  // Beam search: row b becomes row rows[b] (i32 [B'] on any device).
  void reorder(const Tensor& rows);
  void clear() { k = v = extra = k_storage_ = v_storage_ = Tensor(), extra_count = 0, reserved_ = 0; }

 private:
  void grow(const Tensor& like, int64_t positions);  // storage for `positions`, shaped as like [B, h_kv, ., d_h]
  Tensor k_storage_, v_storage_;  // [B, h_kv, capacity, d_h]; k, v are their first length() positions
  int64_t reserved_ = 0;
};

struct AttentionInput {
  // A constructor rather than an aggregate, so that the short forms
  // layer.forward({x}) and layer.forward({x, memory, causal}) name no other
  // field and draw no -Wmissing-field-initializers warning on any compiler.
  AttentionInput(Tensor x_ = Tensor(), Tensor memory_ = Tensor(), bool causal_ = false,
                 Tensor query_padding_ = Tensor(), Tensor key_padding_ = Tensor(), AttentionCache* cache_ = nullptr,
                 Tensor source_ = Tensor(), Tensor source_padding_ = Tensor())
      : x(std::move(x_)),
        memory(std::move(memory_)),
        causal(causal_),
        query_padding(std::move(query_padding_)),
        key_padding(std::move(key_padding_)),
        cache(cache_),
        source(std::move(source_)),
        source_padding(std::move(source_padding_)) {}
  Tensor x;                         // [B, T, d]
  Tensor memory;                    // [B, S, d] for cross-attention; undefined = self-attention
  bool causal = false;              // query t sees keys s <= t (+ cache length when decoding)
  Tensor query_padding;             // b8 [B, T], 1 = padded query (MoA zeroes its output)
  Tensor key_padding;               // b8 [B, S], 1 = padded key, never attended
  AttentionCache* cache = nullptr;  // decoding: x holds only the new tokens
  // Decoder self-attention in an encoder–decoder model: the encoder output
  // and its padding, for gates that summarise the source (MAE's source_mean).
  Tensor source;          // [B, S_src, d], undefined elsewhere
  Tensor source_padding;  // b8 [B, S_src]
};

// What a routed layer decided, for statistics and plots (no gradients).
struct RoutingStats {
  Tensor indices;  // i32 [N, k]: heads/experts chosen per query token (N = B*T); undefined for dense
  Tensor gates;    // f32 [N, E]: the gate of every head/expert (0 where not chosen)
  Tensor load;     // f32 [E]: (token, slot) assignments per head/expert in this call
};

// A layer's auxiliary loss, already weighted by its method's convention.
// training_loss (models/transformer.h) adds it to the task's mean loss per
// target token, or, when joins_summed_loss (MoA's reference convention,
// fairseq's), to the summed loss, i.e. divided by the target-token count.
struct AuxLoss {
  Tensor value;  // scalar; undefined when the layer has none in this call
  bool joins_summed_loss = false;
  std::string layer;  // the path of the layer it comes from in its model (Attention::path)
  bool defined() const { return value.defined(); }
};

struct AttentionOutput {
  Tensor out;  // [B, T, d]
  AuxLoss aux;
  RoutingStats stats;
};

class Attention : public Module {
 public:
  virtual AttentionOutput forward(const AttentionInput& in) = 0;
  virtual std::string kind() const = 0;                   // "mha", "moa", "moh", "mae"
  virtual std::string summary() const { return kind(); }  // the method and its sizes, one line
  // Whether training calls return an auxiliary loss, and how many layers of
  // this kind in the model do (share_aux_losses): a method whose convention
  // averages over layers (MoH) divides its own loss by that count.
  virtual bool has_aux_loss() const { return false; }
  virtual void set_aux_peers(int64_t /*layers*/) {}
  // Forward multiply-accumulates of this layer for one sequence of T queries
  // and S keys, counting matmuls only (methods.md §2.9, §3.4).
  virtual int64_t macs(int64_t T, int64_t S, bool causal) const = 0;
  // The layer's path in its model, e.g. "decoder.blocks.0.self_attn" (set by
  // share_aux_losses; empty for a layer used on its own).  It labels the
  // layer's aux loss in a model's output.
  const std::string& path() const { return path_; }
  void set_path(std::string path) { path_ = std::move(path); }

  // Data-parallel training (models/data_parallel.h sets it): the ranks whose
  // batch slices make up the global batch.  In training, a routed layer then
  // computes its auxiliary loss from statistics over the global batch (the
  // experts' load and mean gate), so the ranks together train on the one-
  // process loss (docs/distributed.md); null: this process's batch only.
  void set_statistics_group(std::shared_ptr<Communicator> group) { statistics_group_ = std::move(group); }

 protected:
  // The statistics of a routed layer's auxiliary loss over the global batch,
  // in one all-reduce per call.  Without a group in training: `parts` as they
  // are.  With one: each part summed over the ranks, its gradient flowing to
  // this rank's part (value Σ_r t_r, derivative 1 in t).  An undefined part
  // (a statistic the layer's options leave unused) stays undefined.
  std::vector<Tensor> sum_over_group(const std::vector<Tensor>& parts) const;

 private:
  bool grouped() const { return statistics_group_ != nullptr && is_training(); }
  std::shared_ptr<Communicator> statistics_group_;
  std::string path_;
};

// Tells every attention layer under `model` how many layers of its kind
// carry an auxiliary loss (Attention::set_aux_peers), and its path in the
// model (Attention::set_path).  The models of
// models/transformer.h call it once their layers are built; a model of your
// own calls it too.
void share_aux_losses(Module& model);

// ---- helpers shared by the methods ------------------------------------------

// Keys and values to attend over, after the cache.
struct KeysValues {
  Tensor k, v;       // [B, h_kv, S, d_h]
  int64_t past = 0;  // cache length before this call: the causal offset of the new queries
};

// ---- rotary position embedding (RoPE) ----------------------------------------
// Rotate-half RoPE, as LLaMA and Hugging Face's apply_rotary_pos_emb: for an
// even head width d_h and base θ,
//   inv_freq_i = θ^(−2i/d_h)  (i < d_h/2),  angle[p, i] = p · inv_freq_i
//   cos, sin   = cos, sin of cat(angle, angle)                        [P, d_h]
//   out        = x · cos + rotate_half(x) · sin,
//   rotate_half(x) = cat(−x[..., d_h/2:], x[..., :d_h/2])
// Built from differentiable ops (any device); the cos/sin tables are computed
// on the host in double, once per (d_h, θ, dtype, device), grown by doubling.

// x [B, h, T, d_h] at positions start .. start+T-1 -> [B, h, T, d_h]
Tensor rotary_embedding(const Tensor& x, int64_t start, double theta);

// rows [R, d_h], row r at position positions[r] (i32 [R] on rows' device,
// each in [0, end)) -> [R, d_h]: the per-row form, for routed query rows.
Tensor rotary_embedding_rows(const Tensor& rows, const Tensor& positions, int64_t end, double theta);

// A layer's RoPE setting.  It rotates the queries and keys of self-attention
// only: cross-attention (AttentionInput::memory defined) ignores it, so one
// setting can serve a model's every attention layer.
struct Rope {
  bool on = false;
  double theta = 10000;
  bool applies_to(const AttentionInput& in) const { return on && !in.memory.defined(); }
};

// Throws, naming `layer`, unless a RoPE setting is usable: an even head width
// and θ > 0.  Nothing to check when rope is off.
void check_rope(const char* layer, const Rope& rope, int64_t head_dim);

// Self-attention queries q [B, h, T, d_h] rotated to the new tokens'
// positions kv.past .. kv.past+T-1 when the setting applies, else q.
Tensor rotate_queries(const AttentionInput& in, const KeysValues& kv, const Tensor& q, const Rope& rope);

// Projects the key/value source (memory, or x for self-attention) with
// `project` (source [B, S, d] -> k, v [B, h_kv, S, d_h]) and applies the
// cache: self-attention appends the new keys and values; cross-attention
// projects the memory on the first call only and reuses it afterwards.
// With `rope` on, self-attention's new keys are rotated to their positions
// (the cache length onwards) before they enter the cache.
using ProjectKeysValues = std::function<std::pair<Tensor, Tensor>(const Tensor& source)>;
KeysValues keys_values(const AttentionInput& in, const ProjectKeysValues& project, const Rope& rope = {});

// The attention op's options for an input: causal (self-attention only) with
// the cache offset, key padding, and dropout when training, drawn from
// `generator`: the model's generator (exact resume, data-parallel row shares).
AttentionOptions attention_options(const AttentionInput& in, const KeysValues& kv, double dropout, bool training,
                                   Generator& generator);

// [B, T, h * d_h] <-> [B, h, T, d_h]
Tensor split_heads(const Tensor& x, int64_t heads);
Tensor merge_heads(const Tensor& x);

// GQA: the attention ops take h_kv = h or 1; other groupings repeat each KV
// head for the h / h_kv query heads that share it.  kv: [B, h_kv, S, d_h] -> [B, h, S, d_h]
Tensor repeat_kv(const Tensor& kv, int64_t heads);

// ---- index tensors on the input's device ---------------------------------------
// Built with ops, so routing bookkeeping stays on the device (no copy to the
// host and back, each of which would synchronise a CUDA stream).

// 0, 1, ..., n-1: i32 [n] on `device`.  On CUDA one range per device is made
// once (and grown by doubling) and views of it are returned.
Tensor index_range(int64_t n, Device device);

// indices: i32 [N, K], distinct per row, in [0, n)  ->  [N, n] in `dtype`, 1
// at the chosen positions, 0 elsewhere.  Not differentiable.
Tensor k_hot(const Tensor& indices, int64_t n, DType dtype);

// indices: i32 [N, K] in [0, n)  ->  i32 [N*K], row * n + indices[row, j]:
// the positions of the chosen entries in a row-major [N, n] tensor flattened.
Tensor flat_indices(const Tensor& indices, int64_t n);

// Query/key pairs the attention core computes for T queries and S keys:
// T*S, or only the visible ones under a causal mask (queries at the end of S).
int64_t attended_pairs(int64_t T, int64_t S, bool causal);

}  // namespace headroom
