// Reductions: every op against a naive loop over all dim lists of a 3-D
// tensor (contiguous and permuted, f32 and f64), gradchecks, ties, stability,
// empty dimensions and errors; cumsum against a running-sum loop.
#include <algorithm>
#include <cmath>
#include <functional>

#include "headroom/ops/elementwise.h"
#include "headroom/ops/reduce.h"
#include "helpers.h"

using namespace headroom;

namespace {

using Slice = std::vector<double>;

Tensor leaf(const Shape& shape, uint64_t seed) {
  Generator g(seed);
  return Tensor::randn(shape, g, DType::f64).set_requires_grad();
}

// The reduced elements behind each output, in row-major order of the reduced
// dimensions; outputs in row-major order of the kept ones.  Walks x's
// elements in row-major order, tracking the index like an odometer.
std::vector<Slice> slices(const Tensor& x, const std::vector<bool>& reduced) {
  int64_t outputs = 1;
  for (int d = 0; d < x.dim(); ++d) outputs *= reduced[d] ? 1 : x.size(d);
  std::vector<Slice> out(outputs);
  std::vector<int64_t> index(x.dim(), 0);
  for (double v : x.to_vector<double>()) {
    int64_t o = 0;
    for (int d = 0; d < x.dim(); ++d)
      if (!reduced[d]) o = o * x.size(d) + index[d];
    out[o].push_back(v);
    for (int d = x.dim() - 1; d >= 0 && ++index[d] == x.size(d); --d) index[d] = 0;
  }
  return out;
}

std::vector<bool> reduced_mask(int ndim, const std::vector<int64_t>& dims) {
  std::vector<bool> mask(ndim, dims.empty());
  for (int64_t d : dims) mask[d < 0 ? d + ndim : d] = true;
  return mask;
}

Shape reduced_shape(const Shape& shape, const std::vector<bool>& reduced, bool keepdim) {
  Shape out;
  for (size_t d = 0; d < shape.size(); ++d)
    if (!reduced[d] || keepdim) out.push_back(reduced[d] ? 1 : shape[d]);
  return out;
}

double slice_sum(const Slice& s) {
  double total = 0;
  for (double v : s) total += v;
  return total;
}

int64_t first_extreme(const Slice& s, bool largest) {
  int64_t best = 0;
  for (size_t i = 1; i < s.size(); ++i)
    if (largest ? s[i] > s[best] : s[i] < s[best]) best = int64_t(i);
  return best;
}

double slice_var(const Slice& s, int64_t correction) {
  double mean = slice_sum(s) / double(s.size()), squares = 0;
  for (double v : s) squares += (v - mean) * (v - mean);
  return squares / double(int64_t(s.size()) - correction);
}

double slice_logsumexp(const Slice& s) {
  double m = *std::max_element(s.begin(), s.end()), total = 0;
  for (double v : s) total += std::exp(v - m);
  return m + std::log(total);
}

struct ReduceCase {
  const char* name;
  std::function<Tensor(const Tensor&, const std::vector<int64_t>&, bool)> op;
  std::function<double(const Slice&)> reference;
};

std::vector<ReduceCase> reduce_cases() {
  using Dims = std::vector<int64_t>;
  return {
      {"sum", [](const Tensor& x, const Dims& d, bool k) { return sum(x, d, k); }, slice_sum},
      {"mean", [](const Tensor& x, const Dims& d, bool k) { return mean(x, d, k); },
       [](const Slice& s) { return slice_sum(s) / double(s.size()); }},
      {"max", [](const Tensor& x, const Dims& d, bool k) { return max(x, d, k); },
       [](const Slice& s) { return s[first_extreme(s, true)]; }},
      {"min", [](const Tensor& x, const Dims& d, bool k) { return min(x, d, k); },
       [](const Slice& s) { return s[first_extreme(s, false)]; }},
      {"var", [](const Tensor& x, const Dims& d, bool k) { return var(x, d, 1, k); },
       [](const Slice& s) { return slice_var(s, 1); }},
      {"var_population", [](const Tensor& x, const Dims& d, bool k) { return var(x, d, 0, k); },
       [](const Slice& s) { return slice_var(s, 0); }},
      {"logsumexp", [](const Tensor& x, const Dims& d, bool k) { return logsumexp(x, d, k); }, slice_logsumexp},
  };
}

// Every dim list of a 3-D tensor: adjacent ones, split ones ({0, 2}: the
// permuted layout), negative, unordered, and all.
const std::vector<std::vector<int64_t>> kDimLists = {{}, {0}, {1}, {-1}, {0, 1}, {1, 2}, {0, 2}, {2, 0}, {0, 1, 2}};

}  // namespace

TEST_CASE("reductions match naive loops over every dim list (f32, f64, permuted input, keepdim)") {
  for (DType dtype : {DType::f32, DType::f64}) {
    Generator g(7);
    Tensor base = Tensor::randn({2, 3, 4}, g, dtype);
    for (const Tensor& x : {base, base.permute({2, 0, 1})}) {
      for (const ReduceCase& c : reduce_cases()) {
        for (const auto& dims : kDimLists) {
          for (bool keepdim : {false, true}) {
            CAPTURE(c.name);
            CAPTURE(dtype);
            CAPTURE(shape_str(dims));
            std::vector<bool> reduced = reduced_mask(x.dim(), dims);
            std::vector<double> expected;
            for (const Slice& s : slices(x, reduced)) expected.push_back(c.reference(s));
            Tensor out = c.op(x, dims, keepdim);
            CHECK(out.shape() == reduced_shape(x.shape(), reduced, keepdim));
            CHECK(out.dtype() == dtype);
            CHECK_CLOSE(out.to_vector<double>(), expected, 1e-5, 1e-5);
          }
        }
      }
    }
  }
}

TEST_CASE("argmax and argmin match naive loops along each dimension") {
  Generator g(8);
  Tensor base = Tensor::randn({3, 4, 5}, g);
  for (const Tensor& x : {base, base.permute({1, 2, 0})}) {
    for (int64_t dim : {0, 1, 2, -1}) {
      for (bool keepdim : {false, true}) {
        CAPTURE(dim);
        std::vector<bool> reduced = reduced_mask(x.dim(), {dim});
        std::vector<double> expect_max, expect_min;
        for (const Slice& s : slices(x, reduced)) {
          expect_max.push_back(double(first_extreme(s, true)));
          expect_min.push_back(double(first_extreme(s, false)));
        }
        Tensor amax = argmax(x, dim, keepdim), amin = argmin(x, dim, keepdim);
        CHECK(amax.dtype() == DType::i32);
        CHECK(amax.shape() == reduced_shape(x.shape(), reduced, keepdim));
        CHECK_CLOSE(amax.to_vector<double>(), expect_max, 0, 0);
        CHECK_CLOSE(amin.to_vector<double>(), expect_min, 0, 0);
      }
    }
  }
}

TEST_CASE("ties: argmax/argmin pick the lowest index and max/min send the gradient to the first extreme") {
  Tensor x = Tensor::from_vector<double>({1, 3, 3, 2, 2, 1}, {2, 3}).set_requires_grad();
  CHECK(argmax(x, 1).to_vector<int32_t>() == std::vector<int32_t>{1, 0});
  CHECK(argmin(x, 1).to_vector<int32_t>() == std::vector<int32_t>{0, 2});
  CHECK(argmax(x, 0, /*keepdim=*/true).to_vector<int32_t>() == std::vector<int32_t>{1, 0, 0});
  CHECK(argmax(x, 0, true).shape() == Shape{1, 3});
  CHECK_FALSE(argmax(x, 1).requires_grad());

  max(x, {1}).backward(Tensor::ones({2}, DType::f64));
  CHECK(x.grad().to_vector<double>() == std::vector<double>{0, 1, 0, 1, 0, 0});
  x.zero_grad();
  min(x, {1}).backward(Tensor::ones({2}, DType::f64));
  CHECK(x.grad().to_vector<double>() == std::vector<double>{1, 0, 0, 0, 0, 1});
  x.zero_grad();
  max(x, {}).backward();  // over all elements: the first 3, at (0, 1)
  CHECK(x.grad().to_vector<double>() == std::vector<double>{0, 1, 0, 0, 0, 0});
}

TEST_CASE("gradcheck: every value reduction over adjacent and split dims, on a non-contiguous input") {
  struct Dims {
    std::vector<int64_t> dims;
    bool keepdim;
  };
  const std::vector<Dims> lists = {{{1}, false}, {{0, 2}, true}, {{-1, 0}, false}, {{}, false}};
  for (const ReduceCase& c : reduce_cases()) {
    for (const Dims& d : lists) {
      CAPTURE(c.name);
      CAPTURE(shape_str(d.dims));
      Tensor x = leaf({3, 2, 4}, 9);
      // x.permute: a [4, 3, 2] view with non-contiguous strides.
      auto r = gradcheck(
          [&](const std::vector<Tensor>& in) {
            return c.op(in[0].permute({2, 0, 1}), d.dims, d.keepdim);
          },
          {x});
      CHECK_MESSAGE(r.ok, r.message);
    }
  }
  auto all = gradcheck([](const std::vector<Tensor>& in) { return sum(in[0]) * mean(in[0]); }, {leaf({2, 3}, 10)});
  CHECK_MESSAGE(all.ok, all.message);
}

// max(x) and min(x): every element of the tensor, in row-major order of its
// (possibly permuted) view.
TEST_CASE("max(x) and min(x) over all elements match a loop, are [] and send the gradient to the first extreme") {
  for (DType dtype : {DType::f32, DType::f64}) {
    Generator g(11);
    Tensor base = Tensor::randn({3, 4, 5}, g, dtype);
    for (const Tensor& x : {base, base.permute({2, 0, 1})}) {
      CAPTURE(dtype);
      const Slice values = x.to_vector<double>();
      for (bool largest : {true, false}) {
        CAPTURE(largest);
        Tensor out = largest ? max(x) : min(x);
        CHECK(out.shape() == Shape{});
        CHECK(out.dtype() == dtype);
        CHECK(out.item() == values[first_extreme(values, largest)]);
      }
    }
  }

  // Ties: the first extreme in row-major order of the view gets the whole gradient.
  Tensor x = Tensor::from_vector<double>({1, 3, 3, 3, 0, 0}, {2, 3}).set_requires_grad();
  max(x).backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{0, 1, 0, 0, 0, 0});
  x.zero_grad();
  min(x).backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{0, 0, 0, 0, 1, 0});
  x.zero_grad();
  max(x.t()).backward(Tensor::scalar(2, DType::f64));  // x.t() reads 1, 3, 3, 0, 3, 0: the first 3 is x[1, 0]
  CHECK(x.grad().to_vector<double>() == std::vector<double>{0, 0, 0, 2, 0, 0});

  for (bool largest : {true, false}) {
    CAPTURE(largest);
    auto extreme = [largest](const Tensor& t) { return largest ? max(t) : min(t); };
    auto r = gradcheck(
        [&](const std::vector<Tensor>& in) {
          return extreme(in[0].permute({2, 0, 1})) * 3.0;
        },
        {leaf({3, 2, 4}, 12)});
    CHECK_MESSAGE(r.ok, r.message);
    CHECK(std::isnan(extreme(Tensor::from_vector<float>({1, NAN, 2})).item()));
    CHECK(extreme(Tensor::scalar(3.5, DType::f64)).item() == 3.5);
  }
  CHECK_THROWS_HEADROOM(max(Tensor::ones({2, 0})), "[max] cannot reduce over an empty dimension (input shape (2,0))");
  CHECK_THROWS_HEADROOM(min(Tensor::ones({0})), "[min] cannot reduce over an empty dimension (input shape (0))");
  CHECK_THROWS_HEADROOM(max(Tensor::ones({2}, DType::i32)), "[max] expected input of dtype f32 or f64, got i32");
}

TEST_CASE("logsumexp is stable and handles -inf; sums of f32 accumulate in double") {
  Tensor big = Tensor::from_vector<float>({1000, 1000, -1000, -1000}, {2, 2});
  CHECK_CLOSE(logsumexp(big, {1}).to_vector<double>(), std::vector<double>{1000 + std::log(2.0), -1000 + std::log(2.0)},
              1e-3, 0);
  Tensor ninf = Tensor::from_vector<double>({-INFINITY, -INFINITY, -INFINITY, 0}, {2, 2});
  std::vector<double> lse = logsumexp(ninf, {1}).to_vector<double>();
  CHECK(lse[0] == -INFINITY);
  CHECK(lse[1] == 0);
  // Rows (the contiguous fast path) and columns (the one-pass accumulator) agree on +inf and NaN.
  Tensor special = Tensor::from_vector<float>({1, INFINITY, 2, -INFINITY, NAN, 0, 3, 4, 5}, {3, 3});
  for (bool rows : {true, false}) {
    std::vector<float> got =
        (rows ? logsumexp(special, {1}) : logsumexp(special.t().contiguous(), {0})).to_vector<float>();
    CHECK(got[0] == INFINITY);
    CHECK(std::isnan(got[1]));
    CHECK(got[2] == doctest::Approx(5 + std::log(1 + std::exp(-1.0) + std::exp(-2.0))));
  }

  // 2^20 copies of 0.1f: a float accumulator drifts by about 1%.
  Tensor tenths = Tensor::full({256, 4096}, 0.1);
  const double exact = double(0.1f) * 4096;
  CHECK_CLOSE(sum(tenths, {1}).to_vector<double>(), std::vector<double>(256, exact), 0, 1e-6);
  CHECK(sum(tenths).item() == doctest::Approx(exact * 256).epsilon(1e-6));
}

TEST_CASE("empty reductions: sum 0, mean NaN, logsumexp -inf; 0-d inputs") {
  Tensor empty = Tensor::zeros({2, 0});
  CHECK(sum(empty, {1}).to_vector<double>() == std::vector<double>{0, 0});
  CHECK(std::isnan(mean(empty, {1}).to_vector<double>()[0]));
  CHECK(logsumexp(empty, {1}).to_vector<double>()[0] == -INFINITY);
  CHECK(sum(empty, {0}).shape() == Shape{0});
  Tensor scalar = Tensor::scalar(3.5, DType::f64);
  CHECK(sum(scalar).item() == 3.5);
  CHECK(max(scalar, {}).item() == 3.5);
}

// cumsum against a loop along each dimension of a 3-D tensor, contiguous and
// permuted (a non-contiguous view), f32 and f64.
TEST_CASE("cumsum matches a running-sum loop along every dimension (f32, f64, permuted input)") {
  for (DType dtype : {DType::f32, DType::f64})
    for (bool permuted : {false, true})
      for (int64_t dim : {0, 1, 2, -1}) {
        CAPTURE(dtype);
        CAPTURE(permuted);
        CAPTURE(dim);
        Generator gen(uint64_t(21 + dim));
        Tensor base = Tensor::randn({3, 4, 5}, gen, dtype);
        Tensor x = permuted ? base.permute({2, 0, 1}) : base;  // [5, 3, 4] view, or [3, 4, 5]
        const Shape shape = x.shape();
        const int axis = int(dim < 0 ? dim + x.dim() : dim);
        std::vector<double> v = x.contiguous().to_vector<double>(), want(v.size());
        const int64_t inner = axis == 2 ? 1 : axis == 1 ? shape[2] : shape[1] * shape[2];
        for (size_t e = 0; e < v.size(); ++e) {  // element e adds to the one before it along axis
          const int64_t along = (int64_t(e) / inner) % shape[axis];
          want[e] = v[e] + (along > 0 ? want[e - inner] : 0.0);
        }
        Tensor got = cumsum(x, dim);
        CHECK(got.shape() == shape);
        CHECK_CLOSE(got.to_vector<double>(), want, dtype == DType::f32 ? 1e-5 : 1e-12, 0.0);
      }
  // Empty along the summed dimension, and elsewhere.
  CHECK(cumsum(Tensor::ones({3, 0}), 1).shape() == Shape({3, 0}));
  CHECK(cumsum(Tensor::ones({0, 3}), 1).shape() == Shape({0, 3}));
}

TEST_CASE("gradcheck: cumsum along each dimension of a non-contiguous input") {
  for (int64_t dim : {0, 1, 2}) {
    CAPTURE(dim);
    auto r = gradcheck(
        [&](const std::vector<Tensor>& in) {
          return cumsum(in[0].permute({2, 0, 1}), dim);
        },
        {leaf({3, 2, 4}, uint64_t(40 + dim))});
    CHECK_MESSAGE(r.ok, r.message);
  }
}

TEST_CASE("reduction errors: dims out of range or repeated, empty dims for max/argmax, var degrees of freedom, dtype") {
  Tensor x = Tensor::ones({2, 3, 4});
  CHECK_THROWS_HEADROOM(sum(x, {3}), "[sum] dimension 3 is out of range for a tensor with 3 dimensions");
  CHECK_THROWS_HEADROOM(mean(x, {-4}), "[mean] dimension -4 is out of range");
  CHECK_THROWS_HEADROOM(max(x, {1, -2}), "[max] dimension -2 appears twice in (1,-2)");
  CHECK_THROWS_HEADROOM(argmax(x, 5), "[argmax] dimension 5 is out of range");
  CHECK_THROWS_HEADROOM(argmax(Tensor::ones({2, 0}), 1),
                        "[argmax] cannot reduce over an empty dimension (input shape (2,0))");
  CHECK_THROWS_HEADROOM(min(Tensor::ones({0, 3}), {0}), "[min] cannot reduce over an empty dimension");
  CHECK_THROWS_HEADROOM(var(Tensor::ones({3, 1}), {1}),
                        "[var] 1 reduced element(s) of shape (3,1) leave no degrees of freedom with correction 1");
  CHECK_THROWS_HEADROOM(sum(Tensor::ones({2}, DType::i32)), "[sum] expected input of dtype f32 or f64, got i32");
  CHECK_THROWS_HEADROOM(logsumexp(Tensor::ones({2}, DType::b8), {0}), "[logsumexp] expected input of dtype f32 or f64");
  CHECK_THROWS_HEADROOM(cumsum(x, 3), "[cumsum] dimension 3 is out of range for a tensor with 3 dimensions");
  CHECK_THROWS_HEADROOM(cumsum(Tensor::ones({2}, DType::i32), 0),
                        "[cumsum] expected input of dtype f32 or f64, got i32");
  CHECK_THROWS_HEADROOM(cumsum(Tensor::ones({}), 0), "[cumsum] expected a tensor with at least one dimension");
}
