// Models on CUDA against the same models on the CPU: forward outputs, aux
// losses and a few training steps of every attention type and of LLaMA's
// blocks (AdamW, clipping, MAE's block coordinate descent), routed vs
// dense-masked paths on the GPU, cached decoding, RoPE layers, checkpoints
// across devices, the optimizers and Module::to(Device).  Skipped (and
// passing) without a device.
#include <algorithm>

#include "cuda_helpers.h"
#include "transformer_helpers.h"

using namespace headroom;
using headroom::testing::check_same_pass;
using headroom::testing::compare;
using headroom::testing::layer_pass;
using headroom::testing::TempDir;

namespace {

const Device kCpu = Device::cpu();
const Device kCuda = Device::cuda();
const char* const kTypes[] = {"mha", "moa", "moh", "mae"};

// d 16, 4 heads, 2 decoder (and encoder) layers; each method with its aux
// losses switched on.  Noisy gating draws its noise on the host from the
// layer's generator, so both devices see the same noise.
ModelConfig parity_config(const std::string& type) {
  ModelConfig c = testing::tiny_model_config(11);
  c.dim = 16, c.heads = 4, c.ffn_hidden = 32;
  c.attention.type = type;
  if (type == "moa")
    c.attention.options = {{"experts", "4"}, {"k", "2"},      {"head_dim", "8"},
                           {"w_z", "0.01"},  {"w_cv", "0.1"}, {"noisy_gating", "true"}};
  if (type == "moh") c.attention.options = {{"shared_heads", "1"}, {"routed_k", "2"}};
  return c;
}

// parity_config of every type, named by it, and a LLaMA-style MHA model
// (RMSNorm, SwiGLU, no biases, RoPE, GQA) with a head bias, named "llama".
std::vector<std::pair<std::string, ModelConfig>> model_configs() {
  std::vector<std::pair<std::string, ModelConfig>> configs;
  for (const std::string type : kTypes) configs.emplace_back(type, parity_config(type));
  ModelConfig llama = testing::tiny_llama_config(11);
  llama.dim = 16;
  llama.heads = 4;
  llama.head_bias = true;
  configs.emplace_back("llama", llama);
  return configs;
}

// Two rows of 9 tokens; the second row's last two positions are padding.
Tensor token_batch() { return testing::token_rows({1, 4, 2, 9, 3, 3, 7, 10, 5, 6, 2, 8, 1, 1, 4, 0, 0, 0}, 2); }
Tensor padding_batch() {
  std::vector<uint8_t> pads(18, 0);
  pads[16] = pads[17] = 1;
  return Tensor::from_vector(pads, {2, 9});
}

// Every named tensor of `a` against `b`'s of the same name (any devices).
void check_same_tensors(const NamedTensors& a, const NamedTensors& b, double atol, double rtol) {
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    INFO(a[i].first);
    REQUIRE(a[i].first == b[i].first);
    CHECK_CLOSE(a[i].second, b[i].second, atol, rtol);
  }
}

// One layer's routing statistics on two devices: the same choices, close gates and loads.
void check_same_stats(const RoutingStats& a, const RoutingStats& b) {
  REQUIRE(a.gates.defined() == b.gates.defined());
  if (a.gates.defined()) CHECK_CLOSE(a.gates, b.gates, 1e-6, 1e-4);
  REQUIRE(a.indices.defined() == b.indices.defined());
  if (a.indices.defined()) CHECK(a.indices.to_vector<int32_t>() == b.indices.to_vector<int32_t>());
  REQUIRE(a.load.defined() == b.load.defined());
  if (a.load.defined()) CHECK_CLOSE(a.load, b.load, 1e-5, 1e-4);
}

// What a few training steps of a DecoderLM produced.
struct Training {
  ModelOutput first;           // the first step's forward
  std::vector<double> losses;  // training loss per step
  std::vector<double> norms;   // gradient norm before clipping, per step
};

// `steps` steps on one batch: AdamW (or BCD for MAE: warm, F, G, F),
// clipping at a norm the gradients exceed, so the scaling runs too.
Training train_steps(DecoderLM& model, const ModelConfig& c, int steps) {
  const Device device = model.device();
  Tensor tokens = token_batch().to(device);
  Tensor inputs = tokens.narrow(1, 0, 8).contiguous(), targets = tokens.narrow(1, 1, 8).contiguous();
  Tensor padding = padding_batch().narrow(1, 0, 8).contiguous().to(device);  // the inputs' [2, 8]
  auto mae_layers = collect_modules<MAEAttention>(model);
  std::unique_ptr<BlockCoordinateDescent> bcd;
  std::unique_ptr<AdamW> adamw;
  if (!mae_layers.empty())
    bcd = std::make_unique<BlockCoordinateDescent>(model, mae_layers, 1e-2, 1e-2, BCDOptions{1, 1, 1});
  else adamw = std::make_unique<AdamW>(model.parameters(), 1e-2);
  Training run;
  for (int step = 0; step < steps; ++step) {
    if (bcd) bcd->begin_step(step);
    else adamw->zero_grad();
    ModelOutput out = model.forward(inputs, padding);
    if (step == 0) run.first = out;
    Tensor task = cross_entropy(out.out.reshape({-1, c.vocab}), targets.reshape({-1}));
    Tensor loss = training_loss(task, out.aux_losses, 16);
    CHECK(loss.device() == device);
    loss.backward();
    run.norms.push_back(clip_grad_norm(bcd ? bcd->trained_parameters() : adamw->params(), 0.05));
    if (bcd) bcd->finish_step();
    else adamw->step();
    run.losses.push_back(loss.item());
  }
  return run;
}

// A DecoderLM on the CPU and the same one (same seed) on CUDA.
std::pair<std::shared_ptr<DecoderLM>, std::shared_ptr<DecoderLM>> twin_models(const ModelConfig& c) {
  Generator cpu_gen(7), cuda_gen(7);
  auto on_cpu = std::make_shared<DecoderLM>(c, cpu_gen);
  auto on_cuda = std::make_shared<DecoderLM>(c, cuda_gen);
  on_cuda->to(kCuda);
  return {on_cpu, on_cuda};
}

}  // namespace

TEST_CASE("cuda models: forward outputs and aux losses of every attention type (and LLaMA's blocks) match the CPU") {
  for (const auto& [name, config] : model_configs()) {
    const std::string type = name;  // named copies: Clang 14 lambdas cannot capture structured bindings
    const ModelConfig c = config;
    CAPTURE(type);
    auto [on_cpu, on_cuda] = twin_models(c);
    check_same_tensors(on_cuda->state_dict(), on_cpu->state_dict(), 0, 0);  // moved bitwise
    for (bool training : {true, false}) {
      CAPTURE(training);
      on_cpu->train(training), on_cuda->train(training);
      ModelOutput a = on_cuda->forward(token_batch().to(kCuda), padding_batch().to(kCuda));
      ModelOutput b = on_cpu->forward(token_batch(), padding_batch());
      CHECK(a.out.device() == kCuda);
      CHECK_CLOSE(a.out, b.out, 1e-5, 1e-4);
      REQUIRE(a.aux_losses.size() == b.aux_losses.size());
      for (size_t i = 0; i < a.aux_losses.size(); ++i)
        CHECK_CLOSE(a.aux_losses[i].value, b.aux_losses[i].value, 1e-6, 1e-4);
      REQUIRE(a.stats.size() == b.stats.size());
      for (size_t l = 0; l < a.stats.size(); ++l) {
        INFO("layer ", l);
        check_same_stats(a.stats[l], b.stats[l]);
      }
    }
  }
}

TEST_CASE("cuda models: a few AdamW (MAE: BCD) steps with clipping give the CPU's losses and parameters") {
  for (const auto& [name, config] : model_configs()) {
    const std::string type = name;  // named copies, as above
    const ModelConfig c = config;
    CAPTURE(type);
    auto [on_cpu, on_cuda] = twin_models(c);
    Training a = train_steps(*on_cuda, c, 4), b = train_steps(*on_cpu, c, 4);
    CHECK_CLOSE(a.losses, b.losses, 1e-6, 1e-4);
    CHECK_CLOSE(a.norms, b.norms, 1e-6, 1e-4);
    CHECK(*std::max_element(b.norms.begin(), b.norms.end()) > 0.05);  // clipping scaled the gradients
    check_same_tensors(on_cuda->state_dict(), on_cpu->state_dict(), 1e-5, 1e-3);
    for (const Tensor& p : on_cuda->parameters()) CHECK(p.device() == kCuda);
  }
}

TEST_CASE("cuda models: routed equals dense-masked on the GPU (MoA self and cross, MoH learned and qnorm)") {
  Generator gen(11);
  Tensor padding = padding_batch().narrow(1, 4, 5).contiguous().to(kCuda);  // [2, 5], row 1 ends padded
  Tensor x = Tensor::randn({2, 5, 16}, gen, DType::f64).to(kCuda);
  Tensor memory = Tensor::randn({2, 3, 16}, gen, DType::f64).to(kCuda);
  Tensor dout = Tensor::randn({2, 5, 16}, gen, DType::f64).to(kCuda);
  AttentionInput self{x, Tensor(), true};
  self.query_padding = padding, self.key_padding = padding;
  AttentionInput cross{x, memory};

  ModelConfig moa_config = parity_config("moa");
  moa_config.attention.options.erase("noisy_gating");  // the dense path draws no second noise sample
  auto moa = std::dynamic_pointer_cast<MoAAttention>(make_attention(moa_config, 0, AttentionRole::decoder_self, gen));
  REQUIRE(moa);
  {
    NoGradGuard no_grad;  // a random router: the zero one ties every expert
    moa->router->weight.copy_(Tensor::randn(moa->router->weight.shape(), gen));
  }
  moa->to(DType::f64);
  moa->to(kCuda);
  for (const AttentionInput& in : {self, cross})
    check_same_pass(layer_pass(*moa, false, x, dout, in), layer_pass(*moa, true, x, dout, in), 1e-10);

  for (const std::string router : {"learned", "qnorm"}) {
    CAPTURE(router);
    ModelConfig moh_config = parity_config("moh");
    moh_config.attention.options["router"] = router;
    auto moh = std::dynamic_pointer_cast<MoHAttention>(make_attention(moh_config, 0, AttentionRole::decoder_self, gen));
    REQUIRE(moh);
    moh->to(DType::f64);
    moh->to(kCuda);
    check_same_pass(layer_pass(*moh, false, x, dout, self), layer_pass(*moh, true, x, dout, self), 1e-10);
  }
}

TEST_CASE("cuda models: MoH with grouped KV heads and MAE's sampled and top-1 experts match the CPU") {
  Generator gen(5);
  Tensor x = Tensor::randn({2, 5, 16}, gen);
  ModelConfig gqa = parity_config("moh");
  gqa.attention.options["kv_heads"] = "2";  // neither 1 nor h: K/V heads repeated per query head
  ModelConfig top1 = parity_config("mae");
  top1.attention.options["inference"] = "top1";  // eval drops the arg-max expert's head
  for (const ModelConfig& c : {gqa, top1}) {
    CAPTURE(c.attention.type);
    Generator cpu_gen(3), cuda_gen(3);
    auto cpu_layer = make_attention(c, 0, AttentionRole::decoder_self, cpu_gen);
    auto cuda_layer = make_attention(c, 0, AttentionRole::decoder_self, cuda_gen);
    cuda_layer->to(kCuda);
    std::vector<MAEMode> modes = {MAEMode::mixture};
    if (c.attention.type == "mae") modes = {MAEMode::uniform, MAEMode::mixture, MAEMode::sampled_expert};
    for (MAEMode mode : modes) {
      if (auto mae = std::dynamic_pointer_cast<MAEAttention>(cpu_layer)) {
        mae->set_mode(mode);
        std::dynamic_pointer_cast<MAEAttention>(cuda_layer)->set_mode(mode);
      }
      AttentionOutput a = cuda_layer->forward({x.to(kCuda), Tensor(), true});
      AttentionOutput b = cpu_layer->forward({x, Tensor(), true});
      CHECK_CLOSE(a.out, b.out, 1e-5, 1e-4);
      check_same_stats(a.stats, b.stats);
    }
    cpu_layer->eval(), cuda_layer->eval();
    CHECK_CLOSE(cuda_layer->forward({x.to(kCuda), Tensor(), true}).out, cpu_layer->forward({x, Tensor(), true}).out,
                1e-5, 1e-4);
  }
}

namespace {

// Output, aux loss and every parameter's gradient (on the CPU) of
// L = Σ out·dout + aux for causal self-attention x on the layer's device.
std::vector<Tensor> causal_pass(Attention& layer, const Tensor& x, const Tensor& dout) {
  layer.zero_grad();
  const Device device = layer.device();
  AttentionOutput o = layer.forward({x.to(device), Tensor(), true});
  Tensor loss = sum(o.out * dout.to(device));
  if (o.aux.defined()) loss = loss + o.aux.value;
  loss.backward();
  std::vector<Tensor> result = {o.out.to(kCpu), o.aux.defined() ? o.aux.value.to(kCpu) : Tensor()};
  for (const Tensor& p : layer.parameters()) result.push_back(p.grad().defined() ? p.grad().to(kCpu) : Tensor());
  return result;
}

// Each method with RoPE on (d = 16, h = 4, d_h = 6; MoA d_h = 8), from `gen`.
std::vector<std::pair<std::string, std::shared_ptr<Attention>>> rope_layers(Generator& gen) {
  MHAConfig mha{16, 4, 2};
  mha.head_dim = 6, mha.rope = true, mha.rope_theta = 100;
  MoHConfig learned;
  learned.mha = mha, learned.shared_heads = 1, learned.routed_k = 2;
  MoHConfig qnorm = learned;
  qnorm.router = MoHConfig::Router::qnorm;
  MoHConfig qnorm_all = qnorm;
  qnorm_all.ste = MoHConfig::Ste::all;
  MoAConfig moa;
  moa.dim = 16, moa.num_experts = 4, moa.k = 2, moa.head_dim = 8, moa.rope = true;
  MAEConfig mae;
  mae.mha = mha;
  return {{"mha", std::make_shared<MultiHeadAttention>(mha, gen)},
          {"moh learned", std::make_shared<MoHAttention>(learned, gen)},
          {"moh qnorm", std::make_shared<MoHAttention>(qnorm, gen)},
          {"moh qnorm, ste all", std::make_shared<MoHAttention>(qnorm_all, gen)},
          {"moa", std::make_shared<MoAAttention>(moa, gen)},
          {"mae", std::make_shared<MAEAttention>(mae, gen)}};
}

}  // namespace

TEST_CASE(
    "cuda models: RoPE on the GPU matches the CPU: the rotary op (both forms), every method's layer "
    "(outputs, aux, gradients), cached decoding") {
  Generator gen(17);
  Tensor heads = Tensor::randn({2, 3, 5, 6}, gen);
  testing::check_parity([](const std::vector<Tensor>& in) { return rotary_embedding(in[0], 3, 100.0); }, {heads}, 1e-6);
  Tensor rows = Tensor::randn({7, 4}, gen);
  Tensor positions = Tensor::from_vector<int32_t>({0, 5, 2, 2, 9, 1, 3});
  testing::check_parity([](const std::vector<Tensor>& in) { return rotary_embedding_rows(in[0], in[1], 10, 10000.0); },
                        {rows, positions}, 1e-6);

  Tensor x = Tensor::randn({2, 5, 16}, gen), dout = Tensor::randn({2, 5, 16}, gen);
  Generator cpu_gen(9), cuda_gen(9);
  auto on_cpu = rope_layers(cpu_gen), on_cuda = rope_layers(cuda_gen);
  for (size_t i = 0; i < on_cpu.size(); ++i) {
    CAPTURE(on_cpu[i].first);
    Attention& cpu_layer = *on_cpu[i].second;
    Attention& cuda_layer = *on_cuda[i].second;
    cuda_layer.to(kCuda);
    std::vector<Tensor> a = causal_pass(cuda_layer, x, dout), b = causal_pass(cpu_layer, x, dout);
    REQUIRE(a.size() == b.size());
    for (size_t j = 0; j < a.size(); ++j) {
      INFO("output, aux, then parameter gradients: ", j);
      REQUIRE(a[j].defined() == b[j].defined());
      if (a[j].defined()) CHECK_CLOSE(a[j], b[j], 1e-5, 1e-4);
    }
    cuda_layer.eval();
    NoGradGuard no_grad;
    Tensor full = cuda_layer.forward({x.to(kCuda), Tensor(), true}).out;
    CHECK_CLOSE(testing::decode_in_chunks(cuda_layer, x.to(kCuda), {1, 2, 2}), full, 1e-5, 1e-4);
  }
}

TEST_CASE(
    "cuda models: cached decoding on the GPU equals the full forward; greedy and beam search give the CPU's tokens") {
  for (const std::string type : kTypes) {
    CAPTURE(type);
    ModelConfig c = parity_config(type);
    Generator cpu_gen(3), cuda_gen(3);
    EncoderDecoder on_cpu(c, cpu_gen), on_cuda(c, cuda_gen);
    on_cuda.to(kCuda);
    on_cpu.eval(), on_cuda.eval();
    Tensor src = testing::token_rows({1, 2, 3, 4, 5, 6, 7, 8}, 2);
    Tensor tgt = testing::token_rows({0, 4, 2, 9, 0, 3, 3, 1}, 2);
    {
      NoGradGuard no_grad;
      Tensor memory = on_cuda.encode(src.to(kCuda)).out;
      Tensor full = on_cuda.decode(tgt.to(kCuda), memory).out;  // [2, 4, V]
      CHECK_CLOSE(full, on_cpu.decode(tgt, on_cpu.encode(src).out).out, 1e-5, 1e-4);
      DecoderCache cache;
      for (int64_t t = 0; t < 4; ++t) {
        Tensor step = on_cuda.decode(tgt.narrow(1, t, 1).to(kCuda), memory, Tensor(), Tensor(), &cache).out;
        CHECK(step.device() == kCuda);
        CHECK_CLOSE(step, full.narrow(1, t, 1), 1e-5, 1e-4);
      }
      CHECK(cache.self[0].k.device() == kCuda);
    }
    Tensor prefix = Tensor::zeros({2, 1}, DType::i32);
    GenerateOptions options;
    options.max_new = 5;
    Generated cached = greedy(on_cuda, {src, Tensor()}, prefix, options);
    options.use_cache = false;
    Generated uncached = greedy(on_cuda, {src, Tensor()}, prefix, options);
    Generated cpu = greedy(on_cpu, {src, Tensor()}, prefix, options);
    CHECK(cached.tokens == uncached.tokens);
    CHECK(cached.tokens == cpu.tokens);
    CHECK_CLOSE(cached.scores, cpu.scores, 1e-5, 1e-4);
    options.use_cache = true;
    Generated beams = beam_search(on_cuda, {src.to(kCuda), Tensor()}, prefix.to(kCuda), 3, 1.0, options);
    Generated cpu_beams = beam_search(on_cpu, {src, Tensor()}, prefix, 3, 1.0, options);
    CHECK(beams.tokens == cpu_beams.tokens);
    CHECK_CLOSE(beams.scores, cpu_beams.scores, 1e-5, 1e-4);
  }
}

TEST_CASE("cuda models: a checkpoint written from CUDA loads on the CPU (and back); training continues alike") {
  TempDir dir("cuda_models_ckpt");
  ModelConfig c = parity_config("moh");
  auto [on_cpu, on_cuda] = twin_models(c);
  AdamW cuda_opt(on_cuda->parameters(), 1e-2);
  Tensor tokens = token_batch();
  auto step = [&](DecoderLM& model, AdamW& opt) {
    const Device device = model.device();
    opt.zero_grad();
    ModelOutput out = model.forward(tokens.narrow(1, 0, 8).contiguous().to(device));
    Tensor task =
        cross_entropy(out.out.reshape({-1, c.vocab}), tokens.narrow(1, 1, 8).contiguous().reshape({-1}).to(device));
    Tensor loss = training_loss(task, out.aux_losses, 16);
    loss.backward();
    opt.step();
    return loss.item();
  };
  step(*on_cuda, cuda_opt);
  step(*on_cuda, cuda_opt);
  NamedTensors entries = on_cuda->state_dict();
  for (auto& entry : cuda_opt.state()) entries.push_back(entry);
  save_safetensors(dir.file("cuda.safetensors"), entries, c.to_metadata());

  // Load into the CPU twin: the weights and the optimizer state arrive bitwise.
  SafetensorsFile file = load_safetensors(dir.file("cuda.safetensors"));
  NamedTensors model_entries, optimizer_entries;
  for (auto& entry : file.tensors)
    (entry.first.rfind("optim.", 0) == 0 ? optimizer_entries : model_entries).push_back(entry);
  on_cpu->load_state_dict(model_entries);
  AdamW cpu_opt(on_cpu->parameters(), 1e-2);
  cpu_opt.load_state(optimizer_entries);
  check_same_tensors(on_cpu->state_dict(), on_cuda->state_dict(), 0, 0);
  check_same_tensors(cpu_opt.state(), cuda_opt.state(), 0, 0);
  const double cpu_loss = step(*on_cpu, cpu_opt), cuda_loss = step(*on_cuda, cuda_opt);
  CHECK(cuda_loss == doctest::Approx(cpu_loss).epsilon(1e-4));
  check_same_tensors(on_cpu->state_dict(), on_cuda->state_dict(), 1e-5, 1e-3);

  // And a CPU checkpoint into a model on CUDA; its optimizer state goes to the device.
  save_module(*on_cpu, dir.file("cpu.safetensors"));
  Generator other_gen(99);
  DecoderLM reloaded(c, other_gen);
  reloaded.to(kCuda);
  load_module(reloaded, dir.file("cpu.safetensors"));
  check_same_tensors(reloaded.state_dict(), on_cpu->state_dict(), 0, 0);
  CHECK(reloaded.device() == kCuda);
  AdamW reloaded_opt(reloaded.parameters(), 1e-2);
  reloaded_opt.load_state(cpu_opt.state());
  for (const auto& [name, t] : reloaded_opt.state())
    CHECK(t.device() == (name == "optim.steps" || name.rfind("optim.step.", 0) == 0 ? kCpu : kCuda));
}

TEST_CASE("cuda optimizers: SGD (momentum, nesterov), Adam, AdamW and clip_grad_norm match the CPU, f32 and f64") {
  using Make = std::function<std::unique_ptr<Optimizer>(std::vector<Tensor>)>;
  const std::vector<std::pair<const char*, Make>> optimizers = {
      {"sgd", [](std::vector<Tensor> p) { return std::make_unique<SGD>(std::move(p), 0.1); }},
      {"sgd momentum", [](std::vector<Tensor> p) { return std::make_unique<SGD>(std::move(p), 0.1, 0.9, 0.01); }},
      {"sgd nesterov", [](std::vector<Tensor> p) { return std::make_unique<SGD>(std::move(p), 0.1, 0.9, 0, true); }},
      {"adam", [](std::vector<Tensor> p) { return std::make_unique<Adam>(std::move(p), 0.01, 0.9, 0.99, 1e-8, 0.1); }},
      {"adamw", [](std::vector<Tensor> p) { return std::make_unique<AdamW>(std::move(p), 0.01); }},
  };
  for (DType dtype : {DType::f32, DType::f64}) {
    for (const auto& optimizer : optimizers) {
      const char* name = optimizer.first;
      const Make& make = optimizer.second;
      CAPTURE(name);
      CAPTURE(dtype);
      Generator gen(8);
      // Odd sizes, a single element and an empty parameter.
      std::vector<Tensor> cpu_params, cuda_params;
      for (const Shape& shape : std::vector<Shape>{{3, 5}, {257}, {1}, {0, 4}}) {
        Tensor p = Tensor::randn(shape, gen, dtype);
        cpu_params.push_back(p.clone().set_requires_grad());
        cuda_params.push_back(p.to(kCuda).set_requires_grad());
      }
      auto cpu_opt = make(cpu_params), cuda_opt = make(cuda_params);
      for (int step = 0; step < 3; ++step) {
        for (size_t i = 0; i < cpu_params.size(); ++i) {
          // Matrices get a transposed (non-contiguous) gradient on both devices.
          const Shape& s = cpu_params[i].shape();
          const bool matrix = s.size() == 2;
          Tensor g = Tensor::randn(matrix ? Shape{s[1], s[0]} : s, gen, dtype);
          if (step == 1 && i == 2) continue;  // a parameter without a gradient is skipped
          cpu_params[i].set_grad(matrix ? g.t() : g.clone());
          cuda_params[i].set_grad(matrix ? g.to(kCuda).t() : g.to(kCuda));
        }
        const double max_norm = step == 0 ? 100.0 : 1.0;  // the first step unclipped, then clipped
        const double cpu_norm = clip_grad_norm(cpu_params, max_norm), cuda_norm = clip_grad_norm(cuda_params, max_norm);
        CHECK(cuda_norm == doctest::Approx(cpu_norm).epsilon(1e-12));
        for (size_t i = 0; i < cpu_params.size(); ++i)
          if (cpu_params[i].grad().defined()) CHECK_CLOSE(cuda_params[i].grad(), cpu_params[i].grad(), 1e-12, 1e-6);
        cpu_opt->step(), cuda_opt->step();
        for (size_t i = 0; i < cpu_params.size(); ++i) {
          INFO("parameter ", i, " step ", step);
          CHECK_CLOSE(cuda_params[i], cpu_params[i], 1e-12, dtype == DType::f32 ? 1e-6 : 1e-12);
          cpu_params[i].zero_grad(), cuda_params[i].zero_grad();
        }
      }
      check_same_tensors(cuda_opt->state(), cpu_opt->state(), 1e-12, dtype == DType::f32 ? 1e-6 : 1e-12);
    }
  }
  // A NaN gradient: the norm says so, nothing is scaled.
  Tensor p = Tensor::ones({3}, DType::f32, kCuda).set_requires_grad();
  p.set_grad(Tensor::from_vector<float>({1, NAN, 2}).to(kCuda));
  CHECK(std::isnan(clip_grad_norm({p}, 1.0)));
  CHECK(p.grad().to_vector<float>()[2] == 2.0f);
  // Gradients on two devices are refused.
  Tensor q = Tensor::ones({3}).set_requires_grad();
  q.set_grad(Tensor::ones({3}));
  CHECK_THROWS_HEADROOM(clip_grad_norm({p, q}, 1.0), "[clip_grad_norm] inputs on different devices");
}

TEST_CASE("cuda models: Module::to(Device) moves parameters and buffers under the members' handles") {
  Generator gen(2);
  struct WithBuffer : Module {
    std::shared_ptr<Linear> proj;
    Tensor counts;
    explicit WithBuffer(Generator& gen) {
      proj = register_module("proj", std::make_shared<Linear>(3, 5, true, gen));
      counts = register_buffer("counts", Tensor::from_vector<int32_t>({1, 2, 3}));
    }
  } m(gen);
  CHECK(m.device() == kCpu);
  NamedTensors before;
  for (const auto& [name, t] : m.state_dict()) before.emplace_back(name, t.clone());
  sum(m.proj->forward(Tensor::ones({2, 3}))).backward();
  m.to(kCuda);
  CHECK(m.device() == kCuda);
  CHECK(m.proj->weight.device() == kCuda);  // the member handle follows
  CHECK(m.counts.device() == kCuda);
  CHECK(m.proj->weight.requires_grad());
  CHECK_FALSE(m.proj->weight.grad().defined());  // gradients are dropped
  check_same_tensors(m.state_dict(), before, 0, 0);
  Tensor y = m.proj->forward(Tensor::ones({2, 3}, DType::f32, kCuda));
  CHECK(y.device() == kCuda);
  m.to(kCpu);
  CHECK(m.proj->bias.device() == kCpu);
  check_same_tensors(m.state_dict(), before, 0, 0);
}

TEST_CASE("cuda models: the routing recorder takes statistics from the GPU") {
  for (const std::string type : {"moa", "moh", "mae"}) {
    CAPTURE(type);
    ModelConfig c = parity_config(type);
    auto [on_cpu, on_cuda] = twin_models(c);
    on_cpu->eval(), on_cuda->eval();
    NoGradGuard no_grad;
    Tensor tokens = token_batch(), valid = logical_not(padding_batch());
    RoutingRecorder a, b;
    a.add(on_cuda->forward(tokens.to(kCuda)).stats, tokens.reshape({-1}).to(kCuda), valid.reshape({-1}).to(kCuda));
    b.add(on_cpu->forward(tokens).stats, tokens.reshape({-1}), valid.reshape({-1}));
    REQUIRE(a.layers() == b.layers());
    for (int64_t l = 0; l < a.layers(); ++l)
      for (int64_t e = 0; e < a.experts(l); ++e) {
        CHECK(a.count(l, e) == b.count(l, e));
        CHECK(a.histogram(l, e) == b.histogram(l, e));
        CHECK(a.mean_gate(l, e) == doctest::Approx(b.mean_gate(l, e)).epsilon(1e-4));
      }
  }
}
