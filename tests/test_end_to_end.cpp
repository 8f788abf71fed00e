// End to end: a small MLP learns a non-linear task (XOR-like quadrants) to a
// loss threshold in about a second; memory stays flat across training
// steps (the graph is freed after each backward); two runs with one seed are
// bitwise identical; a checkpoint round trip restores the same predictions.
#include <filesystem>

#include "helpers.h"

using namespace headroom;

namespace {

// Label = 1 when x0 * x1 > 0: not linearly separable.  x: [n, 2], y: i32 [n]
std::pair<Tensor, Tensor> quadrants(int64_t n, Generator& gen) {
  Tensor x = Tensor::rand({n, 2}, gen, -1, 1, DType::f32);
  std::vector<float> v = x.to_vector<float>();
  std::vector<int32_t> y(n);
  for (int64_t i = 0; i < n; ++i) y[i] = v[2 * i] * v[2 * i + 1] > 0;
  return {x, Tensor::from_vector(y)};
}

struct Net : Module {
  std::shared_ptr<MLP> mlp;
  explicit Net(Generator& gen) { mlp = register_module("mlp", std::make_shared<MLP>(2, 32, Activation::relu, 0, gen)); }
};

struct Run {
  std::vector<float> losses;
  std::vector<float> final_weights;
};

Run train(uint64_t seed, int steps) {
  Generator gen(seed);
  auto [x, y] = quadrants(256, gen);
  Net net(gen);  // MLP 2 -> 32 -> 2: its outputs are the logits of the 2 classes
  std::vector<Tensor> params = net.parameters();
  AdamW opt(params, 3e-2, 0.9, 0.999, 1e-8, 0);
  Run run;
  for (int step = 0; step < steps; ++step) {
    opt.zero_grad();
    Tensor loss = cross_entropy(net.mlp->forward(x), y);
    loss.backward();
    opt.step();
    run.losses.push_back(loss.item<float>());
  }
  for (const Tensor& p : params) {
    std::vector<float> v = p.to_vector<float>();
    run.final_weights.insert(run.final_weights.end(), v.begin(), v.end());
  }
  return run;
}

}  // namespace

TEST_CASE("an MLP learns a non-linear task; memory stays flat; runs are reproducible") {
  size_t before = cpu_backend().memory_stats().active_bytes;
  Run a = train(11, 300);
  MESSAGE("loss ", a.losses.front(), " -> ", a.losses.back());
  CHECK(a.losses.front() > 0.6);
  CHECK(a.losses.back() < 0.15);
  // The model, optimizer and graphs are gone with the run: nothing leaked.
  CHECK(cpu_backend().memory_stats().active_bytes == before);
  Run b = train(11, 300);
  CHECK(a.losses == b.losses);  // bitwise
  CHECK(a.final_weights == b.final_weights);
  Run c = train(12, 300);
  CHECK(a.losses != c.losses);
}

TEST_CASE("memory is flat across 100 training steps") {
  Generator gen(1);
  MLP mlp(16, 64, Activation::gelu, 0.1, gen);
  AdamW opt(mlp.parameters(), 1e-3);
  Tensor x = Tensor::randn({32, 16}, gen);
  size_t after_warmup = 0;
  for (int step = 0; step < 100; ++step) {
    opt.zero_grad();
    mean(mlp.forward(x) * mlp.forward(x)).backward();
    opt.step();
    if (step == 1) after_warmup = cpu_backend().memory_stats().active_bytes;
  }
  CHECK(cpu_backend().memory_stats().active_bytes == after_warmup);
}

TEST_CASE("checkpoint round trip restores identical predictions") {
  Generator gen(4);
  MLP a(3, 8, Activation::silu, 0, gen), b(3, 8, Activation::silu, 0, gen);
  Tensor x = Tensor::randn({4, 3}, gen);
  std::string path = (std::filesystem::temp_directory_path() / "headroom_e2e.safetensors").string();
  save_module(a, path, {{"note", "test"}});
  load_module(b, path);
  CHECK(a.forward(x).to_vector<float>() == b.forward(x).to_vector<float>());
  std::filesystem::remove(path);
}
