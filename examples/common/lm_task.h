#pragma once
// train_lm's task: a decoder-only language model over the bytes of a UTF-8
// text (default: the English fortunes of Debian's `fortunes` package, which
// scripts/fetch-data writes to data/fortunes.txt).
//
// Batches are B windows of T + 1 bytes at offsets drawn from (seed, step);
// validation runs over consecutive windows of the held-out tail of the text
// (split_text), at most eval_tokens of them, and reports the loss in nats per
// byte, bits per byte (loss / ln 2) and perplexity (e^loss).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "headroom/examples/common/cli.h"
#include "headroom/examples/common/model_options.h"
#include "headroom/examples/common/run_summary.h"
#include "headroom/examples/common/trainer.h"

namespace headroom::examples {

struct LmOptions {
  std::string data = "data/fortunes.txt";
  double valid_fraction = 0.05;
  int64_t context = 128;           // T
  int64_t batch = 16;              // B
  int64_t eval_tokens = 32768;     // validation tokens per evaluation (0: the whole split)
  std::string prompt = "Q: What";  // --generate
  int64_t generate = 0;            // bytes to sample after training (0: none)
  double temperature = 0.8;
  int64_t top_k = 40;
};

void add_lm_flags(Flags& flags, LmOptions& options);

// For --resume and --eval-only: --context becomes the context the
// checkpoint's model was trained at (its max_len) unless given;
// settle_trained_value says what a different one does.
void settle_lm_options(const Flags& flags, LmOptions& lm, const TrainOptions& train);

// Builds the model, trains (or evaluates with --eval-only), writes the run
// directory (checkpoint, log.jsonl, routing statistics, plots) and returns
// the summary; prints a sample when options.generate > 0.
RunSummary run_lm(const LmOptions& lm, const ModelOptions& model, const TrainOptions& train_options);

// train_lm's and compare --task lm's defaults (beside LmOptions'): sized to
// train in a few minutes on two CPU cores (README: Training on real data).
void set_lm_defaults(ModelOptions& model, TrainOptions& train);

}  // namespace headroom::examples
