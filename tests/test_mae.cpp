// MAE (methods.md §4; checklist: methods.md §7 items 6, 7, 12, 13): uniform responsibilities
// are MHA; a sampled expert is MHA with one head dropped and the others
// rescaled; the per-head weights equal the explicit Σ_i g_i f_i; the frozen
// PyTorch fixture; the KV cache (prefix and source means); no leakage of the
// prefix mean; gradchecks; top-1 inference; block coordinate descent (which
// parameters and optimizer states change per block, seeded sampling); and a
// tiny model that learns a copy task under BCD; a head width other than d / h
// and RoPE (cached decoding, cross-attention unchanged).
#include "fixture_reader.h"
#include "headroom/models/bcd.h"
#include "headroom/models/mae.h"
#include "helpers.h"

using namespace headroom;
using GateInput = MAEConfig::GateInput;

namespace {

MAEConfig small_config(GateInput gate_input = GateInput::auto_, int64_t dim = 8, int64_t heads = 4) {
  MAEConfig config;
  config.mha = {dim, heads};
  config.gate_input = gate_input;
  return config;
}

// A random, non-zero gate output layer, so that g is far from uniform.
void randomise_gate(MAEAttention& m, Generator& gen) {
  NoGradGuard no_grad;
  m.gate->fc2->weight.copy_(Tensor::randn(m.gate->fc2->weight.shape(), gen));
  m.gate->fc2->bias.copy_(Tensor::randn(m.gate->fc2->bias.shape(), gen));
}

// Expert i written out: heads [B, h, T, d_h] with head i zeroed and the others
// scaled by h/(h−1), then the output projection.  -> [B, T, d]
Tensor expert_output(MAEAttention& m, const Tensor& heads, int64_t i) {
  NoGradGuard no_grad;
  const int64_t h = m.config.heads;
  Tensor kept = heads * (double(h) / double(h - 1));
  kept.narrow(1, i, 1).zero_();
  return m.o_proj->forward(merge_heads(kept));
}

// out[b, t] = Σ_i gates[b*T + t, i] · f_i[b, t]: the mixture in its defining form.
std::vector<double> explicit_mixture(MAEAttention& m, const Tensor& heads, const Tensor& gates) {
  const int64_t B = heads.size(0), T = heads.size(2), d = m.config.dim, h = m.config.heads;
  std::vector<double> g = gates.to_vector<double>(), out(B * T * d, 0.0);
  for (int64_t i = 0; i < h; ++i) {
    std::vector<double> f = expert_output(m, heads, i).to_vector<double>();
    for (int64_t n = 0; n < B * T; ++n)
      for (int64_t c = 0; c < d; ++c) out[n * d + c] += g[n * h + i] * f[n * d + c];
  }
  return out;
}

// out[b, t] = f_{experts[b*T + t]}[b, t]: one expert per token.
std::vector<double> chosen_experts(MAEAttention& m, const Tensor& heads, const Tensor& experts) {
  const int64_t d = m.config.dim;
  std::vector<int32_t> chosen = experts.to_vector<int32_t>();
  std::vector<double> out(chosen.size() * d);
  for (size_t n = 0; n < chosen.size(); ++n) {
    std::vector<double> f = expert_output(m, heads, chosen[n]).to_vector<double>();
    std::copy(f.begin() + n * d, f.begin() + (n + 1) * d, out.begin() + n * d);
  }
  return out;
}

std::vector<std::vector<double>> snapshot(const std::vector<Tensor>& tensors) {
  std::vector<std::vector<double>> values;
  for (const Tensor& t : tensors) values.push_back(t.to_vector<double>());
  return values;
}

std::vector<Tensor> state_tensors(const Optimizer& opt) {
  std::vector<Tensor> tensors;
  for (const auto& entry : opt.state()) tensors.push_back(entry.second);
  return tensors;
}

// A one-layer causal model: token and position embeddings, MAE with a
// residual, LayerNorm, and a linear read-out to the vocabulary.
struct TinyLM : Module {
  std::shared_ptr<Embedding> tokens, positions;
  std::shared_ptr<MAEAttention> attn;
  std::shared_ptr<LayerNorm> norm;
  std::shared_ptr<Linear> head;
  TinyLM(int64_t vocab, int64_t length, int64_t dim, int64_t heads, Generator& gen) {
    tokens = register_module("tokens", std::make_shared<Embedding>(vocab, dim, gen));
    positions = register_module("positions", std::make_shared<Embedding>(length, dim, gen));
    attn = register_module("attn", std::make_shared<MAEAttention>(small_config(GateInput::auto_, dim, heads), gen));
    norm = register_module("norm", std::make_shared<LayerNorm>(dim));
    head = register_module("head", std::make_shared<Linear>(dim, vocab, true, gen));
  }
  AttentionOutput forward(const Tensor& ids) {  // i32 [B, T] -> logits in .out [B, T, V]
    Tensor where = Tensor::arange(ids.size(1), DType::i32);
    Tensor x = tokens->forward(ids) + positions->forward(where);
    AttentionOutput a = attn->forward({x, Tensor(), true});
    a.out = head->forward(norm->forward(x + a.out));
    return a;
  }
};

// Random tokens; the target at t is the token at t - 1 (none at t = 0).
std::pair<Tensor, Tensor> previous_token_task(int64_t B, int64_t T, int64_t vocab, Generator& gen) {
  std::vector<int32_t> ids(B * T), targets(B * T, -100);
  for (int64_t n = 0; n < B * T; ++n) {
    ids[n] = int32_t(gen.next_int(vocab));
    if (n % T) targets[n] = ids[n - 1];
  }
  return {Tensor::from_vector(ids, {B, T}), Tensor::from_vector(targets, {B, T})};
}

}  // namespace

TEST_CASE("MAE: uniform responsibilities reproduce MHA (zero-initialised gate, and the uniform mode)") {
  Generator gen(1);
  MAEAttention mae(small_config(), gen);
  MultiHeadAttention mha(small_config().mha, gen);
  mha.load_state_dict(mae.state_dict(), /*strict=*/false);  // the gate's entries are ignored
  Tensor x = Tensor::randn({2, 5, 8}, gen);
  AttentionOutput out = mae.forward({x});
  CHECK_CLOSE(out.out, mha.forward({x}).out, 1e-6);
  CHECK_CLOSE(out.stats.gates, Tensor::full({10, 4}, 0.25), 1e-7);
  CHECK(!out.aux.defined());
  randomise_gate(mae, gen);
  mae.set_mode(MAEMode::uniform);
  CHECK_CLOSE(mae.forward({x}).out, mha.forward({x}).out, 1e-6);
  mae.set_mode(MAEMode::mixture);
  CHECK(testing::compare(mae.forward({x}).out, mha.forward({x}).out, 1e-3) != "");  // the gate now matters
}

TEST_CASE("MAE: a sampled expert is MHA with its head zeroed and the others scaled by h/(h-1)") {
  Generator gen(2);
  for (auto sample_per : {MAEConfig::SamplePer::auto_, MAEConfig::SamplePer::token}) {
    MAEConfig config = small_config();
    config.sample_per = sample_per;
    MAEAttention m(config, gen);
    randomise_gate(m, gen);
    m.set_mode(MAEMode::sampled_expert);
    Tensor x = Tensor::randn({3, 4, 8}, gen);
    AttentionOutput out = m.forward({x});
    CHECK(out.stats.indices.shape() == Shape{12, 1});
    CHECK_CLOSE(out.out.to_vector<double>(), chosen_experts(m, m.head_outputs({x}), out.stats.indices), 1e-6, 0);
    std::vector<int32_t> chosen = out.stats.indices.to_vector<int32_t>();
    bool varies_in_a_sequence = false;
    for (size_t n = 0; n < chosen.size(); ++n) varies_in_a_sequence |= n % 4 && chosen[n] != chosen[n - 1];
    CHECK(varies_in_a_sequence == (sample_per == MAEConfig::SamplePer::token));
    CHECK(sum(out.stats.load).item() == 12);
  }
}

TEST_CASE("MAE: the per-head weights equal the explicit mixture Σ_i g_i f_i (sequence and prefix gates)") {
  Generator gen(3);
  for (bool causal : {false, true}) {
    MAEAttention m(small_config(), gen);  // auto: seq_mean, or prefix_mean when causal
    randomise_gate(m, gen);
    Tensor x = Tensor::randn({2, 5, 8}, gen);
    AttentionInput in{x, Tensor(), causal};
    AttentionOutput out = m.forward(in);
    CHECK_CLOSE(out.out.to_vector<double>(), explicit_mixture(m, m.head_outputs(in), out.stats.gates), 1e-6, 0);
    CHECK_CLOSE(sum(out.stats.gates, {1}), Tensor::ones({10}), 1e-6, 0);
    CHECK(!out.stats.indices.defined());
  }
}

TEST_CASE("MAE matches the frozen PyTorch fixture: output, gates and every gradient") {
  testing::Fixture f(HEADROOM_FIXTURES_DIR "/mae.safetensors");
  MAEAttention m(small_config(GateInput::seq_mean));
  NamedTensors weights;
  for (const auto& entry : m.state_dict()) weights.emplace_back(entry.first, f.get(entry.first));
  m.load_state_dict(weights);
  m.to(DType::f64);
  Tensor x = f.get("x").to(DType::f64).set_requires_grad();
  AttentionInput in{x};
  in.key_padding = f.get("key_padding");
  AttentionOutput out = m.forward(in);
  CHECK_CLOSE(out.out, f.get("out"), 1e-10);
  CHECK_CLOSE(out.stats.gates.narrow(0, 0, 1), f.get("gates").narrow(0, 0, 1), 1e-6, 0);
  CHECK_CLOSE(out.stats.gates.narrow(0, 3, 1), f.get("gates").narrow(0, 1, 1), 1e-6, 0);
  out.out.backward(f.get("grad_out").to(DType::f64));
  CHECK_CLOSE(x.grad(), f.get("d_x"), 1e-10);
  for (const auto& name_p : m.named_parameters()) {
    const auto& name = name_p.first;  // named: Clang 14 lambdas cannot capture structured bindings
    const auto& p = name_p.second;
    INFO(name);
    CHECK_CLOSE(p.grad(), f.get("d_" + name), 1e-10);
  }
}

TEST_CASE("MAE decoding with a cache equals the full forward: prefix_mean self-attention, source_mean cross") {
  Generator gen(4);
  MAEAttention m(small_config(), gen);
  randomise_gate(m, gen);
  m.eval();
  Tensor x = Tensor::randn({2, 6, 8}, gen), memory = Tensor::randn({2, 4, 8}, gen);
  Tensor memory_padding = Tensor::from_vector<uint8_t>({0, 0, 0, 1, 0, 1, 1, 1}, {2, 4});
  NoGradGuard no_grad;
  Tensor full_self = m.forward({x, Tensor(), true}).out;
  AttentionInput full_cross{x, memory};
  full_cross.key_padding = memory_padding;
  Tensor full_cross_out = m.forward(full_cross).out;
  AttentionCache self_cache, cross_cache;
  // Chunks of 2, 1, 3 tokens: the running prefix sum carries across calls.
  for (auto [start, length] : std::vector<std::pair<int64_t, int64_t>>{{0, 2}, {2, 1}, {3, 3}}) {
    Tensor chunk = x.narrow(1, start, length);
    AttentionInput self_in{chunk, Tensor(), true};
    self_in.cache = &self_cache;
    CHECK_CLOSE(m.forward(self_in).out, full_self.narrow(1, start, length), 1e-5);
    AttentionInput cross_in{chunk, memory};
    cross_in.key_padding = memory_padding;
    cross_in.cache = &cross_cache;
    CHECK_CLOSE(m.forward(cross_in).out, full_cross_out.narrow(1, start, length), 1e-5);
  }
  CHECK(self_cache.extra_count == 6);
  CHECK(cross_cache.extra_count == 4);
}

TEST_CASE("MAE prefix_mean does not leak later tokens; padding is left out of the means") {
  Generator gen(5);
  MAEAttention m(small_config(GateInput::prefix_mean), gen);
  randomise_gate(m, gen);
  Tensor x = Tensor::randn({2, 5, 8}, gen);
  Tensor full = m.forward({x, Tensor(), true}).out;
  for (int64_t t = 0; t < 5; ++t)
    CHECK_CLOSE(m.forward({x.narrow(1, 0, t + 1), Tensor(), true}).out, full.narrow(1, 0, t + 1), 1e-6, 0);
  // Changing padded positions leaves the gates unchanged (seq_mean and prefix_mean).
  MAEAttention seq(small_config(GateInput::seq_mean), gen);
  randomise_gate(seq, gen);
  Tensor other = x.clone();
  {
    NoGradGuard g;
    other.narrow(1, 0, 1).fill_(3.0);
    other.narrow(1, 4, 1).fill_(-2.0);
  }
  AttentionInput a{x}, b{other};
  a.query_padding = b.query_padding = Tensor::from_vector<uint8_t>({1, 0, 0, 0, 1, 1, 0, 0, 0, 1}, {2, 5});
  CHECK_CLOSE(seq.responsibilities(a), seq.responsibilities(b), 1e-6, 0);
  a.causal = b.causal = true;
  CHECK_CLOSE(m.responsibilities(a), m.responsibilities(b), 1e-6, 0);
  CHECK(testing::compare(m.responsibilities(a), m.responsibilities({x, Tensor(), true}), 1e-3) != "");
}

TEST_CASE("MAE rejects leaking or inconsistent configurations") {
  Generator gen(6);
  Tensor x = Tensor::randn({1, 3, 8}, gen);
  MAEAttention seq(small_config(GateInput::seq_mean), gen);
  CHECK_THROWS_HEADROOM(seq.forward({x, Tensor(), true}), "seq_mean gate on a causal layer");
  AttentionCache cache;
  AttentionInput cached{x};
  cached.cache = &cache;
  CHECK_THROWS_HEADROOM(seq.forward(cached), "cannot decode with a cache");
  CHECK(cache.length() == 0);  // rejected before the cache was touched
  MAEAttention source(small_config(GateInput::source_mean), gen);
  CHECK_THROWS_HEADROOM(source.forward({x}), "source_mean gate needs the memory");
  MAEConfig per_sequence = small_config(GateInput::prefix_mean);
  per_sequence.sample_per = MAEConfig::SamplePer::sequence;
  MAEAttention prefix(per_sequence, gen);
  prefix.set_mode(MAEMode::sampled_expert);
  CHECK_THROWS_HEADROOM(prefix.forward({x, Tensor(), true}), "sample_per = sequence needs a per-sequence gate");
  CHECK_THROWS_HEADROOM(MAEAttention(small_config(GateInput::auto_, 8, 1)), "needs at least 2 heads");
  MAEConfig bad_hidden = small_config();
  bad_hidden.gate_hidden = -1;
  CHECK_THROWS_HEADROOM(MAEAttention{bad_hidden}, "gate_hidden must be >= 0");
  CHECK_THROWS_HEADROOM(seq.forward({Tensor::randn({1, 3, 6})}), "expected x of shape [B, T, 8]");
  AttentionInput bad_padding{x};
  bad_padding.query_padding = Tensor::zeros({1, 4}, DType::b8);
  CHECK_THROWS_HEADROOM(seq.forward(bad_padding), "expected a padding mask of shape [1, 3]");
}

TEST_CASE("MAE gradcheck through the mixture, the gate MLP and the input (f64)") {
  Generator gen(7);
  for (auto [gate_input, activation] : {std::pair{GateInput::seq_mean, MAEConfig::GateActivation::relu},
                                        std::pair{GateInput::prefix_mean, MAEConfig::GateActivation::tanh}}) {
    MAEConfig config = small_config(gate_input);
    config.gate_hidden = 5;
    config.gate_activation = activation;
    MAEAttention m(config, gen);
    randomise_gate(m, gen);
    Tensor pad = Tensor::from_vector<uint8_t>({0, 0, 0, 1, 0, 0}, {2, 3});
    auto result = testing::gradcheck_attention(m, {2, 3, 8}, gen, gate_input == GateInput::prefix_mean, pad);
    CHECK_MESSAGE(result.ok, result.message);
  }
}

TEST_CASE("MAE inference: top1 drops the arg-max expert's head; eval ignores the training mode") {
  Generator gen(8);
  MAEConfig config = small_config();
  config.inference = MAEConfig::Inference::top1;
  MAEAttention m(config, gen);
  randomise_gate(m, gen);
  m.eval();
  Tensor x = Tensor::randn({3, 4, 8}, gen);
  AttentionOutput out = m.forward({x});
  CHECK(out.stats.indices.to_vector<int32_t>() == argmax(out.stats.gates, 1).to_vector<int32_t>());
  CHECK_CLOSE(out.out.to_vector<double>(), chosen_experts(m, m.head_outputs({x}), out.stats.indices), 1e-6, 0);
  m.mae_config.inference = MAEConfig::Inference::mixture;
  m.set_mode(MAEMode::sampled_expert);  // a training mode: eval mode uses the mixture
  out = m.forward({x});
  CHECK_CLOSE(out.out.to_vector<double>(), explicit_mixture(m, m.head_outputs({x}), out.stats.gates), 1e-6, 0);
  CHECK(m.macs(4, 4, false) == MultiHeadAttention(config.mha).macs(4, 4, false) + (8 * 8 + 8 * 4));
  CHECK(m.macs(4, 4, true) == MultiHeadAttention(config.mha).macs(4, 4, true) + 4 * (8 * 8 + 8 * 4));
  CHECK(m.gate_parameters().size() == 4);
  CHECK(m.expert_parameters().size() == 8);
  CHECK(m.kind() == "mae");
}

TEST_CASE("BCD: the block schedule (warm start, then F first; joint)") {
  Generator gen(9);
  auto layer = std::make_shared<MAEAttention>(small_config(), gen);
  BlockCoordinateDescent bcd(*layer, {layer}, 1e-3, 1e-3, {2, 3, 2});
  std::string kinds;
  for (int64_t step = 0; step < 10; ++step) kinds += bcd.block_kind(step) + " ";
  CHECK(kinds == "warm warm F F F G G F F F ");
  BlockCoordinateDescent joint(*layer, {layer}, 1e-3, 1e-3, {1, 1, 1, BCDOptions::Training::joint});
  CHECK(joint.block_kind(0) == "warm");
  CHECK(joint.block_kind(5) == "joint");
  CHECK_THROWS_HEADROOM(BlockCoordinateDescent(*layer, {layer}, 1e-3, 1e-3, {0, 0, 1}), "f_updates, g_updates > 0");
  CHECK_THROWS_HEADROOM(bcd.finish_step(), "without begin_step");
  auto experts_only = std::make_shared<AdamW>(layer->expert_parameters(), 1e-3);
  CHECK_THROWS_HEADROOM(BlockCoordinateDescent({layer}, experts_only, experts_only, {}),
                        "must hold every gate parameter");
}

TEST_CASE("BCD: a frozen block leaves its parameters and optimizer state bitwise unchanged") {
  Generator gen(10);
  TinyLM model(6, 5, 8, 4, gen);
  auto ids_targets = previous_token_task(4, 5, 6, gen);
  Tensor ids = ids_targets.first,
         targets = ids_targets.second;  // named: Clang 14 lambdas cannot capture structured bindings
  BlockCoordinateDescent bcd(model, {model.attn}, 1e-2, 1e-2, {1, 2, 2});
  const std::vector<Tensor> theta = bcd.expert_optimizer().params(), phi = bcd.gate_optimizer().params();
  CHECK(phi.size() == 4);
  CHECK(theta.size() == model.parameters().size() - 4);
  int64_t step = 0;
  auto run_block = [&](const char* kind, const std::vector<Tensor>& frozen) {
    CHECK(bcd.block_kind(step) == kind);
    do {
      bcd.begin_step(step);
      CHECK(!frozen[0].requires_grad());  // the frozen block gets no gradient at all
      cross_entropy(model.forward(ids).out, targets).backward();
      bcd.finish_step();
      CHECK(frozen[0].requires_grad());
    } while (bcd.block_kind(++step) == kind);
  };
  for (const char* kind : {"warm", "F", "G", "F", "G"}) {
    INFO(kind);
    const bool gate_frozen = std::string(kind) != "G";
    const std::vector<Tensor>& frozen = gate_frozen ? phi : theta;
    const std::vector<Tensor>& trained = gate_frozen ? theta : phi;
    Optimizer& frozen_opt = gate_frozen ? bcd.gate_optimizer() : bcd.expert_optimizer();
    auto frozen_before = snapshot(frozen), state_before = snapshot(state_tensors(frozen_opt));
    auto trained_before = snapshot(trained);
    run_block(kind, frozen);
    CHECK(snapshot(frozen) == frozen_before);
    CHECK(snapshot(state_tensors(frozen_opt)) == state_before);
    auto trained_after = snapshot(trained);
    for (size_t i = 0; i < trained.size(); ++i) CHECK(trained_after[i] != trained_before[i]);
  }
  CHECK(bcd.expert_optimizer().steps() == 5);  // warm 1, F 2 + 2
  CHECK(bcd.gate_optimizer().steps() == 4);
}

TEST_CASE("BCD: joint training steps both; two runs with one seed sample the same experts") {
  auto run = [](uint64_t seed, BCDOptions::Training training) {
    Generator gen(seed);
    TinyLM model(6, 5, 8, 4, gen);
    auto [ids, targets] = previous_token_task(4, 5, 6, gen);
    BlockCoordinateDescent bcd(model, {model.attn}, 1e-2, 1e-2, {0, 3, 1, training});
    std::vector<int32_t> sampled;
    for (int64_t step = 0; step < 8; ++step) {
      bcd.begin_step(step);
      AttentionOutput out = model.forward(ids);
      if (out.stats.indices.defined())
        for (int32_t e : out.stats.indices.to_vector<int32_t>()) sampled.push_back(e);
      cross_entropy(out.out, targets).backward();
      bcd.finish_step();
    }
    std::vector<double> weights;
    for (const Tensor& p : model.parameters())
      for (double v : p.to_vector<double>()) weights.push_back(v);
    return std::make_tuple(sampled, weights, bcd.expert_optimizer().steps(), bcd.gate_optimizer().steps());
  };
  auto [sampled_a, weights_a, expert_steps, gate_steps] = run(11, BCDOptions::Training::bcd);
  CHECK(sampled_a.size() == 6 * 20);  // 6 F-steps, per-token sampling (prefix gate), B*T = 20
  CHECK(expert_steps == 6);
  CHECK(gate_steps == 2);
  auto [sampled_b, weights_b, _1, _2] = run(11, BCDOptions::Training::bcd);
  CHECK(sampled_a == sampled_b);
  CHECK(weights_a == weights_b);  // bitwise
  auto [sampled_c, weights_c, _3, _4] = run(12, BCDOptions::Training::bcd);
  CHECK(sampled_a != sampled_c);
  auto [sampled_joint, weights_joint, joint_expert_steps, joint_gate_steps] = run(11, BCDOptions::Training::joint);
  CHECK(sampled_joint.empty());
  CHECK(joint_expert_steps == 8);
  CHECK(joint_gate_steps == 8);
}

TEST_CASE("MAE learns a previous-token task under block coordinate descent") {
  Generator gen(12);
  const int64_t vocab = 8, length = 8;
  TinyLM model(vocab, length, 16, 4, gen);
  BlockCoordinateDescent bcd(model, {model.attn}, 1e-2, 1e-2, {0, 20, 10});
  float first = 0, last = 0;
  for (int64_t step = 0; step < 300; ++step) {
    auto [ids, targets] = previous_token_task(16, length, vocab, gen);
    bcd.begin_step(step);
    Tensor loss = cross_entropy(model.forward(ids).out, targets);
    loss.backward();
    bcd.finish_step();
    if (step == 0) first = loss.item<float>();
  }
  model.eval();
  {
    NoGradGuard no_grad;
    auto [ids, targets] = previous_token_task(64, length, vocab, gen);
    last = cross_entropy(model.forward(ids).out, targets).item<float>();
  }
  MESSAGE("loss ", first, " -> ", last, " (eval, mixture)");
  CHECK(first > 1.5);
  CHECK(last < 0.2);
}

TEST_CASE("MAE with d_h != d / h: uniform g is MHA of that width; the per-head weights equal Σ_i g_i f_i") {
  Generator gen(12);
  MAEConfig config = small_config();  // d = 8, h = 4
  config.mha.head_dim = 3;
  MAEAttention m(config, gen);
  CHECK(m.o_proj->weight.shape() == Shape{8, 12});
  MultiHeadAttention mha(config.mha, gen);
  mha.load_state_dict(m.state_dict(), /*strict=*/false);
  Tensor x = Tensor::randn({2, 5, 8}, gen);
  CHECK_CLOSE(m.forward({x}).out, mha.forward({x}).out, 1e-6);  // the zero-initialised gate
  randomise_gate(m, gen);
  for (bool causal : {false, true}) {
    AttentionInput in{x, Tensor(), causal};
    AttentionOutput out = m.forward(in);
    CHECK_CLOSE(out.out.to_vector<double>(), explicit_mixture(m, m.head_outputs(in), out.stats.gates), 1e-6, 0);
  }
  CHECK(m.macs(4, 4, false) == mha.macs(4, 4, false) + (8 * 8 + 8 * 4));
}

TEST_CASE("MAE with RoPE: cached decoding equals the full forward (prefix_mean); cross-attention ignores RoPE") {
  Generator gen(13);
  MAEConfig config = small_config();
  config.mha.rope = true;
  MAEAttention m(config, gen);
  randomise_gate(m, gen);
  m.eval();
  MAEConfig plain_config = config;
  plain_config.mha.rope = false;
  MAEAttention plain(plain_config, gen);
  plain.load_state_dict(m.state_dict());
  plain.eval();
  Tensor x = Tensor::randn({2, 6, 8}, gen), memory = Tensor::randn({2, 4, 8}, gen);
  NoGradGuard no_grad;
  Tensor full = m.forward({x, Tensor(), true}).out;
  CHECK(testing::compare(full, plain.forward({x, Tensor(), true}).out, 1e-3) != "");  // positions matter
  CHECK_CLOSE(testing::decode_in_chunks(m, x, {2, 1, 3}), full, 1e-5);
  AttentionInput cross{x, memory};
  CHECK_CLOSE(m.forward(cross).out, plain.forward(cross).out, 0.0);
}
