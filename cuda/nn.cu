// CUDA kernels of the neural-network family (see nn.h).  Row kernels give
// one block to a row: each thread walks the row with a stride of blockDim.x,
// then block_reduce combines the per-thread values in a fixed tree, so every
// result is a pure function of the inputs (no atomics, no scheduling
// dependence).  Column sums over rows (the norm's weight and bias gradients)
// run per column in row order, in chunks whose partial sums a second pass adds
// in chunk order.  Math calls are spelled ::exp, ::log, ::sqrt: CUDA's float
// and double overloads, never headroom's Tensor ops of the same names.
#include <algorithm>
#include <limits>

#include "headroom/core/rng.h"
#include "headroom/ops/kernels/matmul.h"
#include "headroom/cuda/kernels.h"
#include "headroom/ops/kernels/nn.h"
#include "headroom/cuda/backend.h"

namespace headroom::cuda {

namespace {

constexpr int kWarp = 32;
constexpr int64_t kRowsPerChunk = 64;  // rows per partial sum of the column reductions

template <typename T> __host__ __device__ constexpr T neg_inf() { return -std::numeric_limits<T>::infinity(); }

struct Sum {
  template <typename T> __device__ T operator()(T a, T b) const { return a + b; }
};
struct Max {  // as the CPU's max_of: NaN never wins a comparison
  template <typename T> __device__ T operator()(T a, T b) const { return b > a ? b : a; }
};

// Combines one value per thread with `op` in a fixed tree (shuffles within
// each warp, then across the warps' results) and returns the result to every
// thread.  blockDim.x: a multiple of 32, at most 1024; all threads must call.
template <typename T, typename Op> __device__ T block_reduce(T value, Op op, T identity) {
  __shared__ T partial[kWarp];
  for (int offset = kWarp / 2; offset > 0; offset /= 2) value = op(value, __shfl_down_sync(0xffffffffu, value, offset));
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  if (lane == 0) partial[warp] = value;
  __syncthreads();
  if (warp == 0) {
    value = lane < int(blockDim.x / kWarp) ? partial[lane] : identity;
    for (int offset = kWarp / 2; offset > 0; offset /= 2)
      value = op(value, __shfl_down_sync(0xffffffffu, value, offset));
    if (lane == 0) partial[0] = value;
  }
  __syncthreads();
  value = partial[0];
  __syncthreads();  // partial is reused by the block's next reduction
  return value;
}

// Sum over i in [0, n) of term(i), by the whole block: thread t adds
// t, t + blockDim.x, ... in order, then the fixed tree.
template <typename T, typename Term> __device__ T block_sum(int64_t n, Term term) {
  T acc = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) acc += term(i);
  return block_reduce(acc, Sum(), T(0));
}

template <typename T> __device__ T block_max(const T* x, int64_t n) {
  T top = neg_inf<T>();
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) top = Max()(top, x[i]);
  return block_reduce(top, Max(), neg_inf<T>());
}

// log(sum(exp(x))) of one row, shifted by the max; -inf for a row of all -inf.
template <typename T> __device__ T block_logsumexp(const T* x, int64_t n) {
  const T top = block_max(x, n);
  if (top == neg_inf<T>()) return top;
  return top + ::log(block_sum<T>(n, [&](int64_t i) { return ::exp(x[i] - top); }));
}

// Threads per block of a row kernel: a power of two in [32, 512] that
// covers the row when it is short.
unsigned row_threads(int64_t n) {
  unsigned threads = kWarp;
  while (threads < 512 && threads < n) threads *= 2;
  return threads;
}

unsigned row_grid(int64_t rows) { return unsigned(std::min<int64_t>(rows, kMaxGridStrideBlocks)); }

#define HEADROOM_GRID_STRIDE(i, n) \
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < (n); i += int64_t(gridDim.x) * blockDim.x)

// ---- softmax / log_softmax ---------------------------------------------------------

// One block per row.   x, y: [rows, n]
template <typename T> __global__ void softmax_forward_kernel(const T* x, T* y, int64_t rows, int64_t n, bool log_out) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * n;  // [n]
    T* yr = y + r * n;
    const T top = block_max(xr, n);
    if (top == neg_inf<T>()) {  // all -inf: probability 0 everywhere, not 0/0
      for (int64_t i = threadIdx.x; i < n; i += blockDim.x) yr[i] = log_out ? neg_inf<T>() : T(0);
      continue;
    }
    const T sum = block_sum<T>(n, [&](int64_t i) { return ::exp(xr[i] - top); });
    if (log_out) {
      const T lse = top + ::log(sum);
      for (int64_t i = threadIdx.x; i < n; i += blockDim.x) yr[i] = xr[i] - lse;
    } else {
      const T inv_sum = T(1) / sum;
      for (int64_t i = threadIdx.x; i < n; i += blockDim.x) yr[i] = ::exp(xr[i] - top) * inv_sum;
    }
  }
}

//   softmax:      dx = y * (dy - sum(dy * y))
//   log_softmax:  dx = dy - exp(y) * sum(dy)
template <typename T>
__global__ void softmax_backward_kernel(const T* y, const T* dy, T* dx, int64_t rows, int64_t n, bool log_out) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* yr = y + r * n;  // [n]
    const T* gr = dy + r * n;
    T* dr = dx + r * n;
    if (log_out) {
      const T total = block_sum<T>(n, [&](int64_t i) { return gr[i]; });
      for (int64_t i = threadIdx.x; i < n; i += blockDim.x) dr[i] = gr[i] - ::exp(yr[i]) * total;
    } else {
      const T dot = block_sum<T>(n, [&](int64_t i) { return gr[i] * yr[i]; });
      for (int64_t i = threadIdx.x; i < n; i += blockDim.x) dr[i] = yr[i] * (gr[i] - dot);
    }
  }
}

// ---- layer_norm / rms_norm ---------------------------------------------------------

// One block per row.   x, y: [rows, d]   weight, bias: [d] or null   mean, rstd: [rows]
template <typename T>
__global__ void norm_forward_kernel(const T* x, const T* weight, const T* bias, T* y, T* mean, T* rstd, int64_t rows,
                                    int64_t d, double eps, bool center) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * d;  // [d]
    T* yr = y + r * d;
    const T mu = center ? block_sum<T>(d, [&](int64_t i) { return xr[i]; }) / T(d) : T(0);
    // Two passes, as on the CPU: accurate when |mean| >> std.
    const T square_sum = block_sum<T>(d, [&](int64_t i) { return (xr[i] - mu) * (xr[i] - mu); });
    const T inv_std = T(1) / ::sqrt(square_sum / T(d) + T(eps));
    if (threadIdx.x == 0) mean[r] = mu, rstd[r] = inv_std;
    for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
      T value = (xr[i] - mu) * inv_std;
      if (weight) value *= weight[i];
      if (bias) value += bias[i];
      yr[i] = value;
    }
  }
}

// dx of one row per block.  With xhat = (x - mean) * rstd and gw = dy * weight:
//   dx = rstd * (gw - mean(gw) - xhat * mean(gw * xhat))
// (rms_norm drops the mean(gw) term, as its forward subtracts no mean).
template <typename T>
__global__ void norm_backward_dx_kernel(const T* x, const T* weight, const T* mean, const T* rstd, const T* dy, T* dx,
                                        int64_t rows, int64_t d, bool center) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * d;  // [d]
    const T* gr = dy + r * d;
    T* dr = dx + r * d;
    const T mu = mean[r], inv_std = rstd[r];
    auto gw = [&](int64_t i) { return weight ? gr[i] * weight[i] : gr[i]; };
    const T gw_mean = center ? block_sum<T>(d, gw) / T(d) : T(0);
    const T gw_xhat_mean = block_sum<T>(d, [&](int64_t i) { return gw(i) * (xr[i] - mu) * inv_std; }) / T(d);
    for (int64_t i = threadIdx.x; i < d; i += blockDim.x)
      dr[i] = inv_std * (gw(i) - gw_mean - (xr[i] - mu) * inv_std * gw_xhat_mean);
  }
}

// Partial weight and bias gradients: thread (chunk c, column j) adds the rows
// of chunk c in order.   partial_w, partial_b: [chunks, d] or null
//   partial_w[c, j] = sum over rows r of chunk c of dy[r, j] * xhat[r, j]
//   partial_b[c, j] = sum over rows r of chunk c of dy[r, j]
template <typename T>
__global__ void norm_param_partials_kernel(const T* x, const T* mean, const T* rstd, const T* dy, T* partial_w,
                                           T* partial_b, int64_t rows, int64_t d) {
  const int64_t c = blockIdx.x;
  const int64_t j = blockIdx.y * int64_t(blockDim.x) + threadIdx.x;
  if (j >= d) return;
  const int64_t r_end = std::min(rows, (c + 1) * kRowsPerChunk);
  T w = 0, b = 0;
  for (int64_t r = c * kRowsPerChunk; r < r_end; ++r) {
    const T g = dy[r * d + j];
    w += g * (x[r * d + j] - mean[r]) * rstd[r];
    b += g;
  }
  if (partial_w) partial_w[c * d + j] = w;
  if (partial_b) partial_b[c * d + j] = b;
}

// ---- dropout -------------------------------------------------------------------------

// The CPU's dropout_apply element for element: the same draw, the same comparison.
template <typename T>
__global__ void dropout_kernel(const T* x, T* y, int64_t n, uint64_t seed, uint64_t first, double p, T scale) {
  const Generator gen(seed);
  HEADROOM_GRID_STRIDE(i, n) {
    const bool keep = gen.uniform_at(first + uint64_t(i)) >= p;
    y[i] = keep ? x[i] * scale : T(0);
  }
}

// ---- embedding -------------------------------------------------------------------------

// out[i, j] = weight[indices[i], j].   weight: [V, d]   indices: [count]   out: [count, d]
template <typename T>
__global__ void embedding_forward_kernel(const T* weight, const int32_t* indices, T* out, int64_t count, int64_t d) {
  HEADROOM_GRID_STRIDE(i, count * d) out[i] = weight[int64_t(indices[i / d]) * d + i % d];
}

// Thread (segment s, column j) writes dweight[segment_row[s], j]: the sum of
// dy[p, j] over the segment's positions p, in ascending order (the CPU's order).
template <typename T>
__global__ void embedding_backward_kernel(const int32_t* order, const int32_t* segment_start,
                                          const int32_t* segment_row, const T* dy, T* dweight, int64_t d) {
  const int64_t s = blockIdx.x;
  const int64_t j = blockIdx.y * int64_t(blockDim.x) + threadIdx.x;
  if (j >= d) return;
  T acc = 0;
  for (int32_t k = segment_start[s]; k < segment_start[s + 1]; ++k) acc += dy[int64_t(order[k]) * d + j];
  dweight[int64_t(segment_row[s]) * d + j] = acc;
}

// ---- cross_entropy -------------------------------------------------------------------

// One block per row.   logits: [rows, classes]   targets, lse, row_loss: [rows]
//   loss = (1 - s) * (lse - logit[target]) + s * (lse - mean(logits)),  0 when ignored
template <typename T>
__global__ void cross_entropy_forward_kernel(const T* logits, const int32_t* targets, T* lse, T* row_loss, int64_t rows,
                                             int64_t classes, int64_t ignore_index, double smoothing) {
  const T s = T(smoothing);
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = logits + r * classes;  // [classes]
    const T lse_r = block_logsumexp(xr, classes);
    // mean over classes of -log p[c] = lse - mean(x); skipped when unused.
    const T smooth = s != T(0) ? lse_r - block_sum<T>(classes, [&](int64_t c) { return xr[c]; }) / T(classes) : T(0);
    if (threadIdx.x != 0) continue;
    lse[r] = lse_r;
    const int32_t target = targets[r];
    row_loss[r] = target == ignore_index ? T(0) : (T(1) - s) * (lse_r - xr[target]) + s * smooth;
  }
}

// One thread per logit.  dlogits: [rows, classes], 0 on ignored rows, else
//   g * (softmax - (1 - s) * onehot(target) - s / classes),
// with g = row_grad[r] * grad_scale (row_grad[0] when broadcast).
template <typename T>
__global__ void cross_entropy_backward_kernel(const T* logits, const int32_t* targets, const T* lse, const T* row_grad,
                                              bool broadcast_grad, double grad_scale, T* dlogits, int64_t rows,
                                              int64_t classes, int64_t ignore_index, double smoothing) {
  const T s = T(smoothing);
  const T uniform_share = s / T(classes);
  HEADROOM_GRID_STRIDE(i, rows * classes) {
    const int64_t r = i / classes, c = i % classes;
    const int32_t target = targets[r];
    if (target == ignore_index) {
      dlogits[i] = 0;
      continue;
    }
    const T g = T(double(row_grad[broadcast_grad ? 0 : r]) * grad_scale);
    T value = g * (::exp(logits[i] - lse[r]) - uniform_share);
    if (c == target) value -= g * (T(1) - s);
    dlogits[i] = value;
  }
}

// out[0] = scale * sum(values), in double.   values: [n]   one block
template <typename T> __global__ void sum_scaled_kernel(const T* values, int64_t n, double scale, T* out) {
  const double total = block_sum<double>(n, [&](int64_t i) { return double(values[i]); });
  if (threadIdx.x == 0) out[0] = T(total * scale);
}

// ---- the interface ----------------------------------------------------------------------

// Calls body(T{}) with T = float or double; launches go to `t`'s device.
template <typename Body> void on_device_of(const Tensor& t, const char* kernel, Body body) {
  const int device = t.device().index;
  DeviceGuard guard(device);
  dispatch_floating(t.dtype(), [&](auto zero) { body(zero, stream(device)); });
  check_launch(kernel);
}

template <typename T> T* ptr(const Tensor& t) { return data_or_null<T>(t); }

struct CudaNnKernels final : kernels::NnKernels {
  void softmax_forward(const Tensor& x, const Tensor& y, int64_t rows, int64_t n, bool log) override {
    if (rows == 0 || n == 0) return;
    on_device_of(x, "softmax_forward_kernel", [&](auto zero, cudaStream_t s) {
      using T = decltype(zero);
      softmax_forward_kernel<T><<<row_grid(rows), row_threads(n), 0, s>>>(ptr<T>(x), ptr<T>(y), rows, n, log);
    });
  }

  void softmax_backward(const Tensor& y, const Tensor& dy, const Tensor& dx, int64_t rows, int64_t n,
                        bool log) override {
    if (rows == 0 || n == 0) return;
    on_device_of(y, "softmax_backward_kernel", [&](auto zero, cudaStream_t s) {
      using T = decltype(zero);
      softmax_backward_kernel<T>
          <<<row_grid(rows), row_threads(n), 0, s>>>(ptr<T>(y), ptr<T>(dy), ptr<T>(dx), rows, n, log);
    });
  }

  void norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& y, const Tensor& mean,
                    const Tensor& rstd, int64_t rows, int64_t d, double eps, bool center) override {
    if (rows == 0) return;
    on_device_of(x, "norm_forward_kernel", [&](auto zero, cudaStream_t s) {
      using T = decltype(zero);
      norm_forward_kernel<T><<<row_grid(rows), row_threads(d), 0, s>>>(
          ptr<T>(x), ptr<T>(weight), ptr<T>(bias), ptr<T>(y), ptr<T>(mean), ptr<T>(rstd), rows, d, eps, center);
    });
  }

  void norm_backward(const Tensor& x, const Tensor& weight, const Tensor& mean, const Tensor& rstd, const Tensor& dy,
                     const Tensor& dx, const Tensor& dweight, const Tensor& dbias, int64_t rows, int64_t d,
                     bool center) override {
    if (dx.defined() && rows > 0) {
      on_device_of(x, "norm_backward_dx_kernel", [&](auto zero, cudaStream_t s) {
        using T = decltype(zero);
        norm_backward_dx_kernel<T><<<row_grid(rows), row_threads(d), 0, s>>>(
            ptr<T>(x), ptr<T>(weight), ptr<T>(mean), ptr<T>(rstd), ptr<T>(dy), ptr<T>(dx), rows, d, center);
      });
    }
    if (dweight.defined() || dbias.defined()) norm_param_grads(x, mean, rstd, dy, dweight, dbias, rows, d);
  }

  void dropout_apply(const Tensor& x, const Tensor& y, int64_t n, uint64_t seed, uint64_t first, double p,
                     double scale) override {
    if (n == 0) return;
    on_device_of(x, "dropout_kernel", [&](auto zero, cudaStream_t s) {
      using T = decltype(zero);
      dropout_kernel<T><<<capped_grid(n), kThreads, 0, s>>>(ptr<T>(x), ptr<T>(y), n, seed, first, p, T(scale));
    });
  }

  void embedding_forward(const Tensor& weight, const Tensor& indices, const Tensor& out, int64_t count,
                         int64_t d) override {
    if (count * d == 0) return;
    on_device_of(weight, "embedding_forward_kernel", [&](auto zero, cudaStream_t s) {
      using T = decltype(zero);
      embedding_forward_kernel<T>
          <<<capped_grid(count * d), kThreads, 0, s>>>(ptr<T>(weight), ptr<int32_t>(indices), ptr<T>(out), count, d);
    });
  }

  void embedding_backward(const Tensor& order, const Tensor& segment_start, const Tensor& segment_row, const Tensor& dy,
                          const Tensor& dweight, int64_t segments, int64_t d) override {
    if (segments == 0 || d == 0) return;
    HEADROOM_CHECK(segments <= std::numeric_limits<int32_t>::max(),
                   "[embedding] too many distinct indices: ", segments);
    const dim3 grid(unsigned(segments), grid_for(d));
    on_device_of(dy, "embedding_backward_kernel", [&](auto zero, cudaStream_t s) {
      using T = decltype(zero);
      embedding_backward_kernel<T><<<grid, kThreads, 0, s>>>(ptr<int32_t>(order), ptr<int32_t>(segment_start),
                                                             ptr<int32_t>(segment_row), ptr<T>(dy), ptr<T>(dweight), d);
    });
  }

  void cross_entropy_forward(const Tensor& logits, const Tensor& targets, const Tensor& lse, const Tensor& row_loss,
                             int64_t rows, int64_t classes, int64_t ignore_index, double smoothing) override {
    if (rows == 0) return;
    on_device_of(logits, "cross_entropy_forward_kernel", [&](auto zero, cudaStream_t s) {
      using T = decltype(zero);
      cross_entropy_forward_kernel<T><<<row_grid(rows), row_threads(classes), 0, s>>>(
          ptr<T>(logits), ptr<int32_t>(targets), ptr<T>(lse), ptr<T>(row_loss), rows, classes, ignore_index, smoothing);
    });
  }

  void cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& lse, const Tensor& row_grad,
                              double grad_scale, const Tensor& dlogits, int64_t rows, int64_t classes,
                              int64_t ignore_index, double smoothing) override {
    if (rows * classes == 0) return;
    const bool broadcast_grad = row_grad.numel() == 1;
    on_device_of(logits, "cross_entropy_backward_kernel", [&](auto zero, cudaStream_t s) {
      using T = decltype(zero);
      cross_entropy_backward_kernel<T><<<capped_grid(rows * classes), kThreads, 0, s>>>(
          ptr<T>(logits), ptr<int32_t>(targets), ptr<T>(lse), ptr<T>(row_grad), broadcast_grad, grad_scale,
          ptr<T>(dlogits), rows, classes, ignore_index, smoothing);
    });
  }

  void sum_scaled(const Tensor& values, int64_t n, double scale, const Tensor& out) override {
    on_device_of(out, "sum_scaled_kernel", [&](auto zero, cudaStream_t s) {
      using T = decltype(zero);
      sum_scaled_kernel<T><<<1, kThreads, 0, s>>>(ptr<T>(values), n, scale, ptr<T>(out));
    });
  }

 private:
  // dweight and dbias ([d], either undefined): per-chunk partial sums over
  // rows, then the chunks added in order by the GEMM family's sum_rows.
  static void norm_param_grads(const Tensor& x, const Tensor& mean, const Tensor& rstd, const Tensor& dy,
                               const Tensor& dweight, const Tensor& dbias, int64_t rows, int64_t d) {
    const int64_t chunks = (rows + kRowsPerChunk - 1) / kRowsPerChunk;
    auto partial_for = [&](const Tensor& grad) {  // [chunks, d]
      return grad.defined() ? Tensor::empty({chunks, d}, x.dtype(), x.device()) : Tensor();
    };
    Tensor partial_w = partial_for(dweight), partial_b = partial_for(dbias);
    if (chunks > 0) {
      const dim3 grid(unsigned(chunks), grid_for(d));
      on_device_of(x, "norm_param_partials_kernel", [&](auto zero, cudaStream_t s) {
        using T = decltype(zero);
        norm_param_partials_kernel<T><<<grid, kThreads, 0, s>>>(ptr<T>(x), ptr<T>(mean), ptr<T>(rstd), ptr<T>(dy),
                                                                ptr<T>(partial_w), ptr<T>(partial_b), rows, d);
      });
    }
    if (dweight.defined()) matmul_kernels().sum_rows(partial_w, dweight, chunks, d);
    if (dbias.defined()) matmul_kernels().sum_rows(partial_b, dbias, chunks, d);
  }
};

}  // namespace

kernels::NnKernels& nn_kernels() {
  static CudaNnKernels kernels;
  return kernels;
}

}  // namespace headroom::cuda
