#pragma once
// The interface of a device's routing kernels (ops/routing.cpp calls them for
// tensors on a device other than the CPU; CUDA: cuda/routing.cu), and the
// grouped operand both backends take.  The methods mirror the CPU kernels of ops/cpu/routing.h,
// with tensors for pointers: every tensor argument is contiguous and on one
// device, outputs are allocated by the caller, "row" means a run of `width`
// consecutive elements.  Floating kernels take f32 and f64.  Every reduction
// runs per destination in a fixed order (no float atomics), and nothing here
// waits for the device, so a route plan and the grouped GEMMs over it queue
// up behind each other without a host synchronisation.
#include "headroom/core/rng.h"  // HEADROOM_HOST_DEVICE
#include "headroom/core/tensor.h"

namespace headroom::kernels {

// The rows a grouped GEMM reads: rows [R, width] in grouped order, or, with
// `order` (a plan's order [R], k slots per token), token rows [N, width] of
// which grouped row r is row order[r] / k.  ops/routing.cpp holds them as
// tensors; the kernels of either device take them as raw pointers (Raw).
struct GroupedRows {
  Tensor data;
  Tensor order = Tensor();
  int64_t k = 1;

  template <typename T> struct Raw {
    const T* data = nullptr;
    int64_t width = 0;
    const int32_t* order = nullptr;  // null: data is [R, width] in grouped order
    int64_t k = 1;
    HEADROOM_HOST_DEVICE const T* row(int64_t r) const { return data + (order ? int64_t(order[r] / k) : r) * width; }
  };
  // The rows as the kernels take them (data: [R or N, width], on the host or the device).
  template <typename T> Raw<T> raw() const { return {data.data<T>(), data.size(1), data_or_null<int32_t>(order), k}; }
};

// What a checked index selects, for the message of a bad one.
enum class IndexUse {
  route_segment,  // route(): index of token position / group, must be < limit segments
  select_row,     // index_select(): index at position, must be < the dimension's size `limit`
  put_column,     // put_along_rows(): index at position, must be < the row length `limit`
};

struct RoutingKernels {
  virtual ~RoutingKernels() = default;

  // ---- validation and the plan -------------------------------------------------
  // safe[i] = indices[i] when in [0, limit), else 0: the kernels after it stay
  // in bounds.  A bad index is reported without a host synchronisation: the
  // first one (lowest i) is recorded on the device, and a later call of this
  // method on the device throws it once the device has got that far (see
  // routing.cu).  It first throws any such error recorded by an earlier call.
  // indices, safe: i32 [n]
  virtual void check_indices(const Tensor& indices, int64_t limit, IndexUse use, int64_t group, const Tensor& safe) = 0;

  // The stable counting sort of route(): chosen: i32 [P] (pair p = token * k +
  // slot, values in [0, segments)) -> offsets [segments + 1], order, position,
  // segment [P], counts [segments], all i32.  Inside a segment the pairs keep
  // their order p.
  virtual void route(const Tensor& chosen, int64_t segments, const Tensor& offsets, const Tensor& order,
                     const Tensor& position, const Tensor& segment, const Tensor& counts) = 0;

  // ---- selection -----------------------------------------------------------------
  // As cpu::topk_indices: x: [rows, n] -> indices: i32 [rows, k], largest
  // first, ties to the lowest index, NaN above every number.
  virtual void topk_indices(const Tensor& x, int64_t rows, int64_t n, int64_t k, const Tensor& indices) = 0;
  // out[row, j] = src[row, index[row, j]].   src: [rows, n]  index, out: [rows, k]
  virtual void take_along_rows(const Tensor& src, const Tensor& index, int64_t rows, int64_t n, int64_t k,
                               const Tensor& out) = 0;
  // dst[row, index[row, j]] += src[row, j], j ascending (one thread per row: repeats add).
  virtual void put_along_rows(const Tensor& src, const Tensor& index, int64_t rows, int64_t n, int64_t k,
                              const Tensor& dst) = 0;

  // ---- row moves ---------------------------------------------------------------
  // As cpu::gather_rows, for each of `outer` blocks:
  //   out[o, r] = scale[pair[r]] * src[o, pair[r] / group]   (scale undefined = 1)
  // src: [outer, S, width]  pair: [R]  out: [outer, R, width].  f32, f64, i32.
  virtual void gather_rows(const Tensor& src, int64_t outer, int64_t width, const Tensor& pair, int64_t group,
                           const Tensor& scale, const Tensor& out) = 0;
  // As cpu::sum_rows, for each of `outer` blocks: out[o, d] = sum over q in
  // [starts[d], starts[d+1]), ascending, of weight[q] * src[o, row[q]]
  // (weight undefined = 1; starts undefined = every destination has `group`
  // consecutive entries, starts[d] = d * group).
  // src: [outer, S, width]  out: [outer, dests, width]
  virtual void sum_rows(const Tensor& src, int64_t outer, int64_t width, const Tensor& starts, int64_t group,
                        const Tensor& row, const Tensor& weight, int64_t dests, const Tensor& out) = 0;
  // out[p] = <a[a_row[p]], b[p / group]>.   a, b: [*, width]  a_row, out: [pairs]
  virtual void row_dots(const Tensor& a, const Tensor& a_row, const Tensor& b, int64_t group, int64_t width,
                        const Tensor& out) = 0;

  // ---- grouped GEMMs over a plan's segments (offsets: [E + 1], w: [E, in, out]) ----
  // out[r] = x[r] · w[e] for the rows r of each segment e (transpose_w: · w[e]ᵀ,
  // x rows `out` wide).  out: [R, out or in]
  virtual void segment_matmul(const GroupedRows& x, const Tensor& w, const Tensor& offsets, bool transpose_w,
                              const Tensor& out) = 0;
  // out[t] = Σ over slots j ascending of y[r] · w[segment of r], r = position[t*k + j]
  // (transpose_w: · w[e]ᵀ).   y: [R, in or out]  out: [tokens, out or in]
  virtual void segment_matmul_scatter(const Tensor& y, const Tensor& position, int64_t k, const Tensor& offsets,
                                      const Tensor& w, bool transpose_w, const Tensor& out) = 0;
  // dw[e] = x[seg e]ᵀ · dy[seg e], zero for empty segments.   x rows in wide,
  // dy rows out wide (either may be gathered)   dw: [E, in, out]
  virtual void segment_matmul_weight_grad(const GroupedRows& x, const GroupedRows& dy, const Tensor& offsets,
                                          const Tensor& dw) = 0;
};
}  // namespace headroom::kernels
