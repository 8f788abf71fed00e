#pragma once
// CUDA kernels of the element-wise family, one method per CPU kernel of
// ops/cpu/elementwise.h (same enums, same formulas).  The output is
// contiguous with the broadcast shape; every input is read through its own
// strides (0 on broadcast dimensions), so views and broadcasting need no
// copies.  All tensors are on one CUDA device; ops/elementwise.cpp validates
// dtypes and shapes and allocates the outputs.  No CUDA headers here.
#include "headroom/core/tensor.h"
#include "headroom/ops/cpu/elementwise.h"

namespace headroom::cuda {

struct ElementwiseKernels {
  virtual ~ElementwiseKernels() = default;
  // out = op(a, b).  a, b: broadcastable to out's shape, f32 or f64 like out.
  virtual void binary(cpu::BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) = 0;
  // grad = g * d op(a, b) / d input `wrt` (0: a, 1: b) at out's broadcast shape;
  // the caller sums it back to the input's shape (sum_to_shape, deterministic).
  virtual void binary_grad(cpu::BinaryOp op, int wrt, const Tensor& a, const Tensor& b, const Tensor& g,
                           const Tensor& grad) = 0;
  // out = op(x);  grad = g * op'(x).  All of one shape, f32 or f64.
  virtual void unary(cpu::UnaryOp op, cpu::UnaryArgs args, const Tensor& x, const Tensor& out) = 0;
  virtual void unary_grad(cpu::UnaryOp op, cpu::UnaryArgs args, const Tensor& x, const Tensor& g,
                          const Tensor& grad) = 0;
  // out (b8) = op(a, b); a, b of one dtype (any), broadcastable to out's shape.
  virtual void compare(cpu::CompareOp op, const Tensor& a, const Tensor& b, const Tensor& out) = 0;
  // Masks (b8) in, mask out.
  virtual void logical(cpu::LogicalOp op, const Tensor& a, const Tensor& b, const Tensor& out) = 0;
  virtual void logical_not(const Tensor& x, const Tensor& out) = 0;
  // out = mask ? a : b; mask b8, a and b of out's dtype (any), broadcastable to out's shape.
  virtual void where(const Tensor& mask, const Tensor& a, const Tensor& b, const Tensor& out) = 0;
};

ElementwiseKernels& elementwise_kernels();  // throws without CUDA

}  // namespace headroom::cuda
