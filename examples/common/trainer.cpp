#include "headroom/examples/common/trainer.h"

#include <csignal>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmath>
#include <chrono>
#include <cstdio>
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>

#include "headroom/core/grad_mode.h"
#include "headroom/core/backend.h"
#include "headroom/core/safetensors.h"
#include "headroom/core/threading.h"
#include "headroom/examples/common/progress.h"
#include "headroom/models/bcd.h"
#include "headroom/models/optim.h"
#include "headroom/ops/elementwise.h"
#include "headroom/ops/reduce.h"

namespace headroom::examples {

namespace {

// --resume and --eval-only: one of them at most, with --ckpt.
void check_run_mode(const TrainOptions& o) {
  if (o.resume && o.eval_only) throw UsageError("--resume and --eval-only exclude each other; pass one");
  if ((o.resume || o.eval_only) && o.ckpt_dir.empty()) throw UsageError("--resume and --eval-only need --ckpt DIR");
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

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

void make_run_directory(const std::string& dir) {
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  HEADROOM_CHECK(!error, "[train] cannot create the --ckpt directory ", dir, ": ", error.message());
}

// The files that make a folder hold a run: what a fresh run would overwrite.
std::vector<std::string> run_files(const std::string& dir) {
  return {checkpoint_path(dir), previous_checkpoint_path(dir), dir + "/log.jsonl"};
}

// The folder of a run that writes one: checked for a fresh run and, under
// --overwrite, emptied of the old run's files, so that none of its
// checkpoints is kept as the new run's previous one.
void start_run_directory(const TrainOptions& o) {
  if (!o.resume) check_run_directory(o);
  if (!o.resume && o.overwrite)
    for (const std::string& file : run_files(o.ckpt_dir)) {
      std::error_code error;
      std::filesystem::remove(file, error);
      HEADROOM_CHECK(!error, "[train] --overwrite cannot delete ", file, ": ", error.message());
    }
  make_run_directory(o.ckpt_dir);
}

// The end of every stop message: what the run's checkpoints are now.
// saved_step: the step of the newest checkpoint of this run (or the one it resumed), -1 for none.
std::string stop_note(const TrainOptions& o, int64_t saved_step) {
  if (o.ckpt_dir.empty()) return "; training stopped";
  if (saved_step < 0) return "; training stopped before its first checkpoint";
  return "; training stopped and the last good checkpoint, " + checkpoint_path(o.ckpt_dir) + " at step " +
         std::to_string(saved_step) + ", is kept";
}

// A checkpoint is a state to go back to, so a NaN or infinite weight or
// optimizer moment is refused before anything is written.  t * 0 is NaN
// exactly where t is not finite, so one sum per tensor finds it on any device.
void check_finite_tensors(const NamedTensors& entries, int64_t step, const std::string& stop) {
  NoGradGuard no_grad;
  for (const auto& [name, tensor] : entries)
    if (tensor.is_floating_point() && tensor.numel() > 0)
      HEADROOM_CHECK(std::isfinite(sum(tensor * 0.0).item()), "[train] ", name,
                     " holds a NaN or infinite value at step ", step, stop);
}

// Keeps the checkpoint about to be replaced as checkpoint.prev.safetensors:
// a hard link (a copy where the file system has none) renamed into place, so
// both names hold a complete file at every moment.
void keep_previous_checkpoint(const std::string& dir) {
  namespace fs = std::filesystem;
  const std::string current = checkpoint_path(dir), previous = previous_checkpoint_path(dir);
  const std::string staged = previous + ".staged";
  std::error_code error;
  if (!fs::is_regular_file(current, error)) return;
  fs::remove(staged, error);  // left by a run killed here
  fs::create_hard_link(current, staged, error);
  if (error) fs::copy_file(current, staged, fs::copy_options::overwrite_existing, error);
  if (!error) fs::rename(staged, previous, error);
  HEADROOM_CHECK(!error, "[train] cannot keep ", current, " as ", previous, ": ", error.message());
}

// Every rank checks the tensors (they are the same on all, so all stop
// together); `write`: this rank writes the file (rank 0 of a data-parallel run).
void save_checkpoint(TrainTask& task, const Optimization& optimization, const TrainOptions& o, int64_t step,
                     const std::string& stop, bool write) {
  NamedTensors entries = task.model().state_dict();
  for (auto& entry : optimization.state()) entries.push_back(entry);
  check_finite_tensors(entries, step, stop);
  if (!write) return;
  StringMap metadata = task.config().to_metadata();
  for (const auto& [key, value] : task.metadata()) metadata["task." + key] = value;
  const Generator& gen = task.model_generator();
  metadata["format"] = kFormat;
  metadata["train.step"] = std::to_string(step);
  metadata["train.seed"] = std::to_string(o.seed);
  metadata["train.generator_seed"] = std::to_string(gen.seed());
  metadata["train.generator_offset"] = std::to_string(gen.offset());
  if (o.settings != nullptr)
    for (const auto& [name, value] : o.settings->values())
      if (is_run_setting(name)) metadata["run." + name] = value;
  make_run_directory(o.ckpt_dir);
  keep_previous_checkpoint(o.ckpt_dir);
  save_safetensors(checkpoint_path(o.ckpt_dir), entries, metadata);
}

// ---- one writer per run folder ------------------------------------------------------
// An exclusive flock on DIR/run.lock, which the kernel releases when the
// process ends however it ends, so a killed run leaves no stale lock.
class RunFolderLock {
 public:
  explicit RunFolderLock(const std::string& dir) : path_(dir + "/run.lock") {
    make_run_directory(dir);
    // Never through a link: the pid is written into the file, which must be the folder's own.
    fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0644);
    HEADROOM_CHECK(fd_ >= 0, "[train] cannot open ", path_,
                   " (it must be a regular file, not a link): ", std::strerror(errno));
    struct stat file {};
    if (::fstat(fd_, &file) != 0 || !S_ISREG(file.st_mode)) {
      ::close(fd_);
      HEADROOM_FAIL("[train] ", path_, " is not a regular file; remove it to let the run lock its folder");
    }
    if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      const int error = errno;
      const std::string holder = read_holder();
      ::close(fd_);
      HEADROOM_CHECK(error != EWOULDBLOCK, "[train] the run folder ", dir, " is in use by another process (pid ",
                     holder, ", which holds ", path_,
                     "): two processes would mix one run's checkpoints and log; wait for it to end, stop it, or "
                     "use another --ckpt folder");
      HEADROOM_FAIL("[train] cannot lock ", path_, ": ", std::strerror(error));
    }
    const std::string pid = std::to_string(::getpid()) + "\n";
    HEADROOM_CHECK(::ftruncate(fd_, 0) == 0 && ::pwrite(fd_, pid.data(), pid.size(), 0) == ssize_t(pid.size()),
                   "[train] cannot write ", path_, ": ", std::strerror(errno));
  }
  ~RunFolderLock() { ::close(fd_); }
  RunFolderLock(const RunFolderLock&) = delete;
  RunFolderLock& operator=(const RunFolderLock&) = delete;

 private:
  // The pid the holder wrote, or "unknown" (it may not have written it yet).
  std::string read_holder() const {
    char text[32] = {};
    const ssize_t bytes = ::pread(fd_, text, sizeof text - 1, 0);
    const std::string pid = bytes > 0 ? std::string(text, size_t(bytes)) : "";
    const size_t end = pid.find('\n');
    return end == std::string::npos || end == 0 ? "unknown" : pid.substr(0, end);
  }

  std::string path_;
  int fd_ = -1;
};

// --resume appends to log.jsonl, which must be this run's history up to the
// checkpoint: its train lines one per step, ending at or past `step`.  The
// lines past it (steps run after the checkpoint by the process that stopped)
// are dropped by JsonlLog; this says so.
void check_resumed_log(const std::string& dir, int64_t step) {
  const std::string path = dir + "/log.jsonl";
  std::error_code ignored;
  if (!std::filesystem::exists(path, ignored)) {
    std::printf("note: %s is missing; a new log starts at step %lld\n", path.c_str(), (long long)step + 1);
    return;
  }
  std::vector<int64_t> steps;
  for (const auto& row : read_jsonl_numbers(path, "train"))
    for (const auto& [key, value] : row)
      if (key == "step") steps.push_back(int64_t(value));
  for (size_t i = 1; i < steps.size(); ++i)
    HEADROOM_CHECK(steps[i] == steps[i - 1] + 1, "[train] ", path, " is not one run's history: its train line of step ",
                   steps[i], " follows step ", steps[i - 1],
                   " (two runs wrote to it, or it was edited); move it aside to resume with a new log");
  const int64_t last = steps.empty() ? 0 : steps.back();
  HEADROOM_CHECK(last >= step, "[train] ", path, " ends at step ", last, ", before the checkpoint's step ", step,
                 " (it is not this run's log, or it was cut); move it aside to resume with a new log");
  if (last > step)
    std::printf(
        "note: %s goes on to step %lld, past the checkpoint at step %lld; those %lld steps are dropped from "
        "it and trained again\n",
        path.c_str(), (long long)last, (long long)step, (long long)(last - step));
}

// "; the checkpoint before it is kept as DIR/checkpoint.prev.safetensors: ...", when there is one.
std::string previous_note(const std::string& dir) {
  std::error_code ignored;
  if (!std::filesystem::is_regular_file(previous_checkpoint_path(dir), ignored)) return "";
  return "; the checkpoint before it is kept as " + previous_checkpoint_path(dir) + ": copy it over " +
         checkpoint_path(dir) + " to go on from there";
}

// A checkpoint that cannot be read names the one kept before it, if any.
// `load`: load_safetensors, or load_safetensors_header for its settings alone.
SafetensorsFile load_checkpoint_file(const std::string& dir,
                                     SafetensorsFile (*load)(const std::string&) = load_safetensors) {
  try {
    return load(checkpoint_path(dir));
  } catch (const Error& error) {
    const std::string previous = previous_note(dir);
    if (previous.empty()) throw;
    HEADROOM_FAIL(error.what(), previous);
  }
}

// A run resumed at or past --steps has nothing to train.
void check_steps_left(int64_t saved_step, const TrainOptions& o, const std::string& path) {
  HEADROOM_CHECK(saved_step < o.steps, "[train] checkpoint ", path, " is at step ", saved_step, " and --steps is ",
                 o.steps,
                 ": the run is complete; raise --steps (or --epochs) to train on, or use --eval-only to "
                 "evaluate it");
}

// A training checkpoint, whose header and data both checksums cover: without
// them an edit of a header entry (train.step, model.activation) would load.
void check_checkpoint(const SafetensorsFile& file) {
  HEADROOM_CHECK(metadata_entry(file.metadata, "format", file.path) == kFormat, "[train] ", file.path,
                 " is not a headroom training checkpoint");
  HEADROOM_CHECK(file.checksummed, "[train] ", file.path,
                 " is a headroom training checkpoint without the checksums save_safetensors writes "
                 "(headroom.data_crc32 and headroom.header_crc32): one was deleted, so its header or data may "
                 "have been edited unseen; it is refused");
}

// Restores model, optimizer and generator; returns the step to continue from.
int64_t resume_checkpoint(TrainTask& task, Optimization& optimization, const TrainOptions& o) {
  const std::string path = checkpoint_path(o.ckpt_dir);
  SafetensorsFile file = load_checkpoint_file(o.ckpt_dir);
  const StringMap& metadata = file.metadata;
  check_checkpoint(file);
  HEADROOM_CHECK(ModelConfig::from_checkpoint_metadata(metadata, path) == task.config(), "[train] checkpoint ", path,
                 " was made with another model config; start a new --ckpt directory or pass the same flags");
  const int64_t step = metadata_int(metadata, "train.step", path, 0, std::numeric_limits<int64_t>::max());
  const uint64_t seed = metadata_uint64(metadata, "train.seed", path);
  if (o.resume) {
    HEADROOM_CHECK(seed == o.seed, "[train] checkpoint ", path, " was made with --seed ", seed, ", not ", o.seed,
                   "; pass --seed ", seed, " to resume it");
    check_steps_left(step, o, path);
  }
  NamedTensors model_entries, optimizer_entries;
  for (auto& entry : file.tensors)
    (is_optimizer_entry(entry.first) ? optimizer_entries : model_entries).push_back(entry);
  check_finite_tensors(
      file.tensors, step,
      " in the checkpoint " + path + ": it cannot be resumed or evaluated" + previous_note(o.ckpt_dir));
  task.model().load_state_dict(model_entries);
  optimization.load_state(optimizer_entries);
  task.model_generator().set_state(metadata_uint64(metadata, "train.generator_seed", path),
                                   metadata_uint64(metadata, "train.generator_offset", path));
  return step;
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
    line << " " << name << " " << format_metric(name, value);
  }
  log.write(fields);
  if (!quiet) std::printf("%s\n", line.str().c_str());
}

// The stop for a NaN or infinite loss, gradient norm or validation metric:
// nothing of this step is applied or saved.
void check_finite(double value, const std::string& what, int64_t step, const std::string& stop) {
  HEADROOM_CHECK(std::isfinite(value), "[train] the ", what, " is ", value, " at step ", step, stop);
}

void check_metrics(const Metrics& metrics, int64_t step, const std::string& stop) {
  for (const auto& [name, value] : metrics) check_finite(value, "validation " + name, step, stop);
}

// ---- the loop ----------------------------------------------------------------------
// Every checkpoint step is an evaluation step, and a checkpoint is written
// only when that evaluation and every saved tensor are finite: each
// checkpoint kept is one that evaluates finite, even after a divergence.
class TrainingLoop {
 public:
  TrainingLoop(TrainTask& task, Optimization& optimization, DataParallel& parallel, const TrainOptions& o,
               JsonlLog& log, TrainResult& result)
      : task_(task),
        optimization_(optimization),
        parallel_(parallel),
        o_(o),
        log_(log),
        result_(result),
        schedule_{o.warmup, o.steps, o.min_lr_ratio},
        progress_(result.first_step, o.steps, task.unit(), o.log_every, !o.quiet && parallel.rank() == 0),
        saved_step_(o.resume ? result.first_step : -1) {}

  void run() {
    InterruptScope interrupt_scope;
    Backend& memory = backend(task_.model().device());
    memory.reset_peak_memory();
    auto start = std::chrono::steady_clock::now();
    task_.model().train();
    for (int64_t step = result_.first_step; step < o_.steps && !result_.interrupted; ++step) {
      train_step(step);
      auto side_work = std::chrono::steady_clock::now();
      evaluate_and_save(step + 1);
      progress_.exclude(seconds_since(side_work));
    }
    result_.seconds = seconds_since(start);
    result_.items_per_second = progress_.items_per_second();
    result_.peak_bytes = memory.memory_stats().peak_bytes;
    // What this call's training measured, for a later reader of the finished run (compare --resume).
    if (!result_.interrupted)
      log_.write({{"type", std::string("summary")},
                  {"step", result_.last_step},
                  {"items_per_second", result_.items_per_second},
                  {"training_seconds", result_.seconds},
                  {"peak_bytes", int64_t(result_.peak_bytes)},
                  {"communication_seconds", result_.communication_seconds}});
    if (!result_.interrupted || parallel_.rank() != 0) return;
    progress_.finish();
    std::printf("interrupted at step %lld%s%s\n", (long long)result_.last_step,
                o_.ckpt_dir.empty() ? "" : "; checkpoint written to ", o_.ckpt_dir.c_str());
  }

 private:
  std::string stop() const { return stop_note(o_, saved_step_); }

  // What the ranks' step outputs add up to; in one process, the step's own.
  struct StepTotals {
    double loss;     // the task loss of the global batch
    double items;    // its tokens or images
    bool interrupt;  // Ctrl-C reached some rank: all stop after this step
  };

  StepTotals sum_over_ranks(const StepOutput& out) {
    const double weight = double(out.items), interrupt = interrupt_requested ? 1 : 0;  // read once
    if (parallel_.size() == 1) return {out.task_loss, weight, interrupt > 0};
    const std::vector<double> sums = parallel_.sum({out.task_loss * weight, weight, interrupt});
    return {sums[0] / sums[1], sums[1], sums[2] > 0};
  }

  void train_step(int64_t step) {
    const int64_t global_rows = task_.batch_rows(step);
    const BatchSlice rows = parallel_.slice(global_rows);
    StepOutput out;
    {
      RowShareScope share(task_.model_generator(), rows, global_rows);
      optimization_.begin(step);
      out = task_.step(step, rows);
    }
    auto communication = std::chrono::steady_clock::now();
    const StepTotals totals = sum_over_ranks(out);
    double communication_seconds = seconds_since(communication);
    check_finite(totals.loss, "loss", step, stop());
    out.loss.backward();
    communication = std::chrono::steady_clock::now();
    parallel_.synchronize_gradients(double(out.items));
    result_.communication_seconds += communication_seconds + seconds_since(communication);
    // The schedule at the steps done after this one: warm-up's first step
    // trains at lr / warmup instead of 0, and the last one at the final rate.
    const double lr_factor = schedule_.factor(step + 1);
    check_finite(optimization_.finish(lr_factor), "gradient norm", step, stop());
    result_.train_loss.push_back(totals.loss);
    result_.last_step = step + 1;
    result_.interrupted = totals.interrupt;
    std::vector<JsonField> fields{
        {"type", std::string("train")}, {"step", step + 1}, {"loss", totals.loss}, {"lr", o_.lr * lr_factor}};
    if (!optimization_.block(step).empty()) fields.emplace_back("block", optimization_.block(step));
    log_.write(fields);
    progress_.update(step + 1, {{"loss", totals.loss}, {"lr", o_.lr * lr_factor}}, int64_t(totals.items));
  }

  // done: the steps taken so far.
  void evaluate_and_save(int64_t done) {
    const bool last = done == o_.steps;
    const bool save =
        !o_.ckpt_dir.empty() && (last || result_.interrupted || (o_.ckpt_every > 0 && done % o_.ckpt_every == 0));
    if (!save && !last && !(o_.eval_every > 0 && done % o_.eval_every == 0)) return;
    progress_.finish();
    result_.eval = evaluate(task_);
    log_eval(log_, done, result_.eval, o_.quiet || parallel_.rank() != 0);
    check_metrics(result_.eval, done, stop());
    if (!save) return;
    parallel_.check_parameters_identical();
    save_checkpoint(task_, optimization_, o_, done, stop(), parallel_.rank() == 0);
    saved_step_ = done;
  }

  TrainTask& task_;
  Optimization& optimization_;
  DataParallel& parallel_;
  const TrainOptions& o_;
  JsonlLog& log_;
  TrainResult& result_;
  WarmupCosine schedule_;
  Progress progress_;
  int64_t saved_step_;
};

}  // namespace

std::shared_ptr<void> hold_run_folder(const std::string& dir) {
  static std::map<std::string, std::weak_ptr<RunFolderLock>> held;  // this process's holds, by folder
  make_run_directory(dir);  // so that its canonical path names it however `dir` is spelt
  std::error_code ignored;
  const std::string key = std::filesystem::canonical(dir, ignored).string();
  if (auto lock = held[key].lock()) return lock;
  auto lock = std::make_shared<RunFolderLock>(dir);
  held[key] = lock;
  return lock;
}

StringMap read_checkpoint_metadata(const std::string& ckpt_dir) {
  SafetensorsFile file = load_checkpoint_file(ckpt_dir, load_safetensors_header);  // the tensors are not read
  check_checkpoint(file);
  return file.metadata;
}

StringMap task_metadata(const StringMap& metadata) {
  StringMap task;
  for (const auto& [key, value] : metadata)
    if (key.rfind("task.", 0) == 0) task[key.substr(5)] = value;
  return task;
}

bool writes_run_files(const TrainOptions& o) {
  return !o.ckpt_dir.empty() && !o.eval_only && (!o.communicator || o.communicator->rank() == 0);
}

void check_run_directory(const TrainOptions& o) {
  if (o.resume || o.overwrite || !writes_run_files(o)) return;
  std::string held;
  for (const std::string& file : run_files(o.ckpt_dir)) {
    std::error_code ignored;
    if (std::filesystem::exists(file, ignored))
      held += (held.empty() ? "" : ", ") + std::filesystem::path(file).filename().string();
  }
  if (!held.empty())
    throw UsageError("the run folder " + o.ckpt_dir + " already holds a run (" + held +
                     ") that this fresh run would overwrite; pass --resume to continue it, --overwrite to replace "
                     "it (its checkpoints and log are deleted), or another folder");
}

std::string checkpoint_path(const std::string& ckpt_dir) { return ckpt_dir + "/checkpoint.safetensors"; }

std::string previous_checkpoint_path(const std::string& ckpt_dir) { return ckpt_dir + "/checkpoint.prev.safetensors"; }

std::string crc32_text(const std::vector<std::pair<const void*, size_t>>& parts) {
  uint32_t crc = 0;
  for (const auto& [data, bytes] : parts) crc = crc32_update(crc, data, bytes);
  char text[24];
  std::snprintf(text, sizeof text, "CRC-32 %08x", crc);
  return text;
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
  flags.add("overwrite", &o.overwrite, "a fresh run replaces the run --ckpt holds (deletes its checkpoints and log)");
  flags.add("eval-only", &o.eval_only, "load --ckpt's checkpoint, evaluate and stop");
  flags.add("seed", &o.seed, "seeds initialisation, data order, dropout and sampling", {0, UINT64_MAX});
  flags.add("threads", &o.threads, "CPU threads (0: HEADROOM_NUM_THREADS or all cores)", {0, kMaxThreads});
  flags.add("device", &o.device, "cpu, cuda or cuda:N (data is loaded on the CPU)");
  flags.add("tf32", &o.tf32, "CUDA: TF32 tensor-core matmuls (faster, less precise)");
  flags.add("max-memory", &o.max_memory, "refuse a run estimated to need more, e.g. 4GiB");
  flags.describe_default("max-memory", "MemAvailable of /proc/meminfo on the CPU, none on CUDA");
  // The defaults settle_schedule derives from --steps, as a run at the default --steps uses them.
  flags.describe_default("warmup", std::to_string(std::min(o.warmup, o.steps / 10)) + ": a tenth of --steps, at most " +
                                       std::to_string(o.warmup));
  flags.describe_default("eval-every", std::to_string(std::min(o.eval_every, std::max<int64_t>(1, o.steps / 5))) +
                                           ": a fifth of --steps, at most " + std::to_string(o.eval_every));
}

void settle_schedule(const Flags* flags, TrainOptions& o) {
  if (flags != nullptr && !flags->is_settled("warmup")) o.warmup = std::min(o.warmup, o.steps / 10);
  if (flags != nullptr && !flags->is_settled("eval-every"))
    o.eval_every = std::min(o.eval_every, std::max<int64_t>(1, o.steps / 5));
  const std::string steps = " --steps " + std::to_string(o.steps);
  if (o.warmup >= o.steps)
    throw UsageError("--warmup " + std::to_string(o.warmup) + " must be below" + steps +
                     " (the cosine decay follows the warm-up)");
  if (o.eval_every > o.steps)
    throw UsageError("--eval-every " + std::to_string(o.eval_every) + " is past" + steps +
                     ": the run would evaluate only at its end; pass --eval-every 0 for that");
}

void settle_train_options(const Flags& flags, TrainOptions& o) {
  // train_vit's --epochs sets the steps once the data is read; run_vit settles the schedule then.
  const bool steps_from_epochs = flags.declares("epochs") && flags.value("epochs") != "0";
  if (steps_from_epochs && flags.was_set("steps"))
    throw UsageError("--epochs " + flags.value("epochs") + " sets the number of steps; drop --steps " +
                     std::to_string(o.steps));
  if (!steps_from_epochs) settle_schedule(&flags, o);
  check_run_mode(o);
  if (!o.max_memory.empty() && !parse_byte_size(o.max_memory))
    throw UsageError(
        "--max-memory expects a size such as 4GiB, 512MiB or 1000000 (bytes; units B, KiB, MiB, GiB, "
        "TiB), got '" +
        o.max_memory + "'");
}

namespace {

// The flags of one invocation, the model's (the checkpoint's config holds
// it) and the lengths the model fixes (settle_trained_value): not run settings.
const std::set<std::string> kNotRunSettings{
    "ckpt",  "resume",   "overwrite",  "eval-only",  "device",   "tf32",     "max-memory", "log-every",
    "attn",  "attn-opt", "attn-set",   "dim",        "heads",    "layers",   "ffn",        "dropout",
    "patch", "context",  "max-tokens", "image-size", "channels", "generate", "prompt",     "temperature",
    "top-k", "task",     "methods",    "seeds",      "out"};

// Run settings a resumed run keeps: another value would make it another run
// (other batches, data, blocks), not the same run continued.
const std::set<std::string> kFixedSettings{"seed",         "batch",       "data",       "images",    "valid-fraction",
                                           "valid-images", "valid-pairs", "test-pairs", "max-bytes", "bpe-merges",
                                           "bcd-warm",     "bcd-f",       "bcd-g",      "mae-joint"};

// The settings that shape the learning-rate schedule.
const std::set<std::string> kScheduleSettings{"steps", "warmup", "lr", "min-lr-ratio"};

// A given setting whose value differs from the run's.
struct SettingChange {
  std::string name, given, stored;
};

// The learning rate of step `step` (counted from 1) under the schedule of `o`.
double scheduled_lr(const TrainOptions& o, int64_t step) {
  return o.lr * WarmupCosine{o.warmup, o.steps, o.min_lr_ratio}.factor(std::min(step, o.steps));
}

// What a changed schedule does from the step after the checkpoint.
void print_schedule_note(const TrainOptions& before, const TrainOptions& after, int64_t step) {
  const std::string ended =
      step + 1 > before.steps ? " (its final rate: it ended at step " + std::to_string(before.steps) + ")" : "";
  std::printf(
      "note: the learning rate of step %lld is %.4g under the new schedule (warm-up %lld, cosine decay to "
      "%.4g at step %lld), where the run's schedule gave %.4g%s\n",
      (long long)step + 1, scheduled_lr(after, step + 1), (long long)after.warmup, after.lr * after.min_lr_ratio,
      (long long)after.steps, scheduled_lr(before, step + 1), ended.c_str());
}

// A --steps given to --resume that does not reach past the checkpoint's step.
[[noreturn]] void refuse_steps_not_past(const TrainOptions& o, int64_t saved_step) {
  throw UsageError("--steps " + std::to_string(o.steps) + " is not past the checkpoint " + checkpoint_path(o.ckpt_dir) +
                   " at step " + std::to_string(saved_step) +
                   ": pass more steps to train on, or --eval-only to evaluate it");
}

// --resume: refuses a change that makes another run, notes each other one.
void apply_resume_changes(const std::vector<SettingChange>& changes, Flags& settings, const TrainOptions& o,
                          int64_t step, const std::string& path) {
  bool schedule_changed = false;
  for (const SettingChange& change : changes) {
    if (change.name == "steps" && o.steps <= step) refuse_steps_not_past(o, step);
    if (kFixedSettings.count(change.name))
      throw UsageError("--" + change.name + " " + change.given + " differs from the run's " + change.stored + " in " +
                       path + ": a resumed run keeps its --" + change.name +
                       " (another value would make it another run); drop the flag, or start a new run in another "
                       "--ckpt folder");
    schedule_changed = schedule_changed || kScheduleSettings.count(change.name);
    std::printf("note: --%s %s replaces the run's %s from step %lld on\n", change.name.c_str(), change.given.c_str(),
                change.stored.c_str(), (long long)step + 1);
  }
  if (!schedule_changed) return;
  for (const SettingChange& change : changes) settings.restore(change.name, change.stored);
  const TrainOptions before = o;
  for (const SettingChange& change : changes) settings.restore(change.name, change.given);
  print_schedule_note(before, o, step);
}

}  // namespace

void restore_setting(Flags& flags, const std::string& name, const std::string& text, const std::string& what) {
  try {
    flags.restore(name, text);
  } catch (const UsageError& error) {
    HEADROOM_FAIL(what, " = '", text, "' is not a value the flag takes: ", error.what());
  }
}

bool is_run_setting(const std::string& name) { return kNotRunSettings.count(name) == 0; }

int64_t settle_resumed_settings(const Flags& given, Flags& settings, const TrainOptions& o) {
  check_run_mode(o);
  if (!o.resume && !o.eval_only) return -1;
  const std::string path = checkpoint_path(o.ckpt_dir);
  const StringMap metadata = read_checkpoint_metadata(o.ckpt_dir);
  const int64_t step = metadata_int(metadata, "train.step", path, 0, std::numeric_limits<int64_t>::max());
  std::vector<SettingChange> changes;
  for (const auto& [key, stored] : metadata) {
    if (key.rfind("run.", 0) != 0) continue;
    const std::string name = key.substr(4);
    if (!settings.declares(name) || !is_run_setting(name)) {
      std::printf("note: %s stores a setting --%s, which %s does not have; it is not used\n", path.c_str(),
                  name.c_str(), given.program().c_str());
    } else if (name == "epochs" && given.was_set("steps") && !given.was_set("epochs") && stored != "0") {
      std::printf("note: --steps %s replaces the run's --epochs %s\n", given.value("steps").c_str(), stored.c_str());
      restore_setting(settings, name, "0", "[checkpoint] " + path + ": its setting run." + name);
    } else if (!given.was_set(name)) {
      restore_setting(settings, name, stored, "[checkpoint] " + path + ": its setting run." + name);
    } else if (settings.value(name) != stored) {
      changes.push_back({name, settings.value(name), stored});
    }
  }
  if (o.resume) {
    apply_resume_changes(changes, settings, o, step, path);
    return step;
  }
  for (const SettingChange& change : changes)
    std::printf("note: --%s %s differs from the run's %s; evaluating with %s\n", change.name.c_str(),
                change.given.c_str(), change.stored.c_str(), change.given.c_str());
  return step;
}

bool resumed_run_is_finished(const Flags& given, const TrainOptions& o, int64_t saved_step) {
  if (!o.resume || saved_step < o.steps) return false;
  if (given.declares("epochs") && given.was_set("epochs")) return false;  // the steps follow from the data (run_vit)
  if (given.was_set("steps")) refuse_steps_not_past(o, saved_step);
  std::printf(
      "the run in %s is finished: its checkpoint is at step %lld of %lld. Pass --steps above %lld (or more "
      "--epochs) with --resume to train it further, or --eval-only to evaluate it.\n",
      o.ckpt_dir.c_str(), (long long)saved_step, (long long)o.steps, (long long)saved_step);
  return true;
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

namespace {

using FlagValues = std::map<std::string, std::string>;

// The flags that act on training alone: --eval-only has no use for them.
const std::set<std::string> kTrainingOnly{
    "steps", "warmup", "lr",        "min-lr-ratio", "weight-decay", "clip",      "gate-lr", "bcd-warm",
    "bcd-f", "bcd-g",  "mae-joint", "eval-every",   "ckpt-every",   "log-every", "epochs",  "label-smoothing"};

// The model flags, whose rows a run from a checkpoint replaces with the checkpoint's model.
const std::set<std::string> kModelFlags{"attn",   "attn-opt", "attn-set", "dim",  "heads",
                                        "layers", "ffn",      "dropout",  "patch"};

// The value of `--flag`; a flag a binary lacks reads as empty.
std::string value_of(const FlagValues& values, const std::string& flag) {
  auto found = values.find(flag);
  return found == values.end() ? std::string() : found->second;
}

// Why `--name` has no effect on this run, from the values of all flags, or
// "" when it has one: MAE's BCD flags need an MAE model, the sampling flags
// --generate, --tf32 a GPU, --attn and --ckpt a run without compare's
// --methods, and so on.  The one list of what applies: run_config_table
// leaves these flags out, check_flags_apply refuses them when given.
std::string ignored_because(const std::string& name, const FlagValues& values) {
  auto value = [&](const std::string& flag) { return value_of(values, flag); };
  static const std::set<std::string> mae_flags{"gate-lr", "bcd-warm", "bcd-f", "bcd-g", "mae-joint"};
  static const std::set<std::string> sampling_flags{"prompt", "temperature", "top-k"};
  // With --resume or --eval-only the checkpoint sets the model, which may be MAE whatever --attn says.
  const bool model_from_checkpoint = value("resume") == "true" || value("eval-only") == "true";
  const bool mae = (value("attn") + "," + value("attn-set") + "," + value("methods")).find("mae") != std::string::npos;
  if (mae_flags.count(name) && !mae && !model_from_checkpoint)
    return "it sets MAE's training, and no layer is MAE (--attn mae, or mae in --attn-set or --methods)";
  if (value("eval-only") == "true" && kTrainingOnly.count(name))
    return "it shapes training, and --eval-only evaluates the checkpoint without training";
  if (name == "seed" && value("eval-only") == "true" && (value("generate").empty() || value("generate") == "0"))
    return "--eval-only draws nothing at random (the seed seeds --generate's sampling)";
  if (sampling_flags.count(name) && value("generate") == "0")
    return "it shapes the sample of --generate N, and --generate is 0 (no sample)";
  // compare: --methods sets each run's attention and --out its folder.
  if ((name == "attn" || name == "attn-opt" || name == "ckpt") && !value("methods").empty())
    return "--methods sets the attention, --out the folder";
  if (name == "tf32" && value("device") == "cpu") return "it is a CUDA setting, and --device is cpu";
  if (name == "length-penalty" && value("beam") == "1") return "it scores beam search, and --beam 1 decodes greedily";
  if (name == "ckpt-every" && value("ckpt").empty() && value("methods").empty())
    return "there is no --ckpt folder to write checkpoints to";
  if (name == "overwrite" && value("resume") == "true") return "--resume continues the run that it would replace";
  if (name == "overwrite" && value("eval-only") == "true") return "--eval-only writes no run";
  if ((name == "image-size" || name == "channels") && value("images").empty())
    return "it sets how --images folders are read, and the IDX files of --data have their own";
  if (name == "valid-images" && !value("images").empty())
    return "--images splits its validation images off by itself (10%)";
  if (name == "data" && !value("images").empty()) return "--images is read instead";
  return "";
}

// Whether `--name` is shown in the config table: it applies, and a text flag
// is set, a switch on, --generate above 0.
bool applies(const std::string& name, const FlagValues& values) {
  const std::string value = value_of(values, name);
  if (value.empty() || !ignored_because(name, values).empty()) return false;
  if (name == "generate") return value != "0";
  if (name == "resume" || name == "eval-only" || name == "overwrite") return value == "true";
  return true;
}

}  // namespace

void check_flags_apply(const Flags& flags) {
  const std::vector<std::pair<std::string, std::string>> all = flags.values();
  const FlagValues values(all.begin(), all.end());
  for (const auto& [name, value] : all) {
    const std::string reason = flags.was_set(name) ? ignored_because(name, values) : "";
    if (!reason.empty()) throw UsageError("--" + name + " does not apply to " + flags.program() + ": " + reason);
  }
}

std::string run_config_table(const Flags& flags, const TrainOptions& options,
                             const std::vector<std::pair<std::string, std::string>>& extra) {
  const std::vector<std::pair<std::string, std::string>> all = flags.values();
  const FlagValues values(all.begin(), all.end());
  const bool model_from_checkpoint = options.resume || options.eval_only;
  std::vector<std::pair<std::string, std::string>> rows;
  for (const auto& row : all)
    if (applies(row.first, values) && !(model_from_checkpoint && kModelFlags.count(row.first))) rows.push_back(row);
  if (training_device(options.device).is_cuda()) rows.emplace_back("cuda", device_summary(Device::Kind::cuda));
  rows.insert(rows.end(), extra.begin(), extra.end());
  return config_table(rows);
}

namespace {

// The memory a run may take, and where that figure comes from; 0 bytes: not known.
struct MemoryLimit {
  double bytes = 0;
  std::string source;
};

MemoryLimit memory_limit(const TrainOptions& o) {
  if (!o.max_memory.empty()) return {double(*parse_byte_size(o.max_memory)), "--max-memory " + o.max_memory};
  if (!Device::parse(o.device).is_cpu()) return {};
  std::ifstream meminfo("/proc/meminfo");
  for (std::string line; std::getline(meminfo, line);)
    if (line.rfind("MemAvailable:", 0) == 0) {
      double kib = 0;
      std::istringstream(line.substr(13)) >> kib;
      return {kib * 1024, "MemAvailable in /proc/meminfo"};
    }
  return {};
}

std::string describe_estimate(const MemoryEstimate& e) {
  const std::string data = e.data > 0 ? ", data " + format_mib(e.data) : "";
  return format_mib(e.total()) + " (weights " + format_mib(e.weights) + ", gradients and AdamW moments " +
         format_mib(e.optimizer) + ", activations of " + e.activations_of + " " + format_mib(e.activations) + data +
         "; an estimate)";
}

// "moh shared_heads=2,routed_k=4, dim 128, 8 heads, 2 decoder layers, ffn 512, dropout 0": the model a
// checkpoint holds (per-layer or per-role attention choices follow as "attention.<key>=<value>").
std::string describe_model(const ModelConfig& c) {
  std::ostringstream text;
  text << c.attention.type;
  std::string options;
  for (const auto& [key, value] : c.attention.options) options += (options.empty() ? "" : ",") + key + "=" + value;
  if (!options.empty()) text << " " << options;
  text << ", dim " << c.dim << ", " << c.heads << " heads";
  if (c.encoder_layers > 0) text << ", " << c.encoder_layers << " encoder layers";
  if (c.decoder_layers > 0) text << ", " << c.decoder_layers << " decoder layers";
  text << ", ffn " << c.ffn_hidden << ", dropout " << c.dropout;
  for (const auto& [key, value] : c.to_metadata()) {
    const bool base_attention = key == "attention.type" || key.rfind("attention.option.", 0) == 0;
    if (key.rfind("attention.", 0) == 0 && !base_attention) text << ", " << key << "=" << value;
  }
  return text.str();
}

}  // namespace

void start_run(const TrainOptions& o, const ModelConfig& config, const MemoryEstimate& estimate) {
  training_device(o.device);
  const MemoryLimit limit = memory_limit(o);
  const std::string text = describe_estimate(estimate) +
                           (limit.bytes > 0 ? " of " + format_mib(limit.bytes) + " (" + limit.source + ")" : "");
  std::vector<std::pair<std::string, std::string>> rows;
  if (o.resume || o.eval_only) rows.emplace_back("model (the checkpoint's)", describe_model(config));
  rows.emplace_back("memory estimate", text);
  if (o.config_flags != nullptr) std::printf("%s\n", run_config_table(*o.config_flags, o, rows).c_str());
  else if (!o.quiet) std::printf("memory estimate: %s\n", text.c_str());
  if (limit.bytes > 0 && estimate.total() > limit.bytes)
    throw UsageError("the run needs about " + describe_estimate(estimate) + ", more than the " +
                     format_mib(limit.bytes) + " of " + limit.source +
                     "; lower --batch, the sequence length or the model size, or set the limit with --max-memory");
}

namespace {

// What the ranks of a data-parallel run must agree on: every option but
// the device, threads and quiet (each rank's own), the model config, the
// task's metadata and the step's batch.
std::string run_settings(TrainTask& task, const TrainOptions& o, int64_t first_step) {
  std::ostringstream text;
  text << "steps " << o.steps << " warmup " << o.warmup << " lr " << o.lr << " min_lr_ratio " << o.min_lr_ratio
       << " weight_decay " << o.weight_decay << " clip " << o.clip << " gate_lr " << o.gate_lr << " bcd " << o.bcd_warm
       << "/" << o.bcd_f << "/" << o.bcd_g << " mae_joint " << o.mae_joint << " eval_every " << o.eval_every
       << " ckpt_every " << o.ckpt_every << " ckpt " << o.ckpt_dir << " resume " << o.resume << " eval_only "
       << o.eval_only << " seed " << o.seed << " tf32 " << o.tf32 << " from step " << first_step << " batch "
       << task.batch_rows(first_step) << "\n";
  for (const auto& [key, value] : task.config().to_metadata()) text << key << "=" << value << "\n";
  for (const auto& [key, value] : task.metadata()) text << "task." << key << "=" << value << "\n";
  return text.str();
}

}  // namespace

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
  const auto communicator = o.communicator ? o.communicator : std::make_shared<LocalCommunicator>();
  if (communicator->size() > 1) {
    check_same_on_every_rank(*communicator, "run settings (options, model config, task data)",
                             run_settings(task, o, result.first_step));
    const std::string data = task.data_digest();
    check_same_on_every_rank(*communicator,
                             "training data (this rank's: " + data + "; is --data the same on every rank?)", data);
  }
  DataParallel parallel(task.model(), communicator);
  result.ranks = parallel.size();
  const bool lead = parallel.rank() == 0;  // prints; it alone writes files too (writes_run_files)
  if (o.resume && !o.quiet && lead)
    std::printf("resumed from step %lld of %lld (%s)\n", (long long)result.first_step, (long long)o.steps,
                checkpoint_path(o.ckpt_dir).c_str());
  const bool logging = writes_run_files(o);
  const std::shared_ptr<void> folder = logging ? hold_run_folder(o.ckpt_dir) : nullptr;
  if (logging) start_run_directory(o);
  if (logging && o.resume) check_resumed_log(o.ckpt_dir, result.first_step);
  JsonlLog log = logging ? JsonlLog(o.ckpt_dir + "/log.jsonl", o.resume ? result.first_step : 0) : JsonlLog();
  if (o.eval_only) {
    // The evaluation's time and memory; throughput stays 0 (none): it is not training.
    Backend& memory = backend(device);
    memory.reset_peak_memory();
    auto start = std::chrono::steady_clock::now();
    result.eval = evaluate(task);
    result.seconds = seconds_since(start);
    result.peak_bytes = memory.memory_stats().peak_bytes;
    log_eval(log, result.first_step, result.eval, o.quiet || !lead);
    check_metrics(result.eval, result.first_step,
                  " in " + checkpoint_path(o.ckpt_dir) + " (--eval-only): this checkpoint does not evaluate finite");
    return result;
  }
  TrainingLoop(task, optimization, parallel, o, log, result).run();
  return result;
}

}  // namespace headroom::examples
