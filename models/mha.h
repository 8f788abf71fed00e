#pragma once
// Dense multi-head attention (Vaswani et al. 2017), with optional grouped or
// multi-query key/value heads (kv_heads < heads).  MoH and MAE reuse its
// projections and its per-head weighting (project_out's head_weights).
//
//   q = x Wq, k = m Wk, v = m Wv            m = memory (or x)
//   q, k ← RoPE(q), RoPE(k)                 self-attention with rope on
//   H_j = softmax(q_j k_jᵀ / √d_h + mask) v_j   for every head j
//   out = concat_j(w_j · H_j) Wo + bo          w_j = 1 for plain MHA
#include <memory>

#include "headroom/core/rng.h"
#include "headroom/models/attention.h"
#include "headroom/models/layers.h"

namespace headroom {

struct MHAConfig {
  int64_t dim = 0;          // d
  int64_t heads = 0;        // h
  int64_t kv_heads = 0;     // h_kv: 0 or h = MHA, 1 = MQA, otherwise GQA (divides h)
  bool bias = true;         // biases on the four projections
  double attn_dropout = 0;  // on the attention probabilities, training only
  // d_h, the width of each head; 0 = d / h (then h must divide d).  The
  // projections are q [h·d_h, d], k and v [h_kv·d_h, d], o [d, h·d_h].
  int64_t head_dim = 0;
  // Rotary position embedding of self-attention's queries and keys (see
  // attention.h; cross-attention ignores it).  Needs an even d_h.
  bool rope = false;
  double rope_theta = 10000;
};

class MultiHeadAttention : public Attention {
 public:
  explicit MultiHeadAttention(const MHAConfig& config, Generator& gen = default_generator());

  AttentionOutput forward(const AttentionInput& in) override;
  std::string kind() const override { return "mha"; }
  std::string summary() const override;  // e.g. "mha: 4 heads of width 16, 2 KV heads"
  int64_t macs(int64_t T, int64_t S, bool causal) const override;

  // The pieces, for methods built on MHA:
  Tensor queries(const Tensor& x) const;  // [B, T, d] -> [B, h, T, d_h], before any rotation
  // [B, h_kv, S, d_h], cache applied; self-attention's keys rotated when rope is on.
  KeysValues keys_values(const AttentionInput& in) const;
  Rope rope() const { return {config.rope, config.rope_theta}; }
  Tensor head_outputs(const AttentionInput& in);  // H: [B, h, T, d_h]
  // head_weights: [B, T, h] multiplies each head's output before the output
  // projection (undefined = all ones).  heads: [B, h, T, d_h] -> [B, T, d]
  Tensor project_out(const Tensor& heads, const Tensor& head_weights) const;

  MHAConfig config;  // resolved: kv_heads and head_dim set
  int64_t head_dim;  // d_h (= config.head_dim)
  std::shared_ptr<Linear> q_proj, k_proj, v_proj, o_proj;

 protected:
  Generator* generator_;  // attention dropout
};

}  // namespace headroom
