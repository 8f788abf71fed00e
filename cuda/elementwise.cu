// CUDA element-wise kernels: one broadcast map kernel (map_kernel) applying
// the functors of ops/kernels/elementwise_math.h, the same formulas the CPU kernels
// use, so both devices agree to the last few ulps (the device's libm differs
// from glibc by an ulp or two).
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "headroom/cuda/kernels.h"
#include "headroom/ops/kernels/elementwise.h"
#include "headroom/cuda/indexing.cuh"
#include "headroom/cuda/backend.h"
#include "headroom/ops/kernels/elementwise_math.h"

namespace headroom::cuda {
namespace {

using elementwise::with_binary;
using elementwise::with_compare;
using elementwise::with_unary;
using kernels::BinaryOp;
using kernels::CompareOp;
using kernels::LogicalOp;
using kernels::UnaryArgs;
using kernels::UnaryOp;

// ---- operands: a data pointer and a layout over the output's shape -------------------

template <typename T> struct Operand {
  const T* data;  // element 0 (offset applied)
  Layout layout;  // offsets relative to data
};

// Merges neighbouring dimensions that one stride can walk (stride[d - 1] ==
// stride[d] * size[d], broadcast runs of stride 0 included), so a contiguous
// operand becomes one dimension and needs no division per element.
Layout collapse(const Layout& in) {
  Layout out;
  out.offset = in.offset;
  for (int d = 0; d < in.dims; ++d) {
    const bool continues = out.dims > 0 && out.stride[out.dims - 1] == in.stride[d] * in.size[d];
    if (continues) {
      out.size[out.dims - 1] *= in.size[d];
      out.stride[out.dims - 1] = in.stride[d];
    } else {
      out.size[out.dims] = in.size[d];
      out.stride[out.dims] = in.stride[d];
      ++out.dims;
    }
  }
  return out;
}

// t read at every element of `shape` (t broadcast to it): 0 strides on new and size-1 dimensions.
template <typename T> Operand<T> operand(const Tensor& t, const Shape& shape, const char* op) {
  Strides strides(shape.size(), 0);
  const size_t lead = shape.size() - t.dim();
  for (int i = 0; i < t.dim(); ++i) strides[lead + i] = t.size(i) == 1 ? 0 : t.stride(i);
  return {t.data<T>(), collapse(make_layout(shape, strides, 0, op))};
}

// Offset of linear element i.  One dimension (after collapse) covers all n
// elements, so i indexes it directly.
__device__ inline int64_t operand_offset(const Layout& layout, int64_t i) {
  return layout.dims == 1 ? layout.offset + i * layout.stride[0] : element_offset(layout, i);
}

// out[i] = fn(in_0[i], in_1[i], ...) over out's elements; out contiguous.
template <typename Out, typename Fn, typename... In>
__global__ void map_kernel(Fn fn, Out* out, int64_t n, Operand<In>... in) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = fn(in.data[operand_offset(in.layout, i)]...);
}

// map_elements<Out, In...>(name, fn, out, inputs...): the element types are
// spelled out; Tensor::data checks them against the dtypes.
template <typename Out, typename... In, typename Fn, typename... Tensors>
void map_elements(const char* name, Fn fn, const Tensor& out, const Tensors&... in) {
  static_assert(sizeof...(In) == sizeof...(Tensors), "one element type per input");
  const int64_t n = out.numel();
  if (n == 0) return;
  const int device = out.device().index;
  DeviceGuard guard(device);
  map_kernel<Out, Fn, In...>
      <<<capped_grid(n), kThreads, 0, stream(device)>>>(fn, out.data<Out>(), n, operand<In>(in, out.shape(), name)...);
  check_launch(name);
}

// The map functors of the binary kernels (no extended lambdas in this build).
template <typename F> struct BinaryValue {
  F f;
  template <typename T> __device__ T operator()(T a, T b) const { return f(a, b); }
};

template <typename F> struct BinaryGradA {
  F f;
  template <typename T> __device__ T operator()(T a, T b, T g) const { return g * f.da(a, b); }
};

template <typename F> struct BinaryGradB {
  F f;
  template <typename T> __device__ T operator()(T a, T b, T g) const { return g * f.db(a, b); }
};

template <typename F> struct UnaryValue {
  F f;
  template <typename T> __device__ T operator()(T x) const { return f(x); }
};

template <typename F> struct UnaryGrad {
  F f;
  template <typename T> __device__ T operator()(T x, T g) const { return g * f.grad(x); }
};

// ---- masks (the comparisons are in ops/kernels/elementwise_math.h) -----------------------------------

struct Logical {
  bool both;  // and: both; or: either
  __device__ uint8_t operator()(uint8_t a, uint8_t b) const { return both ? (a && b) : (a || b); }
};

struct LogicalNot {
  __device__ uint8_t operator()(uint8_t x) const { return !x; }
};

struct Select {
  template <typename T> __device__ T operator()(uint8_t mask, T a, T b) const { return mask ? a : b; }
};

// ---- the interface --------------------------------------------------------------------------

struct CudaElementwiseKernels final : kernels::ElementwiseKernels {
  void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) override {
    with_binary(op, [&](auto f) {
      dispatch_floating(out.dtype(), [&](auto zero) {
        using T = decltype(zero);
        map_elements<T, T, T>("binary", BinaryValue<decltype(f)>{f}, out, a, b);
      });
    });
  }

  void binary_grad(BinaryOp op, int wrt, const Tensor& a, const Tensor& b, const Tensor& g,
                   const Tensor& grad) override {
    with_binary(op, [&](auto f) {
      using F = decltype(f);
      dispatch_floating(grad.dtype(), [&](auto zero) {
        using T = decltype(zero);
        if (wrt == 0) map_elements<T, T, T, T>("binary_grad", BinaryGradA<F>{f}, grad, a, b, g);
        else map_elements<T, T, T, T>("binary_grad", BinaryGradB<F>{f}, grad, a, b, g);
      });
    });
  }

  void unary(UnaryOp op, UnaryArgs args, const Tensor& x, const Tensor& out) override {
    with_unary(op, args, [&](auto f) {
      dispatch_floating(out.dtype(), [&](auto zero) {
        using T = decltype(zero);
        map_elements<T, T>("unary", UnaryValue<decltype(f)>{f}, out, x);
      });
    });
  }

  void unary_grad(UnaryOp op, UnaryArgs args, const Tensor& x, const Tensor& g, const Tensor& grad) override {
    with_unary(op, args, [&](auto f) {
      dispatch_floating(grad.dtype(), [&](auto zero) {
        using T = decltype(zero);
        map_elements<T, T, T>("unary_grad", UnaryGrad<decltype(f)>{f}, grad, x, g);
      });
    });
  }

  void compare(CompareOp op, const Tensor& a, const Tensor& b, const Tensor& out) override {
    with_compare(op, [&](auto f) {
      dispatch_any(a.dtype(), [&](auto zero) {
        using T = decltype(zero);
        map_elements<uint8_t, T, T>("compare", f, out, a, b);
      });
    });
  }

  void logical(LogicalOp op, const Tensor& a, const Tensor& b, const Tensor& out) override {
    map_elements<uint8_t, uint8_t, uint8_t>("logical", Logical{op == LogicalOp::logical_and}, out, a, b);
  }

  void logical_not(const Tensor& x, const Tensor& out) override {
    map_elements<uint8_t, uint8_t>("logical_not", LogicalNot{}, out, x);
  }

  void where(const Tensor& mask, const Tensor& a, const Tensor& b, const Tensor& out) override {
    dispatch_any(out.dtype(), [&](auto zero) {
      using T = decltype(zero);
      map_elements<T, uint8_t, T, T>("where", Select{}, out, mask, a, b);
    });
  }
};

}  // namespace

kernels::ElementwiseKernels& elementwise_kernels() {
  static CudaElementwiseKernels kernels;
  return kernels;
}

}  // namespace headroom::cuda
