#include "headroom/examples/common/mt_task.h"

#include <cmath>
#include <cstdio>
#include <filesystem>

#include "headroom/core/grad_mode.h"
#include "headroom/core/atomic_file.h"
#include "headroom/examples/common/bleu.h"
#include "headroom/examples/common/parallel_data.h"
#include "headroom/examples/common/report.h"
#include "headroom/examples/common/tokenizer.h"
#include "headroom/models/decoding.h"
#include "headroom/models/stats.h"
#include "headroom/ops/nn.h"

namespace headroom::examples {

namespace {

using TokenPairs = std::vector<std::pair<std::vector<int32_t>, std::vector<int32_t>>>;

// Rows of different lengths -> ids i32 [B, L] and padding b8 [B, L] (1 = pad),
// L the longest row or `width` if longer.
std::pair<Tensor, Tensor> pad_rows(const std::vector<std::vector<int32_t>>& rows, size_t width = 0) {
  size_t longest = width;
  for (const auto& row : rows) longest = std::max(longest, row.size());
  std::vector<int32_t> ids(rows.size() * longest, Tokenizer::kPad);
  std::vector<uint8_t> padding(rows.size() * longest, 1);
  for (size_t r = 0; r < rows.size(); ++r)
    for (size_t t = 0; t < rows[r].size(); ++t) ids[r * longest + t] = rows[r][t], padding[r * longest + t] = 0;
  Shape shape{int64_t(rows.size()), int64_t(longest)};
  return {Tensor::from_vector(ids, shape), Tensor::from_vector(padding, shape)};
}

// A batch's padded lengths: its longest source, and longest target + 1
// (the decoder's input starts with BOS, its targets end with EOS).
struct Widths {
  size_t source = 0, target = 0;
};
Widths widths(const TokenPairs& batch) {
  Widths longest;
  for (const auto& [src, tgt] : batch)
    longest.source = std::max(longest.source, src.size()), longest.target = std::max(longest.target, tgt.size() + 1);
  return longest;
}

// The cleaned pairs of --data; too few for the validation and test splits
// and some training is an error that says how many the file held and why
// the others were dropped.
SentencePairs load_pairs(const MtOptions& mt) {
  SentencePairs raw = std::filesystem::is_directory(mt.data) ? read_mo_dir(mt.data) : read_tsv(mt.data);
  SentencePairs kept = clean_pairs(raw, size_t(mt.max_bytes));
  const size_t held_out = size_t(mt.valid_pairs + mt.test_pairs);
  HEADROOM_CHECK(kept.size() > held_out, "[train_mt] ", mt.data, " holds ", raw.size(), " sentence pairs",
                 raw.size() == kept.size() ? ""
                                           : " (" + std::to_string(kept.size()) + " kept: " +
                                                 "a pair with an empty side, the same text on both sides, a "
                                                 "side past --max-bytes " +
                                                 std::to_string(mt.max_bytes) + " or seen before is dropped)",
                 ", and --valid-pairs ", mt.valid_pairs, " + --test-pairs ", mt.test_pairs, " need more than ",
                 held_out, " to leave some for training",
                 raw.empty() ? "; a .tsv file holds one source<TAB>target pair per line" : "");
  return kept;
}

// The model config of a translation run before its pairs are read, for the
// memory estimate: a new model's vocabulary is at most the bytes, the
// special tokens and every merge.
ModelConfig planned_config(const ModelSource& source, const MtOptions& mt) {
  ModelConfig c = source.config;
  if (!source.from_checkpoint) c.vocab = Tokenizer().vocab_size() + mt.bpe_merges, c.max_len = mt.max_tokens + 1;
  return c;
}

// The batches of a translation run at the longest --max-tokens allows (a
// source's tokens and <eos>, <bos> and a target's tokens): --batch pairs in
// training and in the loss's evaluation, --batch sentences times --beam
// hypotheses in the BLEU decodes.
RunShape mt_shape(const MtOptions& mt) {
  RunShape shape;
  shape.rows = mt.batch;
  shape.eval_rows = mt.batch;
  shape.decode_rows = mt.batch * mt.beam;
  shape.tokens = mt.max_tokens + 1;
  shape.target_tokens = mt.max_tokens + 1;
  return shape;
}

// The tokenizer a checkpoint was trained with.
Tokenizer saved_tokenizer(const StringMap& task_metadata) {
  auto saved = task_metadata.find("tokenizer");
  HEADROOM_CHECK(saved != task_metadata.end(), "[train_mt] the checkpoint has no task.tokenizer entry");
  return Tokenizer::from_text(saved->second);
}

class MtTask : public ModelTask<EncoderDecoder> {
 public:
  MtTask(const MtOptions& mt, const ModelSource& source, uint64_t seed) : ModelTask(source.config, seed), mt_(mt) {
    split_ = split_pairs(load_pairs(mt), size_t(mt.valid_pairs), size_t(mt.test_pairs));
    tokenizer_ =
        source.from_checkpoint ? saved_tokenizer(source.task_metadata) : learn_tokenizer(split_.train, mt.bpe_merges);
    train_ = encode(split_.train);
    valid_ = encode(split_.valid);
    HEADROOM_CHECK(!train_.empty() && !valid_.empty() && !split_.test.empty(), "[train_mt] ", mt.data, " left ",
                   train_.size(), " training, ", valid_.size(), " validation and ", split_.test.size(),
                   " test pairs after cleaning; need some of each");
    if (!source.from_checkpoint) {
      config_.vocab = tokenizer_.vocab_size();
      config_.max_len = mt.max_tokens + 1;  // a source and its <eos>, or <bos> and a target
    }
    build_model();
  }

  std::string unit() const override { return "tok"; }
  StringMap metadata() const override { return {{"tokenizer", tokenizer_.to_text()}}; }

  std::string data_digest() const override {
    std::string text;  // the splits as TSV lines
    for (const SentencePairs* part : {&split_.train, &split_.valid, &split_.test})
      for (const auto& [source, target] : *part) text += source + '\t' + target + '\n';
    return std::to_string(split_.train.size()) + " training, " + std::to_string(split_.valid.size()) +
           " validation and " + std::to_string(split_.test.size()) + " test pairs, " +
           crc32_text({{text.data(), text.size()}});
  }

  const ParallelSplit& split() const { return split_; }
  const Tokenizer& tokenizer() const { return tokenizer_; }

  int64_t batch_rows(int64_t) const override { return mt_.batch; }

  // The slice is padded as the whole batch is, so its rows, and the draws
  // for them, are those of the whole batch.
  StepOutput step(int64_t step, BatchSlice rows) override {
    Generator picks(seed_ ^ 0x3a7a5e7ULL);
    picks.set_state(picks.seed(), uint64_t(step) * uint64_t(mt_.batch));
    TokenPairs batch;
    for (int64_t b = 0; b < mt_.batch; ++b) batch.push_back(train_[size_t(picks.next_int(int64_t(train_.size())))]);
    const Widths whole = widths(batch);
    batch = TokenPairs(batch.begin() + rows.begin, batch.begin() + rows.end);
    Forward f = forward(batch, mt_.label_smoothing, whole);
    return {training_loss(f.loss, f.aux, f.target_tokens), f.loss.item(), f.target_tokens};
  }

  Metrics evaluate() override {
    double nll = 0;
    int64_t tokens = 0;
    const size_t pairs = std::min(valid_.size(), size_t(mt_.eval_pairs));
    for (size_t first = 0; first < pairs; first += size_t(mt_.batch)) {
      TokenPairs batch(valid_.begin() + first, valid_.begin() + std::min(pairs, first + size_t(mt_.batch)));
      Forward f = forward(batch, 0.0);
      nll += f.loss.item() * double(f.target_tokens);
      tokens += f.target_tokens;
    }
    const double loss = nll / double(tokens);
    const size_t sentences = std::min(split_.valid.size(), size_t(mt_.bleu_sentences));
    SentencePairs scored(split_.valid.begin(), split_.valid.begin() + sentences);
    return {
        {"loss", loss}, {"bleu", bleu_of(translate(sources(scored)), scored).score}, {"perplexity", std::exp(loss)}};
  }

  // Translations of `texts`, batch by batch (eval mode, no gradients).
  std::vector<std::string> translate(const std::vector<std::string>& texts) {
    std::vector<std::string> out;
    for (size_t first = 0; first < texts.size(); first += size_t(mt_.batch)) {
      std::vector<std::vector<int32_t>> rows;
      int64_t longest = 0;
      for (size_t i = first; i < std::min(texts.size(), first + size_t(mt_.batch)); ++i) {
        rows.push_back(source_ids(texts[i]));
        longest = std::max<int64_t>(longest, int64_t(rows.back().size()));
      }
      auto [src, padding] = pad_rows(rows);
      Tensor prefix = Tensor::full({int64_t(rows.size()), 1}, Tokenizer::kBos, DType::i32);
      GenerateOptions options;
      options.max_new = std::min<int64_t>(2 * longest + 10, config_.max_len - 1);
      options.eos = Tokenizer::kEos;
      Generated generated = mt_.beam > 1
                                ? beam_search(*model_, {src, padding}, prefix, mt_.beam, mt_.length_penalty, options)
                                : greedy(*model_, {src, padding}, prefix, options);
      for (const auto& ids : generated.tokens) out.push_back(tokenizer_.decode(ids));
    }
    return out;
  }

  // Routing statistics of the encoder's self-attention over validation sources.
  RoutingRecorder routing_statistics() {
    NoGradGuard no_grad;
    model_->eval();
    RoutingRecorder recorder;
    const size_t pairs = std::min(valid_.size(), size_t(mt_.eval_pairs));
    for (size_t first = 0; first < pairs; first += size_t(mt_.batch)) {
      std::vector<std::vector<int32_t>> rows;
      for (size_t i = first; i < std::min(pairs, first + size_t(mt_.batch)); ++i) rows.push_back(valid_[i].first);
      auto [src, padding] = pad_rows(rows);
      recorder.add(model_->encode(on_model_device(src), on_model_device(padding)).stats, src.reshape({-1}),
                   logical_not(padding).reshape({-1}));
    }
    model_->train();
    return recorder;
  }

  static std::vector<std::string> sources(const SentencePairs& pairs) {
    std::vector<std::string> out;
    for (const auto& pair : pairs) out.push_back(pair.first);
    return out;
  }

  static BleuScore bleu_of(const std::vector<std::string>& hypotheses, const SentencePairs& pairs) {
    std::vector<std::string> references;
    for (const auto& pair : pairs) references.push_back(pair.second);
    return corpus_bleu(hypotheses, references);
  }

 private:
  struct Forward {
    Tensor loss;
    std::vector<AuxLoss> aux;
    int64_t target_tokens;
  };

  // Teacher-forced loss of a batch (mean over target tokens, padding
  // ignored), padded to at least `at_least`.
  Forward forward(const TokenPairs& batch, double label_smoothing, Widths at_least = {}) {
    std::vector<std::vector<int32_t>> src_rows, in_rows, out_rows;
    int64_t target_tokens = 0;
    for (const auto& [src, tgt] : batch) {
      src_rows.push_back(src);
      in_rows.push_back(tgt);
      in_rows.back().insert(in_rows.back().begin(), Tokenizer::kBos);
      out_rows.push_back(tgt);
      out_rows.back().push_back(Tokenizer::kEos);
      target_tokens += int64_t(out_rows.back().size());
    }
    auto [src, src_padding] = pad_rows(src_rows, at_least.source);
    auto [tgt_in, tgt_padding] = pad_rows(in_rows, at_least.target);
    src = on_model_device(src), src_padding = on_model_device(src_padding);
    tgt_in = on_model_device(tgt_in), tgt_padding = on_model_device(tgt_padding);
    Tensor targets = on_model_device(pad_rows(out_rows, at_least.target).first);
    ModelOutput encoded = model_->encode(src, src_padding);
    ModelOutput decoded = model_->decode(tgt_in, encoded.out, src_padding, tgt_padding);
    CrossEntropyOptions ce;
    ce.ignore_index = Tokenizer::kPad;
    ce.label_smoothing = label_smoothing;
    Tensor loss = cross_entropy(decoded.out.reshape({-1, config_.vocab}), targets.reshape({-1}), ce);
    std::vector<AuxLoss> aux = encoded.aux_losses;
    aux.insert(aux.end(), decoded.aux_losses.begin(), decoded.aux_losses.end());
    return {loss, aux, target_tokens};
  }

  std::vector<int32_t> source_ids(const std::string& text) const {
    std::vector<int32_t> ids = tokenizer_.encode(text);
    if (int64_t(ids.size()) > mt_.max_tokens) ids.resize(size_t(mt_.max_tokens));
    ids.push_back(Tokenizer::kEos);
    return ids;
  }

  // Token pairs of the pairs whose sides fit max_tokens.
  TokenPairs encode(const SentencePairs& pairs) const {
    TokenPairs out;
    for (const auto& [source, target] : pairs) {
      std::vector<int32_t> src = tokenizer_.encode(source), tgt = tokenizer_.encode(target);
      if (int64_t(src.size()) > mt_.max_tokens || int64_t(tgt.size()) > mt_.max_tokens) continue;
      src.push_back(Tokenizer::kEos);
      out.emplace_back(std::move(src), std::move(tgt));
    }
    return out;
  }

  static Tokenizer learn_tokenizer(const SentencePairs& pairs, int64_t merges) {
    if (merges == 0) return Tokenizer();
    std::vector<std::string> texts;
    for (const auto& [source, target] : pairs) texts.push_back(source), texts.push_back(target);
    return Tokenizer::learn(texts, merges);
  }

  MtOptions mt_;
  ParallelSplit split_;
  Tokenizer tokenizer_;
  TokenPairs train_, valid_;
};

// Translates the test split, writes the hypotheses and returns its BLEU.
BleuScore test_translations(MtTask& task, const std::string& run_dir) {
  NoGradGuard no_grad;
  task.model().eval();
  const SentencePairs& test = task.split().test;
  std::vector<std::string> hypotheses = task.translate(MtTask::sources(test));
  task.model().train();
  if (!run_dir.empty()) {
    std::string text;
    for (const auto& line : hypotheses) text += line + "\n";
    write_file_atomically(run_dir + "/test.hyp.txt", text, "train_mt");
  }
  for (size_t i = 0; i < std::min<size_t>(3, test.size()); ++i)
    std::printf("  en:  %s\n  de:  %s\n  ref: %s\n", test[i].first.c_str(), hypotheses[i].c_str(),
                test[i].second.c_str());
  return MtTask::bleu_of(hypotheses, test);
}

// The checkpoint's tokenizer is the model's: a --bpe-merges that differs is refused.
void check_merges_agree(const MtOptions& mt, const ModelSource& source, const std::string& ckpt_dir) {
  const int64_t saved = saved_tokenizer(source.task_metadata).merge_count();
  if (saved != mt.bpe_merges)
    throw UsageError("--bpe-merges " + std::to_string(mt.bpe_merges) + " contradicts the checkpoint " +
                     checkpoint_path(ckpt_dir) + ": its tokenizer has " + std::to_string(saved) +
                     " merges; the checkpoint sets the tokenizer, so drop the flag");
}

}  // namespace

void add_mt_flags(Flags& flags, MtOptions& o) {
  const Range<int64_t> pair_count{1, 1'000'000'000};
  flags.add("data", &o.data, "a folder of gettext .mo files (scripts/fetch-data) or a source<TAB>target .tsv");
  flags.add("max-bytes", &o.max_bytes, "drop pairs with a side longer than this (bytes)", {1, int64_t(1) << 20});
  flags.add("max-tokens", &o.max_tokens, "drop pairs with a side longer than this (tokens)", {1, kMaxContext / 2});
  flags.add("valid-pairs", &o.valid_pairs, "validation pairs split off", pair_count);
  flags.add("test-pairs", &o.test_pairs, "test pairs split off", pair_count);
  flags.add("bpe-merges", &o.bpe_merges, "BPE merges learned on the training split (0: bytes)", {0, int64_t(1) << 20});
  flags.add("batch", &o.batch, "sentence pairs per step", {1, kMaxBatch});
  flags.add("label-smoothing", &o.label_smoothing, "label smoothing of the training loss",
            {0, 1, End::closed, End::open});
  flags.add("eval-pairs", &o.eval_pairs, "validation pairs for the loss at each evaluation", pair_count);
  flags.add("bleu-sentences", &o.bleu_sentences, "validation sentences decoded for BLEU at each evaluation",
            pair_count);
  flags.add("beam", &o.beam, "beam size for BLEU decodes (1: greedy)", {1, 64});
  flags.add("length-penalty", &o.length_penalty, "beam search length penalty", {0, 10});
}

void settle_mt_options(const Flags& flags, MtOptions& mt, const TrainOptions& train) {
  if (!train.resume && !train.eval_only) return;
  const ModelConfig trained = checkpoint_config(train, ModelStacks::encoder_decoder);
  settle_trained_value(flags, train, "max-tokens", mt.max_tokens, trained.max_len - 1,
                       trained.positions == PositionKind::learned ? EvalAccepts::smaller : EvalAccepts::any);
}

RunSummary run_mt(const MtOptions& mt, const ModelOptions& model_options, const TrainOptions& o) {
  HEADROOM_CHECK(mt.batch > 0 && mt.max_tokens > 0 && mt.beam > 0,
                 "[train_mt] --batch, --max-tokens and --beam must be positive");
  check_product("--batch", mt.batch, "--max-tokens", mt.max_tokens, kMaxBatchTokens, "tokens per batch");
  check_data_exists("--data", mt.data, "mt");
  const ModelSource source = model_source(model_options, o, ModelStacks::encoder_decoder);
  if (source.from_checkpoint && model_options.given("bpe-merges")) check_merges_agree(mt, source, o.ckpt_dir);
  const MemoryEstimate estimate = estimate_memory(planned_config(source, mt), mt_shape(mt));
  start_run(o, source.config, estimate);
  MtTask task(mt, source, o.seed);
  const ParallelSplit& split = task.split();
  std::printf("data: %s train / %s valid / %s test pairs, vocabulary %s (%s BPE merges)\n",
              format_count(int64_t(split.train.size())).c_str(), format_count(int64_t(split.valid.size())).c_str(),
              format_count(int64_t(split.test.size())).c_str(), format_count(task.tokenizer().vocab_size()).c_str(),
              format_count(task.tokenizer().merge_count()).c_str());
  const int64_t length = 32;  // MACs per target token at a typical source and target length
  const double macs_per_token = double(task.typed_model().forward_macs(length, length)) / double(length);
  std::printf("%s\n", model_summary(summarize("mt", task.model(), task.config(), o, {}, macs_per_token),
                                    task.typed_model().describe(length, length))
                          .c_str());
  TrainResult result = train(task, o);
  BleuScore test = test_translations(task, writes_run_files(o) ? o.ckpt_dir : "");
  std::printf("test: %s\n", test.to_string().c_str());
  result.eval.emplace_back("test_bleu", test.score);
  RunSummary summary = summarize("mt", task.model(), task.config(), o, result, macs_per_token);
  summary.estimated_bytes = estimate.total();
  if (writes_run_files(o)) {
    const std::string label = o.ckpt_dir + ", " + task.config().attention.type;
    write_curve_plots(o.ckpt_dir, "bleu", label);
    if (has_routed_attention(task.model()))
      write_routing_report(
          o.ckpt_dir, task.routing_statistics(), task.model(),
          [&](int32_t id) { return task.tokenizer().describe_token(id); }, label, "encoder self");
  }
  return summary;
}

void set_mt_defaults(ModelOptions& model, TrainOptions& train) {
  model.dim = 128, model.heads = 4, model.layers = 2, model.ffn = 256, model.dropout = 0.1;
  train.steps = 4000, train.warmup = 200, train.lr = 1e-3, train.eval_every = 500, train.ckpt_dir = "runs/mt";
}

}  // namespace headroom::examples
