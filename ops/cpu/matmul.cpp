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

CBLAS_TRANSPOSE blas_trans(const MatrixLayout& layout) { return layout.transposed ? CblasTrans : CblasNoTrans; }

// c = a · b + beta · c, one overload per dtype; c's rows are ldc apart.
void blas_gemm(const MatrixLayout& la, const MatrixLayout& lb, int m, int n, int k, const float* a, const float* b,
               float beta, float* c, int ldc) {
  cblas_sgemm(CblasRowMajor, blas_trans(la), blas_trans(lb), m, n, k, 1.0f, a, blas_int(la.ld), b, blas_int(lb.ld),
              beta, c, ldc);
}
void blas_gemm(const MatrixLayout& la, const MatrixLayout& lb, int m, int n, int k, const double* a, const double* b,
               double beta, double* c, int ldc) {
  cblas_dgemm(CblasRowMajor, blas_trans(la), blas_trans(lb), m, n, k, 1.0, a, blas_int(la.ld), b, blas_int(lb.ld), beta,
              c, ldc);
}

// One matrix: c = a · b (+ bias on every row).   a: [m, k]   b: [k, n]   c: [m, n], rows ldc apart
template <typename T>
void gemm_one(int64_t m, int64_t n, int64_t k, const T* a, const MatrixLayout& la, const T* b, const MatrixLayout& lb,
              const T* bias, T* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  T beta = 0;
  if (bias) {  // start c at the bias and let the GEMM accumulate onto it (beta = 1)
    for (int64_t i = 0; i < m; ++i) std::copy(bias, bias + n, c + i * ldc);
    beta = 1;
  } else if (k == 0) {  // an empty sum; cblas may leave c untouched
    for (int64_t i = 0; i < m; ++i) std::fill(c + i * ldc, c + i * ldc + n, T(0));
  }
  if (k == 0) return;
  blas_gemm(la, lb, blas_int(m), blas_int(n), blas_int(k), a, b, beta, c, blas_int(ldc));
}

// Part `part` of `parts` of one product, cut along the longer side of c into
// bands of whole rows (or columns): an independent GEMM on the calling thread.
template <typename T>
void gemm_part(int64_t part, int64_t parts, int64_t m, int64_t n, int64_t k, const T* a, const MatrixLayout& la,
               const T* b, const MatrixLayout& lb, const T* bias, T* c) {
  if (m >= n) {  // rows [r0, r1) of a and c
    const int64_t r0 = m * part / parts, r1 = m * (part + 1) / parts;
    gemm_one(r1 - r0, n, k, a + (la.transposed ? r0 : r0 * la.ld), la, b, lb, bias, c + r0 * n, n);
  } else {  // columns [c0, c1) of b and c
    const int64_t c0 = n * part / parts, c1 = n * (part + 1) / parts;
    gemm_one(m, c1 - c0, k, a, la, b + (lb.transposed ? c0 * lb.ld : c0), lb, bias ? bias + c0 : nullptr, c + c0, n);
  }
}

// Products smaller than this (multiply-adds) stay whole on the calling thread.
constexpr int64_t kMinSplitMultiplyAdds = int64_t(1) << 18;

}  // namespace

template <typename T>
void batched_gemm(int64_t m, int64_t n, int64_t k, const MatrixStack<T>& a, const MatrixStack<T>& b, const T* bias,
                  T* c) {
  const int64_t batch = static_cast<int64_t>(a.offsets.size());
  const int threads = num_threads();
  // Parts per matrix: enough for every thread to hold one.  Our own bands of
  // single-threaded GEMMs beat OpenBLAS's threading at every shape measured
  // (1.1x on [1024, 512] x [512, 512] at 2 threads, 1.2-1.4x with 136
  // columns, 2-3.8x on a router's 8), and keep one thread pool.
  const int64_t parts = m * n * k < kMinSplitMultiplyAdds ? 1 : (threads + batch - 1) / batch;
  auto item = [&](int64_t i) {
    const int64_t matrix = i / parts;
    gemm_part(i % parts, parts, m, n, k, a.data + a.offsets[matrix], a.layout, b.data + b.offsets[matrix], b.layout,
              bias, c + matrix * m * n);
  };
  const int64_t items = batch * parts;
  if (omp_in_parallel() || threads == 1 || items == 1) {  // inside the caller's region: stay on its thread
    for (int64_t i = 0; i < items; ++i) item(i);
    return;
  }
  BlasSingleThreadGuard single_threaded_blas;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < items; ++i) item(i);
}

template <typename T> void sum_rows(const T* g, int64_t rows, int64_t cols, T* out) {
  std::fill(out, out + cols, T(0));
  for (int64_t i = 0; i < rows; ++i)  // row by row: contiguous reads and writes
    for (int64_t j = 0; j < cols; ++j) out[j] += g[i * cols + j];
}

template void batched_gemm<float>(int64_t, int64_t, int64_t, const MatrixStack<float>&, const MatrixStack<float>&,
                                  const float*, float*);
template void batched_gemm<double>(int64_t, int64_t, int64_t, const MatrixStack<double>&, const MatrixStack<double>&,
                                   const double*, double*);
template void sum_rows<float>(const float*, int64_t, int64_t, float*);
template void sum_rows<double>(const double*, int64_t, int64_t, double*);

}  // namespace headroom::cpu
