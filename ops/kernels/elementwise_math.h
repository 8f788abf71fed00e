#pragma once
// The element-wise ops' scalar formulas, shared by the CPU kernels
// (ops/cpu/elementwise.cpp) and the CUDA kernels (cuda/elementwise.cu), so
// both devices compute every value and derivative with the same expression.
// Each functor holds an op's value and its derivative(s); with_binary,
// with_unary and with_compare turn the op enum into a functor.  The std:: math functions are
// callable in CUDA device code too.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "headroom/core/rng.h"  // HEADROOM_HOST_DEVICE
#include "headroom/ops/kernels/elementwise.h"

namespace headroom::elementwise {

using kernels::BinaryOp;
using kernels::CompareOp;
using kernels::UnaryArgs;
using kernels::UnaryOp;

// ---- binary ops: value, d/da, d/db ---------------------------------------------

struct Add {
  template <typename T> HEADROOM_HOST_DEVICE T operator()(T a, T b) const { return a + b; }
  template <typename T> HEADROOM_HOST_DEVICE T da(T, T) const { return 1; }
  template <typename T> HEADROOM_HOST_DEVICE T db(T, T) const { return 1; }
};

struct Sub {
  template <typename T> HEADROOM_HOST_DEVICE T operator()(T a, T b) const { return a - b; }
  template <typename T> HEADROOM_HOST_DEVICE T da(T, T) const { return 1; }
  template <typename T> HEADROOM_HOST_DEVICE T db(T, T) const { return -1; }
};

struct Mul {
  template <typename T> HEADROOM_HOST_DEVICE T operator()(T a, T b) const { return a * b; }
  template <typename T> HEADROOM_HOST_DEVICE T da(T, T b) const { return b; }
  template <typename T> HEADROOM_HOST_DEVICE T db(T a, T) const { return a; }
};

struct Div {
  template <typename T> HEADROOM_HOST_DEVICE T operator()(T a, T b) const { return a / b; }
  template <typename T> HEADROOM_HOST_DEVICE T da(T, T b) const { return 1 / b; }
  template <typename T> HEADROOM_HOST_DEVICE T db(T a, T b) const { return -a / (b * b); }
};

// Where a formula is 0 * inf, PyTorch's conventions: d/da = 0 when b == 0,
// and d/db = 0 when a == 0 and b >= 0.
struct Pow {
  template <typename T> HEADROOM_HOST_DEVICE T operator()(T a, T b) const { return std::pow(a, b); }
  template <typename T> HEADROOM_HOST_DEVICE T da(T a, T b) const { return b == 0 ? T(0) : b * std::pow(a, b - 1); }
  template <typename T> HEADROOM_HOST_DEVICE T db(T a, T b) const {
    return a == 0 && b >= 0 ? T(0) : std::pow(a, b) * std::log(a);
  }
};

// The winner of maximum or minimum takes the gradient; a tie splits it equally
// (as PyTorch does).  A NaN in either input wins, so NaNs propagate.
template <typename T> HEADROOM_HOST_DEVICE T winner_share(bool wins, bool tie) {
  return wins ? T(1) : tie ? T(0.5) : T(0);
}

struct Maximum {
  template <typename T> HEADROOM_HOST_DEVICE T operator()(T a, T b) const { return a != a || a > b ? a : b; }
  template <typename T> HEADROOM_HOST_DEVICE T da(T a, T b) const { return winner_share<T>(a > b, a == b); }
  template <typename T> HEADROOM_HOST_DEVICE T db(T a, T b) const { return winner_share<T>(b > a, a == b); }
};

struct Minimum {
  template <typename T> HEADROOM_HOST_DEVICE T operator()(T a, T b) const { return a != a || a < b ? a : b; }
  template <typename T> HEADROOM_HOST_DEVICE T da(T a, T b) const { return winner_share<T>(a < b, a == b); }
  template <typename T> HEADROOM_HOST_DEVICE T db(T a, T b) const { return winner_share<T>(b < a, a == b); }
};

template <typename Body> void with_binary(BinaryOp op, Body body) {
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

template <typename T> HEADROOM_HOST_DEVICE T sigmoid_of(T x) { return 1 / (1 + std::exp(-x)); }

struct Neg {
  template <typename T> HEADROOM_HOST_DEVICE T operator()(T x) const { return -x; }
  template <typename T> HEADROOM_HOST_DEVICE T grad(T) const { return -1; }
};

struct Exp {
  template <typename T> HEADROOM_HOST_DEVICE T operator()(T x) const { return std::exp(x); }
  template <typename T> HEADROOM_HOST_DEVICE T grad(T x) const { return std::exp(x); }
};

struct Log {
  template <typename T> HEADROOM_HOST_DEVICE T operator()(T x) const { return std::log(x); }
  template <typename T> HEADROOM_HOST_DEVICE T grad(T x) const { return 1 / x; }
};

struct Sqrt {
  template <typename T> HEADROOM_HOST_DEVICE T operator()(T x) const { return std::sqrt(x); }
  template <typename T> HEADROOM_HOST_DEVICE T grad(T x) const { return T(0.5) / std::sqrt(x); }
};

struct Tanh {
  template <typename T> HEADROOM_HOST_DEVICE T operator()(T x) const { return std::tanh(x); }
  template <typename T> HEADROOM_HOST_DEVICE T grad(T x) const {
    T t = std::tanh(x);
    return 1 - t * t;
  }
};

struct Sigmoid {
  template <typename T> HEADROOM_HOST_DEVICE T operator()(T x) const { return sigmoid_of(x); }
  template <typename T> HEADROOM_HOST_DEVICE T grad(T x) const {
    T s = sigmoid_of(x);
    return s * (1 - s);
  }
};

struct Relu {
  template <typename T> HEADROOM_HOST_DEVICE T operator()(T x) const { return x > 0 ? x : T(0); }
  template <typename T> HEADROOM_HOST_DEVICE T grad(T x) const { return x > 0 ? T(1) : T(0); }
};

// PyTorch's gelu(approximate='none'): x * Phi(x), Phi the standard normal CDF;
// the derivative is Phi(x) + x * phi(x), phi the normal density.
struct GeluErf {
  template <typename T> HEADROOM_HOST_DEVICE static T cdf(T x) { return T(0.5) * (1 + std::erf(x * T(M_SQRT1_2))); }
  template <typename T> HEADROOM_HOST_DEVICE T operator()(T x) const { return x * cdf(x); }
  template <typename T> HEADROOM_HOST_DEVICE T grad(T x) const {
    const T density = T(0.5 * M_2_SQRTPI * M_SQRT1_2) * std::exp(T(-0.5) * x * x);
    return cdf(x) + x * density;
  }
};

// PyTorch's gelu(approximate='tanh'): 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3).
struct GeluTanh {
  static constexpr double kScale = 0.7978845608028654;  // sqrt(2 / pi)
  static constexpr double kCubic = 0.044715;
  template <typename T> HEADROOM_HOST_DEVICE static T tanh_u(T x) {
    return std::tanh(T(kScale) * (x + T(kCubic) * x * x * x));
  }
  template <typename T> HEADROOM_HOST_DEVICE T operator()(T x) const { return T(0.5) * x * (1 + tanh_u(x)); }
  template <typename T> HEADROOM_HOST_DEVICE T grad(T x) const {
    const T t = tanh_u(x);
    const T du = T(kScale) * (1 + T(3 * kCubic) * x * x);
    return T(0.5) * (1 + t) + T(0.5) * x * (1 - t * t) * du;
  }
};

struct Silu {
  template <typename T> HEADROOM_HOST_DEVICE T operator()(T x) const { return x * sigmoid_of(x); }
  template <typename T> HEADROOM_HOST_DEVICE T grad(T x) const {
    T s = sigmoid_of(x);
    return s * (1 + x * (1 - s));
  }
};

// The derivative at 0 is taken as 0 (the sign), as in PyTorch.
struct Abs {
  template <typename T> HEADROOM_HOST_DEVICE T operator()(T x) const { return std::abs(x); }
  template <typename T> HEADROOM_HOST_DEVICE T grad(T x) const { return x > 0 ? T(1) : x < 0 ? T(-1) : T(0); }
};

// The gradient passes where min <= x <= max and is 0 outside.
struct Clamp {
  double min, max;
  template <typename T> HEADROOM_HOST_DEVICE T operator()(T x) const { return std::min(std::max(x, T(min)), T(max)); }
  template <typename T> HEADROOM_HOST_DEVICE T grad(T x) const { return x >= T(min) && x <= T(max) ? T(1) : T(0); }
};

template <typename Body> void with_unary(UnaryOp op, UnaryArgs args, Body body) {
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

// ---- comparisons: 1 or 0 (b8 masks) ----------------------------------------------

struct Eq {
  template <typename T> HEADROOM_HOST_DEVICE uint8_t operator()(T a, T b) const { return a == b; }
};
struct Ne {
  template <typename T> HEADROOM_HOST_DEVICE uint8_t operator()(T a, T b) const { return a != b; }
};
struct Lt {
  template <typename T> HEADROOM_HOST_DEVICE uint8_t operator()(T a, T b) const { return a < b; }
};
struct Le {
  template <typename T> HEADROOM_HOST_DEVICE uint8_t operator()(T a, T b) const { return a <= b; }
};
struct Gt {
  template <typename T> HEADROOM_HOST_DEVICE uint8_t operator()(T a, T b) const { return a > b; }
};
struct Ge {
  template <typename T> HEADROOM_HOST_DEVICE uint8_t operator()(T a, T b) const { return a >= b; }
};

template <typename Body> void with_compare(CompareOp op, Body body) {
  switch (op) {
    case CompareOp::eq: return body(Eq{});
    case CompareOp::ne: return body(Ne{});
    case CompareOp::lt: return body(Lt{});
    case CompareOp::le: return body(Le{});
    case CompareOp::gt: return body(Gt{});
    case CompareOp::ge: return body(Ge{});
  }
}

}  // namespace headroom::elementwise
