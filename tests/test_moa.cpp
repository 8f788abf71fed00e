// MoA (methods.md §2): E = k = 1 is single-head attention; the routed path
// equals the dense reference in outputs and every gradient; gradchecks
// through the router (random and zero-initialised, with a pad row); top-k
// ties at step 0; the aux losses (k = E, uniform load, hand values); the KV
// cache; padding; the aux normalisation option; sampling and noisy gating;
// the frozen PyTorch fixture; a learning check; MACs and errors; RoPE (E = k
// = 1 is single-head RoPE attention, routed == dense, cached decoding,
// cross-attention unchanged).
#include <chrono>

#include "headroom/models/moa.h"
#include "fixture_reader.h"
#include "helpers.h"

using namespace headroom;

namespace {

MoAConfig small_config(int64_t experts = 4, int64_t k = 2) {
  MoAConfig c;
  c.dim = 8, c.num_experts = experts, c.k = k, c.head_dim = 4;
  c.allow_full_routing = k == experts;  // the checklist's k = E cases
  return c;
}

void randomise_router(MoAAttention& m, Generator& gen) {
  NoGradGuard no_grad;
  m.router->weight.copy_(Tensor::randn(m.router->weight.shape(), gen));
}

Tensor pad_mask(const std::vector<uint8_t>& pads, int64_t B, int64_t T) { return Tensor::from_vector(pads, {B, T}); }

// The output and the aux loss as one vector, so that a gradcheck covers both.
Tensor out_and_aux(const AttentionOutput& o) { return cat({o.out.flatten(), o.aux.value.reshape({1})}); }

std::vector<Tensor> gradients(const std::vector<Tensor>& leaves) {
  std::vector<Tensor> grads;
  for (const Tensor& t : leaves) grads.push_back(t.grad());
  return grads;
}

// Smallest gap between the k-th and (k+1)-th largest router probability over
// the rows of x [B, T, d]: a gradcheck's finite differences must not change
// the selection.
double selection_margin(const MoAAttention& m, const Tensor& x) {
  NoGradGuard no_grad;
  const int64_t E = m.config.num_experts, k = m.config.k;
  if (k == E) return INFINITY;
  std::vector<double> p = softmax(m.router->forward(x.reshape({-1, m.config.dim})), -1).to_vector<double>();
  double margin = INFINITY;
  for (size_t n = 0; n < p.size() / E; ++n) {
    std::vector<double> row(p.begin() + n * E, p.begin() + (n + 1) * E);
    std::sort(row.rbegin(), row.rend());
    margin = std::min(margin, row[k - 1] - row[k]);
  }
  return margin;
}

}  // namespace

TEST_CASE("MoA with E = k = 1 equals single-head attention (gate 1, any router), with and without RoPE") {
  Generator gen(1);
  for (bool rope : {false, true}) {
    CAPTURE(rope);
    MoAConfig c = small_config(1, 1);
    c.head_dim = 6;
    c.rope = rope;
    MoAAttention moa(c, gen);
    randomise_router(moa, gen);
    MHAConfig mc;
    mc.dim = 8, mc.heads = 1, mc.bias = false, mc.head_dim = 6, mc.rope = rope;
    MultiHeadAttention mha(mc, gen);
    {
      NoGradGuard no_grad;  // Linear weights are [out, in]; expert weights [in, out]
      mha.q_proj->weight.copy_(moa.q_proj->weight.select(0, 0).t());
      mha.k_proj->weight.copy_(moa.k_proj->weight);
      mha.v_proj->weight.copy_(moa.v_proj->weight);
      mha.o_proj->weight.copy_(moa.o_proj->weight.select(0, 0).t());
    }
    Tensor x = Tensor::randn({2, 5, 8}, gen), memory = Tensor::randn({2, 3, 8}, gen);
    AttentionInput self{x, Tensor(), true}, cross{x, memory};
    cross.key_padding = pad_mask({0, 0, 1, 0, 1, 0}, 2, 3);
    for (const AttentionInput& in : {self, cross}) {
      AttentionOutput o = moa.forward(in);
      CHECK_CLOSE(o.out, mha.forward(in).out, 1e-5, 1e-4);
      CHECK_CLOSE(o.stats.gates, Tensor::ones({10, 1}), 0.0);
    }
  }
}

TEST_CASE(
    "MoA with RoPE: routed path equals the dense reference (gradients), cached decoding equals the full "
    "forward, cross-attention ignores it") {
  Generator gen(12);
  MoAConfig c = small_config();
  c.rope = true;
  c.rope_theta = 100;
  MoAAttention m(c, gen);
  m.to(DType::f64);
  randomise_router(m, gen);
  Tensor x = Tensor::randn({2, 6, 8}, gen, DType::f64), memory = Tensor::randn({2, 4, 8}, gen, DType::f64);
  Tensor seed = Tensor::randn({2 * 6 * 8 + 1}, gen, DType::f64);
  std::vector<Tensor> leaves = m.parameters();
  std::vector<std::vector<Tensor>> grads;
  std::vector<Tensor> outs;
  for (bool dense : {false, true}) {
    for (Tensor& t : leaves) t.zero_grad();
    AttentionOutput o = dense ? m.forward_dense_reference({x, Tensor(), true}) : m.forward({x, Tensor(), true});
    sum(out_and_aux(o) * seed).backward();
    outs.push_back(o.out);
    grads.push_back(gradients(leaves));
  }
  CHECK_CLOSE(outs[0], outs[1], 1e-12);
  for (size_t i = 0; i < leaves.size(); ++i) CHECK_CLOSE(grads[0][i], grads[1][i], 1e-12);

  NoGradGuard no_grad;
  MoAConfig plain_config = c;
  plain_config.rope = false;
  MoAAttention plain(plain_config, gen);
  plain.to(DType::f64);
  plain.load_state_dict(m.state_dict());
  CHECK(testing::compare(outs[0], plain.forward({x, Tensor(), true}).out, 1e-3) != "");  // positions matter
  m.eval();
  Tensor full = m.forward({x, Tensor(), true}).out;
  CHECK_CLOSE(testing::decode_in_chunks(m, x, {2, 1, 3}), full, 1e-12);
  AttentionInput cross{x, memory};
  CHECK_CLOSE(m.forward(cross).out, plain.forward(cross).out, 0.0);
  MoAConfig odd = c;
  odd.head_dim = 5;
  MoAAttention odd_layer(odd, gen);
  CHECK_THROWS_HEADROOM(odd_layer.forward({Tensor::randn({1, 2, 8})}),
                        "[MoAAttention] rope needs an even head_dim, got 5");
}

TEST_CASE("MoA routed path equals the dense reference: outputs, aux and every gradient") {
  Generator gen(2);
  MoAConfig c = small_config();
  c.w_cv = 0.1;
  MoAAttention m(c, gen);
  m.to(DType::f64);
  randomise_router(m, gen);
  Tensor x = Tensor::randn({2, 5, 8}, gen, DType::f64).set_requires_grad();
  Tensor memory = Tensor::randn({2, 4, 8}, gen, DType::f64).set_requires_grad();
  Tensor seed = Tensor::randn({2 * 5 * 8 + 1}, gen, DType::f64);
  std::vector<Tensor> leaves = m.parameters();
  leaves.push_back(x);
  leaves.push_back(memory);
  AttentionInput self{x, Tensor(), true};
  self.query_padding = pad_mask({0, 0, 0, 0, 0, 0, 0, 1, 0, 1}, 2, 5);
  self.key_padding = self.query_padding;
  AttentionInput cross{x, memory};
  cross.key_padding = pad_mask({0, 1, 0, 0, 0, 0, 0, 1}, 2, 4);
  for (const AttentionInput& in : {self, cross}) {
    std::vector<std::vector<Tensor>> grads;
    std::vector<AttentionOutput> outs;
    for (bool dense : {false, true}) {
      for (Tensor& t : leaves) t.zero_grad();
      AttentionOutput o = dense ? m.forward_dense_reference(in) : m.forward(in);
      (out_and_aux(o) * seed).backward(Tensor::ones({2 * 5 * 8 + 1}, DType::f64));
      outs.push_back(o);
      grads.push_back(gradients(leaves));
    }
    CHECK_CLOSE(outs[0].out, outs[1].out, 1e-12);
    CHECK_CLOSE(outs[0].aux.value, outs[1].aux.value, 1e-14);
    for (size_t i = 0; i < leaves.size(); ++i) {
      if (!grads[1][i].defined()) {  // memory has no gradient under self-attention
        CHECK(!grads[0][i].defined());
        continue;
      }
      CHECK_CLOSE(grads[0][i], grads[1][i], 1e-12);
    }
  }
}

TEST_CASE("MoA gradcheck through the router, a random router (f64, pad row, causal and cross)") {
  Generator gen(3);
  MoAConfig c = small_config();
  c.w_switch = 0.1, c.w_z = 0.01, c.w_cv = 0.1;  // large enough to matter next to the output
  MoAAttention m(c, gen);
  m.to(DType::f64);
  randomise_router(m, gen);
  Tensor x = Tensor::randn({2, 3, 8}, gen, DType::f64).set_requires_grad();
  Tensor memory = Tensor::randn({2, 2, 8}, gen, DType::f64).set_requires_grad();
  Tensor pads = pad_mask({0, 0, 0, 0, 1, 0}, 2, 3);
  for (bool cross : {false, true}) {
    CAPTURE(cross);
    auto run = [&](const std::vector<Tensor>& in) {
      AttentionInput a{in[in.size() - 2], cross ? in.back() : Tensor(), !cross};
      a.query_padding = pads;
      return m.forward(a);
    };
    std::vector<Tensor> inputs = m.parameters();
    inputs.push_back(x);
    inputs.push_back(memory);
    REQUIRE(selection_margin(m, x) > 1e-4);
    auto result = gradcheck([&](const std::vector<Tensor>& in) { return out_and_aux(run(in)); }, inputs);
    CHECK_MESSAGE(result.ok, result.message);
  }
}

TEST_CASE("MoA zero-initialised router: ties pick experts 0..k-1; gradcheck with a pad row") {
  Generator gen(4);
  MoAAttention m(small_config(), gen);  // router.weight = 0: p uniform, every top-k a tie
  m.to(DType::f64);
  // Positive inputs: raising the logit of a chosen expert (or lowering an
  // unchosen one) keeps the selection, so one-sided differences are valid.
  Tensor x = Tensor::rand({1, 4, 8}, gen, 0.5, 1.5, DType::f64).set_requires_grad();
  AttentionInput in{x, Tensor(), true};
  in.query_padding = pad_mask({0, 0, 0, 1}, 1, 4);
  AttentionOutput o = m.forward(in);
  CHECK(o.stats.indices.to_vector<int32_t>() == std::vector<int32_t>({0, 1, 0, 1, 0, 1, 0, 1}));
  std::vector<double> gates = {.25, .25, 0, 0, .25, .25, 0, 0, .25, .25, 0, 0, 0, 0, 0, 0};
  CHECK_CLOSE(o.stats.gates.to_vector<double>(), gates, 1e-7, 0);
  CHECK(o.stats.load.to_vector<float>() == std::vector<float>({3, 3, 0, 0}));

  // Every input but the router: its logits stay 0, so the selection cannot change.
  std::vector<Tensor> inputs = {m.k_proj->weight, m.v_proj->weight, m.q_proj->weight, m.o_proj->weight, x};
  auto fn = [&](const std::vector<Tensor>&) { return out_and_aux(m.forward(in)); };
  auto result = gradcheck(fn, inputs);
  CHECK_MESSAGE(result.ok, result.message);

  // The router at the tie: analytic gradient against second-order one-sided
  // differences on the side that keeps experts {0, 1}.
  Tensor r = Tensor::randn({4 * 8 + 1}, gen, DType::f64);
  m.zero_grad();
  sum(fn({}) * r).backward();
  std::vector<double> analytic = m.router->weight.grad().to_vector<double>();
  CHECK(*std::max_element(analytic.begin(), analytic.end()) > 1e-4);  // symmetry breaks through gradients
  const double eps = 1e-5;
  auto loss_at = [&](int64_t e, int64_t i, double h) {
    NoGradGuard no_grad;
    Tensor w = m.router->weight.select(0, e).narrow(0, i, 1);
    w.fill_(h);
    AttentionOutput out = m.forward(in);
    w.fill_(0);
    for (int64_t n = 0; n < 3; ++n) {
      std::vector<int32_t> pick = out.stats.indices.select(0, n).to_vector<int32_t>();
      REQUIRE(std::min(pick[0], pick[1]) == 0);
      REQUIRE(std::max(pick[0], pick[1]) == 1);
    }
    return sum(out_and_aux(out) * r).item();
  };
  std::vector<double> numeric;
  for (int64_t e = 0; e < 4; ++e)
    for (int64_t i = 0; i < 8; ++i) {
      const double s = e < 2 ? eps : -eps;
      numeric.push_back((-3 * loss_at(e, i, 0) + 4 * loss_at(e, i, s) - loss_at(e, i, 2 * s)) / (2 * s));
    }
  CHECK_CLOSE(analytic, numeric, 1e-7, 1e-5);
}

TEST_CASE("MoA aux losses: k = E gives switch 1 with no router gradient; uniform load gives 1; hand values") {
  Generator gen(5);
  SUBCASE("k = E") {
    MoAConfig c = small_config(4, 4);
    c.w_switch = 1, c.w_z = 0;
    MoAAttention m(c, gen);
    m.to(DType::f64);
    randomise_router(m, gen);
    AttentionInput in{Tensor::randn({2, 3, 8}, gen, DType::f64)};
    in.query_padding = pad_mask({0, 0, 1, 0, 0, 0}, 2, 3);
    AttentionOutput o = m.forward(in);
    CHECK(std::abs(o.aux.value.item() - 1) < 1e-15);
    o.aux.value.backward();
    for (double g : m.router->weight.grad().to_vector<double>()) CHECK(std::abs(g) < 1e-15);
  }
  SUBCASE("uniform load, k < E") {
    MoAConfig c = small_config(4, 2);
    c.w_switch = 1, c.w_z = 0;
    MoAAttention m(c, gen);
    {  // sign(x_0) sends a token to experts {0, 1} or {2, 3}
      NoGradGuard no_grad;
      m.router->weight.select(1, 0).copy_(Tensor::from_vector<float>({3, 3, -3, -3}));
    }
    Tensor x = Tensor::randn({1, 6, 8}, gen);
    {
      NoGradGuard no_grad;
      x.select(2, 0).copy_(Tensor::from_vector<float>({1, -1, 2, -2, 1, -1}, {1, 6}));
    }
    AttentionOutput o = m.forward({x});
    CHECK(o.stats.load.to_vector<float>() == std::vector<float>({3, 3, 3, 3}));
    CHECK(o.aux.value.item() == doctest::Approx(1).epsilon(1e-6));
  }
  SUBCASE("zero router: switch 1, z-loss (ln E)², cv² of importance (.5, .5, 0, 0) = 4/3") {
    MoAConfig c = small_config(4, 2);
    c.w_cv = 0.01;
    MoAAttention m(c, gen);
    AttentionOutput o = m.forward({Tensor::randn({2, 3, 8}, gen)});
    const double expected = 0.01 * 1 + 0.001 * std::pow(std::log(4.0), 2) + 0.01 * 4.0 / 3.0;
    CHECK(o.aux.value.item() == doctest::Approx(expected).epsilon(1e-6));
  }
}

TEST_CASE("MoA decoding with the single-head KV cache equals the full forward") {
  Generator gen(6);
  MoAAttention m(small_config(), gen);
  randomise_router(m, gen);
  m.eval();
  Tensor x = Tensor::randn({2, 6, 8}, gen), memory = Tensor::randn({2, 4, 8}, gen);
  NoGradGuard no_grad;
  AttentionOutput full_self = m.forward({x, Tensor(), true});
  AttentionOutput full_cross = m.forward({x, memory});
  AttentionCache self_cache, cross_cache, dense_cache;
  for (int64_t t = 0; t < 6; ++t) {
    Tensor step = x.narrow(1, t, 1);
    AttentionInput self_in{step, Tensor(), true};
    self_in.cache = &self_cache;
    AttentionOutput self_step = m.forward(self_in);
    CHECK_CLOSE(self_step.out, full_self.out.narrow(1, t, 1), 1e-6);
    AttentionInput dense_in{step, Tensor(), true};  // routed decode ≡ the dense-masked decode
    dense_in.cache = &dense_cache;
    CHECK_CLOSE(self_step.out, m.forward_dense_reference(dense_in).out, 1e-6);
    // Routing depends only on the current token.
    for (int64_t b = 0; b < 2; ++b)
      CHECK(self_step.stats.indices.select(0, b).to_vector<int32_t>() ==
            full_self.stats.indices.select(0, b * 6 + t).to_vector<int32_t>());
    AttentionInput cross_in{step, memory};
    cross_in.cache = &cross_cache;
    CHECK_CLOSE(m.forward(cross_in).out, full_cross.out.narrow(1, t, 1), 1e-6);
  }
  CHECK(self_cache.k.shape() == Shape({2, 1, 6, 4}));  // one K head of width d_h
  CHECK(cross_cache.v.shape() == Shape({2, 1, 4, 4}));
}

TEST_CASE("MoA padding: pad queries output exactly 0, leave the switch statistics, no NaN") {
  Generator gen(7);
  MoAConfig c = small_config();
  c.w_switch = 1, c.w_z = 0;  // the z-loss alone would reach pad rows (it includes them)
  MoAAttention m(c, gen);
  randomise_router(m, gen);
  Tensor x = Tensor::randn({2, 4, 8}, gen).set_requires_grad();
  // Batch 1's first query is a pad and, causal with its key padded, sees no key.
  AttentionInput in{x, Tensor(), true};
  in.query_padding = pad_mask({0, 0, 0, 1, 1, 0, 0, 0}, 2, 4);
  in.key_padding = in.query_padding;
  AttentionOutput o = m.forward(in);
  std::vector<float> out = o.out.to_vector<float>();
  for (float v : out) CHECK(std::isfinite(v));
  for (int64_t row : {3, 4})
    for (int64_t i = 0; i < 8; ++i) CHECK(out[row * 8 + i] == 0.0f);
  CHECK(sum(o.stats.load).item() == 2 * 6);
  for (int64_t e = 0; e < 4; ++e) CHECK(o.stats.gates.select(0, 3).to_vector<float>()[e] == 0.0f);

  (sum(o.out * Tensor::randn({2, 4, 8}, gen)) + o.aux.value).backward();
  std::vector<float> dx = x.grad().to_vector<float>();
  for (float v : dx) CHECK(std::isfinite(v));
  for (int64_t row : {3, 4})  // masked as keys, gate 0 as queries, no z-loss: no gradient at all
    for (int64_t i = 0; i < 8; ++i) CHECK(dx[row * 8 + i] == 0.0f);

  // The switch loss equals the one of the six real tokens alone.
  NoGradGuard no_grad;
  Tensor real = cat({x.select(0, 0).narrow(0, 0, 3), x.select(0, 1).narrow(0, 1, 3)}).unsqueeze(0);
  CHECK(o.aux.value.item() == doctest::Approx(m.forward({real}).aux.value.item()).epsilon(1e-6));
}

TEST_CASE("MoA aux normalisation: reference = mean NLL + aux_sum / n, mean = mean NLL + aux_sum") {
  Generator gen(8);
  MoAAttention a(small_config(), gen), b(small_config(), gen);
  randomise_router(a, gen);
  randomise_router(b, gen);
  Tensor x = Tensor::randn({1, 6, 8}, gen);
  Tensor logits = Tensor::randn({6, 5}, gen);
  Tensor targets = Tensor::from_vector<int32_t>({0, 4, 2, 1, 3, 2});
  std::vector<std::vector<double>> router_grads;
  for (MoAAuxNormalisation norm : {MoAAuxNormalisation::reference, MoAAuxNormalisation::mean}) {
    a.zero_grad();
    a.config.aux_normalisation = b.config.aux_normalisation = norm;
    AuxLoss aux_a = a.forward({x}).aux, aux_b = b.forward({x}).aux;
    CHECK(aux_a.joins_summed_loss == (norm == MoAAuxNormalisation::reference));
    Tensor total = training_loss(cross_entropy(logits, targets), {aux_a, aux_b}, 6);
    const double mean_nll = cross_entropy(logits, targets).item();
    const double aux = aux_a.value.item() + aux_b.value.item();  // summed over every MoA module
    const double expected = norm == MoAAuxNormalisation::reference ? mean_nll + aux / 6 : mean_nll + aux;
    CHECK(total.item() == doctest::Approx(expected).epsilon(1e-6));
    total.backward();
    router_grads.push_back(a.router->weight.grad().to_vector<double>());
  }
  for (double& g : router_grads[1]) g /= 6;  // the aux term is weighted 1/n under `reference`
  CHECK_CLOSE(router_grads[0], router_grads[1], 1e-9, 1e-5);
  CHECK_THROWS_HEADROOM(training_loss(Tensor::scalar(1), {}, 0), "must be positive");
  CHECK_THROWS_HEADROOM(training_loss(Tensor::ones({2}), {}, 3), "expected a scalar task loss");
}

TEST_CASE("MoA sample_topk and noisy gating act in training only") {
  Generator gen(9);
  Tensor x = Tensor::randn({1, 64, 8}, gen);
  SUBCASE("sample_topk = 1 of k = 2") {
    MoAConfig c = small_config();
    c.sample_topk = 1;
    auto sampled = [&](bool training, uint64_t seed) {
      Generator g(seed);
      MoAAttention m(c, g);
      randomise_router(m, g);
      m.train(training);
      return m.forward({x}).stats;
    };
    RoutingStats eval = sampled(false, 1), a = sampled(true, 1), b = sampled(true, 1), other = sampled(true, 2);
    CHECK(a.indices.to_vector<int32_t>() == b.indices.to_vector<int32_t>());  // seeded
    CHECK(a.indices.to_vector<int32_t>() != other.indices.to_vector<int32_t>());
    std::vector<int32_t> top = eval.indices.to_vector<int32_t>(), drawn = a.indices.to_vector<int32_t>();
    int differs = 0;
    for (int64_t n = 0; n < 64; ++n) {
      CHECK(drawn[2 * n] == top[2 * n]);        // the best expert is kept
      CHECK(drawn[2 * n + 1] != drawn[2 * n]);  // drawn without replacement
      differs += drawn[2 * n + 1] != top[2 * n + 1];
    }
    CHECK(differs > 0);
    // Gates stay the router probabilities of the chosen experts.
    std::vector<float> gates = a.gates.to_vector<float>(), all = eval.gates.to_vector<float>();
    for (int64_t n = 0; n < 64; ++n) CHECK(gates[n * 4 + top[2 * n]] == all[n * 4 + top[2 * n]]);
  }
  SUBCASE("noisy gating") {
    MoAConfig c = small_config();
    c.noisy_gating = true;
    MoAAttention noisy(c, gen);
    randomise_router(noisy, gen);
    CHECK(noisy.named_parameters()[1].first == "noise.weight");
    AttentionOutput first = noisy.forward({x}), second = noisy.forward({x});
    CHECK(first.stats.indices.to_vector<int32_t>() != second.stats.indices.to_vector<int32_t>());
    (sum(first.out) + first.aux.value).backward();
    CHECK(sum(abs(noisy.noise->weight.grad())).item() > 0);  // zero-initialised, still learns
    noisy.eval();
    CHECK_CLOSE(noisy.forward({x}).out, noisy.forward({x}).out, 0.0);
  }
}

TEST_CASE("MoA matches the frozen PyTorch fixture (outputs, aux, every gradient)") {
  testing::Fixture f(HEADROOM_FIXTURES_DIR "/moa.safetensors");
  CHECK(f.metadata("script") == "tests/fixtures/gen_moa.py");
  MoAConfig c = small_config();
  c.w_switch = std::stod(f.metadata("w_switch")), c.w_z = std::stod(f.metadata("w_z"));
  c.w_cv = std::stod(f.metadata("w_cv"));
  const std::vector<std::string> names = {"router.weight", "k_proj.weight", "v_proj.weight", "q_proj.weight",
                                          "o_proj.weight"};
  struct Precision {
    DType dtype;
    double atol, rtol;
  };
  for (Precision prec : {Precision{DType::f64, 1e-12, 1e-10}, Precision{DType::f32, 1e-5, 1e-4}}) {
    CAPTURE(prec.dtype);
    MoAAttention m(c);
    NamedTensors weights;
    for (const std::string& name : names) weights.push_back({name, f.get(name)});
    m.load_state_dict(weights);
    m.to(prec.dtype);
    Tensor x = f.get("x").to(prec.dtype).set_requires_grad();
    AttentionInput in{x, Tensor(), true};
    in.query_padding = f.get("query_padding").to(DType::b8);
    in.key_padding = in.query_padding;
    REQUIRE(selection_margin(m, x) > 1e-3);
    AttentionOutput o = m.forward(in);
    (sum(o.out * f.get("grad_out").to(prec.dtype)) + o.aux.value).backward();
    CHECK_CLOSE(o.out, f.get("out"), prec.atol, prec.rtol);
    CHECK_CLOSE(o.aux.value.reshape({1}), f.get("aux"), prec.atol, prec.rtol);
    CHECK(o.stats.indices.narrow(0, 0, 5).to_vector<int32_t>() ==
          f.get("indices").narrow(0, 0, 5).to_vector<int32_t>());  // row 5 is the pad
    CHECK_CLOSE(x.grad(), f.get("grad.x"), prec.atol, prec.rtol);
    for (const auto& name_param : m.named_parameters()) {
      const auto& name = name_param.first;  // named: Clang 14 lambdas cannot capture structured bindings
      const auto& param = name_param.second;
      CAPTURE(name);
      CHECK_CLOSE(param.grad(), f.get("grad." + name), prec.atol, prec.rtol);
    }
  }
}

namespace {

// A one-layer causal model: logits = head(ln(h + moa(ln(h)))), h = token + position embeddings.
struct CopyModel : Module {
  std::shared_ptr<Embedding> tokens, positions;
  std::shared_ptr<LayerNorm> ln1, ln2;
  std::shared_ptr<MoAAttention> attn;
  std::shared_ptr<Linear> head;
  CopyModel(int64_t vocab, int64_t seq_len, const MoAConfig& c, Generator& gen) {
    tokens = register_module("tokens", std::make_shared<Embedding>(vocab, c.dim, gen));
    positions = register_module("positions", std::make_shared<Embedding>(seq_len, c.dim, gen));
    ln1 = register_module("ln1", std::make_shared<LayerNorm>(c.dim));
    attn = register_module("attn", std::make_shared<MoAAttention>(c, gen));
    ln2 = register_module("ln2", std::make_shared<LayerNorm>(c.dim));
    head = register_module("head", std::make_shared<Linear>(c.dim, vocab, true, gen));
  }
  std::pair<Tensor, AuxLoss> forward(const Tensor& ids) {  // -> logits [B, T, V], aux
    const int64_t T = ids.size(1);
    Tensor h = tokens->forward(ids) + positions->forward(Tensor::arange(T, DType::i32)).unsqueeze(0);
    AttentionOutput a = attn->forward({ln1->forward(h), Tensor(), true});
    return {head->forward(ln2->forward(h + a.out)), a.aux};
  }
};

}  // namespace

TEST_CASE("MoA learns to copy the previous token (learning check)") {
  const auto start = std::chrono::steady_clock::now();
  Generator gen(10);
  const int64_t vocab = 8, B = 16, T = 8;
  MoAConfig c;
  c.dim = 32, c.num_experts = 4, c.k = 2, c.head_dim = 16;
  CopyModel model(vocab, T, c, gen);
  AdamW opt(model.parameters(), 1e-2);
  CrossEntropyOptions ce;
  ce.reduction = Reduction::sum;
  ce.ignore_index = -1;
  double first = 0, last = 0;
  for (int step = 0; step < 200; ++step) {
    std::vector<int32_t> ids(B * T), targets(B * T, -1);
    for (int64_t i = 0; i < B * T; ++i) ids[i] = int32_t(gen.next_int(vocab));
    for (int64_t i = 0; i < B * T; ++i)
      if (i % T > 0) targets[i] = ids[i - 1];
    opt.zero_grad();
    auto [logits, aux] = model.forward(Tensor::from_vector(ids, {B, T}));
    Tensor nll_sum = cross_entropy(logits.reshape({B * T, vocab}), Tensor::from_vector(targets), ce);
    const int64_t target_tokens = B * (T - 1);
    Tensor loss = training_loss(nll_sum / double(target_tokens), {aux}, target_tokens);
    loss.backward();
    opt.step();
    (step == 0 ? first : last) = loss.item();
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  MESSAGE("copy task loss ", first, " -> ", last, " in ", seconds, " s");
  CHECK(first > 1.8);
  CHECK(last < 0.1);
}

TEST_CASE("MoA parameters, initialisation, MACs and errors") {
  Generator gen(11);
  MoAAttention m(small_config(), gen);
  NamedTensors params = m.named_parameters();
  REQUIRE(params.size() == 5);
  const std::vector<std::pair<std::string, Shape>> expected = {{"router.weight", {4, 8}},
                                                               {"k_proj.weight", {4, 8}},
                                                               {"v_proj.weight", {4, 8}},
                                                               {"q_proj.weight", {4, 8, 4}},
                                                               {"o_proj.weight", {4, 4, 8}}};
  for (size_t i = 0; i < 5; ++i) {
    CHECK(params[i].first == expected[i].first);
    CHECK(params[i].second.shape() == expected[i].second);
  }
  auto max_abs = [](const Tensor& t) { return max(abs(t), {}).item(); };
  CHECK(max_abs(m.router->weight) == 0);
  const double xavier = std::sqrt(6.0 / (8 + 4));  // a = √3·√(2 / (d + d_h))
  for (const Tensor& w : {m.k_proj->weight, m.v_proj->weight}) {
    CHECK(max_abs(w) <= xavier / std::sqrt(2.0));  // gain 1/√2: key/value input width = d
    CHECK(max_abs(w) > 0.5 * xavier / std::sqrt(2.0));
  }
  for (const Tensor& w : {m.q_proj->weight, m.o_proj->weight}) {
    CHECK(max_abs(w) <= xavier);
    CHECK(max_abs(w) > 0.8 * xavier);
  }

  // d = 8, E = 4, k = 2, d_h = 4, T = S = 4: router T·d·E, K/V 2·S·d·d_h,
  // experts 2k·T·d·d_h, core 2k·pairs·d_h.
  CHECK(m.macs(4, 4, false) == 4 * 8 * 4 + 2 * 4 * 8 * 4 + 2 * 2 * 4 * 8 * 4 + 2 * 2 * 16 * 4);
  CHECK(m.macs(4, 4, true) == 4 * 8 * 4 + 2 * 4 * 8 * 4 + 2 * 2 * 4 * 8 * 4 + 2 * 2 * 10 * 4);

  CHECK_THROWS_HEADROOM(MoAAttention(small_config(4, 5)), "k = 5 must lie in [1, num_experts = 4]");
  CHECK_THROWS_HEADROOM(MoAAttention(small_config(4, 0)), "must lie in [1, num_experts");
  MoAConfig bad = small_config();
  bad.sample_topk = 3;
  CHECK_THROWS_HEADROOM(MoAAttention{bad}, "sample_topk = 3 must lie in [0, k = 2]");
  bad = small_config();
  bad.head_dim = 0;
  CHECK_THROWS_HEADROOM(MoAAttention{bad}, "must be positive");
  CHECK_THROWS_HEADROOM(m.forward({Tensor::randn({1, 3, 6})}), "expected x of shape [B, T, 8]");
  CHECK_THROWS_HEADROOM(m.forward({Tensor::randn({3, 8})}), "expected x of shape [B, T, 8]");
  CHECK_THROWS_HEADROOM(m.forward({Tensor::randn({1, 3, 8}), Tensor::randn({1, 2, 5})}),
                        "expected memory of shape [1, S, 8]");
  AttentionInput in{Tensor::randn({1, 3, 8})};
  in.query_padding = Tensor::zeros({1, 3});
  CHECK_THROWS_HEADROOM(m.forward(in), "expected query_padding of dtype b8 and shape [1, 3]");
  in.query_padding = Tensor::zeros({1, 2}, DType::b8);
  CHECK_THROWS_HEADROOM(m.forward(in), "expected query_padding of dtype b8 and shape [1, 3]");
}
