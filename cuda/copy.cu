// Strided copy, accumulate and fill kernels for CUDA tensors: the CUDA
// backend's element walks (core/backend.h).
#include "headroom/cuda/kernels.h"
#include "headroom/cuda/indexing.cuh"
#include "headroom/cuda/backend.h"

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

// dst = src converted, or dst += src when Add.
template <bool Add, typename S, typename D>
__global__ void copy_kernel(const S* src, Layout src_layout, D* dst, Layout dst_layout, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    D& to = dst[element_offset(dst_layout, i)];
    const S from = src[element_offset(src_layout, i)];
    to = Add ? static_cast<D>(to + from) : static_cast<D>(from);
  }
}

template <typename T> __global__ void fill_kernel(T* dst, Layout layout, T value, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    dst[element_offset(layout, i)] = value;
}

// Element pointers of a tensor's storage (the layouts carry the offset).
template <typename T> T* storage_data(const Tensor& t) { return static_cast<T*>(t.impl_shared()->storage->data); }

template <bool Add, typename S, typename D>
void launch_copy(const Tensor& src, const Strides& src_strides, const Tensor& dst) {
  const int64_t n = dst.numel();
  if (n == 0) return;
  const int device = dst.device().index;
  DeviceGuard guard(device);
  Layout src_layout = make_layout(dst.shape(), src_strides, src.offset(), "copy");
  Layout dst_layout = make_layout(dst.shape(), dst.strides(), dst.offset(), "copy");
  copy_kernel<Add, S, D><<<capped_grid(n), kThreads, 0, stream(device)>>>(storage_data<S>(src), src_layout,
                                                                          storage_data<D>(dst), dst_layout, n);
  check_launch("copy_kernel");
}

}  // namespace

void copy(const Tensor& src, const Strides& src_strides, const Tensor& dst) {
  dispatch_any(src.dtype(), [&](auto s) {
    dispatch_any(dst.dtype(), [&](auto d) { launch_copy<false, decltype(s), decltype(d)>(src, src_strides, dst); });
  });
}

void accumulate(const Tensor& src, const Tensor& dst) {
  dispatch_floating(dst.dtype(), [&](auto zero) {
    using T = decltype(zero);
    launch_copy<true, T, T>(src, src.strides(), dst);
  });
}

void fill(const Tensor& dst, double value) {
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

}  // namespace headroom::cuda
