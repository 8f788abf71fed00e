#pragma once
// CPU attention kernels: FlashAttention-2 style blocked online softmax over
// "query groups", shared by dense and routed attention.
//
// Both forms see the queries as a row matrix q [R, d_h].  A query group is a
// contiguous run of rows that belong to one (batch b, head) and attend to the
// keys of one K/V sequence; its rows are sorted by query position.
//   dense:  R = B*h*T, group (b, head) = rows [(b*h + head)*T, +T), position t
//   routed: R = plan rows, group = the rows of segment `head` whose token is in
//           batch b (rows of a segment are in token order), position token % T;
//           with K/V shared by all heads, the rows in token order instead
//           (ops/attention.cpp), group = batch b, each row's head in row_heads
// A group is cut into tiles of kQueryTile rows; a tile meets the keys in
// blocks of kKeyBlock.  With a causal mask a tile only visits the keys its
// last (latest) row can see, so blocks beyond the diagonal are skipped.  A
// tile of a few rows (a decoding step) meets all its keys at once instead,
// each row as two matrix-vector products.
//
// Forward saves the log-sum-exp of each row's scaled, masked scores (+inf for
// a row that sees no key: its output is 0 and its gradients are 0).  Backward
// recomputes P = exp(scores - lse) tile by tile; one thread owns a whole group
// (its dQ rows and its slice of dK/dV; with K/V shared by all heads, every
// group of a batch, in order), so no atomics are needed and results do not
// depend on the thread count.
#include <cstdint>

#include "headroom/ops/kernels/attention.h"

namespace headroom::cpu {

// 64 × 64 (measured at B=8, h=8, T=512, d_h=64: key blocks of 128–512 and
// query tiles of 32 or 128 were no faster forward and slower backward).
constexpr int64_t kQueryTile = 64;
constexpr int64_t kKeyBlock = 64;

using kernels::AttentionGroup;
using kernels::AttentionProblem;

// q [R, d_h]; k, v [B, h_kv, S, d_h] laid out as p.kv_strides says (rows of
// d_h contiguous; MoA's K and V are column slices of one projection); out
// [R, d_h]; lse [R]; all but k and v contiguous.  q, out and lse (and dout,
// dq below) are in the caller's row order: with p.row_of, a tile copies its
// rows in and out, so no pass reorders whole tensors.
template <typename T>
void attention_forward(const AttentionProblem& p, const T* q, const T* k, const T* v, T* out, T* lse);

// dout [R, d_h] → dq [R, d_h], dk, dv [B, h_kv, S, d_h] (contiguous, fully overwritten).
template <typename T>
void attention_backward(const AttentionProblem& p, const T* q, const T* k, const T* v, const T* out, const T* lse,
                        const T* dout, T* dq, T* dk, T* dv);

}  // namespace headroom::cpu
