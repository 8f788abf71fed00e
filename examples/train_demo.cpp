// The default demo: a small MLP learns the two-spirals problem (a classic
// non-linear classification task) with AdamW, warm-up + cosine decay,
// gradient clipping, atomic checkpoints and exact resume.
//
//   train_demo [--steps N] [--hidden N] [--lr X] [--seed N] [--threads N]
//              [--device cpu|cuda|cuda:N] [--tf32] [--ckpt PATH] [--resume PATH] [--check-loss X]
#include <headroom/headroom.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <optional>
#include <string>

#include "headroom/examples/common/cli.h"
#include "headroom/examples/common/trainer.h"

using namespace headroom;

namespace {

struct Config {
  int64_t steps = 600, hidden = 64, points = 512, log_every = 50;
  double lr = 1e-2, weight_decay = 1e-4, check_loss = INFINITY;
  uint64_t seed = 1337;
  int threads = 0;
  std::string device = "cpu", ckpt, resume;
  bool tf32 = false;
};

void add_flags(examples::Flags& flags, Config& c) {
  flags.add("steps", &c.steps, "training steps", {1, 1'000'000'000});
  flags.add("hidden", &c.hidden, "hidden width of the 3-layer MLP", {1, 16384});
  flags.add("lr", &c.lr, "peak AdamW learning rate, warm-up then cosine decay",
            {0, 1e6, examples::End::open, examples::End::closed});
  flags.add("seed", &c.seed, "seeds data, init and everything else", {0, UINT64_MAX});
  flags.add("threads", &c.threads, "CPU threads (0: HEADROOM_NUM_THREADS or all cores)", {0, kMaxThreads});
  flags.add("device", &c.device, "cpu, cuda or cuda:N");
  flags.add("tf32", &c.tf32, "CUDA: TF32 tensor-core matmuls");
  flags.add("ckpt", &c.ckpt, "write a checkpoint (model, optimizer, step) every 100 steps and at the end");
  flags.add("resume", &c.resume, "continue from a checkpoint written by --ckpt");
  flags.add("check-loss", &c.check_loss, "exit 1 if the final loss is above X (used by CI)", {0, INFINITY});
}

// Two interleaved spirals, labels 0 and 1, with a little noise.
// x: [2n, 2] f32, y: [2n] i32
std::pair<Tensor, Tensor> two_spirals(int64_t n, Generator& gen) {
  std::vector<float> x;
  std::vector<int32_t> y;
  for (int64_t i = 0; i < n; ++i) {
    double r = 0.2 + 2.8 * double(i) / double(n);
    double angle = 1.75 * M_PI * double(i) / double(n);
    for (int cls = 0; cls < 2; ++cls) {
      double sign = cls == 0 ? 1 : -1;
      x.push_back(float(sign * r * std::cos(angle) + 0.05 * gen.next_normal()));
      x.push_back(float(sign * r * std::sin(angle) + 0.05 * gen.next_normal()));
      y.push_back(cls);
    }
  }
  return {Tensor::from_vector(x, {2 * n, 2}), Tensor::from_vector(y)};
}

struct SpiralNet : Module {
  std::shared_ptr<Linear> in, hidden, out;
  SpiralNet(int64_t width, Generator& gen) {
    in = register_module("in", std::make_shared<Linear>(2, width, true, gen));
    hidden = register_module("hidden", std::make_shared<Linear>(width, width, true, gen));
    out = register_module("out", std::make_shared<Linear>(width, 2, true, gen));
  }
  Tensor forward(const Tensor& x) const { return out->forward(tanh(hidden->forward(tanh(in->forward(x))))); }
};

// One file holds model parameters (their module paths), optimizer state
// ("optim." prefix) and the step in the metadata.
void save_checkpoint(const std::string& path, const SpiralNet& model, const Optimizer& opt, int64_t step,
                     const Config& c) {
  NamedTensors entries = model.state_dict();
  for (auto& entry : opt.state()) entries.push_back(entry);
  save_safetensors(path, entries,
                   {{"step", std::to_string(step)},
                    {"seed", std::to_string(c.seed)},
                    {"hidden", std::to_string(c.hidden)},
                    {"format", "headroom train_demo v1"}});
}

int64_t load_checkpoint(const std::string& path, SpiralNet& model, Optimizer& opt) {
  SafetensorsFile file = load_safetensors(path);
  NamedTensors model_entries, optim_entries;
  for (auto& entry : file.tensors)
    (entry.first.rfind("optim.", 0) == 0 ? optim_entries : model_entries).push_back(entry);
  model.load_state_dict(model_entries);
  opt.load_state(optim_entries);
  auto step = file.metadata.find("step");
  HEADROOM_CHECK(step != file.metadata.end(), "[train_demo] checkpoint ", path, " has no step");
  std::optional<int64_t> value = examples::parse_int64(step->second);
  HEADROOM_CHECK(value && *value >= 0, "[train_demo] checkpoint ", path, " has step '", step->second,
                 "', expected a non-negative integer");
  return *value;
}

double accuracy(const Tensor& logits, const Tensor& labels) {
  return mean(eq(argmax(logits, -1), labels).to(DType::f32)).item();
}

int run(const Config& c) {
  if (c.threads > 0) set_num_threads(c.threads);
  const Device device = examples::training_device(c.device);
  set_allow_tf32(c.tf32);
  Generator gen(c.seed);
  auto [x_host, y_host] = two_spirals(c.points, gen);
  const Tensor x = x_host.to(device), y = y_host.to(device);
  SpiralNet model(c.hidden, gen);
  model.to(device);  // before the optimizer, whose state is made beside the parameters
  AdamW opt(model.parameters(), c.lr, 0.9, 0.999, 1e-8, c.weight_decay);
  WarmupCosine schedule{c.steps / 10, c.steps, 0.05};
  int64_t step = c.resume.empty() ? 0 : load_checkpoint(c.resume, model, opt);

  std::printf(
      "| parameter | value |\n|---|---|\n| model | MLP 2-%lld-%lld-2 (tanh) |\n"
      "| params | %lld |\n| data | two spirals, %lld points |\n| optimizer | AdamW lr %g, "
      "wd %g, warm-up + cosine |\n| steps | %lld (starting at %lld) |\n| seed | %llu |\n"
      "| threads | %d |\n| device | %s |\n\n",
      (long long)c.hidden, (long long)c.hidden, (long long)model.num_parameters(), (long long)x.size(0), c.lr,
      c.weight_decay, (long long)c.steps, (long long)step, (unsigned long long)c.seed, num_threads(),
      device.is_cpu() ? "cpu" : (device.str() + " (" + device_summary(device.kind) + ")").c_str());
  double loss_value = NAN;
  auto start = std::chrono::steady_clock::now();
  for (; step < c.steps; ++step) {
    opt.zero_grad();
    Tensor loss = cross_entropy(model.forward(x), y);
    loss_value = loss.item();
    HEADROOM_CHECK(std::isfinite(loss_value), "[train_demo] loss became ", loss_value, " at step ", step,
                   "; stopping without saving (the last checkpoint is kept)");
    loss.backward();
    clip_grad_norm(opt.params(), 1.0);
    opt.set_lr(c.lr * schedule.factor(step + 1));  // step 1 trains at lr / warmup, as the binaries do
    opt.step();
    if ((step + 1) % c.log_every == 0 || step + 1 == c.steps) {
      double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
      std::printf("step %5lld/%lld | loss %.4f | lr %.2e | %.2f ms/step\n", (long long)step + 1, (long long)c.steps,
                  loss_value, opt.lr(), ms / double(c.log_every));
      start = std::chrono::steady_clock::now();
    }
    if (!c.ckpt.empty() && (step + 1) % 100 == 0) save_checkpoint(c.ckpt, model, opt, step + 1, c);
  }
  NoGradGuard no_grad;
  Tensor logits = model.forward(x);
  loss_value = cross_entropy(logits, y).item();
  std::printf("final: loss %.4f, accuracy %.1f%%\n", loss_value, 100 * accuracy(logits, y));
  if (!c.ckpt.empty()) {
    save_checkpoint(c.ckpt, model, opt, c.steps, c);
    std::printf("checkpoint: %s\n", c.ckpt.c_str());
  }
  if (!(loss_value <= c.check_loss)) {
    std::fprintf(stderr, "error: final loss %.4f is above --check-loss %.4f\n", loss_value, c.check_loss);
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Config c;
  examples::Flags flags("train_demo", "an MLP learns the two-spirals problem");
  add_flags(flags, c);
  return examples::run_main(flags, [&] { return flags.parse(argc, argv) ? run(c) : 0; });
}
