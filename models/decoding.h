#pragma once
// Autoregressive decoding for DecoderLM and EncoderDecoder: greedy, sampling
// (temperature, top-k) and beam search, all incremental through a
// DecoderCache (decoder self-attention keys/values appended per token,
// cross-attention keys/values computed once), so one step costs one token.
//
// The prefix is an i32 [B, T0] tensor (T0 >= 1, no padding): the prompt of a
// DecoderLM, or the target start (e.g. a column of BOS) of an
// EncoderDecoder, whose source is encoded once.  Each function runs under
// NoGradGuard with the model in eval mode (restored afterwards).  The model
// may live on CUDA: prefix and source (on any device) go to the model's
// device, the cache stays there, and each step's logits come to the host,
// where the tokens are chosen.
#include <cstdint>
#include <functional>
#include <vector>

#include "headroom/core/rng.h"
#include "headroom/models/transformer.h"

namespace headroom {

// The context window.  A model is trained on sequences of at most
// config.max_len tokens (its context); positions past it were never trained
// (learned positions have no row for them, sinusoidal ones were never seen).
// So once prefix + new tokens pass the window, each step feeds the model the
// last `window` tokens only, re-encoded from scratch, as nanoGPT-style
// generation does: every token is predicted from at most `window` tokens at
// positions 0 .. window-1, exactly as in training.  The same holds for RoPE:
// sliding the KV cache instead would keep keys that upper layers computed
// from tokens outside the window, which training never produced.  A step
// past the window costs a forward of `window` tokens instead of one
// (docs/models.md, "Context and generation length").
struct GenerateOptions {
  int64_t max_new = 32;   // new tokens at most
  int64_t eos = -1;       // end-of-sequence id; -1 = none (always max_new tokens)
  bool use_cache = true;  // false recomputes the whole prefix every step (the reference in tests)
  int64_t window = 0;     // tokens the model sees at most; 0: the model's context (config.max_len)
  bool slide = true;      // false: throw instead of sliding once the sequence passes the window
  // Streaming: called with each new token of batch row `row` once it is
  // fixed, rows in order within a step.  Greedy and sampling call it as each
  // token is chosen.  Beam search calls it as soon as every live and finished
  // hypothesis of the row starts with the token (so the result does too), and
  // with the rest of the best hypothesis at the end.  The eos token is never
  // passed.  Returning false ends that row there: its result is the tokens
  // passed so far, that token last.
  std::function<bool(int64_t row, int32_t token)> on_token;
};

struct Generated {
  // Per batch row: the new tokens, ending with eos when the row produced one.
  std::vector<std::vector<int32_t>> tokens;
  // Per row: the sum of the tokens' log-probabilities (the model's own
  // distribution, before temperature / top-k); beam search divides it by
  // the length penalty.
  std::vector<double> scores;
};

// Source of an EncoderDecoder run: src i32 [B, S], padding b8 [B, S] or undefined.
struct Source {
  Tensor tokens;
  Tensor padding;
};

// The most likely token at every step (ties: the lowest id).
Generated greedy(DecoderLM& model, const Tensor& prompt, const GenerateOptions& opts = {});
Generated greedy(EncoderDecoder& model, const Source& src, const Tensor& prefix, const GenerateOptions& opts = {});

// Draws each token from softmax(logits / temperature) restricted to the
// top_k largest logits (top_k = 0: all; ties: the lowest ids), one uniform
// draw of `gen` per row and step, rows in order.  top_k = 1 is greedy.
Generated sample(DecoderLM& model, const Tensor& prompt, double temperature, int64_t top_k, Generator& gen,
                 const GenerateOptions& opts = {});
Generated sample(EncoderDecoder& model, const Source& src, const Tensor& prefix, double temperature, int64_t top_k,
                 Generator& gen, const GenerateOptions& opts = {});

// Beam search as fairseq's: each step ranks the beam·V extensions of the
// live hypotheses by their summed log-probability; an extension by eos that
// ranks among the first `beam` is finished, and the best `beam` others stay
// live (their caches reordered with index_select along the batch).  A row
// stops once it holds `beam` finished hypotheses; at max_new the live ones
// are finished as they are.  The result is the finished hypothesis with the
// best length-normalised score, fairseq-style:
//   score = Σ log p / len^length_penalty      len = new tokens, eos included
// (length_penalty = 0: raw sum).  beam = 1 is greedy.
Generated beam_search(DecoderLM& model, const Tensor& prompt, int64_t beam, double length_penalty = 1.0,
                      const GenerateOptions& opts = {});
Generated beam_search(EncoderDecoder& model, const Source& src, const Tensor& prefix, int64_t beam,
                      double length_penalty = 1.0, const GenerateOptions& opts = {});

}  // namespace headroom
