// CPU/CUDA parity of matmul and linear on cuBLAS (cuda/matmul.cu): plain,
// batched, broadcast batches (one strided call, and runs of several), transposed
// and copied operands, 1-D promotions, bias and its row-sum gradient, empty
// dimensions, f64, and TF32 with a loose tolerance.  Skipped without a device.
#include "cuda_helpers.h"

using namespace headroom;
using headroom::testing::check_parity;

namespace {

using Inputs = std::vector<Tensor>;

constexpr double kTol32 = 1e-4, kTol64 = 1e-12;

Tensor randn(const Shape& shape, uint64_t seed, DType dtype = DType::f32) {
  Generator gen(seed);
  return Tensor::randn(shape, gen, dtype);
}

Tensor product(const Inputs& in) { return matmul(in[0], in[1]); }

// Restores the TF32 setting when the test ends, even on failure.
struct Tf32Scope {
  explicit Tf32Scope(bool enabled) : previous(allow_tf32()) { set_allow_tf32(enabled); }
  ~Tf32Scope() { set_allow_tf32(previous); }
  bool previous;
};

}  // namespace

TEST_CASE("cuda matmul: 2-D products at odd sizes, f32 and f64") {
  check_parity(product, {randn({3, 4}, 1), randn({4, 5}, 2)}, kTol32, kTol32);
  check_parity(product, {randn({33, 17}, 3), randn({17, 65}, 4)}, kTol32, kTol32);
  check_parity(product, {randn({1, 7}, 5), randn({7, 1}, 6)}, kTol32, kTol32);
  check_parity(product, {randn({7, 33}, 7, DType::f64), randn({33, 9}, 8, DType::f64)}, kTol64, kTol64);
}

TEST_CASE("cuda matmul: transposed operands read in place, and strided ones copied") {
  auto both_t = [](const Inputs& in) { return matmul(in[0].t(), in[1].t()); };
  check_parity(both_t, {randn({4, 3}, 1), randn({5, 4}, 2)}, kTol32, kTol32);
  check_parity([](const Inputs& in) { return matmul(in[0].t(), in[1]); }, {randn({9, 6}, 3), randn({9, 5}, 4)}, kTol32,
               kTol32);
  check_parity([](const Inputs& in) { return matmul(in[0], in[1].t()); }, {randn({6, 9}, 5), randn({5, 9}, 6)}, kTol32,
               kTol32);
  // Column stride 2 (a copy) and a row stride larger than the width (read in place).
  check_parity([](const Inputs& in) { return matmul(in[0].slice(1, 0, 8, 2), in[1].slice(0, 1, 9, 2)); },
               {randn({3, 8}, 7), randn({9, 5}, 8)}, kTol32, kTol32);
  // Batched operands transposed in their last two dimensions.
  check_parity([](const Inputs& in) { return matmul(in[0].transpose(1, 2), in[1].transpose(1, 2)); },
               {randn({3, 4, 2}, 9), randn({3, 5, 4}, 10)}, kTol32, kTol32);
}

TEST_CASE("cuda matmul: batched products, and 1-D operands promoted like torch.matmul") {
  check_parity(product, {randn({4, 3, 5}, 1), randn({4, 5, 2}, 2)}, kTol32, kTol32);
  // [2, 3, 4] · [4, 5]: the batch folds into the rows of one GEMM.
  check_parity(product, {randn({2, 3, 4}, 3), randn({4, 5}, 4)}, kTol32, kTol32);
  // A permuted batch: interleaved matrices (batch stride 4, row stride 8), read in place.
  check_parity(
      [](const Inputs& in) {
        return matmul(in[0].permute({1, 0, 2}), in[1]);
      },
      {randn({3, 2, 4}, 5), randn({2, 4, 5}, 6)}, kTol32, kTol32);
  check_parity(product, {randn({3, 7, 33}, 7, DType::f64), randn({3, 33, 2}, 8, DType::f64)}, kTol64, kTol64);
  check_parity(product, {randn({7}, 9), randn({7}, 10)}, kTol32, kTol32);
  check_parity(product, {randn({4}, 11), randn({4, 5}, 12)}, kTol32, kTol32);
  check_parity(product, {randn({3, 4}, 13), randn({4}, 14)}, kTol32, kTol32);
  check_parity(product, {randn({2, 3, 4}, 15), randn({4}, 16)}, kTol32, kTol32);
}

// The gradients of broadcast operands are summed over the batch by
// sum_to_shape (ops/shape.cpp), so this case also needs that op on CUDA.
TEST_CASE("cuda matmul: broadcast batches") {
  // a broadcast whole: one strided call with a stride of 0.
  check_parity(product, {randn({3, 4}, 1), randn({6, 4, 5}, 2)}, kTol32, kTol32);
  // Mixed broadcasts: batch [2, 3] from [2, 1] and [3], and [4, 5] from [4, 1] and [1, 5]: runs of calls.
  check_parity(product, {randn({2, 1, 3, 4}, 3), randn({3, 4, 5}, 4)}, kTol32, kTol32);
  check_parity(product, {randn({4, 1, 2, 3}, 5), randn({1, 5, 3, 2}, 6)}, kTol32, kTol32);
  check_parity(product, {randn({2, 3, 3, 4}, 7, DType::f64), randn({3, 4, 2}, 8, DType::f64)}, kTol64, kTol64);
  check_parity(product, {randn({4}, 9), randn({2, 4, 5}, 10)}, kTol32, kTol32);  // [4] -> [1, 4]
}

TEST_CASE("cuda matmul: linear with and without bias, and many rows for the bias gradient") {
  auto with_bias = [](const Inputs& in) { return linear(in[0], in[1], in[2]); };
  auto without_bias = [](const Inputs& in) { return linear(in[0], in[1]); };
  check_parity(with_bias, {randn({2, 3, 4}, 1), randn({5, 4}, 2), randn({5}, 3)}, kTol32, kTol32);
  check_parity(without_bias, {randn({2, 3, 4}, 4), randn({5, 4}, 5)}, kTol32, kTol32);
  check_parity(with_bias, {randn({33}, 6), randn({7, 33}, 7), randn({7}, 8)}, kTol32, kTol32);
  // 4200 rows: the bias gradient sums 66 chunks, then 2, then 1.
  check_parity(with_bias, {randn({4200, 3}, 9, DType::f64), randn({2, 3}, 10, DType::f64), randn({2}, 11, DType::f64)},
               1e-10, kTol64);
  check_parity(with_bias, {randn({4200, 3}, 12), randn({2, 3}, 13), randn({2}, 14)}, 1e-3, kTol32);
}

TEST_CASE("cuda matmul: empty dimensions give empty or zero results") {
  check_parity(product, {randn({0, 3}, 1), randn({3, 2}, 2)}, 0);
  check_parity(product, {randn({2, 0}, 3), randn({0, 3}, 4)}, 0);  // k = 0: zeros
  check_parity(product, {randn({0, 2, 3}, 5), randn({3, 2}, 6)}, 0);
  check_parity(product, {randn({2, 3, 0}, 7), randn({2, 0, 4}, 8)}, 0);
  // k = 0 with a bias: every row is the bias.  And no rows at all.
  auto with_bias = [](const Inputs& in) { return linear(in[0], in[1], in[2]); };
  check_parity(with_bias, {randn({3, 0}, 9), randn({4, 0}, 10), randn({4}, 11)}, 0);
  check_parity(with_bias, {randn({0, 3}, 12), randn({4, 3}, 13), randn({4}, 14)}, 0);
}

TEST_CASE("cuda matmul: TF32 tensor-core products stay close to FP32") {
  Tf32Scope tf32(true);
  // TF32 keeps 10 mantissa bits: relative errors near 1e-3 per product.
  // Sums of about 100 such terms: errors near 1e-2, against values near 10.
  check_parity(product, {randn({64, 128}, 1), randn({128, 96}, 2)}, 1e-1, 1e-2);
  check_parity([](const Inputs& in) { return linear(in[0], in[1], in[2]); },
               {randn({4, 16, 64}, 3), randn({32, 64}, 4), randn({32}, 5)}, 1e-1, 1e-2);
}

TEST_CASE("cuda matmul: operands on two devices are refused") {
  CHECK_THROWS_HEADROOM(matmul(randn({2, 3}, 1).to(Device::cuda()), randn({3, 2}, 2)), "different devices");
  CHECK_THROWS_HEADROOM(linear(randn({2, 3}, 3).to(Device::cuda()), randn({4, 3}, 4).to(Device::cuda()), randn({4}, 5)),
                        "different devices");
}
