#pragma once
// Shape and movement ops.  Most are Tensor methods (tensor.h: reshape, view,
// permute, transpose, slice, narrow, select, expand, unsqueeze, squeeze,
// flatten, contiguous, clone, to); the ones below take several tensors.
// All are differentiable; their backward is the inverse movement.
#include <vector>

#include "headroom/core/tensor.h"

namespace headroom {

// Joins tensors of equal shape except in `dim`.
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim = 0);
// Joins tensors of equal shape along a new dimension `dim`.
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim = 0);

// Sums a broadcast gradient back to `shape` (the reverse of broadcasting):
// leading dimensions are summed away, size-1 dimensions summed with keepdim.
// Not recorded by autograd; backward functions call it.
Tensor sum_to_shape(const Tensor& grad, const Shape& shape);

}  // namespace headroom
