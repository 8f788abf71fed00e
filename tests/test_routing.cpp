// The routing family: route(), topk, put_along_rows, index_select, gather_rows,
// scatter_add_rows, segment_matmul and its gather / scatter forms.  Every op is checked against a plain
// per-token, per-slot loop (outputs and all gradients, gates included), by
// gradcheck in f64, on the edge cases every route plan must handle (an empty
// expert, all tokens on one expert, k == E, a single token), and for its error
// messages.
#include <algorithm>
#include <climits>
#include <functional>
#include <numeric>
#include <type_traits>
#include <utility>

#include "headroom/ops/attention.h"
#include "headroom/ops/reduce.h"
#include "headroom/ops/cpu/indexed_gemm.h"
#include "headroom/ops/cpu/routing.h"
#include "headroom/ops/reference/kernels.h"
#include "headroom/ops/routing.h"
#include "helpers.h"

using namespace headroom;

namespace {

Tensor param(const Shape& shape, uint64_t seed, DType dtype = DType::f64) {
  Generator gen(seed);
  return Tensor::randn(shape, gen, dtype).set_requires_grad();
}

Tensor random_indices(int64_t tokens, int64_t k, int64_t segments, uint64_t seed) {
  Generator gen(seed);
  std::vector<int32_t> values(tokens * k);
  for (int32_t& v : values) v = int32_t(gen.next_int(segments));
  return Tensor::from_vector(values, {tokens, k});
}

// Reference top-k of one row: a stable sort by value, descending, so equal
// values keep their index order.
std::vector<int32_t> reference_topk(const std::vector<double>& row, int64_t k) {
  std::vector<int32_t> idx(row.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](int32_t a, int32_t b) { return row[a] > row[b]; });
  idx.resize(k);
  return idx;
}

// A weight gradient's slice e is exactly 0: no row used it.
void check_zero_slice(const Tensor& grad, int64_t e) {
  std::vector<double> slice = grad.select(0, e).to_vector<double>();
  CHECK(std::all_of(slice.begin(), slice.end(), [](double v) { return v == 0.0; }));
}

}  // namespace

// ---- route ---------------------------------------------------------------------

TEST_CASE("routing: route() on a hand-checkable case") {
  // Token 0 -> (2, 0), token 1 -> (0, 1), token 2 -> (2, 1); segment 3 is empty.
  RoutePlan plan = route(Tensor::from_vector<int32_t>({2, 0, 0, 1, 2, 1}, {3, 2}), 4);
  CHECK(plan.rows() == 6);
  CHECK(plan.counts.to_vector<int32_t>() == std::vector<int32_t>{2, 2, 2, 0});
  CHECK(plan.offsets.to_vector<int32_t>() == std::vector<int32_t>{0, 2, 4, 6, 6});
  // Pairs p = token * 2 + slot, grouped by segment, token order inside each.
  CHECK(plan.order.to_vector<int32_t>() == std::vector<int32_t>{1, 2, 3, 5, 0, 4});
  CHECK(plan.position.to_vector<int32_t>() == std::vector<int32_t>{4, 0, 1, 2, 5, 3});
  CHECK(plan.segment.to_vector<int32_t>() == std::vector<int32_t>{0, 0, 1, 1, 2, 2});
  std::vector<int64_t> tokens;
  for (int64_t r = 0; r < plan.rows(); ++r) tokens.push_back(plan.token_of_row(r));
  CHECK(tokens == std::vector<int64_t>{0, 1, 1, 2, 0, 2});
  CHECK(plan.segment_of_row(3) == 1);
}

TEST_CASE("routing: route() offsets, stable order and inverse maps on random indices") {
  const int64_t tokens = 37, k = 3, segments = 5;
  Tensor indices = random_indices(tokens, k, segments, 7);
  RoutePlan plan = route(indices, segments);
  std::vector<int32_t> chosen = indices.to_vector<int32_t>(), order = plan.order.to_vector<int32_t>(),
                       position = plan.position.to_vector<int32_t>(), offsets = plan.offsets.to_vector<int32_t>();
  for (int64_t e = 0; e < segments; ++e) {
    CHECK(offsets[e + 1] - offsets[e] == std::count(chosen.begin(), chosen.end(), int32_t(e)));
    for (int32_t r = offsets[e]; r < offsets[e + 1]; ++r) {
      CHECK(chosen[order[r]] == e);
      CHECK(plan.segment_of_row(r) == e);
      if (r > offsets[e]) CHECK(order[r - 1] < order[r]);  // stable: token, then slot order
    }
  }
  CHECK(offsets.back() == tokens * k);
  for (int64_t p = 0; p < tokens * k; ++p) CHECK(order[position[p]] == p);
  for (int64_t r = 0; r < tokens * k; ++r) CHECK(position[order[r]] == r);
}

TEST_CASE("routing: route() errors") {
  CHECK_THROWS_HEADROOM(route(Tensor::from_vector<int32_t>({0, 4}, {1, 2}), 4),
                        "[route] index 4 of token 0 is outside [0, 4)");
  CHECK_THROWS_HEADROOM(route(Tensor::from_vector<int32_t>({0, 1, -1, 0}, {2, 2}), 4),
                        "[route] index -1 of token 1 is outside [0, 4)");
  CHECK_THROWS_HEADROOM(route(Tensor::zeros({2, 2}), 4), "[route] expected indices of dtype i32, got f32");
  CHECK_THROWS_HEADROOM(route(Tensor::zeros({4}, DType::i32), 4), "[route] expected indices of shape [N, k]");
  CHECK_THROWS_HEADROOM(route(Tensor::zeros({2, 1}, DType::i32), 0), "[route] number of segments must be >= 1");
}

// ---- topk ----------------------------------------------------------------------

TEST_CASE("routing: topk breaks ties by the lowest index and ranks NaN first") {
  Tensor x = Tensor::from_vector<float>({1, 3, 3, 2, 3}, {1, 5});
  TopK three = topk(x, 3);
  CHECK(three.values.to_vector<float>() == std::vector<float>{3, 3, 3});
  CHECK(three.indices.to_vector<int32_t>() == std::vector<int32_t>{1, 2, 4});
  TopK all = topk(x, 5);
  CHECK(all.indices.to_vector<int32_t>() == std::vector<int32_t>{1, 2, 4, 3, 0});
  CHECK(all.indices.dtype() == DType::i32);

  TopK with_nan = topk(Tensor::from_vector<double>({0.5, NAN, 2, NAN}, {4}), 3);
  CHECK(with_nan.indices.to_vector<int32_t>() == std::vector<int32_t>{1, 3, 2});

  // Rows with and without NaN in one tensor (the CPU kernel ranks NaN-free
  // rows by plain comparisons): each row keeps its own order.
  TopK mixed = topk(Tensor::from_vector<float>({1, 4, 4, 2, 3, NAN, 5, 3, 2, 2, 1, 2}, {3, 4}), 2);
  CHECK(mixed.indices.to_vector<int32_t>() == std::vector<int32_t>{1, 2, 1, 2, 0, 1});
}

TEST_CASE("routing: topk matches a stable-sort reference, values and gradient") {
  // Small integers make many ties; a permuted view makes the input non-contiguous.
  // k = 4 takes the insertion path of the CPU kernel, k = 9 the partial sort.
  for (int64_t k : {4, 9}) {
    CAPTURE(k);
    Generator gen(3);
    std::vector<double> raw(4 * 3 * 9);
    for (double& v : raw) v = double(gen.next_int(5));
    Tensor base = Tensor::from_vector(raw, {3, 9, 4}).set_requires_grad();
    Tensor x = base.permute({2, 0, 1});  // [4, 3, 9], non-contiguous
    TopK result = topk(x, k);
    CHECK(result.values.shape() == Shape{4, 3, k});

    std::vector<double> xs = x.to_vector<double>(), values = result.values.to_vector<double>();
    std::vector<int32_t> indices = result.indices.to_vector<int32_t>();
    Tensor seed = Tensor::randn({4, 3, k}, gen, DType::f64);
    result.values.backward(seed);
    std::vector<double> seeds = seed.to_vector<double>(), grad = base.grad().permute({2, 0, 1}).to_vector<double>();
    std::vector<double> expected_grad(xs.size(), 0.0);
    for (int64_t row = 0; row < 12; ++row) {
      std::vector<double> v(xs.begin() + row * 9, xs.begin() + (row + 1) * 9);
      std::vector<int32_t> want = reference_topk(v, k);
      for (int64_t j = 0; j < k; ++j) {
        CHECK(indices[row * k + j] == want[j]);
        CHECK(values[row * k + j] == v[want[j]]);
        expected_grad[row * 9 + want[j]] = seeds[row * k + j];
      }
    }
    CHECK(grad == expected_grad);
  }
}

TEST_CASE("routing: topk gradcheck (f64, non-contiguous)") {
  Tensor x = param({5, 2, 6}, 11);
  auto fn = [](const std::vector<Tensor>& in) { return topk(in[0].transpose(0, 1), 3).values; };
  auto r = gradcheck(fn, {x});
  CHECK_MESSAGE(r.ok, r.message);
}

TEST_CASE("routing: topk errors") {
  CHECK_THROWS_HEADROOM(topk(Tensor::zeros({2, 8}), 9), "[topk] k=9 exceeds the size 8 of the last dimension");
  CHECK_THROWS_HEADROOM(topk(Tensor::zeros({2, 8}), 0), "[topk] k must be at least 1");
  CHECK_THROWS_HEADROOM(topk(Tensor::zeros({2, 8}, DType::i32), 1),
                        "[topk] expected input of dtype f32 or f64, got i32");
  CHECK_THROWS_HEADROOM(topk(Tensor::scalar(1), 1), "[topk] expected at least one dimension");
}

// ---- put_along_rows --------------------------------------------------------------

TEST_CASE("routing: put_along_rows matches a loop, repeated indices add, and its gradient takes") {
  // [2, 3] rows of k = 4 values into rows of n = 5; random indices repeat within rows.
  const int64_t k = 4, n = 5, rows = 6;
  Tensor values = param({2, 3, k}, 5);
  Tensor indices = random_indices(rows, k, n, 7).view({2, 3, k});
  Tensor out = put_along_rows(values, indices, n);
  CHECK(out.shape() == Shape{2, 3, n});
  std::vector<double> v = values.to_vector<double>(), got = out.to_vector<double>();
  std::vector<int32_t> idx = indices.to_vector<int32_t>();
  std::vector<double> expected(rows * n, 0.0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < k; ++j) expected[r * n + idx[r * k + j]] += v[r * k + j];
  CHECK(got == expected);

  Generator gen(9);
  Tensor seed = Tensor::randn({2, 3, n}, gen, DType::f64);
  out.backward(seed);
  std::vector<double> seeds = seed.to_vector<double>(), grad = values.grad().to_vector<double>();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < k; ++j) CHECK(grad[r * k + j] == seeds[r * n + idx[r * k + j]]);
}

TEST_CASE("routing: put_along_rows of ones is the k-hot mask of a top-k") {
  Tensor x = Tensor::from_vector<float>({0.1f, 0.7f, 0.2f, 0.9f, 0.3f, 0.3f, 0.5f, 0.1f}, {2, 4});
  TopK top = topk(x, 2);
  Tensor mask = put_along_rows(Tensor::ones({2, 2}), top.indices, 4);
  CHECK(mask.to_vector<float>() == std::vector<float>{0, 1, 0, 1, 1, 0, 1, 0});
  // The values in place: x where chosen, 0 elsewhere.
  CHECK(put_along_rows(top.values, top.indices, 4).to_vector<float>() ==
        std::vector<float>{0, 0.7f, 0, 0.9f, 0.3f, 0, 0.5f, 0});
}

TEST_CASE("routing: put_along_rows gradcheck (f64, non-contiguous values)") {
  Tensor values = param({3, 5}, 13);
  Tensor indices = random_indices(5, 3, 4, 17);  // [5, 3], repeats included
  auto fn = [&](const std::vector<Tensor>& in) { return put_along_rows(in[0].t(), indices, 4); };
  auto r = gradcheck(fn, {values});
  CHECK_MESSAGE(r.ok, r.message);
}

TEST_CASE("routing: put_along_rows errors") {
  Tensor values = Tensor::zeros({2, 3});
  Tensor indices = Tensor::from_vector<int32_t>({0, 1, 2, 3, 4, 5}, {2, 3});
  CHECK_THROWS_HEADROOM(put_along_rows(values, indices, 5),
                        "[put_along_rows] index 5 at position 5 is outside [0, n = 5)");
  CHECK_THROWS_HEADROOM(put_along_rows(values, indices.view({3, 2}), 8),
                        "[put_along_rows] expected values [..., k] and indices of the same shape, got (2,3) and (3,2)");
  CHECK_THROWS_HEADROOM(put_along_rows(Tensor::zeros({2, 3}, DType::i32), indices, 8),
                        "[put_along_rows] expected values of dtype f32 or f64, got i32");
  CHECK_THROWS_HEADROOM(put_along_rows(values, values, 8), "[put_along_rows] expected indices of dtype i32");
  CHECK_THROWS_HEADROOM(put_along_rows(values, Tensor::from_vector<int32_t>({0, -1, 0, 0, 0, 0}, {2, 3}), 8),
                        "[put_along_rows] index -1 at position 1 is outside [0, n = 8)");
}

// ---- index_select ----------------------------------------------------------------

TEST_CASE("routing: index_select matches a loop on every dimension, with repeated indices") {
  Tensor x = Tensor::arange(0, 2 * 3 * 4, 1, DType::i32).reshape({2, 3, 4});
  std::vector<int32_t> idx = {2, 0, 2};
  Tensor indices = Tensor::from_vector(idx);
  for (int dim = 0; dim < 3; ++dim) {
    std::vector<int32_t> picks;
    for (int32_t i : idx) picks.push_back(std::min<int32_t>(i, int32_t(x.size(dim)) - 1));
    Tensor out = index_select(x, dim, Tensor::from_vector(picks));
    Shape shape = x.shape();
    shape[dim] = 3;
    REQUIRE(out.shape() == shape);
    std::vector<int32_t> got = out.to_vector<int32_t>(), want;
    for (int64_t a = 0; a < shape[0]; ++a)
      for (int64_t b = 0; b < shape[1]; ++b)
        for (int64_t c = 0; c < shape[2]; ++c) {
          int64_t src[3] = {a, b, c};
          src[dim] = picks[src[dim]];
          want.push_back(int32_t(src[0] * 12 + src[1] * 4 + src[2]));
        }
    CHECK(got == want);
  }
  // A 0-d index keeps the dimension, with size 1 (as in PyTorch).
  CHECK(index_select(x, -1, Tensor::scalar(3, DType::i32)).to_vector<int32_t>() ==
        std::vector<int32_t>{3, 7, 11, 15, 19, 23});
  CHECK(index_select(x, 1, indices).shape() == Shape{2, 3, 4});
}

TEST_CASE("routing: index_select backward adds repeated rows; gradcheck (f64, non-contiguous)") {
  Tensor x = Tensor::zeros({4, 2}, DType::f64).set_requires_grad();
  Tensor out = index_select(x, 0, Tensor::from_vector<int32_t>({3, 1, 3, 3}));
  out.backward(Tensor::from_vector<double>({1, 2, 3, 4, 5, 6, 7, 8}, {4, 2}));
  CHECK(x.grad().to_vector<double>() == std::vector<double>{0, 0, 3, 4, 0, 0, 13, 16});

  Tensor base = param({5, 3, 4}, 5);
  const std::vector<int32_t> picks[3] = {{1, 3, 1, 0}, {4, 1, 4}, {2, 0, 2, 2}};  // per dim of [4, 5, 3]
  for (int dim = 0; dim < 3; ++dim) {
    auto fn = [&](const std::vector<Tensor>& in) {
      return index_select(in[0].permute({2, 0, 1}), dim, Tensor::from_vector(picks[dim]));  // non-contiguous
    };
    auto r = gradcheck(fn, {base});
    CHECK_MESSAGE(r.ok, "dim ", dim, ": ", r.message);
  }
}

TEST_CASE("routing: index_select errors") {
  Tensor x = Tensor::zeros({5, 2});
  CHECK_THROWS_HEADROOM(index_select(x, 0, Tensor::from_vector<int32_t>({1, 5})),
                        "[index_select] index 5 at position 1 is out of range for dimension 0 of size 5");
  CHECK_THROWS_HEADROOM(index_select(x, 1, Tensor::from_vector<int32_t>({-1})),
                        "[index_select] index -1 at position 0 is out of range");
  CHECK_THROWS_HEADROOM(index_select(x, 0, Tensor::zeros({2})),
                        "[index_select] expected indices of dtype i32, got f32");
  CHECK_THROWS_HEADROOM(index_select(x, 0, Tensor::zeros({1, 2}, DType::i32)), "[index_select] expected 0-d or 1-d");
  CHECK_THROWS_HEADROOM(index_select(x, 2, Tensor::zeros({1}, DType::i32)),
                        "[index_select] dimension 2 is out of range");
}

// ---- gather_rows / scatter_add_rows ---------------------------------------------------

TEST_CASE("routing: gather_rows and scatter_add_rows match slot loops and are transposes") {
  const int64_t tokens = 5, k = 2, segments = 3, width = 4;
  RoutePlan plan = route(random_indices(tokens, k, segments, 21), segments);
  Generator gen(4);
  Tensor x = Tensor::randn({tokens, width}, gen, DType::f64);
  Tensor y = Tensor::randn({tokens * k, width}, gen, DType::f64);
  Tensor gates = Tensor::randn({tokens, k}, gen, DType::f64);
  std::vector<double> xs = x.to_vector<double>(), ys = y.to_vector<double>(), gs = gates.to_vector<double>();
  std::vector<int32_t> position = plan.position.to_vector<int32_t>();

  std::vector<double> gathered(tokens * k * width), combined(tokens * width, 0.0), summed(tokens * width, 0.0);
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t j = 0; j < k; ++j)
      for (int64_t c = 0; c < width; ++c) {
        const int64_t r = position[t * k + j];
        gathered[r * width + c] = xs[t * width + c];
        combined[t * width + c] += gs[t * k + j] * ys[r * width + c];
        summed[t * width + c] += ys[r * width + c];
      }
  CHECK_CLOSE(gather_rows(x, plan).to_vector<double>(), gathered, 0.0, 0.0);
  CHECK_CLOSE(scatter_add_rows(y, gates, plan).to_vector<double>(), combined, 1e-14, 0.0);
  CHECK_CLOSE(scatter_add_rows(y, Tensor(), plan).to_vector<double>(), summed, 1e-14, 0.0);

  // <gather(x), y> == <x, scatter(y, unit gates)>
  auto dot = [](const Tensor& a, const Tensor& b) {
    std::vector<double> u = a.to_vector<double>(), v = b.to_vector<double>();
    return std::inner_product(u.begin(), u.end(), v.begin(), 0.0);
  };
  CHECK(dot(gather_rows(x, plan), y) == doctest::Approx(dot(x, scatter_add_rows(y, Tensor(), plan))));
}

TEST_CASE("routing: gather_rows and scatter_add_rows gradchecks (f64, non-contiguous)") {
  const int64_t tokens = 4, k = 2, segments = 3;
  RoutePlan plan = route(random_indices(tokens, k, segments, 8), segments);
  Tensor x_t = param({3, tokens}, 1);  // used as its transpose [tokens, 3]
  auto gather = [&](const std::vector<Tensor>& in) { return gather_rows(in[0].t(), plan); };
  auto r = gradcheck(gather, {x_t});
  CHECK_MESSAGE(r.ok, r.message);

  Tensor y = param({tokens * k, 3}, 2), gates_t = param({k, tokens}, 3);
  auto scatter = [&](const std::vector<Tensor>& in) { return scatter_add_rows(in[0], in[1].t(), plan); };
  r = gradcheck(scatter, {y, gates_t});
  CHECK_MESSAGE(r.ok, r.message);
  auto unit = [&](const std::vector<Tensor>& in) { return scatter_add_rows(in[0].slice(1, 0, 3, 2), Tensor(), plan); };
  r = gradcheck(unit, {y});
  CHECK_MESSAGE(r.ok, r.message);
}

TEST_CASE("routing: gather_rows and scatter_add_rows errors") {
  RoutePlan plan = route(random_indices(4, 2, 3, 1), 3);
  CHECK_THROWS_HEADROOM(gather_rows(Tensor::zeros({5, 3}), plan),
                        "[gather_rows] expected x of shape [4, D] for a plan of 4 tokens, got (5,3)");
  CHECK_THROWS_HEADROOM(gather_rows(Tensor::zeros({4, 3}, DType::i32), plan),
                        "[gather_rows] expected input of dtype f32 or f64, got i32");

  CHECK_THROWS_HEADROOM(
      scatter_add_rows(Tensor::zeros({6, 3}), Tensor(), plan),
      "[scatter_add_rows] expected y_grouped of shape [8, D] for a plan of 4 tokens with k=2, got (6,3)");
  CHECK_THROWS_HEADROOM(
      scatter_add_rows(Tensor::zeros({8, 3}), Tensor::zeros({4, 3}), plan),
      "[scatter_add_rows] gates have shape (4,3) but the plan routes 4 tokens with k=2, expected (4,2)");
  CHECK_THROWS_HEADROOM(scatter_add_rows(Tensor::zeros({8, 3}), Tensor::zeros({4, 2}, DType::f64), plan),
                        "[scatter_add_rows] expected gates of dtype f32, got f64");
}

// ---- segment_matmul -----------------------------------------------------------------

TEST_CASE("routing: segment_matmul matches a per-row loop; an unused weight slice gets zero gradient") {
  const int64_t tokens = 6, k = 1, segments = 4, in = 3, out = 2;
  // Segment 2 receives no rows.
  RoutePlan plan = route(Tensor::from_vector<int32_t>({1, 0, 3, 1, 0, 1}, {tokens, k}), segments);
  Tensor x = param({tokens * k, in}, 1), w = param({segments, in, out}, 2);
  Tensor y = segment_matmul(x, w, plan);
  Generator gen(9);
  Tensor seed = Tensor::randn({tokens * k, out}, gen, DType::f64);
  y.backward(seed);

  std::vector<double> xs = x.to_vector<double>(), ws = w.to_vector<double>(), ss = seed.to_vector<double>();
  std::vector<double> want_y(tokens * k * out, 0.0), want_dx(xs.size(), 0.0), want_dw(ws.size(), 0.0);
  for (int64_t r = 0; r < tokens * k; ++r) {
    const int64_t e = plan.segment_of_row(r);
    for (int64_t i = 0; i < in; ++i)
      for (int64_t o = 0; o < out; ++o) {
        const double wv = ws[(e * in + i) * out + o];
        want_y[r * out + o] += xs[r * in + i] * wv;
        want_dx[r * in + i] += ss[r * out + o] * wv;
        want_dw[(e * in + i) * out + o] += xs[r * in + i] * ss[r * out + o];
      }
  }
  CHECK_CLOSE(y.to_vector<double>(), want_y, 1e-12, 0.0);
  CHECK_CLOSE(x.grad().to_vector<double>(), want_dx, 1e-12, 0.0);
  CHECK_CLOSE(w.grad().to_vector<double>(), want_dw, 1e-12, 0.0);
  check_zero_slice(w.grad(), 2);
}

TEST_CASE("routing: segment_matmul and its gather / scatter forms: gradchecks (f64, non-contiguous)") {
  // Token 1 picks segment 2 twice; segment 1 is empty.
  RoutePlan plan = route(Tensor::from_vector<int32_t>({0, 2, 2, 2, 3, 0}, {3, 2}), 4);
  Tensor w_p = param({4, 2, 3}, 5);  // W = permuted: [4, 3, 2]
  using Op = Tensor (*)(const Tensor&, const Tensor&, const RoutePlan&);
  const struct {
    const char* name;
    Op op;
    Tensor x_t;  // x = x_tᵀ
  } cases[] = {{"segment_matmul", segment_matmul, param({3, 6}, 4)},
               {"gather_segment_matmul", gather_segment_matmul, param({3, 3}, 6)},
               {"segment_matmul_scatter",
                [](const Tensor& y, const Tensor& w, const RoutePlan& p) { return segment_matmul_scatter(y, w, p); },
                param({3, 6}, 7)}};
  for (const auto& c : cases) {
    CAPTURE(c.name);  // a transposed weight is read in place (segment_gemm), with the contiguous copy's products
    CHECK_CLOSE(c.op(c.x_t.t(), w_p.transpose(1, 2), plan), c.op(c.x_t.t(), w_p.transpose(1, 2).contiguous(), plan),
                1e-12);
    auto fn = [&](const std::vector<Tensor>& in) { return c.op(in[0].t(), in[1].transpose(1, 2), plan); };
    auto r = gradcheck(fn, {c.x_t, w_p});
    CHECK_MESSAGE(r.ok, (std::string(c.name) + ": " + r.message));
  }
  auto gated = [&](const std::vector<Tensor>& in) {
    return segment_matmul_scatter(in[0].t(), in[1].transpose(1, 2), plan, in[2].t());
  };
  auto r = gradcheck(gated, {param({3, 6}, 8), w_p, param({2, 3}, 9)});
  CHECK_MESSAGE(r.ok, r.message);
}

TEST_CASE("routing: segment_matmul errors") {
  RoutePlan twelve = route(random_indices(4, 1, 12, 2), 12);
  CHECK_THROWS_HEADROOM(segment_matmul(Tensor::zeros({4, 512}), Tensor::zeros({8, 512, 64}), twelve),
                        "[segment_matmul] the plan has 12 segments but weights have shape (8,512,64)");
  RoutePlan plan = route(random_indices(4, 2, 3, 2), 3);
  CHECK_THROWS_HEADROOM(segment_matmul(Tensor::zeros({7, 5}), Tensor::zeros({3, 5, 2}), plan),
                        "[segment_matmul] expected x_grouped of shape (8,5) for a plan of 8 grouped rows and "
                        "weights of shape (3,5,2), got (7,5)");
  CHECK_THROWS_HEADROOM(segment_matmul(Tensor::zeros({8, 4}), Tensor::zeros({3, 5, 2}), plan),
                        "expected x_grouped of shape (8,5)");
  CHECK_THROWS_HEADROOM(segment_matmul(Tensor::zeros({8, 5}), Tensor::zeros({3, 5, 2}, DType::f64), plan),
                        "[segment_matmul] expected weight of dtype f32, got f64");
  CHECK_THROWS_HEADROOM(segment_matmul(Tensor::zeros({8, 5}, DType::i32), Tensor::zeros({3, 5, 2}, DType::i32), plan),
                        "[segment_matmul] expected x_grouped of dtype f32 or f64, got i32");
  CHECK_THROWS_HEADROOM(segment_matmul(Tensor::zeros({8, 5}), Tensor::zeros({15, 2}), plan),
                        "[segment_matmul] expected weights of shape [E, in, out], got (15,2)");
}

// ---- gather_segment_matmul / segment_matmul_scatter ------------------------------------

// `tokens` tokens (300 by default), k = 2 over 4 segments (segment 2 empty,
// some tokens choosing one segment twice): several token blocks and several
// gathered tiles per segment.
RoutePlan fused_case_plan(int64_t tokens = 300) {
  std::vector<int32_t> chosen = random_indices(tokens, 2, 3, 11).to_vector<int32_t>();
  for (int32_t& e : chosen) e = e == 2 ? 3 : e;
  return route(Tensor::from_vector(chosen, {tokens, 2}), 4);
}

// The weight gradient runs on BLAS for in > out (with 700 tokens, segments
// of over 256 rows: tiles summed into one slice), on the indexed kernel for
// in < out (whole tiles, a last overlapping tile, columns past the last panel).
void check_fused_against_loops(int64_t in, int64_t out, int64_t tokens) {
  CAPTURE(in);
  CAPTURE(out);
  CAPTURE(tokens);
  RoutePlan plan = fused_case_plan(tokens);
  const int64_t rows = plan.rows(), segments = 4;
  Tensor x = param({tokens, in}, 1), y = param({rows, in}, 2), w = param({segments, in, out}, 3);
  Generator gen(4);
  Tensor seed_rows = Tensor::randn({rows, out}, gen, DType::f64),
         seed_tokens = Tensor::randn({tokens, out}, gen, DType::f64);
  Tensor gathered = gather_segment_matmul(x, w, plan);
  sum(gathered * seed_rows).backward();
  const std::vector<double> gathered_dx = x.grad().to_vector<double>(), gathered_dw = w.grad().to_vector<double>();
  w.zero_grad();
  Tensor scattered = segment_matmul_scatter(y, w, plan);
  scattered.backward(seed_tokens);

  std::vector<double> xs = x.to_vector<double>(), ys = y.to_vector<double>(), ws = w.to_vector<double>();
  std::vector<double> sr = seed_rows.to_vector<double>(), st = seed_tokens.to_vector<double>();
  std::vector<double> want_g(rows * out, 0.0), want_gdx(xs.size(), 0.0), want_gdw(ws.size(), 0.0);
  std::vector<double> want_s(tokens * out, 0.0), want_sdy(ys.size(), 0.0), want_sdw(ws.size(), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t e = plan.segment_of_row(r), t = plan.token_of_row(r);
    for (int64_t i = 0; i < in; ++i)
      for (int64_t o = 0; o < out; ++o) {
        const double wv = ws[(e * in + i) * out + o];
        want_g[r * out + o] += xs[t * in + i] * wv;
        want_gdx[t * in + i] += sr[r * out + o] * wv;
        want_gdw[(e * in + i) * out + o] += xs[t * in + i] * sr[r * out + o];
        want_s[t * out + o] += ys[r * in + i] * wv;
        want_sdy[r * in + i] += st[t * out + o] * wv;
        want_sdw[(e * in + i) * out + o] += ys[r * in + i] * st[t * out + o];
      }
  }
  CHECK_CLOSE(gathered.to_vector<double>(), want_g, 1e-12, 0.0);
  CHECK_CLOSE(gathered_dx, want_gdx, 1e-12, 0.0);
  CHECK_CLOSE(gathered_dw, want_gdw, 1e-12, 0.0);
  CHECK_CLOSE(scattered.to_vector<double>(), want_s, 1e-12, 0.0);
  CHECK_CLOSE(y.grad().to_vector<double>(), want_sdy, 1e-12, 0.0);
  CHECK_CLOSE(w.grad().to_vector<double>(), want_sdw, 1e-12, 0.0);
  check_zero_slice(w.grad(), 2);
}

TEST_CASE("routing: gather_segment_matmul and segment_matmul_scatter match per-row loops") {
  for (auto [in, out] : {std::pair<int64_t, int64_t>{5, 3}, {37, 20}, {20, 37}})
    check_fused_against_loops(in, out, 300);
  check_fused_against_loops(37, 20, 700);
}

// n values uniform in [-0.5, 0.5) from gen, for the kernel checks below.
template <typename T> std::vector<T> uniform_values(Generator& gen, int64_t n) {
  std::vector<T> v(n);
  for (T& x : v) x = T(gen.next_uniform() - 0.5);
  return v;
}

// The CPU kernel under gather_segment_matmul and segment_matmul_scatter,
// against a loop: row tiles and column panels with remainders, gathered and
// scattered rows, scales, stored and added rows, and an empty depth.
template <typename T> void check_indexed_gemm(int64_t depth, int64_t width) {
  CAPTURE(depth);
  CAPTURE(width);
  const int64_t rows = 13, a_height = 17, c_height = 19, lda = depth + 2, ldc = width + 3;
  Generator gen(uint64_t(7 + depth * 31 + width));
  auto values = [&](int64_t n) { return uniform_values<T>(gen, n); };
  std::vector<T> a = values(a_height * lda), b = values(depth * width), c = values(c_height * ldc),
                 scale = values(rows);
  std::vector<int32_t> a_rows(rows), c_rows(rows);
  std::vector<uint8_t> add(rows);
  for (int64_t i = 0; i < rows; ++i) {
    a_rows[i] = int32_t((i * 5 + 3) % a_height);
    c_rows[i] = int32_t((i * 7 + 1) % c_height);  // distinct: 7 and 19 are coprime
    add[i] = uint8_t(i % 3 == 0);
  }
  std::vector<T> want = c;
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < width; ++j) {
      T dot = 0;
      for (int64_t kk = 0; kk < depth; ++kk) dot += a[a_rows[i] * lda + kk] * b[kk * width + j];
      T& to = want[c_rows[i] * ldc + j];
      to = scale[i] * dot + (add[i] ? to : T(0));
    }
  cpu::IndexedRows<T> p;
  p.a = a.data(), p.lda = lda, p.a_rows = a_rows.data();
  p.c = c.data(), p.ldc = ldc, p.c_rows = c_rows.data();
  p.scale = scale.data(), p.add = add.data();
  cpu::indexed_gemm(p, rows, b.data(), depth, width);
  const double tol = std::is_same<T, float>::value ? 1e-5 : 1e-13;
  CHECK_CLOSE(std::vector<double>(c.begin(), c.end()), std::vector<double>(want.begin(), want.end()), tol, 0.0);

  // Without indices, scales or adds: rows in place, stored unscaled.
  std::vector<T> plain(rows * width), plain_want(rows * width, T(0));
  cpu::IndexedRows<T> q;
  q.a = a.data(), q.lda = lda, q.c = plain.data(), q.ldc = width;
  cpu::indexed_gemm(q, rows, b.data(), depth, width);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < width; ++j)
      for (int64_t kk = 0; kk < depth; ++kk) plain_want[i * width + j] += a[i * lda + kk] * b[kk * width + j];
  CHECK_CLOSE(std::vector<double>(plain.begin(), plain.end()),
              std::vector<double>(plain_want.begin(), plain_want.end()), tol, 0.0);
}

// indexed_gemm_tn against a loop: a's rows through indices or in place, row
// counts below, at and past one tile (with an overlapping last tile), widths
// with columns past the last panel, an empty depth and one of two depth
// blocks.
template <typename T> void check_indexed_gemm_tn(int64_t depth, int64_t rows, int64_t width) {
  CAPTURE(depth);
  CAPTURE(rows);
  CAPTURE(width);
  const int64_t height = 611, lda = rows + 3, ldb = width + 2, ldc = width + 1;
  Generator gen(uint64_t(11 + depth * 7 + rows * 13 + width));
  auto values = [&](int64_t n) { return uniform_values<T>(gen, n); };
  const std::vector<T> a = values(height * lda), b = values(height * ldb);
  std::vector<int32_t> a_rows(depth), b_rows(depth);
  for (int64_t kk = 0; kk < depth; ++kk) {
    a_rows[kk] = int32_t((kk * 3 + 1) % height);
    b_rows[kk] = int32_t((kk * 5 + 2) % height);
  }
  const double tol = std::is_same<T, float>::value ? 1e-5 : 1e-13;
  for (bool index_a : {false, true}) {
    CAPTURE(index_a);
    std::vector<T> c = values(rows * ldc), want = c;
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < width; ++j) {
        T dot = 0;
        for (int64_t kk = 0; kk < depth; ++kk)
          dot += a[(index_a ? a_rows[kk] : kk) * lda + i] * b[b_rows[kk] * ldb + j];
        want[i * ldc + j] = dot;
      }
    cpu::indexed_gemm_tn<T>({a.data(), lda, index_a ? a_rows.data() : nullptr}, {b.data(), ldb, b_rows.data()}, depth,
                            rows, width, c.data(), ldc);
    CHECK_CLOSE(std::vector<double>(c.begin(), c.end()), std::vector<double>(want.begin(), want.end()), tol, 0.0);
  }
}

TEST_CASE("routing: the indexed GEMM kernel for weight gradients matches a loop") {
  for (int64_t depth : {0, 1, 19, 600})  // 600: two blocks of the summed dimension
    for (int64_t rows : {4, 6, 13})
      for (int64_t width : {3, 16, 37}) {
        check_indexed_gemm_tn<float>(depth, rows, width);
        check_indexed_gemm_tn<double>(depth, rows, width);
      }
}

TEST_CASE("routing: the indexed GEMM kernel matches a loop") {
  for (int64_t depth : {0, 1, 70})
    for (int64_t width : {3, 16, 37, 64}) {
      check_indexed_gemm<float>(depth, width);
      check_indexed_gemm<double>(depth, width);
    }
}

TEST_CASE("routing: gated segment_matmul_scatter equals scatter_add_rows over segment_matmul") {
  RoutePlan plan = fused_case_plan();  // 300 tokens: several token blocks
  Tensor y = param({plan.rows(), 5}, 12), w = param({4, 5, 3}, 13), gates = param({plan.num_tokens, 2}, 14);
  Tensor seed = param({plan.num_tokens, 3}, 15).detach();
  auto grads_of = [&](const Tensor& out) {
    y.zero_grad(), w.zero_grad(), gates.zero_grad();
    out.backward(seed);
    return std::vector<Tensor>{out.detach(), y.grad(), w.grad(), gates.grad()};
  };
  std::vector<Tensor> fused = grads_of(segment_matmul_scatter(y, w, plan, gates));
  std::vector<Tensor> composed = grads_of(scatter_add_rows(segment_matmul(y, w, plan), gates, plan));
  for (size_t i = 0; i < fused.size(); ++i) {
    CAPTURE(i);
    CHECK_CLOSE(fused[i], composed[i], 1e-12);
  }
  CHECK_THROWS_HEADROOM(segment_matmul_scatter(y, w, plan, Tensor::ones({plan.num_tokens, 3}, DType::f64)),
                        "[segment_matmul_scatter] gates have shape (300,3) but the plan routes 300 tokens with k=2");
}

// The tuned kernels of ops/cpu/routing.h against the plain loops of
// ops/reference/kernels.h, on the 700-token plan above (several token blocks,
// tiles and panels; segment 2 empty): gathered, scattered, gated, transposed.
TEST_CASE("routing: cpu:: gather / sum rows and the grouped matmuls equal the reference kernels") {
  RoutePlan plan = fused_case_plan(700);
  const int64_t tokens = 700, k = 2, rows = plan.rows(), segments = 4, in = 37, out = 20;
  const int32_t *order = plan.order.data<int32_t>(), *offsets = plan.offsets.data<int32_t>();
  Tensor x_t = param({tokens, in}, 1), y_t = param({rows, out}, 2), w_t = param({segments, in, out}, 3);
  Tensor g_t = param({tokens * k}, 4);
  const double *x = x_t.data<double>(), *y = y_t.data<double>(), *w = w_t.data<double>(), *g = g_t.data<double>();
  std::vector<int32_t> starts(tokens + 1);  // each token's k grouped rows, through position
  for (int64_t t = 0; t <= tokens; ++t) starts[t] = int32_t(t * k);
  const cpu::GroupedRows::Raw<double> gathered{x, in, order, k}, grouped{y, out, nullptr, 1};
  std::vector<double> result[2][7];
  for (int ref = 0; ref < 2; ++ref) {
    std::vector<double>* r = result[ref];
    r[0].resize(rows * in), r[1].resize(tokens * out), r[2].resize(rows * out), r[3].resize(rows * in);
    r[4].resize(tokens * in), r[5].resize(tokens * out), r[6].resize(segments * in * out);
    (ref ? reference::gather_rows<double> : cpu::gather_rows<double>)(x, in, order, k, g, rows, r[0].data());
    using SumRows = void (*)(const double*, int64_t, const int32_t*, const int32_t*, const double*, int64_t, double*);
    (ref ? static_cast<SumRows>(reference::sum_rows<double>)
         : cpu::sum_rows<double>)(y, out, starts.data(), plan.position.data<int32_t>(), g, tokens, r[1].data());
    (ref ? reference::segment_matmul<double> : cpu::segment_matmul<double>)(gathered, w, offsets, segments, in, out,
                                                                            false, r[2].data());
    (ref ? reference::segment_matmul<double> : cpu::segment_matmul<double>)(grouped, w, offsets, segments, in, out,
                                                                            true, r[3].data());
    (ref ? reference::segment_matmul_scatter<double> : cpu::segment_matmul_scatter<double>)(y, order, k, offsets,
                                                                                            segments, w, in, out, true,
                                                                                            tokens, r[4].data(), g);
    (ref ? reference::segment_matmul_scatter<double>
         : cpu::segment_matmul_scatter<double>)(r[0].data(), order, k, offsets, segments, w, in, out, false, tokens,
                                                r[5].data(), nullptr);
    (ref ? reference::segment_matmul_weight_grad<double>
         : cpu::segment_matmul_weight_grad<double>)(gathered, grouped, offsets, segments, in, out, r[6].data());
  }
  for (int i = 0; i < 7; ++i) {
    CAPTURE(i);
    CHECK_CLOSE(result[0][i], result[1][i], 1e-12, 1e-12);
  }
}

TEST_CASE("routing: gather_segment_matmul and segment_matmul_scatter errors") {
  RoutePlan plan = route(random_indices(4, 2, 3, 2), 3);
  CHECK_THROWS_HEADROOM(gather_segment_matmul(Tensor::zeros({8, 5}), Tensor::zeros({3, 5, 2}), plan),
                        "[gather_segment_matmul] expected x of shape (4,5) for a plan of 4 tokens and weights "
                        "of shape (3,5,2), got (8,5)");
  CHECK_THROWS_HEADROOM(gather_segment_matmul(Tensor::zeros({4, 5}), Tensor::zeros({2, 5, 2}), plan),
                        "[gather_segment_matmul] the plan has 3 segments but weights have shape (2,5,2)");
  CHECK_THROWS_HEADROOM(gather_segment_matmul(Tensor::zeros({4, 5}), Tensor::zeros({3, 5, 2}, DType::f64), plan),
                        "[gather_segment_matmul] expected weight of dtype f32, got f64");
  CHECK_THROWS_HEADROOM(segment_matmul_scatter(Tensor::zeros({4, 5}), Tensor::zeros({3, 5, 2}), plan),
                        "[segment_matmul_scatter] expected y_grouped of shape (8,5) for a plan of 8 grouped rows");
  CHECK_THROWS_HEADROOM(segment_matmul_scatter(Tensor::zeros({8, 5}), Tensor::zeros({15, 2}), plan),
                        "[segment_matmul_scatter] expected weights of shape [E, in, out], got (15,2)");
  CHECK_THROWS_HEADROOM(segment_matmul_scatter(Tensor::zeros({8, 5}, DType::i32), Tensor::zeros({3, 5, 2}), plan),
                        "[segment_matmul_scatter] expected y_grouped of dtype f32 or f64, got i32");
}

// Only route() builds a plan and its fields are const, so a hostile plan can
// only come from an in-place write into its arrays: every op refuses one.
TEST_CASE("routing: every op that takes a plan refuses one written in place after route() built it") {
  static_assert(!std::is_default_constructible_v<RoutePlan>, "route() builds every plan");
  static_assert(!std::is_assignable_v<decltype((std::declval<RoutePlan&>().order)), Tensor>, "the fields are const");
  static_assert(!std::is_copy_assignable_v<RoutePlan>, "a plan is never overwritten");
  // 4 tokens, k = 2, 3 segments; routed_attention reads them as B = 2, T = 2 and h = 3 heads.
  auto fresh_plan = [] { return route(random_indices(4, 2, 3, 5), 3); };
  const Tensor x = Tensor::zeros({4, 5}), y = Tensor::zeros({8, 5}), w = Tensor::zeros({3, 5, 2});
  const Tensor gates = Tensor::ones({4, 2}), kv = Tensor::zeros({2, 3, 6, 5});
  const Tensor bad_offsets = Tensor::from_vector<int32_t>({0, 7, 2, 8});
  struct Named {
    const char* name;
    std::function<void(const RoutePlan&)> call;
  };
  const std::vector<Named> ops = {
      {"gather_rows", [&](const RoutePlan& p) { gather_rows(x, p); }},
      {"scatter_add_rows", [&](const RoutePlan& p) { scatter_add_rows(y, gates, p); }},
      {"segment_matmul", [&](const RoutePlan& p) { segment_matmul(y, w, p); }},
      {"gather_segment_matmul", [&](const RoutePlan& p) { gather_segment_matmul(x, w, p); }},
      {"segment_matmul_scatter", [&](const RoutePlan& p) { segment_matmul_scatter(y, w, p); }},
      {"routed_attention", [&](const RoutePlan& p) { routed_attention(y, kv, kv, p, 2); }},
  };
  // Each write leaves the plan's indices wrong: a row of another token or far
  // past the inputs, or offsets that are not a prefix sum of the counts.
  const std::vector<Named> writes = {
      {"order entry 8, one past the rows", [](const RoutePlan& p) { p.order.narrow(0, 3, 1).fill_(8); }},
      {"order entry 2^31 - 1", [](const RoutePlan& p) { p.order.narrow(0, 0, 1).fill_(INT32_MAX); }},
      {"position entry -1", [](const RoutePlan& p) { p.position.narrow(0, 7, 1).fill_(-1); }},
      {"offsets 0, 7, 2, 8", [&](const RoutePlan& p) { p.offsets.narrow(0, 0, 4).copy_(bad_offsets); }},
  };
  for (const Named& op : ops) {
    CAPTURE(op.name);
    CHECK_NOTHROW(op.call(fresh_plan()));
    for (const Named& write : writes) {
      CAPTURE(write.name);
      RoutePlan plan = fresh_plan();
      write.call(plan);
      CHECK_THROWS_HEADROOM(
          op.call(plan), (std::string("[") + op.name + "] the route plan was written in place after route()").c_str());
    }
  }
  // Written after the forward pass, the plan is refused by the backward pass, which saved its arrays.
  RoutePlan plan = fresh_plan();
  Tensor grouped = gather_rows(Tensor::ones({4, 5}).set_requires_grad(), plan);
  plan.position.narrow(0, 0, 1).fill_(INT32_MAX);
  CHECK_THROWS_HEADROOM(sum(grouped).backward(), "[gather_rows] a tensor saved for backward was modified in place");
}

TEST_CASE("routing: the plan's host helpers take rows from 0 to rows() - 1") {
  RoutePlan plan = route(Tensor::from_vector<int32_t>({1, 0, 1}, {3, 1}), 2);
  CHECK(plan.token_of_row(2) == 2);
  CHECK(plan.segment_of_row(0) == 0);
  CHECK_THROWS_HEADROOM(plan.token_of_row(3), "[RoutePlan] token_of_row: row 3 is outside [0, 3)");
  CHECK_THROWS_HEADROOM(plan.segment_of_row(-1), "[RoutePlan] segment_of_row: row -1 is outside [0, 3)");
}

TEST_CASE("routing: empty cases: no tokens, no slots, zero-width weights") {
  RoutePlan no_tokens = route(Tensor::zeros({0, 2}, DType::i32), 3);
  CHECK(gather_rows(Tensor::zeros({0, 4}), no_tokens).shape() == Shape{0, 4});
  CHECK(scatter_add_rows(Tensor::zeros({0, 4}), Tensor::zeros({0, 2}), no_tokens).shape() == Shape{0, 4});
  CHECK(segment_matmul(Tensor::zeros({0, 4}), Tensor::zeros({3, 4, 2}), no_tokens).shape() == Shape{0, 2});
  CHECK(gather_segment_matmul(Tensor::zeros({0, 4}), Tensor::zeros({3, 4, 2}), no_tokens).shape() == Shape{0, 2});
  CHECK(segment_matmul_scatter(Tensor::zeros({0, 4}), Tensor::zeros({3, 4, 2}), no_tokens).shape() == Shape{0, 2});

  RoutePlan no_slots = route(Tensor::zeros({3, 0}, DType::i32), 2);
  CHECK(gather_rows(Tensor::ones({3, 4}), no_slots).shape() == Shape{0, 4});
  CHECK(scatter_add_rows(Tensor::zeros({0, 4}), Tensor(), no_slots).to_vector<float>() == std::vector<float>(12, 0.0f));
  CHECK(segment_matmul_scatter(Tensor::zeros({0, 4}), Tensor::ones({2, 4, 2}), no_slots).to_vector<float>() ==
        std::vector<float>(6, 0.0f));

  RoutePlan plan = route(Tensor::from_vector<int32_t>({1, 0, 1}, {3, 1}), 2);
  CHECK(segment_matmul(Tensor::ones({3, 0}), Tensor::ones({2, 0, 2}), plan).to_vector<float>() ==
        std::vector<float>(6, 0.0f));
}

// ---- a whole MoE layer against a per-token, per-slot loop ------------------------------
//
// logits [N, E] --topk--> gates, experts [N, k] --route--> plan
// x [N, D] --gather_rows--> [N*k, D] --segment_matmul(W [E, D, H])--> [N*k, H]
//          --scatter_add_rows(gates)--> out [N, H]
// Reference: out[t] = sum_j gate[t, j] * x[t] · W[e(t, j)], and its gradients
// with respect to x, W and the logits (through the selected gates).

namespace {

struct MoeCase {
  const char* name;
  int64_t tokens, dim, hidden, experts, k;
  double bias_expert_logit;  // added to one expert's logits: +100 takes every token, -100 none
  int64_t biased_expert;
};

void check_moe_layer(const MoeCase& c, DType dtype, double tolerance) {
  CAPTURE(c.name);
  Tensor x = param({c.tokens, c.dim}, 31, dtype), w = param({c.experts, c.dim, c.hidden}, 32, dtype);
  std::vector<double> raw_logits = Tensor::randn({c.tokens, c.experts}, DType::f64).to_vector<double>();
  for (int64_t t = 0; t < c.tokens; ++t) raw_logits[t * c.experts + c.biased_expert] += c.bias_expert_logit;
  Tensor logits = Tensor::from_vector(raw_logits, {c.tokens, c.experts}).to(dtype).set_requires_grad();

  TopK routed = topk(logits, c.k);
  RoutePlan plan = route(routed.indices, c.experts);
  Tensor out = scatter_add_rows(segment_matmul(gather_rows(x, plan), w, plan), routed.values, plan);
  Generator gen(77);
  Tensor seed = Tensor::randn({c.tokens, c.hidden}, gen, dtype);
  out.backward(seed);

  std::vector<double> xs = x.to_vector<double>(), ws = w.to_vector<double>(), ss = seed.to_vector<double>(),
                      gates = routed.values.to_vector<double>();
  std::vector<int32_t> experts = routed.indices.to_vector<int32_t>();
  std::vector<double> want_out(c.tokens * c.hidden, 0.0), want_dx(xs.size(), 0.0), want_dw(ws.size(), 0.0),
      want_dlogits(c.tokens * c.experts, 0.0);
  for (int64_t t = 0; t < c.tokens; ++t)
    for (int64_t j = 0; j < c.k; ++j) {
      const int64_t e = experts[t * c.k + j];
      const double g = gates[t * c.k + j];
      for (int64_t h = 0; h < c.hidden; ++h) {
        double expert_out = 0;  // (x[t] · W[e])[h]
        for (int64_t d = 0; d < c.dim; ++d) expert_out += xs[t * c.dim + d] * ws[(e * c.dim + d) * c.hidden + h];
        const double dout = ss[t * c.hidden + h];
        want_out[t * c.hidden + h] += g * expert_out;
        want_dlogits[t * c.experts + e] += expert_out * dout;
        for (int64_t d = 0; d < c.dim; ++d) {
          want_dx[t * c.dim + d] += g * ws[(e * c.dim + d) * c.hidden + h] * dout;
          want_dw[(e * c.dim + d) * c.hidden + h] += g * xs[t * c.dim + d] * dout;
        }
      }
    }
  CHECK_CLOSE(out.to_vector<double>(), want_out, tolerance, tolerance);
  CHECK_CLOSE(x.grad().to_vector<double>(), want_dx, tolerance, tolerance);
  CHECK_CLOSE(w.grad().to_vector<double>(), want_dw, tolerance, tolerance);
  CHECK_CLOSE(logits.grad().to_vector<double>(), want_dlogits, tolerance, tolerance);
}

const MoeCase kMoeCases[] = {
    {"random routing", 9, 5, 4, 4, 2, 0, 0},
    {"an empty expert", 7, 3, 2, 4, 2, -100, 2},
    {"all tokens on one expert", 6, 4, 3, 5, 1, 100, 3},
    {"k == E", 5, 3, 4, 3, 3, 0, 0},
    {"a single token", 1, 4, 3, 4, 2, 0, 0},
};

}  // namespace

TEST_CASE("routing: an MoE layer matches a per-token, per-slot loop (outputs and all gradients)") {
  manual_seed(123);
  for (const MoeCase& c : kMoeCases) check_moe_layer(c, DType::f64, 1e-12);
  check_moe_layer(kMoeCases[0], DType::f32, 1e-5);
}

TEST_CASE("routing: the MoE layer passes gradcheck through topk, gather, segment_matmul and scatter") {
  Tensor x = param({5, 3}, 41), w = param({4, 3, 2}, 42), logits = param({5, 4}, 43);
  auto layer = [](const std::vector<Tensor>& in) {
    TopK routed = topk(in[2], 2);
    RoutePlan plan = route(routed.indices, 4);
    return scatter_add_rows(segment_matmul(gather_rows(in[0], plan), in[1], plan), routed.values, plan);
  };
  auto r = gradcheck(layer, {x, w, logits});
  CHECK_MESSAGE(r.ok, r.message);
}

TEST_CASE("routing: a larger MoE layer runs the parallel paths, matches the loop and is bitwise reproducible") {
  // Above the kernels' parallel threshold, with several busy experts at once.
  manual_seed(5);
  const MoeCase big{"parallel", 300, 48, 40, 6, 2, 0, 0};
  check_moe_layer(big, DType::f64, 1e-10);
  auto run = [&] {
    Tensor x = param({big.tokens, big.dim}, 1, DType::f32),
           w = param({big.experts, big.dim, big.hidden}, 2, DType::f32);
    RoutePlan plan = route(random_indices(big.tokens, big.k, big.experts, 3), big.experts);
    Tensor gates = param({big.tokens, big.k}, 4, DType::f32);
    Tensor out = scatter_add_rows(segment_matmul(gather_rows(x, plan), w, plan), gates, plan);
    // The fused forms too: two token blocks, several experts' tiles at once.
    Tensor w_out = param({big.experts, big.hidden, big.dim}, 5, DType::f32);
    Tensor fused = segment_matmul_scatter(gather_segment_matmul(x, w, plan), w_out, plan);
    (sum(out) + sum(fused)).backward();
    return std::vector<std::vector<float>>{out.to_vector<float>(),          fused.to_vector<float>(),
                                           x.grad().to_vector<float>(),     w.grad().to_vector<float>(),
                                           w_out.grad().to_vector<float>(), gates.grad().to_vector<float>()};
  };
  // Fixed-order reductions: the same bits on one thread and on two.
  const int threads = num_threads();
  set_num_threads(1);
  auto one_thread = run();
  set_num_threads(2);
  auto two_threads = run();
  set_num_threads(threads);
  CHECK(one_thread == two_threads);
  CHECK(run() == two_threads);
}

TEST_CASE("reference kernels: HEADROOM_REFERENCE_KERNELS is 1, 0, empty or unset") {
  CHECK(reference::parse_reference_kernels("1"));
  CHECK_FALSE(reference::parse_reference_kernels("0"));
  CHECK_FALSE(reference::parse_reference_kernels(""));
  CHECK_FALSE(reference::parse_reference_kernels(nullptr));
  for (const char* value : {"garbage", "2", "01", " 1", "1 ", "true", "-0"}) {
    const std::string expected =
        std::string("[reference kernels] HEADROOM_REFERENCE_KERNELS='") + value +
        "' must be 1 (the reference kernels) or 0 (the tuned ones, as when it is empty or unset)";
    CHECK_THROWS_HEADROOM(reference::parse_reference_kernels(value), expected.c_str());
  }
}
