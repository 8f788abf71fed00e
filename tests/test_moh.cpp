// MoH (methods.md §3): gates against a per-token loop of the code and paper
// formulas (methods.md §3.3, §3.2), the load-balance loss in both forms, MHA
// equivalences (checklist 4, i.e. methods.md §7 item 4), the qnorm router's
// straight-through estimator (checklist 5), the KV cache (checklist 7), the
// routed path against the dense reference (outputs and every gradient),
// gradchecks, conversion from a dense layer, MACs, errors, a frozen PyTorch
// fixture and a learning check.
// Options against frozen PyTorch fixtures (moh_options.safetensors): a head
// width other than d / h, the qnorm router's two straight-through estimators
// (Ste), and the load balance without padded tokens (BalancePadding); RoPE
// (cached decoding, routed == dense, conversion, cross-attention unchanged).
#include <algorithm>
#include <numeric>

#include "headroom/models/moh.h"
#include "fixture_reader.h"
#include "helpers.h"

using namespace headroom;
using headroom::testing::check_same_pass;
using headroom::testing::layer_pass;
using headroom::testing::LayerPass;
using Scaling = MoHConfig::GateScaling;
using Router = MoHConfig::Router;

namespace {

MoHConfig make_config(int64_t dim, int64_t heads, int64_t shared, int64_t k, Router router = Router::learned,
                      Scaling scaling = Scaling::code) {
  MoHConfig c;
  c.mha = {dim, heads};
  c.shared_heads = shared;
  c.routed_k = k;
  c.router = router;
  c.scaling = scaling;
  c.beta = 1;                                  // aux = L_b, as the reference formulas give it
  c.allow_full_routing = shared + k == heads;  // the checklist's edge cases
  return c;
}

// Router weights of std 0.5 instead of 0.02: gates far from uniform, no
// near-ties in the top-k (finite differences must not flip a selection).
void spread_routers(MoHAttention& m, Generator& gen) {
  NoGradGuard no_grad;
  for (auto& router : {m.router_routed, m.router_shared, m.router_mix})
    if (router) router->weight.copy_(Tensor::randn(router->weight.shape(), gen) * 0.5);
}

// softmax(W x) for W [rows, d] (row-major) and one token x [d].
std::vector<double> softmax_of(const std::vector<double>& w, int64_t rows, const double* x, int64_t d) {
  std::vector<double> p(rows);
  for (int64_t i = 0; i < rows; ++i) p[i] = std::inner_product(x, x + d, w.begin() + i * d, 0.0);
  const double top = *std::max_element(p.begin(), p.end());
  double total = 0;
  for (double& e : p) total += (e = std::exp(e - top));
  for (double& e : p) e /= total;
  return p;
}

struct ReferenceRouting {
  std::vector<double> gates;  // [N, h]
  double balance = 0;         // the paper's L_b = Σ_e P_e f_e
};

// The code's or the paper's gates (methods.md §3.3, §3.2), token by token, for a learned router.
ReferenceRouting reference_routing(const MoHAttention& m, const Tensor& x, bool code) {
  const int64_t h = m.config.heads, d = m.config.dim, shared = m.moh_config.shared_heads;
  const int64_t k = m.moh_config.routed_k, routed = h - shared, n = x.numel() / d;
  std::vector<double> xs = x.to_vector<double>();
  auto weights = [](const std::shared_ptr<Linear>& l) {
    return l ? l->weight.to_vector<double>() : std::vector<double>();
  };
  std::vector<double> w_r = weights(m.router_routed), w_s = weights(m.router_shared), w_h = weights(m.router_mix);
  ReferenceRouting ref;
  ref.gates.assign(n * h, 0.0);
  std::vector<double> prob_sum(routed, 0.0), picked_count(routed, 0.0);
  for (int64_t t = 0; t < n; ++t) {
    const double* xt = xs.data() + t * d;
    double* g = ref.gates.data() + t * h;
    for (int64_t i = 0; i < shared; ++i) g[i] = 1;  // h_s = 1: the constant gate
    if (shared > 1) {
      std::vector<double> s = softmax_of(w_s, shared, xt, d);
      for (int64_t i = 0; i < shared; ++i) g[i] = code ? shared * s[i] : s[i];
    }
    if (k > 0) {
      std::vector<double> r = softmax_of(w_r, routed, xt, d);
      std::vector<int64_t> order(routed);
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return r[a] > r[b]; });
      double picked_mass = 0;
      for (int64_t j = 0; j < k; ++j) picked_mass += r[order[j]];
      for (int64_t j = 0; j < k; ++j) {
        const int64_t e = order[j];
        g[shared + e] = code ? k * r[e] / picked_mass : r[e];
        picked_count[e] += 1;
      }
      for (int64_t e = 0; e < routed; ++e) prob_sum[e] += r[e];
    }
    if (shared > 0 && k > 0) {
      std::vector<double> a = softmax_of(w_h, 2, xt, d);
      for (int64_t i = 0; i < h; ++i) g[i] *= (code ? 2 : 1) * a[i < shared ? 0 : 1];
    }
  }
  for (int64_t e = 0; e < routed; ++e) ref.balance += (prob_sum[e] / n) * (picked_count[e] / n);
  return ref;
}

// The output and (training) the aux loss as one vector, for gradchecks.
Tensor out_and_aux(const AttentionOutput& o) {
  return o.aux.defined() ? cat({o.out.reshape({-1}), o.aux.value.reshape({1})}) : o.out.reshape({-1});
}

}  // namespace

TEST_CASE(
    "MoH gates match per-token loops of the code and paper formulas (methods.md §3.3, §3.2); code L_b = E_r × paper "
    "L_b") {
  Generator gen(1);
  struct Case {
    int64_t heads, shared, k;
  };
  for (Case c : {Case{6, 3, 2}, Case{4, 0, 2}, Case{4, 1, 2}, Case{4, 4, 0}, Case{5, 2, 3}}) {
    CAPTURE(c.shared);
    CAPTURE(c.k);
    MoHAttention code(make_config(4 * c.heads, c.heads, c.shared, c.k), gen);
    spread_routers(code, gen);
    CHECK((code.router_routed != nullptr) == (c.k > 0));  // methods.md §3.3 step 1: which routers a layer has
    CHECK((code.router_shared != nullptr) == (c.shared > 1));
    CHECK((code.router_mix != nullptr) == (c.shared > 0 && c.k > 0));
    MoHConfig paper_config = make_config(4 * c.heads, c.heads, c.shared, c.k, Router::learned, Scaling::paper);
    paper_config.load_balance = MoHConfig::LoadBalance::paper;
    MoHAttention paper(paper_config, gen);
    paper.load_state_dict(code.state_dict());
    Tensor x = Tensor::randn({2, 5, 4 * c.heads}, gen);
    NoGradGuard no_grad;
    AttentionOutput code_out = code.forward({x}), paper_out = paper.forward({x});
    ReferenceRouting code_ref = reference_routing(code, x, true), paper_ref = reference_routing(paper, x, false);
    CHECK_CLOSE(code_out.stats.gates.to_vector<double>(), code_ref.gates, 1e-5, 1e-5);
    CHECK_CLOSE(paper_out.stats.gates.to_vector<double>(), paper_ref.gates, 1e-5, 1e-5);
    CHECK(code_out.stats.gates.shape() == Shape{10, c.heads});
    if (c.k == 0) {
      CHECK_FALSE(code_out.aux.defined());
      CHECK_FALSE(code_out.stats.indices.defined());
      continue;
    }
    const double routed = double(c.heads - c.shared);
    CHECK(paper_out.aux.value.item() == doctest::Approx(paper_ref.balance).epsilon(1e-5));
    CHECK(code_out.aux.value.item() == doctest::Approx(routed * paper_out.aux.value.item()).epsilon(1e-5));
    // Stats: the routed heads per token (absolute ids) and the load of every head.
    CHECK(code_out.stats.indices.shape() == Shape{10, c.k});
    std::vector<int32_t> routed_ids = code_out.stats.indices.to_vector<int32_t>();
    std::vector<double> gates = code_ref.gates, load(c.heads, 0.0);
    for (size_t p = 0; p < routed_ids.size(); ++p) CHECK(gates[p / c.k * c.heads + routed_ids[p]] > 0);
    for (size_t i = 0; i < gates.size(); ++i) load[i % c.heads] += gates[i] > 0;
    CHECK(code_out.stats.load.to_vector<double>() == load);
    // Evaluation: no aux loss.
    code.eval();
    CHECK_FALSE(code.forward({x}).aux.defined());
  }
}

TEST_CASE("MoH with K_r = 0 and W_s = 0 is MHA (code) and MHA / h_s (paper) [checklist 4]") {
  Generator gen(2);
  for (Scaling scaling : {Scaling::code, Scaling::paper}) {
    MoHConfig config = make_config(8, 4, 4, 0, Router::learned, scaling);
    config.mha.bias = scaling == Scaling::code;  // MHA / h_s holds without an output bias
    MultiHeadAttention dense(config.mha, gen);
    MoHAttention m(config, gen);
    m.load_state_dict(dense.state_dict(), false);
    NoGradGuard no_grad;
    m.router_shared->weight.zero_();
    Tensor x = Tensor::randn({2, 5, 8}, gen);
    AttentionInput in{x, Tensor(), true};
    Tensor expected = dense.forward(in).out;
    if (scaling == Scaling::paper) expected = expected / 4.0;
    // The dense reference multiplies each head by exactly 1 (or 1/4): bitwise.
    CHECK(m.forward_dense_reference(in).out.to_vector<float>() == expected.to_vector<float>());
    CHECK_CLOSE(m.forward(in).out, expected, 1e-6, 1e-5);
  }
}

TEST_CASE(
    "MoH qnorm router: 0/1 gates, forward bit-identical to MHA on the active heads, STE gradient "
    "[checklist 5]") {
  // h = 6, h_s = 2, E_r = 4, K_r = 2.  (With E_r = 2 the std-normalised
  // scores are always exactly √2 apart, so r is constant and the router's
  // gradient is 0: the test needs E_r > 2.)
  const int64_t B = 2, T = 4, h = 6, shared = 2, routed = 4, k = 2;
  Generator gen(3);
  MultiHeadAttention dense({12, h}, gen);
  dense.to(DType::f64);
  dense.eval();
  auto moh = moh_from_mha(dense, shared, k);
  CHECK(moh->moh_config.router == Router::qnorm);
  CHECK_FALSE(moh->is_training());
  CHECK(moh->named_parameters().size() == dense.named_parameters().size());
  Tensor x = Tensor::randn({B, T, 12}, gen, DType::f64), dy = Tensor::randn({B, T, 12}, gen, DType::f64);
  AttentionInput in{x, Tensor(), true};
  AttentionOutput routed_out = moh->forward(in), reference = moh->forward_dense_reference(in);

  // The selection: shared heads always; the K_r largest ‖q_i‖ of the others.
  Tensor mask = reference.stats.gates.to(DType::f64).reshape({B, T, h});
  std::vector<double> gates = mask.to_vector<double>(), q;
  {
    NoGradGuard no_grad;
    q = dense.queries(x).permute({0, 2, 1, 3}).contiguous().to_vector<double>();  // [B, T, h, d_h]
  }
  for (int64_t t = 0; t < B * T; ++t) {
    auto norm = [&](int64_t head) { return std::hypot(q[(t * h + head) * 2], q[(t * h + head) * 2 + 1]); };
    for (int64_t head = 0; head < h; ++head) {
      int64_t larger = 0;
      for (int64_t other = shared; other < h; ++other) larger += norm(other) > norm(head);
      CHECK(gates[t * h + head] == (head < shared || larger < k ? 1.0 : 0.0));
    }
  }
  Tensor restricted = dense.project_out(dense.head_outputs(in), mask);
  CHECK(reference.out.to_vector<double>() == restricted.to_vector<double>());
  CHECK_CLOSE(routed_out.out, restricted, 1e-12, 1e-12);

  // Backward: restricted MHA (the mask a constant) gives the gradient through
  // the attention; the STE adds Σ_{selected i} ∂L/∂g_i · ∂r_i/∂W_q with
  // ∂L/∂g_i = <H_i W_O^i, dy>.  Rebuild that term by hand and compare.
  sum(routed_out.out * dy).backward();
  Tensor moh_grad = moh->q_proj->weight.grad();
  dense.zero_grad();
  sum(restricted * dy).backward();
  Tensor attention_grad = dense.q_proj->weight.grad();
  dense.zero_grad();
  Tensor heads = dense.head_outputs(in).detach();
  Tensor routed_q = dense.queries(x).permute({0, 2, 1, 3}).narrow(2, shared, routed);  // [B, T, E_r, d_h]
  Tensor norms = sqrt(sum(routed_q * routed_q, {3}));
  Tensor r = softmax(norms / sqrt(var(norms, {2}, 1, true)), -1);  // [B, T, E_r]
  Tensor surrogate = Tensor::scalar(0, DType::f64);
  for (int64_t i = 0; i < routed; ++i) {
    Tensor only_head = Tensor::zeros({B, T, h}, DType::f64);
    only_head.narrow(2, shared + i, 1).fill_(1);
    Tensor dg;
    {
      NoGradGuard no_grad;
      Tensor share = dense.project_out(heads, only_head) - dense.o_proj->bias;  // H_i W_O^i
      dg = sum(share * dy, {2});                                                // [B, T]
    }
    surrogate = surrogate + sum(mask.select(2, shared + i) * r.select(2, i) * dg);
  }
  surrogate.backward();
  Tensor ste_grad = dense.q_proj->weight.grad();
  CHECK(max(abs(ste_grad), {0, 1}).item() > 1e-3);  // the router does get a gradient
  CHECK_CLOSE(moh_grad, attention_grad + ste_grad, 1e-10, 1e-8);
}

TEST_CASE("MoH decoding with a KV cache equals the full forward [checklist 7]") {
  // Chunks of 1, 2 and 3 new tokens: routing depends only on each token, the
  // causal offset on the cache length.
  Generator gen(4);
  for (auto router_rope : {std::pair{Router::learned, false}, std::pair{Router::qnorm, false},
                           std::pair{Router::learned, true}, std::pair{Router::qnorm, true}}) {
    auto router = router_rope.first;  // named: Clang 14 lambdas cannot capture structured bindings
    auto rope = router_rope.second;
    CAPTURE(router == Router::qnorm);
    CAPTURE(rope);
    MoHConfig config = make_config(16, 4, 1, 2, router);
    config.mha.rope = rope;
    MoHAttention m(config, gen);
    spread_routers(m, gen);
    m.eval();
    Tensor x = Tensor::randn({2, 6, 16}, gen), memory = Tensor::randn({2, 4, 16}, gen);
    NoGradGuard no_grad;
    for (bool cross : {false, true}) {
      AttentionInput whole{x, cross ? memory : Tensor(), !cross};
      AttentionCache cache, dense_cache;
      std::vector<Tensor> pieces;
      for (auto [start, length] : {std::pair<int64_t, int64_t>{0, 1}, {1, 2}, {3, 3}}) {
        AttentionInput chunk = whole;
        chunk.x = x.narrow(1, start, length);
        chunk.cache = &cache;
        pieces.push_back(m.forward(chunk).out);
        chunk.cache = &dense_cache;  // routed decode ≡ the dense-masked decode
        CHECK_CLOSE(pieces.back(), m.forward_dense_reference(chunk).out, 1e-5, 1e-5);
      }
      CHECK_CLOSE(cat(pieces, 1), m.forward(whole).out, 1e-5, 1e-5);
      CHECK(cache.length() == (cross ? 4 : 6));
    }
  }
}

TEST_CASE("MoH without autograd keeps W_o by head until W_o changes: in place, by load, or in another dtype") {
  Generator gen(6);
  MoHAttention m(make_config(16, 4, 1, 2, Router::learned), gen);
  spread_routers(m, gen);
  m.eval();
  Tensor x = Tensor::randn({2, 5, 16}, gen);
  AttentionInput in{x, Tensor(), true};
  auto kept = [&] {  // the no-grad path, which keeps the copy, against the dense reference
    NoGradGuard no_grad;
    Tensor out = m.forward(in).out;
    CHECK_CLOSE(out, m.forward_dense_reference(in).out, 1e-5, 1e-5);
    return out;
  };
  const Tensor first = kept();
  m.o_proj->weight.detach().copy_(m.o_proj->weight.detach() * 2);  // an optimizer step writes in place too
  CHECK_FALSE(testing::compare(kept(), first, 1e-3, 1e-3).empty());
  m.load_state_dict(MoHAttention(make_config(16, 4, 1, 2, Router::learned), gen).state_dict());
  kept();
  m.to(DType::f64);  // a new storage
  in.x = x.to(DType::f64);
  kept();
}

TEST_CASE("MoH routed path equals the dense reference: output, aux loss and every gradient") {
  Generator gen(5);
  struct Case {
    MoHConfig config;
    std::string name;
    DType dtype = DType::f32;
  };
  std::vector<Case> cases = {
      {make_config(8, 4, 2, 1), "code"},    {make_config(8, 4, 2, 2, Router::learned, Scaling::paper), "paper"},
      {make_config(8, 4, 0, 2), "h_s = 0"}, {make_config(8, 4, 1, 2), "h_s = 1"},
      {make_config(8, 4, 4, 0), "K_r = 0"}, {make_config(8, 4, 2, 1, Router::qnorm), "qnorm"}};
  cases.push_back({make_config(12, 4, 1, 2), "GQA h_kv = 2, no bias"});
  cases.back().config.mha.kv_heads = 2;
  cases.back().config.mha.bias = false;
  cases.push_back({make_config(8, 4, 2, 1), "attention dropout"});
  cases.back().config.mha.attn_dropout = 0.25;
  cases.push_back({make_config(8, 4, 2, 1), "d_h = 3"});
  cases.back().config.mha.head_dim = 3;
  // qnorm with RoPE in f64: W_q's gradient sums the router's and the
  // attention's terms in another order on each path, which f32 rounds apart
  // by ~2e-5 (in f64 the paths agree to 1e-12).
  for (Router router : {Router::learned, Router::qnorm}) {
    cases.push_back(
        {make_config(8, 4, 1, 2, router), router == Router::qnorm ? "qnorm, RoPE, d_h = 6, f64" : "RoPE, d_h = 6"});
    cases.back().config.mha.head_dim = 6;
    cases.back().config.mha.rope = true;
    cases.back().dtype = router == Router::qnorm ? DType::f64 : DType::f32;
  }
  for (const Case& c : cases) {
    CAPTURE(c.name);
    MoHAttention m(c.config, gen);
    spread_routers(m, gen);
    m.to(c.dtype);
    Tensor x = Tensor::randn({2, 5, c.config.mha.dim}, gen, c.dtype),
           dy = Tensor::randn({2, 5, c.config.mha.dim}, gen, c.dtype);
    const uint64_t dropout_from = gen.offset();  // both paths draw the same mask, indexed by (b, head, t, s)
    LayerPass routed = layer_pass(m, false, x, dy, AttentionInput{Tensor(), Tensor(), true});
    for (const Tensor& g : routed.grads) REQUIRE(g.defined());  // every parameter, and x, gets a gradient
    gen.set_state(gen.seed(), dropout_from);
    check_same_pass(routed, layer_pass(m, true, x, dy, AttentionInput{Tensor(), Tensor(), true}), 1e-5);
  }
}

TEST_CASE("MoH gradcheck through the module and the learned routers (f64)") {
  Generator gen(6);
  struct Case {
    int64_t shared, k;
    Scaling scaling;
    int64_t kv_heads;
  };
  for (Case c : {Case{2, 1, Scaling::code, 2}, Case{1, 2, Scaling::paper, 4}, Case{0, 2, Scaling::code, 1},
                 Case{4, 0, Scaling::code, 4}}) {
    CAPTURE(c.shared);
    MoHConfig config = make_config(8, 4, c.shared, c.k, Router::learned, c.scaling);
    config.mha.kv_heads = c.kv_heads;
    MoHAttention m(config, gen);
    spread_routers(m, gen);
    Tensor pad = Tensor::from_vector<uint8_t>({0, 1, 0}, {1, 3});
    auto result = testing::gradcheck_attention(m, {1, 3, 8}, gen, /*causal=*/true, pad, out_and_aux);
    CHECK_MESSAGE(result.ok, result.message);
  }
}

TEST_CASE("MoH gradcheck with the qnorm router: the parts the straight-through estimator leaves exact (f64)") {
  // The forward gates are 0/1 and locally constant, so finite differences see
  // no router; the STE gradient (checked by hand in the checklist-5 test) is
  // a surrogate.  Exact here: the output with respect to K, V and O (W_q and
  // x also feed the STE term, so they are left out), and the load-balance
  // loss, through ‖q_i‖, the std normalisation and the softmax, with respect
  // to W_q, b_q and x.
  Generator gen(7);
  MoHAttention m(make_config(8, 4, 1, 2, Router::qnorm), gen);
  m.to(DType::f64);
  Tensor x = Tensor::randn({2, 3, 8}, gen, DType::f64).set_requires_grad();
  std::vector<Tensor> kvo = {m.k_proj->weight, m.k_proj->bias,   m.v_proj->weight,
                             m.v_proj->bias,   m.o_proj->weight, m.o_proj->bias};
  auto output = gradcheck([&](const std::vector<Tensor>&) { return m.forward({x, Tensor(), true}).out; }, kvo);
  CHECK_MESSAGE(output.ok, output.message);
  auto aux = gradcheck(
      [&](const std::vector<Tensor>& in) {
        return m.forward({in.back(), Tensor(), true}).aux.value;
      },
      {m.q_proj->weight, m.q_proj->bias, x});
  CHECK_MESSAGE(aux.ok, aux.message);
}

TEST_CASE("MoH converted from a dense MHA with every head active is that MHA; GQA conversion") {
  Generator gen(8);
  MHAConfig config{16, 4, 2};
  MultiHeadAttention dense(config, gen);
  auto moh = moh_from_mha(dense, 1, 3, /*allow_full_routing=*/true);
  Tensor x = Tensor::randn({2, 5, 16}, gen);
  NoGradGuard no_grad;
  AttentionInput in{x, Tensor(), true};
  Tensor expected = dense.forward(in).out;
  CHECK(moh->forward_dense_reference(in).out.to_vector<float>() == expected.to_vector<float>());
  CHECK_CLOSE(moh->forward(in).out, expected, 1e-6, 1e-5);
  CHECK(moh->config.kv_heads == 2);
  // Every head active, no router: the same MACs as the dense layer.
  auto all_shared = moh_from_mha(dense, 4, 0, /*allow_full_routing=*/true);
  CHECK(all_shared->macs(5, 7, true) == dense.macs(5, 7, true));
}

TEST_CASE("MoH with RoPE: cross-attention ignores it; converted from a RoPE MHA with d_h != d / h it is that MHA") {
  Generator gen(12);
  MHAConfig config{16, 4, 2};
  config.head_dim = 6;
  config.rope = true;
  config.rope_theta = 500;
  MultiHeadAttention dense(config, gen);
  auto moh = moh_from_mha(dense, 1, 3, /*allow_full_routing=*/true);  // every head active
  CHECK(moh->config.rope);
  CHECK(moh->config.rope_theta == 500);
  CHECK(moh->head_dim == 6);
  Tensor x = Tensor::randn({2, 5, 16}, gen), memory = Tensor::randn({2, 3, 16}, gen);
  NoGradGuard no_grad;
  AttentionInput self{x, Tensor(), true};
  Tensor expected = dense.forward(self).out;
  CHECK(moh->forward_dense_reference(self).out.to_vector<float>() == expected.to_vector<float>());
  CHECK_CLOSE(moh->forward(self).out, expected, 1e-6, 1e-5);
  // The same layers without RoPE: self-attention changes, cross-attention does not.
  MoHConfig plain_config = moh->moh_config;
  plain_config.mha.rope = false;
  MoHAttention plain(plain_config, gen);
  plain.load_state_dict(moh->state_dict());
  CHECK(testing::compare(plain.forward(self).out, expected, 1e-3) != "");
  AttentionInput cross{x, memory};
  for (Router router : {Router::qnorm, Router::learned}) {
    MoHConfig routed = make_config(16, 4, 1, 2, router);
    routed.mha = config;
    MoHAttention with_rope(routed, gen);
    spread_routers(with_rope, gen);
    routed.mha.rope = false;
    MoHAttention without(routed, gen);
    without.load_state_dict(with_rope.state_dict());
    CHECK_CLOSE(with_rope.forward(cross).out, without.forward(cross).out, 0.0);
  }
}

TEST_CASE("MoH MACs count K and V for all keys, Q, core and O for the active heads, and the router") {
  Generator gen(9);
  MoHAttention m(make_config(8, 4, 2, 1), gen);  // d = 8, d_h = 2, 3 active heads
  const int64_t kv = 2 * 4 * 8 * 8, q = 4 * 8 * 3 * 2, core = 2 * 16 * 2 * 3, o = 4 * 3 * 2 * 8;
  const int64_t router = 4 * 8 * (2 + 2 + 2);  // W_r, W_s, W_h rows
  CHECK(m.macs(4, 4, false) == kv + q + core + o + router);
  CHECK(m.macs(4, 4, true) == kv + q + 2 * 10 * 2 * 3 + o + router);
  MoHAttention qnorm(make_config(8, 4, 2, 1, Router::qnorm), gen);
  CHECK(qnorm.macs(4, 4, false) == kv + 4 * 8 * 8 + core + o + 4 * 2 * 2);  // all queries, then ‖q_i‖²
  // RoPE: every head's query is computed (to rotate), the rest as before.
  MoHConfig rope = make_config(8, 4, 2, 1);
  rope.mha.rope = true;
  CHECK(MoHAttention(rope).macs(4, 4, false) == kv + 4 * 8 * 8 + core + o + router);
  // d_h = 3: every width follows h·d_h.
  MoHConfig wide = make_config(8, 4, 2, 1);
  wide.mha.head_dim = 3;
  CHECK(MoHAttention(wide).macs(4, 4, false) ==
        2 * 4 * 8 * 12 + 4 * 8 * 3 * 3 + 2 * 16 * 3 * 3 + 4 * 3 * 3 * 8 + router);
  // qnorm with Ste::all runs the dense path: MHA's MACs plus the norms.
  MoHConfig all = make_config(8, 4, 2, 1, Router::qnorm);
  all.ste = MoHConfig::Ste::all;
  CHECK(MoHAttention(all).macs(4, 4, true) == MultiHeadAttention(all.mha).macs(4, 4, true) + 4 * 2 * 2);
}

TEST_CASE("MoH errors") {
  Generator gen(10);
  CHECK_THROWS_HEADROOM(MoHAttention(make_config(8, 4, 3, 2)), "shared_heads + routed_k = 3 + 2 exceeds heads = 4");
  CHECK_THROWS_HEADROOM(MoHAttention(make_config(8, 4, 2, 0)), "routed_k = 0 needs every head shared");
  CHECK_THROWS_HEADROOM(MoHAttention(make_config(8, 4, -2, 1)), "must be >= 0");
  MoHConfig every_head = make_config(8, 4, 2, 2);
  every_head.allow_full_routing = false;
  CHECK_THROWS_HEADROOM(MoHAttention{every_head}, "2 + 2 = heads: every head is active for every token");
  CHECK_THROWS_HEADROOM(MoHAttention(make_config(8, 3, 1, 1)), "must be a positive multiple of heads");
  MoHConfig negative_beta = make_config(8, 4, 2, 1);
  negative_beta.beta = -1;
  CHECK_THROWS_HEADROOM(MoHAttention{negative_beta}, "beta must be >= 0");
  MoHAttention m(make_config(8, 4, 2, 1), gen);
  CHECK_THROWS_HEADROOM(m.forward({Tensor::randn({1, 3, 6})}), "expected x of shape [B, T, 8]");
  CHECK_THROWS_HEADROOM(m.forward_dense_reference({Tensor::randn({1, 3, 6})}), "expected x of shape [B, T, 8]");
  MultiHeadAttention dense({8, 4}, gen);
  CHECK_THROWS_HEADROOM(moh_from_mha(dense, 2, 3), "exceeds heads = 4");
  CHECK_THROWS_HEADROOM(moh_from_mha(m, 2, 1), "router_routed.weight");  // not a dense layer
}

namespace {

struct Tolerance {
  double out, aux, grad_atol, grad_rtol;  // out and aux: atol = rtol
};

// Both paths of `m` on the case's x and grad_out against its out, aux and the
// gradients stored as prefix + grads + name (every parameter, then x).
void check_fixture(MoHAttention& m, const testing::Fixture& f, const std::string& prefix, const std::string& grads,
                   AttentionInput shape, Tolerance tol) {
  const DType dtype = m.q_proj->weight.dtype();
  Tensor x = f.get(prefix + "x").to(dtype), dy = f.get(prefix + "grad_out").to(dtype);
  for (bool dense : {false, true}) {
    CAPTURE(dense);
    LayerPass pass = layer_pass(m, dense, x, dy, shape);
    CHECK_CLOSE(pass.out, f.get(prefix + "out"), tol.out, tol.out);
    CHECK_CLOSE(pass.aux.reshape({1}), f.get(prefix + "aux").reshape({1}), tol.aux, tol.aux);
    NamedTensors params = m.named_parameters();
    for (size_t i = 0; i < params.size(); ++i) {
      CAPTURE(params[i].first);
      CHECK_CLOSE(pass.grads[i], f.get(prefix + grads + params[i].first), tol.grad_atol, tol.grad_rtol);
    }
    CHECK_CLOSE(pass.grads.back(), f.get(prefix + grads + "x"), tol.grad_atol, tol.grad_rtol);
  }
}

const AttentionInput kCausal{Tensor(), Tensor(), true};
const Tolerance kF64{1e-10, 1e-10, 1e-10, 1e-10};

}  // namespace

TEST_CASE("MoH matches a frozen PyTorch MoH (code scaling, learned router): output, aux, every gradient") {
  testing::Fixture f(HEADROOM_FIXTURES_DIR "/moh.safetensors");
  auto m = testing::fixture_layer<MoHAttention>(f, "", make_config(8, 4, 2, 1), DType::f32);
  check_fixture(*m, f, "", "grad.", kCausal, {1e-5, 1e-6, 1e-5, 1e-4});
}

TEST_CASE("MoH with d_h = 3 (not d / h) matches a frozen PyTorch MoH: output, aux, every gradient") {
  testing::Fixture f(HEADROOM_FIXTURES_DIR "/moh_options.safetensors");
  MoHConfig config = make_config(8, 4, 2, 1);
  config.mha.head_dim = 3;
  auto m = testing::fixture_layer<MoHAttention>(f, "head_dim.", config, DType::f64);
  CHECK(m->q_proj->weight.shape() == Shape{12, 8});
  CHECK(m->o_proj->weight.shape() == Shape{8, 12});
  check_fixture(*m, f, "head_dim.", "grad.", kCausal, kF64);
}

TEST_CASE("MoH qnorm estimators Ste::all and Ste::selected match frozen PyTorch MoH; their router gradients differ") {
  testing::Fixture f(HEADROOM_FIXTURES_DIR "/moh_options.safetensors");
  // The stored gradients of the two estimators differ where the router's
  // gradient flows (W_q, b_q, x), and only there.
  auto difference = [&](const std::string& name) {
    return max(abs(f.get("qnorm.grad_all." + name) - f.get("qnorm.grad_selected." + name)), {0}).item();
  };
  CHECK(difference("q_proj.bias") > 0.1);
  CHECK(difference("k_proj.bias") == 0);
  MoHConfig config = make_config(8, 6, 2, 2, Router::qnorm);
  config.mha.head_dim = 2;  // d / h would not divide
  for (auto ste_grads : {std::pair{MoHConfig::Ste::all, std::string("grad_all.")},
                         std::pair{MoHConfig::Ste::selected, std::string("grad_selected.")}}) {
    auto ste = ste_grads.first;  // named: Clang 14 lambdas cannot capture structured bindings
    auto grads = ste_grads.second;
    CAPTURE(grads);
    config.ste = ste;
    auto m = testing::fixture_layer<MoHAttention>(f, "qnorm.", config, DType::f64);
    check_fixture(*m, f, "qnorm.", grads, kCausal, kF64);
  }
  // Ste::all runs the dense path: forward() is forward_dense_reference().
  config.ste = MoHConfig::Ste::all;
  auto m = testing::fixture_layer<MoHAttention>(f, "qnorm.", config, DType::f64);
  NoGradGuard no_grad;
  AttentionInput in{f.get("qnorm.x").to(DType::f64), Tensor(), true};
  CHECK(m->forward(in).out.to_vector<double>() == m->forward_dense_reference(in).out.to_vector<double>());
}

TEST_CASE(
    "MoH BalancePadding::exclude matches a frozen PyTorch MoH (aux over real tokens, gradients); include counts all") {
  testing::Fixture f(HEADROOM_FIXTURES_DIR "/moh_options.safetensors");
  MoHConfig config = make_config(8, 4, 2, 1);
  config.balance_padding = MoHConfig::BalancePadding::exclude;
  auto m = testing::fixture_layer<MoHAttention>(f, "exclude.", config, DType::f64);
  AttentionInput in = kCausal;
  in.query_padding = in.key_padding = f.get("exclude.query_padding");
  check_fixture(*m, f, "exclude.", "grad.", in, kF64);
  // include (the default): the same layer averages over every token.
  m->moh_config.balance_padding = MoHConfig::BalancePadding::include;
  in.x = f.get("exclude.x").to(DType::f64);
  const double include = f.get("exclude.aux_include").item();
  CHECK(std::abs(include - f.get("exclude.aux").item()) > 1e-3);
  for (bool dense : {false, true}) {
    AttentionOutput o = dense ? m->forward_dense_reference(in) : m->forward(in);
    CHECK(o.aux.value.item() == doctest::Approx(include).epsilon(1e-12));
  }
  // Every query padded: nothing to average, the loss is 0.
  m->moh_config.balance_padding = MoHConfig::BalancePadding::exclude;
  in.query_padding = Tensor::ones({2, 4}, DType::b8);
  in.key_padding = Tensor();
  CHECK(m->forward(in).aux.value.item() == 0);
  in.query_padding = Tensor::zeros({2, 3}, DType::b8);
  CHECK_THROWS_HEADROOM(m->forward(in),
                        "[MoHAttention] expected query_padding of dtype b8 and shape [B, T] with B*T = 8");
}

namespace {

// "Copy the token `lag` positions back": embeddings (token + position), one
// causal MoH layer with a residual, LayerNorm, a linear read-out.
struct CopyModel : Module {
  std::shared_ptr<Embedding> tokens, positions;
  std::shared_ptr<MoHAttention> attention;
  std::shared_ptr<LayerNorm> norm;
  std::shared_ptr<Linear> head;
  CopyModel(int64_t vocab, int64_t seq, int64_t dim, Generator& gen) {
    tokens = register_module("tokens", std::make_shared<Embedding>(vocab, dim, gen));
    positions = register_module("positions", std::make_shared<Embedding>(seq, dim, gen));
    MoHConfig config = make_config(dim, 4, 2, 1);
    config.beta = 0.01;
    attention = register_module("attention", std::make_shared<MoHAttention>(config, gen));
    norm = register_module("norm", std::make_shared<LayerNorm>(dim));
    head = register_module("head", std::make_shared<Linear>(dim, vocab, true, gen));
  }
};

}  // namespace

TEST_CASE("MoH learns to copy the token two positions back") {
  const int64_t vocab = 8, seq = 8, dim = 32, batch = 32, lag = 2;
  Generator gen(11);
  CopyModel model(vocab, seq, dim, gen);
  AdamW opt(model.parameters(), 1e-2, 0.9, 0.999, 1e-8, 0);
  std::vector<int32_t> position_ids(seq);
  std::iota(position_ids.begin(), position_ids.end(), 0);
  Tensor pos = Tensor::from_vector(position_ids);
  double first = 0, last = 0;
  for (int step = 0; step < 300; ++step) {
    std::vector<int32_t> ids(batch * seq), targets(batch * seq, -100);  // the first `lag` have no target
    for (auto& id : ids) id = int32_t(gen.next_int(vocab));
    for (int64_t i = 0; i < batch * seq; ++i)
      if (i % seq >= lag) targets[i] = ids[i - lag];
    Tensor x = model.tokens->forward(Tensor::from_vector(ids, {batch, seq})) + model.positions->forward(pos);
    AttentionOutput a = model.attention->forward({x, Tensor(), true});
    Tensor logits = model.head->forward(model.norm->forward(x + a.out));
    Tensor task = cross_entropy(logits.reshape({batch * seq, vocab}), Tensor::from_vector(targets));
    Tensor loss = task + a.aux.value;  // beta · L_b: one routed layer, the mean is itself
    opt.zero_grad();
    loss.backward();
    opt.step();
    (step == 0 ? first : last) = task.item();
  }
  MESSAGE("copy task loss ", first, " -> ", last);
  CHECK(first > 1.8);
  CHECK(last < 0.1);
}
