// Strided copy and fill kernels for CUDA tensors (see copy.h).
#include "headroom/cuda/copy.h"
#include "headroom/cuda/indexing.cuh"
#include "headroom/cuda/runtime.h"

namespace headroom::cuda {

Layout make_layout(const Shape& shape, const Strides& strides, int64_t offset, const char* op) {
  Layout layout;
  layout.offset = offset;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;  // contributes nothing to any offset
    HEADROOM_CHECK(layout.dims < kMaxDims, "[", op, "] CUDA kernels take tensors of at most ", kMaxDims,
                   " non-unit dimensions, got shape ", shape_str(shape));
    layout.size[layout.dims] = shape[d];
    layout.stride[layout.dims] = strides[d];
    ++layout.dims;
  }
  return layout;
}

namespace {

template <typename S, typename D>
__global__ void copy_kernel(const S* src, Layout src_layout, D* dst, Layout dst_layout, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    dst[element_offset(dst_layout, i)] = static_cast<D>(src[element_offset(src_layout, i)]);
}

template <typename T>
__global__ void fill_kernel(T* dst, Layout layout, T value, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    dst[element_offset(layout, i)] = value;
}

// Element pointers of a tensor's storage (the layouts carry the offset).
template <typename T>
T* storage_data(const Tensor& t) {
  return static_cast<T*>(t.impl_shared()->storage->data);
}

struct CudaCopyKernels final : CopyKernels {
  void copy(const Tensor& src, const Strides& src_strides, const Tensor& dst) override {
    const int64_t n = dst.numel();
    if (n == 0) return;
    const int device = dst.device().index;
    DeviceGuard guard(device);
    Layout src_layout = make_layout(dst.shape(), src_strides, src.offset(), "copy");
    Layout dst_layout = make_layout(dst.shape(), dst.strides(), dst.offset(), "copy");
    dispatch_any(src.dtype(), [&](auto s) {
      dispatch_any(dst.dtype(), [&](auto d) {
        using S = decltype(s);
        using D = decltype(d);
        copy_kernel<S, D><<<capped_grid(n), kThreads, 0, stream(device)>>>(storage_data<S>(src), src_layout,
                                                                            storage_data<D>(dst), dst_layout, n);
      });
    });
    check_launch("copy_kernel");
  }

  void fill(const Tensor& dst, double value) override {
    const int64_t n = dst.numel();
    if (n == 0) return;
    const int device = dst.device().index;
    DeviceGuard guard(device);
    Layout layout = make_layout(dst.shape(), dst.strides(), dst.offset(), "fill_");
    dispatch_any(dst.dtype(), [&](auto zero) {
      using T = decltype(zero);
      // Masks hold 0 or 1, like the CPU fill.
      T typed = std::is_same<T, uint8_t>::value ? T(value != 0) : static_cast<T>(value);
      fill_kernel<T><<<capped_grid(n), kThreads, 0, stream(device)>>>(storage_data<T>(dst), layout, typed, n);
    });
    check_launch("fill_kernel");
  }
};

}  // namespace

CopyKernels& copy_kernels() {
  static CudaCopyKernels kernels;
  return kernels;
}

}  // namespace headroom::cuda
