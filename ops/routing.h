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
struct RoutePlan {
  int64_t num_tokens = 0;    // N
  int64_t k = 0;             // slots per token
  int64_t num_segments = 0;  // E
  Tensor offsets;            // [E + 1]
  Tensor order;              // [N * k]
  Tensor position;           // [N * k]
  Tensor segment;            // [N * k]: the segment of grouped row r
  Tensor counts;             // [E]: rows per segment (empty segments allowed)

  int64_t rows() const { return num_tokens * k; }
  int64_t token_of_row(int64_t r) const;  // CPU helpers for loops and tests
  int64_t segment_of_row(int64_t r) const;
};

// indices: i32 [N, k] with values in [0, E).  Throws on out-of-range values.
RoutePlan route(const Tensor& indices, int64_t num_segments);

}  // namespace headroom
