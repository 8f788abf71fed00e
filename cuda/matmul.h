#pragma once
// CUDA matrix products on cuBLAS: the device counterparts of ops/cpu/matmul.h,
// so that ops/matmul.cpp reads the same for both devices.  No CUDA headers here.
#include <cstdint>
#include <vector>

#include "headroom/core/tensor.h"
#include "headroom/ops/cpu/matmul.h"

namespace headroom::cuda {

struct MatmulKernels {
  virtual ~MatmulKernels() = default;
  // c[i] = a[i] · b[i] (+ bias on every row) for each matrix i of the stacks,
  // as cpu::batched_gemm: matrix i of a starts a_offsets[i] elements after
  // a's first element and is read as `la` says (row-major, or transposed,
  // with leading dimension la.ld); likewise b.
  //   a[i]: [m, k]   b[i]: [k, n]   bias: [n] contiguous or undefined   c: [batch, m, n] contiguous
  // f32 uses TF32 tensor cores when cuda::tf32_enabled().
  virtual void batched_gemm(int64_t m, int64_t n, int64_t k, const Tensor& a,
                            const std::vector<int64_t>& a_offsets, const cpu::MatrixLayout& la,
                            const Tensor& b, const std::vector<int64_t>& b_offsets,
                            const cpu::MatrixLayout& lb, const Tensor& bias, const Tensor& c) = 0;
  // out[j] = sum over i of g[i, j], in a fixed order.   g: [rows, cols] contiguous   out: [cols]
  virtual void sum_rows(const Tensor& g, const Tensor& out, int64_t rows, int64_t cols) = 0;
};

MatmulKernels& matmul_kernels();  // throws without CUDA

}  // namespace headroom::cuda
