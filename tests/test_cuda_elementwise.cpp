// CUDA element-wise kernels against the CPU ones (check_parity: outputs and
// every gradient): each binary op, activation, comparison, mask op and where,
// at odd sizes, with broadcasting, non-contiguous and expanded operands, empty
// and 0-d tensors, f32 and f64.  Skipped (and passing) without a device.
#include <string>

#include "cuda_helpers.h"

using namespace headroom;
using headroom::testing::check_parity;
using headroom::testing::compare;

namespace {

using Inputs = std::vector<Tensor>;
using BinaryFn = Tensor (*)(const Tensor&, const Tensor&);

// Integers in {-2, ..., 2} as floats: ties, zeros and clamp bounds occur.
Tensor small_ints(const Shape& shape, Generator& gen, DType dtype = DType::f32) {
  return Tensor::rand(shape, gen, -2.99, 3, DType::f64).to(DType::i32).to(dtype);
}

struct NamedBinary {
  const char* name;
  BinaryFn fn;
};

const NamedBinary kBinaryOps[] = {{"add", headroom::add},        {"sub", headroom::sub}, {"mul", headroom::mul},
                                  {"div", headroom::div},        {"pow", headroom::pow}, {"maximum", headroom::maximum},
                                  {"minimum", headroom::minimum}};

// Operands of a binary op: pow takes a > 0 (its d/db uses log a), div takes b
// away from 0, maximum and minimum small integers (ties split the gradient).
Inputs binary_inputs(const std::string& op, const Shape& a_shape, const Shape& b_shape, Generator& gen, DType dtype) {
  auto draw = [&](const Shape& shape, bool positive) {
    if (op == "maximum" || op == "minimum") return small_ints(shape, gen, dtype);
    return positive ? Tensor::rand(shape, gen, 0.5, 2, dtype) : Tensor::randn(shape, gen, dtype);
  };
  return {draw(a_shape, op == "pow"), draw(b_shape, op == "div")};
}

struct NamedUnary {
  const char* name;
  Tensor (*fn)(const Tensor&);
  bool positive;  // log and sqrt take x > 0
};

Tensor gelu_erf(const Tensor& x) { return gelu(x, GeluApprox::erf); }
Tensor gelu_tanh(const Tensor& x) { return gelu(x, GeluApprox::tanh); }
Tensor clamp_unit(const Tensor& x) { return clamp(x, -1, 1); }

const NamedUnary kUnaryOps[] = {
    {"neg", headroom::neg, false},   {"exp", headroom::exp, false},   {"log", headroom::log, true},
    {"sqrt", headroom::sqrt, true},  {"tanh", headroom::tanh, false}, {"sigmoid", headroom::sigmoid, false},
    {"relu", headroom::relu, false}, {"gelu erf", gelu_erf, false},   {"gelu tanh", gelu_tanh, false},
    {"silu", headroom::silu, false}, {"abs", headroom::abs, false},   {"clamp", clamp_unit, false}};

// x for an activation: positive draws for log and sqrt; otherwise normal
// draws, or small integers (exact zeros and clamp bounds) when `ints`.
Tensor unary_input(const NamedUnary& op, const Shape& shape, Generator& gen, DType dtype, bool ints) {
  if (op.positive) return Tensor::rand(shape, gen, 0.1, 3, dtype);
  return ints ? small_ints(shape, gen, dtype) : Tensor::randn(shape, gen, 0, 2, dtype);
}

}  // namespace

TEST_CASE("cuda elementwise: binary ops with broadcasting, odd and empty shapes (f32)") {
  Generator gen(11);
  const std::vector<std::pair<Shape, Shape>> shapes = {{{7, 33}, {7, 33}}, {{3, 1, 5}, {4, 5}}, {{257}, {1}},
                                                       {{1}, {2, 257}},    {{}, {2, 3}},        {{0, 5}, {5}},
                                                       {{4, 0}, {1, 1}}};
  for (const NamedBinary& op : kBinaryOps) {
    for (const auto& a_shape_b_shape : shapes) {
      const auto& a_shape = a_shape_b_shape.first;  // named: Clang 14 lambdas cannot capture structured bindings
      const auto& b_shape = a_shape_b_shape.second;
      INFO(op.name, " ", shape_str(a_shape), " with ", shape_str(b_shape));
      check_parity([&](const Inputs& in) { return op.fn(in[0], in[1]); },
                   binary_inputs(op.name, a_shape, b_shape, gen, DType::f32), 1e-5, 1e-5);
    }
  }
}

TEST_CASE("cuda elementwise: binary ops on permuted, sliced and expanded operands") {
  Generator gen(12);
  for (const NamedBinary& op : kBinaryOps) {
    INFO(op.name);
    // a: [33, 7] read transposed; b: [7, 66] read every second column.
    check_parity([&](const Inputs& in) { return op.fn(in[0].t(), in[1].slice(1, 0, 66, 2)); },
                 binary_inputs(op.name, {33, 7}, {7, 66}, gen, DType::f32), 1e-5, 1e-5);
    // a: [5, 4, 6] permuted to [6, 5, 4]; b: a row expanded (stride 0) to [5, 4].
    check_parity(
        [&](const Inputs& in) {
          return op.fn(in[0].permute({2, 0, 1}), in[1].expand({5, 4}));
        },
        binary_inputs(op.name, {5, 4, 6}, {4}, gen, DType::f32), 1e-5, 1e-5);
  }
}

TEST_CASE("cuda elementwise: binary ops in f64") {
  Generator gen(13);
  for (const NamedBinary& op : kBinaryOps) {
    INFO(op.name);
    check_parity([&](const Inputs& in) { return op.fn(in[0], in[1].t()); },
                 binary_inputs(op.name, {3, 1, 5}, {5, 4}, gen, DType::f64), 1e-12, 1e-12);
  }
}

TEST_CASE("cuda elementwise: double operands and operators") {
  Generator gen(14);
  check_parity(
      [](const Inputs& in) {
        const Tensor& x = in[0];
        return (2.0 * x - 1.5) / 3.0 + pow(x, 2.0) + maximum(x, 0.25) + minimum(-0.5, x) + (1.0 / (x * x + 1.0)) -
               pow(2.0, x) + (-x) + gt(x, 0.5).to(DType::f32);
      },
      {Tensor::randn({9, 17}, gen)}, 1e-5, 1e-5);
}

TEST_CASE("cuda elementwise: activations and their gradients (f32)") {
  Generator gen(15);
  for (const NamedUnary& op : kUnaryOps) {
    INFO(op.name);
    // [33, 7] transposed (non-contiguous), normal draws and small integers.
    for (bool ints : {false, true})
      check_parity([&](const Inputs& in) { return op.fn(in[0].t()); },
                   {unary_input(op, {33, 7}, gen, DType::f32, ints)}, 1e-5, 1e-5);
    for (const Shape& shape : {Shape{257}, Shape{}, Shape{0, 3}})
      check_parity([&](const Inputs& in) { return op.fn(in[0]); }, {unary_input(op, shape, gen, DType::f32, false)},
                   1e-5, 1e-5);
  }
}

TEST_CASE("cuda elementwise: activations in f64") {
  Generator gen(16);
  for (const NamedUnary& op : kUnaryOps) {
    INFO(op.name);
    check_parity([&](const Inputs& in) { return op.fn(in[0].slice(0, 1, 9, 2)); },
                 {unary_input(op, {9, 5}, gen, DType::f64, false)}, 1e-12, 1e-12);
  }
}

TEST_CASE("cuda elementwise: more elements than one grid covers (grid-stride loop)") {
  Generator gen(17);
  // 65535 blocks of 256 threads cover 16776960 elements; this has more.
  check_parity([](const Inputs& in) { return sigmoid(in[0]) * in[1]; },
               {Tensor::randn({16777216 + 33}, gen), Tensor::randn({1}, gen)}, 1e-5, 1e-5);
}

TEST_CASE("cuda elementwise: comparisons over every dtype, with broadcasting") {
  Generator gen(18);
  using CompareFn = Tensor (*)(const Tensor&, const Tensor&);
  const CompareFn ops[] = {headroom::eq, headroom::ne, headroom::lt, headroom::le, headroom::gt, headroom::ge};
  for (DType dtype : {DType::f32, DType::f64, DType::i32, DType::b8}) {
    for (CompareFn op : ops) {
      INFO(dtype);
      // Small integers make equal pairs common; masks come from a comparison.
      auto draw = [&](const Shape& shape) {
        Tensor t = small_ints(shape, gen, DType::f32);
        return dtype == DType::b8 ? gt(t, 0.0) : t.to(dtype);
      };
      check_parity([&](const Inputs& in) { return op(in[0], in[1].t()).to(DType::f32); },
                   {draw({3, 1, 5}), draw({5, 4})}, 0);
    }
  }
}

TEST_CASE("cuda elementwise: logical and, or, not on broadcast and transposed masks") {
  Generator gen(19);
  Inputs masks = {gt(Tensor::randn({3, 1, 5}, gen), 0.0), gt(Tensor::randn({5, 4}, gen), 0.0)};
  check_parity([](const Inputs& in) { return logical_and(in[0], in[1].t()).to(DType::f32); }, masks, 0);
  check_parity([](const Inputs& in) { return logical_or(in[0], in[1].t()).to(DType::f32); }, masks, 0);
  check_parity([](const Inputs& in) { return logical_not(in[1].t()).to(DType::f32); }, masks, 0);
  check_parity([](const Inputs& in) { return logical_not(in[0].slice(2, 0, 5, 2)).to(DType::f32); }, masks, 0);
}

TEST_CASE("cuda elementwise: where, forward and backward, with broadcasting") {
  Generator gen(20);
  Tensor mask = gt(Tensor::randn({3, 1, 5}, gen), 0.0);
  // a: [4, 5] (transposed), b: 0-d; the gradient of each sums over broadcast dimensions.
  check_parity([](const Inputs& in) { return where(in[0], in[1].t(), in[2]); },
               {mask, Tensor::randn({5, 4}, gen), Tensor::randn({}, gen)}, 1e-5, 1e-5);
  check_parity([](const Inputs& in) { return where(in[0], in[1], in[2]); },
               {mask, Tensor::randn({3, 4, 1}, gen, DType::f64), Tensor::randn({5}, gen, DType::f64)}, 1e-12, 1e-12);
  check_parity([](const Inputs& in) { return where(in[0], in[1], in[2]); },
               {gt(Tensor::randn({0, 2}, gen), 0.0), Tensor::randn({2}, gen), Tensor::randn({1}, gen)}, 0);
  // i32 values: not differentiable, compared as floats.
  check_parity([](const Inputs& in) { return where(in[0], in[1], in[2]).to(DType::f32); },
               {mask, small_ints({4, 5}, gen, DType::i32), small_ints({1}, gen, DType::i32)}, 0);
}

TEST_CASE("cuda elementwise: gradients summed over broadcast dimensions are identical run to run") {
  Generator gen(21);
  Tensor a_host = Tensor::randn({1, 300}, gen), b_host = Tensor::randn({1000, 1}, gen);
  Tensor seed = Tensor::randn({1000, 300}, gen).to(Device::cuda());
  std::vector<Tensor> grads;
  for (int run = 0; run < 2; ++run) {
    Tensor a = a_host.to(Device::cuda()).set_requires_grad();
    Tensor b = b_host.to(Device::cuda()).set_requires_grad();
    (a * b).backward(seed);
    grads.push_back(a.grad().to(Device::cpu()));
    grads.push_back(b.grad().to(Device::cpu()));
  }
  CHECK(compare(grads[0], grads[2], 0) == "");
  CHECK(compare(grads[1], grads[3], 0) == "");
}

TEST_CASE("cuda elementwise: device and dtype errors") {
  Tensor x = Tensor::ones({2}, DType::f32, Device::cuda());
  CHECK_THROWS_HEADROOM(add(x, Tensor::ones({2})), "different devices");
  CHECK_THROWS_HEADROOM(add(x, x.to(DType::f64)), "dtypes differ");
  CHECK_THROWS_HEADROOM(exp(x.to(DType::i32)), "f32 or f64");
}
