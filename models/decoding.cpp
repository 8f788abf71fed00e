#include "headroom/models/decoding.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <numeric>

#include "headroom/core/grad_mode.h"
#include "headroom/ops/elementwise.h"
#include "headroom/ops/nn.h"
#include "headroom/ops/routing.h"

namespace headroom {

namespace {

// ---- the model behind a decoding run -------------------------------------------

// Next-token logits for a batch of growing sequences, with or without a
// cache.  The sequences are chosen on the host; the model runs on its device
// (the cache stays there), and the logits come back to the host.  Past the
// window, each step re-encodes the last `window` tokens (decoding.h).
class Stepper {
 public:
  Stepper(const GenerateOptions& opts, int64_t context, Device device)
      : use_cache_(opts.use_cache),
        slide_(opts.slide),
        window_(opts.window > 0 ? opts.window : context),
        device_(device) {
    HEADROOM_CHECK(opts.window >= 0 && window_ >= 1, "[decoding] expected a window >= 1 (0: the model's context), got ",
                   opts.window, " with a context of ", context);
  }
  virtual ~Stepper() = default;

  // tokens: i32 [N, t] on the CPU, every token so far -> logits of the next one, [N, V] on the CPU
  Tensor next_logits(const Tensor& tokens) {
    const int64_t t = tokens.size(1);
    rows_ = tokens.size(0);
    if (t > window_) return last_position(run(sliding_window(tokens).to(device_), nullptr));
    Tensor on_device = tokens.to(device_);
    if (!use_cache_) return last_position(run(on_device, nullptr));
    const int64_t done = cache_.position;
    return last_position(run(on_device.narrow(1, done, t - done), &cache_));
  }
  // Every layer's cache sized for `positions` tokens at once (prefix + new tokens), at most the window.
  void reserve(int64_t positions) { cache_.reserved = std::min(positions, window_); }
  // Keeps row rows[i] as row i (beam expansion and pruning).  rows: i32 [N'] on the CPU
  void select_rows(const Tensor& rows) {
    if (keeps_every_row(rows)) return;  // width 1, or every beam grew from itself: nothing moves
    Tensor on_device = rows.to(device_);
    if (!past_window_) cache_.reorder(on_device);
    select_own_rows(on_device);
    rows_ = rows.numel();
  }

 protected:
  virtual Tensor run(const Tensor& tokens, DecoderCache* cache) = 0;  // logits [N, t, V]
  virtual void select_own_rows(const Tensor& rows) {}  // per-row state beside the cache; rows on the device
  Device device() const { return device_; }

 private:
  static Tensor last_position(const Tensor& logits) { return logits.select(1, logits.size(1) - 1).to(Device::cpu()); }
  // tokens [N, t], t > window -> the last window tokens [N, window]; the cache is no longer used.
  Tensor sliding_window(const Tensor& tokens) {
    HEADROOM_CHECK(slide_, "[decoding] the sequence reaches ", tokens.size(1), " tokens, past the window of ", window_,
                   " (the model's context, or GenerateOptions::window); set GenerateOptions::slide to keep the "
                   "last ",
                   window_, " tokens, or ask for fewer new tokens");
    if (!past_window_) cache_ = DecoderCache();  // frees the layers' keys and values
    past_window_ = true;
    return tokens.narrow(1, tokens.size(1) - window_, window_).contiguous();
  }
  bool keeps_every_row(const Tensor& rows) const {
    if (rows.numel() != rows_) return false;
    const std::vector<int32_t> kept = rows.to_vector<int32_t>();
    for (size_t i = 0; i < kept.size(); ++i)
      if (kept[i] != int32_t(i)) return false;
    return true;
  }
  int64_t rows_ = -1;  // batch rows the cache and the stepper's own state hold; -1 before the first step
  bool use_cache_, slide_;
  int64_t window_;
  bool past_window_ = false;  // the sequences have passed the window: every step re-encodes it
  Device device_;
  DecoderCache cache_;
};

class LMStepper : public Stepper {
 public:
  LMStepper(DecoderLM& model, const GenerateOptions& opts)
      : Stepper(opts, model.config.max_len, model.device()), model_(model) {}

 protected:
  Tensor run(const Tensor& tokens, DecoderCache* cache) override { return model_.forward(tokens, Tensor(), cache).out; }

 private:
  DecoderLM& model_;
};

// b8 masks go through i32, which index_select takes.
Tensor select_batch_rows(const Tensor& t, const Tensor& rows) {
  if (!t.defined()) return t;
  if (t.dtype() != DType::b8) return index_select(t, 0, rows);
  return ne(index_select(t.to(DType::i32), 0, rows), 0.0);
}

class Seq2SeqStepper : public Stepper {
 public:
  Seq2SeqStepper(EncoderDecoder& model, const Source& src, const GenerateOptions& opts)
      : Stepper(opts, model.config.max_len, model.device()), model_(model) {
    if (src.padding.defined()) padding_ = src.padding.to(device());
    memory_ = model.encode(src.tokens.to(device()), padding_).out;
  }

 protected:
  void select_own_rows(const Tensor& rows) override {
    memory_ = select_batch_rows(memory_, rows);
    padding_ = select_batch_rows(padding_, rows);
  }

  Tensor run(const Tensor& tokens, DecoderCache* cache) override {
    return model_.decode(tokens, memory_, padding_, Tensor(), cache).out;
  }

 private:
  EncoderDecoder& model_;
  Tensor memory_, padding_;
};

// Eval mode and no autograd for the duration of a decoding run.
class DecodingScope {
 public:
  explicit DecodingScope(Module& model) : model_(model), was_training_(model.is_training()) { model.eval(); }
  ~DecodingScope() { model_.train(was_training_); }
  DecodingScope(const DecodingScope&) = delete;
  DecodingScope& operator=(const DecodingScope&) = delete;

 private:
  Module& model_;
  bool was_training_;
  NoGradGuard no_grad_;
};

// ---- sequences as plain rows ------------------------------------------------------

using Row = std::vector<int32_t>;

std::vector<Row> prefix_rows(const Tensor& prefix) {
  HEADROOM_CHECK(prefix.defined() && prefix.dim() == 2 && prefix.dtype() == DType::i32 && prefix.size(1) >= 1,
                 "[decoding] expected an i32 prefix [B, T0] with T0 >= 1, got ",
                 prefix.defined() ? shape_str(prefix.shape()) : "undefined");
  const int64_t B = prefix.size(0), T0 = prefix.size(1);
  std::vector<int32_t> flat = prefix.to_vector<int32_t>();
  std::vector<Row> rows(B);
  for (int64_t b = 0; b < B; ++b) rows[b].assign(flat.begin() + b * T0, flat.begin() + (b + 1) * T0);
  return rows;
}

// rows (all of one length) -> i32 [N, t]
Tensor to_tensor(const std::vector<Row>& rows) {
  std::vector<int32_t> flat;
  for (const Row& r : rows) flat.insert(flat.end(), r.begin(), r.end());
  return Tensor::from_vector(flat, {int64_t(rows.size()), int64_t(rows[0].size())});
}

Tensor to_index(const std::vector<int32_t>& rows) { return Tensor::from_vector(rows); }

// log_softmax of the next-token logits, [N, V] as rows of doubles.
std::vector<std::vector<double>> log_probs(const Tensor& logits) {
  const int64_t N = logits.size(0), V = logits.size(1);
  std::vector<double> flat = log_softmax(logits, -1).to_vector<double>();
  std::vector<std::vector<double>> rows(N);
  for (int64_t n = 0; n < N; ++n) rows[n].assign(flat.begin() + n * V, flat.begin() + (n + 1) * V);
  return rows;
}

void check_options(const GenerateOptions& opts) {
  HEADROOM_CHECK(opts.max_new >= 0, "[decoding] max_new must be >= 0, got ", opts.max_new);
}

// ---- greedy and sampling ---------------------------------------------------------------

// Picks the next token of one row from its logits.
using Choose = std::function<int32_t(const std::vector<double>& logits)>;

int32_t first_max(const std::vector<double>& values) {
  return int32_t(std::max_element(values.begin(), values.end()) - values.begin());  // first of equal maxima
}

Generated generate(Stepper& stepper, const Tensor& prefix, const GenerateOptions& opts, const Choose& choose) {
  check_options(opts);
  std::vector<Row> rows = prefix_rows(prefix);
  const size_t N = rows.size();
  Generated result{std::vector<Row>(N), std::vector<double>(N, 0.0)};
  std::vector<bool> finished(N, false);
  stepper.reserve(prefix.size(1) + opts.max_new);
  for (int64_t step = 0; step < opts.max_new; ++step) {
    Tensor logits = stepper.next_logits(to_tensor(rows));  // [N, V]
    std::vector<std::vector<double>> logp = log_probs(logits);
    std::vector<double> flat = logits.to_vector<double>();
    const size_t V = logp[0].size();
    for (size_t n = 0; n < N; ++n) {
      int32_t token = int32_t(std::max<int64_t>(opts.eos, 0));  // a finished row is fed eos (or 0): nobody reads it
      if (!finished[n]) {
        token = choose(std::vector<double>(flat.begin() + n * V, flat.begin() + (n + 1) * V));
        result.tokens[n].push_back(token);
        result.scores[n] += logp[n][token];
        finished[n] = token == opts.eos || (opts.on_token && !opts.on_token(int64_t(n), token));
      }
      rows[n].push_back(token);
    }
    if (std::all_of(finished.begin(), finished.end(), [](bool f) { return f; })) break;
  }
  return result;
}

Choose sampler(double temperature, int64_t top_k, Generator& gen) {
  HEADROOM_CHECK(temperature > 0 && top_k >= 0, "[sample] expected temperature > 0 and top_k >= 0, got ", temperature,
                 " and ", top_k);
  return [temperature, top_k, &gen](const std::vector<double>& logits) {
    const size_t V = logits.size(), k = top_k == 0 ? V : std::min<size_t>(top_k, V);
    std::vector<int32_t> ids(V);
    std::iota(ids.begin(), ids.end(), 0);
    std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
    std::vector<double> weights(k);  // exp((l - max) / temperature) of the k best
    for (size_t i = 0; i < k; ++i) weights[i] = std::exp((logits[ids[i]] - logits[ids[0]]) / temperature);
    double u = gen.next_uniform() * std::accumulate(weights.begin(), weights.end(), 0.0);
    for (size_t i = 0; i + 1 < k; ++i) {
      if (u < weights[i]) return ids[i];
      u -= weights[i];
    }
    return ids[k - 1];
  };
}

// ---- beam search --------------------------------------------------------------------------

// The length of the prefix rows a and b share.
size_t shared_length(const Row& a, const Row& b) {
  const size_t n = std::min(a.size(), b.size());
  return size_t(std::mismatch(a.begin(), a.begin() + n, b.begin()).first - a.begin());
}

struct Hypothesis {
  Row tokens;                     // new tokens
  std::vector<double> raw_after;  // per token i: Σ log p of tokens 0..i
  double raw = 0;                 // Σ log p of all of them; -inf marks a dead slot
  double score = 0;               // raw / len^length_penalty, once finished

  Hypothesis extended(int32_t token, double new_raw) const {
    Hypothesis h{tokens, raw_after, new_raw, 0};
    h.tokens.push_back(token);
    h.raw_after.push_back(new_raw);
    return h;
  }
  Hypothesis first(size_t length) const {
    return {Row(tokens.begin(), tokens.begin() + length),
            std::vector<double>(raw_after.begin(), raw_after.begin() + length), length ? raw_after[length - 1] : 0, 0};
  }
};

struct Candidate {
  double raw;
  int32_t beam, token;  // extends live beam `beam` (within its source) by `token`
};

class BeamSearch {
 public:
  BeamSearch(Stepper& stepper, const Tensor& prefix, int64_t beam, double length_penalty, const GenerateOptions& opts)
      : stepper_(stepper), K_(beam), alpha_(length_penalty), opts_(opts) {
    HEADROOM_CHECK(beam >= 1, "[beam_search] beam must be >= 1, got ", beam);
    check_options(opts);
    std::vector<Row> prefixes = prefix_rows(prefix);
    B_ = int64_t(prefixes.size());
    // Row b*K + j is beam j of source b; only beam 0 is live at the start.
    std::vector<int32_t> expand;
    for (int64_t b = 0; b < B_; ++b)
      for (int64_t j = 0; j < K_; ++j) {
        expand.push_back(int32_t(b));
        rows_.push_back(prefixes[b]);
        live_.push_back({{}, {}, j == 0 ? 0.0 : -INFINITY, 0});
      }
    stepper_.select_rows(to_index(expand));
    stepper_.reserve(prefix.size(1) + opts.max_new);
    finished_.resize(B_);
    emitted_.assign(B_, 0);
    stopped_.assign(B_, false);
  }

  Generated run() {
    for (int64_t step = 0; step < opts_.max_new && !all_done(); ++step) {
      std::vector<std::vector<double>> logp = log_probs(stepper_.next_logits(to_tensor(rows_)));
      std::vector<int32_t> parents(B_ * K_);
      std::vector<Hypothesis> next(B_ * K_);
      std::vector<Row> next_rows(B_ * K_);
      for (int64_t b = 0; b < B_; ++b) {
        std::vector<Candidate> chosen = done(b) ? std::vector<Candidate>() : advance(b, logp);
        for (int64_t j = 0; j < K_; ++j) {
          // Unfilled slots (done sources, too few candidates) stay dead copies of beam j.
          Candidate c = j < int64_t(chosen.size()) ? chosen[j] : Candidate{-INFINITY, int32_t(j), 0};
          const int64_t from = b * K_ + c.beam, to = b * K_ + j;
          parents[to] = int32_t(from);
          next[to] = live_[from].extended(c.token, c.raw);
          next_rows[to] = rows_[from];
          next_rows[to].push_back(c.token);
        }
      }
      stepper_.select_rows(to_index(parents));
      live_ = std::move(next);
      rows_ = std::move(next_rows);
      for (int64_t b = 0; b < B_; ++b) stream_settled(b);
    }
    for (int64_t b = 0; b < B_; ++b) {
      for (int64_t j = 0; j < K_ && !done(b); ++j)
        if (std::isfinite(live_[b * K_ + j].raw)) finish(b, live_[b * K_ + j]);
      if (const Hypothesis* top = best_of(b); top && !stopped_[b]) emit(b, *top, top->tokens.size());
    }
    Generated result;
    for (int64_t b = 0; b < B_; ++b) {
      const Hypothesis* top = best_of(b);
      result.tokens.push_back(top ? top->tokens : Row());
      result.scores.push_back(top ? top->score : -INFINITY);
    }
    return result;
  }

 private:
  bool done(int64_t b) const { return stopped_[b] || int64_t(finished_[b].size()) >= K_; }
  bool all_done() const {
    for (int64_t b = 0; b < B_; ++b)
      if (!done(b)) return false;
    return true;
  }

  void finish(int64_t b, Hypothesis h) {
    h.score = h.raw / std::pow(double(h.tokens.size()), alpha_);
    finished_[b].push_back(std::move(h));
  }

  // Ranks source b's extensions; finishes eos extensions ranked < K and
  // returns the best K others (fewer when there are not enough).
  std::vector<Candidate> advance(int64_t b, const std::vector<std::vector<double>>& logp) {
    std::vector<Candidate> all;
    for (int64_t j = 0; j < K_; ++j) {
      const Hypothesis& h = live_[b * K_ + j];
      if (!std::isfinite(h.raw)) continue;
      const std::vector<double>& row = logp[b * K_ + j];
      for (size_t v = 0; v < row.size(); ++v) all.push_back({h.raw + row[v], int32_t(j), int32_t(v)});
    }
    std::stable_sort(all.begin(), all.end(), [](const Candidate& x, const Candidate& y) { return x.raw > y.raw; });
    std::vector<Candidate> kept;
    for (size_t rank = 0; rank < all.size() && int64_t(kept.size()) < K_; ++rank) {
      const Candidate& c = all[rank];
      if (c.token != opts_.eos) {
        kept.push_back(c);
      } else if (int64_t(rank) < K_) {
        finish(b, live_[b * K_ + c.beam].extended(c.token, c.raw));
      }
    }
    return kept;
  }

  const Hypothesis* best_of(int64_t b) const {
    const Hypothesis* top = nullptr;
    for (const Hypothesis& h : finished_[b])
      if (!top || h.score > top->score) top = &h;
    return top;
  }

  // Streaming: the tokens every live and finished hypothesis of source b
  // shares are settled (the result starts with them), so they go to on_token
  // as soon as they are.
  void stream_settled(int64_t b) {
    if (!opts_.on_token || stopped_[b]) return;
    std::vector<const Hypothesis*> all;
    for (int64_t j = 0; j < K_; ++j)
      if (std::isfinite(live_[b * K_ + j].raw)) all.push_back(&live_[b * K_ + j]);
    for (const Hypothesis& h : finished_[b]) all.push_back(&h);
    if (all.empty()) return;
    size_t settled = all[0]->tokens.size();
    for (const Hypothesis* h : all) settled = std::min(settled, shared_length(all[0]->tokens, h->tokens));
    emit(b, *all[0], settled);
  }

  // Calls on_token with tokens emitted_[b] .. upto-1 of h (eos is not
  // streamed, as in greedy); a false return makes h's tokens up to there
  // source b's result.
  void emit(int64_t b, const Hypothesis& h, size_t upto) {
    if (!opts_.on_token) return;
    for (; emitted_[b] < upto; ++emitted_[b]) {
      const int32_t token = h.tokens[emitted_[b]];
      if (token == opts_.eos || opts_.on_token(b, token)) continue;
      Hypothesis kept = h.first(emitted_[b] + 1);
      finished_[b].clear();
      finish(b, std::move(kept));
      stopped_[b] = true;
      return;
    }
  }

  Stepper& stepper_;
  int64_t K_, B_ = 0;
  double alpha_;
  GenerateOptions opts_;
  std::vector<Row> rows_;                          // [B*K] prefix + new tokens of every live beam
  std::vector<Hypothesis> live_;                   // [B*K]; raw = -inf marks a dead slot
  std::vector<std::vector<Hypothesis>> finished_;  // per source
  std::vector<size_t> emitted_;                    // per source: tokens streamed to on_token
  std::vector<bool> stopped_;                      // per source: on_token returned false
};

}  // namespace

// ---- public entry points -----------------------------------------------------------------------

Generated greedy(DecoderLM& model, const Tensor& prompt, const GenerateOptions& opts) {
  DecodingScope scope(model);
  LMStepper stepper(model, opts);
  return generate(stepper, prompt, opts, first_max);
}

Generated greedy(EncoderDecoder& model, const Source& src, const Tensor& prefix, const GenerateOptions& opts) {
  DecodingScope scope(model);
  Seq2SeqStepper stepper(model, src, opts);
  return generate(stepper, prefix, opts, first_max);
}

Generated sample(DecoderLM& model, const Tensor& prompt, double temperature, int64_t top_k, Generator& gen,
                 const GenerateOptions& opts) {
  DecodingScope scope(model);
  LMStepper stepper(model, opts);
  return generate(stepper, prompt, opts, sampler(temperature, top_k, gen));
}

Generated sample(EncoderDecoder& model, const Source& src, const Tensor& prefix, double temperature, int64_t top_k,
                 Generator& gen, const GenerateOptions& opts) {
  DecodingScope scope(model);
  Seq2SeqStepper stepper(model, src, opts);
  return generate(stepper, prefix, opts, sampler(temperature, top_k, gen));
}

Generated beam_search(DecoderLM& model, const Tensor& prompt, int64_t beam, double length_penalty,
                      const GenerateOptions& opts) {
  DecodingScope scope(model);
  LMStepper stepper(model, opts);
  return BeamSearch(stepper, prompt, beam, length_penalty, opts).run();
}

Generated beam_search(EncoderDecoder& model, const Source& src, const Tensor& prefix, int64_t beam,
                      double length_penalty, const GenerateOptions& opts) {
  DecodingScope scope(model);
  Seq2SeqStepper stepper(model, src, opts);
  return BeamSearch(stepper, prefix, beam, length_penalty, opts).run();
}

}  // namespace headroom
