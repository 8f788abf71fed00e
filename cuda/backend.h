#pragma once
// The CUDA backend's internals: error checks, the one stream and cuBLAS
// handle per device, and launch helpers.  Included only by cuda/*.cu and
// cuda/*.cpp (and bench_cuda, which times raw cuBLAS); the rest of headroom
// reaches the CUDA part only through what cuda/register.cpp registers.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "headroom/core/error.h"
#include "headroom/core/tensor.h"

// HEADROOM_CUDA_CHECK(cudaMemcpy(...)): throws headroom::Error with the
// expression, the CUDA error string and file:line when the call fails.
#define HEADROOM_CUDA_CHECK(expr)                                                         \
  do {                                                                                    \
    cudaError_t headroom_status_ = (expr);                                                \
    if (headroom_status_ != cudaSuccess)                                                  \
      HEADROOM_FAIL("[cuda] ", #expr, " failed: ", cudaGetErrorString(headroom_status_)); \
  } while (0)

#define HEADROOM_CUBLAS_CHECK(expr)                                                            \
  do {                                                                                         \
    cublasStatus_t headroom_status_ = (expr);                                                  \
    if (headroom_status_ != CUBLAS_STATUS_SUCCESS)                                             \
      HEADROOM_FAIL("[cublas] ", #expr, " failed: ", cublasGetStatusString(headroom_status_)); \
  } while (0)

namespace headroom::cuda {

// All work on a device goes to one stream, so a freed block can be reused by
// the next allocation without an event (the allocator relies on it).
cudaStream_t stream(int device);
cublasHandle_t cublas(int device);  // bound to stream(device)

// Makes `device` current for the scope, restoring the previous one after.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
};

constexpr int kThreads = 256;  // threads per block of the elementwise-style kernels

// Blocks of `threads` covering n items (at least 1, so an empty launch is valid).
inline unsigned grid_for(int64_t n, int threads = kThreads) {
  int64_t blocks = (n + threads - 1) / threads;
  return static_cast<unsigned>(blocks < 1 ? 1 : blocks);
}

// Blocks of a grid-stride loop over n items: grid_for(n), capped at 65535
// (the loop covers the rest), so any n launches.
constexpr unsigned kMaxGridStrideBlocks = 65535;
inline unsigned capped_grid(int64_t n) {
  const unsigned blocks = grid_for(n);
  return blocks < kMaxGridStrideBlocks ? blocks : kMaxGridStrideBlocks;
}

// After a launch: throws with the kernel's name if the launch failed.
void check_launch(const char* kernel);

// The launch of a grid-stride kernel over `items` work items of t's floating
// dtype: nothing when there are none, else launch(T{}, blocks, stream) on
// t's device (T = float or double), then the launch check.
template <typename Launch> void launch_floating(const Tensor& t, int64_t items, const char* kernel, Launch&& launch) {
  if (items == 0) return;
  const int device = t.device().index;
  DeviceGuard guard(device);
  dispatch_floating(t.dtype(), [&](auto zero) { launch(zero, capped_grid(items), stream(device)); });
  check_launch(kernel);
}

}  // namespace headroom::cuda
