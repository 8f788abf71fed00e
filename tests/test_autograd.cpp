// The autograd engine: topological order, accumulation, seeds, freeing the
// graph, version counters, NoGradGuard, and gradcheck itself.  Uses only shape
// ops so that it tests the engine, not arithmetic kernels.
#include "headroom/autograd/node.h"
#include "helpers.h"

using namespace headroom;

namespace {
Tensor param(const Shape& shape, uint64_t seed = 1) {
  Generator g(seed);
  return Tensor::randn(shape, g, DType::f64).set_requires_grad();
}
}  // namespace

TEST_CASE("gradient of a reused tensor accumulates: cat(x, x) and views of views") {
  Tensor x = param({3});
  Tensor y = cat({x, x, x.slice(0, 1, 3)}, 0);  // x used three times
  y.backward(Tensor::ones({8}, DType::f64));
  CHECK(x.grad().to_vector<double>() == std::vector<double>{2, 3, 3});
}

TEST_CASE("a very deep chain runs backward without recursion") {
  Tensor x = param({1});
  Tensor y = x;
  for (int i = 0; i < 100000; ++i) y = y.reshape({1});
  y.backward();
  CHECK(x.grad().item() == 1.0);
}

TEST_CASE("backward errors: no grad, integer outputs, freed graph, in-place change") {
  Tensor plain = Tensor::ones({2});
  CHECK_THROWS_HEADROOM(plain.backward(), "does not require grad");
  CHECK_THROWS_HEADROOM(Tensor::ones({2}, DType::i32).backward(), "never differentiable");
  CHECK_THROWS_HEADROOM(Tensor::ones({2}, DType::i32).set_requires_grad(), "cannot require grad");

  Tensor x = param({2});
  Tensor y = x.reshape({2, 1});
  CHECK_THROWS_HEADROOM(y.backward(), "a seed gradient is needed");
  y.backward(Tensor::ones({2, 1}, DType::f64));
  CHECK_THROWS_HEADROOM(y.backward(Tensor::ones({2, 1}, DType::f64)), "already freed");

  Tensor z = x.reshape({2, 1});
  z.backward(Tensor::ones({2, 1}, DType::f64), /*retain_graph=*/true);
  z.backward(Tensor::ones({2, 1}, DType::f64));
  CHECK(x.grad().to_vector<double>() == std::vector<double>{3, 3});

  CHECK_THROWS_HEADROOM(x.fill_(0), "in-place write to a tensor that requires grad");
  Tensor w = Tensor::ones({2}, DType::f64);  // saved by gradcheck-free op below
  autograd::Saved saved;
  saved.add(w);
  w.fill_(3);
  CHECK_THROWS_HEADROOM(saved.check_versions("mul"),
                        "[mul] a tensor saved for backward was modified in place (version 1, expected 0)");
}

TEST_CASE("NoGradGuard and detach stop recording") {
  Tensor x = param({2});
  {
    NoGradGuard guard;
    CHECK_FALSE(x.reshape({2, 1}).requires_grad());
  }
  CHECK(x.reshape({2, 1}).requires_grad());
  CHECK_FALSE(x.detach().requires_grad());
  CHECK(x.detach().same_storage(x));
}

TEST_CASE("gradcheck passes for shape ops and catches a wrong gradient") {
  Tensor x = param({2, 3, 4});
  auto movement = [](const std::vector<Tensor>& in) {
    Tensor a = in[0].permute({2, 0, 1}).slice(0, 1, 4, 2);  // non-contiguous view
    return cat({a.expand({3, 2, 2, 3}).reshape({6, 2, 3}), in[0].t().reshape({4, 2, 3})}, 0);
  };
  auto r = gradcheck(movement, {x});
  CHECK_MESSAGE(r.ok, r.message);

  // An op whose backward is deliberately wrong (gradient doubled) must fail.
  auto wrong = [](const std::vector<Tensor>& in) {
    Tensor out = in[0].clone().detach();
    autograd::record(out, "wrong", {in[0]}, {}, [](const autograd::Saved&, const Tensor& g, autograd::Grads& grads) {
      grads.add(0, cat({g, g}, 0).reshape({2, -1}).select(0, 0).reshape(g.shape()).clone());
      grads.add(0, g);  // accumulates a second copy: 2x the true gradient
    });
    return out;
  };
  auto bad = gradcheck(wrong, {param({3})});
  CHECK_FALSE(bad.ok);
  CHECK(bad.message.find("analytic") != std::string::npos);
}

TEST_CASE("two equal-valued leaves keep separate gradients") {
  Tensor a = Tensor::ones({2}, DType::f64).set_requires_grad();
  Tensor b = Tensor::ones({2}, DType::f64).set_requires_grad();
  cat({a, b, b}, 0).backward(Tensor::ones({6}, DType::f64));
  CHECK(a.grad().to_vector<double>() == std::vector<double>{1, 1});
  CHECK(b.grad().to_vector<double>() == std::vector<double>{2, 2});
}

// The engine keeps a fresh gradient without copying it and adds later ones in
// place, but only when nothing else can see that memory: a seed, a gradient
// handed to two inputs, or one a user holds must never change under them.
TEST_CASE("gradients are kept or summed in place only when nobody else holds them") {
  SUBCASE("a seed passed straight through stays the caller's") {
    Tensor x = param({4});
    Tensor seed = Tensor::ones({4}, DType::f64);
    x.reshape({2, 2}).reshape({4}).backward(seed, true);
    CHECK(x.grad().data<double>() != seed.data<double>());
    x.reshape({4}).backward(seed);  // a second pass adds into x.grad, not into seed
    CHECK(seed.to_vector<double>() == std::vector<double>{1, 1, 1, 1});
    CHECK(x.grad().to_vector<double>() == std::vector<double>{2, 2, 2, 2});
  }
  SUBCASE("one gradient handed to two leaves gives each its own tensor") {
    Tensor a = param({3}, 1), b = param({3}, 2);
    cat({a.reshape({3}), b.reshape({3})}, 0).backward(Tensor::ones({6}, DType::f64));
    CHECK(a.grad().data<double>() != b.grad().data<double>());
  }
  SUBCASE("a leaf's grad the user holds is accumulated into, as PyTorch does") {
    Tensor x = param({2});
    Tensor y = cat({x, x}, 0);
    y.backward(Tensor::ones({4}, DType::f64), true);
    Tensor first = x.grad();
    y.backward(Tensor::ones({4}, DType::f64));
    CHECK(first.to_vector<double>() == std::vector<double>{4, 4});
  }
  SUBCASE("three node gradients into one tensor sum correctly whichever is summed in place") {
    Tensor x = param({3});
    Tensor mid = x.reshape({3});  // a node with three consumers
    cat({mid, mid.slice(0, 0, 2), mid}, 0).backward(Tensor::arange(0, 8, 1, DType::f64));
    CHECK(x.grad().to_vector<double>() == std::vector<double>{0 + 3 + 5, 1 + 4 + 6, 2 + 7});
  }
}

TEST_CASE("slice gradients are added into their region only, in any order with whole gradients") {
  // x [4, 6] -> mid (a node) -> column slices, as MoA splits its fused projection.
  auto expected_from = [](const std::vector<std::pair<int64_t, int64_t>>& column_ranges, int64_t whole_uses) {
    std::vector<double> grad(24, double(whole_uses));
    for (auto [first, end] : column_ranges)
      for (int64_t r = 0; r < 4; ++r)
        for (int64_t c = first; c < end; ++c) grad[r * 6 + c] += 1;
    return grad;
  };
  SUBCASE("disjoint and overlapping column slices of a node") {
    Tensor x = param({4, 6});
    Tensor mid = x.reshape({4, 6});
    Tensor parts = cat(
        {mid.narrow(1, 0, 1).reshape({-1}), mid.narrow(1, 1, 3).reshape({-1}), mid.narrow(1, 2, 4).reshape({-1})}, 0);
    parts.backward(Tensor::ones(parts.shape(), DType::f64));
    CHECK(x.grad().to_vector<double>() == expected_from({{0, 1}, {1, 4}, {2, 6}}, 0));
  }
  SUBCASE("a slice before and after the whole tensor") {
    for (bool slice_first : {true, false}) {
      CAPTURE(slice_first);
      Tensor x = param({4, 6});
      Tensor mid = x.reshape({4, 6});
      Tensor piece = mid.slice(1, 1, 6, 2).reshape({-1}), whole = mid.reshape({-1});
      Tensor y = slice_first ? cat({piece, whole}, 0) : cat({whole, piece}, 0);
      y.backward(Tensor::ones(y.shape(), DType::f64));
      CHECK(x.grad().to_vector<double>() == expected_from({{1, 2}, {3, 4}, {5, 6}}, 1));
    }
  }
  SUBCASE("a gradient that is someone else's tensor is copied, not written into") {
    Tensor x = param({4, 6});
    Tensor mid = x.reshape({4, 6});
    Tensor seed = Tensor::ones({48}, DType::f64);
    // The engine reaches the whole use first (the later input of cat), whose
    // gradient is a view of the seed; the slice's must not be added into it.
    cat({mid.narrow(1, 0, 6).reshape({-1}), mid.reshape({-1})}, 0).backward(seed);
    CHECK(seed.to_vector<double>() == std::vector<double>(48, 1.0));
    CHECK(x.grad().to_vector<double>() == std::vector<double>(24, 2.0));
  }
  SUBCASE("slices of a leaf add into its .grad in place, as a held .grad sees") {
    Tensor x = param({4, 6});
    Tensor y = cat({x.narrow(1, 0, 2).reshape({-1}), x.narrow(1, 4, 2).reshape({-1})}, 0);
    y.backward(Tensor::ones({16}, DType::f64), true);
    Tensor held = x.grad();
    CHECK(held.to_vector<double>() == expected_from({{0, 2}, {4, 6}}, 0));
    y.backward(Tensor::ones({16}, DType::f64));
    CHECK(held.to_vector<double>() == expected_from({{0, 2}, {4, 6}, {0, 2}, {4, 6}}, 0));
  }
  SUBCASE("select in a loop, each row's gradient added into its row") {
    Tensor x = param({5, 3});
    std::vector<Tensor> rows;
    std::vector<double> seed;
    for (int64_t i = 4; i >= 0; --i) {
      rows.push_back(x.select(0, i));
      seed.insert(seed.end(), 3, double(i));
    }
    cat(rows, 0).backward(Tensor::from_vector(seed, {15}));
    std::vector<double> want;
    for (int64_t i = 0; i < 5; ++i) want.insert(want.end(), 3, double(i));
    CHECK(x.grad().to_vector<double>() == want);
  }
}
