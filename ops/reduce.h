#pragma once
// Reductions along a list of dimensions.
//
// dims: the dimensions to reduce; negative values count from the end; an
// empty list reduces every dimension.  keepdim keeps each reduced dimension
// with size 1 (so the result broadcasts against x); otherwise they are removed.
//   x: [2, 3, 4]   sum(x, {1}): [2, 4]   sum(x, {1}, true): [2, 1, 4]
//   sum(x, {0, -1}): [3]   sum(x, {}): []
// Inputs are f32 or f64; values are accumulated in double.  All value
// reductions are differentiable; argmax and argmin return i32 indices.
#include <vector>

#include "headroom/core/tensor.h"

namespace headroom {

Tensor sum(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim = false);
Tensor sum(const Tensor& x);  // all elements: shape []
Tensor mean(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim = false);
Tensor mean(const Tensor& x);  // all elements: shape []

// Largest / smallest value (NaN if the slice holds one).  The gradient goes to
// the first extreme element of each slice (row-major over the reduced dims).
// The reduced dimensions must not be empty.
Tensor max(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim = false);
Tensor min(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim = false);
Tensor max(const Tensor& x);  // all elements: shape [], max(x, {})
Tensor min(const Tensor& x);  // all elements: shape [], min(x, {})

// sum((x - mean)^2) / (n - correction), n the number of reduced elements:
// correction = 1 is the unbiased sample variance, 0 the population variance.
// Requires n > correction.
Tensor var(const Tensor& x, const std::vector<int64_t>& dims, int64_t correction = 1, bool keepdim = false);

// log(sum(exp(x))), computed stably (no overflow for large x); -inf over an
// empty slice.  Its gradient is softmax(x) times the incoming gradient.
Tensor logsumexp(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim = false);

// Running sums along `dim` (PyTorch's cumsum): out has x's shape and
// out[..., i, ...] = Σ_{j <= i} x[..., j, ...], accumulated in double.  Its
// gradient is the incoming gradient's running sum taken from the other end.
//   x: [2, 3]   cumsum(x, 1)[r] = {x[r,0], x[r,0] + x[r,1], x[r,0] + x[r,1] + x[r,2]}
Tensor cumsum(const Tensor& x, int64_t dim);

// Index (i32) of the first largest / smallest element along `dim`: ties go
// to the lowest index.  Not differentiable.  The dimension must not be empty.
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor argmin(const Tensor& x, int64_t dim, bool keepdim = false);

}  // namespace headroom
