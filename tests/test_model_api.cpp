// The model-building API: attention chosen per layer and per role, the aux
// losses each layer weights by its method's convention (counted once, in
// every kind of model and factory), the MoH / MoA defaults, BlockConfig, and
// a mixed-method model's round trip through a checkpoint's metadata alone, a
// LLaMA-style one's too (RMSNorm, SwiGLU, biases switched off and on).
#include <filesystem>

#include "helpers.h"
#include "transformer_helpers.h"

using namespace headroom;

namespace {

// d 16, 4 heads, 2 + 2 layers; vocab 12.
ModelConfig small_config() {
  ModelConfig c = testing::tiny_model_config(12);
  c.dim = 16, c.heads = 4, c.ffn_hidden = 32;
  return c;
}

// The mixed encoder-decoder of these tests: MoA encoder, MoH decoder
// self-attention with a dense first layer, MHA cross-attention (MQA in layer 1).
ModelConfig mixed_seq2seq_config() {
  ModelConfig c = small_config();
  c.attention = {"moa", {{"experts", "4"}, {"k", "2"}, {"head_dim", "8"}}};
  c.attention.roles[AttentionRole::decoder_self] = {"moh", {{"routed_k", "2"}}};
  c.attention.roles[AttentionRole::cross] = {"mha", {}};
  c.attention.at[{AttentionRole::decoder_self, 0}] = {"mha", {}};
  c.attention.at[{AttentionRole::cross, 1}] = {"", {{"kv_heads", "1"}}};
  return c;
}

Tensor source_batch() { return testing::token_rows({1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 2); }
Tensor target_batch() { return testing::token_rows({3, 4, 5, 6, 7, 8, 9, 10}, 2); }

std::string temp_path(const char* name) { return (std::filesystem::temp_directory_path() / name).string(); }

// A few AdamW steps of next-token prediction on the target batch; returns the first and last loss.
std::pair<double, double> train_steps(EncoderDecoder& model, int steps) {
  AdamW opt(model.parameters(), 1e-2);
  Tensor src = source_batch(), tgt = target_batch();
  Tensor input = tgt.narrow(1, 0, 3), labels = tgt.narrow(1, 1, 3).reshape({-1});
  double first = 0, last = 0;
  for (int step = 0; step < steps; ++step) {
    opt.zero_grad();
    ModelOutput enc = model.encode(src);
    ModelOutput dec = model.decode(input, enc.out);
    dec.aux_losses.insert(dec.aux_losses.begin(), enc.aux_losses.begin(), enc.aux_losses.end());
    Tensor task = cross_entropy(dec.out.reshape({-1, model.config.vocab}), labels);
    Tensor loss = training_loss(task, dec.aux_losses, labels.numel());
    loss.backward();
    opt.step();
    (step == 0 ? first : last) = loss.item();
  }
  return {first, last};
}

Tensor seq2seq_logits(EncoderDecoder& model) {
  NoGradGuard no_grad;
  return model.decode(target_batch(), model.encode(source_batch()).out).out;
}

// Which class each attention layer of a stack is, "self/cross" per block.
std::vector<std::string> kinds(const TransformerStack& stack) {
  std::vector<std::string> out;
  for (size_t i = 0; i < stack.size(); ++i) {
    const TransformerBlock& b = *stack.block(i);
    out.push_back(b.self_attn->kind() + (b.cross_attn ? "/" + b.cross_attn->kind() : ""));
  }
  return out;
}

// Saves `model` with its config as metadata, rebuilds a DecoderLM from that
// file alone (load_model: the config, then a strict load of the tensors) and
// checks the logits are bitwise equal; the file is no other class of model.
void check_rebuilds_from_metadata(DecoderLM& model, const Tensor& tokens, const char* file) {
  const std::string path = temp_path(file);
  save_module(model, path, model.config.to_metadata());
  std::shared_ptr<DecoderLM> restored = load_model<DecoderLM>(path);
  CHECK_THROWS_HEADROOM(load_model<EncoderDecoder>(path), "holds a model of class DecoderLM, not EncoderDecoder");
  CHECK_THROWS_HEADROOM(load_model<ViT>(path), "holds a model of class DecoderLM, not ViT");
  std::filesystem::remove(path);
  NoGradGuard no_grad;
  model.eval(), restored->eval();
  CHECK_CLOSE(restored->forward(tokens).out, model.forward(tokens).out, 0, 0);
}

}  // namespace

TEST_CASE("AttentionSpec: overrides by role, layer and both, in that order; a new type starts from its defaults") {
  AttentionSpec spec{"moh", {{"routed_k", "2"}, {"beta", "0.1"}}};
  spec.roles[AttentionRole::cross] = {"mha", {{"kv_heads", "1"}}};
  spec.layers[1] = {"", {{"bias", "false"}}};
  spec.at[{AttentionRole::cross, 1}] = {"", {{"kv_heads", "2"}}};
  CHECK(spec.resolve(0, AttentionRole::decoder_self) == AttentionChoice{"moh", {{"routed_k", "2"}, {"beta", "0.1"}}});
  CHECK(spec.resolve(0, AttentionRole::cross) == AttentionChoice{"mha", {{"kv_heads", "1"}}});  // moh's options dropped
  CHECK(spec.resolve(1, AttentionRole::cross) == AttentionChoice{"mha", {{"kv_heads", "2"}, {"bias", "false"}}});
  CHECK(spec.resolve(1, AttentionRole::encoder_self) ==
        AttentionChoice{"moh", {{"routed_k", "2"}, {"beta", "0.1"}, {"bias", "false"}}});
  // The options every method takes are model-wide: a layer of another method keeps them, unless it sets its own.
  AttentionSpec rotary{"moh", {{"rope", "true"}, {"rope_theta", "500"}, {"dropout", "0.1"}, {"routed_k", "2"}}};
  rotary.layers[0] = {"mha", {}};
  rotary.layers[1] = {"moa", {{"rope", "false"}}};
  CHECK(rotary.resolve(0, AttentionRole::decoder_self) ==
        AttentionChoice{"mha", {{"rope", "true"}, {"rope_theta", "500"}, {"dropout", "0.1"}}});
  CHECK(rotary.resolve(1, AttentionRole::decoder_self) ==
        AttentionChoice{"moa", {{"rope", "false"}, {"rope_theta", "500"}, {"dropout", "0.1"}}});

  // set() takes the metadata keys; the metadata round trip keeps every scope.
  AttentionSpec again;
  again.set("type", "moh");
  again.set("option.routed_k", "2");
  again.set("option.beta", "0.1");
  again.set("cross.type", "mha");
  again.set("cross.option.kv_heads", "1");
  again.set("layer.1.option.bias", "false");
  again.set("cross.layer.1.option.kv_heads", "2");
  ModelConfig a, b;
  a.attention = spec, b.attention = again;
  CHECK(a == b);
  StringMap meta = a.to_metadata();
  CHECK(meta.at("attention.cross.layer.1.option.kv_heads") == "2");
  CHECK(meta.at("attention.cross.type") == "mha");
  CHECK(ModelConfig::from_metadata(meta) == a);
  CHECK_THROWS_HEADROOM(again.set("cross.kind", "mha"), "should end in type or option.<name>");
  CHECK_THROWS_HEADROOM(again.set("layer.one.type", "mha"), "is not an integer");
  CHECK_THROWS_HEADROOM(again.set("layer.-1.type", "mha"), "layers count from 0");
  CHECK_THROWS_HEADROOM(again.set("layer.1", "mha"), "should read layer.<index>.type");
}

TEST_CASE("ModelConfig from a checkpoint: every field required, numbers read whole and in range") {
  const ModelConfig c = mixed_seq2seq_config();
  const StringMap meta = c.to_metadata();
  CHECK(ModelConfig::from_checkpoint_metadata(meta, "run/ckpt") == c);
  for (const char* key : {"model.norm_eps", "model.channels", "attention.type"}) {
    CAPTURE(key);
    StringMap missing = meta;
    missing.erase(key);
    const std::string refusal = std::string("[metadata] run/ckpt has no '") + key + "' entry";
    CHECK_THROWS_HEADROOM(ModelConfig::from_checkpoint_metadata(missing, "run/ckpt"), refusal.c_str());
  }
  StringMap defaults_left_out = meta;
  defaults_left_out.erase("model.channels");
  CHECK(ModelConfig::from_metadata(defaults_left_out) == c);  // hand-written metadata keeps the defaults
  for (const char* text : {"16.5", "16abc", " 16", "+16", "", "0x10", "99999999999999999999"}) {
    CAPTURE(text);
    StringMap bad = meta;
    bad["model.dim"] = text;
    const std::string refusal = "run/ckpt: model.dim = '" + std::string(text) + "' is not an integer from ";
    CHECK_THROWS_HEADROOM(ModelConfig::from_checkpoint_metadata(bad, "run/ckpt"), refusal.c_str());
  }
  for (const char* text : {"nan", "inf", "1e999", "0.1x", " 0.1"}) {
    CAPTURE(text);
    StringMap bad = meta;
    bad["model.dropout"] = text;
    const std::string refusal = "model.dropout = '" + std::string(text) + "' is not a finite number";
    CHECK_THROWS_HEADROOM(ModelConfig::from_checkpoint_metadata(bad, "run/ckpt"), refusal.c_str());
  }
}

TEST_CASE("the architecture fields: metadata round trip, strict values, and checkpoints written before them") {
  ModelConfig c = testing::tiny_llama_config(12);
  c.head_bias = true;
  const StringMap meta = c.to_metadata();
  CHECK(meta.at("model.norm_kind") == "rmsnorm");
  CHECK(meta.at("model.mlp") == "gated");
  CHECK(meta.at("model.mlp_bias") == "false");
  CHECK(meta.at("model.head_bias") == "true");
  CHECK(ModelConfig::from_checkpoint_metadata(meta, "run/ckpt") == c);
  const StringMap defaults = ModelConfig{}.to_metadata();
  CHECK(defaults.at("model.norm_kind") == "layernorm");
  CHECK(defaults.at("model.mlp") == "plain");
  CHECK(defaults.at("model.mlp_bias") == "true");
  CHECK(defaults.at("model.head_bias") == "false");
  CHECK_THROWS_HEADROOM(ModelConfig::from_metadata({{"model.norm_kind", "rms"}}),
                        "model.norm_kind = 'rms' is not layernorm|rmsnorm");
  CHECK_THROWS_HEADROOM(ModelConfig::from_metadata({{"model.mlp", "swiglu"}}),
                        "model.mlp = 'swiglu' is not plain|gated");
  CHECK_THROWS_HEADROOM(ModelConfig::from_metadata({{"model.mlp_bias", "no"}}), "is not true/false");
  CHECK_THROWS_HEADROOM(ModelConfig::from_checkpoint_metadata({{"model.head_bias", "yes"}}, "run/ckpt"),
                        "has no 'model.vocab' entry");
  // A checkpoint from before these fields holds today's default model: it loads as one, every other field still
  // required.
  const ModelConfig before = mixed_seq2seq_config();
  StringMap old_meta = before.to_metadata();
  for (const char* key : {"model.norm_kind", "model.mlp", "model.mlp_bias", "model.head_bias"}) old_meta.erase(key);
  CHECK(ModelConfig::from_checkpoint_metadata(old_meta, "run/ckpt") == before);
  old_meta.erase("model.ffn_hidden");
  CHECK_THROWS_HEADROOM(ModelConfig::from_checkpoint_metadata(old_meta, "run/ckpt"),
                        "[metadata] run/ckpt has no 'model.ffn_hidden' entry");
}

TEST_CASE("a LLaMA-style DecoderLM (MoH layers too) trains, saves and rebuilds from its checkpoint's metadata alone") {
  Generator gen(7);
  ModelConfig c = testing::tiny_llama_config(12);
  c.dim = 16;
  c.heads = 4;
  c.head_bias = true;
  // Another type starts from its defaults: rope carries over, bias and kv_heads are named again.
  c.attention.layers[1] = {"moh", {{"routed_k", "2"}, {"bias", "false"}, {"kv_heads", "1"}}};
  DecoderLM model(c, gen);
  CHECK(kinds(*model.decoder) == std::vector<std::string>{"mha", "moh"});
  Tensor tokens = testing::token_rows({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 0}, 2);
  AdamW opt(model.parameters(), 1e-2);
  for (int step = 0; step < 3; ++step) {  // trained weights, RMSNorm gains away from 1
    opt.zero_grad();
    cross_entropy(model.forward(tokens.narrow(1, 0, 5)).out.reshape({-1, c.vocab}),
                  tokens.narrow(1, 1, 5).reshape({-1}))
        .backward();
    opt.step();
  }
  check_rebuilds_from_metadata(model, tokens, "headroom_llama_lm.safetensors");
}

TEST_CASE("metadata_int and metadata_uint64 read whole integers in range and name the key and the file") {
  const StringMap meta = {{"step", "12"}, {"offset", "18446744073709551615"}, {"fraction", "12.5"}, {"minus", "-1"}};
  CHECK(metadata_int(meta, "step", "f", 0, 100) == 12);
  CHECK(metadata_uint64(meta, "offset", "f") == 18446744073709551615ull);
  CHECK_THROWS_HEADROOM(metadata_int(meta, "step", "f", 0, 4),
                        "[metadata] f: step = '12' is not an integer from 0 to 4");
  CHECK_THROWS_HEADROOM(metadata_int(meta, "fraction", "f", 0, 100), "fraction = '12.5' is not an integer");
  CHECK_THROWS_HEADROOM(metadata_uint64(meta, "minus", "f"), "minus = '-1' is not an integer from 0 to");
  CHECK_THROWS_HEADROOM(metadata_int(meta, "absent", "f", 0, 1), "[metadata] f has no 'absent' entry");
}

TEST_CASE("a mixed-method EncoderDecoder trains, saves and rebuilds from its checkpoint's metadata alone") {
  Generator gen(5);
  ModelConfig c = mixed_seq2seq_config();
  EncoderDecoder model(c, gen);
  CHECK(kinds(*model.encoder) == std::vector<std::string>{"moa", "moa"});
  CHECK(kinds(*model.decoder) == std::vector<std::string>{"mha/mha", "moh/mha"});
  auto cross1 = std::dynamic_pointer_cast<MultiHeadAttention>(model.decoder->block(1)->cross_attn);
  CHECK(cross1->config.kv_heads == 1);
  auto [first, last] = train_steps(model, 30);
  CHECK(last < first);

  const std::string text = model.describe(5, 4);
  CHECK(text.find("encoder.blocks.1.self_attn: moa: top-2 of 4 experts of width 8") != std::string::npos);
  CHECK(text.find("decoder.blocks.0.self_attn: mha: 4 heads of width 4") != std::string::npos);
  CHECK(text.find("decoder.blocks.1.self_attn: moh: 2 shared + top-2 of 2 routed") == std::string::npos);
  CHECK(text.find("decoder.blocks.1.self_attn: moh: 1 shared + top-2 of 3 routed heads (3 of 4 active)") !=
        std::string::npos);
  CHECK(text.find("decoder.blocks.1.cross_attn: mha: 4 heads of width 4, 1 KV heads") != std::string::npos);
  const int64_t moh_macs = model.decoder->block(1)->self_attn->macs(4, 4, true);
  CHECK(text.find(std::to_string(moh_macs) + " forward MACs") != std::string::npos);

  const std::string path = temp_path("headroom_mixed_seq2seq.safetensors");
  save_module(model, path, model.config.to_metadata());
  ModelConfig restored_config = ModelConfig::from_metadata(load_safetensors(path).metadata);
  CHECK(restored_config == c);
  EncoderDecoder restored(restored_config);
  load_module(restored, path);  // strict: every layer has the parameters of the saved one
  std::filesystem::remove(path);
  model.eval(), restored.eval();
  CHECK_CLOSE(seq2seq_logits(restored), seq2seq_logits(model), 0, 0);
}

TEST_CASE(
    "RoPE rotates self-attention only: cross-attention layers are built without it, and asking for it is refused") {
  ModelConfig c = small_config();
  c.encoder_layers = 1, c.decoder_layers = 1;
  c.attention = {"moh", {{"rope", "true"}, {"routed_k", "2"}}};
  EncoderDecoder model(c);
  const TransformerBlock& block = *model.decoder->block(0);
  CHECK(attention_choice(*block.self_attn).options.at("rope") == "true");
  CHECK(attention_choice(*block.cross_attn).options.at("rope") == "false");
  // The cross layer's MACs count the queries of its active heads only, as its forward computes them.
  ModelConfig unrotated = c;
  unrotated.attention.options.erase("rope");
  EncoderDecoder plain(unrotated);
  CHECK(block.cross_attn->macs(6, 5, false) == plain.decoder->block(0)->cross_attn->macs(6, 5, false));
  c.attention.roles[AttentionRole::cross] = {"", {{"rope", "true"}}};
  CHECK_THROWS_HEADROOM(EncoderDecoder{c}, "layer 0 cross: rope=true asked for cross-attention, which is not rotated");
}

TEST_CASE("a mixed-method DecoderLM trains, saves and rebuilds from its checkpoint's metadata alone") {
  Generator gen(6);
  ModelConfig c = small_config();
  c.attention = {"moh", {{"routed_k", "2"}}};
  c.attention.layers[0] = {"mha", {}};  // a dense first layer
  DecoderLM model(c, gen);
  CHECK(kinds(*model.decoder) == std::vector<std::string>{"mha", "moh"});
  Tensor tokens = testing::token_rows({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 0}, 2);
  Tensor input = tokens.narrow(1, 0, 5), labels = tokens.narrow(1, 1, 5).reshape({-1});
  AdamW opt(model.parameters(), 1e-2);
  double first = 0, last = 0;
  for (int step = 0; step < 30; ++step) {
    opt.zero_grad();
    ModelOutput out = model.forward(input);
    REQUIRE(out.aux_losses.size() == 1);  // the MoH layer's, labelled with its path
    CHECK(out.aux_losses[0].layer == "decoder.blocks.1.self_attn");
    Tensor loss = training_loss(cross_entropy(out.out.reshape({-1, c.vocab}), labels), out.aux_losses, 10);
    loss.backward();
    opt.step();
    (step == 0 ? first : last) = loss.item();
  }
  CHECK(last < first);
  check_rebuilds_from_metadata(model, tokens, "headroom_mixed_lm.safetensors");
}

TEST_CASE("a custom factory's layers are recorded in the config: describe, loss and checkpoint follow them") {
  // A dense first layer and MoH after it, made by hand: the config still says "mha".
  ModelConfig c = small_config();
  auto factory_for = [&](Generator& gen) -> AttentionFactory {
    return [&gen](int64_t layer, AttentionRole role) -> std::shared_ptr<Attention> {
      MHAConfig mha{16, 4};
      if (layer == 0 || role != AttentionRole::decoder_self) return std::make_shared<MultiHeadAttention>(mha, gen);
      MoHConfig moh;
      moh.mha = mha, moh.routed_k = 2;
      return std::make_shared<MoHAttention>(moh, gen);
    };
  };
  Generator gen_a(7), gen_b(7);
  DecoderLM by_hand(c, gen_a, factory_for(gen_a));
  CHECK(kinds(*by_hand.decoder) == std::vector<std::string>{"mha", "moh"});
  CHECK(by_hand.config.attention.resolve(1, AttentionRole::decoder_self).type == "moh");
  CHECK(by_hand.describe(6).find("decoder.blocks.1.self_attn: moh") != std::string::npos);

  // The recorded config builds the same model with the default factory, from the same seed.
  DecoderLM by_config(by_hand.config, gen_b);
  CHECK_CLOSE(by_config.state_dict()[0].second, by_hand.state_dict()[0].second, 0, 0);
  Tensor tokens = testing::token_rows({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 0}, 2);
  ModelOutput a = by_hand.forward(tokens), b = by_config.forward(tokens);
  REQUIRE(a.aux_losses.size() == 1);  // the MoH layer's, not dropped
  Tensor loss_a = training_loss(cross_entropy(a.out, tokens), a.aux_losses, 12);
  Tensor loss_b = training_loss(cross_entropy(b.out, tokens), b.aux_losses, 12);
  CHECK(loss_a.item() == loss_b.item());

  check_rebuilds_from_metadata(by_hand, tokens, "headroom_custom_factory.safetensors");
}

TEST_CASE("each layer's aux loss is counted once, weighted by its method: the model's loss against a hand sum") {
  Generator gen(9);
  ModelConfig c = mixed_seq2seq_config();
  c.attention.at.clear();  // two MoH decoder layers, so MoH's mean is over 2
  EncoderDecoder model(c, gen);
  auto moh_layers = collect_modules<MoHAttention>(model);
  auto moa_layers = collect_modules<MoAAttention>(model);
  REQUIRE(moh_layers.size() == 2);
  REQUIRE(moa_layers.size() == 2);
  auto total_loss = [&] {
    ModelOutput enc = model.encode(source_batch());
    ModelOutput dec = model.decode(target_batch(), enc.out);
    std::vector<AuxLoss> aux = enc.aux_losses;
    aux.insert(aux.end(), dec.aux_losses.begin(), dec.aux_losses.end());
    return std::make_pair(training_loss(Tensor::scalar(2.0), aux, 8).item(), aux);
  };
  auto [model_loss, weighted] = total_loss();
  REQUIRE(weighted.size() == 4);  // 2 MoA + 2 MoH; MHA cross-attention has none
  std::vector<std::string> labels;
  for (const AuxLoss& aux : weighted) labels.push_back(aux.layer);
  CHECK(labels == std::vector<std::string>{"encoder.blocks.0.self_attn", "encoder.blocks.1.self_attn",
                                           "decoder.blocks.0.self_attn", "decoder.blocks.1.self_attn"});

  // The same forward with each MoH layer made to return its raw L_b.
  for (auto& moh : moh_layers) moh->moh_config.beta = 1, moh->set_aux_peers(1);
  auto [unused, raw] = total_loss();
  REQUIRE(raw.size() == 4);
  // MoA (reference normalisation): its terms summed, per target token; MoH: 0.01 · their mean.
  const double hand =
      2.0 + (raw[0].value.item() + raw[1].value.item()) / 8 + 0.01 * (raw[2].value.item() + raw[3].value.item()) / 2;
  CHECK(raw[0].joins_summed_loss);
  CHECK_FALSE(raw[2].joins_summed_loss);
  CHECK(model_loss == doctest::Approx(hand).epsilon(1e-6));
}

TEST_CASE("a hand-built model shares MoH's aux weighting through share_aux_losses") {
  struct TwoLayers : Module {
    std::shared_ptr<MoHAttention> a, b;
    explicit TwoLayers(Generator& gen) {
      MoHConfig c;
      c.mha = {16, 4};
      a = register_module("a", std::make_shared<MoHAttention>(c, gen));
      b = register_module("b", std::make_shared<MoHAttention>(c, gen));
    }
  };
  Generator gen(3);
  TwoLayers model(gen);
  Tensor x = Tensor::randn({2, 5, 16}, gen);
  const double alone = model.a->forward({x}).aux.value.item();  // beta · L_b: one layer
  share_aux_losses(model);
  CHECK(model.a->forward({x}).aux.value.item() == doctest::Approx(alone / 2));
}

TEST_CASE("one set of MoH and MoA defaults: struct and factory agree, they route, full routing needs an opt-in") {
  for (int64_t heads : {4, 8, 16}) {
    CAPTURE(heads);
    MoHConfig moh;
    moh.mha = {4 * heads, heads};
    MoHAttention from_struct(moh);
    ModelConfig c = small_config();
    c.dim = 4 * heads, c.heads = heads, c.attention.type = "moh";
    auto from_factory = std::dynamic_pointer_cast<MoHAttention>(make_attention(c, 0, AttentionRole::decoder_self));
    REQUIRE(from_factory);
    CHECK(from_factory->moh_config.shared_heads == from_struct.moh_config.shared_heads);
    CHECK(from_factory->moh_config.routed_k == from_struct.moh_config.routed_k);
    CHECK(from_struct.moh_config.shared_heads == heads / 4);
    CHECK(2 * from_struct.active_heads() == heads);  // half the heads per token
    c.attention.type = "moa";
    auto moa = std::dynamic_pointer_cast<MoAAttention>(make_attention(c, 0, AttentionRole::decoder_self));
    REQUIRE(moa);
    CHECK(moa->config.num_experts == MoAConfig{}.num_experts);
    CHECK(moa->config.k == MoAConfig{}.k);
    CHECK(moa->config.k < moa->config.num_experts);
  }
  ModelConfig two_heads = small_config();
  two_heads.heads = 2, two_heads.attention.type = "moh";  // 1 shared + 1 of 1 routed: every head
  CHECK_THROWS_HEADROOM(make_attention(two_heads, 0, AttentionRole::decoder_self),
                        "1 + 1 = heads: every head is active for every token");
  two_heads.attention.options["allow_full_routing"] = "true";
  CHECK(make_attention(two_heads, 0, AttentionRole::decoder_self)->kind() == "moh");
  ModelConfig all_experts = small_config();
  all_experts.attention = {"moa", {{"experts", "2"}, {"k", "2"}}};
  CHECK_THROWS_HEADROOM(make_attention(all_experts, 0, AttentionRole::encoder_self),
                        "k = num_experts = 2: every expert runs for every token");
}

TEST_CASE("attention_choice gives every option of a built layer; make_attention rebuilds it") {
  ModelConfig c = small_config();
  for (const AttentionSpec& spec : {AttentionSpec{"mha", {{"kv_heads", "2"}, {"bias", "false"}}},
                                    AttentionSpec{"moh", {{"routed_k", "2"}, {"router", "qnorm"}}},
                                    AttentionSpec{"moa", {{"experts", "6"}, {"aux_normalisation", "mean"}}},
                                    AttentionSpec{"mae", {{"gate_activation", "tanh"}}}}) {
    CAPTURE(spec.type);
    c.attention = spec;
    auto layer = make_attention(c, 0, AttentionRole::decoder_self);
    AttentionChoice choice = attention_choice(*layer);
    CHECK(choice.type == spec.type);
    for (const auto& [key, value] : spec.options) CHECK(choice.options.at(key) == value);
    c.attention = AttentionSpec{choice.type, choice.options};
    CHECK(attention_choice(*make_attention(c, 0, AttentionRole::decoder_self)) == choice);
  }
}

TEST_CASE("TransformerBlock from a BlockConfig; errors name the missing field") {
  Generator gen(1);
  auto attention = std::make_shared<MultiHeadAttention>(MHAConfig{8, 2}, gen);
  BlockConfig b;
  CHECK_THROWS_HEADROOM(TransformerBlock(b, attention), "BlockConfig.dim must be positive (the model width d), got 0");
  b.dim = 8;
  CHECK_THROWS_HEADROOM(TransformerBlock(b, attention), "BlockConfig.ffn_hidden must be positive");
  b.ffn_hidden = 16, b.dropout = 1;
  CHECK_THROWS_HEADROOM(TransformerBlock(b, attention), "BlockConfig.dropout must be in [0, 1)");
  b.dropout = 0, b.causal = true;
  TransformerBlock block(b, attention, nullptr, gen);
  Tensor x = Tensor::randn({1, 3, 8}, gen);
  Tensor full = block.forward(BlockInput(x)).out;
  Tensor prefix = block.forward(BlockInput(x.narrow(1, 0, 2))).out;
  CHECK_CLOSE(full.narrow(1, 0, 2), prefix, 1e-6, 1e-6);  // causal: later tokens do not reach earlier ones
  CHECK(ModelConfig{}.block(AttentionRole::decoder_self).causal);
}

TEST_CASE("RoPE models: a dense checkpoint converts to qnorm MoH (every head active: the same logits)") {
  Generator gen(11);
  ModelConfig dense_config = small_config();
  dense_config.positions = PositionKind::none;
  dense_config.attention = {"mha", {{"rope", "true"}, {"head_dim", "6"}}};
  DecoderLM dense(dense_config, gen);
  const std::string path = temp_path("headroom_rope_dense.safetensors");
  save_module(dense, path);
  ModelConfig moh_config = dense_config;
  moh_config.attention = {"moh",
                          {{"rope", "true"},
                           {"head_dim", "6"},
                           {"router", "qnorm"},
                           {"shared_heads", "1"},
                           {"routed_k", "3"},
                           {"allow_full_routing", "true"}}};
  DecoderLM converted(moh_config, gen);
  load_module(converted, path);  // strict: qnorm adds no parameters
  std::filesystem::remove(path);
  Tensor tokens = testing::token_rows({1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 2);
  NoGradGuard no_grad;
  CHECK_CLOSE(converted.forward(tokens).out, dense.forward(tokens).out, 1e-5, 1e-5);
  auto layer = std::dynamic_pointer_cast<MultiHeadAttention>(converted.decoder->block(0)->self_attn);
  REQUIRE(layer);
  CHECK(layer->head_dim == 6);
  CHECK(layer->config.rope);
}
