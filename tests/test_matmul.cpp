// matmul and linear: the reference kernel's triple loop (2-D, transposed and sliced views,
// broadcast batches, 1-D promotions), in-place reading of transposed operands,
// gradchecks in f64, and error messages.
#include "helpers.h"

#include "headroom/ops/matmul.h"
#include "headroom/ops/reference/kernels.h"

using namespace headroom;

namespace {

Tensor random(const Shape& shape, DType dtype = DType::f32, uint64_t seed = 1) {
  Generator g(seed);
  return Tensor::randn(shape, g, dtype);
}
Tensor param(const Shape& shape, uint64_t seed = 1) { return random(shape, DType::f64, seed).set_requires_grad(); }

Shape batch_of(const Shape& s) { return Shape(s.begin(), s.end() - 2); }
Shape with_matrix(Shape batch, int64_t rows, int64_t cols) {
  batch.push_back(rows);
  batch.push_back(cols);
  return batch;
}

// reference::batched_gemm (ops/reference/kernels.h, the plain triple loop) over
// broadcast batches, in f64.   a: [..., M, K]   b: [..., K, N]   -> f64 [batch..., M, N]
Tensor reference_matmul(const Tensor& a, const Tensor& b) {
  const int64_t m = a.size(-2), k = a.size(-1), n = b.size(-1);
  const Shape batch = broadcast_shapes(batch_of(a.shape()), batch_of(b.shape()), "reference");
  Tensor av = a.expand(with_matrix(batch, m, k)).to(DType::f64).contiguous();
  Tensor bv = b.expand(with_matrix(batch, k, n)).to(DType::f64).contiguous();
  const int64_t batches = shape_numel(batch);
  kernels::MatrixStack<double> as{av.data<double>(), {}, {false, std::max<int64_t>(1, k)}};
  kernels::MatrixStack<double> bs{bv.data<double>(), {}, {false, std::max<int64_t>(1, n)}};
  for (int64_t z = 0; z < batches; ++z) as.offsets.push_back(z * m * k), bs.offsets.push_back(z * k * n);
  Tensor out = Tensor::empty(with_matrix(batch, m, n), DType::f64);
  reference::batched_gemm<double>(m, n, k, as, bs, nullptr, out.data<double>());
  return out;
}

// torch.matmul's 1-D promotions around the reference.
Tensor reference_any(const Tensor& a, const Tensor& b) {
  Tensor out = reference_matmul(a.dim() == 1 ? a.unsqueeze(0) : a, b.dim() == 1 ? b.unsqueeze(-1) : b);
  if (b.dim() == 1) out = out.squeeze(-1);
  if (a.dim() == 1) out = out.squeeze(-2 + (b.dim() == 1 ? 1 : 0));
  return out;
}

void check_against_reference(const Tensor& a, const Tensor& b) {
  INFO("a ", a.shape(), " strides ", a.strides(), "   b ", b.shape(), " strides ", b.strides());
  const double tol = a.dtype() == DType::f32 ? 1e-4 : 1e-12;
  CHECK_CLOSE(matmul(a, b), reference_any(a, b), tol, tol);
}

void check_grad(const std::function<Tensor(const std::vector<Tensor>&)>& fn, const std::vector<Tensor>& inputs) {
  auto result = gradcheck(fn, inputs);
  CHECK_MESSAGE(result.ok, result.message);
}

size_t allocations() { return cpu_backend().memory_stats().allocations; }

}  // namespace

TEST_CASE("matmul of hand-checkable 2x2 matrices and a dot product") {
  Tensor a = Tensor::from_vector<float>({1, 2, 3, 4}, {2, 2});
  Tensor b = Tensor::from_vector<float>({5, 6, 7, 8}, {2, 2});
  CHECK(matmul(a, b).to_vector<float>() == std::vector<float>{19, 22, 43, 50});
  Tensor dot = matmul(Tensor::from_vector<double>({1, 2, 3}), Tensor::from_vector<double>({4, 5, 6}));
  CHECK(dot.dim() == 0);
  CHECK(dot.item() == 32.0);
}

TEST_CASE("matmul 2-D matches a triple loop for transposed, sliced and expanded views") {
  for (DType dtype : {DType::f32, DType::f64}) {
    Tensor a = random({3, 4}, dtype, 1), b = random({4, 5}, dtype, 2);
    check_against_reference(a, b);
    check_against_reference(random({4, 3}, dtype, 3).t(), b);  // a: strides [1, 3]
    check_against_reference(a, random({5, 4}, dtype, 4).t());  // b: strides [1, 4]
    check_against_reference(random({4, 3}, dtype, 5).t(), random({5, 4}, dtype, 6).t());
    check_against_reference(random({3, 8}, dtype, 7).slice(1, 0, 8, 2), b);               // column stride 2: copied
    check_against_reference(random({6, 4}, dtype, 8).slice(0, 1, 6, 2), b);               // row stride 8: read in place
    check_against_reference(random({1, 4}, dtype, 9).expand({3, 4}), b);                  // row stride 0: copied
    check_against_reference(random({9, 7}, dtype, 10).slice(0, 2, 5).slice(1, 1, 5), b);  // inner block
  }
}

TEST_CASE("matmul batched with broadcast batch dimensions matches a triple loop") {
  check_against_reference(random({2, 1, 3, 4}, DType::f32, 1), random({3, 4, 5}, DType::f32, 2));
  check_against_reference(random({2, 3, 4}, DType::f32, 3), random({4, 5}, DType::f32, 4));  // folds into one GEMM
  check_against_reference(random({3, 4}, DType::f32, 5), random({2, 4, 5}, DType::f32, 6));
  check_against_reference(random({8, 3, 4}, DType::f64, 7), random({8, 4, 2}, DType::f64, 8));  // OpenMP over batches
  check_against_reference(random({2, 4, 3}, DType::f32, 9).transpose(1, 2), random({2, 4, 5}, DType::f32, 10));
  check_against_reference(random({3, 2, 4}, DType::f32, 11).permute({1, 0, 2}), random({4, 5}, DType::f32, 12));
  check_against_reference(random({2, 3, 4}, DType::f32, 13).transpose(1, 2), random({3, 5}, DType::f32, 14));
  check_against_reference(random({4, 1, 2, 3}, DType::f32, 15), random({1, 5, 3, 2}, DType::f32, 16));
}

TEST_CASE("matmul promotes 1-D inputs like torch.matmul") {
  Tensor v = random({4}, DType::f32, 1);
  check_against_reference(v, random({4}, DType::f32, 2));
  check_against_reference(v, random({4, 5}, DType::f32, 3));
  check_against_reference(random({3, 4}, DType::f32, 4), v);
  check_against_reference(v, random({2, 4, 5}, DType::f32, 5));
  check_against_reference(random({2, 3, 4}, DType::f32, 6), v);
  check_against_reference(random({8}, DType::f32, 7).slice(0, 0, 8, 2), random({4, 3}, DType::f32, 8));  // stride 2
  check_against_reference(random({3, 4}, DType::f32, 9), random({8}, DType::f32, 10).slice(0, 1, 8, 2));
  CHECK(matmul(v, random({2, 4, 5})).shape() == Shape{2, 5});
  CHECK(matmul(random({2, 3, 4}), v).shape() == Shape{2, 3});
}

TEST_CASE("matmul with empty dimensions gives empty or zero results") {
  CHECK(matmul(Tensor::ones({0, 3}), Tensor::ones({3, 2})).shape() == Shape{0, 2});
  CHECK(matmul(Tensor::ones({2, 0}), Tensor::ones({0, 3})).to_vector<float>() == std::vector<float>(6, 0.0f));
  CHECK(matmul(Tensor::ones({0, 2, 3}), Tensor::ones({3, 2})).shape() == Shape{0, 2, 2});
}

TEST_CASE("matmul reads transposed operands in place, without copies") {
  Tensor a = random({4, 3}), b = random({5, 4});
  size_t before = allocations();
  Tensor out = matmul(a.t(), b.t());   // [3, 4] · [4, 5]
  CHECK(allocations() - before == 1);  // the output only
  CHECK_CLOSE(out, reference_any(a.t(), b.t()), 1e-4, 1e-4);

  Tensor x = random({2, 3, 4}), w = random({5, 4});
  before = allocations();
  linear(x, w);
  CHECK(allocations() - before == 1);
}

TEST_CASE("linear matches x · Wᵀ + b computed by loops") {
  for (DType dtype : {DType::f32, DType::f64}) {
    const double tol = dtype == DType::f32 ? 1e-4 : 1e-12;
    Tensor x = random({2, 3, 4}, dtype, 1), w = random({5, 4}, dtype, 2), bias = random({5}, dtype, 3);
    Tensor expected = reference_matmul(x, w.t());  // [2, 3, 5]
    CHECK_CLOSE(linear(x, w), expected, tol, tol);
    std::vector<double> with_bias = expected.to_vector<double>(), b = bias.to_vector<double>();
    for (size_t i = 0; i < with_bias.size(); ++i) with_bias[i] += b[i % 5];
    CHECK_CLOSE(linear(x, w, bias), Tensor::from_vector(with_bias, {2, 3, 5}), tol, tol);
    // A transposed weight, a permuted input and a 1-D input.
    Tensor w_t = random({4, 5}, dtype, 4).t();
    CHECK_CLOSE(linear(x, w_t), reference_matmul(x, w_t.t()), tol, tol);
    Tensor x_p = random({3, 2, 4}, dtype, 5).permute({1, 0, 2});
    CHECK_CLOSE(linear(x_p, w), reference_matmul(x_p, w.t()), tol, tol);
    Tensor v = random({4}, dtype, 6);
    CHECK_CLOSE(linear(v, w), reference_any(v, w.t()), tol, tol);
  }
}

TEST_CASE("gradcheck: matmul 2-D, transposed and sliced inputs") {
  auto mm = [](const std::vector<Tensor>& in) { return matmul(in[0], in[1]); };
  check_grad(mm, {param({3, 4}, 1), param({4, 2}, 2)});
  check_grad([](const std::vector<Tensor>& in) { return matmul(in[0].t(), in[1].t()); },
             {param({4, 3}, 3), param({2, 4}, 4)});
  check_grad([](const std::vector<Tensor>& in) { return matmul(in[0].slice(1, 0, 8, 2), in[1]); },
             {param({3, 8}, 5), param({4, 2}, 6)});
}

TEST_CASE("gradcheck: matmul batched with broadcasting") {
  auto mm = [](const std::vector<Tensor>& in) { return matmul(in[0], in[1]); };
  check_grad(mm, {param({2, 1, 3, 4}, 1), param({3, 4, 2}, 2)});
  check_grad(mm, {param({2, 3, 4}, 3), param({4, 2}, 4)});  // b shared by the batch
  check_grad(mm, {param({3, 4}, 5), param({2, 4, 2}, 6)});  // a shared by the batch
  check_grad(
      [](const std::vector<Tensor>& in) {
        return matmul(in[0].transpose(1, 2), in[1].permute({1, 0, 2}));
      },
      {param({2, 4, 3}, 7), param({4, 2, 2}, 8)});
}

TEST_CASE("gradcheck: matmul with 1-D inputs") {
  auto mm = [](const std::vector<Tensor>& in) { return matmul(in[0], in[1]); };
  check_grad(mm, {param({4}, 1), param({4}, 2)});
  check_grad(mm, {param({4}, 3), param({4, 3}, 4)});
  check_grad(mm, {param({3, 4}, 5), param({4}, 6)});
  check_grad(mm, {param({4}, 7), param({2, 4, 3}, 8)});
  check_grad(mm, {param({2, 3, 4}, 9), param({4}, 10)});
}

TEST_CASE("gradcheck: linear with and without bias") {
  auto with_bias = [](const std::vector<Tensor>& in) { return linear(in[0], in[1], in[2]); };
  auto without_bias = [](const std::vector<Tensor>& in) { return linear(in[0], in[1]); };
  check_grad(with_bias, {param({2, 3, 4}, 1), param({5, 4}, 2), param({5}, 3)});
  check_grad(without_bias, {param({3, 4}, 4), param({5, 4}, 5)});
  check_grad(with_bias, {param({4}, 6), param({2, 4}, 7), param({2}, 8)});
  check_grad(
      [](const std::vector<Tensor>& in) {
        return linear(in[0].permute({1, 0, 2}), in[1].t(), in[2]);
      },
      {param({3, 2, 4}, 9), param({4, 5}, 10), param({5}, 11)});
}

TEST_CASE("matmul and linear errors name both shapes") {
  CHECK_THROWS_HEADROOM(matmul(Tensor::ones({2, 3}), Tensor::ones({4, 5})),
                        "[matmul] last dimension of first input with shape (2,3) must match second-to-last "
                        "dimension of second input with shape (4,5)");
  CHECK_THROWS_HEADROOM(matmul(Tensor::ones({2, 3}), Tensor::ones({4})),
                        "the size of the 1-D second input with shape (4)");
  CHECK_THROWS_HEADROOM(matmul(Tensor::ones({2, 3}), Tensor::ones({3, 2}, DType::f64)),
                        "[matmul] expected inputs of one dtype, got f32 and f64");
  CHECK_THROWS_HEADROOM(matmul(Tensor::ones({2, 3}, DType::i32), Tensor::ones({3, 2}, DType::i32)),
                        "[matmul] expected input of dtype f32 or f64, got i32");
  CHECK_THROWS_HEADROOM(matmul(Tensor::scalar(2), Tensor::ones({3})),
                        "[matmul] both inputs need at least 1 dimension, got shapes () and (3)");
  CHECK_THROWS_HEADROOM(matmul(Tensor::ones({2, 2, 3}), Tensor::ones({3, 3, 2})),
                        "[matmul] batch dimensions of shapes (2,2,3) and (3,3,2) cannot be broadcast together");

  CHECK_THROWS_HEADROOM(linear(Tensor::ones({2, 3}), Tensor::ones({5, 4})),
                        "[linear] last dimension of input with shape (2,3) must match the in dimension (1) of "
                        "weight with shape (5,4)");
  CHECK_THROWS_HEADROOM(linear(Tensor::ones({2, 4}), Tensor::ones({4})),
                        "[linear] expected a weight of shape [out, in], got (4)");
  CHECK_THROWS_HEADROOM(linear(Tensor::ones({2, 4}), Tensor::ones({5, 4}), Tensor::ones({4})),
                        "[linear] expected a bias of shape (5) for weight with shape (5,4), got (4)");
  CHECK_THROWS_HEADROOM(linear(Tensor::ones({2, 4}), Tensor::ones({5, 4}), Tensor::ones({5}, DType::f64)),
                        "[linear] expected inputs of one dtype, got f32 and f64");
  CHECK_THROWS_HEADROOM(linear(Tensor::scalar(1), Tensor::ones({5, 4})),
                        "[linear] expected an input of shape [..., in], got ()");
}

// Products above the split threshold run as bands of rows (tall c) or of
// columns (wide c), one per thread; every band must land in its place for
// every operand layout, with a bias, and for any thread count.
TEST_CASE("products cut into bands across threads match a triple loop (rows, columns, bias, batches)") {
  const int saved_threads = num_threads();
  for (int threads : {1, 2, 3}) {
    set_num_threads(threads);
    CAPTURE(threads);
    for (bool transpose_a : {false, true})
      for (bool transpose_b : {false, true})
        for (auto [m, n] : {std::pair<int64_t, int64_t>{129, 37}, {37, 129}}) {  // tall, then wide
          const int64_t k = 71;                                                  // m * n * k > 2^18
          Tensor a = transpose_a ? random({k, m}, DType::f64, 7).t() : random({m, k}, DType::f64, 7);
          Tensor b = transpose_b ? random({n, k}, DType::f64, 8).t() : random({k, n}, DType::f64, 8);
          check_against_reference(a, b);
          Tensor bias = random({n}, DType::f64, 9);
          std::vector<double> expected = reference_matmul(a, b).to_vector<double>(), bv = bias.to_vector<double>();
          for (size_t i = 0; i < expected.size(); ++i) expected[i] += bv[i % n];
          CHECK_CLOSE(linear(a, b.t(), bias), Tensor::from_vector(expected, {m, n}), 1e-12, 1e-12);
        }
    // Two matrices on three threads: two bands each.
    check_against_reference(random({2, 129, 71}, DType::f64, 10), random({71, 37}, DType::f64, 11).expand({2, 71, 37}));
  }
  set_num_threads(saved_threads);
}
