#pragma once
// Element-wise ops: arithmetic with NumPy broadcasting, activations,
// comparisons, masks and where.
//
// Broadcasting: shapes are aligned from the last dimension; each pair of sizes
// must be equal or contain a 1, and the result takes the larger, as in NumPy
// and PyTorch:  a: [3, 1]  b: [4]  ->  add(a, b): [3, 4].
// The inputs of one op share a dtype and a device: there is no implicit
// promotion (f32 + f64 throws; convert one with .to()).  A double operand takes
// the tensor's dtype.  Arithmetic and activations take f32 or f64 and are
// differentiable; the gradient of a broadcast input is summed back to its shape.
#include "headroom/core/tensor.h"

namespace headroom {

// ---- arithmetic: [broadcast(a, b)] ----------------------------------------------
Tensor add(const Tensor& a, const Tensor& b);
Tensor add(const Tensor& a, double b);
Tensor add(double a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, double b);
Tensor sub(double a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, double b);
Tensor mul(double a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, double b);
Tensor div(double a, const Tensor& b);
// a ** b.  d/db uses log(a): keep a > 0 where the exponent needs a gradient.
Tensor pow(const Tensor& a, const Tensor& b);
Tensor pow(const Tensor& a, double exponent);
Tensor pow(double a, const Tensor& exponent);
// Element-wise max / min; NaNs propagate; a tie splits the gradient equally.
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor maximum(const Tensor& a, double b);
Tensor maximum(double a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, double b);
Tensor minimum(double a, const Tensor& b);

// target += other, in place: same shape, dtype and device, target contiguous.
// Not recorded by autograd (the engine's gradient accumulation uses it);
// refused, like copy_, on a tensor that requires grad while grad mode is on.
void add_(const Tensor& target, const Tensor& other);

Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator+(const Tensor& a, double b);
Tensor operator+(double a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, double b);
Tensor operator-(double a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, double b);
Tensor operator*(double a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, double b);
Tensor operator/(double a, const Tensor& b);
Tensor operator-(const Tensor& x);

// ---- unary: same shape as x ------------------------------------------------------
Tensor neg(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor sigmoid(const Tensor& x);  // 1 / (1 + exp(-x))
Tensor relu(const Tensor& x);     // max(x, 0); gradient 0 at 0
// PyTorch's two forms: erf (approximate='none'): x * Phi(x), Phi the normal CDF;
// tanh (approximate='tanh'): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
enum class GeluApprox { erf, tanh };
Tensor gelu(const Tensor& x, GeluApprox approx = GeluApprox::erf);
Tensor silu(const Tensor& x);  // x * sigmoid(x)
Tensor abs(const Tensor& x);   // gradient sign(x), 0 at 0
// min(max(x, min), max), min <= max; the gradient is 1 on [min, max] and 0 outside.
Tensor clamp(const Tensor& x, double min, double max);

// ---- comparisons: b8 masks of shape broadcast(a, b), not differentiable ----------
// Any dtype (f32, f64, i32, b8), the same for both inputs.
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
Tensor eq(const Tensor& a, double b);
Tensor ne(const Tensor& a, double b);
Tensor lt(const Tensor& a, double b);
Tensor le(const Tensor& a, double b);
Tensor gt(const Tensor& a, double b);
Tensor ge(const Tensor& a, double b);

// ---- masks (b8) -------------------------------------------------------------------
Tensor logical_not(const Tensor& mask);
Tensor logical_and(const Tensor& a, const Tensor& b);  // [broadcast(a, b)]
Tensor logical_or(const Tensor& a, const Tensor& b);

// mask ? a : b, element-wise.  mask: b8; a, b: one dtype; all three broadcast
// together.  Differentiable in a and b (each gets the gradient where it was chosen).
Tensor where(const Tensor& mask, const Tensor& a, const Tensor& b);

}  // namespace headroom
