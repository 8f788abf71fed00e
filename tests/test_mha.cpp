// Dense multi-head attention: a per-head loop reference, GQA/MQA, a head
// width other than d / h, the KV cache (decoding token by token equals the
// full forward), cross-attention, a gradcheck through the module, and MACs.
// The rotary embedding (RoPE): frozen PyTorch fixtures of the op and of MHA
// with it, a gradcheck, and cached decoding.
#include "fixture_reader.h"
#include "helpers.h"

using namespace headroom;

namespace {

// softmax(q kᵀ/√d_h + mask) v per head, from the module's own weights, in
// plain loops.  x: [B, T, d], memory: [B, S, d]
std::vector<double> reference_mha(MultiHeadAttention& m, const Tensor& x, const Tensor& memory, bool causal) {
  NoGradGuard no_grad;
  const int64_t B = x.size(0), T = x.size(1), S = memory.size(1);
  const int64_t h = m.config.heads, d_h = m.head_dim, group = h / m.config.kv_heads, d = h * d_h;  // d: q's width
  std::vector<double> q = m.q_proj->forward(x).to_vector<double>();                                // [B, T, h*d_h]
  std::vector<double> k = m.k_proj->forward(memory).to_vector<double>();                           // [B, S, h_kv*d_h]
  std::vector<double> v = m.v_proj->forward(memory).to_vector<double>();
  const int64_t kvw = m.config.kv_heads * d_h;
  std::vector<double> concat(B * T * d, 0.0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t j = 0; j < h; ++j)
      for (int64_t t = 0; t < T; ++t) {
        const int64_t kv_head = j / group;
        std::vector<double> p(S);
        double top = -INFINITY, total = 0;
        for (int64_t s = 0; s < S; ++s) {
          if (causal && s > t + (S - T)) {
            p[s] = -INFINITY;
            continue;
          }
          double dot = 0;
          for (int64_t c = 0; c < d_h; ++c)
            dot += q[(b * T + t) * d + j * d_h + c] * k[(b * S + s) * kvw + kv_head * d_h + c];
          p[s] = dot / std::sqrt(double(d_h));
          top = std::max(top, p[s]);
        }
        for (double& e : p) total += (e = std::exp(e - top));
        for (int64_t c = 0; c < d_h; ++c) {
          double acc = 0;
          for (int64_t s = 0; s < S; ++s) acc += p[s] / total * v[(b * S + s) * kvw + kv_head * d_h + c];
          concat[(b * T + t) * d + j * d_h + c] = acc;
        }
      }
  Tensor heads = Tensor::from_vector(concat, {B, T, d}).to(x.dtype());
  return m.o_proj->forward(heads).to_vector<double>();
}

}  // namespace

TEST_CASE("MHA matches a per-head loop: MHA, GQA, MQA, causal and cross-attention, d_h = d / h and not") {
  Generator gen(5);
  for (int64_t head_dim : {0, 5})
    for (int64_t kv_heads : {4, 2, 1}) {
      CAPTURE(head_dim);
      MHAConfig config{16, 4, kv_heads};
      config.head_dim = head_dim;
      MultiHeadAttention m(config, gen);
      CHECK(m.head_dim == (head_dim ? head_dim : 4));
      CHECK(m.q_proj->weight.shape() == Shape{4 * m.head_dim, 16});
      CHECK(m.o_proj->weight.shape() == Shape{16, 4 * m.head_dim});
      Tensor x = Tensor::randn({2, 5, 16}, gen), memory = Tensor::randn({2, 7, 16}, gen);
      CHECK_CLOSE(m.forward({x, Tensor(), true}).out.to_vector<double>(), reference_mha(m, x, x, true), 1e-5, 1e-4);
      CHECK_CLOSE(m.forward({x, memory}).out.to_vector<double>(), reference_mha(m, x, memory, false), 1e-5, 1e-4);
    }
}

TEST_CASE("MHA decoding with a KV cache equals the full forward") {
  Generator gen(6);
  MultiHeadAttention m({16, 4, 2}, gen);
  Tensor x = Tensor::randn({2, 6, 16}, gen), memory = Tensor::randn({2, 4, 16}, gen);
  NoGradGuard no_grad;
  Tensor full_self = m.forward({x, Tensor(), true}).out;
  Tensor full_cross = m.forward({x, memory}).out;
  AttentionCache self_cache, cross_cache;
  for (int64_t t = 0; t < 6; ++t) {
    Tensor step = x.narrow(1, t, 1);
    AttentionInput self_in{step, Tensor(), true};
    self_in.cache = &self_cache;
    CHECK_CLOSE(m.forward(self_in).out, full_self.narrow(1, t, 1), 1e-5);
    AttentionInput cross_in{step, memory};
    cross_in.cache = &cross_cache;
    CHECK_CLOSE(m.forward(cross_in).out, full_cross.narrow(1, t, 1), 1e-5);
  }
  CHECK(self_cache.length() == 6);
  CHECK(cross_cache.length() == 4);
}

namespace {

// An MHA layer, an input of `tokens` tokens and its full causal forward, for
// the cache tests.
struct CachedMHA {
  Generator gen;
  MultiHeadAttention m;
  Tensor x, full;
  CachedMHA(uint64_t seed, int64_t tokens) : gen(seed), m({16, 4, 2}, gen), x(Tensor::randn({2, tokens, 16}, gen)) {
    NoGradGuard no_grad;
    full = m.forward({x, Tensor(), true}).out;
  }
  // Feeds tokens [start, start + length) through `cache`: they must give the full forward's rows.
  void step(AttentionCache& cache, int64_t start, int64_t length) {
    AttentionInput in{x.narrow(1, start, length), Tensor(), true};
    in.cache = &cache;
    CHECK_CLOSE(m.forward(in).out, full.narrow(1, start, length), 1e-5);
  }
};

}  // namespace

TEST_CASE("the KV cache appends in place: storage doubles, stays O(L), and survives a beam reorder") {
  // 40 single-token steps after a 3-token prompt cross the doublings 3 → 6 → 12 → 24 → 48.
  CachedMHA f(16, 43);
  NoGradGuard no_grad;
  AttentionCache cache;
  std::vector<int64_t> capacities;
  for (int64_t start = 0, length = 3; start < 43; start += length, length = 1) {
    f.step(cache, start, length);
    CHECK(cache.capacity() < 2 * cache.length() + 1);  // O(L) memory
    if (capacities.empty() || capacities.back() != cache.capacity()) capacities.push_back(cache.capacity());
  }
  CHECK(capacities == std::vector<int64_t>{3, 6, 12, 24, 48});  // a copy of the cache per doubling only
  CHECK(cache.k.shape() == Shape{2, 2, 43, 4});
  CHECK(!cache.k.is_contiguous());  // a view of the storage's valid prefix
  // Beam search's reorder: rows swapped, the next step sees the swapped keys.
  Tensor swapped_x = cat({f.x.narrow(0, 1, 1), f.x.narrow(0, 0, 1)}, 0);
  cache.reorder(Tensor::from_vector<int32_t>({1, 0}, {2}));
  Tensor next = Tensor::randn({2, 1, 16}, f.gen);
  AttentionInput in{next, Tensor(), true};
  in.cache = &cache;
  CHECK_CLOSE(f.m.forward(in).out, f.m.forward({cat({swapped_x, next}, 1), Tensor(), true}).out.narrow(1, 43, 1), 1e-5);
  CHECK(cache.length() == 44);
}

TEST_CASE("a reserved KV cache allocates once; reserving more keeps what it holds") {
  CachedMHA f(17, 30);
  NoGradGuard no_grad;
  AttentionCache cache;
  cache.reserve(20);  // prompt 3 + 17 steps: never grows
  for (int64_t start = 0, length = 3; start < 20; start += length, length = 1) {
    f.step(cache, start, length);
    CHECK(cache.capacity() == 20);
  }
  cache.reserve(25);  // grows now, with the 20 positions kept
  CHECK(cache.capacity() == 25);
  CHECK(cache.length() == 20);
  for (int64_t start = 20; start < 30; ++start) f.step(cache, start, 1);  // past the reservation: doubling again
  CHECK(cache.capacity() == 50);
  CHECK_THROWS_HEADROOM(cache.reserve(-1), "a cache cannot reserve -1 positions");
}

TEST_CASE("MHA gradcheck through every parameter and the input (f64)") {
  Generator gen(7);
  MultiHeadAttention m({8, 2, 1}, gen);
  Tensor pad = Tensor::from_vector<uint8_t>({0, 0, 1}, {1, 3});
  auto result = testing::gradcheck_attention(m, {1, 3, 8}, gen, /*causal=*/true, pad);
  CHECK_MESSAGE(result.ok, result.message);
}

TEST_CASE("MHA: head weights scale heads before the output projection; MACs; errors") {
  Generator gen(8);
  MultiHeadAttention m({8, 2}, gen);
  Tensor x = Tensor::randn({1, 3, 8}, gen);
  AttentionInput in{x};
  Tensor heads = m.head_outputs(in);
  Tensor ones = Tensor::ones({1, 3, 2});
  CHECK_CLOSE(m.project_out(heads, ones), m.forward(in).out, 1e-6);
  Tensor drop_second = Tensor::from_vector<float>({1, 0, 1, 0, 1, 0}, {1, 3, 2});
  Tensor only_first = heads.clone();
  {
    NoGradGuard g;
    only_first.narrow(1, 1, 1).zero_();
  }
  CHECK_CLOSE(m.project_out(heads, drop_second), m.project_out(only_first, Tensor()), 1e-6);
  // d = 8, h = 2, T = S = 4: projections 4·T·d², core 2·(pairs)·d
  CHECK(m.macs(4, 4, false) == 4 * 4 * 64 + 2 * 16 * 8);
  CHECK(m.macs(4, 4, true) == 4 * 4 * 64 + 2 * 10 * 8);
  // d_h = 3 (not d / h = 4): the projections' widths follow h·d_h = 6.
  MHAConfig narrow{8, 2};
  narrow.head_dim = 3;
  CHECK(MultiHeadAttention(narrow).macs(4, 4, false) == 2 * 4 * 8 * 6 + 2 * 4 * 8 * 6 + 2 * 16 * 3 * 2);
  CHECK_THROWS_HEADROOM(MultiHeadAttention({10, 4}), "must be a positive multiple of heads");
  MHAConfig negative{8, 2};
  negative.head_dim = -1;
  CHECK_THROWS_HEADROOM(MultiHeadAttention{negative}, "head_dim (-1) >= 0");
  CHECK_THROWS_HEADROOM(MultiHeadAttention({8, 4, 3}), "must divide heads");
  CHECK_THROWS_HEADROOM(m.forward({Tensor::randn({1, 3, 6})}), "expected x of shape [B, T, 8]");
}

// ---- head width other than d / h, and RoPE: frozen PyTorch fixtures -------------

namespace {

const char* const kMhaFixture = HEADROOM_FIXTURES_DIR "/mha.safetensors";

// rows [B·h·T, d_h] of x [B, h, T, d_h] and their positions start + t: i32 [B·h·T].
Tensor row_positions(const Tensor& x, int64_t start) {
  const int64_t T = x.size(2), rows = x.numel() / x.size(3);
  std::vector<int32_t> positions(rows);
  for (int64_t r = 0; r < rows; ++r) positions[r] = int32_t(start + r % T);
  return Tensor::from_vector(positions);
}

}  // namespace

TEST_CASE("rotary_embedding matches a frozen PyTorch rotate-half RoPE (d_h = 4 and 6, start > 0): values, gradients") {
  testing::Fixture f(kMhaFixture);
  CHECK(f.metadata("script") == "tests/fixtures/gen_mha.py");
  for (const std::string name : {"d4", "d6"}) {
    CAPTURE(name);
    const std::string prefix = "rotary." + name + ".";
    const int64_t start = std::stoll(f.metadata(prefix + "start"));
    const double theta = std::stod(f.metadata(prefix + "theta"));
    CHECK(start > 0);
    for (auto [dtype, tol] : {std::pair{DType::f64, 1e-12}, std::pair{DType::f32, 1e-6}}) {
      Tensor x = f.get(prefix + "x").to(dtype).set_requires_grad();
      Tensor out = rotary_embedding(x, start, theta);
      CHECK(out.dtype() == dtype);
      out.backward(f.get(prefix + "grad_out").to(dtype));
      CHECK_CLOSE(out, f.get(prefix + "out"), tol, tol);
      CHECK_CLOSE(x.grad(), f.get(prefix + "grad.x"), tol, tol);
      // The row form at the same positions gives the same values.
      NoGradGuard no_grad;
      const int64_t d_h = x.size(3), end = start + x.size(2);
      Tensor rows = rotary_embedding_rows(x.reshape({-1, d_h}), row_positions(x, start), end, theta);
      CHECK_CLOSE(rows, out.reshape({-1, d_h}), 0.0);
    }
  }
}

TEST_CASE("rotary_embedding: gradcheck (both forms), norms kept, scores depend on relative positions; errors") {
  Generator gen(21);
  Tensor x = Tensor::randn({2, 2, 3, 6}, gen, DType::f64).set_requires_grad();
  auto full = gradcheck([](const std::vector<Tensor>& in) { return rotary_embedding(in[0], 4, 50.0); }, {x});
  CHECK_MESSAGE(full.ok, full.message);
  Tensor rows = Tensor::randn({5, 4}, gen, DType::f64).set_requires_grad();
  Tensor positions = Tensor::from_vector<int32_t>({0, 7, 3, 3, 9});
  auto by_row = gradcheck(
      [&](const std::vector<Tensor>& in) { return rotary_embedding_rows(in[0], positions, 10, 10000.0); }, {rows});
  CHECK_MESSAGE(by_row.ok, by_row.message);

  NoGradGuard no_grad;
  // Each (i, i + d_h/2) pair is rotated: norms are kept; position 0 is the identity.
  Tensor rotated = rotary_embedding(x, 11, 10000.0);
  CHECK_CLOSE(sum(rotated * rotated, {3}), sum(x * x, {3}), 1e-12);
  CHECK_CLOSE(rotary_embedding(x.narrow(2, 0, 1), 0, 10000.0), x.narrow(2, 0, 1), 0.0);
  CHECK(testing::compare(rotated, x, 1e-3) != "");
  // <RoPE(q, p), RoPE(k, s)> depends on p - s only.
  Tensor q = Tensor::randn({1, 1, 1, 8}, gen, DType::f64), k = Tensor::randn({1, 1, 1, 8}, gen, DType::f64);
  auto score = [&](int64_t p, int64_t s) {
    return sum(rotary_embedding(q, p, 100.0) * rotary_embedding(k, s, 100.0)).item();
  };
  CHECK(score(3, 1) == doctest::Approx(score(12, 10)).epsilon(1e-12));
  CHECK(std::abs(score(3, 1) - score(3, 2)) > 1e-3);

  CHECK_THROWS_HEADROOM(rotary_embedding(Tensor::randn({1, 1, 2, 3}), 0, 10000.0),
                        "[rotary_embedding] expected a 4-d input whose last dimension (the head width) is even");
  CHECK_THROWS_HEADROOM(rotary_embedding(Tensor::randn({1, 2, 4}), 0, 10000.0), "expected a 4-d input");
  CHECK_THROWS_HEADROOM(rotary_embedding(Tensor::randn({1, 1, 2, 4}), -1, 10000.0), "start must be >= 0, got -1");
  CHECK_THROWS_HEADROOM(rotary_embedding(Tensor::randn({1, 1, 2, 4}), 0, 0.0), "theta must be > 0, got 0");
  CHECK_THROWS_HEADROOM(rotary_embedding_rows(Tensor::randn({2, 4}), Tensor::from_vector<float>({0, 1}), 2, 1e4),
                        "[rotary_embedding_rows] expected i32 positions of shape [2], got f32 (2)");
  MHAConfig odd{8, 2};
  odd.head_dim = 3;
  odd.rope = true;
  CHECK_THROWS_HEADROOM(MultiHeadAttention{odd}, "[MultiHeadAttention] rope needs an even head_dim, got 3");
  MHAConfig no_base{8, 2};
  no_base.rope = true;
  no_base.rope_theta = -1;
  CHECK_THROWS_HEADROOM(MultiHeadAttention{no_base}, "[MultiHeadAttention] rope_theta must be > 0, got -1");
}

TEST_CASE("MHA matches frozen PyTorch MHA: d_h = 3 (not d / h), and RoPE with GQA and d_h = 6: values, gradients") {
  testing::Fixture f(kMhaFixture);
  MHAConfig narrow{8, 2, 2};
  narrow.head_dim = 3;
  MHAConfig rope{8, 4, 2};
  rope.head_dim = 6;
  rope.rope = true;
  rope.rope_theta = 100;
  for (auto name_config : {std::pair{"dh3", narrow}, std::pair{"rope", rope}}) {
    auto name = name_config.first;  // named: Clang 14 lambdas cannot capture structured bindings
    auto config = name_config.second;
    CAPTURE(name);
    const std::string prefix = std::string("mha.") + name + ".";
    for (auto [dtype_, atol, rtol] : {std::tuple{DType::f64, 1e-10, 1e-10}, std::tuple{DType::f32, 1e-5, 1e-4}}) {
      DType dtype = dtype_;  // named: Clang 14 lambdas cannot capture structured bindings
      CAPTURE(dtype);
      auto m = testing::fixture_layer<MultiHeadAttention>(f, prefix, config, dtype);
      Tensor x = f.get(prefix + "x").to(dtype).set_requires_grad();
      AttentionOutput o = m->forward({x, Tensor(), true});
      sum(o.out * f.get(prefix + "grad_out").to(dtype)).backward();
      CHECK_CLOSE(o.out, f.get(prefix + "out"), atol, rtol);
      CHECK_CLOSE(x.grad(), f.get(prefix + "grad.x"), atol, rtol);
      for (const auto& param_value : m->named_parameters()) {
        const auto& param = param_value.first;  // named: Clang 14 lambdas cannot capture structured bindings
        const auto& value = param_value.second;
        CAPTURE(param);
        CHECK_CLOSE(value.grad(), f.get(prefix + "grad." + param), atol, rtol);
      }
    }
  }
}

TEST_CASE("MHA with RoPE: cached decoding equals the full causal forward; RoPE moves self-attention only") {
  Generator gen(22);
  MHAConfig config{16, 4, 2};
  config.head_dim = 6;
  config.rope = true;
  MultiHeadAttention m(config, gen);
  MHAConfig plain_config = config;
  plain_config.rope = false;
  MultiHeadAttention plain(plain_config, gen);
  plain.load_state_dict(m.state_dict());
  Tensor x = Tensor::randn({2, 6, 16}, gen), memory = Tensor::randn({2, 4, 16}, gen);
  NoGradGuard no_grad;
  Tensor full = m.forward({x, Tensor(), true}).out;
  CHECK(testing::compare(full, plain.forward({x, Tensor(), true}).out, 1e-3) != "");  // positions matter
  CHECK_CLOSE(testing::decode_in_chunks(m, x, {1, 2, 3}), full, 1e-5, 1e-5);
  // Cross-attention ignores RoPE by design: the same output as without it.
  AttentionInput cross{x, memory};
  cross.key_padding = Tensor::from_vector<uint8_t>({0, 0, 1, 0, 0, 0, 0, 1}, {2, 4});
  CHECK_CLOSE(m.forward(cross).out, plain.forward(cross).out, 0.0);
}
