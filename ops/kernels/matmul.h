#pragma once
// The matrix products' operand layout, shared by the CPU kernels
// (ops/cpu/matmul.h, on OpenBLAS), and the interface of a device's matmul
// kernels (CUDA: cuda/matmul.cu, on cuBLAS).
#include <cstdint>
#include <vector>

#include "headroom/core/tensor.h"

namespace headroom::kernels {

// How a GEMM reads one [rows, cols] operand: element (i, j) is at
// data[i * ld + j], or at data[j * ld + i] when transposed.
struct MatrixLayout {
  bool transposed = false;
  int64_t ld = 1;
};

// A stack of equally shaped matrices in one buffer: matrix i starts at
// data + offsets[i] (offsets repeat for broadcast batch dimensions).
template <typename T> struct MatrixStack {
  const T* data = nullptr;
  std::vector<int64_t> offsets;
  MatrixLayout layout;
};

struct MatmulKernels {
  virtual ~MatmulKernels() = default;
  // c[i] = a[i] · b[i] (+ bias on every row) for each matrix i of the stacks,
  // as cpu::batched_gemm: matrix i of a starts a_offsets[i] elements after
  // a's first element and is read as `la` says (row-major, or transposed,
  // with leading dimension la.ld); likewise b.
  //   a[i]: [m, k]   b[i]: [k, n]   bias: [n] contiguous or undefined   c: [batch, m, n] contiguous
  // f32 may use TF32 tensor cores when allow_tf32() (core/backend.h).
  virtual void batched_gemm(int64_t m, int64_t n, int64_t k, const Tensor& a, const std::vector<int64_t>& a_offsets,
                            const MatrixLayout& la, const Tensor& b, const std::vector<int64_t>& b_offsets,
                            const MatrixLayout& lb, const Tensor& bias, const Tensor& c) = 0;
  // out[j] = sum over i of g[i, j], in a fixed order.   g: [rows, cols] contiguous   out: [cols]
  virtual void sum_rows(const Tensor& g, const Tensor& out, int64_t rows, int64_t cols) = 0;
};
}  // namespace headroom::kernels
