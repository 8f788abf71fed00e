#pragma once
// CPU GEMM kernels on OpenBLAS.  Matrices are row-major, as cblas reads them
// with CblasRowMajor: a matrix stored transposed (strides [1, ld]) is passed
// with CblasTrans instead of being copied.
#include <cstdint>
#include <vector>

#include "headroom/ops/kernels/matmul.h"

namespace headroom::cpu {

using kernels::MatrixLayout;
using kernels::MatrixStack;

// c[i] = a[i] · b[i] (+ bias on every row) for each matrix i of the stacks.
//   a[i]: [m, k]   b[i]: [k, n]   bias: [n] or nullptr   c: [batch, m, n] contiguous
// OpenMP runs over the matrices, each cut into bands of rows or columns when
// there are fewer matrices than threads; every band is one single-threaded
// OpenBLAS call.  Called inside an OpenMP parallel region, it runs on the
// calling thread.
template <typename T>
void batched_gemm(int64_t m, int64_t n, int64_t k, const MatrixStack<T>& a, const MatrixStack<T>& b, const T* bias,
                  T* c);

// out[j] = sum over i of g[i, j].   g: [rows, cols] contiguous   out: [cols]
template <typename T> void sum_rows(const T* g, int64_t rows, int64_t cols, T* out);

}  // namespace headroom::cpu
