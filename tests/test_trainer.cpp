// The shared training loop (examples/common/trainer.h): exact resume, Ctrl-C,
// NaN stops, the JSONL log and checkpoint checks.
#include "headroom/examples/common/trainer.h"

#include <csignal>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include "headroom/examples/common/model_options.h"
#include "headroom/examples/common/progress.h"
#include "headroom/examples/common/run_summary.h"
#include "headroom/headroom.h"
#include "helpers.h"
#include "transformer_helpers.h"

using namespace headroom;
using namespace headroom::examples;
using headroom::testing::parse_command_line;
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
  int64_t batch_rows(int64_t) const override { return 2; }
  StepOutput step(int64_t step, BatchSlice rows) override {
    if (step == interrupt_at) std::raise(SIGINT);
    Tensor tokens = batch(step).narrow(0, rows.begin, rows.size()).contiguous();
    ModelOutput out = model_->forward(tokens.narrow(1, 0, 6));
    Tensor loss = cross_entropy(out.out.reshape({-1, 8}), tokens.narrow(1, 1, 6).reshape({-1}));
    double value = step == nan_at ? NAN : loss.item();
    const int64_t targets = rows.size() * 6;
    Tensor differentiated = training_loss(loss, out.aux_losses, targets);
    return {step == huge_gradient_at ? differentiated * 1e30 : differentiated, value, targets};
  }
  Metrics evaluate() override {
    Tensor tokens = batch(1000);
    Tensor logits = model_->forward(tokens.narrow(1, 0, 6)).out;
    double loss = cross_entropy(logits.reshape({-1, 8}), tokens.narrow(1, 1, 6).reshape({-1})).item();
    return {{"loss", nan_eval ? NAN : loss}};
  }
  std::string unit() const override { return "tok"; }
  int64_t interrupt_at = -1, nan_at = -1;
  int64_t huge_gradient_at = -1;  // gradients of 1e30: Adam's second moment overflows, the weights stay finite
  bool nan_eval = false;

 private:
  Tensor batch(int64_t step) const { return testing::counting_rows(seed_, step); }
  Generator gen_;
  uint64_t seed_;
  ModelConfig config_;
  std::shared_ptr<DecoderLM> model_;
};

// On the counting task without clipping, the loss grows to 5e16 by step 3 and evaluates to NaN at step 4.
constexpr double kDivergingLr = 1e4;

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

// The --eval-only metrics of the checkpoint file at `path`, copied into a run directory of its own.
Metrics evaluate_checkpoint(const std::string& path, const TempDir& scratch) {
  const std::string dir = scratch.file("eval" + std::to_string(scratch.count()));
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(path, checkpoint_path(dir));
  CountingTask task("mha");
  TrainOptions o = small_run(dir);
  o.eval_only = true;
  return train(task, o).eval;
}

// Rewrites the checkpoint of `dir` with `edit` applied to its metadata.
void edit_metadata(const std::string& dir, const std::function<void(StringMap&)>& edit) {
  SafetensorsFile file = load_safetensors(checkpoint_path(dir));
  edit(file.metadata);
  save_safetensors(checkpoint_path(dir), file.tensors, file.metadata);
}

// A completed small_run in `dir`, then a resume of it with the checkpoint's metadata edited.
void resume_edited(const std::string& dir, const std::function<void(StringMap&)>& edit, const char* refusal) {
  CountingTask task("mha");
  TrainOptions o = small_run(dir);
  o.steps = 4;
  train(task, o);
  edit_metadata(dir, edit);
  CountingTask again("mha");
  o.resume = true, o.steps = 8;
  CHECK_THROWS_HEADROOM(train(again, o), refusal);
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

TEST_CASE("train: the first step trains at lr / warmup, the warm-up's last at lr, the last step at the final rate") {
  TempDir dir("trainer_lr");
  CountingTask task("mha");
  const TrainOptions o = small_run(dir.file("run"));  // 12 steps, 3 of warm-up
  train(task, o);
  std::vector<double> lr;
  for (const auto& row : read_jsonl_numbers(dir.file("run/log.jsonl"), "train"))
    for (const auto& [key, value] : row)
      if (key == "lr") lr.push_back(value);
  REQUIRE(lr.size() == 12);
  CHECK(lr[0] == doctest::Approx(o.lr / 3));
  CHECK(lr[1] == doctest::Approx(o.lr * 2 / 3));
  CHECK(lr[2] == doctest::Approx(o.lr));
  for (size_t i = 3; i < lr.size(); ++i) CHECK(lr[i] < lr[i - 1]);
  CHECK(lr.back() == doctest::Approx(o.lr * o.min_lr_ratio));
}

TEST_CASE("train: the first step moves the weights (warm-up does not start at a rate of 0)") {
  CountingTask untrained("mha"), task("mha");
  task.interrupt_at = 0;  // Ctrl-C during the first step: it finishes, then the run stops
  REQUIRE(train(task, small_run("")).last_step == 1);
  const std::vector<Tensor> before = untrained.model().parameters(), after = task.model().parameters();
  REQUIRE(before.size() == after.size());
  size_t moved = 0;
  for (size_t i = 0; i < before.size(); ++i) moved += !testing::compare(after[i], before[i], 0).empty();
  CHECK(moved == before.size());
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

TEST_CASE("train: a diverging run with a huge --lr keeps checkpoints that evaluate finite, the previous one too") {
  TempDir dir("trainer_diverge"), scratch("trainer_diverge_eval");
  CountingTask task("mha");
  TrainOptions o = small_run(dir.file("run"));
  o.lr = kDivergingLr, o.clip = 0, o.warmup = 0, o.ckpt_every = 1, o.eval_every = 0, o.steps = 40;
  CHECK_THROWS_HEADROOM(train(task, o), "training stopped and the last good checkpoint");
  for (const std::string& path : {checkpoint_path(dir.file("run")), previous_checkpoint_path(dir.file("run"))}) {
    CAPTURE(path);
    Metrics metrics = evaluate_checkpoint(path, scratch);
    CHECK(std::isfinite(metrics.at(0).second));
  }
  const int64_t kept = std::stoll(load_safetensors(checkpoint_path(dir.file("run"))).metadata.at("train.step"));
  CHECK(std::stoll(load_safetensors(previous_checkpoint_path(dir.file("run"))).metadata.at("train.step")) == kept - 1);
}

TEST_CASE("train: a non-finite optimizer moment is not saved: the stop names the tensor and the step") {
  TempDir dir("trainer_inf_state");
  CountingTask task("mha");
  task.huge_gradient_at = 2;  // the update of step 3 leaves an infinite second moment
  TrainOptions o = small_run(dir.file("run"));
  o.clip = 0, o.ckpt_every = 2, o.eval_every = 0;
  CHECK_THROWS_HEADROOM(train(task, o),
                        "holds a NaN or infinite value at step 4; training stopped and the last good "
                        "checkpoint");
  CHECK(load_safetensors(checkpoint_path(dir.file("run"))).metadata.at("train.step") == "2");
}

TEST_CASE("train: a NaN validation metric stops the run before its checkpoint") {
  TempDir dir("trainer_nan_eval");
  CountingTask task("mha");
  task.nan_eval = true;
  CHECK_THROWS_HEADROOM(train(task, small_run(dir.file("run"))),
                        "the validation loss is nan at step 4; training stopped before its first checkpoint");
  CHECK_FALSE(std::filesystem::exists(checkpoint_path(dir.file("run"))));
}

TEST_CASE("train: --eval-only of a checkpoint that evaluates to NaN fails, and the binary exits with status 1") {
  TempDir dir("trainer_eval_nan");
  CountingTask trained("mha");
  TrainOptions o = small_run(dir.file("run"));
  train(trained, o);
  CountingTask task("mha");
  task.nan_eval = true;
  o.eval_only = true;
  CHECK_THROWS_HEADROOM(train(task, o), "the validation loss is nan at step 12 in ");
  Flags flags("train_counting", "the counting task");
  add_train_flags(flags, o);
  std::string program = "train_counting", eval_only = "--eval-only";
  char* argv[] = {program.data(), eval_only.data()};
  auto run = [&] { return summarize("lm", task.model(), task.config(), o, train(task, o), 1); };
  CHECK(training_main(flags, o, 2, argv, run) == 1);
}

TEST_CASE("train: checkpoints keep the one they replace; a corrupt or truncated checkpoint is refused, naming it") {
  TempDir dir("trainer_prev");
  CountingTask task("mha");
  const std::string path = checkpoint_path(dir.file("run"));
  train(task, small_run(dir.file("run")));  // checkpoints at steps 4, 8, 12
  CHECK(load_safetensors(path).metadata.at("train.step") == "12");
  CHECK(load_safetensors(previous_checkpoint_path(dir.file("run"))).metadata.at("train.step") == "8");
  {
    std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
    file.seekg(-5, std::ios::end);
    const char byte = char(file.get() ^ 0x10);  // one bit of the last tensor's data
    file.seekp(-5, std::ios::end);
    file.put(byte);
  }
  CountingTask again("mha");
  TrainOptions resume = small_run(dir.file("run"));
  resume.resume = true, resume.steps = 16;
  CHECK_THROWS_HEADROOM(train(again, resume), "the tensor data is corrupt");
  CHECK_THROWS_HEADROOM(train(again, resume), "; the checkpoint before it is kept as ");
  std::filesystem::resize_file(path, 100);
  CHECK_THROWS_HEADROOM(train(again, resume), "; the checkpoint before it is kept as ");
}

TEST_CASE("train: an interrupted step that is also a checkpoint step writes one checkpoint") {
  TempDir dir("trainer_interrupt_once");
  CountingTask task("mha");
  task.interrupt_at = 7;  // step 8 is a checkpoint step (every 4)
  CHECK(train(task, small_run(dir.file("run"))).interrupted);
  CHECK(load_safetensors(previous_checkpoint_path(dir.file("run"))).metadata.at("train.step") == "4");
}

TEST_CASE("train: resuming a run that reached --steps is refused with its step and how to go on") {
  TempDir dir("trainer_complete");
  CountingTask task("mha");
  train(task, small_run(dir.file("run")));
  CountingTask again("mha");
  TrainOptions resume = small_run(dir.file("run"));
  resume.resume = true;
  CHECK_THROWS_HEADROOM(train(again, resume), "is at step 12 and --steps is 12: the run is complete; raise --steps");
  resume.steps = 8, resume.warmup = 1;
  CHECK_THROWS_HEADROOM(train(again, resume), "is at step 12 and --steps is 8");
  TrainOptions eval = small_run(dir.file("run"));
  eval.eval_only = true;
  CHECK(train(again, eval).eval.size() == 1);  // --eval-only still reads it
}

TEST_CASE("train: resume requires every metadata entry, parsed strictly, and the same --seed") {
  TempDir dir("trainer_strict");
  // model.max_len holds its default: without the check a missing entry would pass silently.
  resume_edited(
      dir.file("a"), [](StringMap& m) { m.erase("model.max_len"); }, "has no 'model.max_len' entry");
  resume_edited(
      dir.file("b"), [](StringMap& m) { m.erase("attention.type"); }, "has no 'attention.type' entry");
  resume_edited(
      dir.file("c"), [](StringMap& m) { m["train.step"] = "2.5"; }, "train.step = '2.5' is not an integer from 0 to");
  resume_edited(
      dir.file("d"), [](StringMap& m) { m["train.step"] = "2abc"; }, "train.step = '2abc' is not an");
  resume_edited(
      dir.file("e"), [](StringMap& m) { m["train.step"] = "-2"; }, "train.step = '-2' is not an");
  resume_edited(
      dir.file("f"), [](StringMap& m) { m["train.generator_offset"] = "99999999999999999999"; },
      "train.generator_offset = '99999999999999999999' is not an integer from 0 to 18446744073709551615");
  resume_edited(
      dir.file("g"), [](StringMap& m) { m.erase("train.seed"); }, "has no 'train.seed' entry");
  resume_edited(
      dir.file("h"), [](StringMap& m) { m["train.seed"] = "7"; },
      "was made with --seed 7, not 1; pass --seed 7 to resume it");
  resume_edited(
      dir.file("i"), [](StringMap& m) { m["model.dropout"] = "nan"; }, "model.dropout = 'nan' is not a finite number");
}

TEST_CASE("train: a checkpoint without its header checksum is refused, though it loads as a plain file") {
  TempDir dir("trainer_no_header_crc");
  CountingTask task("mha");
  TrainOptions o = small_run(dir.file("run"));
  o.steps = 4;
  train(task, o);
  const std::string path = checkpoint_path(dir.file("run")), key = R"("headroom.header_crc32":")";
  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  const size_t at = bytes.find(key);
  REQUIRE(at != std::string::npos);
  bytes.replace(at, key.size() + 10, std::string(key.size() + 10, ' '));  // the entry, its value and comma
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  CHECK_FALSE(load_safetensors(path).checksummed);
  CountingTask again("mha");
  o.resume = true, o.steps = 8;
  CHECK_THROWS_HEADROOM(train(again, o), "is a headroom training checkpoint without the checksums");
}

namespace {

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void write_text(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

// The options that resume, to step 12, a small run trained in `run` to step 8.
TrainOptions resume_after_8_steps(const std::string& run) {
  CountingTask task("mha");
  TrainOptions o = small_run(run);
  o.steps = 8;
  train(task, o);
  o.resume = true;
  o.steps = 12;
  return o;
}

// A run's command line as training_main settles it: parsed, the resumed
// run's settings taken from its checkpoint, then the schedule.
struct SettledRun {
  Flags flags{"test", "train flags"};
  TrainOptions options;
  int64_t saved_step = -1;
  SettledRun(const std::string& dir, std::vector<std::string> args) : options(small_run(dir)) {
    add_train_flags(flags, options);
    parse_command_line(flags, std::move(args));
    saved_step = settle_resumed_settings(flags, flags, options);
    settle_train_options(flags, options);
    options.settings = &flags;
  }
};

}  // namespace

TEST_CASE("train: --resume takes every run setting from the checkpoint; a change is noted or refused") {
  TempDir dir("trainer_resume_settings");
  const std::string run = dir.file("run");
  SettledRun first(run, {"--seed", "7", "--steps", "8", "--lr", "0.005", "--warmup", "2", "--clip", "0.5"});
  CountingTask task("mha");
  train(task, first.options);
  SettledRun plain(run, {"--resume", "--ckpt", run});
  CHECK(plain.options.seed == 7);
  CHECK(plain.options.steps == 8);
  CHECK(plain.options.lr == 0.005);
  CHECK(plain.options.warmup == 2);  // restored, not derived again from --steps
  CHECK(plain.options.clip == 0.5);
  CHECK(plain.saved_step == 8);
  CHECK(resumed_run_is_finished(plain.flags, plain.options, plain.saved_step));  // says so; the binary exits 0
  CHECK_THROWS_HEADROOM(SettledRun(run, {"--resume", "--ckpt", run, "--steps", "6"}),
                        "--steps 6 is not past the checkpoint");
  CHECK_THROWS_HEADROOM(SettledRun(run, {"--resume", "--ckpt", run, "--seed", "3", "--steps", "16"}),
                        "--seed 3 differs from the run's 7");
  // An extension keeps the run's settings and changes what it is given, from the next step on.
  SettledRun longer(run, {"--resume", "--ckpt", run, "--steps", "12", "--lr", "0.002"});
  CHECK(longer.options.steps == 12);
  CHECK(longer.options.lr == 0.002);
  CHECK(longer.options.clip == 0.5);
  CHECK_FALSE(resumed_run_is_finished(longer.flags, longer.options, longer.saved_step));
  CountingTask again("mha");
  CHECK(train(again, longer.options).last_step == 12);
  // --eval-only takes the settings too, and refuses training flags given to it.
  SettledRun evaluated(run, {"--eval-only", "--ckpt", run});
  CHECK(evaluated.options.lr == 0.002);
  for (const std::vector<std::string>& args : {std::vector<std::string>{"--eval-only", "--ckpt", run, "--steps", "5"},
                                               std::vector<std::string>{"--eval-only", "--ckpt", run, "--seed", "7"}}) {
    Flags flags("test", "train flags");
    TrainOptions o = small_run(run);
    add_train_flags(flags, o);
    parse_command_line(flags, args);
    CHECK_THROWS_HEADROOM(check_flags_apply(flags), "--eval-only");
  }
}

TEST_CASE("train: a checkpoint's settings pass the flags' own range checks") {
  TempDir dir("trainer_resume_bad_setting");
  const std::string run = dir.file("run");
  SettledRun first(run, {"--steps", "4"});
  CountingTask task("mha");
  train(task, first.options);
  edit_metadata(run, [](StringMap& m) { m["run.lr"] = "-1"; });
  CHECK_THROWS_HEADROOM(SettledRun(run, {"--resume", "--ckpt", run}),
                        "its setting run.lr = '-1' is not a value the flag takes: --lr expects a number in");
}

TEST_CASE("train: a second process on a run folder is refused naming the holder's pid") {
  TempDir dir("trainer_lock");
  const std::string run = dir.file("run");
  std::filesystem::create_directories(run);
  {
    const std::shared_ptr<void> held = hold_run_folder(run);
    CHECK(hold_run_folder(run) == held);  // one process shares its hold
    // Another open file description is what a second process holds: flock refuses it.
    const int other = ::open((run + "/run.lock").c_str(), O_RDWR);
    REQUIRE(other >= 0);
    CHECK(::flock(other, LOCK_EX | LOCK_NB) != 0);
    ::close(other);
  }
  // This process's hold is gone; a lock taken elsewhere stops a run.
  const int other = ::open((run + "/run.lock").c_str(), O_RDWR);
  REQUIRE(::flock(other, LOCK_EX | LOCK_NB) == 0);
  CountingTask task("mha");
  CHECK_THROWS_HEADROOM(
      train(task, small_run(run)),
      ("the run folder " + run + " is in use by another process (pid " + std::to_string(::getpid())).c_str());
  ::close(other);
  CountingTask again("mha");
  CHECK(train(again, small_run(run)).last_step == 12);
  // A run.lock that links elsewhere is refused, and the file it points to is left as it was.
  const std::string linked = dir.file("linked");
  std::filesystem::create_directories(linked);
  write_text(dir.file("target.txt"), "keep me\n");
  std::filesystem::create_symlink(dir.file("target.txt"), linked + "/run.lock");
  CountingTask third("mha");
  CHECK_THROWS_HEADROOM(train(third, small_run(linked)), "run.lock (it must be a regular file, not a link)");
  CHECK(read_text(dir.file("target.txt")) == "keep me\n");
}

TEST_CASE("train: --resume refuses a log.jsonl that is not the run's history up to its checkpoint") {
  TempDir dir("trainer_resume_log");
  const std::string run = dir.file("run");
  const TrainOptions o = resume_after_8_steps(run);
  const std::string log = read_text(run + "/log.jsonl");
  auto resume_with_log = [&](const std::string& text) {
    write_text(run + "/log.jsonl", text);
    CountingTask again("mha");
    return train(again, o);
  };
  // Two runs appended to one log: step 1 follows step 8.
  CHECK_THROWS_HEADROOM(resume_with_log(log + log),
                        "is not one run's history: its train line of step 1 follows step 8");
  // A log cut before the checkpoint's step.
  const std::string first_line = log.substr(0, log.find('\n') + 1);
  CHECK_THROWS_HEADROOM(resume_with_log(first_line), "ends at step 1, before the checkpoint's step 8");
  CHECK(resume_with_log(log).last_step == 12);
}

TEST_CASE("train: a checkpoint holding a non-finite weight is refused on resume, naming it, not called good") {
  TempDir dir("trainer_resume_inf");
  const std::string run = dir.file("run");
  const TrainOptions o = resume_after_8_steps(run);
  SafetensorsFile file = load_safetensors(checkpoint_path(run));
  file.tensors[0].second.data<float>()[0] = INFINITY;
  save_safetensors(checkpoint_path(run), file.tensors, file.metadata);
  CountingTask again("mha");
  CHECK_THROWS_HEADROOM(train(again, o), (file.tensors[0].first +
                                          " holds a NaN or infinite value at step 8 in the "
                                          "checkpoint " +
                                          checkpoint_path(run) + ": it cannot be resumed or evaluated")
                                             .c_str());
}

TEST_CASE("train: a fresh run into a folder that holds a run is refused; --overwrite replaces that run") {
  TempDir dir("trainer_held");
  const std::string run = dir.file("run");
  CountingTask first("mha");
  train(first, small_run(run));  // checkpoints at steps 4, 8, 12
  CountingTask second("mha");
  TrainOptions again = small_run(run);
  again.steps = 8;
  CHECK_THROWS_HEADROOM(train(second, again), ("the run folder " + run +
                                               " already holds a run (checkpoint.safetensors, "
                                               "checkpoint.prev.safetensors, log.jsonl) that this fresh run would "
                                               "overwrite; pass --resume to continue it, --overwrite to replace it")
                                                  .c_str());
  CHECK(load_safetensors(checkpoint_path(run)).metadata.at("train.step") == "12");  // untouched
  for (const std::string& only : {std::string("log.jsonl"), std::string("checkpoint.prev.safetensors")}) {
    TempDir held("trainer_held_one");
    std::filesystem::copy_file(run + "/" + only, held.file(only));
    CHECK_THROWS_HEADROOM(train(second, small_run(held.path.string())), ("already holds a run (" + only).c_str());
  }
  again.overwrite = true;
  train(second, again);
  // Nothing of the old run is left: the previous checkpoint is the new run's, the log holds its 8 steps.
  CHECK(load_safetensors(checkpoint_path(run)).metadata.at("train.step") == "8");
  CHECK(load_safetensors(previous_checkpoint_path(run)).metadata.at("train.step") == "4");
  CHECK(read_jsonl_numbers(run + "/log.jsonl", "train").size() == 8);
  // An empty folder, or one of other files, holds no run.
  TempDir empty("trainer_empty_folder");
  empty.write("notes.txt", "not a run");
  CountingTask third("mha");
  CHECK(train(third, small_run(empty.path.string())).last_step == 12);
}

TEST_CASE("train: a --ckpt path that cannot be a directory is an error naming it") {
  TempDir dir("trainer_bad_dir");
  const std::string file = dir.write("taken", "a file");
  CountingTask task("mha");
  CHECK_THROWS_HEADROOM(train(task, small_run(file + "/run")), "cannot create the --ckpt directory");
}

TEST_CASE("describe: a run stopped before its first evaluation says so instead of an empty metric list") {
  CountingTask task("mha");
  task.interrupt_at = 1;
  TrainOptions o = small_run("");
  TrainResult result = train(task, o);
  REQUIRE(result.eval.empty());
  const std::string text = describe(summarize("lm", task.model(), task.config(), o, result, 1));
  CHECK(text == "stopped at step 2, before the first evaluation\n");  // no empty "final (...)" line
}

TEST_CASE("json_object writes numbers, integers, strings and non-finite values") {
  CHECK(json_object({{"type", std::string("eval")}, {"step", int64_t(3)}, {"loss", 0.5}, {"bad", double(NAN)}}) ==
        R"({"type":"eval","step":3,"loss":0.5,"bad":"nan"})");
}

// A training binary's parsed command line: the train and model flags, with
// compare's --methods and train_lm's --generate and --temperature.
struct TrainingCommandLine {
  Flags flags{"test", "train and model flags"};
  TrainOptions train;
  ModelOptions model;
  std::string methods;
  int64_t generate = 0;
  double temperature = 1;
  explicit TrainingCommandLine(std::vector<std::string> args) {
    flags.add("methods", &methods, "presets");
    flags.add("generate", &generate, "tokens", {0, 100});
    flags.add("temperature", &temperature, "sampling", {0, 10, End::open, End::closed});
    add_model_flags(flags, model, ModelStacks::encoder_decoder);
    add_train_flags(flags, train);
    parse_command_line(flags, std::move(args));
  }
};

TEST_CASE("check_flags_apply refuses a flag given that does not apply to the run, saying why") {
  auto check = [](std::vector<std::string> args) { check_flags_apply(TrainingCommandLine(std::move(args)).flags); };
  CHECK_THROWS_HEADROOM(check({"--bcd-f", "5"}),
                        "--bcd-f does not apply to test: it sets MAE's training, and no layer is MAE (--attn mae, or "
                        "mae in --attn-set or --methods)");
  CHECK_NOTHROW(check({"--bcd-f", "5", "--attn", "mae"}));
  CHECK_NOTHROW(check({"--bcd-f", "5", "--attn-set", "layer.0.type=mae"}));
  CHECK_NOTHROW(check({"--bcd-f", "5", "--methods", "mha,mae"}));
  CHECK_NOTHROW(check({"--bcd-f", "5", "--ckpt", "run", "--resume"}));  // the checkpoint's model may be MAE
  CHECK_THROWS_HEADROOM(check({"--temperature", "0.5"}), "--temperature does not apply to test: it shapes the sample");
  CHECK_NOTHROW(check({"--temperature", "0.5", "--generate", "5"}));
  CHECK_THROWS_HEADROOM(check({"--tf32"}), "--tf32 does not apply to test: it is a CUDA setting, and --device is cpu");
  CHECK_THROWS_HEADROOM(check({"--overwrite", "--ckpt", "run", "--eval-only"}), "--eval-only writes no run");
  CHECK_THROWS_HEADROOM(check({"--methods", "mha", "--attn", "moh"}),
                        "--attn does not apply to test: --methods sets the attention, --out the folder");
  CHECK_NOTHROW(check({"--steps", "10", "--attn", "moh"}));
}

TEST_CASE("start_run refuses a run whose memory estimate exceeds --max-memory, with the estimate") {
  TrainOptions o;
  o.quiet = true, o.max_memory = "1MiB";
  MemoryEstimate e;
  e.weights = 1 << 20, e.optimizer = 3 << 20, e.activations = 4 << 20;
  CHECK_THROWS_HEADROOM(
      start_run(o, ModelConfig(), e),
      "the run needs about 8.0 MiB (weights 1.0 MiB, gradients and AdamW moments 3.0 MiB, activations of a training "
      "step 4.0 MiB; an estimate), more than the 1.0 MiB of --max-memory 1MiB");
  o.max_memory = "8MiB";
  CHECK_NOTHROW(start_run(o, ModelConfig(), e));
  // The data held as tensors count too, and the pass whose activations are the largest is named.
  e.data = 1 << 20;
  e.activations_of = "evaluation";
  CHECK_THROWS_HEADROOM(start_run(o, ModelConfig(), e),
                        "the run needs about 9.0 MiB (weights 1.0 MiB, gradients and AdamW moments 3.0 MiB, "
                        "activations of evaluation 4.0 MiB, data 1.0 MiB; an estimate)");
}

TEST_CASE("run_config_table lists only the flags that apply to the run") {
  auto table = [](std::vector<std::string> args) {
    const TrainingCommandLine line(std::move(args));
    return run_config_table(line.flags, line.train);
  };
  const std::string mha = table({});
  CHECK(mha.find("| steps | 1000 |") != std::string::npos);
  for (const char* absent : {"| bcd-f |", "| gate-lr |", "| mae-joint |", "| tf32 |", "| resume |", "| eval-only |"})
    CHECK_MESSAGE(mha.find(absent) == std::string::npos, absent);
  CHECK(mha.find("| ckpt-every |") == std::string::npos);  // no --ckpt
  CHECK(mha.find("| attn-opt |") == std::string::npos);    // empty
  const std::string mae = table({"--attn", "mae", "--ckpt", "run", "--resume"});
  for (const char* present : {"| bcd-f | 100 |", "| mae-joint | false |", "| ckpt-every | 500 |", "| resume | true |"})
    CHECK_MESSAGE(mae.find(present) != std::string::npos, present);
  CHECK(mha.find("| generate |") == std::string::npos);
  CHECK(table({"--generate", "5"}).find("| generate | 5 |") != std::string::npos);
  CHECK(mha.find("| attn | mha |") != std::string::npos);
  const std::string compare = table({"--methods", "mha,mae", "--ckpt", "runs/lm"});
  for (const char* absent : {"| attn |", "| ckpt |"}) CHECK_MESSAGE(compare.find(absent) == std::string::npos, absent);
  CHECK(compare.find("| bcd-f | 100 |") != std::string::npos);
  Flags flags("test", "no flags");
  CHECK(
      run_config_table(flags, TrainOptions{}, {{"memory estimate", "8.0 MiB"}}).find("| memory estimate | 8.0 MiB |") !=
      std::string::npos);
  // From a checkpoint, the model flags' rows give way to the checkpoint's model; --eval-only shows no training flag.
  const std::string resumed = table({"--ckpt", "run", "--resume"});
  for (const char* absent : {"| attn |", "| dim |", "| heads |", "| layers |"})
    CHECK_MESSAGE(resumed.find(absent) == std::string::npos, absent);
  const std::string evaluated = table({"--ckpt", "run", "--eval-only"});
  for (const char* absent : {"| steps |", "| lr |", "| warmup |", "| eval-every |", "| seed |"})
    CHECK_MESSAGE(evaluated.find(absent) == std::string::npos, absent);
}

TEST_CASE("--help prints the derived defaults as a run at the default --steps uses them") {
  TrainOptions o;
  o.steps = 860;
  o.warmup = 50;
  o.eval_every = 250;
  Flags flags("test", "train flags");
  add_train_flags(flags, o);
  const std::string usage = flags.usage();
  CHECK(usage.find("(default: 50: a tenth of --steps, at most 50,") != std::string::npos);
  CHECK(usage.find("(default: 172: a fifth of --steps, at most 250,") != std::string::npos);
  CHECK(usage.find("(default: MemAvailable of /proc/meminfo on the CPU, none on CUDA)") != std::string::npos);
}
