#pragma once
// What one training run reports, for the binaries' final lines and the
// compare driver's table.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "headroom/examples/common/cli.h"
#include "headroom/examples/common/trainer.h"
#include "headroom/models/config.h"

namespace headroom::examples {

struct RunSummary {
  std::string task;       // "lm", "mt", "vit"
  std::string attention;  // config.attention.type
  std::string options;    // the attention options, "key=value,..."
  uint64_t seed = 0;
  Metrics eval;  // the final evaluation, quality metric(s) first
  int64_t parameters = 0;
  double macs_per_item = 0;        // forward MACs per token (per image for vit)
  double active_heads = 1;         // active_head_fraction
  double items_per_second = 0;     // all ranks together
  int ranks = 1;                   // data-parallel processes
  double communication_share = 0;  // of the training time, in the ranks' all-reduces
  size_t peak_bytes = 0;
  double estimated_bytes = 0;  // the memory estimate the run printed before it started (estimate_memory)
  double seconds = 0;
  int64_t steps = 0;
  bool interrupted = false;                      // stopped by Ctrl-C (the binaries then exit with 130)
  bool eval_only = false;                        // --eval-only: seconds and peak_bytes are the evaluation's
  double metric(const std::string& name) const;  // throws when absent
};

// The summary of a finished train() call.
RunSummary summarize(const std::string& task, const Module& model, const ModelConfig& config,
                     const TrainOptions& options, const TrainResult& result, double macs_per_item);

// main() of a training binary once its flags are declared: parses them,
// refuses one given that does not apply (check_flags_apply), holds the run
// folder (hold_run_folder), takes a resumed run's settings from its
// checkpoint (settle_resumed_settings), settles the train flags
// (settle_train_options) and then the task's (`settle`, e.g. the trained
// lengths a checkpoint fixes), ends a plain --resume of a finished run with
// status 0 (resumed_run_is_finished), refuses a fresh
// run into a folder that holds one (check_run_directory), sets the thread
// count, runs (which prints the config table, start_run), prints the summary.  Launched by mpirun or
// srun it trains data-parallel over the job's ranks (docs/distributed.md):
// rank 0 prints, the others' stdout is discarded, an error names its rank
// and ends the whole job.
// Exit status: 0, 130 after Ctrl-C, 2 for bad flags (the error and a pointer to --help), 1 for errors.
int training_main(Flags& flags, TrainOptions& options, int argc, char** argv, const std::function<RunSummary()>& run,
                  const std::function<void()>& settle = {});

// The lines a run prints before training: method, parameters, MACs per
// item and active heads, then `layers` (the model's describe(): attention
// per layer).
std::string model_summary(const RunSummary& summary, const std::string& layers);

// The lines a run prints at its end: the final metrics and the time, speed
// and memory of training (of the evaluation for --eval-only, which has no
// speed); a run stopped by Ctrl-C before its first evaluation says so.
std::string describe(const RunSummary& summary);

}  // namespace headroom::examples
