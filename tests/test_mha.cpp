// Dense multi-head attention: a per-head loop reference, GQA/MQA, the KV cache
// (decoding token by token equals the full forward), cross-attention, a
// gradcheck through the module, and MACs.
#include "helpers.h"

using namespace headroom;

namespace {

// softmax(q kᵀ/√d_h + mask) v per head, from the module's own weights, in
// plain loops.  x: [B, T, d], memory: [B, S, d]
std::vector<double> reference_mha(MultiHeadAttention& m, const Tensor& x, const Tensor& memory, bool causal) {
  NoGradGuard no_grad;
  const int64_t B = x.size(0), T = x.size(1), S = memory.size(1), d = m.config.dim;
  const int64_t h = m.config.heads, d_h = m.head_dim, group = h / m.config.kv_heads;
  std::vector<double> q = m.q_proj->forward(x).to_vector<double>();       // [B, T, h*d_h]
  std::vector<double> k = m.k_proj->forward(memory).to_vector<double>();  // [B, S, h_kv*d_h]
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
          if (causal && s > t + (S - T)) { p[s] = -INFINITY; continue; }
          double dot = 0;
          for (int64_t c = 0; c < d_h; ++c) dot += q[(b * T + t) * d + j * d_h + c] * k[(b * S + s) * kvw + kv_head * d_h + c];
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

TEST_CASE("MHA matches a per-head loop: MHA, GQA, MQA, causal and cross-attention") {
  Generator gen(5);
  for (int64_t kv_heads : {4, 2, 1}) {
    MultiHeadAttention m({16, 4, kv_heads}, gen);
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
  { NoGradGuard g; only_first.narrow(1, 1, 1).zero_(); }
  CHECK_CLOSE(m.project_out(heads, drop_second), m.project_out(only_first, Tensor()), 1e-6);
  // d = 8, h = 2, T = S = 4: projections 4·T·d², core 2·(pairs)·d
  CHECK(m.macs(4, 4, false) == 4 * 4 * 64 + 2 * 16 * 8);
  CHECK(m.macs(4, 4, true) == 4 * 4 * 64 + 2 * 10 * 8);
  CHECK_THROWS_HEADROOM(MultiHeadAttention({10, 4}), "must be a positive multiple of heads");
  CHECK_THROWS_HEADROOM(MultiHeadAttention({8, 4, 3}), "must divide heads");
  CHECK_THROWS_HEADROOM(m.forward({Tensor::randn({1, 3, 6})}), "expected x of shape [B, T, 8]");
}
