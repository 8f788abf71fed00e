// Element-wise ops: outputs against naive broadcast loops (f32 and f64,
// contiguous, broadcast and non-contiguous inputs), gradchecks, masks and
// where, engine accumulation through arithmetic, and errors.
#include <algorithm>
#include <cmath>
#include <functional>

#include "headroom/ops/elementwise.h"
#include "helpers.h"

using namespace headroom;

namespace {

using BinaryFn = std::function<Tensor(const Tensor&, const Tensor&)>;
using UnaryFn = std::function<Tensor(const Tensor&)>;

Tensor randn(const Shape& shape, uint64_t seed, DType dtype = DType::f64) {
  Generator g(seed);
  return Tensor::randn(shape, g, dtype);
}

// A leaf that requires grad; `positive` draws from [0.5, 2) for log, sqrt, pow and div.
Tensor param(const Shape& shape, uint64_t seed, bool positive = false) {
  Generator g(seed);
  Tensor t = positive ? Tensor::rand(shape, g, 0.5, 2, DType::f64) : Tensor::randn(shape, g, DType::f64);
  return t.set_requires_grad();
}

// Row-major multi-index of element i of `shape`.
std::vector<int64_t> unravel(int64_t i, const Shape& shape) {
  std::vector<int64_t> index(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    index[d] = i % shape[d];
    i /= shape[d];
  }
  return index;
}

// The element of t (values in row-major order) that broadcasting pairs with
// output index `index`: size-1 and missing dimensions read index 0.
double broadcast_at(const std::vector<double>& values, const Shape& shape, const std::vector<int64_t>& index) {
  const size_t lead = index.size() - shape.size();
  int64_t flat = 0;
  for (size_t d = 0; d < shape.size(); ++d) flat = flat * shape[d] + (shape[d] == 1 ? 0 : index[lead + d]);
  return values[flat];
}

// The naive reference of a broadcasting binary op.
Tensor reference_binary(const Tensor& a, const Tensor& b, const std::function<double(double, double)>& f) {
  Shape shape = broadcast_shapes(a.shape(), b.shape(), "reference");
  std::vector<double> va = a.to_vector<double>(), vb = b.to_vector<double>(), out;
  for (int64_t i = 0; i < shape_numel(shape); ++i) {
    std::vector<int64_t> index = unravel(i, shape);
    out.push_back(f(broadcast_at(va, a.shape(), index), broadcast_at(vb, b.shape(), index)));
  }
  return Tensor::from_vector(out, shape);
}

Tensor reference_unary(const Tensor& x, const std::function<double(double)>& f) {
  std::vector<double> out;
  for (double v : x.to_vector<double>()) out.push_back(f(v));
  return Tensor::from_vector(out, x.shape());
}

struct BinaryCase {
  const char* name;
  BinaryFn op;
  std::function<double(double, double)> reference;
  bool positive;  // inputs drawn from [0.5, 2)
};

std::vector<BinaryCase> binary_cases() {
  return {
      {"add", [](const Tensor& a, const Tensor& b) { return add(a, b); }, [](double a, double b) { return a + b; },
       false},
      {"sub", [](const Tensor& a, const Tensor& b) { return sub(a, b); }, [](double a, double b) { return a - b; },
       false},
      {"mul", [](const Tensor& a, const Tensor& b) { return mul(a, b); }, [](double a, double b) { return a * b; },
       false},
      {"div", [](const Tensor& a, const Tensor& b) { return div(a, b); }, [](double a, double b) { return a / b; },
       true},
      {"pow", [](const Tensor& a, const Tensor& b) { return pow(a, b); },
       [](double a, double b) { return std::pow(a, b); }, true},
      {"maximum", [](const Tensor& a, const Tensor& b) { return maximum(a, b); },
       [](double a, double b) { return std::max(a, b); }, false},
      {"minimum", [](const Tensor& a, const Tensor& b) { return minimum(a, b); },
       [](double a, double b) { return std::min(a, b); }, false},
  };
}

double gelu_erf(double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }
double gelu_tanh(double x) { return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))); }
double sigmoid_ref(double x) { return 1 / (1 + std::exp(-x)); }

struct UnaryCase {
  const char* name;
  UnaryFn op;
  std::function<double(double)> reference;
  bool positive;
};

std::vector<UnaryCase> unary_cases() {
  return {
      {"neg", [](const Tensor& x) { return -x; }, [](double x) { return -x; }, false},
      {"exp", [](const Tensor& x) { return exp(x); }, [](double x) { return std::exp(x); }, false},
      {"log", [](const Tensor& x) { return log(x); }, [](double x) { return std::log(x); }, true},
      {"sqrt", [](const Tensor& x) { return sqrt(x); }, [](double x) { return std::sqrt(x); }, true},
      {"tanh", [](const Tensor& x) { return tanh(x); }, [](double x) { return std::tanh(x); }, false},
      {"sigmoid", [](const Tensor& x) { return sigmoid(x); }, sigmoid_ref, false},
      {"relu", [](const Tensor& x) { return relu(x); }, [](double x) { return x > 0 ? x : 0.0; }, false},
      {"gelu", [](const Tensor& x) { return gelu(x); }, gelu_erf, false},
      {"gelu_tanh", [](const Tensor& x) { return gelu(x, GeluApprox::tanh); }, gelu_tanh, false},
      {"silu", [](const Tensor& x) { return silu(x); }, [](double x) { return x * sigmoid_ref(x); }, false},
      {"abs", [](const Tensor& x) { return abs(x); }, [](double x) { return std::abs(x); }, false},
      {"clamp", [](const Tensor& x) { return clamp(x, -0.5, 0.7); }, [](double x) { return std::clamp(x, -0.5, 0.7); },
       false},
      {"pow_scalar", [](const Tensor& x) { return pow(x, 2.5); }, [](double x) { return std::pow(x, 2.5); }, true},
  };
}

Tensor draw(const Shape& shape, uint64_t seed, bool positive, DType dtype) {
  Generator g(seed);
  return positive ? Tensor::rand(shape, g, 0.5, 2, dtype) : Tensor::randn(shape, g, dtype);
}

}  // namespace

TEST_CASE("binary ops match a naive broadcast loop (f32, f64, broadcast, non-contiguous, large)") {
  struct Shapes {
    Shape a, b;
  };
  // [3,1] and [4]; 0-d with [2,3]; [2,3,4] with [3,1]; a large pair that runs
  // the threaded loops (both the flat and the broadcast path).
  const std::vector<Shapes> pairs = {{{3, 1}, {4}},    {{}, {2, 3}},      {{2, 3, 4}, {3, 1}},
                                     {{2, 3}, {2, 3}}, {{256, 1}, {130}}, {{33000}, {33000}}};
  for (const BinaryCase& c : binary_cases()) {
    for (DType dtype : {DType::f32, DType::f64}) {
      const double tol = dtype == DType::f32 ? 1e-5 : 1e-12;
      for (const Shapes& s : pairs) {
        CAPTURE(c.name);
        CAPTURE(dtype);
        Tensor a = draw(s.a, 1, c.positive, dtype), b = draw(s.b, 2, c.positive, dtype);
        CHECK_CLOSE(c.op(a, b), reference_binary(a, b, c.reference), tol, tol);
      }
      // A transposed (non-contiguous) first input and a sliced second input.
      Tensor a = draw({4, 3}, 3, c.positive, dtype).t();
      Tensor b = draw({3, 8}, 4, c.positive, dtype).slice(1, 0, 8, 2);
      CHECK_CLOSE(c.op(a, b), reference_binary(a, b, c.reference), tol, tol);
    }
  }
}

TEST_CASE("unary ops match naive loops (f32, f64, non-contiguous)") {
  for (const UnaryCase& c : unary_cases()) {
    for (DType dtype : {DType::f32, DType::f64}) {
      CAPTURE(c.name);
      CAPTURE(dtype);
      const double tol = dtype == DType::f32 ? 1e-5 : 1e-12;
      Tensor x = draw({5, 6}, 5, c.positive, dtype);
      CHECK_CLOSE(c.op(x), reference_unary(x, c.reference), tol, tol);
      Tensor xt = x.t();
      CHECK_CLOSE(c.op(xt), reference_unary(xt, c.reference), tol, tol);
    }
  }
}

TEST_CASE("hand-checked values: scalars on either side, operators, relu/abs at 0, clamp, NaN in maximum") {
  Tensor x = Tensor::from_vector<float>({-2, 0, 3});
  CHECK((x + 1).to_vector<float>() == std::vector<float>{-1, 1, 4});
  CHECK((1 - x).to_vector<float>() == std::vector<float>{3, 1, -2});
  CHECK((x * 2).to_vector<float>() == std::vector<float>{-4, 0, 6});
  CHECK((6 / (x + 3)).to_vector<float>() == std::vector<float>{6, 2, 1});
  CHECK((x / 2).to_vector<float>() == std::vector<float>{-1, 0, 1.5});
  CHECK((-x).to_vector<float>() == std::vector<float>{2, 0, -3});
  CHECK(pow(2.0, x).to_vector<float>() == std::vector<float>{0.25, 1, 8});
  CHECK(maximum(x, 0.0).to_vector<float>() == std::vector<float>{0, 0, 3});
  CHECK(minimum(1.0, x).to_vector<float>() == std::vector<float>{-2, 0, 1});
  CHECK(relu(x).to_vector<float>() == std::vector<float>{0, 0, 3});
  CHECK(abs(x).to_vector<float>() == std::vector<float>{2, 0, 3});
  CHECK(clamp(x, -1, 1).to_vector<float>() == std::vector<float>{-1, 0, 1});
  CHECK((x + 1).dtype() == DType::f32);  // the scalar takes the tensor's dtype
  Tensor with_nan = Tensor::from_vector<double>({NAN, 1});
  CHECK(std::isnan(maximum(with_nan, 0.0).to_vector<double>()[0]));
  CHECK(std::isnan(minimum(0.0, with_nan).to_vector<double>()[0]));
}

TEST_CASE("gradcheck: every binary op with broadcasting and a non-contiguous input") {
  for (const BinaryCase& c : binary_cases()) {
    CAPTURE(c.name);
    // [3,1] with [4] -> [3,4]: both gradients are summed back over a broadcast dimension.
    Tensor a = param({3, 1}, 11, c.positive), b = param({4}, 12, c.positive);
    auto broadcast = gradcheck([&](const std::vector<Tensor>& in) { return c.op(in[0], in[1]); }, {a, b});
    CHECK_MESSAGE(broadcast.ok, broadcast.message);
    // A transposed [2,3] view against [1,3] and against a 0-d tensor.
    Tensor p = param({3, 2}, 13, c.positive), q = param({1, 3}, 14, c.positive), s = param({}, 15, c.positive);
    auto strided = gradcheck(
        [&](const std::vector<Tensor>& in) { return c.op(in[0].t(), in[1]) + c.op(in[2], in[0].t()); }, {p, q, s});
    CHECK_MESSAGE(strided.ok, strided.message);
  }
}

TEST_CASE("gradcheck: double operands on either side") {
  Tensor x = param({2, 3}, 21, /*positive=*/true);
  auto r = gradcheck(
      [](const std::vector<Tensor>& in) {
        const Tensor& v = in[0];
        return (2 - v) * 3 + 1 / (v + 5) - v / 4 + pow(v, 1.5) + pow(2.0, v) + maximum(v, 1.0) + minimum(1.2, v) -
               (v - 1);
      },
      {x});
  CHECK_MESSAGE(r.ok, r.message);
}

TEST_CASE("gradcheck: every unary op, on a transposed input") {
  for (const UnaryCase& c : unary_cases()) {
    CAPTURE(c.name);
    Tensor x = param({4, 3}, 31, c.positive);
    auto r = gradcheck([&](const std::vector<Tensor>& in) { return c.op(in[0].t()); }, {x});
    CHECK_MESSAGE(r.ok, r.message);
  }
}

TEST_CASE("kink gradients follow PyTorch: relu and abs 0 at 0, clamp passes on [min, max], ties split") {
  Tensor x = Tensor::from_vector<double>({-1, 0, 0.5, 1}).set_requires_grad();
  (relu(x) + abs(x) + clamp(x, 0, 0.5)).backward(Tensor::ones({4}, DType::f64));
  // relu': 0 0 1 1   abs': -1 0 1 1   clamp': 0 1 1 0
  CHECK(x.grad().to_vector<double>() == std::vector<double>{-1, 1, 3, 2});

  Tensor a = Tensor::from_vector<double>({1, 2}).set_requires_grad();
  Tensor b = Tensor::from_vector<double>({1, 3}).set_requires_grad();
  maximum(a, b).backward(Tensor::ones({2}, DType::f64));
  CHECK(a.grad().to_vector<double>() == std::vector<double>{0.5, 0});
  CHECK(b.grad().to_vector<double>() == std::vector<double>{0.5, 1});
}

TEST_CASE("engine accumulation through arithmetic: x * x and a + a") {
  Tensor x = param({3}, 41);
  (x * x).backward(Tensor::ones({3}, DType::f64));
  CHECK_CLOSE(x.grad(), (x * 2).detach(), 1e-15);

  Tensor a = param({2, 2}, 42);
  Tensor b = a + a;
  Tensor c = b + b;
  c.backward(Tensor::ones({2, 2}, DType::f64));
  CHECK(a.grad().to_vector<double>() == std::vector<double>(4, 4.0));
}

TEST_CASE("comparisons give b8 masks with broadcasting, against tensors and scalars, for every dtype") {
  using CompareFn = std::function<Tensor(const Tensor&, const Tensor&)>;
  struct Case {
    CompareFn op;
    std::function<double(double, double)> reference;
  };
  const std::vector<Case> cases = {
      {[](const Tensor& a, const Tensor& b) { return eq(a, b); }, [](double a, double b) { return double(a == b); }},
      {[](const Tensor& a, const Tensor& b) { return ne(a, b); }, [](double a, double b) { return double(a != b); }},
      {[](const Tensor& a, const Tensor& b) { return lt(a, b); }, [](double a, double b) { return double(a < b); }},
      {[](const Tensor& a, const Tensor& b) { return le(a, b); }, [](double a, double b) { return double(a <= b); }},
      {[](const Tensor& a, const Tensor& b) { return gt(a, b); }, [](double a, double b) { return double(a > b); }},
      {[](const Tensor& a, const Tensor& b) { return ge(a, b); }, [](double a, double b) { return double(a >= b); }},
  };
  // Small integers so that equality happens.
  Tensor a = Tensor::from_vector<double>({0, 1, 2, 1, 2, 0}, {3, 2}), b = Tensor::from_vector<double>({1, 0}, {2});
  for (size_t i = 0; i < cases.size(); ++i) {
    CAPTURE(i);
    for (DType dtype : {DType::f32, DType::f64, DType::i32, DType::b8}) {
      if (dtype == DType::b8 && i >= 2) continue;  // masks hold 0/1: check eq/ne only
      Tensor ta = (dtype == DType::b8 ? a.slice(0, 0, 1) : a).to(dtype), tb = b.to(dtype);
      Tensor mask = cases[i].op(ta, tb);
      CHECK(mask.dtype() == DType::b8);
      CHECK_CLOSE(mask, reference_binary(ta, tb, cases[i].reference), 0);
    }
  }
  Tensor x = Tensor::from_vector<float>({-1, 0, 2});
  CHECK(gt(x, 0.0).to_vector<uint8_t>() == std::vector<uint8_t>{0, 0, 1});
  CHECK(le(x, 0.0).to_vector<uint8_t>() == std::vector<uint8_t>{1, 1, 0});
  CHECK(eq(x, 2.0).to_vector<uint8_t>() == std::vector<uint8_t>{0, 0, 1});
  CHECK(ne(x, 2.0).to_vector<uint8_t>() == std::vector<uint8_t>{1, 1, 0});
  CHECK(lt(x, 0.0).to_vector<uint8_t>() == std::vector<uint8_t>{1, 0, 0});
  CHECK(ge(x, 0.0).to_vector<uint8_t>() == std::vector<uint8_t>{0, 1, 1});
  Tensor labels = Tensor::from_vector<int32_t>({3, 1});
  CHECK(eq(labels, 3.0).to_vector<uint8_t>() == std::vector<uint8_t>{1, 0});
  Tensor p = param({2}, 51);
  CHECK_FALSE(gt(p, 0.0).requires_grad());
}

TEST_CASE("logical ops: truth tables with broadcasting") {
  Tensor a = Tensor::from_vector<uint8_t>({0, 0, 1, 1}, {4, 1});
  Tensor b = Tensor::from_vector<uint8_t>({0, 1}, {2});
  CHECK(logical_and(a, b).to_vector<uint8_t>() == std::vector<uint8_t>{0, 0, 0, 0, 0, 1, 0, 1});
  CHECK(logical_or(a, b).to_vector<uint8_t>() == std::vector<uint8_t>{0, 1, 0, 1, 1, 1, 1, 1});
  CHECK(logical_not(b).to_vector<uint8_t>() == std::vector<uint8_t>{1, 0});
  CHECK(logical_not(a.t()).shape() == Shape{1, 4});
}

TEST_CASE("where: naive reference with broadcasting, integer values, gradcheck in a and b") {
  Tensor mask = gt(randn({3, 4}, 61), 0.0);
  Tensor a = randn({3, 1}, 62), b = randn({4}, 63);
  std::vector<double> m = mask.to_vector<double>();
  Tensor out = where(mask, a, b);
  Tensor chosen_a = reference_binary(a, b, [](double x, double) { return x; });
  Tensor chosen_b = reference_binary(a, b, [](double, double y) { return y; });
  std::vector<double> expected;
  for (size_t i = 0; i < m.size(); ++i)
    expected.push_back(m[i] ? chosen_a.to_vector<double>()[i] : chosen_b.to_vector<double>()[i]);
  CHECK_CLOSE(out.to_vector<double>(), expected, 0, 0);

  Tensor ints = where(Tensor::from_vector<uint8_t>({1, 0}), Tensor::from_vector<int32_t>({7, 7}),
                      Tensor::from_vector<int32_t>({9, 9}));
  CHECK(ints.to_vector<int32_t>() == std::vector<int32_t>{7, 9});

  Tensor pa = param({3, 1}, 64), pb = param({4}, 65);
  auto r = gradcheck([&](const std::vector<Tensor>& in) { return where(mask, in[0], in[1].unsqueeze(0)); }, {pa, pb});
  CHECK_MESSAGE(r.ok, r.message);
  auto strided = gradcheck([&](const std::vector<Tensor>& in) { return where(mask.t(), in[0].t(), in[1]); },
                           {param({3, 4}, 66), param({}, 67)});
  CHECK_MESSAGE(strided.ok, strided.message);
}

TEST_CASE("element-wise errors: broadcast, dtypes, masks, clamp bounds") {
  Tensor f32 = Tensor::ones({2, 3}), f64 = Tensor::ones({2, 3}, DType::f64);
  CHECK_THROWS_HEADROOM(add(f32, Tensor::ones({4})), "[add] shapes (2,3) and (4) cannot be broadcast together");
  CHECK_THROWS_HEADROOM(f32 * Tensor::ones({3, 3}), "[mul] shapes (2,3) and (3,3)");
  CHECK_THROWS_HEADROOM(add(f32, f64), "[add] dtypes differ: f32 and f64");
  CHECK_THROWS_HEADROOM(maximum(f64, f32), "[maximum] dtypes differ: f64 and f32");
  CHECK_THROWS_HEADROOM(lt(f32, f64), "[lt] dtypes differ");
  CHECK_THROWS_HEADROOM(exp(Tensor::ones({2}, DType::i32)), "[exp] expected input of dtype f32 or f64, got i32");
  CHECK_THROWS_HEADROOM(Tensor::ones({2}, DType::i32) + 1, "[add] expected input of dtype f32 or f64");
  CHECK_THROWS_HEADROOM(where(f32, f32, f32), "[where] expected mask of dtype b8, got f32");
  CHECK_THROWS_HEADROOM(where(gt(f32, 0.0), f32, f64), "[where] dtypes differ: f32 and f64");
  CHECK_THROWS_HEADROOM(where(Tensor::ones({4}, DType::b8), f32, f32), "[where] shapes (4) and (2,3)");
  CHECK_THROWS_HEADROOM(logical_and(f32, gt(f32, 0.0)), "[logical_and] expected masks of dtype b8, got f32");
  CHECK_THROWS_HEADROOM(logical_not(f32), "[logical_not] expected mask of dtype b8");
  CHECK_THROWS_HEADROOM(clamp(f32, 1, 0), "[clamp] min 1 is greater than max 0");
}

TEST_CASE("add_ adds in place, bumps the version and refuses what add() would not do silently") {
  Generator gen(43);
  for (DType dtype : {DType::f32, DType::f64}) {
    Tensor target = Tensor::randn({3, 5}, gen, dtype), addend = Tensor::randn({3, 5}, gen, dtype);
    std::vector<double> expected = add(target, addend).to_vector<double>();  // add() has the naive-loop test
    const void* storage = target.raw_data();
    const uint64_t version = target.version();
    add_(target, addend.t().contiguous().t());  // a strided addend is read through its strides
    CHECK(target.raw_data() == storage);
    CHECK(target.version() == version + 1);
    CHECK(target.to_vector<double>() == expected);
  }
  // A strided target (autograd adds a slice's gradient into its columns):
  // only the view's elements change, on both sides of the threads' threshold.
  for (int64_t rows : {4, 1024}) {
    Tensor whole = Tensor::randn({rows, 136}, gen), addend = Tensor::randn({rows, 64}, gen);
    std::vector<float> expected = whole.to_vector<float>(), part = addend.to_vector<float>();
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < 64; ++j) expected[i * 136 + 8 + j] += part[i * 64 + j];
    add_(whole.narrow(1, 8, 64), addend);
    CHECK(whole.to_vector<float>() == expected);
  }
  Tensor t = Tensor::ones({2, 3});
  add_(t.t(), Tensor::arange(6).view({3, 2}));  // target [3, 2] with strides (1, 3)
  CHECK(t.to_vector<float>() == std::vector<float>{1, 3, 5, 2, 4, 6});
  t.fill_(1);
  CHECK_THROWS_HEADROOM(add_(t, Tensor::ones({3})),
                        "[add_] expected an addend of the target's shape, got (2,3) "
                        "and (3)");
  CHECK_THROWS_HEADROOM(add_(Tensor::ones({1, 3}).expand({2, 3}), t),
                        "[add_] target of shape (2,3) is expanded (stride 0 in dimension 0); use add");
  CHECK_THROWS_HEADROOM(add_(t, Tensor::ones({2, 3}, DType::f64)), "[add_] dtypes differ: f32 and f64");
  Tensor leaf = Tensor::ones({2, 3}).set_requires_grad();
  CHECK_THROWS_HEADROOM(add_(leaf, t), "[add_] in-place write to a tensor that requires grad");
  NoGradGuard no_grad;
  add_(leaf, t);
  CHECK(leaf.to_vector<float>() == std::vector<float>(6, 2.0f));
}
