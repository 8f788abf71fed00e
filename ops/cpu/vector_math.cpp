#include "headroom/ops/cpu/vector_math.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "headroom/core/cpu_dispatch.h"

namespace headroom::cpu {

HEADROOM_CPU_CLONES void exp_inplace(float* x, int64_t n) {
  // exp(x) = 2^k * exp(r), k = round(x / ln 2), r = x - k ln 2 in [-ln2/2, ln2/2]
  // (ln 2 split in two parts so r is exact), exp(r) by Cephes' degree-7 polynomial.
  // Separate passes over chunks, because GCC (with its default -ftrapping-math)
  // vectorises a clamp or a select alone but not one feeding the polynomial.
  constexpr float kLowest = -87.3f, kHighest = 88.0f;  // below kLowest: exactly 0
  constexpr float kRound = 12582912.0f;                // 1.5 * 2^23: adding and subtracting it rounds to an integer
  constexpr int64_t kChunk = 64;
  float clamped[kChunk], result[kChunk];
  for (int64_t i0 = 0; i0 < n; i0 += kChunk) {
    const int64_t m = std::min(kChunk, n - i0);
    float* xs = x + i0;
    // NaN: counted in a pass of its own (a NaN test inside the passes below
    // keeps them scalar), clamped to kLowest (max(kLowest, NaN) is kLowest) so
    // that the polynomial never converts it to int, and put back at the end.
    int nans = 0;
    for (int64_t i = 0; i < m; ++i) nans += xs[i] != xs[i];
    for (int64_t i = 0; i < m; ++i) clamped[i] = std::min(std::max(kLowest, xs[i]), kHighest);
    for (int64_t i = 0; i < m; ++i) {
      const float c = clamped[i];
      const float k = (c * 1.44269504088896341f + kRound) - kRound;
      const float r = c - k * 0.693359375f + k * 2.12194440e-4f;
      float poly = 1.9875691500e-4f;
      poly = poly * r + 1.3981999507e-3f;
      poly = poly * r + 8.3334519073e-3f;
      poly = poly * r + 4.1665795894e-2f;
      poly = poly * r + 1.6666665459e-1f;
      poly = poly * r + 5.0000001201e-1f;
      poly = poly * r * r + r + 1.0f;
      const int32_t bits = (static_cast<int32_t>(k) + 127) << 23;  // 2^k
      float two_k;
      std::memcpy(&two_k, &bits, sizeof two_k);
      result[i] = poly * two_k;
    }
    if (nans)
      for (int64_t i = 0; i < m; ++i) result[i] = xs[i] != xs[i] ? xs[i] : result[i];
    for (int64_t i = 0; i < m; ++i) xs[i] = xs[i] < kLowest ? 0.0f : result[i];
  }
}

void exp_inplace(double* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = std::exp(x[i]);
}

template <typename T> HEADROOM_CPU_CLONES void exp_minus_row_max(const T* x, int64_t rows, int64_t n, T* e, T* top) {
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * n;  // [n]
    T* er = e + r * n;
    top[r] = max_of(xr, n, T(-INFINITY));
    const T shift = top[r] == T(-INFINITY) ? T(0) : top[r];  // all -inf: exp(-inf - 0) = 0
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) er[j] = xr[j] - shift;
  }
  exp_inplace(e, rows * n);
}

template void exp_minus_row_max<float>(const float*, int64_t, int64_t, float*, float*);
template void exp_minus_row_max<double>(const double*, int64_t, int64_t, double*, double*);

}  // namespace headroom::cpu
