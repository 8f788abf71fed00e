#pragma once
// Matrix products on OpenBLAS (CPU) or cuBLAS (CUDA): matmul (torch.matmul
// semantics) and linear (a fully connected layer, PyTorch's weight layout).
// f32 and f64.  Transposed views are read in place (a transpose flag), not
// copied, so a.t() and the transposes in the backward pass cost nothing.
#include "headroom/core/tensor.h"

namespace headroom {

// Matrix product with torch.matmul semantics:
//   [K]          · [K]          -> ()            dot product
//   [M, K]       · [K, N]       -> [M, N]
//   [K]          · [K, N]       -> [N]           (a promoted to [1, K], then squeezed)
//   [M, K]       · [K]          -> [M]           (b promoted to [K, 1], then squeezed)
//   [..., M, K]  · [..., K, N]  -> [..., M, N]   batch dimensions broadcast
// A 1-D operand of a batched product is promoted the same way.  Both inputs
// must have one floating dtype.  Differentiable in both inputs.
Tensor matmul(const Tensor& a, const Tensor& b);

// Fully connected layer: y = x · weightᵀ + bias.
//   x: [..., in]   weight: [out, in]   bias: [out] or undefined   ->   [..., out]
// One GEMM over all rows of x (weight read transposed in place, bias added in
// the kernel).  Differentiable in x, weight and bias.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());

}  // namespace headroom
