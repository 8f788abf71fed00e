// The nn family: softmax, log_softmax, layer_norm, rms_norm, dropout,
// embedding and cross_entropy.  The reference kernels (and loops) for outputs, f64 gradchecks
// for every op, frozen PyTorch fixtures, and errors.
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <utility>

#include "fixture_reader.h"
#include "headroom/ops/cpu/nn.h"
#include "headroom/ops/nn.h"
#include "headroom/ops/reference/kernels.h"
#include "helpers.h"

using namespace headroom;

namespace {

using Inputs = std::vector<Tensor>;

Tensor param(const Shape& shape, uint64_t seed = 1) {
  Generator g(seed);
  return Tensor::randn(shape, g, DType::f64).set_requires_grad();
}

Tensor randn(const Shape& shape, uint64_t seed, DType dtype = DType::f64) {
  Generator g(seed);
  return Tensor::randn(shape, g, dtype);
}

void check_gradcheck(const autograd::GradcheckFn& fn, const Inputs& inputs) {
  auto result = gradcheck(fn, inputs);
  CHECK_MESSAGE(result.ok, result.message);
}

// reference::softmax_forward (ops/reference/kernels.h) of a row-major `x` over dimension `dim`, in double.
std::vector<double> naive_softmax(const std::vector<double>& x, const Shape& shape, int dim, bool log) {
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < dim; ++i) outer *= shape[i];
  for (size_t i = dim + 1; i < shape.size(); ++i) inner *= shape[i];
  const int64_t n = shape[dim];
  std::vector<double> out(x.size()), row(n), y(n);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t in = 0; in < inner; ++in) {
      for (int64_t k = 0; k < n; ++k) row[k] = x[(o * n + k) * inner + in];
      reference::softmax_forward(row.data(), y.data(), 1, n, log);
      for (int64_t k = 0; k < n; ++k) out[(o * n + k) * inner + in] = y[k];
    }
  return out;
}

// reference::norm_forward: layer_norm (center) or rms_norm over the last dimension.
std::vector<double> naive_norm(const std::vector<double>& x, int64_t d, const std::vector<double>& weight,
                               const std::vector<double>& bias, double eps, bool center) {
  const int64_t rows = int64_t(x.size()) / d;
  std::vector<double> out(x.size()), mean(rows), rstd(rows);
  reference::norm_forward(x.data(), weight.empty() ? nullptr : weight.data(), bias.empty() ? nullptr : bias.data(),
                          out.data(), mean.data(), rstd.data(), rows, d, eps, center);
  return out;
}

// Loop reference: per-row cross-entropy losses (0 for ignored rows).
std::vector<double> naive_cross_entropy(const std::vector<double>& logits, const std::vector<int32_t>& targets,
                                        int64_t classes, int64_t ignore_index, double smoothing) {
  std::vector<double> loss(targets.size(), 0.0);
  for (size_t r = 0; r < targets.size(); ++r) {
    if (targets[r] == ignore_index) continue;
    std::vector<double> row(logits.begin() + r * classes, logits.begin() + (r + 1) * classes);
    std::vector<double> logp = naive_softmax(row, {classes}, 0, /*log=*/true);
    double smooth = 0;
    for (double v : logp) smooth -= v / classes;
    loss[r] = (1 - smoothing) * -logp[targets[r]] + smoothing * smooth;
  }
  return loss;
}

const double kInf = std::numeric_limits<double>::infinity();

}  // namespace

// ---- softmax / log_softmax ------------------------------------------------------

TEST_CASE("softmax and log_softmax match a loop reference on every dimension, f32 and f64") {
  const Shape shape{3, 4, 5};
  for (DType dtype : {DType::f64, DType::f32}) {
    Tensor x = randn(shape, 7, dtype);
    std::vector<double> xs = x.to_vector<double>();
    const double tol = dtype == DType::f64 ? 1e-12 : 1e-6;
    for (int dim = 0; dim < 3; ++dim) {
      CAPTURE(dim);
      CHECK_CLOSE(softmax(x, dim).to_vector<double>(), naive_softmax(xs, shape, dim, false), tol, 0);
      CHECK_CLOSE(log_softmax(x, dim).to_vector<double>(), naive_softmax(xs, shape, dim, true), tol, 1e-6);
    }
    CHECK_CLOSE(softmax(x).to_vector<double>(), naive_softmax(xs, shape, 2, false), tol, 0);
  }
}

TEST_CASE("cpu:: softmax and norm kernels, forward and backward, equal the reference kernels") {
  const int64_t rows = 300, n = 37;  // enough rows to run in parallel
  auto vec = [](uint64_t seed, int64_t count) { return randn({count}, seed, DType::f64).to_vector<double>(); };
  const std::vector<double> x = vec(1, rows * n), dy = vec(2, rows * n), w = vec(3, n), b = vec(4, n);
  for (bool log : {false, true}) {
    CAPTURE(log);
    std::vector<double> y[2], dx[2];
    for (int ref = 0; ref < 2; ++ref) {
      y[ref].resize(rows * n), dx[ref].resize(rows * n);
      (ref ? reference::softmax_forward<double> : cpu::softmax_forward<double>)(x.data(), y[ref].data(), rows, n, log);
      (ref ? reference::softmax_backward<double> : cpu::softmax_backward<double>)(y[0].data(), dy.data(),
                                                                                  dx[ref].data(), rows, n, log);
    }
    CHECK_CLOSE(y[0], y[1], 1e-12, 1e-12);
    CHECK_CLOSE(dx[0], dx[1], 1e-12, 1e-12);
  }
  for (bool center : {true, false})
    for (bool affine : {true, false}) {
      CAPTURE(center);
      CAPTURE(affine);
      const double *wp = affine ? w.data() : nullptr, *bp = affine && center ? b.data() : nullptr;
      std::vector<double> y[2], mean[2], rstd[2], dx[2], dw[2], db[2];
      for (int ref = 0; ref < 2; ++ref) {
        y[ref].resize(rows * n), dx[ref].resize(rows * n), mean[ref].resize(rows), rstd[ref].resize(rows);
        dw[ref].resize(n), db[ref].resize(n);
        (ref ? reference::norm_forward<double> : cpu::norm_forward<double>)(x.data(), wp, bp, y[ref].data(),
                                                                            mean[ref].data(), rstd[ref].data(), rows, n,
                                                                            1e-5, center);
        (ref ? reference::norm_backward<double>
             : cpu::norm_backward<double>)(x.data(), wp, mean[0].data(), rstd[0].data(), dy.data(), dx[ref].data(),
                                           dw[ref].data(), db[ref].data(), rows, n, center);
      }
      for (auto* v : {y, mean, rstd, dx, dw, db}) CHECK_CLOSE(v[0], v[1], 1e-11, 1e-11);
    }
}

TEST_CASE("softmax and logsumexp over many short rows: blocks of rows, a partial last block, special rows") {
  // The CPU kernels take short rows in blocks (one exp call per block):
  // 5000 rows of 8 run in parallel and end in a partial block; 700 rows of 3
  // stay on one thread.  Rows of all -inf, one +inf and a NaN sit inside blocks.
  for (auto rows_n : {std::pair<int64_t, int64_t>{5000, 8}, {700, 3}}) {
    auto rows = rows_n.first;  // named: Clang 14 lambdas cannot capture structured bindings
    auto n = rows_n.second;
    CAPTURE(rows);
    std::vector<double> xs = randn({rows, n}, 8, DType::f64).to_vector<double>();
    for (int64_t j = 0; j < n; ++j) xs[300 * n + j] = -kInf;
    xs[301 * n + 1] = kInf;
    xs[302 * n] = NAN;
    Tensor x = Tensor::from_vector(xs, {rows, n}).to(DType::f32);
    std::vector<double> p = softmax(x).to_vector<double>(), logp = log_softmax(x).to_vector<double>();
    std::vector<double> lse = logsumexp(x, {1}).to_vector<double>();
    std::vector<double> want = naive_softmax(xs, {rows, n}, 1, false);
    for (int64_t r = 0; r < rows; ++r) {
      std::vector<double> row(xs.begin() + r * n, xs.begin() + (r + 1) * n);
      if (r == 300) {  // all -inf: probability 0, log-probability -inf, logsumexp -inf
        for (int64_t j = 0; j < n; ++j) CHECK((p[r * n + j] == 0 && logp[r * n + j] == -kInf));
        CHECK(lse[r] == -kInf);
      } else if (r == 301) {
        CHECK(lse[r] == kInf);
      } else if (r == 302) {
        CHECK(std::isnan(lse[r]));
      } else {
        double top = *std::max_element(row.begin(), row.end()), total = 0;
        for (double v : row) total += std::exp(v - top);
        CHECK(lse[r] == doctest::Approx(top + std::log(total)).epsilon(1e-6));
        for (int64_t j = 0; j < n; ++j) {
          CHECK(p[r * n + j] == doctest::Approx(want[r * n + j]).epsilon(1e-5));
          CHECK(logp[r * n + j] == doctest::Approx(row[j] - top - std::log(total)).epsilon(1e-5));
        }
      }
    }
  }
}

TEST_CASE("softmax is stable for large logits and gives 0 (not NaN) on a fully -inf row") {
  Tensor big = Tensor::from_vector<double>({1000, 1001, 999}, {1, 3});
  CHECK_CLOSE(softmax(big).to_vector<double>(), naive_softmax({0, 1, -1}, {3}, 0, false), 1e-12, 0);

  Tensor x = Tensor::from_vector<double>({-kInf, -kInf, -kInf, 0, std::log(3.0), -kInf}, {2, 3});
  x.set_requires_grad();
  Tensor y = softmax(x);
  CHECK(y.to_vector<double>() == std::vector<double>{0, 0, 0, 0.25, 0.75, 0});
  y.backward(Tensor::ones({2, 3}, DType::f64));
  for (double g : x.grad().to_vector<double>()) CHECK(std::isfinite(g));

  std::vector<double> logp = log_softmax(x.detach()).to_vector<double>();
  CHECK(logp[0] == -kInf);  // log of the 0 probabilities, consistent with exp(log_softmax) = softmax
  CHECK(logp[5] == -kInf);
  CHECK(logp[4] == doctest::Approx(std::log(0.75)));
}

TEST_CASE("gradcheck softmax and log_softmax: last dim, non-last dim, non-contiguous input") {
  Tensor x = param({2, 3, 4});
  for (bool log : {false, true}) {
    CAPTURE(log);
    auto op = log ? log_softmax : softmax;
    check_gradcheck([&](const Inputs& in) { return op(in[0], -1); }, {x});
    check_gradcheck([&](const Inputs& in) { return op(in[0], 1); }, {x});
    // Permuted and sliced: strided input, softmax over a strided dimension.
    check_gradcheck([&](const Inputs& in) { return op(in[0].permute({2, 0, 1}).slice(0, 0, 4, 2), 2); }, {x});
  }
}

// ---- layer_norm / rms_norm ------------------------------------------------------

TEST_CASE("layer_norm and rms_norm match a loop reference, with and without affine") {
  const int64_t d = 6;
  for (DType dtype : {DType::f64, DType::f32}) {
    Tensor x = randn({2, 3, d}, 11, dtype);
    Tensor w = randn({d}, 12, dtype), b = randn({d}, 13, dtype);
    std::vector<double> xs = x.to_vector<double>(), ws = w.to_vector<double>(), bs = b.to_vector<double>();
    const double tol = dtype == DType::f64 ? 1e-12 : 1e-5;
    CHECK_CLOSE(layer_norm(x, w, b).to_vector<double>(), naive_norm(xs, d, ws, bs, 1e-5, true), tol, 0);
    CHECK_CLOSE(layer_norm(x, Tensor(), Tensor(), 0.1).to_vector<double>(), naive_norm(xs, d, {}, {}, 0.1, true), tol,
                0);
    CHECK_CLOSE(layer_norm(x, Tensor(), b).to_vector<double>(), naive_norm(xs, d, {}, bs, 1e-5, true), tol, 0);
    CHECK_CLOSE(rms_norm(x, w).to_vector<double>(), naive_norm(xs, d, ws, {}, 1e-6, false), tol, 0);
    CHECK_CLOSE(rms_norm(x, Tensor(), 0.5).to_vector<double>(), naive_norm(xs, d, {}, {}, 0.5, false), tol, 0);
  }
}

TEST_CASE("layer_norm is accurate when the mean is large against the spread") {
  Tensor x = Tensor::from_vector<float>({10000.f, 10001.f, 10002.f, 10003.f}, {1, 4});
  std::vector<double> expected = naive_norm({0, 1, 2, 3}, 4, {}, {}, 1e-5, true);
  CHECK_CLOSE(layer_norm(x, Tensor(), Tensor()).to_vector<double>(), expected, 1e-5, 0);
}

TEST_CASE("gradcheck layer_norm with and without affine, and a non-contiguous input") {
  Tensor x = param({3, 5}, 21), w = param({5}, 22), b = param({5}, 23);
  check_gradcheck([](const Inputs& in) { return layer_norm(in[0], in[1], in[2]); }, {x, w, b});
  check_gradcheck([](const Inputs& in) { return layer_norm(in[0], Tensor(), Tensor()); }, {x});
  check_gradcheck([](const Inputs& in) { return layer_norm(in[0].t(), in[1].slice(0, 0, 3), Tensor()); }, {x, w});
}

TEST_CASE("gradcheck rms_norm with and without weight") {
  Tensor x = param({2, 2, 4}, 31), w = param({4}, 32);
  check_gradcheck([](const Inputs& in) { return rms_norm(in[0], in[1]); }, {x, w});
  check_gradcheck([](const Inputs& in) { return rms_norm(in[0], Tensor()); }, {x});
  check_gradcheck([](const Inputs& in) { return rms_norm(in[0].permute({2, 1, 0}), Tensor(), 1e-3); }, {x});
}

TEST_CASE("large inputs (the parallel kernels) agree with loop references, gradients included") {
  const int64_t rows = 64, d = 600;  // above the kernels' parallel threshold; d spans column blocks
  Tensor x = randn({rows, d}, 71, DType::f32).set_requires_grad();
  Tensor w = randn({d}, 72, DType::f32).set_requires_grad(), b = randn({d}, 73, DType::f32).set_requires_grad();
  Tensor dy = randn({rows, d}, 74, DType::f32);
  std::vector<double> xs = x.to_vector<double>(), dys = dy.to_vector<double>();
  CHECK_CLOSE(softmax(x).to_vector<double>(), naive_softmax(xs, {rows, d}, 1, false), 1e-7, 1e-5);

  Tensor y = layer_norm(x, w, b);
  CHECK_CLOSE(y.to_vector<double>(), naive_norm(xs, d, w.to_vector<double>(), b.to_vector<double>(), 1e-5, true), 1e-5,
              0);
  y.backward(dy);
  // dbias = column sums of dy, dweight = column sums of dy * xhat.
  std::vector<double> xhat = naive_norm(xs, d, {}, {}, 1e-5, true), dweight(d, 0.0), dbias(d, 0.0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < d; ++j) {
      dweight[j] += dys[r * d + j] * xhat[r * d + j];
      dbias[j] += dys[r * d + j];
    }
  CHECK_CLOSE(w.grad().to_vector<double>(), dweight, 1e-4, 1e-5);
  CHECK_CLOSE(b.grad().to_vector<double>(), dbias, 1e-4, 1e-5);
}

// ---- dropout ---------------------------------------------------------------------

TEST_CASE("dropout follows the generator's draws and scales the kept elements") {
  const double p = 0.4;
  Tensor x = randn({4, 25}, 41);
  Generator gen(99);
  gen.reserve(7);  // a generator part-way through its stream
  const uint64_t first = gen.offset();
  std::vector<double> y = dropout(x, p, true, gen).to_vector<double>(), xs = x.to_vector<double>();
  CHECK(gen.offset() == first + 100);
  int dropped = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const bool drop = gen.uniform_at(first + i) < p;
    dropped += drop;
    CHECK(y[i] == doctest::Approx(drop ? 0.0 : xs[i] / (1 - p)));
  }
  CHECK(dropped > 20);  // about 40 of 100
  CHECK(dropped < 60);
  // The next call uses the next draws: a different mask.
  CHECK(dropout(x, p, true, gen).to_vector<double>() != y);

  // Identity (the same tensor, no draws) when not training or p == 0.
  const uint64_t before = gen.offset();
  CHECK(dropout(x, p, false, gen).is_same(x));
  CHECK(dropout(x, 0, true, gen).is_same(x));
  CHECK(gen.offset() == before);

  // The default-generator overload is reproducible after manual_seed.
  manual_seed(5);
  std::vector<double> a = dropout(x, p, true).to_vector<double>();
  manual_seed(5);
  CHECK(dropout(x, p, true).to_vector<double>() == a);
}

TEST_CASE("gradcheck dropout with a fixed generator, contiguous and strided") {
  Tensor x = param({3, 8}, 42);
  check_gradcheck(
      [](const Inputs& in) {
        Generator gen(123);  // fresh each call: the same mask every time
        return dropout(in[0], 0.3, true, gen);
      },
      {x});
  check_gradcheck(
      [](const Inputs& in) {
        Generator gen(124);
        return dropout(in[0].t(), 0.5, true, gen);
      },
      {x});
}

// ---- embedding -------------------------------------------------------------------

TEST_CASE("embedding gathers rows and sums repeated indices in the gradient") {
  Tensor w = Tensor::arange(0, 8, 1, DType::f64).reshape({4, 2}).set_requires_grad();
  Tensor idx = Tensor::from_vector<int32_t>({3, 0, 3, 1, 3, 0}, {2, 3});
  Tensor y = embedding(w, idx);
  CHECK(y.shape() == Shape{2, 3, 2});
  CHECK(y.to_vector<double>() == std::vector<double>{6, 7, 0, 1, 6, 7, 2, 3, 6, 7, 0, 1});
  y.backward(Tensor::arange(1, 13, 1, DType::f64).reshape({2, 3, 2}));
  // row 0: positions 1, 5 -> (3+11, 4+12); row 1: position 3 -> (7, 8); row 2: none;
  // row 3: positions 0, 2, 4 -> (1+5+9, 2+6+10).
  CHECK(w.grad().to_vector<double>() == std::vector<double>{14, 16, 7, 8, 0, 0, 15, 18});
}

TEST_CASE("gradcheck embedding with repeated indices and a strided weight") {
  Tensor w = param({5, 3}, 51);
  Tensor idx = Tensor::from_vector<int32_t>({4, 1, 4, 4, 0, 1}, {3, 2});
  check_gradcheck([&](const Inputs& in) { return embedding(in[0], idx); }, {w});
  check_gradcheck([&](const Inputs& in) { return embedding(in[0].t().t().slice(1, 0, 3, 2), idx); }, {w});
}

// ---- cross_entropy ----------------------------------------------------------------

TEST_CASE("cross_entropy matches a loop reference for each reduction, ignore_index and smoothing") {
  const int64_t classes = 5;
  Tensor logits = randn({6, classes}, 61);
  std::vector<int32_t> ts{2, -1, 0, 4, -1, 4};
  Tensor targets = Tensor::from_vector(ts);
  for (double smoothing : {0.0, 0.2}) {
    CAPTURE(smoothing);
    std::vector<double> rows = naive_cross_entropy(logits.to_vector<double>(), ts, classes, -1, smoothing);
    double total = 0;
    for (double v : rows) total += v;
    CrossEntropyOptions opts{-1, smoothing, Reduction::none};
    CHECK_CLOSE(cross_entropy(logits, targets, opts).to_vector<double>(), rows, 1e-12, 0);
    opts.reduction = Reduction::sum;
    CHECK(cross_entropy(logits, targets, opts).item() == doctest::Approx(total).epsilon(1e-12));
    opts.reduction = Reduction::mean;
    CHECK(cross_entropy(logits, targets, opts).item() == doctest::Approx(total / 4).epsilon(1e-12));
  }
  // Classes in the last dimension of a 3-D input: the same rows, reshaped.
  CrossEntropyOptions none{-1, 0.2, Reduction::none};
  Tensor loss3 = cross_entropy(logits.reshape({2, 3, classes}), targets.reshape({2, 3}), none);
  CHECK(loss3.shape() == Shape{2, 3});
  CHECK_CLOSE(loss3.reshape({6}), cross_entropy(logits, targets, none), 0, 0);
  // The f32 kernel against the f64 reference.
  CrossEntropyOptions mean{-1, 0.2, Reduction::mean};
  CHECK(cross_entropy(logits.to(DType::f32), targets, mean).item() ==
        doctest::Approx(cross_entropy(logits, targets, mean).item()).epsilon(1e-6));
}

TEST_CASE("cross_entropy with every target ignored: mean is 0 (PyTorch: NaN), gradient 0") {
  Tensor logits = param({3, 4}, 62);
  Tensor targets = Tensor::from_vector<int32_t>({-100, -100, -100});
  Tensor loss = cross_entropy(logits, targets, {-100, 0.1, Reduction::mean});
  CHECK(loss.item() == 0);
  loss.backward();
  CHECK(logits.grad().to_vector<double>() == std::vector<double>(12, 0.0));
}

TEST_CASE("gradcheck cross_entropy: each reduction, ignore_index, label smoothing, strided logits") {
  Tensor logits = param({5, 4}, 63);
  Tensor targets = Tensor::from_vector<int32_t>({1, 7, 3, 0, 7});  // 7 is ignored
  for (Reduction reduction : {Reduction::mean, Reduction::sum, Reduction::none}) {
    for (double smoothing : {0.0, 0.1}) {
      CAPTURE(int(reduction));
      CAPTURE(smoothing);
      CrossEntropyOptions opts{7, smoothing, reduction};
      check_gradcheck([&](const Inputs& in) { return cross_entropy(in[0], targets, opts); }, {logits});
    }
  }
  Tensor wide = param({4, 5}, 64);  // transposed: a strided [5, 4] input
  check_gradcheck([&](const Inputs& in) { return cross_entropy(in[0].t(), targets, {7, 0.1}); }, {wide});
}

// ---- frozen PyTorch fixtures ----------------------------------------------------------

TEST_CASE("cross_entropy and layer_norm match frozen PyTorch 1.13 values") {
  testing::Fixture f(HEADROOM_FIXTURES_DIR "/nn.safetensors");
  CHECK(f.metadata("generator") == "tests/fixtures/gen_nn.py");
  CHECK(f.metadata("torch_version").rfind("1.13", 0) == 0);

  SUBCASE("cross_entropy, label smoothing 0.1, ignore_index -100") {
    CHECK(f.metadata("label_smoothing") == "0.1");
    Tensor targets = f.get("ce_targets");
    for (DType dtype : {DType::f32, DType::f64}) {
      CAPTURE(dtype);
      // f32 kernels against float64 references: 1e-5; f64: 1e-12.
      const double tol = dtype == DType::f32 ? 1e-5 : 1e-12;
      Tensor logits = f.get("ce_logits").to(dtype).set_requires_grad();
      CrossEntropyOptions opts{-100, 0.1, Reduction::mean};
      Tensor loss = cross_entropy(logits, targets, opts);
      CHECK_CLOSE(loss, f.get("ce_loss_mean"), tol, tol);
      loss.backward();
      CHECK_CLOSE(logits.grad(), f.get("ce_dlogits_mean"), tol, tol);
      opts.reduction = Reduction::none;
      CHECK_CLOSE(cross_entropy(logits.detach(), targets, opts), f.get("ce_loss_none"), tol, tol);
    }
  }
  SUBCASE("layer_norm with affine, eps 1e-5") {
    for (DType dtype : {DType::f32, DType::f64}) {
      CAPTURE(dtype);
      const double tol = dtype == DType::f32 ? 1e-5 : 1e-12;
      Tensor x = f.get("ln_x").to(dtype).set_requires_grad();
      Tensor w = f.get("ln_weight").to(dtype).set_requires_grad();
      Tensor b = f.get("ln_bias").to(dtype).set_requires_grad();
      Tensor y = layer_norm(x, w, b, 1e-5);
      CHECK_CLOSE(y, f.get("ln_y"), tol, tol);
      y.backward(f.get("ln_dy").to(dtype));
      CHECK_CLOSE(x.grad(), f.get("ln_dx"), tol, tol);
      CHECK_CLOSE(w.grad(), f.get("ln_dweight"), tol, tol);
      CHECK_CLOSE(b.grad(), f.get("ln_dbias"), tol, tol);
    }
  }
}

// ---- errors ---------------------------------------------------------------------------

TEST_CASE("nn ops reject bad shapes, dtypes and values") {
  Tensor x = Tensor::ones({2, 3});
  Tensor ints = Tensor::ones({2, 3}, DType::i32);
  CHECK_THROWS_HEADROOM(softmax(x, 2), "[softmax] dimension 2 is out of range");
  CHECK_THROWS_HEADROOM(log_softmax(ints), "[log_softmax] expected input of dtype f32 or f64, got i32");

  CHECK_THROWS_HEADROOM(
      layer_norm(x, Tensor::ones({2}), Tensor()),
      "[layer_norm] expected weight of shape (3) to match the last dimension of input (2,3), got (2)");
  CHECK_THROWS_HEADROOM(layer_norm(x, Tensor(), Tensor::ones({3}, DType::f64)),
                        "[layer_norm] expected bias of dtype f32, got f64");
  CHECK_THROWS_HEADROOM(rms_norm(Tensor::ones({2, 0}), Tensor()),
                        "[rms_norm] expected an input with a non-empty last dimension");

  CHECK_THROWS_HEADROOM(dropout(x, 1.0, true), "[dropout] p must be in [0, 1), got 1");
  CHECK_THROWS_HEADROOM(dropout(x, -0.1, false), "[dropout] p must be in [0, 1), got -0.1");

  Tensor table = Tensor::ones({5, 2});
  CHECK_THROWS_HEADROOM(embedding(table, Tensor::from_vector<int32_t>({0, 5})),
                        "[embedding] index 5 at position 1 is out of range for a weight with V = 5 rows");
  CHECK_THROWS_HEADROOM(embedding(table, Tensor::from_vector<int32_t>({-1})), "index -1 at position 0");
  CHECK_THROWS_HEADROOM(embedding(table, Tensor::ones({2})), "[embedding] expected indices of dtype i32, got f32");
  CHECK_THROWS_HEADROOM(embedding(Tensor::ones({5}), Tensor::from_vector<int32_t>({0})),
                        "[embedding] expected weight of shape [V, D], got (5)");

  Tensor logits = Tensor::ones({2, 3});
  CHECK_THROWS_HEADROOM(cross_entropy(logits, Tensor::from_vector<int32_t>({0, 3})),
                        "[cross_entropy] target 3 at position 1 is outside [0, 3) and is not ignore_index -100");
  CHECK_THROWS_HEADROOM(
      cross_entropy(logits, Tensor::from_vector<int32_t>({0, 1, 2})),
      "[cross_entropy] targets of shape (3) do not match logits of shape (2,3) (expected targets of shape (2))");
  CHECK_THROWS_HEADROOM(cross_entropy(logits, Tensor::from_vector<int32_t>({0, 1}), {-100, 1.5}),
                        "[cross_entropy] label_smoothing must be in [0, 1], got 1.5");
  CHECK_THROWS_HEADROOM(cross_entropy(logits, Tensor::ones({2})), "[cross_entropy] expected targets of dtype i32");
}
