// Element-wise ops: validation, dispatch to the CPU or CUDA kernels, and
// backward.  Every arithmetic op goes through binary_op and every activation
// through unary_op; the math of each (value and derivative) lives in its
// functor in ops/cpu/elementwise.cpp (and its device twin in cuda/elementwise.cu).
#include "headroom/ops/elementwise.h"

#include "headroom/autograd/node.h"
#include "headroom/ops/cpu/elementwise.h"
#include "headroom/ops/kernels/elementwise.h"
#include "headroom/ops/kernels/registry.h"
#include "headroom/ops/shape.h"

namespace headroom {
namespace {

// A double operand as a 0-d tensor of the other operand's dtype and device.
Tensor scalar_like(double value, const Tensor& like) { return Tensor::full({}, value, like.dtype(), like.device()); }

// The inputs of a binary op share a device and a dtype; returns their broadcast shape.
Shape check_pair(const char* op, const Tensor& a, const Tensor& b) {
  check_same_device(op, {a, b});
  HEADROOM_CHECK(a.dtype() == b.dtype(), "[", op, "] dtypes differ: ", a.dtype(), " and ", b.dtype(), " (shapes ",
                 shape_str(a.shape()), " and ", shape_str(b.shape()), "); convert one with .to(dtype)");
  return broadcast_shapes(a.shape(), b.shape(), op);
}

// g * d op(a, b) / d input i (0: a, 1: b), at g's broadcast shape.
Tensor binary_partial(cpu::BinaryOp op, int i, const Tensor& a, const Tensor& b, const Tensor& g) {
  Tensor grad = Tensor::empty(g.shape(), g.dtype(), g.device());
  if (!g.device().is_cpu()) kernels::device_kernels(g).elementwise->binary_grad(op, i, a, b, g, grad);
  else cpu::binary_grad(op, i, a, b, g, grad);
  return grad;
}

// out = op(a, b) with broadcasting.  Backward: the kernel's partial derivative
// times g at the broadcast shape, summed back to each input's shape.  add and
// sub are linear, their gradients are ±g: they save nothing and run no
// derivative kernel.
Tensor binary_op(const char* name, cpu::BinaryOp op, const Tensor& a, const Tensor& b) {
  Shape shape = check_pair(name, a, b);
  check_floating(name, a);
  Tensor out = Tensor::empty(shape, a.dtype(), a.device());  // [broadcast(a, b)]
  if (!out.device().is_cpu()) kernels::device_kernels(out).elementwise->binary(op, a, b, out);
  else cpu::binary(op, a, b, out);
  const bool linear = op == cpu::BinaryOp::add || op == cpu::BinaryOp::sub;
  const Shape shapes[2] = {a.shape(), b.shape()};
  // da = ∂op/∂a ⊙ g, db = ∂op/∂b ⊙ g, each summed back over its broadcast dimensions
  autograd::record(out, name, {a, b}, linear ? std::vector<Tensor>{} : std::vector<Tensor>{a, b},
                   [op, linear, shapes](const autograd::Saved& s, const Tensor& g, autograd::Grads& grads) {
                     for (int i : {0, 1}) {
                       if (!grads.wants(i)) continue;
                       Tensor full = g;  // [broadcast]
                       if (!linear) {
                         full = binary_partial(op, i, s[0], s[1], g);
                       } else if (i == 1 && op == cpu::BinaryOp::sub) {
                         full = neg(g);
                       }
                       grads.add(i, sum_to_shape(full, shapes[i]));
                     }
                   });
  return out;
}

// out = op(x).  Backward: g * op'(x), recomputed from the saved input.
Tensor unary_op(const char* name, cpu::UnaryOp op, const Tensor& x, cpu::UnaryArgs args = {}) {
  check_floating(name, x);
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  if (!x.device().is_cpu()) kernels::device_kernels(x).elementwise->unary(op, args, x, out);
  else cpu::unary(op, args, x, out);
  // dx = f'(x) ⊙ g (cpu::unary_grad holds each f')
  autograd::record(out, name, {x}, {x}, [op, args](const autograd::Saved& s, const Tensor& g, autograd::Grads& grads) {
    Tensor grad = Tensor::empty(g.shape(), g.dtype(), g.device());
    if (!g.device().is_cpu()) kernels::device_kernels(g).elementwise->unary_grad(op, args, s[0], g, grad);
    else cpu::unary_grad(op, args, s[0], g, grad);
    grads.add(0, grad);
  });
  return out;
}

// A b8 mask of shape broadcast(a, b); no gradient.
Tensor compare_op(const char* name, cpu::CompareOp op, const Tensor& a, const Tensor& b) {
  Tensor out = Tensor::empty(check_pair(name, a, b), DType::b8, a.device());
  if (!out.device().is_cpu()) kernels::device_kernels(out).elementwise->compare(op, a, b, out);
  else cpu::compare(op, a, b, out);
  return out;
}

Tensor logical_op(const char* name, cpu::LogicalOp op, const Tensor& a, const Tensor& b) {
  check_dtype(name, a, DType::b8, "masks");
  check_dtype(name, b, DType::b8, "masks");
  Tensor out = Tensor::empty(check_pair(name, a, b), DType::b8, a.device());
  if (!out.device().is_cpu()) kernels::device_kernels(out).elementwise->logical(op, a, b, out);
  else cpu::logical(op, a, b, out);
  return out;
}

}  // namespace

// ---- arithmetic ---------------------------------------------------------------------

Tensor add(const Tensor& a, const Tensor& b) { return binary_op("add", cpu::BinaryOp::add, a, b); }
Tensor sub(const Tensor& a, const Tensor& b) { return binary_op("sub", cpu::BinaryOp::sub, a, b); }
Tensor mul(const Tensor& a, const Tensor& b) { return binary_op("mul", cpu::BinaryOp::mul, a, b); }
Tensor div(const Tensor& a, const Tensor& b) { return binary_op("div", cpu::BinaryOp::div, a, b); }
Tensor pow(const Tensor& a, const Tensor& b) { return binary_op("pow", cpu::BinaryOp::pow, a, b); }
// target may be a strided view (autograd adds a slice's gradient into its
// place in the whole), but not an expanded one, whose elements share memory.
void add_(const Tensor& target, const Tensor& other) {
  check_pair("add_", target, other);
  HEADROOM_CHECK(target.shape() == other.shape(), "[add_] expected an addend of the target's shape, got ",
                 shape_str(target.shape()), " and ", shape_str(other.shape()));
  for (int d = 0; d < target.dim(); ++d)
    HEADROOM_CHECK(target.stride(d) != 0 || target.size(d) == 1, "[add_] target of shape ", shape_str(target.shape()),
                   " is expanded (stride 0 in dimension ", d, "); use add");
  check_inplace_allowed("add_", target);
  check_floating("add_", target);
  // Element i reads target[i] before writing it, so the aliasing is safe.
  accumulate_elements(other, target);
}
Tensor maximum(const Tensor& a, const Tensor& b) { return binary_op("maximum", cpu::BinaryOp::maximum, a, b); }
Tensor minimum(const Tensor& a, const Tensor& b) { return binary_op("minimum", cpu::BinaryOp::minimum, a, b); }

// The overloads with a double operand: it becomes a 0-d tensor of the other
// operand's dtype.  The operators call the named ops.
#define DOUBLE_ON_RIGHT(op) \
  Tensor op(const Tensor& a, double b) { return op(a, scalar_like(b, a)); }
#define DOUBLE_ON_EITHER_SIDE(op) \
  DOUBLE_ON_RIGHT(op)             \
  Tensor op(double a, const Tensor& b) { return op(scalar_like(a, b), b); }
#define OPERATOR(symbol, op)                                                    \
  Tensor operator symbol(const Tensor& a, const Tensor& b) { return op(a, b); } \
  Tensor operator symbol(const Tensor& a, double b) { return op(a, b); }        \
  Tensor operator symbol(double a, const Tensor& b) { return op(a, b); }

DOUBLE_ON_EITHER_SIDE(add)
DOUBLE_ON_EITHER_SIDE(sub)
DOUBLE_ON_EITHER_SIDE(mul)
DOUBLE_ON_EITHER_SIDE(div)
DOUBLE_ON_EITHER_SIDE(pow)
DOUBLE_ON_EITHER_SIDE(maximum)
DOUBLE_ON_EITHER_SIDE(minimum)
OPERATOR(+, add)
OPERATOR(-, sub)
OPERATOR(*, mul)
OPERATOR(/, div)
Tensor operator-(const Tensor& x) { return neg(x); }

// ---- unary ---------------------------------------------------------------------------

Tensor neg(const Tensor& x) { return unary_op("neg", cpu::UnaryOp::neg, x); }
Tensor exp(const Tensor& x) { return unary_op("exp", cpu::UnaryOp::exp, x); }
Tensor log(const Tensor& x) { return unary_op("log", cpu::UnaryOp::log, x); }
Tensor sqrt(const Tensor& x) { return unary_op("sqrt", cpu::UnaryOp::sqrt, x); }
Tensor tanh(const Tensor& x) { return unary_op("tanh", cpu::UnaryOp::tanh, x); }
Tensor sigmoid(const Tensor& x) { return unary_op("sigmoid", cpu::UnaryOp::sigmoid, x); }
Tensor relu(const Tensor& x) { return unary_op("relu", cpu::UnaryOp::relu, x); }
Tensor silu(const Tensor& x) { return unary_op("silu", cpu::UnaryOp::silu, x); }
Tensor abs(const Tensor& x) { return unary_op("abs", cpu::UnaryOp::abs, x); }

Tensor gelu(const Tensor& x, GeluApprox approx) {
  return unary_op("gelu", approx == GeluApprox::erf ? cpu::UnaryOp::gelu_erf : cpu::UnaryOp::gelu_tanh, x);
}

Tensor clamp(const Tensor& x, double min, double max) {
  HEADROOM_CHECK(min <= max, "[clamp] min ", min, " is greater than max ", max);
  return unary_op("clamp", cpu::UnaryOp::clamp, x, {min, max});
}

// ---- comparisons and masks --------------------------------------------------------------

Tensor eq(const Tensor& a, const Tensor& b) { return compare_op("eq", cpu::CompareOp::eq, a, b); }
Tensor ne(const Tensor& a, const Tensor& b) { return compare_op("ne", cpu::CompareOp::ne, a, b); }
Tensor lt(const Tensor& a, const Tensor& b) { return compare_op("lt", cpu::CompareOp::lt, a, b); }
Tensor le(const Tensor& a, const Tensor& b) { return compare_op("le", cpu::CompareOp::le, a, b); }
Tensor gt(const Tensor& a, const Tensor& b) { return compare_op("gt", cpu::CompareOp::gt, a, b); }
Tensor ge(const Tensor& a, const Tensor& b) { return compare_op("ge", cpu::CompareOp::ge, a, b); }
DOUBLE_ON_RIGHT(eq)
DOUBLE_ON_RIGHT(ne)
DOUBLE_ON_RIGHT(lt)
DOUBLE_ON_RIGHT(le)
DOUBLE_ON_RIGHT(gt)
DOUBLE_ON_RIGHT(ge)
#undef DOUBLE_ON_RIGHT
#undef DOUBLE_ON_EITHER_SIDE
#undef OPERATOR

Tensor logical_and(const Tensor& a, const Tensor& b) {
  return logical_op("logical_and", cpu::LogicalOp::logical_and, a, b);
}
Tensor logical_or(const Tensor& a, const Tensor& b) {
  return logical_op("logical_or", cpu::LogicalOp::logical_or, a, b);
}

Tensor logical_not(const Tensor& mask) {
  check_dtype("logical_not", mask, DType::b8, "mask");
  Tensor out = Tensor::empty(mask.shape(), DType::b8, mask.device());
  if (!out.device().is_cpu()) kernels::device_kernels(out).elementwise->logical_not(mask, out);
  else cpu::logical_not(mask, out);
  return out;
}

Tensor where(const Tensor& mask, const Tensor& a, const Tensor& b) {
  check_dtype("where", mask, DType::b8, "mask");
  check_same_device("where", {mask, a, b});
  Shape shape = broadcast_shapes(mask.shape(), check_pair("where", a, b), "where");
  Tensor out = Tensor::empty(shape, a.dtype(), a.device());  // [broadcast(mask, a, b)]
  if (!out.device().is_cpu()) kernels::device_kernels(out).elementwise->where(mask, a, b, out);
  else cpu::where(mask, a, b, out);
  if (!out.is_floating_point()) return out;
  Shape a_shape = a.shape(), b_shape = b.shape();
  // da = g where mask, db = g elsewhere (each summed back to its shape); the mask gets none
  autograd::record(out, "where", {mask, a, b}, {mask},
                   [a_shape, b_shape](const autograd::Saved& s, const Tensor& g, autograd::Grads& grads) {
                     Tensor zero = scalar_like(0, g);
                     if (grads.wants(1)) grads.add(1, sum_to_shape(where(s[0], g, zero), a_shape));
                     if (grads.wants(2)) grads.add(2, sum_to_shape(where(s[0], zero, g), b_shape));
                   });
  return out;
}

}  // namespace headroom
