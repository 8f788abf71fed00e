// Transformer models: the block (pre-LN and post-LN) against a composition of
// its parts, causality of the DecoderLM, the ViT (patches by loops, cls and
// mean pooling), aux-loss collection through a custom attention factory,
// config metadata round trips, MACs, gradchecks through whole models (f64),
// and the frozen PyTorch fixtures; the LLaMA-style architecture (RMSNorm,
// SwiGLU, biases switched off, a head bias) the same ways.  Learning checks for every attention type
// are in test_models.cpp.
#include <chrono>
#include <filesystem>
#include <functional>

#include "fixture_reader.h"
#include "headroom/models/transformer.h"
#include "helpers.h"
#include "transformer_helpers.h"

using namespace headroom;

namespace {

ModelConfig tiny_config(NormPlacement norm = NormPlacement::pre) {
  ModelConfig c = testing::tiny_model_config(7);
  c.norm = norm;
  return c;
}

Tensor tokens_of(const std::vector<int32_t>& ids, int64_t B) { return testing::token_rows(ids, B); }

// An attention that wraps MHA and reports aux = 10·layer + role, so tests can
// see which layers a model collected, and in which order.
class TaggedAttention : public Attention {
 public:
  TaggedAttention(const ModelConfig& c, int64_t layer, AttentionRole role, Generator& gen)
      : tag_(10.0 * layer + int(role)) {
    inner = register_module("inner", std::make_shared<MultiHeadAttention>(MHAConfig{c.dim, c.heads}, gen));
  }
  AttentionOutput forward(const AttentionInput& in) override {
    AttentionOutput o = inner->forward(in);
    o.aux.value = Tensor::scalar(tag_);
    return o;
  }
  std::string kind() const override { return "tagged"; }
  int64_t macs(int64_t T, int64_t S, bool causal) const override { return inner->macs(T, S, causal); }
  std::shared_ptr<MultiHeadAttention> inner;

 private:
  double tag_;
};

std::vector<double> values_of(const std::vector<AuxLoss>& losses) {
  std::vector<double> out;
  for (const AuxLoss& loss : losses) out.push_back(loss.value.item());
  return out;
}

// Gradcheck (f64) of `output` over every parameter of `model`, which it converts to f64 first.
void gradcheck_model(Module& model, const std::function<Tensor()>& output) {
  model.to(DType::f64);
  auto result = gradcheck([&](const std::vector<Tensor>&) { return output(); }, model.parameters());
  CHECK_MESSAGE(result.ok, result.message);
}

// The whole-model gradchecks' targets: two rows of 3 tokens, the second row's last one padded.
Tensor gradcheck_tokens() { return tokens_of({1, 4, 2, 0, 3, 3}, 2); }
Tensor gradcheck_padding() { return Tensor::from_vector<uint8_t>({0, 0, 0, 0, 0, 1}, {2, 3}); }

}  // namespace

TEST_CASE("TransformerBlock: pre-LN and post-LN equal the composition of their parts") {
  Generator gen(1);
  for (NormPlacement norm : {NormPlacement::pre, NormPlacement::post}) {
    ModelConfig c = tiny_config(norm);
    auto self = std::make_shared<MultiHeadAttention>(MHAConfig{8, 2}, gen);
    auto cross = std::make_shared<MultiHeadAttention>(MHAConfig{8, 2}, gen);
    TransformerBlock block(c.block(AttentionRole::decoder_self), self, cross, gen);
    // Non-trivial norms, so that mixing up which norm goes where shows.
    for (auto& [name, p] : block.named_parameters())
      if (name.find("norm") != std::string::npos) {
        NoGradGuard g;
        p.copy_(Tensor::randn(p.shape(), gen));
      }
    Tensor x = Tensor::randn({2, 4, 8}, gen), memory = Tensor::randn({2, 3, 8}, gen);
    Tensor pad = Tensor::from_vector<uint8_t>({0, 0, 0, 0, 0, 0, 0, 1}, {2, 4});
    Tensor mem_pad = Tensor::from_vector<uint8_t>({0, 0, 1, 0, 0, 0}, {2, 3});
    auto ln = [](const std::shared_ptr<Norm>& norm, const Tensor& t) {
      const auto& n = dynamic_cast<const LayerNorm&>(*norm);
      return layer_norm(t, n.weight, n.bias);
    };
    auto attend_self = [&](const Tensor& h) { return self->forward({h, Tensor(), true, pad, pad}).out; };
    auto attend_cross = [&](const Tensor& h) { return cross->forward({h, memory, false, pad, mem_pad}).out; };
    const auto& mlp = dynamic_cast<const MLP&>(*block.mlp);
    auto ffn = [&](const Tensor& h) {
      return linear(gelu(linear(h, mlp.fc1->weight, mlp.fc1->bias)), mlp.fc2->weight, mlp.fc2->bias);
    };
    Tensor expected;
    if (norm == NormPlacement::pre) {
      Tensor h = x + attend_self(ln(block.self_attn_norm, x));
      h = h + attend_cross(ln(block.cross_attn_norm, h));
      expected = h + ffn(ln(block.mlp_norm, h));
    } else {
      Tensor h = ln(block.self_attn_norm, x + attend_self(x));
      h = ln(block.cross_attn_norm, h + attend_cross(h));
      expected = ln(block.mlp_norm, h + ffn(h));
    }
    ModelOutput out = block.forward(BlockInput(x, pad, memory, mem_pad));
    CHECK_CLOSE(out.out, expected, 1e-5, 1e-5);
    CHECK(out.aux_losses.empty());  // MHA has none
    CHECK(out.stats.size() == 2);   // one entry per attention layer
  }
}

TEST_CASE("DecoderLM: shapes, tied and untied heads, and causality") {
  Generator gen(2);
  for (bool tied : {true, false}) {
    ModelConfig c = tiny_config();
    c.tie_embeddings = tied;
    c.positions = tied ? PositionKind::sinusoidal : PositionKind::learned;
    c.max_len = 8;
    DecoderLM lm(c, gen);
    CHECK(bool(lm.lm_head) == !tied);
    Tensor a = tokens_of({1, 2, 3, 4, 5, 6, 0, 1, 2, 3}, 2);
    Tensor logits = lm.forward(a).out;
    CHECK(logits.shape() == Shape{2, 5, 7});
    for (int64_t t = 0; t < 5; ++t) {
      std::vector<int32_t> ids = a.to_vector<int32_t>();
      ids[t] = (ids[t] + 1) % 7, ids[5 + t] = (ids[5 + t] + 3) % 7;
      Tensor changed = lm.forward(tokens_of(ids, 2)).out;
      if (t > 0) CHECK_CLOSE(changed.narrow(1, 0, t), logits.narrow(1, 0, t), 1e-6);
      CHECK(testing::compare(changed.narrow(1, t, 1), logits.narrow(1, t, 1), 1e-4) != "");
    }
    if (tied) {  // dropout acts in training only
      ModelConfig noisy = c;
      noisy.dropout = noisy.attn_dropout = 0.3;
      DecoderLM dropped(noisy, gen);
      CHECK(testing::compare(dropped.forward(a).out, dropped.forward(a).out, 1e-4) != "");
      dropped.eval();
      CHECK_CLOSE(dropped.forward(a).out, dropped.forward(a).out, 0.0);
    }
    if (!tied) CHECK_THROWS_HEADROOM(lm.forward(tokens_of({1, 2, 3, 4, 5, 6, 0, 1, 2}, 1)), "exceed max_len 8");
  }
}

TEST_CASE("ViT: patches by loops, cls and mean pooling, shapes") {
  Generator gen(3);
  ModelConfig c = tiny_config();
  c.image_size = 4, c.patch_size = 2, c.channels = 3, c.classes = 5, c.encoder_layers = 1;
  Tensor images = Tensor::randn({2, 3, 4, 4}, gen);
  // patches[b, n, (ch, i, j)] with n = row-major patch index
  std::vector<float> px = images.to_vector<float>(), flat;
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t pr = 0; pr < 2; ++pr)
      for (int64_t pc = 0; pc < 2; ++pc)
        for (int64_t ch = 0; ch < 3; ++ch)
          for (int64_t i = 0; i < 2; ++i)
            for (int64_t j = 0; j < 2; ++j) flat.push_back(px[((b * 3 + ch) * 4 + pr * 2 + i) * 4 + pc * 2 + j]);
  Tensor patches = Tensor::from_vector(flat, {2, 4, 12});
  for (Pooling pooling : {Pooling::cls, Pooling::mean}) {
    c.pooling = pooling;
    ViT vit(c, gen);
    CHECK(vit.cls_token.defined() == (pooling == Pooling::cls));
    CHECK(vit.pos_embed.shape() == Shape{pooling == Pooling::cls ? 5 : 4, 8});
    Tensor x = vit.patch_embed->forward(patches);
    if (pooling == Pooling::cls) x = cat({vit.cls_token.expand({2, 1, 8}), x}, 1);
    Tensor encoded = vit.encoder->forward(BlockInput(x + vit.pos_embed)).out;
    Tensor pooled = pooling == Pooling::cls ? encoded.select(1, 0) : mean(encoded, {1});
    Tensor logits = vit.forward(images).out;
    CHECK(logits.shape() == Shape{2, 5});
    CHECK_CLOSE(logits, vit.head->forward(pooled), 1e-5, 1e-5);
  }
  CHECK_THROWS_HEADROOM(ViT(c, gen).forward(Tensor::randn({1, 3, 6, 6})), "expected images [B, 3, 4, 4]");
  c.patch_size = 3;
  CHECK_THROWS_HEADROOM(ViT(c, gen), "multiple of patch_size");
}

TEST_CASE("models collect every attention layer's aux loss, in layer order, through the factory") {
  Generator gen(4);
  ModelConfig c = tiny_config();
  AttentionFactory tagged = [&](int64_t layer, AttentionRole role) {
    return std::make_shared<TaggedAttention>(c, layer, role, gen);
  };
  DecoderLM lm(c, gen, tagged);
  Tensor tgt = tokens_of({1, 2, 3}, 1), src = tokens_of({4, 5}, 1);
  CHECK(values_of(lm.forward(tgt).aux_losses) == std::vector<double>{1, 11});
  EncoderDecoder seq2seq(c, gen, tagged);
  ModelOutput enc = seq2seq.encode(src);
  CHECK(values_of(enc.aux_losses) == std::vector<double>{0, 10});
  ModelOutput dec = seq2seq.decode(tgt, enc.out);
  CHECK(values_of(dec.aux_losses) == std::vector<double>{1, 2, 11, 12});
  CHECK(dec.stats.size() == 4);
  CHECK(training_loss(Tensor::scalar(1.5), dec.aux_losses, 4).item() == 27.5);  // 1.5 + 1 + 2 + 11 + 12
  // Losses that join the summed task loss are divided by the target tokens; undefined ones are skipped.
  std::vector<AuxLoss> mixed = {{Tensor::scalar(8), true}, {Tensor::scalar(2), false}, {Tensor(), false}};
  CHECK(training_loss(Tensor::scalar(1.5), mixed, 4).item() == 5.5);
  CHECK(training_loss(Tensor::scalar(1.5), {}, 4).item() == 1.5);
}

TEST_CASE("ModelConfig: metadata round trip, through a checkpoint too, and errors") {
  ModelConfig c = tiny_config(NormPlacement::post);
  c.src_vocab = 13, c.activation = Activation::silu, c.dropout = 0.1, c.attn_dropout = 1.0 / 3;
  c.positions = PositionKind::learned, c.max_len = 77, c.tie_embeddings = true, c.scale_embeddings = true;
  c.norm_eps = 1e-6, c.image_size = 32, c.patch_size = 4, c.channels = 1, c.classes = 10, c.pooling = Pooling::mean;
  c.attention.type = "mha";
  c.attention.options = {{"kv_heads", "1"}, {"bias", "false"}};
  c.attention.layers[1] = {"", {{"kv_heads", "2"}}};
  StringMap meta = c.to_metadata();
  CHECK(meta.at("model.norm") == "post");
  CHECK(meta.at("attention.option.kv_heads") == "1");
  CHECK(meta.at("attention.layer.1.option.kv_heads") == "2");
  ModelConfig back = ModelConfig::from_metadata(meta);
  CHECK(back == c);
  CHECK(back.attn_dropout == c.attn_dropout);  // exact, not just equal text
  CHECK(back.attention.resolve(0, AttentionRole::decoder_self).options.at("kv_heads") == "1");
  CHECK(back.attention.resolve(1, AttentionRole::cross).options.at("kv_heads") == "2");
  CHECK(back.attention.resolve(1, AttentionRole::cross).options.at("bias") == "false");
  CHECK(back != tiny_config());

  // Per-layer options reach the attention layers; the config survives a checkpoint.
  c.tie_embeddings = false, c.dropout = 0, c.attn_dropout = 0;
  DecoderLM lm(c);
  CHECK(lm.decoder->block(0)->self_attn->named_parameters().size() == 4);  // no biases
  auto mha1 = std::dynamic_pointer_cast<MultiHeadAttention>(lm.decoder->block(1)->self_attn);
  CHECK(mha1->config.kv_heads == 2);
  std::string path = (std::filesystem::temp_directory_path() / "headroom_transformer_config.safetensors").string();
  StringMap with_other = c.to_metadata();
  with_other["note"] = "other metadata is ignored";
  save_module(lm, path, with_other);
  CHECK(ModelConfig::from_metadata(load_safetensors(path).metadata) == c);
  std::filesystem::remove(path);

  CHECK_THROWS_HEADROOM(ModelConfig::from_metadata({{"model.dimm", "3"}}), "unknown metadata field model.dimm");
  CHECK_THROWS_HEADROOM(ModelConfig::from_metadata({{"model.dim", "3x"}}), "model.dim = '3x' is not an integer");
  CHECK_THROWS_HEADROOM(ModelConfig::from_metadata({{"model.norm", "mid"}}), "is not pre|post");
  CHECK_THROWS_HEADROOM(ModelConfig::from_metadata({{"attention.type", ""}}), "the base attention type is empty");
  CHECK_THROWS_HEADROOM(ModelConfig::from_metadata({{"attention.layer.x.k", "1"}}), "is not an integer");
  ModelConfig bad = tiny_config();
  bad.attention.type = "moz";
  CHECK_THROWS_HEADROOM(DecoderLM{bad}, "unknown attention type 'moz'");
  bad.attention.type = "mha";
  bad.attention.options["kv_head"] = "1";
  CHECK_THROWS_HEADROOM(DecoderLM{bad}, "unknown option(s): kv_head");
  bad.attention.options = {{"bias", "maybe"}};
  CHECK_THROWS_HEADROOM(DecoderLM{bad}, "option bias = 'maybe' is not true/false");
}

TEST_CASE("forward MACs add up the layers; describe() reports them") {
  ModelConfig c = tiny_config();
  DecoderLM lm(c);
  const int64_t T = 5, S = 3, d = 8, V = 7, ffn = 2 * d * 16;
  MultiHeadAttention mha({d, 2});
  CHECK(lm.forward_macs(T) == 2 * (mha.macs(T, T, true) + T * ffn) + T * d * V);
  EncoderDecoder seq2seq(c);
  CHECK(seq2seq.forward_macs(S, T) == 2 * (mha.macs(S, S, false) + S * ffn) +
                                          2 * (mha.macs(T, T, true) + mha.macs(T, S, false) + T * ffn) + T * d * V);
  c.image_size = 4, c.patch_size = 2, c.classes = 3, c.encoder_layers = 1;
  ViT vit(c);
  CHECK(vit.forward_macs() == 4 * 12 * d + mha.macs(5, 5, false) + 5 * ffn + d * 3);
  const std::string text = lm.describe(T);
  CHECK(text.find(std::to_string(lm.num_parameters()) + " parameters") != std::string::npos);
  CHECK(text.find(std::to_string(lm.forward_macs(T)) + " forward MACs at T = 5") != std::string::npos);
  CHECK(seq2seq.describe(S, T).find("EncoderDecoder") == 0);
  CHECK(vit.describe().find("per image") != std::string::npos);
}

TEST_CASE("gradcheck through a 1-layer DecoderLM and EncoderDecoder (f64)") {
  Generator gen(5);
  ModelConfig c = tiny_config();
  c.vocab = 5, c.dim = 4, c.ffn_hidden = 6, c.encoder_layers = c.decoder_layers = 1;
  const Tensor tokens = gradcheck_tokens();
  const Tensor pad = gradcheck_padding();
  DecoderLM lm(c, gen);
  gradcheck_model(lm, [&] { return lm.forward(tokens, pad).out; });

  c.norm = NormPlacement::post, c.positions = PositionKind::learned, c.max_len = 4, c.tie_embeddings = true;
  EncoderDecoder seq2seq(c, gen);
  Tensor src = tokens_of({2, 3, 1, 4}, 2);
  Tensor src_pad = Tensor::from_vector<uint8_t>({0, 0, 0, 1}, {2, 2});
  gradcheck_model(seq2seq, [&] { return seq2seq.decode(tokens, seq2seq.encode(src, src_pad).out, src_pad, pad).out; });
}

namespace {

// Builds the DecoderLM of a frozen fixture (tests/fixtures/<file>, its config
// in the metadata, its weights by parameter name) and checks its logits, the
// loss over the unpadded next tokens and every gradient against the float64
// reference: in f32 within f32_tol (absolute and relative), in f64 within
// 1e-10 to show that the rest is rounding.
void check_decoder_fixture(const std::string& file, double f32_tol) {
  const std::string path = std::string(HEADROOM_FIXTURES_DIR) + "/" + file;
  testing::Fixture f(path);
  ModelConfig c = ModelConfig::from_metadata(load_safetensors(path).metadata);
  DecoderLM lm(c);
  NamedTensors weights;
  for (const auto& [name, p] : lm.state_dict()) weights.push_back({name, f.get(name)});
  lm.load_state_dict(weights);
  Tensor tokens = f.get("tokens"), padding = f.get("padding").to(DType::b8), targets = f.get("targets");
  CHECK(targets.dtype() == DType::i32);
  // f32 as trained, then f64 to show that the remaining error is rounding.
  for (auto [dtype, tol] : {std::pair{DType::f32, f32_tol}, std::pair{DType::f64, 1e-10}}) {
    lm.to(dtype);
    lm.zero_grad();
    Tensor logits = lm.forward(tokens, padding).out;
    CHECK_CLOSE(logits, f.get("logits"), tol, tol);
    Tensor loss = cross_entropy(logits.narrow(1, 0, 5), targets);
    CHECK_CLOSE(loss, f.get("loss"), tol, tol);
    loss.backward();
    for (const auto& name_p : lm.named_parameters()) {
      const auto& name = name_p.first;  // named: Clang 14 lambdas cannot capture structured bindings
      const auto& p = name_p.second;
      INFO(name);
      CHECK_CLOSE(p.grad(), f.get("grad." + name), tol, tol);
    }
  }
}

}  // namespace

TEST_CASE("DecoderLM matches the frozen PyTorch fixture: logits, loss and every gradient") {
  check_decoder_fixture("transformer.safetensors", 1e-4);
}

TEST_CASE("a LLaMA-style DecoderLM (RMSNorm, SwiGLU, no biases, RoPE, GQA) matches its frozen PyTorch fixture") {
  // f32 against float64 from the same f32 weights, so only f32 arithmetic
  // differs.  A logit passes through about a dozen f32 stages (per block a
  // norm, projections of at most 24 terms, RoPE, softmax, the gate; then the
  // final norm and the head); rounding errors of u = 2⁻²⁴ ≈ 6e-8 add like a
  // random walk over those 12 · 24 terms: √288 · u ≈ 1e-6 of the values,
  // which are below 3 here (logits up to 2.7, gradients up to 0.62).
  // Measured: 8.7e-7 at most (1.1e-6 on the reference kernels), so 1e-5
  // (absolute and relative) keeps a margin of about 10 over f32 rounding.
  check_decoder_fixture("llama.safetensors", 1e-5);
}

TEST_CASE("TransformerBlock, LLaMA-style (RMSNorm, SwiGLU, no biases): the composition of its parts; gradcheck (f64)") {
  Generator gen(8);
  const ModelConfig c = testing::tiny_llama_config(7);
  std::shared_ptr<Attention> self = make_attention(c, 0, AttentionRole::decoder_self, gen);
  TransformerBlock block(c.block(AttentionRole::decoder_self), self, nullptr, gen);
  // Two norm weights, the four projections' weights, the MLP's three: no bias anywhere.
  CHECK(block.named_parameters().size() == 9);
  for (const auto& name_p : block.named_parameters()) CHECK(name_p.first.find("bias") == std::string::npos);
  for (Tensor p : {block.self_attn_norm->parameters()[0], block.mlp_norm->parameters()[0]}) {
    NoGradGuard g;
    p.copy_(Tensor::randn(p.shape(), gen));  // so that mixing up the norms shows
  }
  auto rms = [](const std::shared_ptr<Norm>& norm, const Tensor& t) {
    const auto& n = dynamic_cast<const RMSNorm&>(*norm);
    return rms_norm(t, n.weight, n.eps);
  };
  const auto& mlp = dynamic_cast<const GatedMLP&>(*block.mlp);
  Tensor x = Tensor::randn({2, 4, 8}, gen);
  Tensor h = x + self->forward({rms(block.self_attn_norm, x), Tensor(), true}).out;
  Tensor n = rms(block.mlp_norm, h);
  Tensor hidden = silu(linear(n, mlp.gate_proj->weight)) * linear(n, mlp.up_proj->weight);  // [2, 4, 12]
  CHECK_CLOSE(block.forward(BlockInput(x)).out, h + linear(hidden, mlp.down_proj->weight), 1e-5, 1e-5);

  block.to(DType::f64);
  std::vector<Tensor> inputs = block.parameters();
  inputs.push_back(Tensor::randn({2, 3, 8}, gen, DType::f64).set_requires_grad());
  auto result =
      gradcheck([&](const std::vector<Tensor>& in) { return block.forward(BlockInput(in.back())).out; }, inputs);
  CHECK_MESSAGE(result.ok, result.message);
}

TEST_CASE("gradcheck through LLaMA-style models: a DecoderLM with a head bias, a tied EncoderDecoder, a ViT (f64)") {
  Generator gen(9);
  ModelConfig c = testing::tiny_llama_config(5);
  c.dim = 4;  // 2 heads of width 2: RoPE rotates one pair each
  c.ffn_hidden = 6;
  c.encoder_layers = 1;
  c.decoder_layers = 1;
  c.head_bias = true;
  const Tensor tokens = gradcheck_tokens();
  const Tensor pad = gradcheck_padding();
  DecoderLM lm(c, gen);
  gradcheck_model(lm, [&] { return lm.forward(tokens, pad).out; });

  c.head_bias = false;
  c.tie_embeddings = true;
  c.mlp_bias = true;  // the gated MLP's biases too
  EncoderDecoder seq2seq(c, gen);
  Tensor src = tokens_of({2, 3, 1, 4}, 2);
  gradcheck_model(seq2seq, [&] { return seq2seq.decode(tokens, seq2seq.encode(src).out, Tensor(), pad).out; });

  c.image_size = 4;
  c.patch_size = 2;
  c.classes = 3;
  ViT vit(c, gen);
  Tensor images = Tensor::randn({2, 3, 4, 4}, gen, DType::f64);
  gradcheck_model(vit, [&] { return vit.forward(images).out; });
}

TEST_CASE("the LM head: a bias when head_bias, in both models; a tied head with a bias is refused") {
  Generator gen(10);
  ModelConfig c = tiny_config();
  c.head_bias = true;
  DecoderLM lm(c, gen);
  REQUIRE(lm.lm_head->bias.defined());
  CHECK(lm.lm_head->bias.shape() == Shape{7});
  CHECK(lm.state_dict().back().first == "lm_head.bias");
  Tensor tokens = tokens_of({1, 2, 3, 4, 5, 6}, 2);
  Tensor biased = lm.forward(tokens).out;
  Tensor bias = lm.lm_head->bias.detach().clone();
  {
    NoGradGuard no_grad;
    lm.lm_head->bias.zero_();
  }
  Tensor unbiased = lm.forward(tokens).out;  // [2, 3, V]: the bias is added to every position's logits
  CHECK_CLOSE(biased - unbiased, Tensor::zeros({2, 3, 7}) + bias, 1e-6);
  CHECK(EncoderDecoder(c, gen).lm_head->bias.defined());
  c.tie_embeddings = true;
  CHECK_THROWS_HEADROOM(DecoderLM(c, gen), "head_bias needs an untied head (tie_embeddings=false)");
  CHECK_THROWS_HEADROOM(EncoderDecoder(c, gen), "head_bias needs an untied head");
}

TEST_CASE("a gated MLP and RMSNorm in the parameter count, the forward MACs and describe()") {
  ModelConfig c = testing::tiny_llama_config(7);
  c.head_bias = true;
  DecoderLM lm(c);
  const int64_t T = 5, d = 8, V = 7, gated = 3 * d * 12;  // gate_proj, up_proj, down_proj per token
  const std::shared_ptr<Attention> attention = make_attention(c, 0, AttentionRole::decoder_self);
  CHECK(lm.forward_macs(T) == 2 * (attention->macs(T, T, true) + T * gated) + T * d * V);
  // Embedding; per block two RMSNorm weights, the attention and the MLP; the final RMSNorm; the head and its bias.
  CHECK(lm.num_parameters() == V * d + 2 * (2 * d + attention->num_parameters() + gated) + d + V * d + V);
  const std::string text = lm.describe(T);
  CHECK(text.find("vocab 7, 2 layers, head bias, d 8, ffn 12 gated without biases, pre-LN RMSNorm;") !=
        std::string::npos);
  CHECK(DecoderLM(tiny_config()).describe(T).find("2 layers, d 8, ffn 16, pre-LN;") != std::string::npos);
}
