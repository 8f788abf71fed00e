#pragma once
// Attention as one fused primitive: softmax(scale · Q·Kᵀ + mask) · V without
// storing the T×S score matrix (FlashAttention-2 style blocked online softmax:
// ops/cpu/attention.cpp, cuda/attention.cu), dense over all (token, head)
// pairs or routed over the pairs of a RoutePlan.  Both share one kernel per
// device; backward recomputes the scores from the saved per-row log-sum-exp.
// Deterministic: results do not depend on the thread count.  f32 and f64.
#include <cstdint>

#include "headroom/core/rng.h"
#include "headroom/core/tensor.h"
#include "headroom/ops/routing.h"

namespace headroom {

struct AttentionOptions {
  double scale = 0;  // 0 means 1/sqrt(d_h)
  bool causal = false;
  int64_t causal_offset = 0;       // query t sits at absolute position t + causal_offset (KV cache):
                                   // key s is visible to query t iff s <= t + causal_offset
  Tensor key_padding_mask;         // b8 [B, S], 1 = padded key (never attended); undefined = none
  double dropout = 0;              // drop probability on the attention probabilities, in [0, 1).
                                   // Applied whenever > 0: pass 0 for evaluation.
  Generator* generator = nullptr;  // dropout stream (default_generator() when null)
};
// A query that sees no key (all padded, or causal_offset hiding every key)
// gets output 0 and zero gradients.
//
// Dropout: the element (b, head, t, s) is dropped when uniform draw number
// first + ((b*h + head)*T + t)*S + s of the generator is < dropout, where
// first = generator.reserve(B*h*T*S) at the call; kept probabilities are
// scaled by 1/(1 - dropout).  Backward regenerates the same mask.

// q [B, h, T, d_h]; k, v [B, h_kv, S, d_h] with h_kv == h (multi-head) or
// h_kv == 1 (one K/V head shared by all query heads, as in MoA) → [B, h, T, d_h].
Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& opts = {});

// Attention computed only for the (query token, head) pairs of a routing plan.
//   plan.num_tokens = B*T tokens; token n is (b = n / T, t = n % T), T = seq_len
//   segment e of the plan is head e (plan.num_segments == h); with h_kv == 1
//   every head reads K/V head 0
//   q_rows [plan.rows(), d_h]: row r is the query of token plan.token_of_row(r)
//   for head plan.segment_of_row(r)
//   k, v [B, h_kv, S, d_h] → [plan.rows(), d_h], rows in the same order.
// Equal to attention() on the same queries, restricted to the selected pairs
// (dropout included: the mask index uses (b, head, t, s) as above).
Tensor routed_attention(const Tensor& q_rows, const Tensor& k, const Tensor& v, const RoutePlan& plan, int64_t seq_len,
                        const AttentionOptions& opts = {});

}  // namespace headroom
