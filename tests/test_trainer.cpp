// The shared training loop (examples/common/trainer.h): exact resume, Ctrl-C,
// NaN stops, the JSONL log and checkpoint checks.
#include "headroom/examples/common/trainer.h"

#include <csignal>
#include <cmath>
#include <filesystem>

#include "headroom/examples/common/progress.h"
#include "headroom/headroom.h"
#include "helpers.h"
#include "transformer_helpers.h"

using namespace headroom;
using namespace headroom::examples;
using headroom::testing::TempDir;

namespace {

// A tiny decoder LM learning to continue a counting sequence; dropout on, so
// the model generator's state matters for exact resume.
class CountingTask : public TrainTask {
 public:
  explicit CountingTask(const std::string& attention, uint64_t seed = 5) : gen_(seed), seed_(seed) {
    config_ = testing::tiny_model_config(8);
    config_.decoder_layers = 1;
    config_.dropout = 0.1;
    config_.attention.type = attention;
    model_ = std::make_shared<DecoderLM>(config_, gen_);
  }
  Module& model() override { return *model_; }
  const ModelConfig& config() const override { return config_; }
  Generator& model_generator() override { return gen_; }
  StepOutput step(int64_t step) override {
    if (step == interrupt_at) std::raise(SIGINT);
    Tensor tokens = batch(step);
    ModelOutput out = model_->forward(tokens.narrow(1, 0, 6));
    Tensor loss = cross_entropy(out.out.reshape({-1, 8}), tokens.narrow(1, 1, 6).reshape({-1}));
    double value = step == nan_at ? NAN : loss.item();
    return {training_loss(loss, out.aux_losses, 12), value, 12};
  }
  Metrics evaluate() override {
    Tensor tokens = batch(1000);
    Tensor logits = model_->forward(tokens.narrow(1, 0, 6)).out;
    return {{"loss", cross_entropy(logits.reshape({-1, 8}), tokens.narrow(1, 1, 6).reshape({-1})).item()}};
  }
  std::string unit() const override { return "tok"; }
  int64_t interrupt_at = -1, nan_at = -1;

 private:
  Tensor batch(int64_t step) const { return testing::counting_rows(seed_, step); }
  Generator gen_;
  uint64_t seed_;
  ModelConfig config_;
  std::shared_ptr<DecoderLM> model_;
};

TrainOptions small_run(const std::string& ckpt_dir) {
  TrainOptions o;
  o.steps = 12, o.warmup = 3, o.lr = 1e-2, o.eval_every = 5, o.ckpt_every = 4, o.ckpt_dir = ckpt_dir;
  o.bcd_f = 2, o.bcd_g = 2, o.quiet = true;
  return o;
}

void check_resume_is_exact(const std::string& attention) {
  TempDir whole_dir("trainer_whole"), split_dir("trainer_split");
  CountingTask whole(attention);
  TrainResult uninterrupted = train(whole, small_run(whole_dir.file("run")));

  CountingTask first(attention);
  first.interrupt_at = 7;  // Ctrl-C during step 7: it finishes, then the loop saves and stops
  TrainResult part1 = train(first, small_run(split_dir.file("run")));
  CHECK(part1.interrupted);
  CHECK(part1.last_step == 8);
  CountingTask second(attention);
  TrainOptions resume = small_run(split_dir.file("run"));
  resume.resume = true;
  TrainResult part2 = train(second, resume);
  CHECK(part2.first_step == 8);

  std::vector<double> joined = part1.train_loss;
  joined.insert(joined.end(), part2.train_loss.begin(), part2.train_loss.end());
  REQUIRE(joined.size() == uninterrupted.train_loss.size());
  for (size_t i = 0; i < joined.size(); ++i) CHECK(joined[i] == uninterrupted.train_loss[i]);
  CHECK(part2.eval[0].second == uninterrupted.eval[0].second);
  // The resumed log reads as one run: every step once, in order.
  auto rows = read_jsonl_numbers(split_dir.file("run/log.jsonl"), "train");
  REQUIRE(rows.size() == 12);
  for (size_t i = 0; i < rows.size(); ++i) CHECK(rows[i][0].second == double(i + 1));
}

}  // namespace

TEST_CASE("train: an interrupted and resumed run repeats the uninterrupted loss curve exactly (MHA, dropout)") {
  check_resume_is_exact("mha");
}

TEST_CASE("train: exact resume under MAE's block coordinate descent (two optimizers, sampled experts)") {
  check_resume_is_exact("mae");
}

TEST_CASE("train: the model learns and the last evaluation is reported") {
  CountingTask task("mha");
  TrainOptions o = small_run("");
  o.steps = 150;
  TrainResult result = train(task, o);
  CHECK(result.eval[0].first == "loss");
  CHECK(result.eval[0].second < 0.25 * std::log(8.0));  // from about ln 8 (uniform) at the start
  CHECK(result.items_per_second > 0);
  CHECK(result.peak_bytes > 0);
}

TEST_CASE("train: a NaN loss stops with the step named and keeps the last good checkpoint") {
  TempDir dir("trainer_nan");
  CountingTask task("mha");
  task.nan_at = 5;
  CHECK_THROWS_HEADROOM(train(task, small_run(dir.file("run"))), "the loss is nan at step 5; training stopped");
  SafetensorsFile saved = load_safetensors(checkpoint_path(dir.file("run")));
  CHECK(saved.metadata.at("train.step") == "4");
  CountingTask fresh("mha");
  TrainOptions eval = small_run(dir.file("run"));
  eval.eval_only = true;
  TrainResult result = train(fresh, eval);
  CHECK(result.first_step == 4);
  CHECK(std::isfinite(result.eval[0].second));
}

TEST_CASE("train: refuses another model config, a missing checkpoint, a long warm-up") {
  TempDir dir("trainer_config");
  CountingTask task("mha");
  train(task, small_run(dir.file("run")));
  CountingTask other("mae");
  TrainOptions resume = small_run(dir.file("run"));
  resume.resume = true;
  CHECK_THROWS_HEADROOM(train(other, resume), "was made with another model config");
  TempDir empty("trainer_empty");
  TrainOptions missing = small_run(empty.file("run"));
  missing.resume = true;
  CHECK_THROWS_HEADROOM(train(task, missing), "checkpoint.safetensors");
  TrainOptions no_dir = small_run("");
  no_dir.resume = true;
  CHECK_THROWS_HEADROOM(train(task, no_dir), "--resume and --eval-only need --ckpt DIR");
  TrainOptions long_warmup = small_run("");
  long_warmup.warmup = 12;
  CHECK_THROWS_HEADROOM(train(task, long_warmup), "--warmup 12 must be below --steps 12");
}

TEST_CASE("train: --device cuda without a device fails with the CUDA build and device count; bad names fail") {
  CountingTask task("mha");
  TrainOptions bad = small_run("");
  bad.device = "gpu";
  CHECK_THROWS_HEADROOM(train(task, bad), "expected cpu, cuda or cuda:N");
  TrainOptions missing = small_run("");
  missing.device = "cuda:" + std::to_string(device_count(Device::Kind::cuda));  // one past the last device
  const std::string versions = device_summary(Device::Kind::cuda);
  CHECK_THROWS_HEADROOM(train(task, missing), versions.c_str());
  if (device_count(Device::Kind::cuda) > 0) return;  // the rest is for machines without a device
  TrainOptions cuda = small_run("");
  cuda.device = "cuda";
  const std::string refusal = "[train] --device cuda is not available: " + versions;
  CHECK_THROWS_HEADROOM(train(task, cuda), refusal.c_str());
  CHECK(task.model().device() == Device::cpu());  // refused before anything moved
}

TEST_CASE("json_object writes numbers, integers, strings and non-finite values") {
  CHECK(json_object({{"type", std::string("eval")}, {"step", int64_t(3)}, {"loss", 0.5}, {"bad", double(NAN)}}) ==
        R"({"type":"eval","step":3,"loss":0.5,"bad":"nan"})");
}
