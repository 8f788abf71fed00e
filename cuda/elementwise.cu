// CUDA element-wise kernels: one broadcast map kernel (map_kernel) and the
// small device functors it applies.  Each functor mirrors its CPU twin in
// ops/cpu/elementwise.cpp formula for formula, so both devices agree to the
// last few ulps (the device's libm differs from glibc by an ulp or two).
// Math calls are spelled ::exp, ::log, ... so that headroom's Tensor ops of
// the same names can never hide CUDA's float and double overloads.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "headroom/cuda/elementwise.h"
#include "headroom/cuda/indexing.cuh"
#include "headroom/cuda/runtime.h"

namespace headroom::cuda {
namespace {

using cpu::BinaryOp;
using cpu::CompareOp;
using cpu::LogicalOp;
using cpu::UnaryArgs;
using cpu::UnaryOp;

// ---- operands: a data pointer and a layout over the output's shape -------------------

template <typename T>
struct Operand {
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
template <typename T>
Operand<T> operand(const Tensor& t, const Shape& shape, const char* op) {
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
  const unsigned blocks = std::min(grid_for(n), 65535u);  // grid-stride loop beyond that
  map_kernel<Out, Fn, In...><<<blocks, kThreads, 0, stream(device)>>>(fn, out.data<Out>(), n,
                                                                      operand<In>(in, out.shape(), name)...);
  check_launch(name);
}

// ---- binary ops: value, d/da, d/db (as ops/cpu/elementwise.cpp) ------------------------

struct Add {
  template <typename T> __device__ T operator()(T a, T b) const { return a + b; }
  template <typename T> __device__ T da(T, T) const { return 1; }
  template <typename T> __device__ T db(T, T) const { return 1; }
};

struct Sub {
  template <typename T> __device__ T operator()(T a, T b) const { return a - b; }
  template <typename T> __device__ T da(T, T) const { return 1; }
  template <typename T> __device__ T db(T, T) const { return -1; }
};

struct Mul {
  template <typename T> __device__ T operator()(T a, T b) const { return a * b; }
  template <typename T> __device__ T da(T, T b) const { return b; }
  template <typename T> __device__ T db(T a, T) const { return a; }
};

struct Div {
  template <typename T> __device__ T operator()(T a, T b) const { return a / b; }
  template <typename T> __device__ T da(T, T b) const { return 1 / b; }
  template <typename T> __device__ T db(T a, T b) const { return -a / (b * b); }
};

// PyTorch's conventions where a formula is 0 * inf: d/da = 0 when b == 0, and
// d/db = 0 when a == 0 and b >= 0.
struct Pow {
  template <typename T> __device__ T operator()(T a, T b) const { return ::pow(a, b); }
  template <typename T> __device__ T da(T a, T b) const { return b == 0 ? T(0) : b * ::pow(a, b - 1); }
  template <typename T> __device__ T db(T a, T b) const {
    return a == 0 && b >= 0 ? T(0) : ::pow(a, b) * ::log(a);
  }
};

// The winner takes the gradient, a tie splits it; a NaN in either input wins.
template <typename T>
__device__ T winner_share(bool wins, bool tie) {
  return wins ? T(1) : tie ? T(0.5) : T(0);
}

struct Maximum {
  template <typename T> __device__ T operator()(T a, T b) const { return a != a || a > b ? a : b; }
  template <typename T> __device__ T da(T a, T b) const { return winner_share<T>(a > b, a == b); }
  template <typename T> __device__ T db(T a, T b) const { return winner_share<T>(b > a, a == b); }
};

struct Minimum {
  template <typename T> __device__ T operator()(T a, T b) const { return a != a || a < b ? a : b; }
  template <typename T> __device__ T da(T a, T b) const { return winner_share<T>(a < b, a == b); }
  template <typename T> __device__ T db(T a, T b) const { return winner_share<T>(b < a, a == b); }
};

template <typename Body>
void with_binary(BinaryOp op, Body body) {
  switch (op) {
    case BinaryOp::add: return body(Add{});
    case BinaryOp::sub: return body(Sub{});
    case BinaryOp::mul: return body(Mul{});
    case BinaryOp::div: return body(Div{});
    case BinaryOp::pow: return body(Pow{});
    case BinaryOp::maximum: return body(Maximum{});
    case BinaryOp::minimum: return body(Minimum{});
  }
}

// The map functors of the binary kernels (no extended lambdas in this build).
template <typename F>
struct BinaryValue {
  F f;
  template <typename T> __device__ T operator()(T a, T b) const { return f(a, b); }
};

template <typename F>
struct BinaryGradA {
  F f;
  template <typename T> __device__ T operator()(T a, T b, T g) const { return g * f.da(a, b); }
};

template <typename F>
struct BinaryGradB {
  F f;
  template <typename T> __device__ T operator()(T a, T b, T g) const { return g * f.db(a, b); }
};

// ---- unary ops: value and derivative (as ops/cpu/elementwise.cpp) -----------------------

template <typename T>
__device__ T sigmoid_of(T x) {
  return 1 / (1 + ::exp(-x));
}

struct Neg {
  template <typename T> __device__ T operator()(T x) const { return -x; }
  template <typename T> __device__ T grad(T) const { return -1; }
};

struct Exp {
  template <typename T> __device__ T operator()(T x) const { return ::exp(x); }
  template <typename T> __device__ T grad(T x) const { return ::exp(x); }
};

struct Log {
  template <typename T> __device__ T operator()(T x) const { return ::log(x); }
  template <typename T> __device__ T grad(T x) const { return 1 / x; }
};

struct Sqrt {
  template <typename T> __device__ T operator()(T x) const { return ::sqrt(x); }
  template <typename T> __device__ T grad(T x) const { return T(0.5) / ::sqrt(x); }
};

struct Tanh {
  template <typename T> __device__ T operator()(T x) const { return ::tanh(x); }
  template <typename T> __device__ T grad(T x) const {
    T t = ::tanh(x);
    return 1 - t * t;
  }
};

struct Sigmoid {
  template <typename T> __device__ T operator()(T x) const { return sigmoid_of(x); }
  template <typename T> __device__ T grad(T x) const {
    T s = sigmoid_of(x);
    return s * (1 - s);
  }
};

struct Relu {
  template <typename T> __device__ T operator()(T x) const { return x > 0 ? x : T(0); }
  template <typename T> __device__ T grad(T x) const { return x > 0 ? T(1) : T(0); }
};

// x * Phi(x); derivative Phi(x) + x * phi(x).
struct GeluErf {
  template <typename T> __device__ static T cdf(T x) { return T(0.5) * (1 + ::erf(x * T(M_SQRT1_2))); }
  template <typename T> __device__ T operator()(T x) const { return x * cdf(x); }
  template <typename T> __device__ T grad(T x) const {
    const T density = T(0.5 * M_2_SQRTPI * M_SQRT1_2) * ::exp(T(-0.5) * x * x);
    return cdf(x) + x * density;
  }
};

// 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3).
struct GeluTanh {
  static constexpr double kScale = 0.7978845608028654;  // sqrt(2 / pi)
  static constexpr double kCubic = 0.044715;
  template <typename T> __device__ static T tanh_u(T x) {
    return ::tanh(T(kScale) * (x + T(kCubic) * x * x * x));
  }
  template <typename T> __device__ T operator()(T x) const { return T(0.5) * x * (1 + tanh_u(x)); }
  template <typename T> __device__ T grad(T x) const {
    const T t = tanh_u(x);
    const T du = T(kScale) * (1 + T(3 * kCubic) * x * x);
    return T(0.5) * (1 + t) + T(0.5) * x * (1 - t * t) * du;
  }
};

struct Silu {
  template <typename T> __device__ T operator()(T x) const { return x * sigmoid_of(x); }
  template <typename T> __device__ T grad(T x) const {
    T s = sigmoid_of(x);
    return s * (1 + x * (1 - s));
  }
};

struct Abs {
  template <typename T> __device__ T operator()(T x) const { return ::fabs(x); }
  template <typename T> __device__ T grad(T x) const { return x > 0 ? T(1) : x < 0 ? T(-1) : T(0); }
};

// std::min(std::max(x, min), max) spelled out, so a NaN passes through as on the CPU.
struct Clamp {
  double min, max;
  template <typename T> __device__ T operator()(T x) const {
    const T low = x < T(min) ? T(min) : x;
    return T(max) < low ? T(max) : low;
  }
  template <typename T> __device__ T grad(T x) const { return x >= T(min) && x <= T(max) ? T(1) : T(0); }
};

template <typename Body>
void with_unary(UnaryOp op, UnaryArgs args, Body body) {
  switch (op) {
    case UnaryOp::neg: return body(Neg{});
    case UnaryOp::exp: return body(Exp{});
    case UnaryOp::log: return body(Log{});
    case UnaryOp::sqrt: return body(Sqrt{});
    case UnaryOp::tanh: return body(Tanh{});
    case UnaryOp::sigmoid: return body(Sigmoid{});
    case UnaryOp::relu: return body(Relu{});
    case UnaryOp::gelu_erf: return body(GeluErf{});
    case UnaryOp::gelu_tanh: return body(GeluTanh{});
    case UnaryOp::silu: return body(Silu{});
    case UnaryOp::abs: return body(Abs{});
    case UnaryOp::clamp: return body(Clamp{args.min, args.max});
  }
}

template <typename F>
struct UnaryValue {
  F f;
  template <typename T> __device__ T operator()(T x) const { return f(x); }
};

template <typename F>
struct UnaryGrad {
  F f;
  template <typename T> __device__ T operator()(T x, T g) const { return g * f.grad(x); }
};

// ---- comparisons and masks -----------------------------------------------------------------

struct Eq { template <typename T> __device__ uint8_t operator()(T a, T b) const { return a == b; } };
struct Ne { template <typename T> __device__ uint8_t operator()(T a, T b) const { return a != b; } };
struct Lt { template <typename T> __device__ uint8_t operator()(T a, T b) const { return a < b; } };
struct Le { template <typename T> __device__ uint8_t operator()(T a, T b) const { return a <= b; } };
struct Gt { template <typename T> __device__ uint8_t operator()(T a, T b) const { return a > b; } };
struct Ge { template <typename T> __device__ uint8_t operator()(T a, T b) const { return a >= b; } };

template <typename Body>
void with_compare(CompareOp op, Body body) {
  switch (op) {
    case CompareOp::eq: return body(Eq{});
    case CompareOp::ne: return body(Ne{});
    case CompareOp::lt: return body(Lt{});
    case CompareOp::le: return body(Le{});
    case CompareOp::gt: return body(Gt{});
    case CompareOp::ge: return body(Ge{});
  }
}

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

struct CudaElementwiseKernels final : ElementwiseKernels {
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
      cpu::with_any(a.dtype(), [&](auto zero) {
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
    cpu::with_any(out.dtype(), [&](auto zero) {
      using T = decltype(zero);
      map_elements<T, uint8_t, T, T>("where", Select{}, out, mask, a, b);
    });
  }
};

}  // namespace

ElementwiseKernels& elementwise_kernels() {
  static CudaElementwiseKernels kernels;
  return kernels;
}

}  // namespace headroom::cuda
