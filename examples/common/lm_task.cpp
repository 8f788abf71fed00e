#include "headroom/examples/common/lm_task.h"

#include <chrono>
#include <cmath>
#include <cstdio>

#include "headroom/examples/common/report.h"
#include "headroom/examples/common/text_data.h"
#include "headroom/examples/common/tokenizer.h"
#include "headroom/core/grad_mode.h"
#include "headroom/models/decoding.h"
#include "headroom/models/stats.h"
#include "headroom/ops/nn.h"

namespace headroom::examples {

namespace {

// The model config of an LM run, known before its text is read: the byte
// vocabulary and, for a new model, the context it is trained at (generation
// slides past it).
ModelConfig lm_config(const ModelSource& source, const LmOptions& lm) {
  ModelConfig c = source.config;
  if (!source.from_checkpoint) c.vocab = Tokenizer().vocab_size(), c.max_len = lm.context;
  return c;
}

// The batches of an LM run: --batch windows of the context, in training and in evaluation.
RunShape lm_shape(const LmOptions& lm) {
  RunShape shape;
  shape.rows = lm.batch;
  shape.eval_rows = lm.batch;
  shape.tokens = lm.context;
  return shape;
}

class LmTask : public ModelTask<DecoderLM> {
 public:
  LmTask(const LmOptions& lm, const ModelSource& source, uint64_t seed)
      : ModelTask(lm_config(source, lm), seed), lm_(lm) {
    TextSplit split = split_text(read_text_file(lm.data), lm.valid_fraction);
    train_ids_ = tokenizer_.encode(split.train);
    valid_ids_ = tokenizer_.encode(split.valid);
    HEADROOM_CHECK(int64_t(train_ids_.size()) > lm.context + 1 && int64_t(valid_ids_.size()) > lm.context + 1,
                   "[train_lm] ", lm.data, " is too short for --context ", lm.context, ": ", train_ids_.size(),
                   " training and ", valid_ids_.size(), " validation bytes");
    build_model();
  }

  std::string unit() const override { return "tok"; }
  const Tokenizer& tokenizer() const { return tokenizer_; }

  std::string data_digest() const override {
    return std::to_string(train_ids_.size()) + " training and " + std::to_string(valid_ids_.size()) +
           " validation bytes, " +
           crc32_text({{train_ids_.data(), train_ids_.size() * sizeof(int32_t)},
                       {valid_ids_.data(), valid_ids_.size() * sizeof(int32_t)}});
  }

  int64_t batch_rows(int64_t) const override { return lm_.batch; }

  StepOutput step(int64_t step, BatchSlice rows) override {
    Tensor windows = train_batch(step).narrow(0, rows.begin, rows.size()).contiguous();  // [rows, T + 1]
    auto [loss, aux] = forward_loss(windows);
    const int64_t tokens = rows.size() * lm_.context;
    return {training_loss(loss, aux, tokens), loss.item(), tokens};
  }

  Metrics evaluate() override {
    double nll_sum = 0;
    int64_t tokens = 0;
    for_each_valid_batch([&](const Tensor& windows) {
      int64_t n = windows.size(0) * lm_.context;
      nll_sum += forward_loss(windows).first.item() * double(n);
      tokens += n;
    });
    double loss = nll_sum / double(tokens);
    return {{"loss", loss}, {"bits_per_byte", loss / std::log(2.0)}, {"perplexity", std::exp(loss)}};
  }

  // Routing statistics of the validation windows (eval mode, no gradients).
  RoutingRecorder routing_statistics() {
    NoGradGuard no_grad;
    model_->eval();
    RoutingRecorder recorder;
    for_each_valid_batch([&](const Tensor& windows) {
      Tensor inputs = on_model_device(windows.narrow(1, 0, lm_.context).contiguous());
      recorder.add(model_->forward(inputs).stats, inputs.reshape({-1}));
    });
    model_->train();
    return recorder;
  }

 private:
  // Mean next-byte loss of windows [N, T + 1] (on the CPU) and the layers' aux losses.
  std::pair<Tensor, std::vector<AuxLoss>> forward_loss(const Tensor& windows) {
    Tensor on_device = on_model_device(windows);
    Tensor inputs = on_device.narrow(1, 0, lm_.context).contiguous();
    Tensor targets = on_device.narrow(1, 1, lm_.context).contiguous();
    ModelOutput out = model_->forward(inputs);
    Tensor loss = cross_entropy(out.out.reshape({-1, config_.vocab}), targets.reshape({-1}));
    return {loss, out.aux_losses};
  }

  // B windows at offsets that are a pure function of (seed, step).
  Tensor train_batch(int64_t step) const {
    Generator offsets(seed_ ^ 0x5eed0ffULL);
    offsets.set_state(offsets.seed(), uint64_t(step) * uint64_t(lm_.batch));
    const int64_t span = lm_.context + 1, last_start = int64_t(train_ids_.size()) - span;
    std::vector<int32_t> ids;
    ids.reserve(size_t(lm_.batch * span));
    for (int64_t b = 0; b < lm_.batch; ++b) {
      int64_t start = offsets.next_int(last_start + 1);
      ids.insert(ids.end(), train_ids_.begin() + start, train_ids_.begin() + start + span);
    }
    return Tensor::from_vector(ids, {lm_.batch, span});
  }

  // Consecutive validation windows (stride T), B at a time, up to eval_tokens.
  template <typename Fn> void for_each_valid_batch(Fn&& fn) const {
    const int64_t span = lm_.context + 1;
    int64_t windows = (int64_t(valid_ids_.size()) - 1) / lm_.context;
    if (lm_.eval_tokens > 0) windows = std::max<int64_t>(1, std::min(windows, lm_.eval_tokens / lm_.context));
    for (int64_t first = 0; first < windows; first += lm_.batch) {
      int64_t n = std::min(lm_.batch, windows - first);
      std::vector<int32_t> ids;
      for (int64_t w = first; w < first + n; ++w)
        ids.insert(ids.end(), valid_ids_.begin() + w * lm_.context, valid_ids_.begin() + w * lm_.context + span);
      fn(Tensor::from_vector(ids, {n, span}));
    }
  }

  LmOptions lm_;
  Tokenizer tokenizer_;  // bytes
  std::vector<int32_t> train_ids_, valid_ids_;
};

void print_sample(LmTask& task, const LmOptions& lm, uint64_t seed) {
  std::vector<int32_t> prompt = task.tokenizer().encode(lm.prompt);
  Generator sampler(seed + 7);
  GenerateOptions options;
  options.max_new = lm.generate;
  options.on_token = [&](int64_t, int32_t token) {  // each byte as it is sampled
    const std::string piece = task.tokenizer().decode({token});
    std::fwrite(piece.data(), 1, piece.size(), stdout);
    std::fflush(stdout);
    return true;
  };
  const int64_t context = task.config().max_len;
  const std::string sliding = int64_t(prompt.size()) + lm.generate > context
                                  ? "; past the trained context of " + std::to_string(context) +
                                        ", each byte follows from the last " + std::to_string(context)
                                  : "";
  std::printf("\n--- sample (temperature %g, top-k %lld%s) ---\n%s", lm.temperature, (long long)lm.top_k,
              sliding.c_str(), lm.prompt.c_str());
  const auto start = std::chrono::steady_clock::now();
  Generated out = sample(task.typed_model(), Tensor::from_vector(prompt, {1, int64_t(prompt.size())}), lm.temperature,
                         lm.top_k, sampler, options);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const size_t tokens = out.tokens[0].size();
  std::printf("\n--- (%zu tokens in %.2f s, %s tok/s) ---\n", tokens, seconds,
              format_si(double(tokens) / seconds).c_str());
}

}  // namespace

void add_lm_flags(Flags& flags, LmOptions& o) {
  flags.add("data", &o.data, "UTF-8 text to train on (scripts/fetch-data writes the default)");
  flags.add("valid-fraction", &o.valid_fraction, "held-out tail of the text for validation",
            {0, 1, End::open, End::open});
  flags.add("context", &o.context, "sequence length T in bytes", {1, kMaxContext});
  flags.add("batch", &o.batch, "sequences per step", {1, kMaxBatch});
  flags.add("eval-tokens", &o.eval_tokens, "validation bytes per evaluation (0: all)", {0, int64_t(1) << 40});
  flags.add("generate", &o.generate, "bytes to sample from --prompt after training (0: none)", {0, kMaxContext});
  flags.add("prompt", &o.prompt, "prompt for --generate");
  flags.add("temperature", &o.temperature, "sampling temperature", {0, 1e3, End::open, End::closed});
  flags.add("top-k", &o.top_k, "sample among the k most likely bytes (0: all)", {0, int64_t(1) << 20});
}

void settle_lm_options(const Flags& flags, LmOptions& lm, const TrainOptions& train) {
  if (!train.resume && !train.eval_only) return;
  const ModelConfig trained = checkpoint_config(train, ModelStacks::decoder);
  settle_trained_value(flags, train, "context", lm.context, trained.max_len,
                       trained.positions == PositionKind::learned ? EvalAccepts::smaller : EvalAccepts::any);
}

RunSummary run_lm(const LmOptions& lm, const ModelOptions& model_options, const TrainOptions& o) {
  HEADROOM_CHECK(lm.context > 0 && lm.batch > 0, "[train_lm] --context and --batch must be positive");
  check_product("--batch", lm.batch, "--context", lm.context, kMaxBatchTokens, "tokens per batch");
  if (lm.generate > 0 && lm.prompt.empty()) throw UsageError("--generate needs a non-empty --prompt");
  check_data_exists("--data", lm.data, "lm");
  const ModelSource source = model_source(model_options, o, ModelStacks::decoder);
  const MemoryEstimate estimate = estimate_memory(lm_config(source, lm), lm_shape(lm));
  start_run(o, lm_config(source, lm), estimate);
  LmTask task(lm, source, o.seed);
  const double macs_per_token = double(task.typed_model().forward_macs(lm.context)) / double(lm.context);
  std::printf("%s\n", model_summary(summarize("lm", task.model(), task.config(), o, {}, macs_per_token),
                                    task.typed_model().describe(lm.context))
                          .c_str());
  TrainResult result = train(task, o);
  RunSummary summary = summarize("lm", task.model(), task.config(), o, result, macs_per_token);
  summary.estimated_bytes = estimate.total();
  if (writes_run_files(o)) {
    const std::string label = o.ckpt_dir + ", " + task.config().attention.type;
    write_curve_plots(o.ckpt_dir, "bits_per_byte", label);
    if (has_routed_attention(task.model()))
      write_routing_report(
          o.ckpt_dir, task.routing_statistics(), task.model(),
          [&](int32_t id) { return task.tokenizer().describe_token(id); }, label);
  }
  if (lm.generate > 0) print_sample(task, lm, o.seed);
  return summary;
}

void set_lm_defaults(ModelOptions& model, TrainOptions& train) {
  model.dim = 128, model.heads = 8, model.layers = 2, model.ffn = 512, model.dropout = 0;
  train.steps = 1500, train.warmup = 100, train.lr = 2e-3, train.eval_every = 250, train.ckpt_dir = "runs/lm";
}

}  // namespace headroom::examples
