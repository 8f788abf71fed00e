// Optimizers (hand-checked steps and a frozen PyTorch AdamW run), state
// checkpoints, gradient clipping and learning-rate schedules.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <limits>

#include "headroom/core/safetensors.h"
#include "headroom/models/optim.h"
#include "helpers.h"

using namespace headroom;

namespace {

Tensor leaf(const std::vector<double>& values, DType dtype = DType::f64) {
  return Tensor::from_vector<double>(values).to(dtype).set_requires_grad();
}

// Sets the same gradient and steps, `steps` times.
void run(Optimizer& opt, const Tensor& p, const std::vector<double>& grad, int steps) {
  for (int i = 0; i < steps; ++i) {
    p.set_grad(Tensor::from_vector<double>(grad).to(p.dtype()));
    opt.step();
  }
}

}  // namespace

TEST_CASE("SGD: plain, weight decay, momentum and nesterov steps by hand") {
  Tensor p = leaf({1, 2});
  SGD momentum({p}, 0.1, 0.9);
  run(momentum, p, {0.5, -1}, 1);  // buf = g
  CHECK_CLOSE(p, Tensor::from_vector<double>({0.95, 2.1}), 1e-15);
  run(momentum, p, {0.5, -1}, 1);  // buf = 0.9 g + g
  CHECK_CLOSE(p, Tensor::from_vector<double>({0.855, 2.29}), 1e-15);
  CHECK(momentum.steps() == 2);

  Tensor q = leaf({1});
  SGD nesterov({q}, 0.1, 0.9, 0, true);
  run(nesterov, q, {0.5}, 2);  // d = g + 0.9 buf: 0.95, then 0.5 + 0.9 * 0.95
  CHECK_CLOSE(q, Tensor::from_vector<double>({1 - 0.095 - 0.1355}), 1e-15);

  Tensor r = leaf({2}, DType::f32);
  SGD decay({r}, 0.1, 0, 0.5);
  run(decay, r, {1}, 1);  // d = 1 + 0.5 * 2
  CHECK_CLOSE(r, Tensor::from_vector<float>({1.8f}), 1e-6);
  CHECK(decay.state().size() == 1);  // no momentum buffer without momentum
}

TEST_CASE("AdamW and Adam: bias-corrected steps by hand") {
  // With a constant gradient the bias-corrected moments are exactly g and g^2,
  // so every step moves by lr * g / (|g| + eps).
  const double lr = 0.1, wd = 0.1, eps = 1e-8, move = lr * 0.5 / (0.5 + eps);
  Tensor p = leaf({1});
  AdamW adamw({p}, lr, 0.9, 0.999, eps, wd);
  run(adamw, p, {0.5}, 1);
  const double after1 = 1 * (1 - lr * wd) - move;  // decay first, then the Adam step
  CHECK_CLOSE(p, Tensor::from_vector<double>({after1}), 1e-14);
  run(adamw, p, {0.5}, 1);
  CHECK_CLOSE(p, Tensor::from_vector<double>({after1 * (1 - lr * wd) - move}), 1e-14);

  Tensor q = leaf({1});
  Adam adam({q}, lr, 0.9, 0.999, eps, wd);
  run(adam, q, {0.5}, 1);  // L2: g' = 0.5 + 0.1 * 1
  CHECK_CLOSE(q, Tensor::from_vector<double>({1 - lr * 0.6 / (0.6 + eps)}), 1e-14);
}

TEST_CASE("AdamW matches PyTorch over three steps (frozen fixture)") {
  SafetensorsFile f = load_safetensors(HEADROOM_FIXTURES_DIR "/adamw.safetensors");
  CHECK(f.metadata.at("generator") == "gen_adamw.py");
  for (DType dtype : {DType::f64, DType::f32}) {
    CAPTURE(dtype);
    Tensor p = f.get("param0").to(dtype).set_requires_grad();
    AdamW opt({p}, 1e-2, 0.9, 0.999, 1e-8, 0.1);
    for (int step = 1; step <= 3; ++step) {
      CAPTURE(step);
      p.set_grad(f.get("grad" + std::to_string(step)).to(dtype));
      opt.step();
      CHECK_CLOSE(p, f.get("param" + std::to_string(step)), dtype == DType::f64 ? 1e-12 : 1e-6);
    }
  }
}

TEST_CASE("optimizers skip parameters without a gradient and bump versions of the others") {
  Tensor a = leaf({1, 1}), b = leaf({3});
  AdamW opt({a, b}, 0.1);
  const uint64_t version_b = b.version();
  a.set_grad(Tensor::ones({2}, DType::f64));
  opt.step();
  CHECK(b.to_vector<double>() == std::vector<double>{3});
  CHECK(b.version() == version_b);
  CHECK(a.version() > 0);
  CHECK(a.to_vector<double>()[0] < 1);
  std::vector<std::string> names;
  for (const auto& entry : opt.state()) names.push_back(entry.first);
  CHECK(names == std::vector<std::string>{"optim.steps", "optim.exp_avg.0", "optim.exp_avg_sq.0", "optim.step.0"});
  opt.zero_grad();
  CHECK_FALSE(a.grad().defined());
}

TEST_CASE("optimizer state round trips through a checkpoint and resumes identically") {
  Generator gen(4);
  Tensor w = Tensor::randn({2, 3}, gen).set_requires_grad(), v = Tensor::randn({3}, gen).set_requires_grad();
  Tensor gw = Tensor::randn({2, 3}, gen), gv = Tensor::randn({3}, gen);
  AdamW opt({w, v}, 1e-2);
  w.set_grad(gw);
  opt.step();  // v has no gradient at the first step: its own step count stays behind
  v.set_grad(gv);
  opt.step();

  std::string path = "/tmp/headroom_optim_" + std::to_string(getpid()) + ".safetensors";
  NamedTensors checkpoint = opt.state();
  checkpoint.emplace_back("model.w", w);  // optimizer names do not collide with the model's
  save_safetensors(path, checkpoint);
  SafetensorsFile file = load_safetensors(path);
  std::remove(path.c_str());
  CHECK(file.get("optim.step.1").item() == 1);

  Tensor w2 = w.detach().clone().set_requires_grad(), v2 = v.detach().clone().set_requires_grad();
  AdamW resumed({w2, v2}, 1e-2);
  resumed.load_state(file.tensors);
  CHECK(resumed.steps() == 2);
  w2.set_grad(gw);
  v2.set_grad(gv);
  opt.step();
  resumed.step();
  CHECK_CLOSE(w2, w, 0);
  CHECK_CLOSE(v2, v, 0);

  NamedTensors bad = opt.state();
  bad.emplace_back("optim.foo.0", Tensor::zeros({3}));
  CHECK_THROWS_HEADROOM(resumed.load_state(bad), "unknown state entry 'optim.foo.0'");
  CHECK_THROWS_HEADROOM(
      resumed.load_state({{"optim.steps", Tensor::scalar(1, DType::f64)}, {"optim.exp_avg.7", Tensor::zeros({3})}}),
      "state entry 'optim.exp_avg.7' names no parameter (there are 2)");
  CHECK_THROWS_HEADROOM(resumed.load_state({{"optim.steps", Tensor::scalar(1, DType::f64)},
                                            {"optim.exp_avg.1", Tensor::zeros({4}, DType::f64)}}),
                        "state entry 'optim.exp_avg.1' has shape (4) and dtype f64, expected (3) and f32");
  CHECK_THROWS_HEADROOM(resumed.load_state({}), "has no 'optim.steps' entry");
}

TEST_CASE("optimizer argument errors") {
  Tensor p = leaf({1, 2});
  CHECK_THROWS_HEADROOM(SGD({}, 0.1), "[SGD] got an empty parameter list");
  CHECK_THROWS_HEADROOM(SGD({p}, -1), "[SGD] invalid learning rate: -1");
  CHECK_THROWS_HEADROOM(SGD({p}, 0.1, 0, 0, true), "nesterov momentum requires momentum > 0");
  CHECK_THROWS_HEADROOM(AdamW({p}, 0.1, 1.0), "[AdamW] invalid beta1: 1");
  CHECK_THROWS_HEADROOM(Adam({p}, 0.1, 0.9, 0.999, -1), "[Adam] invalid eps: -1");
  CHECK_THROWS_HEADROOM(SGD({Tensor::zeros({2}, DType::i32)}, 0.1), "expected parameter of dtype f32 or f64");
  Tensor matrix = Tensor::zeros({2, 2}).set_requires_grad();
  CHECK_THROWS_HEADROOM(SGD({matrix.t()}, 0.1), "must be a contiguous leaf tensor");
  SGD opt({p}, 0.1);
  CHECK_THROWS_HEADROOM(opt.set_lr(std::nan("")), "invalid learning rate");
  p.set_grad(Tensor::ones({2}, DType::f32));
  CHECK_THROWS_HEADROOM(opt.step(), "gradient of parameter 0 has shape (2) and dtype f32, expected (2) and f64");
}

TEST_CASE("clip_grad_norm scales all gradients by one factor and returns the norm") {
  Tensor a = leaf({0, 0}), b = leaf({0}), c = leaf({0, 0, 0, 0}), none = leaf({1});
  a.set_grad(Tensor::from_vector<double>({3, 4}));
  b.set_grad(Tensor::from_vector<double>({12}));
  c.set_grad(Tensor::zeros({2, 2}, DType::f64).t().reshape({4}));
  CHECK(clip_grad_norm({a, b, c, none}, 20) == doctest::Approx(13).epsilon(1e-15));
  CHECK(b.grad().to_vector<double>() == std::vector<double>{12});  // under the limit: untouched

  const double factor = 6.5 / (13 + 1e-6);
  CHECK(clip_grad_norm({a, b, c, none}, 6.5) == doctest::Approx(13).epsilon(1e-15));
  CHECK_CLOSE(a.grad(), Tensor::from_vector<double>({3 * factor, 4 * factor}), 1e-15);
  CHECK_CLOSE(b.grad(), Tensor::from_vector<double>({12 * factor}), 1e-15);

  Tensor m = Tensor::zeros({2, 2}).set_requires_grad();  // a strided (transposed) f32 gradient
  m.set_grad(Tensor::from_vector<float>({3, 0, 4, 0}, {2, 2}).t());
  CHECK(clip_grad_norm({m}, 1) == doctest::Approx(5));
  CHECK_CLOSE(m.grad().t(), Tensor::from_vector<float>({0.6f, 0, 0.8f, 0}, {2, 2}), 1e-6);

  b.set_grad(Tensor::from_vector<double>({std::numeric_limits<double>::quiet_NaN()}));
  CHECK(std::isnan(clip_grad_norm({a, b}, 1)));
  CHECK_CLOSE(a.grad(), Tensor::from_vector<double>({3 * factor, 4 * factor}), 1e-15);  // left for the caller
  b.set_grad(Tensor::from_vector<double>({INFINITY}));
  CHECK(std::isinf(clip_grad_norm({a, b}, 1)));
  CHECK_THROWS_HEADROOM(clip_grad_norm({a}, 0), "max_norm must be positive, got 0");
}

TEST_CASE("schedules: warm-up then cosine, and inverse square root") {
  WarmupCosine cosine{10, 110, 0.1};
  CHECK(cosine.factor(0) == 0);
  CHECK(cosine.factor(5) == doctest::Approx(0.5));
  CHECK(cosine.factor(10) == doctest::Approx(1));
  CHECK(cosine.factor(60) == doctest::Approx(0.1 + 0.9 * 0.5));  // half way down the cosine
  CHECK(cosine.factor(110) == doctest::Approx(0.1));
  CHECK(cosine.factor(500) == doctest::Approx(0.1));
  for (int64_t s = 10; s < 110; ++s) CHECK(cosine.factor(s + 1) <= cosine.factor(s));
  CHECK(WarmupCosine{0, 10}.factor(0) == 1);
  CHECK(WarmupCosine{0, 10}.factor(10) == doctest::Approx(0));
  CHECK_THROWS_HEADROOM(WarmupCosine({10, 10}).factor(3), "needs 0 <= warmup < total");

  InverseSqrt inverse{4};
  CHECK(inverse.factor(0) == 0);
  CHECK(inverse.factor(2) == doctest::Approx(0.5));
  CHECK(inverse.factor(4) == doctest::Approx(1));
  CHECK(inverse.factor(16) == doctest::Approx(0.5));
  CHECK(inverse.factor(64) == doctest::Approx(0.25));
  CHECK_THROWS_HEADROOM(InverseSqrt{0}.factor(1), "needs warmup >= 1");

  Tensor p = leaf({1});
  SGD opt({p}, 0.5);
  opt.set_lr(0.5 * cosine.factor(5));
  CHECK(opt.lr() == doctest::Approx(0.25));
}
