// Shape ops (ops/shape.cpp, tensor.h): a gradcheck for each differentiable
// movement, and the gradient of to(dtype).
#include "helpers.h"

using namespace headroom;

namespace {
Tensor leaf(const Shape& shape, uint64_t seed) {
  Generator g(seed);
  return Tensor::randn(shape, g, DType::f64).set_requires_grad();
}
#define CHECK_GRAD(fn, ...)                \
  do {                                     \
    auto r = gradcheck(fn, {__VA_ARGS__}); \
    CHECK_MESSAGE(r.ok, r.message);        \
  } while (0)
}  // namespace

TEST_CASE("gradcheck: each view op") {
  Tensor x = leaf({2, 3, 4}, 1);
  CHECK_GRAD([](const std::vector<Tensor>& in) { return in[0].reshape({4, 6}); }, x);
  CHECK_GRAD([](const std::vector<Tensor>& in) { return in[0].view({6, 4}); }, x);
  CHECK_GRAD([](const std::vector<Tensor>& in) { return in[0].permute({2, 0, 1}); }, x);
  CHECK_GRAD([](const std::vector<Tensor>& in) { return in[0].transpose(0, 2); }, x);
  CHECK_GRAD([](const std::vector<Tensor>& in) { return in[0].t(); }, x);
  CHECK_GRAD([](const std::vector<Tensor>& in) { return in[0].slice(2, 1, 4, 2); }, x);
  CHECK_GRAD([](const std::vector<Tensor>& in) { return in[0].narrow(1, 1, 2); }, x);
  CHECK_GRAD([](const std::vector<Tensor>& in) { return in[0].select(1, -1); }, x);
  CHECK_GRAD([](const std::vector<Tensor>& in) { return in[0].unsqueeze(1).expand({2, 5, 3, 4}); }, x);
  CHECK_GRAD([](const std::vector<Tensor>& in) { return in[0].slice(0, 0, 1).squeeze(0); }, x);
  CHECK_GRAD([](const std::vector<Tensor>& in) { return in[0].flatten(1); }, x);
  CHECK_GRAD([](const std::vector<Tensor>& in) { return in[0].permute({1, 0, 2}).contiguous(); }, x);
  CHECK_GRAD([](const std::vector<Tensor>& in) { return in[0].clone(); }, x);
}

TEST_CASE("gradcheck: cat and stack, including non-contiguous parts") {
  Tensor a = leaf({2, 3}, 2), b = leaf({3, 2}, 3), c = leaf({2, 3}, 4);
  CHECK_GRAD([](const std::vector<Tensor>& in) { return cat({in[0], in[1].t(), in[2]}, 1); }, a, b, c);
  CHECK_GRAD([](const std::vector<Tensor>& in) { return cat({in[0], in[2]}, 0); }, a, b, c);
  CHECK_GRAD([](const std::vector<Tensor>& in) { return stack({in[0], in[1].t(), in[0]}, 1); }, a, b);
}

TEST_CASE("to(dtype) passes gradients back in the source dtype") {
  Tensor x = Tensor::from_vector<float>({1, 2, 3}).set_requires_grad();
  Tensor y = x.to(DType::f64);
  CHECK(y.dtype() == DType::f64);
  y.backward(Tensor::from_vector<double>({1, 10, 100}));
  CHECK(x.grad().dtype() == DType::f32);
  CHECK(x.grad().to_vector<float>() == std::vector<float>{1, 10, 100});
  CHECK_FALSE(x.to(DType::i32).requires_grad());  // casts to integers end the graph
}

TEST_CASE("sum_to_shape undoes broadcasting") {
  Tensor g = Tensor::ones({2, 3, 4});
  CHECK(sum_to_shape(g, {3, 1}).to_vector<float>() == std::vector<float>{8, 8, 8});
  CHECK(sum_to_shape(g, {}).item() == 24);
  CHECK(sum_to_shape(g, {2, 3, 4}).same_storage(g));
  CHECK_THROWS_HEADROOM(sum_to_shape(g, {5}), "cannot be broadcast");
}

TEST_CASE("shape arithmetic is checked: negative sizes and element counts past int64 are errors, not tiny storages") {
  const int64_t big = int64_t(1) << 40;
  CHECK(shape_numel({}) == 1);
  CHECK(shape_numel({0, 3}) == 0);
  CHECK(shape_numel({3, big}) == 3 * big);
  CHECK_THROWS_HEADROOM(shape_numel({big, big}), "has more elements than an int64 can count");
  // A 0 does not hide the overflow: the strides of the other sizes would still wrap.
  CHECK_THROWS_HEADROOM(contiguous_strides({0, big, big}), "has more elements than an int64 can count");
  CHECK_THROWS_HEADROOM(Tensor::empty({big, big}), "has more elements than an int64 can count");
  CHECK_THROWS_HEADROOM(Tensor::empty({2, -3}), "negative dimension in shape (2,-3)");
  CHECK_THROWS_HEADROOM(shape_numel({2, -3}), "sizes must be >= 0, got shape (2,-3)");
  CHECK(contiguous_strides({2, 0, 5}) == Strides{0, 5, 1});
}
