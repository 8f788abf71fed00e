// CPU kernels of the routing family: selection, row gathers and their
// per-destination transposes, and the grouped (segment) GEMM.
#include "headroom/ops/cpu/routing.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "headroom/core/threading.h"

namespace headroom::cpu {
namespace {

// Loops over fewer elements than this stay on one thread: an OpenMP region
// costs microseconds, more than copying a few thousand floats.
constexpr int64_t kParallelElements = 1 << 14;

void gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t m, int64_t n, int64_t k, const float* a,
          int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, ta, tb, int(m), int(n), int(k), 1.0f, a, int(lda), b, int(ldb), 0.0f, c,
              int(ldc));
}
void gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t m, int64_t n, int64_t k, const double* a,
          int64_t lda, const double* b, int64_t ldb, double* c, int64_t ldc) {
  cblas_dgemm(CblasRowMajor, ta, tb, int(m), int(n), int(k), 1.0, a, int(lda), b, int(ldb), 0.0, c, int(ldc));
}

// Calls fn(e, first_row, rows) once per non-empty segment.  Segments run in
// parallel, heaviest first so the threads finish together, each with
// single-threaded OpenBLAS (performance.md §6.2: two independent one-thread
// GEMMs beat one two-thread GEMM at per-expert shapes).  A lone busy segment
// keeps all of OpenBLAS's threads instead.  Each segment writes only its own
// output, so the result does not depend on the schedule.
template <typename Fn>
void for_each_segment(const int32_t* offsets, int64_t segments, Fn&& fn) {
  std::vector<int64_t> busy;
  for (int64_t e = 0; e < segments; ++e)
    if (offsets[e + 1] > offsets[e]) busy.push_back(e);
  auto rows = [offsets](int64_t e) { return int64_t(offsets[e + 1]) - offsets[e]; };
  std::stable_sort(busy.begin(), busy.end(), [&](int64_t a, int64_t b) { return rows(a) > rows(b); });
  if (busy.size() == 1) {
    fn(busy[0], int64_t(offsets[busy[0]]), rows(busy[0]));
    return;
  }
  BlasSingleThreadGuard blas_single_thread;
  const int64_t n = int64_t(busy.size());
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t i = 0; i < n; ++i) fn(busy[i], int64_t(offsets[busy[i]]), rows(busy[i]));
}

}  // namespace

template <typename T>
void topk_indices(const T* x, int64_t rows, int64_t n, int64_t k, int32_t* indices) {
#pragma omp parallel if (rows * n > kParallelElements)
  {
    std::vector<int32_t> candidates(n);  // per thread, reused across rows
#pragma omp for
    for (int64_t row = 0; row < rows; ++row) {
      const T* v = x + row * n;
      // A strict weak order: NaN first, then larger values, then lower indices.
      auto ranks_before = [v](int32_t a, int32_t b) {
        const bool a_nan = std::isnan(v[a]), b_nan = std::isnan(v[b]);
        if (a_nan != b_nan) return a_nan;
        if (!a_nan && v[a] != v[b]) return v[a] > v[b];
        return a < b;
      };
      std::iota(candidates.begin(), candidates.end(), 0);
      std::partial_sort(candidates.begin(), candidates.begin() + k, candidates.end(), ranks_before);
      std::copy(candidates.begin(), candidates.begin() + k, indices + row * k);
    }
  }
}

template <typename T>
void take_along_rows(const T* src, const int32_t* index, int64_t rows, int64_t n, int64_t k, T* out) {
  for (int64_t row = 0; row < rows; ++row)
    for (int64_t j = 0; j < k; ++j) out[row * k + j] = src[row * n + index[row * k + j]];
}

template <typename T>
void put_along_rows(const T* src, const int32_t* index, int64_t rows, int64_t n, int64_t k, T* dst) {
  for (int64_t row = 0; row < rows; ++row)
    for (int64_t j = 0; j < k; ++j) dst[row * n + index[row * k + j]] += src[row * k + j];
}

template <typename T>
void gather_rows(const T* src, int64_t width, const int32_t* pair, int64_t group, const T* scale,
                 int64_t out_rows, T* out) {
#pragma omp parallel for if (out_rows * width > kParallelElements)
  for (int64_t r = 0; r < out_rows; ++r) {
    const T* from = src + (pair[r] / group) * width;  // from: [width]
    const T s = scale ? scale[pair[r]] : T(1);
    T* to = out + r * width;
    for (int64_t c = 0; c < width; ++c) to[c] = s * from[c];
  }
}

template <typename T>
void sum_rows(const T* src, int64_t width, const int32_t* starts, const int32_t* row, const T* weight,
              int64_t dests, T* out) {
#pragma omp parallel for if (int64_t(starts[dests]) * width > kParallelElements)
  for (int64_t d = 0; d < dests; ++d) {
    T* to = out + d * width;  // to: [width]
    std::fill(to, to + width, T(0));
    for (int64_t q = starts[d]; q < starts[d + 1]; ++q) {
      const T* from = src + int64_t(row[q]) * width;
      const T w = weight ? weight[q] : T(1);
      for (int64_t c = 0; c < width; ++c) to[c] += w * from[c];
    }
  }
}

template <typename T>
void row_dots(const T* a, const int32_t* a_row, const T* b, int64_t group, int64_t width, int64_t pairs,
              T* out) {
#pragma omp parallel for if (pairs * width > kParallelElements)
  for (int64_t p = 0; p < pairs; ++p) {
    const T* u = a + int64_t(a_row[p]) * width;
    const T* v = b + (p / group) * width;
    T dot = 0;
    for (int64_t c = 0; c < width; ++c) dot += u[c] * v[c];
    out[p] = dot;
  }
}

template <typename T>
void segment_matmul(const T* x, const T* w, const int32_t* offsets, int64_t segments, int64_t in,
                    int64_t out_features, bool transpose_w, T* out) {
  // Forward: [rows, in] · [in, out].  Transposed: [rows, out] · [in, out]ᵀ.
  const int64_t x_width = transpose_w ? out_features : in;
  const int64_t y_width = transpose_w ? in : out_features;
  for_each_segment(offsets, segments, [&](int64_t e, int64_t first, int64_t rows) {
    gemm(CblasNoTrans, transpose_w ? CblasTrans : CblasNoTrans, rows, y_width, x_width, x + first * x_width,
         x_width, w + e * in * out_features, out_features, out + first * y_width, y_width);
  });
}

template <typename T>
void segment_matmul_weight_grad(const T* x, const T* dy, const int32_t* offsets, int64_t segments, int64_t in,
                                int64_t out_features, T* dw) {
  for (int64_t e = 0; e < segments; ++e)  // a weight slice no row uses gets 0
    if (offsets[e + 1] == offsets[e])
      std::fill(dw + e * in * out_features, dw + (e + 1) * in * out_features, T(0));
  // dw[e]: [in, out] = x[seg]ᵀ [in, rows] · dy[seg] [rows, out]
  for_each_segment(offsets, segments, [&](int64_t e, int64_t first, int64_t rows) {
    gemm(CblasTrans, CblasNoTrans, in, out_features, rows, x + first * in, in, dy + first * out_features,
         out_features, dw + e * in * out_features, out_features);
  });
}

#define HEADROOM_ROUTING_FLOAT_KERNELS(T)                                                                    \
  template void topk_indices<T>(const T*, int64_t, int64_t, int64_t, int32_t*);                              \
  template void take_along_rows<T>(const T*, const int32_t*, int64_t, int64_t, int64_t, T*);                 \
  template void put_along_rows<T>(const T*, const int32_t*, int64_t, int64_t, int64_t, T*);                  \
  template void sum_rows<T>(const T*, int64_t, const int32_t*, const int32_t*, const T*, int64_t, T*);       \
  template void row_dots<T>(const T*, const int32_t*, const T*, int64_t, int64_t, int64_t, T*);              \
  template void segment_matmul<T>(const T*, const T*, const int32_t*, int64_t, int64_t, int64_t, bool, T*);  \
  template void segment_matmul_weight_grad<T>(const T*, const T*, const int32_t*, int64_t, int64_t, int64_t, \
                                              T*);
HEADROOM_ROUTING_FLOAT_KERNELS(float)
HEADROOM_ROUTING_FLOAT_KERNELS(double)
#undef HEADROOM_ROUTING_FLOAT_KERNELS

// index_select also moves integer tensors.
template void gather_rows<float>(const float*, int64_t, const int32_t*, int64_t, const float*, int64_t,
                                 float*);
template void gather_rows<double>(const double*, int64_t, const int32_t*, int64_t, const double*, int64_t,
                                  double*);
template void gather_rows<int32_t>(const int32_t*, int64_t, const int32_t*, int64_t, const int32_t*, int64_t,
                                   int32_t*);

}  // namespace headroom::cpu
