#pragma once
// CPU kernels of the element-wise family.  Each op is a small functor in
// elementwise.cpp (its value and its derivative side by side), applied by one
// strided broadcast loop: the output is contiguous with the broadcast shape,
// and every input is read through its own strides (0 on broadcast dimensions),
// so views and broadcasting need no copies.
//
// Callers (ops/elementwise.cpp) validate dtypes, devices and shapes and
// allocate the outputs; the kernels only compute.
#include "headroom/core/tensor.h"
#include "headroom/ops/kernels/elementwise.h"

namespace headroom::cpu {

using kernels::BinaryOp;
using kernels::CompareOp;
using kernels::LogicalOp;
using kernels::UnaryArgs;
using kernels::UnaryOp;

// out = op(a, b).  a, b: broadcastable to out's shape, f32 or f64 like out.
void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out);
// grad = g * d op(a, b) / d input `wrt` (0: a, 1: b), at the broadcast shape of out.
// The caller sums it back to the input's shape.
void binary_grad(BinaryOp op, int wrt, const Tensor& a, const Tensor& b, const Tensor& g, const Tensor& grad);

// out = op(x);  grad = g * op'(x).  All of one shape.
void unary(UnaryOp op, UnaryArgs args, const Tensor& x, const Tensor& out);
void unary_grad(UnaryOp op, UnaryArgs args, const Tensor& x, const Tensor& g, const Tensor& grad);

// out (b8) = op(a, b); a, b of one dtype (any), broadcastable to out's shape.
void compare(CompareOp op, const Tensor& a, const Tensor& b, const Tensor& out);
// Masks (b8) in, mask out.
void logical(LogicalOp op, const Tensor& a, const Tensor& b, const Tensor& out);
void logical_not(const Tensor& x, const Tensor& out);
// out = mask ? a : b; mask b8, a and b of out's dtype, all broadcastable to out's shape.
void where(const Tensor& mask, const Tensor& a, const Tensor& b, const Tensor& out);

}  // namespace headroom::cpu
