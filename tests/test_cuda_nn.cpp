// CPU/CUDA parity of the nn family (cuda/nn.cu): softmax, log_softmax,
// layer_norm, rms_norm, dropout, embedding and cross_entropy, forward and
// backward, at odd sizes (1, 7, 33, 1000 columns), empty inputs, ignored
// targets, non-contiguous inputs, f32 and f64.  Skipped without a device.
#include <limits>

#include "cuda_helpers.h"

using namespace headroom;
using headroom::testing::check_parity;
using headroom::testing::compare;

namespace {

using Inputs = std::vector<Tensor>;

// f32 tolerances: the devices sum rows in different orders and use different exp/log.
constexpr double kAtol32 = 1e-5, kRtol32 = 1e-4;
constexpr double kTol64 = 1e-12;

Tensor randn(const Shape& shape, uint64_t seed, DType dtype = DType::f32, double stddev = 1) {
  Generator gen(seed);
  return Tensor::randn(shape, gen, 0, stddev, dtype);
}

// Targets in [0, classes), every third one set to `ignored`.
Tensor targets_with_ignored(int64_t rows, int64_t classes, int32_t ignored, uint64_t seed) {
  Generator gen(seed);
  std::vector<int32_t> values(rows);
  for (int64_t i = 0; i < rows; ++i) values[i] = i % 3 == 2 ? ignored : int32_t(gen.next_int(classes));
  return Tensor::from_vector(values);
}

}  // namespace

TEST_CASE("cuda nn: softmax and log_softmax at 1, 7, 33 and 1000 columns, f32") {
  for (bool log : {false, true}) {
    auto fn = [log](const Inputs& in) { return log ? log_softmax(in[0], -1) : softmax(in[0], -1); };
    for (int64_t n : {1, 7, 33, 1000}) {
      INFO("log ", log, " columns ", n);
      check_parity(fn, {randn({5, n}, 10 + n, DType::f32, 3)}, kAtol32, kRtol32);
    }
    INFO("log ", log, " large logits (max subtraction)");
    check_parity(fn, {randn({3, 33}, 2, DType::f32, 100)}, 1e-4, kRtol32);
  }
}

TEST_CASE("cuda nn: softmax over a non-last dimension, a permuted input, empty rows and f64") {
  for (bool log : {false, true}) {
    INFO("log ", log);
    auto over = [log](int64_t dim) {
      return [log, dim](const Inputs& in) { return log ? log_softmax(in[0], dim) : softmax(in[0], dim); };
    };
    check_parity(over(1), {randn({2, 7, 3}, 1)}, kAtol32, kRtol32);
    check_parity(
        [&](const Inputs& in) {
          return over(-1)({in[0].permute({2, 0, 1})});
        },
        {randn({4, 3, 9}, 2)}, kAtol32, kRtol32);
    check_parity(over(-1), {Tensor::empty({0, 5})}, 0);
    check_parity(over(0), {randn({33, 2}, 3, DType::f64)}, kTol64, kTol64);
  }
}

TEST_CASE("cuda nn: softmax of an all -inf row is 0 with a 0 gradient") {
  Tensor x = randn({3, 7}, 4);
  x.select(0, 1).fill_(-std::numeric_limits<double>::infinity());
  check_parity([](const Inputs& in) { return softmax(in[0], -1); }, {x}, kAtol32, kRtol32);
}

TEST_CASE("cuda nn: layer_norm and rms_norm with and without affine, odd widths") {
  for (int64_t d : {1, 7, 33, 1000}) {
    INFO("d ", d);
    Tensor x = randn({6, d}, d), w = randn({d}, d + 1), b = randn({d}, d + 2);
    check_parity([](const Inputs& in) { return layer_norm(in[0], in[1], in[2]); }, {x, w, b}, 1e-4, kRtol32);
    check_parity([](const Inputs& in) { return layer_norm(in[0], Tensor(), Tensor()); }, {x}, 1e-4, kRtol32);
    check_parity([](const Inputs& in) { return layer_norm(in[0], in[1], Tensor()); }, {x, w}, 1e-4, kRtol32);
    check_parity([](const Inputs& in) { return rms_norm(in[0], in[1]); }, {x, w}, 1e-4, kRtol32);
    check_parity([](const Inputs& in) { return rms_norm(in[0], Tensor()); }, {x}, 1e-4, kRtol32);
  }
}

TEST_CASE("cuda nn: norms of a non-contiguous 3-D input, empty rows, and many rows in f64") {
  check_parity([](const Inputs& in) { return layer_norm(in[0].transpose(0, 2), in[1], in[2]); },
               {randn({7, 4, 3}, 1), randn({7}, 2), randn({7}, 3)}, 1e-4, kRtol32);
  // No rows: empty output, zero weight and bias gradients.
  check_parity([](const Inputs& in) { return layer_norm(in[0], in[1], in[2]); },
               {Tensor::empty({0, 5}), randn({5}, 4), randn({5}, 5)}, 0);
  // 4097 rows: partial sums in 65 chunks, then 2, then 1 (every level of the column reduction).
  for (bool center : {true, false}) {
    INFO("center ", center);
    check_parity(
        [center](const Inputs& in) { return center ? layer_norm(in[0], in[1], in[2]) : rms_norm(in[0], in[1]); },
        {randn({4097, 5}, 6, DType::f64), randn({5}, 7, DType::f64), randn({5}, 8, DType::f64)}, 1e-10, kTol64);
  }
}

TEST_CASE("cuda nn: norm gradients are identical from run to run") {
  Tensor x = randn({300, 33}, 1).to(Device::cuda()), w = randn({33}, 2).to(Device::cuda());
  Tensor seed = randn({300, 33}, 3).to(Device::cuda());
  auto weight_grad = [&] {
    Tensor leaf = w.clone().set_requires_grad();
    layer_norm(x, leaf, Tensor()).backward(seed);
    return leaf.grad().to(Device::cpu());
  };
  Tensor first = weight_grad();
  CHECK(compare(weight_grad(), first, 0) == "");
}

TEST_CASE("cuda nn: dropout keeps exactly the CPU's elements, forward and backward") {
  for (double p : {0.1, 0.5}) {
    auto fn = [p](const Inputs& in) {
      Generator gen(77);
      gen.reserve(5);  // a stream that does not start at 0
      return dropout(in[0], p, /*training=*/true, gen);
    };
    INFO("p ", p);
    check_parity(fn, {randn({1}, 1)}, 0, 0);
    check_parity(fn, {randn({7, 33}, 2)}, 0, 0);
    check_parity([&](const Inputs& in) { return fn({in[0].t()}); }, {randn({33, 5}, 3, DType::f64)}, 0, 0);
    check_parity(fn, {Tensor::empty({0, 3})}, 0, 0);
  }
}

TEST_CASE("cuda nn: embedding with repeated indices sums gradients in the CPU's order") {
  auto fn = [](const Inputs& in) { return embedding(in[0], in[1]); };
  Tensor repeated = Tensor::from_vector<int32_t>({3, 0, 3, 9, 3, 0, 5, 9, 9, 1, 3, 3}, {3, 4});
  for (int64_t d : {1, 7, 33, 1000}) {
    INFO("d ", d);
    // Additions in one order on both devices: equal to the last bit.
    check_parity(fn, {randn({10, d}, d), repeated}, 0, 0);
  }
  check_parity(fn, {randn({10, 7}, 1, DType::f64), Tensor::from_vector<int32_t>({4})}, 0, 0);
  check_parity(fn, {randn({10, 7}, 2), Tensor::empty({0}, DType::i32)}, 0, 0);
  check_parity(
      [&](const Inputs& in) {
        return fn({in[0].t(), in[1]});
      },
      {randn({7, 10}, 3), Tensor::from_vector<int32_t>({6, 6, 0, 2})}, 0, 0);
}

TEST_CASE("cuda nn: cross_entropy for every reduction, ignored rows and label smoothing") {
  for (Reduction reduction : {Reduction::mean, Reduction::sum, Reduction::none})
    for (double smoothing : {0.0, 0.1})
      for (int64_t classes : {1, 7, 33, 1000}) {
        INFO("reduction ", int(reduction), " smoothing ", smoothing, " classes ", classes);
        CrossEntropyOptions opts;
        opts.reduction = reduction;
        opts.label_smoothing = smoothing;
        opts.ignore_index = -1;
        check_parity([opts](const Inputs& in) { return cross_entropy(in[0], in[1], opts); },
                     {randn({7, classes}, classes, DType::f32, 2), targets_with_ignored(7, classes, -1, classes)},
                     kAtol32, kRtol32);
      }
}

TEST_CASE("cuda nn: cross_entropy of 3-D and strided logits, all ignored, empty, and f64") {
  auto with = [](Reduction reduction) {
    return [reduction](const Inputs& in) {
      CrossEntropyOptions opts;
      opts.reduction = reduction;
      return cross_entropy(in[0], in[1], opts);
    };
  };
  check_parity(with(Reduction::mean), {randn({2, 3, 9}, 1), targets_with_ignored(6, 9, -100, 2).reshape({2, 3})},
               kAtol32, kRtol32);
  check_parity(
      [&](const Inputs& in) {
        return with(Reduction::sum)({in[0].t(), in[1]});
      },
      {randn({33, 5}, 3), targets_with_ignored(5, 33, -100, 4)}, kAtol32, kRtol32);
  check_parity(with(Reduction::mean), {randn({4, 7}, 5), Tensor::full({4}, -100, DType::i32)}, 0);
  check_parity(with(Reduction::mean), {Tensor::empty({0, 7}), Tensor::empty({0}, DType::i32)}, 0);
  check_parity(with(Reduction::none), {Tensor::empty({0, 7}), Tensor::empty({0}, DType::i32)}, 0);
  CrossEntropyOptions smooth;
  smooth.label_smoothing = 0.2;
  check_parity([smooth](const Inputs& in) { return cross_entropy(in[0], in[1], smooth); },
               {randn({5, 33}, 6, DType::f64), targets_with_ignored(5, 33, -100, 7)}, kTol64, kTol64);
}

TEST_CASE("cuda nn: bad device indices and targets, and inputs on two devices, fail with a message") {
  auto on_device = [](const std::vector<int32_t>& values) { return Tensor::from_vector(values).to(Device::cuda()); };
  Tensor x = randn({2, 3}, 1).to(Device::cuda());
  CHECK_THROWS_HEADROOM(embedding(x, on_device({0, 2})), "index 2 at position 1 is out of range");
  CHECK_THROWS_HEADROOM(cross_entropy(x, on_device({1, 3})), "target 3 at position 1 is outside [0, 3)");
  CHECK_THROWS_HEADROOM(layer_norm(x, randn({3}, 2), Tensor()), "different devices");
  CHECK_THROWS_HEADROOM(embedding(randn({4, 3}, 3), on_device({1})), "different devices");
}
