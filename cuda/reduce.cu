// CUDA reduction kernels (see reduce.h).  One kernel template walks the
// [outer, n, inner] block; the ops differ only in their reducer, as on the
// CPU (ops/cpu/reduce.cpp), plus a merge that joins two partial states.
//
// Work split: a block is (bx, by) threads.  Each column x owns one output
// j = (o, i); its by threads take the slice's elements r = y, y + by, ... in
// order, then a fixed tree over y merges the partials.  Consecutive outputs
// sit in consecutive columns, so when inner >= 32 a warp reads 32 adjacent
// elements (coalesced).  The order of every sum depends only on the shapes:
// results are identical from run to run.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "headroom/cuda/kernels.h"
#include "headroom/ops/kernels/reduce.h"
#include "headroom/cuda/backend.h"

namespace headroom::cuda {
namespace {

using kernels::Extreme;
using kernels::ReduceDims;
using kernels::ReduceOp;

// sum, and mean with scale = 1/n: double partials, as the CPU accumulates in double.
template <typename T> struct SumReducer {
  T* out;
  double scale;
  using State = double;
  __device__ State init() const { return 0; }
  __device__ void step(State& sum, T v, int64_t) const { sum += v; }
  __device__ State merge(State a, State b) const { return a + b; }
  __device__ void store(int64_t j, State sum) const { out[j] = static_cast<T>(sum * scale); }
};

// log(sum(exp(x))): a running max m and sum(exp(x - m)), rescaled when m
// grows (the CPU's one-pass step), and two partials merged at their larger max.
template <typename T> struct LogSumExpReducer {
  T* out;
  struct State {
    double max;
    double sum;  // stays 0 only while every element is -inf
  };
  __device__ State init() const { return {-INFINITY, 0}; }
  __device__ void step(State& s, T v, int64_t) const {
    if (v > s.max) {
      s.sum = s.sum * ::exp(s.max - v) + 1;
      s.max = v;
    } else if (v != -INFINITY) {  // a NaN lands here and makes the sum NaN
      s.sum += ::exp(v - s.max);
    }
  }
  // sum(exp(x - from)) re-expressed against `to` >= from (no inf - inf when they are equal).
  __device__ static double rescale(double sum, double from, double to) {
    return from == to ? sum : sum * ::exp(from - to);
  }
  __device__ State merge(State a, State b) const {
    const double max = a.max > b.max ? a.max : b.max;
    return {max, rescale(a.sum, a.max, max) + rescale(b.sum, b.max, max)};
  }
  __device__ void store(int64_t j, State s) const {
    out[j] = static_cast<T>(s.sum == 0 ? -INFINITY : s.max + ::log(s.sum));
  }
};

// The first maximal (or minimal) element and its index.  A NaN beats every
// number; between equals (two NaNs included) the lower index wins, so the
// merge order does not matter.
template <typename T, Extreme Which> struct ArgReducer {
  T* values;  // null when only the indices are wanted
  int32_t* indices;
  struct State {
    T best;
    int64_t index;  // -1: no element yet
  };
  __device__ State init() const { return {T(0), -1}; }
  __device__ static bool better(T v, T best) {
    if (best != best) return false;
    if (v != v) return true;
    return Which == Extreme::max ? v > best : v < best;
  }
  __device__ void step(State& s, T v, int64_t r) const {
    if (s.index < 0 || better(v, s.best)) s = {v, r};
  }
  __device__ State merge(State a, State b) const {
    if (b.index < 0) return a;
    if (a.index < 0) return b;
    if (better(b.best, a.best)) return b;
    if (better(a.best, b.best)) return a;
    return a.index < b.index ? a : b;
  }
  __device__ void store(int64_t j, State s) const {
    if (values) values[j] = s.best;
    indices[j] = static_cast<int32_t>(s.index);
  }
};

// The one reduction kernel.  x: contiguous [outer, n, inner].  blockDim.y is
// a power of two and blockDim.x * blockDim.y == kThreads.
template <typename T, typename Reducer> __global__ void reduce_kernel(const T* x, ReduceDims d, Reducer reducer) {
  using State = typename Reducer::State;
  __shared__ State partials[kThreads];  // [blockDim.y][blockDim.x]
  const int col = threadIdx.x, row = threadIdx.y, cols = blockDim.x;
  const int64_t j = blockIdx.x * int64_t(cols) + col;  // this column's output (o, i)
  const bool active = j < d.outer * d.inner;
  State state = reducer.init();
  if (active) {
    const T* slice = x + (j / d.inner) * d.n * d.inner + j % d.inner;  // element r: slice[r * inner]
    for (int64_t r = row; r < d.n; r += blockDim.y) reducer.step(state, slice[r * d.inner], r);
  }
  partials[row * cols + col] = state;
  __syncthreads();
  for (int half = blockDim.y / 2; half > 0; half /= 2) {
    if (row < half)
      partials[row * cols + col] = reducer.merge(partials[row * cols + col], partials[(row + half) * cols + col]);
    __syncthreads();
  }
  if (active && row == 0) reducer.store(j, partials[col]);
}

template <typename T, typename Reducer>
void launch_reduce(const char* name, const Tensor& x, ReduceDims d, Reducer reducer) {
  const int64_t outputs = d.outer * d.inner;
  if (outputs == 0) return;
  // Columns: up to 32 consecutive outputs (a warp's worth when inner allows,
  // for coalesced reads).  Rows: the partials per output; short slices trade
  // rows for columns so threads do not idle.
  int cols = 1;
  while (cols < 32 && cols * 2 <= d.inner) cols *= 2;
  int rows = kThreads / cols;
  while (rows > 1 && rows / 2 >= d.n) {
    rows /= 2;
    cols *= 2;
  }
  const int64_t blocks = (outputs + cols - 1) / cols;
  HEADROOM_CHECK(blocks <= INT32_MAX, "[", name, "] too many outputs for one launch: ", outputs);
  const int device = x.device().index;
  DeviceGuard guard(device);
  reduce_kernel<T><<<unsigned(blocks), dim3(cols, rows), 0, stream(device)>>>(x.data<T>(), d, reducer);
  check_launch(name);
}

// grad[o, r, i] = r == indices[o, i] ? g[o, i] : 0, one thread per element of grad.
template <typename T> __global__ void scatter_kernel(const T* g, const int32_t* indices, ReduceDims d, T* grad) {
  const int64_t total = d.outer * d.n * d.inner;
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total; e += step) {
    const int64_t i = e % d.inner, r = (e / d.inner) % d.n, o = e / (d.inner * d.n);
    const int64_t j = o * d.inner + i;
    grad[e] = indices[j] == r ? g[j] : T(0);
  }
}

// One thread per (o, c) line: n sequential steps, as the CPU adds them.
template <typename T> __global__ void running_sum_kernel(const T* x, ReduceDims d, bool reverse, T* out) {
  const int64_t lines = d.outer * d.inner;
  const int64_t step_size = int64_t(gridDim.x) * blockDim.x;
  for (int64_t line = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; line < lines; line += step_size) {
    const int64_t o = line / d.inner, c = line % d.inner;
    double sum = 0;
    for (int64_t step = 0; step < d.n; ++step) {
      const int64_t at = (o * d.n + (reverse ? d.n - 1 - step : step)) * d.inner + c;
      sum += double(x[at]);
      out[at] = T(sum);
    }
  }
}

struct CudaReduceKernels final : kernels::ReduceKernels {
  void reduce(ReduceOp op, const Tensor& x, ReduceDims dims, const Tensor& out) override {
    dispatch_floating(x.dtype(), [&](auto zero) {
      using T = decltype(zero);
      T* o = out.data<T>();
      if (op == ReduceOp::logsumexp) launch_reduce<T>("logsumexp", x, dims, LogSumExpReducer<T>{o});
      else launch_reduce<T>("sum", x, dims, SumReducer<T>{o, op == ReduceOp::mean ? 1.0 / double(dims.n) : 1.0});
    });
  }

  void reduce_arg(Extreme which, const Tensor& x, ReduceDims dims, const Tensor& values,
                  const Tensor& indices) override {
    dispatch_floating(x.dtype(), [&](auto zero) {
      using T = decltype(zero);
      T* v = values.defined() ? values.data<T>() : nullptr;
      int32_t* idx = indices.data<int32_t>();
      if (which == Extreme::max) launch_reduce<T>("max", x, dims, ArgReducer<T, Extreme::max>{v, idx});
      else launch_reduce<T>("min", x, dims, ArgReducer<T, Extreme::min>{v, idx});
    });
  }

  void running_sum(const Tensor& x, ReduceDims dims, bool reverse, const Tensor& out) override {
    // One thread per (o, c) line; no lines to run when n = 0.
    const int64_t lines = dims.n ? dims.outer * dims.inner : 0;
    launch_floating(x, lines, "running_sum_kernel", [&](auto zero, unsigned grid, cudaStream_t s) {
      using T = decltype(zero);
      running_sum_kernel<T><<<grid, kThreads, 0, s>>>(x.data<T>(), dims, reverse, out.data<T>());
    });
  }

  void scatter_to_indices(const Tensor& g, const Tensor& indices, ReduceDims dims, const Tensor& grad) override {
    const int64_t total = grad.numel();
    if (total == 0) return;
    const int device = grad.device().index;
    DeviceGuard guard(device);
    dispatch_floating(g.dtype(), [&](auto zero) {
      using T = decltype(zero);
      scatter_kernel<T><<<capped_grid(total), kThreads, 0, stream(device)>>>(g.data<T>(), indices.data<int32_t>(), dims,
                                                                             grad.data<T>());
    });
    check_launch("scatter_to_indices");
  }
};

}  // namespace

kernels::ReduceKernels& reduce_kernels() {
  static CudaReduceKernels kernels;
  return kernels;
}

}  // namespace headroom::cuda
