#pragma once
// CUDA kernels of the reductions, one method per CPU kernel of
// ops/cpu/reduce.h.  ops/reduce.cpp arranges every reduction as a contiguous
// [outer, n, inner] block: each of the outer * inner outputs reduces n
// elements that lie `inner` apart.  Each output is reduced by one thread
// block in a fixed order (per-thread strided partials, then a tree), so
// results are identical from run to run.  No CUDA headers here.
#include "headroom/core/tensor.h"
#include "headroom/ops/cpu/reduce.h"

namespace headroom::cuda {

struct ReduceKernels {
  virtual ~ReduceKernels() = default;
  // x: contiguous [outer, n, inner] (f32/f64)  ->  out: contiguous [outer, inner], x's dtype.
  // Accumulates in double.  Over n = 0: sum 0, mean NaN, logsumexp -inf.
  virtual void reduce(cpu::ReduceOp op, const Tensor& x, cpu::ReduceDims dims, const Tensor& out) = 0;
  // The first maximal (or minimal) element of each slice (a NaN counts as both;
  // the first NaN wins): its index into `indices` (i32 [outer, inner], contiguous)
  // and, when `values` is defined, its value.  n >= 1.
  virtual void reduce_arg(cpu::Extreme which, const Tensor& x, cpu::ReduceDims dims, const Tensor& values,
                          const Tensor& indices) = 0;
  // out[o, i, c] = Σ_{j <= i} x[o, j, c], or Σ_{j >= i} with `reverse`; x, out:
  // contiguous [outer, n, inner].  Accumulates in double, in the CPU's order.
  virtual void running_sum(const Tensor& x, cpu::ReduceDims dims, bool reverse, const Tensor& out) = 0;
  // grad (contiguous [outer, n, inner]) is zero except grad[o, indices[o, i], i] = g[o, i].
  // g, indices: contiguous [outer, inner].
  virtual void scatter_to_indices(const Tensor& g, const Tensor& indices, cpu::ReduceDims dims,
                                  const Tensor& grad) = 0;
};

ReduceKernels& reduce_kernels();  // throws without CUDA

}  // namespace headroom::cuda
