// CPU GEMM kernels: cblas_sgemm / cblas_dgemm per matrix, OpenMP over batches.
#include "headroom/ops/cpu/matmul.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <limits>

#include "headroom/core/error.h"
#include "headroom/core/threading.h"

namespace headroom::cpu {
namespace {

// OpenBLAS's default interface takes 32-bit sizes.
int blas_int(int64_t value) {
  HEADROOM_CHECK(value <= std::numeric_limits<int>::max(), "[matmul] size ", value,
                 " exceeds the 32-bit sizes OpenBLAS accepts");
  return static_cast<int>(value);
}

CBLAS_TRANSPOSE blas_trans(const MatrixLayout& layout) {
  return layout.transposed ? CblasTrans : CblasNoTrans;
}

// c = alpha · a · b + beta · c, one overload per dtype.
void blas_gemm(const MatrixLayout& la, const MatrixLayout& lb, int m, int n, int k, const float* a,
               const float* b, float beta, float* c) {
  cblas_sgemm(CblasRowMajor, blas_trans(la), blas_trans(lb), m, n, k, 1.0f, a, blas_int(la.ld), b,
              blas_int(lb.ld), beta, c, n);
}
void blas_gemm(const MatrixLayout& la, const MatrixLayout& lb, int m, int n, int k, const double* a,
               const double* b, double beta, double* c) {
  cblas_dgemm(CblasRowMajor, blas_trans(la), blas_trans(lb), m, n, k, 1.0, a, blas_int(la.ld), b,
              blas_int(lb.ld), beta, c, n);
}

// One matrix: c = a · b (+ bias on every row).   a: [m, k]   b: [k, n]   c: [m, n]
template <typename T>
void gemm_one(int64_t m, int64_t n, int64_t k, const T* a, const MatrixLayout& la, const T* b,
              const MatrixLayout& lb, const T* bias, T* c) {
  if (m == 0 || n == 0) return;
  T beta = 0;
  if (bias) {  // start c at the bias and let the GEMM accumulate onto it (beta = 1)
    for (int64_t i = 0; i < m; ++i) std::copy(bias, bias + n, c + i * n);
    beta = 1;
  } else if (k == 0) {  // an empty sum; cblas may leave c untouched
    std::fill(c, c + m * n, T(0));
  }
  if (k == 0) return;
  blas_gemm(la, lb, blas_int(m), blas_int(n), blas_int(k), a, b, beta, c);
}

}  // namespace

template <typename T>
void batched_gemm(int64_t m, int64_t n, int64_t k, const MatrixStack<T>& a, const MatrixStack<T>& b,
                  const T* bias, T* c) {
  const int64_t batch = static_cast<int64_t>(a.offsets.size());
  auto one = [&](int64_t i) {
    gemm_one(m, n, k, a.data + a.offsets[i], a.layout, b.data + b.offsets[i], b.layout, bias,
             c + i * m * n);
  };
  // With enough matrices to keep every thread busy, one single-threaded GEMM
  // per thread; otherwise OpenBLAS threads each GEMM.  Inside the caller's own
  // parallel region, stay on the calling thread.
  if (omp_in_parallel() || batch < std::max(2, num_threads())) {
    for (int64_t i = 0; i < batch; ++i) one(i);
    return;
  }
  BlasSingleThreadGuard single_threaded_blas;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < batch; ++i) one(i);
}

template <typename T>
void sum_rows(const T* g, int64_t rows, int64_t cols, T* out) {
  std::fill(out, out + cols, T(0));
  for (int64_t i = 0; i < rows; ++i)  // row by row: contiguous reads and writes
    for (int64_t j = 0; j < cols; ++j) out[j] += g[i * cols + j];
}

template void batched_gemm<float>(int64_t, int64_t, int64_t, const MatrixStack<float>&,
                                  const MatrixStack<float>&, const float*, float*);
template void batched_gemm<double>(int64_t, int64_t, int64_t, const MatrixStack<double>&,
                                   const MatrixStack<double>&, const double*, double*);
template void sum_rows<float>(const float*, int64_t, int64_t, float*);
template void sum_rows<double>(const double*, int64_t, int64_t, double*);

}  // namespace headroom::cpu
