// CPU element-wise kernels: one broadcast loop (map_elements) and the small
// functors it applies.  Each functor holds an op's value and its derivative.
#include "headroom/ops/cpu/elementwise.h"

#include <array>
#include <cmath>
#include <cstdint>
#include <functional>
#include <tuple>
#include <utility>

namespace headroom::cpu {
namespace {

// Loops over fewer elements stay on one thread: starting a team costs more.
constexpr int64_t kParallelMin = 1 << 15;

// t's strides seen from `shape` (t broadcast to it): 0 on new and size-1 dimensions.
Strides broadcast_strides(const Tensor& t, const Shape& shape) {
  Strides strides(shape.size(), 0);
  const size_t lead = shape.size() - t.dim();
  for (int i = 0; i < t.dim(); ++i) strides[lead + i] = t.size(i) == 1 ? 0 : t.stride(i);
  return strides;
}

// Offset of row `row` (a row-major index over every dimension but the last)
// in an operand with `strides`.
int64_t row_offset(int64_t row, const Shape& shape, const Strides& strides) {
  int64_t offset = 0;
  for (int d = static_cast<int>(shape.size()) - 2; d >= 0; --d) {
    offset += (row % shape[d]) * strides[d];
    row /= shape[d];
  }
  return offset;
}

// The broadcast loop: out[i] = fn(in_0[i], in_1[i], ...) over out's shape.
// out is contiguous; the inputs are read through their broadcast strides.
//   Fast path: each input is contiguous with out's shape (step 1 through the
//   flat index) or a single element (step 0), so the loop is one flat index.
//   General path: rows along the last dimension; each row finds its inputs'
//   start offsets from its index, so rows are independent work for threads.
template <typename Out, typename... In, typename Fn, size_t... K>
void map_impl(Fn fn, const Tensor& out, const std::array<Tensor, sizeof...(In)>& in,
              std::index_sequence<K...>) {
  constexpr size_t N = sizeof...(In);
  Out* o = out.data<Out>();
  const std::tuple<const In*...> base{in[K].template data<In>()...};
  const Shape& shape = out.shape();
  const int64_t n = out.numel();
  const bool flat = ((in[K].numel() == 1 || (in[K].shape() == shape && in[K].is_contiguous())) && ...);
  if (flat) {
    const std::array<int64_t, N> step{(in[K].numel() == 1 ? 0 : 1)...};
#pragma omp parallel for if (n >= kParallelMin)
    for (int64_t i = 0; i < n; ++i) o[i] = fn(std::get<K>(base)[i * step[K]]...);
    return;
  }
  // Here out has at least one dimension: 0-d inputs and outputs take the fast path.
  const std::array<Strides, N> strides{broadcast_strides(in[K], shape)...};
  const std::array<int64_t, N> col_stride{strides[K].back()...};
  const int64_t cols = shape.back();
  const int64_t rows = cols == 0 ? 0 : n / cols;
#pragma omp parallel for if (n >= kParallelMin)
  for (int64_t r = 0; r < rows; ++r) {
    const std::array<int64_t, N> start{row_offset(r, shape, strides[K])...};
    Out* out_row = o + r * cols;
    for (int64_t c = 0; c < cols; ++c)
      out_row[c] = fn(std::get<K>(base)[start[K] + c * col_stride[K]]...);
  }
}

// map_elements<Out, In...>(fn, out, {inputs}): the element types are spelled
// out; Tensor::data checks them against the dtypes.
template <typename Out, typename... In, typename Fn>
void map_elements(Fn fn, const Tensor& out, const std::array<Tensor, sizeof...(In)>& in) {
  map_impl<Out, In...>(fn, out, in, std::index_sequence_for<In...>{});
}

// ---- binary ops: value, d/da, d/db ---------------------------------------------

struct Add {
  template <typename T> T operator()(T a, T b) const { return a + b; }
  template <typename T> T da(T, T) const { return 1; }
  template <typename T> T db(T, T) const { return 1; }
};

struct Sub {
  template <typename T> T operator()(T a, T b) const { return a - b; }
  template <typename T> T da(T, T) const { return 1; }
  template <typename T> T db(T, T) const { return -1; }
};

struct Mul {
  template <typename T> T operator()(T a, T b) const { return a * b; }
  template <typename T> T da(T, T b) const { return b; }
  template <typename T> T db(T a, T) const { return a; }
};

struct Div {
  template <typename T> T operator()(T a, T b) const { return a / b; }
  template <typename T> T da(T, T b) const { return 1 / b; }
  template <typename T> T db(T a, T b) const { return -a / (b * b); }
};

// Where a formula is 0 * inf, PyTorch's conventions: d/da = 0 when b == 0,
// and d/db = 0 when a == 0 and b >= 0.
struct Pow {
  template <typename T> T operator()(T a, T b) const { return std::pow(a, b); }
  template <typename T> T da(T a, T b) const { return b == 0 ? T(0) : b * std::pow(a, b - 1); }
  template <typename T> T db(T a, T b) const {
    return a == 0 && b >= 0 ? T(0) : std::pow(a, b) * std::log(a);
  }
};

// The winner of maximum or minimum takes the gradient; a tie splits it equally
// (as PyTorch does).  A NaN in either input wins, so NaNs propagate.
template <typename T>
T winner_share(bool wins, bool tie) {
  return wins ? T(1) : tie ? T(0.5) : T(0);
}

struct Maximum {
  template <typename T> T operator()(T a, T b) const { return a != a || a > b ? a : b; }
  template <typename T> T da(T a, T b) const { return winner_share<T>(a > b, a == b); }
  template <typename T> T db(T a, T b) const { return winner_share<T>(b > a, a == b); }
};

struct Minimum {
  template <typename T> T operator()(T a, T b) const { return a != a || a < b ? a : b; }
  template <typename T> T da(T a, T b) const { return winner_share<T>(a < b, a == b); }
  template <typename T> T db(T a, T b) const { return winner_share<T>(b < a, a == b); }
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

// ---- unary ops: value and derivative ---------------------------------------------

template <typename T>
T sigmoid_of(T x) {
  return 1 / (1 + std::exp(-x));
}

struct Neg {
  template <typename T> T operator()(T x) const { return -x; }
  template <typename T> T grad(T) const { return -1; }
};

struct Exp {
  template <typename T> T operator()(T x) const { return std::exp(x); }
  template <typename T> T grad(T x) const { return std::exp(x); }
};

struct Log {
  template <typename T> T operator()(T x) const { return std::log(x); }
  template <typename T> T grad(T x) const { return 1 / x; }
};

struct Sqrt {
  template <typename T> T operator()(T x) const { return std::sqrt(x); }
  template <typename T> T grad(T x) const { return T(0.5) / std::sqrt(x); }
};

struct Tanh {
  template <typename T> T operator()(T x) const { return std::tanh(x); }
  template <typename T> T grad(T x) const {
    T t = std::tanh(x);
    return 1 - t * t;
  }
};

struct Sigmoid {
  template <typename T> T operator()(T x) const { return sigmoid_of(x); }
  template <typename T> T grad(T x) const {
    T s = sigmoid_of(x);
    return s * (1 - s);
  }
};

struct Relu {
  template <typename T> T operator()(T x) const { return x > 0 ? x : T(0); }
  template <typename T> T grad(T x) const { return x > 0 ? T(1) : T(0); }
};

// PyTorch's gelu(approximate='none'): x * Phi(x), Phi the standard normal CDF;
// the derivative is Phi(x) + x * phi(x), phi the normal density.
struct GeluErf {
  template <typename T> static T cdf(T x) { return T(0.5) * (1 + std::erf(x * T(M_SQRT1_2))); }
  template <typename T> T operator()(T x) const { return x * cdf(x); }
  template <typename T> T grad(T x) const {
    const T density = T(0.5 * M_2_SQRTPI * M_SQRT1_2) * std::exp(T(-0.5) * x * x);
    return cdf(x) + x * density;
  }
};

// PyTorch's gelu(approximate='tanh'): 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3).
struct GeluTanh {
  static constexpr double kScale = 0.7978845608028654;  // sqrt(2 / pi)
  static constexpr double kCubic = 0.044715;
  template <typename T> static T tanh_u(T x) { return std::tanh(T(kScale) * (x + T(kCubic) * x * x * x)); }
  template <typename T> T operator()(T x) const { return T(0.5) * x * (1 + tanh_u(x)); }
  template <typename T> T grad(T x) const {
    const T t = tanh_u(x);
    const T du = T(kScale) * (1 + T(3 * kCubic) * x * x);
    return T(0.5) * (1 + t) + T(0.5) * x * (1 - t * t) * du;
  }
};

struct Silu {
  template <typename T> T operator()(T x) const { return x * sigmoid_of(x); }
  template <typename T> T grad(T x) const {
    T s = sigmoid_of(x);
    return s * (1 + x * (1 - s));
  }
};

// The derivative at 0 is taken as 0 (the sign), as in PyTorch.
struct Abs {
  template <typename T> T operator()(T x) const { return std::abs(x); }
  template <typename T> T grad(T x) const { return x > 0 ? T(1) : x < 0 ? T(-1) : T(0); }
};

// The gradient passes where min <= x <= max and is 0 outside.
struct Clamp {
  double min, max;
  template <typename T> T operator()(T x) const { return std::min(std::max(x, T(min)), T(max)); }
  template <typename T> T grad(T x) const { return x >= T(min) && x <= T(max) ? T(1) : T(0); }
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

// ---- comparisons and masks ----------------------------------------------------------

template <typename Body>
void with_compare(CompareOp op, Body body) {
  switch (op) {
    case CompareOp::eq: return body(std::equal_to<>{});
    case CompareOp::ne: return body(std::not_equal_to<>{});
    case CompareOp::lt: return body(std::less<>{});
    case CompareOp::le: return body(std::less_equal<>{});
    case CompareOp::gt: return body(std::greater<>{});
    case CompareOp::ge: return body(std::greater_equal<>{});
  }
}

}  // namespace

void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  with_binary(op, [&](auto f) {
    with_float(out.dtype(), [&](auto zero) {
      using T = decltype(zero);
      map_elements<T, T, T>([f](T x, T y) { return f(x, y); }, out, {a, b});
    });
  });
}

void binary_grad(BinaryOp op, int wrt, const Tensor& a, const Tensor& b, const Tensor& g,
                 const Tensor& grad) {
  with_binary(op, [&](auto f) {
    with_float(grad.dtype(), [&](auto zero) {
      using T = decltype(zero);
      if (wrt == 0) map_elements<T, T, T, T>([f](T x, T y, T dz) { return dz * f.da(x, y); }, grad, {a, b, g});
      else map_elements<T, T, T, T>([f](T x, T y, T dz) { return dz * f.db(x, y); }, grad, {a, b, g});
    });
  });
}

void unary(UnaryOp op, UnaryArgs args, const Tensor& x, const Tensor& out) {
  with_unary(op, args, [&](auto f) {
    with_float(out.dtype(), [&](auto zero) {
      using T = decltype(zero);
      map_elements<T, T>([f](T v) { return f(v); }, out, {x});
    });
  });
}

void unary_grad(UnaryOp op, UnaryArgs args, const Tensor& x, const Tensor& g, const Tensor& grad) {
  with_unary(op, args, [&](auto f) {
    with_float(grad.dtype(), [&](auto zero) {
      using T = decltype(zero);
      map_elements<T, T, T>([f](T v, T dy) { return dy * f.grad(v); }, grad, {x, g});
    });
  });
}

void compare(CompareOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  with_compare(op, [&](auto f) {
    with_any(a.dtype(), [&](auto zero) {
      using T = decltype(zero);
      map_elements<uint8_t, T, T>([f](T x, T y) -> uint8_t { return f(x, y); }, out, {a, b});
    });
  });
}

void logical(LogicalOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  const bool both = op == LogicalOp::logical_and;
  map_elements<uint8_t, uint8_t, uint8_t>(
      [both](uint8_t x, uint8_t y) -> uint8_t { return both ? (x && y) : (x || y); }, out, {a, b});
}

void logical_not(const Tensor& x, const Tensor& out) {
  map_elements<uint8_t, uint8_t>([](uint8_t v) -> uint8_t { return !v; }, out, {x});
}

void where(const Tensor& mask, const Tensor& a, const Tensor& b, const Tensor& out) {
  with_any(out.dtype(), [&](auto zero) {
    using T = decltype(zero);
    map_elements<T, uint8_t, T, T>([](uint8_t m, T x, T y) { return m ? x : y; }, out, {mask, a, b});
  });
}

}  // namespace headroom::cpu
