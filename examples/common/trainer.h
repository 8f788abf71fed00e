#pragma once
// The training loop the three binaries share: AdamW with warm-up + cosine
// decay and gradient clipping (or MAE's block coordinate descent with two
// AdamW optimizers), periodic evaluation, a progress line, a JSONL log,
// atomic checkpoints every N steps and on Ctrl-C, exact resume, and a stop
// with a message on a NaN or infinite loss, gradient norm or validation
// metric.
//
// A task owns the model and the data; the loop owns everything else:
//
//   struct MyTask : TrainTask { ... };       // step(), evaluate(), model()
//   TrainOptions options;                    // or add_train_flags(flags, options)
//   TrainResult result = train(task, options);
//
// Exact resume rests on three rules: a task's batch for step s is a pure
// function of (seed, s) (no data cursor to save); every random draw of the
// model (dropout, MoA noise, MAE's sampled experts) comes from the task's
// model generator, whose state the checkpoint stores; the learning rate and
// the BCD block are functions of the step.  So a run stopped at step s and
// resumed computes the same steps s+1, ... as one that never stopped.
//
// Data-parallel training (TrainOptions::communicator, docs/distributed.md):
// every rank builds the same global batch and computes its own slice of
// rows, drawing the slice's share of the model generator (RowShareScope);
// gradients are averaged over the ranks, weighted by their items, before
// clipping and the update.  The ranks' run settings are compared at the
// start, their parameters at every checkpoint; every rank evaluates, and
// rank 0 alone prints, logs and writes checkpoints.  So a run on N ranks
// trains as one process on the same global batch, up to the order of
// floating-point sums, and its checkpoints resume on any number of ranks.
//
// A checkpoint (DIR/checkpoint.safetensors) holds the model's state_dict, the
// optimizer state ("optim." entries; MAE's BCD: "expert.optim." and
// "gate.optim."), and in the metadata the model config, the task's own
// entries (e.g. its tokenizer), the step, the seed and the generator state;
// every entry is required on resume.  Each checkpoint step is also an
// evaluation step, and a checkpoint is written only when that evaluation and
// every saved tensor are finite, so a run that diverges keeps checkpoints
// that evaluate finite.  The one it replaces is kept as
// DIR/checkpoint.prev.safetensors.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "headroom/core/communicator.h"
#include "headroom/core/rng.h"
#include "headroom/core/tensor.h"
#include "headroom/examples/common/cli.h"
#include "headroom/models/config.h"
#include "headroom/models/data_parallel.h"
#include "headroom/models/module.h"

namespace headroom::examples {

struct TrainOptions {
  int64_t steps = 1000;
  int64_t warmup = 100;  // steps 1..warmup train at lr · step / warmup, then a cosine decay to min_lr_ratio · lr
  double lr = 1e-3;
  double min_lr_ratio = 0.1;
  double weight_decay = 0.01;  // AdamW, decoupled
  double clip = 1.0;           // global gradient-norm clip (0: none)
  double gate_lr = 0;          // MAE gate learning rate under BCD (0: same as lr)
  int64_t bcd_warm = 0;        // MAE: plain-MHA updates before the first BCD block
  int64_t bcd_f = 100;         // MAE: expert (F) updates per block
  int64_t bcd_g = 100;         // MAE: gate (G) updates per block
  bool mae_joint = false;      // MAE: joint training instead of BCD (the NoBCD ablation)
  int64_t eval_every = 250;    // 0: only at the end
  int64_t ckpt_every = 500;    // with --ckpt; also at the end and on Ctrl-C
  int64_t log_every = 10;      // progress lines when stdout is not a terminal
  std::string ckpt_dir;        // empty: no checkpoints
  bool resume = false;         // continue from ckpt_dir/checkpoint.safetensors
  bool overwrite = false;      // a fresh run replaces the run ckpt_dir holds (check_run_directory)
  bool eval_only = false;      // load the checkpoint, evaluate, stop
  uint64_t seed = 1;
  int threads = 0;             // 0: HEADROOM_NUM_THREADS or all cores
  std::string device = "cpu";  // cpu, cuda or cuda:N: the model and every batch go there
  bool tf32 = false;           // CUDA: TF32 tensor-core matmuls (faster, ~1e-3 relative error)
  bool quiet = false;          // no progress lines (compare runs many models)
  std::string max_memory;      // a run estimated to need more is refused ("4GiB"; empty: MemAvailable, CPU runs)
  // The command line, whose config table the run prints once its memory is
  // estimated (start_run; training_main sets it); null: a line of the estimate.
  const Flags* config_flags = nullptr;
  // The flags bound to this run's values (training_main: the command line;
  // compare: each run's own), whose run settings (is_run_setting) every
  // checkpoint stores as "run.<flag>" entries for --resume to take back
  // (settle_resumed_settings); null: none are stored.
  const Flags* settings = nullptr;
  // The ranks of a data-parallel run (e.g. mpi_world()); null: this process alone.
  std::shared_ptr<Communicator> communicator;
};

// The flags every binary shares: --steps --warmup --lr --min-lr-ratio
// --weight-decay --clip --gate-lr --eval-every --ckpt-every --log-every
// --ckpt --resume --overwrite --eval-only --seed --threads --device --tf32
// --max-memory.
void add_train_flags(Flags& flags, TrainOptions& options);

// Checks the train flags' combinations once they are parsed, before any
// data is read, and derives the defaults that depend on --steps: --warmup
// (at most a tenth of the steps) and --eval-every (at least five
// evaluations) when neither given nor restored from a checkpoint.  Throws UsageError for --warmup at or past
// --steps, --eval-every past --steps, --resume with --eval-only, either
// without --ckpt, and a --max-memory that is not a size.
// With train_vit's --epochs (which excludes --steps) the schedule waits for
// settle_schedule, once the data has set the steps.
void settle_train_options(const Flags& flags, TrainOptions& options);

// Whether `--name` is one of the settings that make a run (steps, the
// learning-rate schedule, the optimizer, batch, data selection, evaluation
// and checkpoint cadence, the seed, BCD's blocks, ...), which a checkpoint
// stores: not a flag of one invocation (--ckpt, --resume, --threads,
// --device, --generate, ...), nor a model flag (the checkpoint's config
// holds the model) nor a length the model fixes (--context; settle_trained_value).
bool is_run_setting(const std::string& name);

// Flags::restore of a stored value, where a value the flag refuses is a
// headroom::Error naming `what`, the stored entry ("[checkpoint] DIR/
// checkpoint.safetensors: its setting run.lr"), and the flag's own message.
void restore_setting(Flags& flags, const std::string& name, const std::string& text, const std::string& what);

// For --resume and --eval-only: each run setting stored in --ckpt's
// checkpoint becomes the value of `settings` (the flags bound to the run's
// options) where `given` (the command line) does not set it, with the
// flag's own range checks.  A given value that differs from the stored one:
//   --eval-only  applies it, with a note (e.g. evaluating on other --data);
//   --resume     refuses it when it would make the run another (--seed,
//                --batch, the data selection, BCD's blocks, --epochs), and
//                otherwise applies it with a note of what changes from the
//                next step, e.g. the learning rate there under both schedules.
// Returns the checkpoint's step (-1 without --resume or --eval-only).
int64_t settle_resumed_settings(const Flags& given, Flags& settings, const TrainOptions& options);

// A plain --resume of a finished run: true (after printing that the run in
// --ckpt is finished at its step, and how to extend or evaluate it) when
// the checkpoint's step `saved_step` has reached --steps that was not
// given; throws UsageError for a given --steps at or below it.
bool resumed_run_is_finished(const Flags& given, const TrainOptions& options, int64_t saved_step);

// The --steps part of settle_train_options: derives --warmup and
// --eval-every from --steps where `flags` (null: a run built in code) did
// not settle them, and refuses either at or past --steps.
void settle_schedule(const Flags* flags, TrainOptions& options);

// The device --device names: "cpu", "cuda" or "cuda:N".  Throws when CUDA is
// not available (the message gives cuda::version_string(): built without
// CUDA, or no device) or when N is not one of the devices.
Device training_device(const std::string& name);

// The table a binary prints first: the values of the flags that apply to
// this run (no MAE flags on an MHA run, no sampling flags without
// --generate, ...) and, for a CUDA run, the CUDA versions and devices.
// Checks --device (training_device).
// `extra`: rows the run adds (its memory estimate).
std::string run_config_table(const Flags& flags, const TrainOptions& options,
                             const std::vector<std::pair<std::string, std::string>>& extra = {});

// A run's memory, estimated before anything big is allocated
// (estimate_memory, model_options.h), in bytes of f32.
struct MemoryEstimate {
  int64_t parameters = 0;
  double weights = 0;    // the parameters
  double optimizer = 0;  // their gradients and AdamW's two moments
  // The largest of what a training step keeps for its backward pass, what an
  // evaluation batch holds and what decoding holds; `activations_of` says which.
  double activations = 0;
  std::string activations_of = "a training step";
  double data = 0;  // the task's data held as tensors beside the model (a ViT's images on the CPU)
  double total() const { return weights + optimizer + activations + data; }
};

// What a run does once its model's sizes are known, before it reads its data
// (or, for a ViT on IDX files, right after their headers): prints the config
// table of options.config_flags with the memory estimate (without them, unless
// quiet, a line of the estimate), and refuses (UsageError) a run estimated to
// need more than the memory limit: --max-memory, else for a CPU run the
// MemAvailable of /proc/meminfo (a GPU's memory is not read; --max-memory
// bounds a CUDA run).  Checks --device (training_device).
// On --resume and --eval-only the table shows the checkpoint's model
// (`config`) in place of the model flags.
void start_run(const TrainOptions& options, const ModelConfig& config, const MemoryEstimate& estimate);

// Throws UsageError for a flag given on the command line that has no effect
// on this run, by the rule that leaves it out of run_config_table, saying
// why: `--bcd-f 50` with --attn mha, `--temperature 0.5` without --generate,
// `--image-size 32` with IDX data, `--tf32` on the CPU, `--overwrite` with
// --resume, compare's `--attn`, ...
void check_flags_apply(const Flags& flags);

using Metrics = std::vector<std::pair<std::string, double>>;

// What one training step's forward produced.
struct StepOutput {
  Tensor loss;       // scalar the loop differentiates (task loss + aux losses)
  double task_loss;  // the task's own loss (nats per target), for logs
  int64_t items;     // tokens or images the loss averages over: the gradient's weight, and throughput
};

class TrainTask {
 public:
  virtual ~TrainTask() = default;
  virtual Module& model() = 0;
  virtual const ModelConfig& config() const = 0;
  // The generator behind every random draw of the model (see above).
  virtual Generator& model_generator() = 0;
  // The rows (sequences, pairs, images) of the global batch of `step`.
  virtual int64_t batch_rows(int64_t step) const = 0;
  // Builds the global batch of `step` (a pure function of the seed and the
  // step), keeps its `rows` (all of them in one process, this rank's slice
  // in a data-parallel run) and runs the forward pass on them in training
  // mode; the output's task_loss and items are those of the rows kept.
  virtual StepOutput step(int64_t step, BatchSlice rows) = 0;
  // Validation metrics, "loss" first; called in eval mode under NoGradGuard.
  virtual Metrics evaluate() = 0;
  // Extra checkpoint metadata (e.g. the tokenizer), which model_source hands
  // back to the task that resumes or evaluates the checkpoint.
  virtual StringMap metadata() const { return {}; }
  // A digest of the data the task trains and evaluates on (its counts and a
  // CRC-32, e.g. of the text's token ids), which the ranks of a data-parallel
  // run compare at the start: ranks given other --data would each train on
  // their own.  Empty for a task whose data is no input (generated in code).
  virtual std::string data_digest() const { return ""; }
  virtual std::string unit() const = 0;  // "tok" or "img"
};

// The part of a task that owns the model: its config, the model generator
// (seeded with the run's seed) and the model M (DecoderLM, EncoderDecoder or
// ViT), built by build_model() once the task has filled in the config fields
// that depend on the data (vocabulary, image size, classes).  train() moves
// the model to --device; the task builds batches on the CPU and sends them
// after it with on_model_device().
template <typename M> class ModelTask : public TrainTask {
 public:
  ModelTask(const ModelConfig& config, uint64_t seed) : config_(config), gen_(seed), seed_(seed) {}
  Module& model() override { return *model_; }
  M& typed_model() { return *model_; }
  const ModelConfig& config() const override { return config_; }
  Generator& model_generator() override { return gen_; }

 protected:
  void build_model() { model_ = std::make_shared<M>(config_, gen_); }
  Tensor on_model_device(const Tensor& batch) const { return batch.to(model_->device()); }
  ModelConfig config_;
  Generator gen_;
  uint64_t seed_;
  std::shared_ptr<M> model_;
};

struct TrainResult {
  int64_t first_step = 0, last_step = 0;  // steps run in this call: (first_step, last_step]
  bool interrupted = false;               // stopped by Ctrl-C (a checkpoint was written when --ckpt)
  Metrics eval;                           // the last evaluation (none before the first)
  std::vector<double> train_loss;         // task loss of every step run in this call
  double items_per_second = 0;            // training throughput of this call, all ranks (0 for --eval-only)
  double seconds = 0;
  double communication_seconds = 0;  // of `seconds`: the ranks' all-reduces (0 in one process)
  int ranks = 1;                     // processes that trained together
  size_t peak_bytes = 0;             // peak tensor memory of training (--eval-only: evaluation), on the run's device
};

// Moves the task's model to options.device first (its optimizer state lives
// there too; checkpoints are written from and read to the host, so a run can
// resume on another device).  Throws headroom::Error naming the step and the
// checkpoint kept for a non-finite loss, gradient norm, validation metric or
// saved tensor; for --resume from a checkpoint at or past options.steps; for
// a fresh run into a folder that holds a run (check_run_directory); and for
// --eval-only when a metric is not finite.  Data-parallel: also when the
// ranks' settings (every option but device, threads and quiet; the model
// config; the task's metadata and batch), their data (data_digest) or, at a
// checkpoint, their parameters differ, naming the ranks.  Every rank must
// call it.
TrainResult train(TrainTask& task, const TrainOptions& options);

// Holds the run folder `dir` (created if missing) for this process alone,
// as long as the returned handle lives: an exclusive flock on DIR/run.lock,
// which the kernel releases when the process ends however it ends, so a
// killed run leaves no stale lock.  A second process is refused
// (headroom::Error) naming the holder's pid; holds of one folder within a
// process share the lock.  train() holds the folder of a run that writes
// one; training_main holds it from before the checkpoint is read.
std::shared_ptr<void> hold_run_folder(const std::string& dir);

// Whether this process writes the run directory's files (log, plots,
// reports, checkpoints): a run with --ckpt that trains, on rank 0 only.
bool writes_run_files(const TrainOptions& options);

// Refuses (UsageError) a fresh run (one that trains without --resume) whose
// --ckpt folder already holds a run: a checkpoint, the one before it or a
// log.jsonl, which the run would overwrite.  The message names the folder,
// --resume to continue that run and --overwrite to replace it on purpose; with
// options.overwrite, train() deletes those files before it starts.  A folder
// that is new, empty or holds other files only is fine, and so is any folder
// of a process that writes no run files (writes_run_files).
void check_run_directory(const TrainOptions& options);

// The checkpoint file of a run directory, and the one it replaced.
std::string checkpoint_path(const std::string& ckpt_dir);
std::string previous_checkpoint_path(const std::string& ckpt_dir);

// The metadata of DIR/checkpoint.safetensors (checked to be a training
// checkpoint): the model config, "task."-prefixed task entries, "train." entries.
// Its header alone is read (load_safetensors_header), whose checksum covers
// them; the tensors are read, and their checksum checked, when the run loads them.
StringMap read_checkpoint_metadata(const std::string& ckpt_dir);
// The task's own entries of a checkpoint's metadata, without their "task." prefix.
StringMap task_metadata(const StringMap& metadata);

// "CRC-32 1a2b3c4d": the checksum that ends a TrainTask::data_digest, over
// each (address, bytes) part in turn.
std::string crc32_text(const std::vector<std::pair<const void*, size_t>>& parts);

// A config table (Markdown) of name/value rows, printed at the start of a run.
std::string config_table(const std::vector<std::pair<std::string, std::string>>& rows);

}  // namespace headroom::examples
