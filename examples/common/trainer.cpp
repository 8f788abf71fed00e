#include "headroom/examples/common/trainer.h"

#include <csignal>
#include <cmath>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <sstream>

#include "headroom/core/grad_mode.h"
#include "headroom/core/backend.h"
#include "headroom/core/safetensors.h"
#include "headroom/core/threading.h"
#include "headroom/examples/common/progress.h"
#include "headroom/models/bcd.h"
#include "headroom/models/optim.h"

namespace headroom::examples {

namespace {

// ---- Ctrl-C ----------------------------------------------------------------
// The handler only raises a flag; the loop checks it between steps, writes a
// checkpoint and returns, so nothing is ever half-written.
volatile std::sig_atomic_t interrupt_requested = 0;

extern "C" void request_interrupt(int) { interrupt_requested = 1; }

class InterruptScope {
 public:
  InterruptScope() : previous_(std::signal(SIGINT, request_interrupt)) { interrupt_requested = 0; }
  ~InterruptScope() { std::signal(SIGINT, previous_); }

 private:
  void (*previous_)(int);
};

// ---- the optimizer(s) --------------------------------------------------------
// AdamW over every parameter, or for MAE models (attention type "mae") block
// coordinate descent with separate AdamW optimizers for experts and gates.
class Optimization {
 public:
  Optimization(TrainTask& task, const TrainOptions& o) : options_(o) {
    Module& model = task.model();
    auto mae_layers = collect_modules<MAEAttention>(model);
    if (task.config().attention.type == "mae" && !mae_layers.empty()) {
      BCDOptions bcd;
      bcd.warm_start_updates = o.bcd_warm, bcd.f_updates = o.bcd_f, bcd.g_updates = o.bcd_g;
      bcd.training = o.mae_joint ? BCDOptions::Training::joint : BCDOptions::Training::bcd;
      auto experts =
          std::make_shared<AdamW>(expert_parameters(model, mae_layers), o.lr, 0.9, 0.999, 1e-8, o.weight_decay);
      auto gates = std::make_shared<AdamW>(gate_parameters(mae_layers), gate_lr(), 0.9, 0.999, 1e-8, 0.0);
      bcd_ = std::make_unique<BlockCoordinateDescent>(mae_layers, experts, gates, bcd);
    } else {
      adamw_ = std::make_unique<AdamW>(model.parameters(), o.lr, 0.9, 0.999, 1e-8, o.weight_decay);
    }
  }

  void begin(int64_t step) {
    if (bcd_) bcd_->begin_step(step);
    else adamw_->zero_grad();
  }

  // Clips, sets the scheduled rates and steps; returns the gradient norm.
  double finish(double lr_factor) {
    double norm = options_.clip > 0 ? clip_grad_norm(trained(), options_.clip) : 0.0;
    if (!std::isfinite(norm)) return norm;  // the caller stops; nothing is updated
    if (bcd_) {
      bcd_->expert_optimizer().set_lr(options_.lr * lr_factor);
      bcd_->gate_optimizer().set_lr(gate_lr() * lr_factor);
      bcd_->finish_step();
    } else {
      adamw_->set_lr(options_.lr * lr_factor);
      adamw_->step();
    }
    return norm;
  }

  std::string block(int64_t step) const { return bcd_ ? bcd_->block_kind(step) : ""; }

  NamedTensors state() const {
    if (!bcd_) return adamw_->state();
    NamedTensors entries = prefixed("expert.", bcd_->expert_optimizer().state());
    for (auto& entry : prefixed("gate.", bcd_->gate_optimizer().state())) entries.push_back(entry);
    return entries;
  }

  void load_state(const NamedTensors& entries) {
    if (!bcd_) return adamw_->load_state(entries);
    bcd_->expert_optimizer().load_state(unprefixed("expert.", entries));
    bcd_->gate_optimizer().load_state(unprefixed("gate.", entries));
  }

 private:
  double gate_lr() const { return options_.gate_lr > 0 ? options_.gate_lr : options_.lr; }

  std::vector<Tensor> trained() const { return bcd_ ? bcd_->trained_parameters() : adamw_->params(); }

  static NamedTensors prefixed(const std::string& prefix, NamedTensors entries) {
    for (auto& entry : entries) entry.first = prefix + entry.first;
    return entries;
  }

  static NamedTensors unprefixed(const std::string& prefix, const NamedTensors& entries) {
    NamedTensors out;
    for (const auto& entry : entries)
      if (entry.first.rfind(prefix, 0) == 0) out.emplace_back(entry.first.substr(prefix.size()), entry.second);
    return out;
  }

  TrainOptions options_;
  std::unique_ptr<AdamW> adamw_;
  std::unique_ptr<BlockCoordinateDescent> bcd_;
};

// ---- checkpoints -----------------------------------------------------------------

constexpr const char* kFormat = "headroom training checkpoint v1";

void save_checkpoint(TrainTask& task, const Optimization& optimization, const TrainOptions& o, int64_t step) {
  std::filesystem::create_directories(o.ckpt_dir);
  NamedTensors entries = task.model().state_dict();
  for (auto& entry : optimization.state()) entries.push_back(entry);
  StringMap metadata = task.config().to_metadata();
  for (const auto& [key, value] : task.metadata()) metadata["task." + key] = value;
  const Generator& gen = task.model_generator();
  metadata["format"] = kFormat;
  metadata["train.step"] = std::to_string(step);
  metadata["train.seed"] = std::to_string(o.seed);
  metadata["train.generator_seed"] = std::to_string(gen.seed());
  metadata["train.generator_offset"] = std::to_string(gen.offset());
  save_safetensors(checkpoint_path(o.ckpt_dir), entries, metadata);
}

const std::string& required(const StringMap& metadata, const std::string& key, const std::string& path) {
  auto found = metadata.find(key);
  HEADROOM_CHECK(found != metadata.end(), "[train] checkpoint ", path, " has no '", key, "' entry");
  return found->second;
}

StringMap task_metadata(const StringMap& metadata) {
  StringMap task;
  for (const auto& [key, value] : metadata)
    if (key.rfind("task.", 0) == 0) task[key.substr(5)] = value;
  return task;
}

// Restores model, optimizer and generator; returns the step to continue from.
int64_t resume_checkpoint(TrainTask& task, Optimization& optimization, const TrainOptions& o) {
  const std::string path = checkpoint_path(o.ckpt_dir);
  SafetensorsFile file = load_safetensors(path);
  HEADROOM_CHECK(required(file.metadata, "format", path) == kFormat, "[train] ", path,
                 " is not a headroom training checkpoint");
  task.check_metadata(task_metadata(file.metadata));  // first: its message names the data
  ModelConfig saved = ModelConfig::from_metadata(file.metadata);
  HEADROOM_CHECK(saved == task.config(), "[train] checkpoint ", path,
                 " was made with another model config; start a new --ckpt directory or pass the same flags");
  NamedTensors model_entries, optimizer_entries;
  for (auto& entry : file.tensors)
    (entry.first.find("optim.") == std::string::npos ? model_entries : optimizer_entries).push_back(entry);
  task.model().load_state_dict(model_entries);
  optimization.load_state(optimizer_entries);
  task.model_generator().set_state(std::stoull(required(file.metadata, "train.generator_seed", path)),
                                   std::stoull(required(file.metadata, "train.generator_offset", path)));
  return std::stoll(required(file.metadata, "train.step", path));
}

// ---- evaluation ------------------------------------------------------------------

Metrics evaluate(TrainTask& task) {
  NoGradGuard no_grad;
  task.model().eval();
  Metrics metrics = task.evaluate();
  task.model().train();
  return metrics;
}

void log_eval(JsonlLog& log, int64_t step, const Metrics& metrics, bool quiet) {
  std::vector<JsonField> fields{{"type", std::string("eval")}, {"step", step}};
  std::ostringstream line;
  line << "eval @ " << step << ":";
  for (const auto& [name, value] : metrics) {
    fields.emplace_back(name, value);
    line << " " << name << " " << value;
  }
  log.write(fields);
  if (!quiet) std::printf("%s\n", line.str().c_str());
}

// The stop for a NaN or infinite loss or gradient: nothing of this step is
// applied or saved, so the last checkpoint stays the last good state.
void check_finite(double value, const char* what, int64_t step, const TrainOptions& o) {
  HEADROOM_CHECK(std::isfinite(value), "[train] the ", what, " is ", value, " at step ", step, "; training stopped",
                 o.ckpt_dir.empty() ? "" : " and the last good checkpoint in ", o.ckpt_dir.empty() ? "" : o.ckpt_dir,
                 o.ckpt_dir.empty() ? "" : " is kept");
}

void run_steps(TrainTask& task, Optimization& optimization, const TrainOptions& o, JsonlLog& log, TrainResult& result) {
  WarmupCosine schedule{o.warmup, o.steps, o.min_lr_ratio};
  Progress progress(result.first_step, o.steps, task.unit(), o.log_every, !o.quiet);
  InterruptScope interrupt_scope;
  Backend& memory = backend(task.model().device());
  memory.reset_peak_memory();
  auto start = std::chrono::steady_clock::now();
  task.model().train();
  for (int64_t step = result.first_step; step < o.steps && !interrupt_requested; ++step) {
    optimization.begin(step);
    StepOutput out = task.step(step);
    check_finite(out.task_loss, "loss", step, o);
    out.loss.backward();
    const double lr_factor = schedule.factor(step);
    check_finite(optimization.finish(lr_factor), "gradient norm", step, o);
    result.train_loss.push_back(out.task_loss);
    result.last_step = step + 1;
    std::vector<JsonField> fields{
        {"type", std::string("train")}, {"step", step + 1}, {"loss", out.task_loss}, {"lr", o.lr * lr_factor}};
    if (!optimization.block(step).empty()) fields.emplace_back("block", optimization.block(step));
    log.write(fields);
    progress.update(step + 1, {{"loss", out.task_loss}, {"lr", o.lr * lr_factor}}, out.items);
    auto side_work = std::chrono::steady_clock::now();
    const bool last = step + 1 == o.steps;
    if (last || (o.eval_every > 0 && (step + 1) % o.eval_every == 0)) {
      progress.finish();
      result.eval = evaluate(task);
      log_eval(log, step + 1, result.eval, o.quiet);
    }
    if (!o.ckpt_dir.empty() && (last || (o.ckpt_every > 0 && (step + 1) % o.ckpt_every == 0)))
      save_checkpoint(task, optimization, o, step + 1);
    progress.exclude(std::chrono::duration<double>(std::chrono::steady_clock::now() - side_work).count());
  }
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  result.items_per_second = progress.items_per_second();
  result.peak_bytes = memory.memory_stats().peak_bytes;
  if (interrupt_requested) {
    result.interrupted = true;
    progress.finish();
    if (!o.ckpt_dir.empty()) save_checkpoint(task, optimization, o, result.last_step);
    std::printf("interrupted at step %lld%s%s\n", (long long)result.last_step,
                o.ckpt_dir.empty() ? "" : "; checkpoint written to ", o.ckpt_dir.c_str());
  }
}

}  // namespace

std::string checkpoint_path(const std::string& ckpt_dir) { return ckpt_dir + "/checkpoint.safetensors"; }

StringMap load_model_checkpoint(Module& model, const std::string& ckpt_dir) {
  SafetensorsFile file = load_safetensors(checkpoint_path(ckpt_dir));
  NamedTensors model_entries;
  for (auto& entry : file.tensors)
    if (entry.first.find("optim.") == std::string::npos) model_entries.push_back(entry);
  model.load_state_dict(model_entries);
  return file.metadata;
}

std::string config_table(const std::vector<std::pair<std::string, std::string>>& rows) {
  std::string table = "| setting | value |\n|---|---|\n";
  for (const auto& [name, value] : rows) table += "| " + name + " | " + value + " |\n";
  return table;
}

void add_train_flags(Flags& flags, TrainOptions& o) {
  // Generous bounds: past them a value is a typo, not a plan.
  constexpr int64_t kMaxSteps = 1'000'000'000;
  const Range<int64_t> any_count{0, kMaxSteps}, positive_count{1, kMaxSteps};
  const RealRange rate{0, 1e6, End::open, End::closed};
  flags.add("steps", &o.steps, "optimizer steps in all", positive_count);
  flags.add("warmup", &o.warmup, "linear warm-up steps before the cosine decay", any_count);
  flags.add("lr", &o.lr, "peak learning rate (AdamW)", rate);
  flags.add("min-lr-ratio", &o.min_lr_ratio, "final learning rate as a fraction of --lr", {0, 1});
  flags.add("weight-decay", &o.weight_decay, "AdamW decoupled weight decay", {0, 1e3});
  flags.add("clip", &o.clip, "clip the global gradient norm to this (0: off)", {0, 1e9});
  flags.add("gate-lr", &o.gate_lr, "MAE: gate learning rate under BCD (0: --lr)", {0, 1e6});
  flags.add("bcd-warm", &o.bcd_warm, "MAE: plain-MHA warm-start updates before BCD", any_count);
  flags.add("bcd-f", &o.bcd_f, "MAE: expert (F) updates per BCD block", positive_count);
  flags.add("bcd-g", &o.bcd_g, "MAE: gate (G) updates per BCD block", positive_count);
  flags.add("mae-joint", &o.mae_joint, "MAE: train experts and gates jointly (the NoBCD ablation)");
  flags.add("eval-every", &o.eval_every, "evaluate every N steps (0: only at the end)", any_count);
  flags.add("ckpt-every", &o.ckpt_every, "checkpoint every N steps (with --ckpt; 0: only at the end)", any_count);
  flags.add("log-every", &o.log_every, "progress line every N steps when not on a terminal", positive_count);
  flags.add("ckpt", &o.ckpt_dir, "run directory: checkpoint.safetensors, log.jsonl, plots");
  flags.add("resume", &o.resume, "continue the run in --ckpt from its checkpoint");
  flags.add("eval-only", &o.eval_only, "load --ckpt's checkpoint, evaluate and stop");
  flags.add("seed", &o.seed, "seeds initialisation, data order, dropout and sampling", {0, UINT64_MAX});
  flags.add("threads", &o.threads, "CPU threads (0: HEADROOM_NUM_THREADS or all cores)", {0, kMaxThreadsFlag});
  flags.add("device", &o.device, "cpu, cuda or cuda:N (data is loaded on the CPU)");
  flags.add("tf32", &o.tf32, "CUDA: TF32 tensor-core matmuls (faster, less precise)");
}

Device training_device(const std::string& name) {
  const Device device = Device::parse(name);
  if (device.is_cpu()) return device;
  HEADROOM_CHECK(device_count(device.kind) > 0, "[train] --device ", name,
                 " is not available: ", device_summary(device.kind));
  HEADROOM_CHECK(device.index < device_count(device.kind), "[train] --device ", name,
                 " does not exist: ", device_summary(device.kind));
  return device;
}

std::string run_config_table(const Flags& flags, const TrainOptions& options) {
  std::vector<std::pair<std::string, std::string>> rows = flags.values();
  if (training_device(options.device).is_cuda()) rows.emplace_back("cuda", device_summary(Device::Kind::cuda));
  return config_table(rows);
}

TrainResult train(TrainTask& task, const TrainOptions& o) {
  HEADROOM_CHECK(o.steps > 0, "[train] --steps must be positive, got ", o.steps);
  HEADROOM_CHECK(o.warmup >= 0 && o.warmup < o.steps, "[train] --warmup ", o.warmup, " must be below --steps ",
                 o.steps);
  HEADROOM_CHECK(!(o.resume || o.eval_only) || !o.ckpt_dir.empty(), "[train] --resume and --eval-only need --ckpt DIR");
  const Device device = training_device(o.device);
  set_allow_tf32(o.tf32);
  task.model().to(device);  // before the optimizers, whose state is made beside the parameters
  Optimization optimization(task, o);
  TrainResult result;
  if (o.resume || o.eval_only) result.first_step = resume_checkpoint(task, optimization, o);
  result.last_step = result.first_step;
  const bool logging = !o.ckpt_dir.empty() && !o.eval_only;
  if (logging) std::filesystem::create_directories(o.ckpt_dir);
  JsonlLog log = logging ? JsonlLog(o.ckpt_dir + "/log.jsonl", o.resume ? result.first_step : 0) : JsonlLog();
  if (o.eval_only) {
    result.eval = evaluate(task);
    log_eval(log, result.first_step, result.eval, o.quiet);
    return result;
  }
  run_steps(task, optimization, o, log, result);
  return result;
}

}  // namespace headroom::examples
