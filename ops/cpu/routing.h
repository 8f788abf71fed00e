#pragma once
// CPU kernels of the routing family.  All pointers are to contiguous row-major
// buffers; "row" means a run of `width` consecutive elements.  Every reduction
// is a loop per destination in a fixed order, so results are bitwise
// reproducible and need no atomics.
#include <cstdint>

#include "headroom/ops/kernels/routing.h"

namespace headroom::cpu {

// Per row of x [rows, n]: the k largest entries, largest first, ties to the
// lowest index; NaN counts as larger than every number (as in PyTorch).
// indices: [rows, k]
template <typename T> void topk_indices(const T* x, int64_t rows, int64_t n, int64_t k, int32_t* indices);

// Per row: out[row, j] = src[row, index[row, j]].   src: [rows, n]  out, index: [rows, k]
template <typename T>
void take_along_rows(const T* src, const int32_t* index, int64_t rows, int64_t n, int64_t k, T* out);
// Its transpose: dst[row, index[row, j]] += src[row, j], j ascending (repeats add).
template <typename T>
void put_along_rows(const T* src, const int32_t* index, int64_t rows, int64_t n, int64_t k, T* dst);

// out[r] = scale[pair[r]] * src[pair[r] / group]  for r < out_rows (scale may be null = 1).
// A route plan's gather uses pair = order, group = k; index_select uses group = 1.
// src: [*, width]  out: [out_rows, width]  scale: [*]
template <typename T>
void gather_rows(const T* src, int64_t width, const int32_t* pair, int64_t group, const T* scale, int64_t out_rows,
                 T* out);

// Its transpose, pulled per destination: out[d] = sum over q in [starts[d], starts[d+1]),
// ascending, of weight[q] * src[row[q]] (weight may be null = 1).
// src: [*, width]  out: [dests, width]  starts: [dests + 1]  row, weight: [starts[dests]]
template <typename T>
void sum_rows(const T* src, int64_t width, const int32_t* starts, const int32_t* row, const T* weight, int64_t dests,
              T* out);

// out[p] = <a[a_row[p]], b[p / group]> for p < pairs.   a, b: [*, width]  out: [pairs]
template <typename T>
void row_dots(const T* a, const int32_t* a_row, const T* b, int64_t group, int64_t width, int64_t pairs, T* out);

// The gates' part of the gated scatter's backward, one pass over the grouped
// rows r (pair p = order[r]): dgates[p] = <y[r], dy[r]>, then dy[r] *= gates[p]
// and y_gated[r] = gates[p] · y[r].  dy holds the ungated gradient on entry.
// y, dy, y_gated: [rows, width]  order: [rows]  gates, dgates: [rows], pair order
template <typename T>
void gate_rows_backward(const T* y, const T* gates, const int32_t* order, int64_t rows, int64_t width, T* dy, T* dgates,
                        T* y_gated);

// ---- grouped GEMMs over the segments of a plan -------------------------------------
// offsets: [segments + 1]; w: [E, in, out], and "· w[e]" below reads as "· w[e]ᵀ"
// with transpose_w (then the operand rows are `out` wide and the results `in`).
// A grouped operand either is an [R, width] array, or, with `order` (a plan's
// order [R], k slots per token), lives as token rows [N, width]: grouped row r
// is token row order[r] / k.  Gathered rows are copied tile by tile into a
// per-thread buffer that stays in cache; no [R, width] copy is made.
using kernels::GroupedRows;

// out[r] = x[r] · w[e] for the rows r of each segment e.   out: [R, out or in]
template <typename T>
void segment_matmul(const GroupedRows::Raw<T>& x, const T* w, const int32_t* offsets, int64_t segments, int64_t in,
                    int64_t out_features, bool transpose_w, T* out);

// The transpose of gathering: out[t] = Σ over segments e ascending, rows r of e
// whose token order[r] / k is t, of gates[order[r]] · y[r] · w[e] (gates null:
// 1).  Parallel over blocks of tokens, each summing its rows in that fixed
// order (deterministic).  Every token has exactly k rows, as in a plan from
// route().   y: [R, out or in]  order: [R]  gates: [tokens * k]  out: [tokens, in or out]
template <typename T>
void segment_matmul_scatter(const T* y, const int32_t* order, int64_t k, const int32_t* offsets, int64_t segments,
                            const T* w, int64_t in, int64_t out_features, bool transpose_w, int64_t tokens, T* out,
                            const T* gates = nullptr);

// dw[e] = x[seg e]ᵀ · dy[seg e]; zero for empty segments.
//   x rows in wide, dy rows out wide (either may be gathered)   dw: [E, in, out]
template <typename T>
void segment_matmul_weight_grad(const GroupedRows::Raw<T>& x, const GroupedRows::Raw<T>& dy, const int32_t* offsets,
                                int64_t segments, int64_t in, int64_t out_features, T* dw);

}  // namespace headroom::cpu
