#pragma once
// Vectorisable row primitives shared by the CPU kernels (softmax, logsumexp,
// attention): max, sum, an in-place exp that the compiler turns into SIMD
// code, and exp(x - row max) over blocks of rows.
#include <algorithm>
#include <cmath>
#include <cstdint>

namespace headroom::cpu {

// x[i] = exp(x[i]) in place.  The float version is a branch-free polynomial
// (Cephes expf, relative error ~1e-7) that the compiler vectorises; inputs
// below -87.3 (including -inf) give exactly 0, inputs above 88 saturate at
// e^88, and NaN gives NaN.  The double version calls std::exp.
void exp_inplace(float* x, int64_t n);
void exp_inplace(double* x, int64_t n);

// Clang starts each SIMD lane's private copy of a max reduction at
// numeric_limits::lowest(), GCC at -inf, so under Clang an all -inf row came
// out as -DBL_MAX; this reduction starts every lane at -inf in both.
#pragma omp declare reduction(max_from_neg_inf \
                              : float, double  \
                              : omp_out = omp_in > omp_out ? omp_in : omp_out) initializer(omp_priv = -INFINITY)

// max(init, x[0..n)).  Written as a comparison, not std::max: GCC vectorises
// only this form.
template <typename T> T max_of(const T* x, int64_t n, T init) {
  T m = init;
#pragma omp simd reduction(max_from_neg_inf : m)
  for (int64_t j = 0; j < n; ++j) m = x[j] > m ? x[j] : m;
  return m;
}

template <typename T> T sum_of(const T* x, int64_t n) {
  T s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t j = 0; j < n; ++j) s += x[j];
  return s;
}

// Row kernels (softmax, logsumexp) work on blocks of this many rows of n
// elements: about 2048 elements, which stay in L1, and enough rows that short
// rows (a router's 8 experts) still fill whole vectors in one exp call.
constexpr int64_t kMaxBlockRows = 256;
inline int64_t rows_per_block(int64_t n) {
  return std::clamp<int64_t>(2048 / std::max<int64_t>(n, 1), 1, kMaxBlockRows);
}

// For each row r of x [rows, n]: top[r] = the row's max and e[r, :] =
// exp(x[r, :] - top[r]), with one exp call for all rows.  A row of all -inf
// gets e = 0 (not exp(NaN)).
template <typename T> void exp_minus_row_max(const T* x, int64_t rows, int64_t n, T* e, T* top);

}  // namespace headroom::cpu
