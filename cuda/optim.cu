// Optimizer updates and gradient-clipping reductions on the device (optim.h).
#include <algorithm>

#include "headroom/cuda/indexing.cuh"
#include "headroom/cuda/kernels.h"
#include "headroom/ops/kernels/optim.h"
#include "headroom/cuda/backend.h"

namespace headroom::cuda {

namespace {

// Blocks per tensor of the sum of squares: each writes one partial sum.
constexpr unsigned kPartialBlocks = 128;

template <typename T> __global__ void sgd_kernel(T* p, const T* g, T* buffer, kernels::SgdUpdate update, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    update.apply(p[i], g[i], buffer ? buffer + i : nullptr);
}

template <typename T> __global__ void adam_kernel(T* p, const T* g, T* m, T* v, kernels::AdamUpdate update, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    update.apply(p[i], g[i], m[i], v[i]);
}

// Sums the kThreads values of `shared` (a power of two) by a fixed tree; the
// total ends in shared[0].
__device__ void block_sum(double* shared) {
  for (unsigned stride = kThreads / 2; stride > 0; stride /= 2) {
    __syncthreads();
    if (threadIdx.x < stride) shared[threadIdx.x] += shared[threadIdx.x + stride];
  }
  __syncthreads();
}

// partials[blockIdx.x] = Σ x² over the elements this block visits.  Launched
// with kThreads threads per block.
template <typename T> __global__ void squares_kernel(const T* x, Layout layout, int64_t n, double* partials) {
  __shared__ double shared[kThreads];
  double sum = 0;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const double value = double(x[element_offset(layout, i)]);
    sum += value * value;
  }
  shared[threadIdx.x] = sum;
  block_sum(shared);
  if (threadIdx.x == 0) partials[blockIdx.x] = shared[0];
}

// *out = Σ values[0..n); one block of kThreads threads.
__global__ void total_kernel(const double* values, int64_t n, double* out) {
  __shared__ double shared[kThreads];
  double sum = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) sum += values[i];
  shared[threadIdx.x] = sum;
  block_sum(shared);
  if (threadIdx.x == 0) *out = shared[0];
}

template <typename T> __global__ void scale_kernel(T* x, Layout layout, double factor, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    T& value = x[element_offset(layout, i)];
    value = static_cast<T>(double(value) * factor);
  }
}

// Element pointer of a tensor's storage (a Layout carries the offset).
template <typename T> T* storage_data(const Tensor& t) { return static_cast<T*>(t.impl_shared()->storage->data); }

Layout layout_of(const Tensor& t, const char* op) { return make_layout(t.shape(), t.strides(), t.offset(), op); }

struct CudaOptimKernels final : kernels::OptimKernels {
  void sgd(const Tensor& param, const Tensor& grad, const Tensor& momentum_buffer,
           const kernels::SgdUpdate& update) override {
    launch_floating(param, param.numel(), "sgd_kernel", [&](auto zero, unsigned blocks, cudaStream_t s) {
      using T = decltype(zero);
      T* buffer = momentum_buffer.defined() ? momentum_buffer.data<T>() : nullptr;
      sgd_kernel<T><<<blocks, kThreads, 0, s>>>(param.data<T>(), grad.data<T>(), buffer, update, param.numel());
    });
  }

  void adam(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
            const kernels::AdamUpdate& update) override {
    launch_floating(param, param.numel(), "adam_kernel", [&](auto zero, unsigned blocks, cudaStream_t s) {
      using T = decltype(zero);
      adam_kernel<T><<<blocks, kThreads, 0, s>>>(param.data<T>(), grad.data<T>(), exp_avg.data<T>(),
                                                 exp_avg_sq.data<T>(), update, param.numel());
    });
  }

  // One partial per block of every tensor (a fixed number of blocks per
  // tensor size), then one block sums the partials in order: deterministic.
  Tensor sum_of_squares(const std::vector<Tensor>& tensors) override {
    HEADROOM_CHECK(!tensors.empty(), "[sum_of_squares] expected at least one tensor");
    const Device device = tensors[0].device();
    std::vector<unsigned> blocks;
    int64_t total_blocks = 0;
    for (const Tensor& t : tensors) {
      blocks.push_back(t.numel() == 0 ? 0 : std::min(grid_for(t.numel()), kPartialBlocks));
      total_blocks += blocks.back();
    }
    Tensor partials = Tensor::empty({std::max<int64_t>(total_blocks, 1)}, DType::f64, device);
    Tensor out = Tensor::empty({}, DType::f64, device);
    DeviceGuard guard(device.index);
    double* next = partials.data<double>();
    for (size_t i = 0; i < tensors.size(); ++i) {
      if (blocks[i] == 0) continue;
      const Tensor& t = tensors[i];
      dispatch_floating(t.dtype(), [&](auto zero) {
        using T = decltype(zero);
        squares_kernel<T><<<blocks[i], kThreads, 0, stream(device.index)>>>(
            storage_data<T>(t), layout_of(t, "sum_of_squares"), t.numel(), next);
      });
      check_launch("squares_kernel");
      next += blocks[i];
    }
    total_kernel<<<1, kThreads, 0, stream(device.index)>>>(partials.data<double>(), total_blocks, out.data<double>());
    check_launch("total_kernel");
    return out;
  }

  void scale_(const Tensor& x, double factor) override {
    launch_floating(x, x.numel(), "scale_kernel", [&](auto zero, unsigned blocks, cudaStream_t s) {
      using T = decltype(zero);
      scale_kernel<T><<<blocks, kThreads, 0, s>>>(storage_data<T>(x), layout_of(x, "scale_"), factor, x.numel());
    });
  }
};

}  // namespace

kernels::OptimKernels& optim_kernels() {
  static CudaOptimKernels kernels;
  return kernels;
}

}  // namespace headroom::cuda
