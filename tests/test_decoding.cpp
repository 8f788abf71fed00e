// Incremental decoding: cached logits equal the full forward at every step
// (LLaMA-style models too); greedy with and without the cache; beam search of width 1 is greedy, is
// unchanged by the cache (reordered caches), and with a wide beam finds the
// best sequence of a brute-force search with the same scoring; sampling with
// top_k = 1 is greedy, stays in the top k, and is reproducible by seed.
#include <algorithm>
#include <functional>

#include "headroom/models/decoding.h"
#include "helpers.h"
#include "transformer_helpers.h"

using namespace headroom;

namespace {

ModelConfig small_config(int64_t vocab) {
  ModelConfig c = testing::tiny_model_config(vocab);
  c.attention.options["kv_heads"] = "1";  // MQA: the cache holds one K/V head
  return c;
}

Tensor ids(const std::vector<int32_t>& v, int64_t B) { return testing::token_rows(v, B); }

// logits [1, t, V] of a whole target sequence, without a cache
using FullForward = std::function<Tensor(const Tensor& tokens)>;

struct Models {
  explicit Models(ModelConfig c = small_config(6)) : config(std::move(c)) {
    lm.eval();
    seq2seq.eval();
  }
  Generator gen{11};
  ModelConfig config;
  DecoderLM lm{config, gen};
  EncoderDecoder seq2seq{config, gen};
  Source src{ids({3, 1, 4, 1, 5, 0, 2, 4}, 2), Tensor::from_vector<uint8_t>({0, 0, 0, 0, 0, 0, 1, 1}, {2, 4})};
  FullForward lm_forward = [this](const Tensor& t) { return lm.forward(t).out; };
  // Row-by-row conditioning on the source: row b of the tokens reads source row b.
  FullForward seq2seq_forward = [this](const Tensor& t) {
    return seq2seq.decode(t, seq2seq.encode(src.tokens, src.padding).out, src.padding).out;
  };
};

// logits [B, t, V] of the tokens after the cache's position, extending the cache
using CachedForward = std::function<Tensor(const Tensor& tokens, DecoderCache* cache)>;

// Feeds `tokens` [B, T] one position at a time through `step` with one
// cache and checks each step's logits against the full forward's.
void check_steps_match_full(const FullForward& full_forward, const CachedForward& step, const Tensor& tokens) {
  Tensor full = full_forward(tokens);
  DecoderCache cache;
  for (int64_t t = 0; t < tokens.size(1); ++t)
    CHECK_CLOSE(step(tokens.narrow(1, t, 1), &cache), full.narrow(1, t, 1), 1e-5, 1e-5);
}

// Σ log p of `tail` after `head` under the full forward, and the length normaliser.
double sequence_log_prob(const FullForward& forward, const std::vector<int32_t>& head,
                         const std::vector<int32_t>& tail) {
  std::vector<int32_t> all(head);
  all.insert(all.end(), tail.begin(), tail.end());
  Tensor logp = log_softmax(forward(ids(all, 1)), -1);  // [1, t, V]
  double total = 0;
  for (size_t i = 0; i < tail.size(); ++i)
    total += logp.select(0, 0).select(0, int64_t(head.size() + i - 1)).select(0, tail[i]).item();
  return total;
}

// Every continuation of at most `length` tokens over `vocab` ids in which eos
// can only come last, and continuations shorter than `length` end with eos.
std::vector<std::vector<int32_t>> all_continuations(int32_t vocab, int32_t eos, size_t length) {
  std::vector<std::vector<int32_t>> done, open{{}};
  for (size_t step = 0; step < length; ++step) {
    std::vector<std::vector<int32_t>> next;
    for (const auto& s : open)
      for (int32_t v = 0; v < vocab; ++v) {
        std::vector<int32_t> longer(s);
        longer.push_back(v);
        (v == eos || step + 1 == length ? done : next).push_back(longer);
      }
    open = std::move(next);
  }
  return done;
}

}  // namespace

TEST_CASE("cached decoding gives the full forward's logits at every step") {
  Models f;
  NoGradGuard no_grad;
  std::vector<int32_t> seq = {1, 4, 2, 5, 0, 3, 3, 1, 0, 2};  // two rows of 5
  Tensor tokens = ids(seq, 2);
  // DecoderLM: a 2-token prompt, then one token at a time.
  Tensor full = f.lm.forward(tokens).out;
  DecoderCache cache;
  CHECK_CLOSE(f.lm.forward(tokens.narrow(1, 0, 2), Tensor(), &cache).out, full.narrow(1, 0, 2), 1e-5, 1e-5);
  for (int64_t t = 2; t < 5; ++t)
    CHECK_CLOSE(f.lm.forward(tokens.narrow(1, t, 1), Tensor(), &cache).out, full.narrow(1, t, 1), 1e-5, 1e-5);
  CHECK(cache.position == 5);
  CHECK(cache.self.size() == 2);
  CHECK(cache.self[0].length() == 5);
  CHECK(cache.self[0].capacity() == 8);  // doubled from the prompt's 2
  CHECK(cache.cross.empty());
  // Reserved (as generation reserves prompt + max_new): every layer allocates 5 once, same logits.
  DecoderCache reserved;
  reserved.reserved = 5;
  for (int64_t t = 0; t < 5; ++t)
    CHECK_CLOSE(f.lm.forward(tokens.narrow(1, t, 1), Tensor(), &reserved).out, full.narrow(1, t, 1), 1e-5, 1e-5);
  for (const AttentionCache& layer : reserved.self) CHECK(layer.capacity() == 5);
  // EncoderDecoder, with source padding: cross-attention keys computed once.
  Tensor memory = f.seq2seq.encode(f.src.tokens, f.src.padding).out;
  Tensor full_dec = f.seq2seq.decode(tokens, memory, f.src.padding).out;
  DecoderCache dec_cache;
  for (int64_t t = 0; t < 5; ++t)
    CHECK_CLOSE(f.seq2seq.decode(tokens.narrow(1, t, 1), memory, f.src.padding, Tensor(), &dec_cache).out,
                full_dec.narrow(1, t, 1), 1e-5, 1e-5);
  CHECK(dec_cache.cross[1].length() == 4);
  CHECK(dec_cache.self[1].length() == 5);
  CHECK_THROWS_HEADROOM(f.lm.forward(tokens, Tensor::zeros({2, 5}, DType::b8), &cache), "takes no target padding");
}

TEST_CASE(
    "LLaMA-style models (RMSNorm, SwiGLU, no biases, RoPE, GQA), MHA and MoH: cached logits equal the full ones") {
  for (const char* type : {"mha", "moh"}) {
    CAPTURE(type);
    ModelConfig c = testing::tiny_llama_config(6);
    c.dim = 16;
    c.heads = 4;  // MoH: 1 shared head and the top 1 of 3 routed heads
    c.attention.type = type;
    c.attention.options["kv_heads"] = "2";
    Models f(c);
    NoGradGuard no_grad;
    Tensor tokens = ids({1, 4, 2, 5, 0, 3, 3, 1, 0, 2}, 2);
    check_steps_match_full(
        f.lm_forward, [&](const Tensor& t, DecoderCache* cache) { return f.lm.forward(t, Tensor(), cache).out; },
        tokens);
    Tensor memory = f.seq2seq.encode(f.src.tokens, f.src.padding).out;
    check_steps_match_full(
        f.seq2seq_forward,
        [&](const Tensor& t, DecoderCache* cache) {
          return f.seq2seq.decode(t, memory, f.src.padding, Tensor(), cache).out;
        },
        tokens);
    Tensor prompt = ids({1, 2, 3, 4}, 2);
    CHECK(greedy(f.lm, prompt, {6, -1, true}).tokens == greedy(f.lm, prompt, {6, -1, false}).tokens);
  }
}

TEST_CASE("a beam reorder, then the cache's growth: cached logits equal the full forward of the reordered rows") {
  Models f;
  NoGradGuard no_grad;
  // Two rows of 9 tokens; after 5 (capacity 8) the rows swap, as a beam step would; at 9 the storage doubles.
  Tensor tokens = ids({1, 4, 2, 5, 0, 3, 3, 1, 0, 2, 5, 1, 4, 0, 2, 2, 3, 1}, 2);
  Tensor swapped = cat({tokens.narrow(0, 1, 1), tokens.narrow(0, 0, 1)}, 0);
  Tensor full = f.lm.forward(tokens).out, full_swapped = f.lm.forward(swapped).out;
  DecoderCache cache;
  for (int64_t t = 0; t < 9; ++t) {
    if (t == 5) cache.reorder(Tensor::from_vector<int32_t>({1, 0}, {2}));
    const Tensor& source = t < 5 ? tokens : swapped;
    CHECK_CLOSE(f.lm.forward(source.narrow(1, t, 1), Tensor(), &cache).out,
                (t < 5 ? full : full_swapped).narrow(1, t, 1), 1e-5, 1e-5);
  }
  CHECK(cache.self[0].capacity() == 16);
}

TEST_CASE("greedy: cached equals uncached, for both models; eos ends a row") {
  Models f;
  Tensor prompt = ids({1, 2, 3, 4}, 2), prefix = ids({0, 0}, 2);
  GenerateOptions cached{8, -1, true}, uncached{8, -1, false};
  Generated a = greedy(f.lm, prompt, cached), b = greedy(f.lm, prompt, uncached);
  CHECK(a.tokens == b.tokens);
  CHECK_CLOSE(a.scores, b.scores, 1e-5, 0);
  CHECK(a.tokens[0].size() == 8);
  Generated c = greedy(f.seq2seq, f.src, prefix, cached), d = greedy(f.seq2seq, f.src, prefix, uncached);
  CHECK(c.tokens == d.tokens);
  CHECK_CLOSE(c.scores, d.scores, 1e-5, 0);
  // With the first row's third token as eos, each row stops at its first eos.
  const int32_t eos = a.tokens[0][2];
  Generated e = greedy(f.lm, prompt, {8, eos, true});
  for (size_t b = 0; b < 2; ++b) {
    auto first_eos = std::find(a.tokens[b].begin(), a.tokens[b].end(), eos);
    CHECK(e.tokens[b] == std::vector<int32_t>(a.tokens[b].begin(), std::min(first_eos + 1, a.tokens[b].end())));
  }
  CHECK(e.tokens[0].size() <= 3);
  CHECK(f.lm.is_training() == false);
  f.lm.train();
  greedy(f.lm, prompt, cached);
  CHECK(f.lm.is_training());  // the mode is restored
}

TEST_CASE("beam search: width 1 is greedy; the cache (reordered per step) changes nothing") {
  Models f;
  Tensor prompt = ids({1, 2, 3, 4}, 2), prefix = ids({0, 0}, 2);
  GenerateOptions opts{6, 5, true};
  Generated g = greedy(f.lm, prompt, opts), b1 = beam_search(f.lm, prompt, 1, 0.0, opts);
  CHECK(g.tokens == b1.tokens);
  CHECK_CLOSE(g.scores, b1.scores, 1e-9, 0);
  Generated g2 = greedy(f.seq2seq, f.src, prefix, opts), b2 = beam_search(f.seq2seq, f.src, prefix, 1, 0.0, opts);
  CHECK(g2.tokens == b2.tokens);
  CHECK_CLOSE(g2.scores, b2.scores, 1e-9, 0);
  GenerateOptions uncached = opts;
  uncached.use_cache = false;
  for (double alpha : {0.0, 1.0}) {
    Generated x = beam_search(f.lm, prompt, 3, alpha, opts), y = beam_search(f.lm, prompt, 3, alpha, uncached);
    CHECK(x.tokens == y.tokens);
    CHECK_CLOSE(x.scores, y.scores, 1e-5, 0);
    Generated u = beam_search(f.seq2seq, f.src, prefix, 3, alpha, opts);
    Generated v = beam_search(f.seq2seq, f.src, prefix, 3, alpha, uncached);
    CHECK(u.tokens == v.tokens);
    CHECK_CLOSE(u.scores, v.scores, 1e-5, 0);
  }
  CHECK_THROWS_HEADROOM(beam_search(f.lm, prompt, 0), "beam must be >= 1");
}

TEST_CASE("beam search with a wide beam finds the brute-force best of all sequences up to length 3") {
  Generator gen(12);
  ModelConfig c = small_config(3);  // ids 0, 1 and eos = 2
  DecoderLM lm(c, gen);
  EncoderDecoder seq2seq(c, gen);
  lm.eval(), seq2seq.eval();
  NoGradGuard no_grad;
  Source src{ids({1, 0, 1}, 1), Tensor()};
  const std::vector<int32_t> head = {1};
  FullForward lm_forward = [&](const Tensor& t) { return lm.forward(t).out; };
  FullForward s2s_forward = [&](const Tensor& t) { return seq2seq.decode(t, seq2seq.encode(src.tokens).out).out; };
  const int32_t eos = 2;
  // Width 12 keeps every prefix (at most 4 live after two steps) and finishes every eos extension.
  GenerateOptions opts{3, eos, true};
  for (double alpha : {0.0, 1.0}) {
    for (bool is_lm : {true, false}) {
      const FullForward& forward = is_lm ? lm_forward : s2s_forward;
      std::vector<int32_t> best;
      double best_score = -INFINITY;
      for (const auto& tail : all_continuations(3, eos, 3)) {
        const double score = sequence_log_prob(forward, head, tail) / std::pow(double(tail.size()), alpha);
        if (score > best_score) best_score = score, best = tail;
      }
      Generated found = is_lm ? beam_search(lm, ids(head, 1), 12, alpha, opts)
                              : beam_search(seq2seq, src, ids(head, 1), 12, alpha, opts);
      INFO("alpha ", alpha, " lm ", is_lm);
      CHECK(found.tokens[0] == best);
      CHECK(found.scores[0] == doctest::Approx(best_score).epsilon(1e-5));
    }
  }
}

TEST_CASE("streaming: on_token sees every token as it is chosen, rows in order, and can end a row") {
  Models f;
  Tensor prompt = ids({1, 2, 3, 4}, 2);
  GenerateOptions opts;
  opts.max_new = 6;
  std::vector<std::pair<int64_t, int32_t>> streamed;
  opts.on_token = [&](int64_t row, int32_t token) {
    streamed.emplace_back(row, token);
    return !(row == 1 && streamed.size() == 4);  // row 1 ends at its second token
  };
  Generator gen(5);
  Generated out = sample(f.lm, prompt, 2.0, 0, gen, opts);
  REQUIRE(out.tokens[0].size() == 6);
  REQUIRE(out.tokens[1].size() == 2);
  std::vector<std::pair<int64_t, int32_t>> expected;  // step by step: row 0, then row 1 while it lives
  for (size_t step = 0; step < 6; ++step) {
    expected.emplace_back(0, out.tokens[0][step]);
    if (step < 2) expected.emplace_back(1, out.tokens[1][step]);
  }
  CHECK(streamed == expected);
  // Without the stop, the run is the same up to it (after it, a stopped row draws no more, as one
  // ended by eos, so row 0's later draws shift).
  GenerateOptions plain;
  plain.max_new = 6;
  Generator again(5);
  Generated whole = sample(f.lm, prompt, 2.0, 0, again, plain);
  CHECK(std::vector<int32_t>(whole.tokens[0].begin(), whole.tokens[0].begin() + 3) ==
        std::vector<int32_t>(out.tokens[0].begin(), out.tokens[0].begin() + 3));
  CHECK(std::vector<int32_t>(whole.tokens[1].begin(), whole.tokens[1].begin() + 2) == out.tokens[1]);
}

TEST_CASE("sampling: top_k = 1 is greedy; samples stay in the top k; a seed reproduces a run") {
  Models f;
  Tensor prompt = ids({1, 2, 3, 4}, 2), prefix = ids({0, 0}, 2);
  GenerateOptions opts{8, -1, true};
  Generator g1(5), g2(5), g3(6);
  Generated greedy_lm = greedy(f.lm, prompt, opts);
  CHECK(sample(f.lm, prompt, 0.7, 1, g1, opts).tokens == greedy_lm.tokens);
  CHECK(sample(f.seq2seq, f.src, prefix, 2.0, 1, g1, opts).tokens == greedy(f.seq2seq, f.src, prefix, opts).tokens);
  Generated a = sample(f.lm, prompt, 2.0, 0, g2, opts);
  Generator again(6);
  CHECK(sample(f.lm, prompt, 2.0, 0, g3, opts).tokens == sample(f.lm, prompt, 2.0, 0, again, opts).tokens);
  Generator same_as_g2(5);
  CHECK(sample(f.lm, prompt, 2.0, 0, same_as_g2, opts).tokens == a.tokens);
  CHECK(a.tokens != sample(f.lm, prompt, 2.0, 0, g3, opts).tokens);  // 16 draws at temperature 2
  // top_k = 2: every sampled token is one of the two most likely at its step.
  Generated top2 = sample(f.lm, prompt, 5.0, 2, g2, opts);
  NoGradGuard no_grad;
  for (int64_t b = 0; b < 2; ++b) {
    std::vector<int32_t> row = {int32_t(1 + 2 * b), int32_t(2 + 2 * b)};
    row.insert(row.end(), top2.tokens[b].begin(), top2.tokens[b].end());
    std::vector<double> logits = f.lm.forward(ids(row, 1)).out.to_vector<double>();  // [1, 10, 6]
    for (size_t i = 0; i < top2.tokens[b].size(); ++i) {
      const double* step = logits.data() + (1 + i) * 6;
      int greater = 0;
      for (int v = 0; v < 6; ++v) greater += step[v] > step[top2.tokens[b][i]];
      CHECK(greater < 2);
    }
  }
  CHECK_THROWS_HEADROOM(sample(f.lm, prompt, 0.0, 1, g1), "temperature > 0");
  CHECK_THROWS_HEADROOM(greedy(f.lm, Tensor::zeros({2, 0}, DType::i32)), "expected an i32 prefix [B, T0]");
}

// ---- the context window ------------------------------------------------------------

namespace {

// The tokens greedy picks when every step feeds the last `window` tokens
// (all of them while fewer) to a full forward: the reference of sliding.
std::vector<int32_t> windowed_greedy(DecoderLM& lm, std::vector<int32_t> row, int64_t window, int64_t steps) {
  NoGradGuard no_grad;
  std::vector<int32_t> out;
  for (int64_t s = 0; s < steps; ++s) {
    const size_t start = row.size() > size_t(window) ? row.size() - size_t(window) : 0;
    std::vector<int32_t> seen(row.begin() + start, row.end());
    std::vector<double> logits = lm.forward(ids(seen, 1)).out.select(1, int64_t(seen.size()) - 1).to_vector<double>();
    const int32_t next = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
    out.push_back(next);
    row.push_back(next);
  }
  return out;
}

}  // namespace

TEST_CASE("past the window, each step sees the last `window` tokens: cached, uncached and the reference agree") {
  Models f;
  f.lm.eval();
  const std::vector<int32_t> prompt = {1, 2, 3, 4};
  for (bool use_cache : {true, false}) {
    GenerateOptions opts;
    opts.max_new = 12, opts.window = 6, opts.use_cache = use_cache;
    INFO("use_cache ", use_cache);
    const std::vector<int32_t> reference = windowed_greedy(f.lm, prompt, 6, 12);
    CHECK(greedy(f.lm, ids(prompt, 1), opts).tokens[0] == reference);
    CHECK(beam_search(f.lm, ids(prompt, 1), 1, 1.0, opts).tokens[0] == reference);  // width 1 is greedy
    Generator g1(3), g2(3);
    CHECK(sample(f.lm, ids(prompt, 1), 0.5, 1, g1, opts).tokens[0] == reference);  // top-1 sampling too
    // A wide beam past the window runs and gives as many tokens; sampling is reproducible there.
    CHECK(beam_search(f.lm, ids(prompt, 1), 3, 1.0, opts).tokens[0].size() == 12);
    Generator g3(3);
    CHECK(sample(f.lm, ids(prompt, 1), 2.0, 0, g2, opts).tokens ==
          sample(f.lm, ids(prompt, 1), 2.0, 0, g3, opts).tokens);
  }
}

TEST_CASE("the default window is the model's context (max_len); slide = false refuses to pass it") {
  Generator gen(4);
  ModelConfig c = small_config(6);
  c.positions = PositionKind::learned, c.max_len = 6;  // a learned table of 6 rows
  DecoderLM lm(c, gen);
  Tensor prompt = ids({1, 2, 3, 4}, 1);
  GenerateOptions opts;
  opts.max_new = 20;
  CHECK(greedy(lm, prompt, opts).tokens[0] == windowed_greedy(lm, {1, 2, 3, 4}, 6, 20));  // never past row 5
  opts.slide = false;
  CHECK_THROWS_HEADROOM(greedy(lm, prompt, opts), "the sequence reaches 7 tokens, past the window of 6");
  Generator g(1);
  CHECK_THROWS_HEADROOM(sample(lm, prompt, 1.0, 0, g, opts), "past the window of 6");
  CHECK_THROWS_HEADROOM(beam_search(lm, prompt, 2, 1.0, opts), "past the window of 6");
  opts.max_new = 3;  // feeds 4, 5, 6 tokens: within the window
  CHECK(greedy(lm, prompt, opts).tokens[0].size() == 3);
  opts.window = -1;
  CHECK_THROWS_HEADROOM(greedy(lm, prompt, opts), "expected a window >= 1 (0: the model's context), got -1");
}

TEST_CASE("a model trained at a short context keeps its quality far past it (the sample's tail scores as its head)") {
  // A cycle of 5 tokens, learned positions covering the 12 it is trained at.
  Generator gen(8);
  ModelConfig c = small_config(6);
  c.positions = PositionKind::learned, c.max_len = 12, c.dim = 16, c.decoder_layers = 1;
  DecoderLM lm(c, gen);
  AdamW opt(lm.parameters(), 1e-2);
  Generator offsets(2);
  for (int step = 0; step < 120; ++step) {
    std::vector<int32_t> window;
    for (int b = 0; b < 8; ++b) {
      const int64_t start = offsets.next_int(5);
      for (int64_t t = 0; t < 13; ++t) window.push_back(int32_t(1 + (start + t) % 5));
    }
    Tensor rows = ids(window, 8);  // [8, 13]
    Tensor logits = lm.forward(rows.narrow(1, 0, 12).contiguous()).out;
    Tensor loss = cross_entropy(logits.reshape({-1, 6}), rows.narrow(1, 1, 12).contiguous().reshape({-1}));
    opt.zero_grad();
    loss.backward();
    opt.step();
  }
  GenerateOptions opts;
  opts.max_new = 100;  // 8 times the trained context
  const std::vector<int32_t> text = greedy(lm, ids({1, 2, 3}, 1), opts).tokens[0];
  // The share of tokens that continue the cycle, in the first and the last 20.
  auto in_cycle = [&](size_t from) {
    int right = 0;
    for (size_t i = from; i < from + 20; ++i) right += text[i] == 1 + (i + 3) % 5;
    return right;
  };
  CHECK(in_cycle(0) == 20);
  CHECK(in_cycle(text.size() - 20) == in_cycle(0));
}

TEST_CASE("beam search streams: on_token gets the settled tokens, which make the result; false ends a row") {
  Models f;
  Tensor prompt = ids({1, 2, 3, 4}, 2);
  GenerateOptions opts;
  opts.max_new = 8;
  std::vector<std::vector<int32_t>> streamed(2);
  opts.on_token = [&](int64_t row, int32_t token) {
    streamed[size_t(row)].push_back(token);
    return true;
  };
  GenerateOptions plain;
  plain.max_new = 8;
  const Generated out = beam_search(f.lm, prompt, 3, 1.0, opts);
  CHECK(out.tokens == beam_search(f.lm, prompt, 3, 1.0, plain).tokens);
  CHECK(streamed == out.tokens);
  // Row 1 stops at its first token: its result is that token, row 0 runs on.
  std::vector<std::vector<int32_t>> seen(2);
  opts.on_token = [&](int64_t row, int32_t token) {
    seen[size_t(row)].push_back(token);
    return row == 0;
  };
  const Generated stopped = beam_search(f.lm, prompt, 3, 1.0, opts);
  CHECK(stopped.tokens[1] == std::vector<int32_t>{out.tokens[1][0]});
  CHECK(seen[1] == stopped.tokens[1]);
  CHECK(stopped.tokens[0] == out.tokens[0]);
}
