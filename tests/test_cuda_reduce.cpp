// CUDA reductions against the CPU ones (check_parity: outputs and gradients):
// sum, mean, logsumexp, max, min, var, argmax, argmin over adjacent and
// non-adjacent dimensions, short and long slices (one block per output, with
// inner = 1 and inner >= 32), ties, NaN, empty slices and empty outputs,
// non-contiguous inputs, f32 and f64.  Skipped (and passing) without a device.
#include <cmath>
#include <functional>
#include <string>

#include "cuda_helpers.h"

using namespace headroom;
using headroom::testing::check_parity;
using headroom::testing::compare;

namespace {

using Inputs = std::vector<Tensor>;
using Dims = std::vector<int64_t>;

// Integers in {-2, ..., 2} as floats: many ties within a slice.
Tensor small_ints(const Shape& shape, Generator& gen, DType dtype = DType::f32) {
  return Tensor::rand(shape, gen, -2.99, 3, DType::f64).to(DType::i32).to(dtype);
}

struct Case {
  Shape shape;
  Dims dims;
  bool keepdim;
};

// [outer, n, inner] arrangements: one dimension (inner 1, inner >= 32, inner
// between), adjacent and non-adjacent dimension lists, all dimensions, long
// slices (many elements per thread), size-1 slices and a 0-d input.
const Case kCases[] = {{{3, 7, 33}, {1}, false},
                       {{3, 7, 33}, {0, 2}, true},
                       {{3, 7, 33}, {}, false},
                       {{3, 7, 33}, {-1}, true},
                       {{257}, {0}, false},
                       {{5, 1}, {1}, false},
                       {{2, 3, 5}, {0, 1}, false},
                       {{40, 3001}, {1}, false},
                       {{3001, 40}, {0}, true},
                       {{2, 1000, 3}, {1}, false},
                       {{}, {}, false},
                       {{33, 2, 2, 2}, {1, 3}, false}};

using Reduction = std::function<Tensor(const Tensor&, const Dims&, bool)>;

struct NamedReduction {
  const char* name;
  Reduction fn;
};

const NamedReduction kReductions[] = {
    {"sum", [](const Tensor& x, const Dims& d, bool k) { return sum(x, d, k); }},
    {"mean", [](const Tensor& x, const Dims& d, bool k) { return mean(x, d, k); }},
    {"logsumexp", [](const Tensor& x, const Dims& d, bool k) { return logsumexp(x, d, k); }},
    {"max", [](const Tensor& x, const Dims& d, bool k) { return headroom::max(x, d, k); }},
    {"min", [](const Tensor& x, const Dims& d, bool k) { return headroom::min(x, d, k); }},
};

}  // namespace

TEST_CASE("cuda reduce: sum, mean, logsumexp, max, min over every arrangement (f32)") {
  Generator gen(31);
  for (const NamedReduction& op : kReductions) {
    for (const Case& c : kCases) {
      INFO(op.name, " of ", shape_str(c.shape), " over ", shape_str(c.dims), c.keepdim ? " keepdim" : "");
      check_parity([&](const Inputs& in) { return op.fn(in[0], c.dims, c.keepdim); }, {Tensor::randn(c.shape, gen)},
                   1e-5, 1e-5);
    }
  }
}

TEST_CASE("cuda reduce: max and min route the gradient to the first of tied elements") {
  Generator gen(32);
  for (const NamedReduction& op : kReductions) {
    INFO(op.name);
    // Small integers: every slice holds ties, in rows (inner 1) and columns (inner 9).
    check_parity([&](const Inputs& in) { return op.fn(in[0], {1}, false); }, {small_ints({9, 70}, gen)}, 1e-5, 1e-5);
    check_parity([&](const Inputs& in) { return op.fn(in[0], {0}, false); }, {small_ints({70, 9}, gen)}, 1e-5, 1e-5);
  }
}

TEST_CASE("cuda reduce: max(x) and min(x) over all elements, with ties, non-contiguous, f32 and f64") {
  Generator gen(38);
  for (bool largest : {true, false}) {
    INFO((largest ? "max" : "min"));
    auto extreme = [largest](const Tensor& t) { return largest ? headroom::max(t) : headroom::min(t); };
    check_parity([&](const Inputs& in) { return extreme(in[0]); }, {small_ints({40, 3001}, gen)}, 0);
    check_parity(
        [&](const Inputs& in) {
          return extreme(in[0].permute({2, 0, 1}));
        },
        {Tensor::randn({4, 3, 9}, gen, DType::f64)}, 0);
    check_parity([&](const Inputs& in) { return extreme(in[0]); }, {Tensor::randn({}, gen)}, 0);
  }
}

TEST_CASE("cuda reduce: non-contiguous inputs and f64") {
  Generator gen(33);
  for (const NamedReduction& op : kReductions) {
    INFO(op.name);
    check_parity([&](const Inputs& in) { return op.fn(in[0].t(), {1}, false); }, {Tensor::randn({35, 6}, gen)}, 1e-5,
                 1e-5);
    check_parity(
        [&](const Inputs& in) {
          return op.fn(in[0].slice(2, 0, 9, 2).permute({2, 0, 1}), {0, 2}, true);
        },
        {Tensor::randn({4, 3, 9}, gen)}, 1e-5, 1e-5);
    check_parity(
        [&](const Inputs& in) {
          return op.fn(in[0], {0, 2}, false);
        },
        {Tensor::randn({5, 4, 33}, gen, DType::f64)}, 1e-12, 1e-12);
  }
}

TEST_CASE("cuda reduce: cumsum along each dimension, non-contiguous, f32 and f64") {
  Generator gen(35);
  for (int64_t dim : {0, 1, -1}) {
    INFO("dim ", dim);
    check_parity([&](const Inputs& in) { return cumsum(in[0], dim); }, {Tensor::randn({5, 300, 7}, gen)}, 1e-5, 1e-5);
    check_parity(
        [&](const Inputs& in) {
          return cumsum(in[0].permute({2, 0, 1}), dim);
        },
        {Tensor::randn({4, 3, 9}, gen, DType::f64)}, 1e-12, 1e-12);
  }
  check_parity([&](const Inputs& in) { return cumsum(in[0], 1); }, {Tensor::randn({3, 0}, gen)}, 0, 0);
}

TEST_CASE("cuda reduce: var with both corrections") {
  Generator gen(34);
  for (int64_t correction : {0, 1}) {
    check_parity([&](const Inputs& in) { return var(in[0], {1}, correction); }, {Tensor::randn({6, 257}, gen)}, 1e-5,
                 1e-5);
    check_parity(
        [&](const Inputs& in) {
          return var(in[0].t(), {0, 2}, correction, true);
        },
        {Tensor::randn({7, 4, 3}, gen)}, 1e-5, 1e-5);
    check_parity([&](const Inputs& in) { return var(in[0], {}, correction); },
                 {Tensor::randn({33, 5}, gen, DType::f64)}, 1e-12, 1e-12);
  }
}

TEST_CASE("cuda reduce: argmax and argmin, with ties") {
  Generator gen(35);
  for (int64_t dim : {0, 1, -1}) {
    INFO("dim ", dim);
    Tensor ties = small_ints({37, 41}, gen);
    check_parity([&](const Inputs& in) { return argmax(in[0], dim).to(DType::f32); }, {ties}, 0);
    check_parity([&](const Inputs& in) { return argmin(in[0], dim, true).to(DType::f32); }, {ties}, 0);
    check_parity([&](const Inputs& in) { return argmax(in[0].t(), dim).to(DType::f32); },
                 {Tensor::randn({300, 7}, gen, DType::f64)}, 0);
  }
}

TEST_CASE("cuda reduce: NaN wins max and min at its first position") {
  const float nan = NAN;
  // Rows: a NaN in the middle, two NaNs, none; reduced along the rows (inner 1) and down the columns.
  Tensor x = Tensor::from_vector<float>({1, nan, 3, 0, nan, 2, nan, 5, 4, -1, 7, 7, 0, -3, -3, 1}, {4, 4});
  Tensor xd = x.to(Device::cuda());
  for (int64_t dim : {0, 1}) {
    INFO("dim ", dim);
    CHECK(argmax(xd, dim).to(Device::cpu()).to_vector<int32_t>() == argmax(x, dim).to_vector<int32_t>());
    CHECK(argmin(xd, dim).to(Device::cpu()).to_vector<int32_t>() == argmin(x, dim).to_vector<int32_t>());
    std::vector<float> gpu = headroom::max(xd, {dim}).to(Device::cpu()).to_vector<float>();
    std::vector<float> cpu = headroom::max(x, {dim}).to_vector<float>();
    for (size_t i = 0; i < cpu.size(); ++i) CHECK((std::isnan(gpu[i]) ? std::isnan(cpu[i]) : gpu[i] == cpu[i]));
  }
  CHECK(argmax(x, 1).to_vector<int32_t>() == std::vector<int32_t>{1, 0, 2, 3});  // hand-checked
}

TEST_CASE("cuda reduce: empty slices and empty outputs") {
  Generator gen(36);
  // Nothing to reduce into: [0, 4] over dim 1, and [4, 0] over dim 0.
  for (const NamedReduction& op : {kReductions[0], kReductions[1], kReductions[2]}) {
    INFO(op.name);
    check_parity([&](const Inputs& in) { return op.fn(in[0], {1}, false); }, {Tensor::randn({0, 4}, gen)}, 0);
    check_parity([&](const Inputs& in) { return op.fn(in[0], {0}, false); }, {Tensor::randn({4, 0}, gen)}, 0);
  }
  // Empty slices: sum 0, mean NaN, logsumexp -inf (compared directly: NaN and inf fail compare()).
  Tensor empty = Tensor::zeros({3, 0}, DType::f32, Device::cuda());
  CHECK(sum(empty, {1}).to(Device::cpu()).to_vector<float>() == std::vector<float>{0, 0, 0});
  for (float v : mean(empty, {1}).to(Device::cpu()).to_vector<float>()) CHECK(std::isnan(v));
  for (float v : logsumexp(empty, {1}).to(Device::cpu()).to_vector<float>()) CHECK(v == -INFINITY);
  CHECK_THROWS_HEADROOM(headroom::max(empty, {1}), "empty dimension");
}

TEST_CASE("cuda reduce: logsumexp with -inf and +inf entries") {
  const float inf = INFINITY;
  // Rows: some -inf (masked), all -inf, one +inf among numbers, large values.
  Tensor x =
      Tensor::from_vector<float>({-inf, 1, -inf, 2, -inf, -inf, -inf, -inf, 3, inf, -1, 0, 1000, 999, 998, 0}, {4, 4});
  std::vector<float> gpu = logsumexp(x.to(Device::cuda()), {1}).to(Device::cpu()).to_vector<float>();
  std::vector<float> cpu = logsumexp(x, {1}).to_vector<float>();
  REQUIRE(gpu.size() == 4);
  CHECK(gpu[0] == doctest::Approx(cpu[0]));
  CHECK(gpu[1] == -inf);
  CHECK(cpu[1] == -inf);
  CHECK(gpu[2] == inf);
  CHECK(cpu[2] == inf);
  CHECK(gpu[3] == doctest::Approx(cpu[3]));
  // The finite rows also over a layout with inner > 1, and their gradients.
  check_parity([](const Inputs& in) { return logsumexp(in[0].t(), {0}); }, {x.slice(0, 0, 1)}, 1e-5, 1e-5);
  check_parity([](const Inputs& in) { return logsumexp(in[0], {1}); }, {x.slice(0, 3, 4)}, 1e-5, 1e-5);
}

TEST_CASE("cuda reduce: results are identical run to run") {
  Generator gen(37);
  Tensor x = Tensor::randn({4096, 300}, gen).to(Device::cuda());
  for (int64_t dim : {0, 1}) {
    Tensor first = sum(x, {dim}).to(Device::cpu()), second = sum(x, {dim}).to(Device::cpu());
    CHECK(compare(first, second, 0) == "");
    first = logsumexp(x, {dim}).to(Device::cpu());
    second = logsumexp(x, {dim}).to(Device::cpu());
    CHECK(compare(first, second, 0) == "");
  }
}
