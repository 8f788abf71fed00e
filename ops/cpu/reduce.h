#pragma once
// CPU kernels of the reductions.  ops/reduce.cpp arranges every reduction so
// that the input is a contiguous [outer, n, inner] block: each of the
// outer * inner outputs reduces n elements that lie `inner` apart.  One kernel
// template walks that block; the ops differ only in their accumulator.
#include "headroom/core/tensor.h"
#include "headroom/ops/kernels/reduce.h"

namespace headroom::cpu {

using kernels::Extreme;
using kernels::ReduceDims;
using kernels::ReduceOp;

// x: contiguous [outer, n, inner] (f32/f64)  ->  out: contiguous [outer, inner], x's dtype.
// Accumulates in double.  Over n = 0: sum 0, mean NaN, logsumexp -inf.
void reduce(ReduceOp op, const Tensor& x, ReduceDims dims, const Tensor& out);

// The first maximal (or minimal) element of each reduced slice: its index in
// [0, n) into `indices` (i32 [outer, inner]) and, when `values` is defined, its
// value.  A NaN counts as maximal and minimal (the first NaN wins).  n >= 1.
void reduce_arg(Extreme which, const Tensor& x, ReduceDims dims, const Tensor& values, const Tensor& indices);

// Running sums along n: out[o, i, c] = Σ_{j <= i} x[o, j, c], or Σ_{j >= i}
// with `reverse` (cumsum's backward).  x, out: contiguous [outer, n, inner],
// f32/f64; accumulates in double.
void running_sum(const Tensor& x, ReduceDims dims, bool reverse, const Tensor& out);

// The backward of reduce_arg: grad [outer, n, inner] is zero except
// grad[o, indices[o, i], i] = g[o, i].  g: contiguous [outer, inner].
void scatter_to_indices(const Tensor& g, const Tensor& indices, ReduceDims dims, const Tensor& grad);

}  // namespace headroom::cpu
