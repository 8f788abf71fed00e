#pragma once
// The reductions' problem description, shared with the CPU kernels
// (ops/cpu/reduce.h), and the interface of a device's reduction kernels, one
// method per CPU kernel (CUDA: cuda/reduce.cu).  ops/reduce.cpp arranges every reduction as a contiguous
// [outer, n, inner] block: each of the outer * inner outputs reduces n
// elements that lie `inner` apart.  Each output is reduced by one thread
// block in a fixed order (per-thread strided partials, then a tree), so
// results are identical from run to run.
#include "headroom/core/tensor.h"

namespace headroom::kernels {

struct ReduceDims {
  int64_t outer = 1, n = 1, inner = 1;
};

enum class ReduceOp { sum, mean, logsumexp };
enum class Extreme { max, min };

struct ReduceKernels {
  virtual ~ReduceKernels() = default;
  // x: contiguous [outer, n, inner] (f32/f64)  ->  out: contiguous [outer, inner], x's dtype.
  // Accumulates in double.  Over n = 0: sum 0, mean NaN, logsumexp -inf.
  virtual void reduce(ReduceOp op, const Tensor& x, ReduceDims dims, const Tensor& out) = 0;
  // The first maximal (or minimal) element of each slice (a NaN counts as both;
  // the first NaN wins): its index into `indices` (i32 [outer, inner], contiguous)
  // and, when `values` is defined, its value.  n >= 1.
  virtual void reduce_arg(Extreme which, const Tensor& x, ReduceDims dims, const Tensor& values,
                          const Tensor& indices) = 0;
  // out[o, i, c] = Σ_{j <= i} x[o, j, c], or Σ_{j >= i} with `reverse`; x, out:
  // contiguous [outer, n, inner].  Accumulates in double, in the CPU's order.
  virtual void running_sum(const Tensor& x, ReduceDims dims, bool reverse, const Tensor& out) = 0;
  // grad (contiguous [outer, n, inner]) is zero except grad[o, indices[o, i], i] = g[o, i].
  // g, indices: contiguous [outer, inner].
  virtual void scatter_to_indices(const Tensor& g, const Tensor& indices, ReduceDims dims, const Tensor& grad) = 0;
};
}  // namespace headroom::kernels
