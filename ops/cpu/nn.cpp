// CPU kernels of the neural-network family.  Each row is independent, so the
// row loops run in parallel; inside a row, `omp simd` lets the compiler
// vectorise the reductions (max, sums), which it may not reorder on its own.
#include "headroom/ops/cpu/nn.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "headroom/core/parallel.h"
#include "headroom/core/rng.h"
#include "headroom/ops/cpu/vector_math.h"

namespace headroom::cpu {

namespace {

template <typename T> constexpr T kNegInf = -std::numeric_limits<T>::infinity();

template <typename T> T row_max(const T* x, int64_t n) { return max_of(x, n, kNegInf<T>); }

// log(sum(exp(x))), shifted by the row max so that exp never overflows.
// -inf for a row of all -inf.
template <typename T> T row_logsumexp(const T* x, int64_t n) {
  const T top = row_max(x, n);
  if (top == kNegInf<T>) return top;
  T sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int64_t i = 0; i < n; ++i) sum += std::exp(x[i] - top);
  return top + std::log(sum);
}

}  // namespace

// ---- softmax / log_softmax -------------------------------------------------

template <typename T> void softmax_forward(const T* x, T* y, int64_t rows, int64_t n, bool log) {
  const int64_t block = rows_per_block(n), blocks = (rows + block - 1) / block;
  parallel_for(blocks, rows * n > kParallelMin, [&](int64_t b) {
    const int64_t first = b * block, count = std::min(block, rows - first);
    T top[kMaxBlockRows];
    // y holds exp(x - top) until rescaled.
    exp_minus_row_max(x + first * n, count, n, y + first * n, top);
    for (int64_t r = first; r < first + count; ++r) {
      const T* xr = x + r * n;  // [n]
      T* yr = y + r * n;
      const T row_top = top[r - first];
      if (row_top == kNegInf<T>) {  // all -inf: probability 0 everywhere, not 0/0
        std::fill(yr, yr + n, log ? kNegInf<T> : T(0));
        continue;
      }
      const T sum = sum_of(yr, n);
      if (log) {
        const T lse = row_top + std::log(sum);
#pragma omp simd
        for (int64_t i = 0; i < n; ++i) yr[i] = xr[i] - lse;
      } else {
        const T inv_sum = T(1) / sum;
#pragma omp simd
        for (int64_t i = 0; i < n; ++i) yr[i] *= inv_sum;
      }
    }
  });
}

template <typename T> void softmax_backward(const T* y, const T* dy, T* dx, int64_t rows, int64_t n, bool log) {
  parallel_for(rows, rows * n > kParallelMin, [&](int64_t r) {
    const T* yr = y + r * n;  // [n]
    const T* gr = dy + r * n;
    T* dr = dx + r * n;
    if (log) {
      const T total = sum_of(gr, n);
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) dr[i] = gr[i] - std::exp(yr[i]) * total;
    } else {
      T dot = 0;
#pragma omp simd reduction(+ : dot)
      for (int64_t i = 0; i < n; ++i) dot += gr[i] * yr[i];
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) dr[i] = yr[i] * (gr[i] - dot);
    }
  });
}

// ---- layer_norm / rms_norm -------------------------------------------------

template <typename T>
void norm_forward(const T* x, const T* weight, const T* bias, T* y, T* mean, T* rstd, int64_t rows, int64_t d,
                  double eps, bool center) {
  parallel_for(rows, rows * d > kParallelMin, [&](int64_t r) {
    const T* xr = x + r * d;  // [d]
    T* yr = y + r * d;
    const T mu = center ? sum_of(xr, d) / T(d) : T(0);
    T square_sum = 0;  // two passes: accurate when |mean| >> std
#pragma omp simd reduction(+ : square_sum)
    for (int64_t i = 0; i < d; ++i) square_sum += (xr[i] - mu) * (xr[i] - mu);
    const T inv_std = T(1) / std::sqrt(square_sum / T(d) + T(eps));
    mean[r] = mu;
    rstd[r] = inv_std;
#pragma omp simd
    for (int64_t i = 0; i < d; ++i) yr[i] = (xr[i] - mu) * inv_std;
    if (weight) {
#pragma omp simd
      for (int64_t i = 0; i < d; ++i) yr[i] *= weight[i];
    }
    if (bias) {
#pragma omp simd
      for (int64_t i = 0; i < d; ++i) yr[i] += bias[i];
    }
  });
}

namespace {

// dx for one row.  With xhat = (x - mean) * rstd and gw = dy * weight:
//   dx = rstd * (gw - mean(gw) - xhat * mean(gw * xhat))
// (rms_norm drops the mean(gw) term, as its forward subtracts no mean).
template <typename T>
void norm_backward_row(const T* xr, const T* weight, T mu, T inv_std, const T* gr, T* dr, int64_t d, bool center) {
  T gw_sum = 0, gw_xhat_sum = 0;
#pragma omp simd reduction(+ : gw_sum, gw_xhat_sum)
  for (int64_t i = 0; i < d; ++i) {
    const T gw = weight ? gr[i] * weight[i] : gr[i];
    gw_sum += gw;
    gw_xhat_sum += gw * (xr[i] - mu) * inv_std;
  }
  const T gw_mean = center ? gw_sum / T(d) : T(0);
  const T gw_xhat_mean = gw_xhat_sum / T(d);
#pragma omp simd
  for (int64_t i = 0; i < d; ++i) {
    const T gw = weight ? gr[i] * weight[i] : gr[i];
    dr[i] = inv_std * (gw - gw_mean - (xr[i] - mu) * inv_std * gw_xhat_mean);
  }
}

constexpr int64_t kColumnBlock = 64;

}  // namespace

template <typename T>
void norm_backward(const T* x, const T* weight, const T* mean, const T* rstd, const T* dy, T* dx, T* dweight, T* dbias,
                   int64_t rows, int64_t d, bool center) {
  if (dx) {
    parallel_for(rows, rows * d > kParallelMin, [&](int64_t r) {
      norm_backward_row(x + r * d, weight, mean[r], rstd[r], dy + r * d, dx + r * d, d, center);
    });
  }
  if (!dweight && !dbias) return;
  // dweight = sum over rows of dy * xhat, dbias = sum over rows of dy.  Threads
  // own column blocks and add rows in order, so the sums are deterministic.
  const int64_t column_blocks = (d + kColumnBlock - 1) / kColumnBlock;
  parallel_for(column_blocks, rows * d > kParallelMin, [&](int64_t block) {
    const int64_t j0 = block * kColumnBlock, j1 = std::min(d, j0 + kColumnBlock);
    for (int64_t j = j0; j < j1; ++j) {
      if (dweight) dweight[j] = 0;
      if (dbias) dbias[j] = 0;
    }
    for (int64_t r = 0; r < rows; ++r) {
      const T* xr = x + r * d;
      const T* gr = dy + r * d;
      for (int64_t j = j0; j < j1; ++j) {
        if (dweight) dweight[j] += gr[j] * (xr[j] - mean[r]) * rstd[r];
        if (dbias) dbias[j] += gr[j];
      }
    }
  });
}

// ---- dropout ---------------------------------------------------------------

template <typename T>
void dropout_apply(const T* x, T* y, int64_t n, uint64_t seed, uint64_t first, double p, T scale) {
  const Generator gen(seed);
  parallel_for(n, n > kParallelMin, [&](int64_t i) {
    const bool keep = gen.uniform_at(first + uint64_t(i)) >= p;
    y[i] = keep ? x[i] * scale : T(0);
  });
}

// ---- embedding -------------------------------------------------------------

template <typename T>
void embedding_forward(const T* weight, const int32_t* indices, T* out, int64_t count, int64_t d) {
  parallel_for(count, count * d > kParallelMin, [&](int64_t i) {
    const T* row = weight + int64_t(indices[i]) * d;  // [d]
    std::copy(row, row + d, out + i * d);
  });
}

template <typename T>
void embedding_backward(const int32_t* indices, const T* dy, T* dweight, int64_t count, int64_t d) {
  for (int64_t i = 0; i < count; ++i) {
    T* row = dweight + int64_t(indices[i]) * d;  // [d]
    const T* g = dy + i * d;
#pragma omp simd
    for (int64_t j = 0; j < d; ++j) row[j] += g[j];
  }
}

// ---- cross_entropy ----------------------------------------------------------

template <typename T>
void cross_entropy_forward(const T* logits, const int32_t* targets, T* lse, T* row_loss, int64_t rows, int64_t classes,
                           int64_t ignore_index, double smoothing) {
  const T s = T(smoothing);
  parallel_for(rows, rows * classes > kParallelMin, [&](int64_t r) {
    const T* xr = logits + r * classes;  // [classes]
    lse[r] = row_logsumexp(xr, classes);
    if (targets[r] == ignore_index) {
      row_loss[r] = 0;
      return;
    }
    const T nll = lse[r] - xr[targets[r]];  // -log p[target]
    // mean over classes of -log p[c] = lse - mean(x); skipped when unused.
    const T smooth = s != T(0) ? lse[r] - sum_of(xr, classes) / T(classes) : T(0);
    row_loss[r] = (T(1) - s) * nll + s * smooth;
  });
}

template <typename T>
void cross_entropy_backward(const T* logits, const int32_t* targets, const T* lse, const T* row_grad,
                            bool broadcast_grad, double grad_scale, T* dlogits, int64_t rows, int64_t classes,
                            int64_t ignore_index, double smoothing) {
  const T s = T(smoothing);
  const T uniform_share = s / T(classes);
  parallel_for(rows, rows * classes > kParallelMin, [&](int64_t r) {
    const T* xr = logits + r * classes;  // [classes]
    T* dr = dlogits + r * classes;
    if (targets[r] == ignore_index) {
      std::fill(dr, dr + classes, T(0));
      return;
    }
    const T g = T(double(row_grad[broadcast_grad ? 0 : r]) * grad_scale), lse_r = lse[r];
#pragma omp simd
    for (int64_t c = 0; c < classes; ++c) dr[c] = g * (std::exp(xr[c] - lse_r) - uniform_share);
    dr[targets[r]] -= g * (T(1) - s);
  });
}

// ---- instantiations ----------------------------------------------------------

#define HEADROOM_NN_KERNELS(T)                                                                                     \
  template void softmax_forward<T>(const T*, T*, int64_t, int64_t, bool);                                          \
  template void softmax_backward<T>(const T*, const T*, T*, int64_t, int64_t, bool);                               \
  template void norm_forward<T>(const T*, const T*, const T*, T*, T*, T*, int64_t, int64_t, double, bool);         \
  template void norm_backward<T>(const T*, const T*, const T*, const T*, const T*, T*, T*, T*, int64_t, int64_t,   \
                                 bool);                                                                            \
  template void dropout_apply<T>(const T*, T*, int64_t, uint64_t, uint64_t, double, T);                            \
  template void embedding_forward<T>(const T*, const int32_t*, T*, int64_t, int64_t);                              \
  template void embedding_backward<T>(const int32_t*, const T*, T*, int64_t, int64_t);                             \
  template void cross_entropy_forward<T>(const T*, const int32_t*, T*, T*, int64_t, int64_t, int64_t, double);     \
  template void cross_entropy_backward<T>(const T*, const int32_t*, const T*, const T*, bool, double, T*, int64_t, \
                                          int64_t, int64_t, double);
HEADROOM_NN_KERNELS(float)
HEADROOM_NN_KERNELS(double)
#undef HEADROOM_NN_KERNELS

}  // namespace headroom::cpu
