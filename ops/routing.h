#pragma once
// Routing primitives for conditional computation: top-k selection, the route
// plan that groups (token, slot) pairs by expert or head, and the gather /
// grouped-matmul / weighted-scatter ops that move rows through it.
#include "headroom/core/tensor.h"

namespace headroom {

// A route plan: the N*k (token, slot) pairs of a top-k routing, sorted by the
// segment (expert or head) each pair chose.  Built by a stable counting sort,
// so inside a segment the pairs stay in token order (then slot order).
//
//   pair p = token * k + slot            (row-major over indices [N, k])
//   grouped row r = 0 .. N*k-1           (segment-contiguous order)
//   rows of segment e are [offsets[e], offsets[e+1])
//   order[r]    = the pair at grouped row r
//   position[p] = the grouped row of pair p   (order and position are inverse)
//
// All tensors are i32 on the indices' device.  A plan is integers only: it has
// no gradient.
//
// Only route() builds a plan (the constructor is private and the fields
// const), so the invariants above hold and the ops index with a plan without
// a pass over it, on any device.  An op refuses a plan whose arrays were
// written in place after route() built them: their storage versions changed.
class RoutePlan {
 public:
  const int64_t num_tokens;    // N
  const int64_t k;             // slots per token
  const int64_t num_segments;  // E
  const Tensor offsets;        // [E + 1]
  const Tensor order;          // [N * k]
  const Tensor position;       // [N * k]
  const Tensor segment;        // [N * k]: the segment of grouped row r
  const Tensor counts;         // [E]: rows per segment (empty segments allowed)

  int64_t rows() const { return num_tokens * k; }
  int64_t token_of_row(int64_t r) const;  // CPU helpers for loops and tests, r in [0, rows())
  int64_t segment_of_row(int64_t r) const;
  // Throws unless op may use the plan with tensors on `device`: the plan lives
  // there and its arrays are as route() built them.
  void check_usable(const char* op, Device device) const;

 private:
  friend RoutePlan route(const Tensor& indices, int64_t num_segments);
  RoutePlan(int64_t num_tokens, int64_t k, int64_t num_segments, Tensor offsets, Tensor order, Tensor position,
            Tensor segment, Tensor counts);
  uint64_t versions() const;  // the sum of the arrays' storage versions, which only grow

  const uint64_t built_versions_;  // versions() when route() built the plan
};

// indices: i32 [N, k] with values in [0, E).  Throws on out-of-range values;
// on CUDA the check runs on the device without waiting for it, and the error
// is thrown by the next route() or index_select() on that device.
RoutePlan route(const Tensor& indices, int64_t num_segments);

// ---- selection ---------------------------------------------------------------

struct TopK {
  Tensor values;   // [..., k], x's dtype, sorted descending; differentiable
  Tensor indices;  // [..., k], i32 positions in the last dimension; no gradient
};

// The k largest entries along the last dimension of x [..., n], 1 <= k <= n.
// Ties go to the lowest index (on every device); NaN ranks above every number.
// Backward scatters the values' gradient to the selected positions (0 elsewhere).
TopK topk(const Tensor& x, int64_t k);

// The transpose of picking k entries per row: out [..., n] is 0 except
//   out[..., indices[..., j]] += values[..., j]   for j = 0..k-1 in order,
// as PyTorch's zeros(..., n).scatter_add_(-1, indices, values).  values: [..., k]
// floating; indices: i32 of values' shape, each in [0, n).  A top-k's values put
// back in place (MoA's gates as an [N, E] matrix); with values of ones, the
// k-hot mask of the indices.  Backward: dvalues[..., j] = dout[..., indices[..., j]].
Tensor put_along_rows(const Tensor& values, const Tensor& indices, int64_t n);

// PyTorch's index_select: out has x's shape with dimension `dim` replaced by
// indices.numel(), out[..., i, ...] = x[..., indices[i], ...].
// indices: i32, 0-d or 1-d, each in [0, x.size(dim)).  x: f32, f64 or i32.
// Backward adds the gradient rows of repeated indices per destination, in
// index order (a route plan over the indices; no atomics).
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& indices);

// ---- moving rows through a plan ----------------------------------------------
// gather_rows and scatter_add_rows are each other's transposes, and each one's
// backward is written with the other's kernel.  Both reduce per destination in
// a fixed order, so results are bitwise reproducible.

// x: [N, D]  ->  grouped [N*k, D], grouped row r = x[plan.token_of_row(r)].
// Backward: each token sums its k slot gradients in slot order (through
// plan.position).
Tensor gather_rows(const Tensor& x, const RoutePlan& plan);

// y_grouped: [N*k, D], gates: [N, k] of y's dtype (undefined = all ones)  ->  out [N, D],
//   out[t] = sum over j = 0..k-1 (in that order) of gates[t, j] * y_grouped[position[t*k + j]].
// Backward: dy_grouped[position[t*k + j]] = gates[t, j] * dout[t]  and
//           dgates[t, j] = <y_grouped[position[t*k + j]], dout[t]>.
Tensor scatter_add_rows(const Tensor& y_grouped, const Tensor& gates, const RoutePlan& plan);

// ---- grouped GEMM --------------------------------------------------------------

// x_grouped: [N*k, in], weight: [E, in, out] with E = plan.num_segments  ->  [N*k, out];
// the rows of segment e are multiplied by weight[e].  Empty segments are fine.
// Backward: dX[seg e] = dY[seg e] · weight[e]ᵀ,  dW[e] = X[seg e]ᵀ · dY[seg e]
// (0 for a slice no row uses).  The CPU kernel runs one GEMM per non-empty
// segment, segments in parallel.
Tensor segment_matmul(const Tensor& x_grouped, const Tensor& weight, const RoutePlan& plan);

// The grouped GEMM fused with the row moves around it: no k-fold [N*k, D]
// copy of token rows is written, read back or kept for backward:
//
// segment_matmul(gather_rows(x, plan), weight, plan) without the gathered
// copy.  x: [N, in] -> [N*k, out].  The CPU kernel gathers tiles of rows into
// a per-thread buffer before each GEMM; backward saves x, not the gathered
// rows, and sums each token's dX rows in segment order.
Tensor gather_segment_matmul(const Tensor& x, const Tensor& weight, const RoutePlan& plan);

// scatter_add_rows(segment_matmul(y_grouped, weight, plan), gates, plan)
// without the [N*k, out] products.  y_grouped: [N*k, in], gates: [N, k] of y's
// dtype (undefined = all ones) -> [N, out]; out[t] sums the gated products of
// token t's rows in segment order (not slot order), per block of tokens, so
// results do not depend on the thread count.  The CPU kernel applies each gate
// as it sums (CUDA scales y's rows first).  Backward gathers dout's rows tile
// by tile; the gates' gradient is <y[r], dout[t] · weight[e]ᵀ>.
Tensor segment_matmul_scatter(const Tensor& y_grouped, const Tensor& weight, const RoutePlan& plan,
                              const Tensor& gates = Tensor());

}  // namespace headroom
