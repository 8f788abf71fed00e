#pragma once
// train_mt's task: an encoder-decoder translating English to German.
// Default data: the English→German message pairs of the gettext catalogs of
// a pinned list of Debian packages (scripts/fetch-data puts their .mo files
// under data/mt-mo/); --data FILE.tsv reads any tab-separated parallel corpus.
// Pairs are cleaned (clean_pairs), split by a hash of the source sentence
// (split_pairs), and tokenised with a byte-level BPE learned on the training
// split (shared by both languages; --bpe-merges 0 keeps plain bytes).
//
// Sequences: source = tokens + <eos>; decoder input = <bos> + tokens; target =
// tokens + <eos>; batches pad to their longest row and padding is masked.
// Validation: loss (no label smoothing) and BLEU of greedy (or beam) decodes;
// at the end of training the test split is translated and scored too.
#include <cstdint>
#include <string>

#include "headroom/examples/common/cli.h"
#include "headroom/examples/common/model_options.h"
#include "headroom/examples/common/run_summary.h"
#include "headroom/examples/common/trainer.h"

namespace headroom::examples {

struct MtOptions {
  std::string data = "data/mt-mo";  // a folder of .mo files, or a .tsv file
  int64_t max_bytes = 160;          // drop pairs with a longer side (bytes)
  int64_t max_tokens = 64;          // drop pairs with a longer side (tokens, after BPE)
  int64_t valid_pairs = 500, test_pairs = 1000;
  int64_t bpe_merges = 2000;
  int64_t batch = 32;  // sentence pairs per step
  double label_smoothing = 0.1;
  int64_t eval_pairs = 500;      // validation pairs for the loss
  int64_t bleu_sentences = 200;  // validation sentences decoded for BLEU at each evaluation
  int64_t beam = 1;              // 1: greedy
  double length_penalty = 1.0;
};

void add_mt_flags(Flags& flags, MtOptions& options);

// For --resume and --eval-only: --max-tokens becomes the checkpoint's (its
// model's max_len - 1) unless given; settle_trained_value says what a
// different one does.
void settle_mt_options(const Flags& flags, MtOptions& mt, const TrainOptions& train);

// Builds the model, trains (or evaluates), translates the test split into
// run_dir/test.hyp.txt, writes routing statistics and plots, and returns the
// summary (metrics: loss, bleu, perplexity, then test_bleu).
RunSummary run_mt(const MtOptions& mt, const ModelOptions& model, const TrainOptions& train_options);

// train_mt's and compare --task mt's defaults, sized like set_lm_defaults.
void set_mt_defaults(ModelOptions& model, TrainOptions& train);

}  // namespace headroom::examples
