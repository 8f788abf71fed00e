// Shape and movement ops on CUDA tensors against the CPU (check_parity:
// outputs and gradients): views and their backward (reshape, permute, slice,
// select, expand, ...), copies (contiguous, clone, to dtype), cat and stack,
// sum_to_shape, and the autograd engine's gradient accumulation on the
// device.  Skipped (and passing) without a device.
#include "cuda_helpers.h"

using namespace headroom;
using headroom::testing::check_parity;
using headroom::testing::compare;

namespace {
using Inputs = std::vector<Tensor>;
}  // namespace

TEST_CASE("cuda shape: reshape, view, flatten, squeeze and unsqueeze") {
  Generator gen(41);
  check_parity(
      [](const Inputs& in) {
        return in[0].reshape({5, -1}).view({35, 3}).unsqueeze(1).flatten();
      },
      {Tensor::randn({3, 5, 7}, gen)}, 0);
  // reshape of a transposed tensor copies; squeeze drops the size-1 dimension.
  check_parity(
      [](const Inputs& in) {
        return in[0].t().reshape({7, 1, 3}).squeeze(1) * 2.0;
      },
      {Tensor::randn({3, 7}, gen)}, 1e-6);
}

TEST_CASE("cuda shape: permute, transpose and contiguous") {
  Generator gen(42);
  check_parity(
      [](const Inputs& in) {
        return in[0].permute({2, 0, 1}).transpose(0, 2).contiguous();
      },
      {Tensor::randn({4, 6, 5}, gen)}, 0);
  check_parity([](const Inputs& in) { return in[0].t().contiguous(); }, {Tensor::randn({33, 257}, gen)}, 0);
}

TEST_CASE("cuda shape: slice, narrow and select scatter their gradient back") {
  Generator gen(43);
  check_parity([](const Inputs& in) { return in[0].slice(1, 1, 8, 3).narrow(0, 1, 2); },
               {Tensor::randn({4, 9, 2}, gen)}, 0);
  check_parity([](const Inputs& in) { return in[0].select(-1, 3) + sum(in[0].select(0, -1)); },
               {Tensor::randn({5, 7}, gen)}, 1e-5, 1e-5);
  check_parity([](const Inputs& in) { return in[0].slice(0, 2, 2); }, {Tensor::randn({4, 3}, gen)}, 0);  // empty
}

TEST_CASE("cuda shape: expand sums its gradient back") {
  Generator gen(44);
  check_parity([](const Inputs& in) { return in[0].expand({2, 3, 4}); }, {Tensor::randn({3, 1}, gen)}, 1e-5, 1e-5);
  check_parity([](const Inputs& in) { return in[0].expand({257, 33}); }, {Tensor::randn({33}, gen)}, 1e-5, 1e-5);
  check_parity(
      [](const Inputs& in) {
        return in[0].expand({5, 1, 7});
      },
      {Tensor::randn({}, gen, DType::f64)}, 1e-12, 1e-12);
}

TEST_CASE("cuda shape: clone and dtype conversions carry gradients") {
  Generator gen(45);
  check_parity([](const Inputs& in) { return in[0].t().clone().to(DType::f64) * 3.0; }, {Tensor::randn({6, 5}, gen)},
               1e-6, 1e-6);
  check_parity([](const Inputs& in) { return in[0].to(DType::f32); }, {Tensor::randn({7}, gen, DType::f64)}, 0);
}

TEST_CASE("cuda shape: cat and stack, with an empty piece") {
  Generator gen(46);
  Inputs pieces = {Tensor::randn({2, 3, 5}, gen), Tensor::randn({2, 0, 5}, gen), Tensor::randn({2, 4, 5}, gen)};
  check_parity([](const Inputs& in) { return cat(in, 1); }, pieces, 0);
  check_parity(
      [](const Inputs& in) {
        return cat({in[0].permute({2, 1, 0}), in[2].permute({2, 1, 0})}, 1);
      },
      pieces, 0);
  check_parity(
      [](const Inputs& in) {
        return cat({in[0], in[0].slice(0, 0, 2)}, -2) * sum(in[0]);
      },
      {Tensor::randn({3, 4}, gen, DType::f64)}, 1e-12, 1e-12);
  check_parity([](const Inputs& in) { return stack(in, 1); }, {Tensor::randn({3, 7}, gen), Tensor::randn({3, 7}, gen)},
               0);
}

TEST_CASE("cuda shape: sum_to_shape on the device") {
  Generator gen(47);
  Tensor g = Tensor::randn({2, 3, 4}, gen);
  Tensor gd = g.to(Device::cuda());
  for (const Shape& shape : {Shape{3, 1}, Shape{}, Shape{1, 4}, Shape{2, 1, 1}, Shape{1, 3, 4}, Shape{4}}) {
    INFO(shape_str(shape));
    Tensor summed = sum_to_shape(gd, shape);
    CHECK(summed.device() == Device::cuda());
    CHECK(compare(summed.to(Device::cpu()), sum_to_shape(g, shape), 1e-5, 1e-5) == "");
  }
  CHECK(sum_to_shape(gd, {2, 3, 4}).same_storage(gd));
  CHECK_THROWS_HEADROOM(sum_to_shape(gd, {5}), "cannot be broadcast");
}

TEST_CASE("cuda shape: the engine accumulates gradients on the device") {
  Generator gen(48);
  // x reaches the output three times (one through a transpose): the node
  // gradients are summed by accumulate().
  check_parity([](const Inputs& in) { return in[0] * in[0] + in[0].t() * 0.5; }, {Tensor::randn({9, 9}, gen)}, 1e-5,
               1e-5);
  // Two backward passes add into the leaf's .grad in place.
  Tensor x = Tensor::randn({5, 3}, gen).to(Device::cuda()).set_requires_grad();
  sum(x * 2.0).backward();
  Tensor grad = x.grad();
  sum(x * 3.0).backward();
  CHECK(x.grad().is_same(grad));  // the same tensor, updated in place
  CHECK(x.grad().device() == Device::cuda());
  CHECK(compare(x.grad().to(Device::cpu()), Tensor::full({5, 3}, 5.0), 0) == "");
}
