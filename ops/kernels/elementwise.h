#pragma once
// The element-wise ops' enums, shared by both backends, and the interface of
// a device's element-wise kernels, one method per CPU kernel of
// ops/cpu/elementwise.h (same formulas: ops/kernels/elementwise_math.h; CUDA:
// cuda/elementwise.cu).  The output is contiguous with the broadcast shape;
// every input is read through its own strides (0 on broadcast dimensions), so
// views and broadcasting need no copies.  All tensors are on one device;
// ops/elementwise.cpp validates dtypes and shapes and allocates the outputs.
#include "headroom/core/tensor.h"

namespace headroom::kernels {

enum class BinaryOp { add, sub, mul, div, pow, maximum, minimum };
enum class UnaryOp { neg, exp, log, sqrt, tanh, sigmoid, relu, gelu_erf, gelu_tanh, silu, abs, clamp };
enum class CompareOp { eq, ne, lt, le, gt, ge };
enum class LogicalOp { logical_and, logical_or };

// The bounds of clamp; the other unary ops take no argument.
struct UnaryArgs {
  double min = 0, max = 0;
};

struct ElementwiseKernels {
  virtual ~ElementwiseKernels() = default;
  // out = op(a, b).  a, b: broadcastable to out's shape, f32 or f64 like out.
  virtual void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) = 0;
  // grad = g * d op(a, b) / d input `wrt` (0: a, 1: b) at out's broadcast shape;
  // the caller sums it back to the input's shape (sum_to_shape, deterministic).
  virtual void binary_grad(BinaryOp op, int wrt, const Tensor& a, const Tensor& b, const Tensor& g,
                           const Tensor& grad) = 0;
  // out = op(x);  grad = g * op'(x).  All of one shape, f32 or f64.
  virtual void unary(UnaryOp op, UnaryArgs args, const Tensor& x, const Tensor& out) = 0;
  virtual void unary_grad(UnaryOp op, UnaryArgs args, const Tensor& x, const Tensor& g, const Tensor& grad) = 0;
  // out (b8) = op(a, b); a, b of one dtype (any), broadcastable to out's shape.
  virtual void compare(CompareOp op, const Tensor& a, const Tensor& b, const Tensor& out) = 0;
  // Masks (b8) in, mask out.
  virtual void logical(LogicalOp op, const Tensor& a, const Tensor& b, const Tensor& out) = 0;
  virtual void logical_not(const Tensor& x, const Tensor& out) = 0;
  // out = mask ? a : b; mask b8, a and b of out's dtype (any), broadcastable to out's shape.
  virtual void where(const Tensor& mask, const Tensor& a, const Tensor& b, const Tensor& out) = 0;
};
}  // namespace headroom::kernels
