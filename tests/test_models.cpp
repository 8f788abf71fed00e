// Every attention type (mha, moa, moh, mae) through the whole models, chosen by
// one config switch: built by make_attention with its options, cached decoding
// equal to the full forward, and learning a synthetic task in a DecoderLM
// (copy; a LLaMA-style one too), an EncoderDecoder (reversal) and a ViT
// (bright quadrant) within a fixed number of seeded steps on one core (MAE
// trained by block coordinate descent).
#include <chrono>
#include <filesystem>

#include "helpers.h"
#include "transformer_helpers.h"

using namespace headroom;

namespace {

const char* const kTypes[] = {"mha", "moa", "moh", "mae"};

ModelConfig model_config(const std::string& type) {
  ModelConfig c = testing::tiny_model_config(10);
  c.dim = 32, c.heads = 4, c.ffn_hidden = 64;
  c.attention.type = type;
  if (type == "moa") c.attention.options = {{"experts", "4"}, {"k", "2"}, {"head_dim", "16"}};
  if (type == "moh") c.attention.options = {{"shared_heads", "2"}, {"routed_k", "1"}};
  return c;
}

std::vector<std::vector<int32_t>> random_sequences(int64_t count, int64_t L, int64_t n, Generator& gen) {
  std::vector<std::vector<int32_t>> out(count, std::vector<int32_t>(L));
  for (auto& seq : out)
    for (auto& s : seq) s = int32_t(1 + gen.next_int(n));
  return out;
}

Tensor rows(const std::vector<std::vector<int32_t>>& seqs) {
  std::vector<int32_t> flat;
  for (const auto& r : seqs) flat.insert(flat.end(), r.begin(), r.end());
  return testing::token_rows(flat, int64_t(seqs.size()));
}

// Trains `model` for `steps` on fresh batches; `batch` returns the task loss
// and fills the layers' aux losses.  MAE layers are trained by block
// coordinate descent (F and G blocks), the others by AdamW.  Returns the last
// task loss and the wall time.
struct Learned {
  double loss = 0, seconds = 0;
};

template <typename Batch> Learned train(Module& model, const ModelConfig& c, int steps, Batch&& batch) {
  const auto start = std::chrono::steady_clock::now();
  const int threads = num_threads();
  set_num_threads(1);  // the time limit is for one core
  testing::ModelOptimizer opt(model, 3e-3, BCDOptions{0, 20, 10}, 0);
  double last = 0;
  for (int step = 0; step < steps; ++step) {
    opt.begin(step);
    std::vector<AuxLoss> aux;
    int64_t targets = 0;
    Tensor task = batch(aux, targets);
    training_loss(task, aux, targets).backward();
    opt.finish();
    last = task.item();
  }
  set_num_threads(threads);
  return {last, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()};
}

// Each learning check: below `threshold` within the steps, in under 30 s on one core.
void expect_learned(const std::string& what, const Learned& r, double threshold) {
  MESSAGE(what, ": loss ", r.loss, " in ", r.seconds, " s");
  CHECK(r.loss < threshold);  // the time is reported, not asserted: a loaded CI machine varies it
}

}  // namespace

TEST_CASE("make_attention builds each type from the config, and rejects bad options") {
  for (const std::string type : kTypes) {
    ModelConfig c = model_config(type);
    auto layer = make_attention(c, 0, AttentionRole::decoder_self);
    CHECK(layer->kind() == type);
  }
  ModelConfig c = model_config("moh");
  c.attention.options["scaling"] = "papr";
  CHECK_THROWS_HEADROOM(make_attention(c, 0, AttentionRole::decoder_self), "scaling='papr' is not one of: code, paper");
  c = model_config("moa");
  c.attention.options["experts_typo"] = "3";
  CHECK_THROWS_HEADROOM(make_attention(c, 0, AttentionRole::decoder_self), "experts_typo");
  c.attention.type = "switchhead";
  CHECK_THROWS_HEADROOM(make_attention(c, 0, AttentionRole::decoder_self), "unknown attention type 'switchhead'");
  // MoH per-layer budgets: layer 1 all shared (K_r = 0), which routes nothing and must be allowed.
  c = model_config("moh");
  c.attention.layers[1] = {"", {{"shared_heads", "4"}, {"routed_k", "0"}}};
  CHECK_THROWS_HEADROOM(make_attention(c, 1, AttentionRole::decoder_self), "every head is active");
  c.attention.layers[1].options["allow_full_routing"] = "true";
  auto layer1 = std::dynamic_pointer_cast<MoHAttention>(make_attention(c, 1, AttentionRole::decoder_self));
  REQUIRE(layer1);
  CHECK(layer1->moh_config.routed_k == 0);
}

TEST_CASE("cached decoding equals the full forward for every attention type, with sinusoids or RoPE") {
  for (const std::string type : kTypes)
    for (bool rope : {false, true}) {
      CAPTURE(type);
      CAPTURE(rope);
      Generator gen(3);
      ModelConfig c = model_config(type);
      if (rope) c.positions = PositionKind::none, c.attention.options["rope"] = "true";
      EncoderDecoder model(c, gen);
      model.eval();
      NoGradGuard no_grad;
      Tensor src = testing::token_rows({1, 2, 3, 4, 5, 6, 7, 8}, 2);
      Tensor tgt = testing::token_rows({0, 4, 2, 9, 0, 3, 3, 1}, 2);
      Tensor memory = model.encode(src).out;
      Tensor full = model.decode(tgt, memory).out;  // [2, 4, V]
      DecoderCache cache;
      for (int64_t t = 0; t < 4; ++t) {
        Tensor step = model.decode(tgt.narrow(1, t, 1), memory, Tensor(), Tensor(), &cache).out;
        CHECK_CLOSE(step, full.narrow(1, t, 1), 1e-4, 1e-4);
      }
      CHECK(attention_choice(*model.decoder->block(1)->self_attn).options.at("rope") == (rope ? "true" : "false"));
    }
}

namespace {
// A DecoderLM of config c trained 300 steps to copy 5 tokens after a separator.
Learned learn_to_copy(const ModelConfig& c) {
  Generator gen(6);
  DecoderLM lm(c, gen);
  const int64_t L = 5, SEP = 0;
  return train(lm, c, 300, [&](std::vector<AuxLoss>& aux, int64_t& targets) {
    // [x1..x5, SEP, x1..x4] -> predict x1..x5 after the separator (first half ignored)
    std::vector<std::vector<int32_t>> seqs = random_sequences(32, L, 9, gen), inputs, labels;
    for (const auto& s : seqs) {
      std::vector<int32_t> in(s), tg(L, -100);
      in.push_back(SEP);
      in.insert(in.end(), s.begin(), s.end() - 1);
      tg.insert(tg.end(), s.begin(), s.end());
      inputs.push_back(in), labels.push_back(tg);
    }
    ModelOutput out = lm.forward(rows(inputs));
    aux = out.aux_losses;
    targets = 32 * L;
    return cross_entropy(out.out, rows(labels));
  });
}
}  // namespace

TEST_CASE("learning: every attention type in a DecoderLM learns to copy a sequence, and LLaMA's blocks too") {
  for (const std::string type : kTypes) {
    CAPTURE(type);
    expect_learned(type + " DecoderLM copy after 300 steps", learn_to_copy(model_config(type)), 0.1);
  }
  ModelConfig llama = testing::tiny_llama_config(10);  // RMSNorm, SwiGLU, no biases, RoPE
  llama.dim = 32;
  llama.heads = 4;
  llama.ffn_hidden = 86;  // LLaMA's 8/3 · d: the gated MLP's three matrices weigh as a plain one of 4d
  expect_learned("LLaMA-style DecoderLM copy after 300 steps", learn_to_copy(llama), 0.1);
}

TEST_CASE("learning: every attention type in an EncoderDecoder learns to reverse a sequence") {
  for (const std::string type : kTypes) {
    CAPTURE(type);
    Generator gen(7);
    ModelConfig c = model_config(type);
    c.encoder_layers = c.decoder_layers = 1;
    EncoderDecoder model(c, gen);
    const int64_t L = 5, BOS = 0;
    Learned learned = train(model, c, 300, [&](std::vector<AuxLoss>& aux, int64_t& targets) {
      std::vector<std::vector<int32_t>> src = random_sequences(32, L, 9, gen), tgt_in, tgt_out;
      for (const auto& s : src) {
        std::vector<int32_t> reversed(s.rbegin(), s.rend()), in{BOS};
        in.insert(in.end(), reversed.begin(), reversed.end() - 1);
        tgt_in.push_back(in), tgt_out.push_back(reversed);
      }
      ModelOutput encoded = model.encode(rows(src));
      ModelOutput decoded = model.decode(rows(tgt_in), encoded.out);
      aux = encoded.aux_losses;
      aux.insert(aux.end(), decoded.aux_losses.begin(), decoded.aux_losses.end());
      targets = 32 * L;
      return cross_entropy(decoded.out, rows(tgt_out));
    });
    expect_learned(type + " EncoderDecoder reversal after 300 steps", learned, 0.1);
  }
}

TEST_CASE("learning: every attention type in a ViT learns which quadrant is bright") {
  for (const std::string type : kTypes) {
    CAPTURE(type);
    Generator gen(9);
    ModelConfig c = model_config(type);
    c.image_size = 8, c.patch_size = 4, c.channels = 1, c.classes = 4, c.encoder_layers = 1;
    ViT vit(c, gen);
    // images [32, 1, 8, 8]: noise plus a bright 4x4 quadrant; label = the quadrant
    auto batch = [&](Tensor& labels) {
      Tensor images = Tensor::randn({32, 1, 8, 8}, gen) * 0.3;
      std::vector<int32_t> y(32);
      NoGradGuard no_grad;
      for (int64_t i = 0; i < 32; ++i) {
        y[i] = int32_t(gen.next_int(4));
        Tensor quadrant = images.select(0, i).narrow(1, 4 * (y[i] / 2), 4).narrow(2, 4 * (y[i] % 2), 4);
        quadrant.copy_(quadrant + 1.0);
      }
      labels = Tensor::from_vector(y);
      return images;
    };
    Learned learned = train(vit, c, 150, [&](std::vector<AuxLoss>& aux, int64_t& targets) {
      Tensor labels;
      Tensor images = batch(labels);
      ModelOutput out = vit.forward(images);
      aux = out.aux_losses;
      targets = 32;
      return cross_entropy(out.out, labels);
    });
    expect_learned(type + " ViT quadrants after 150 steps", learned, 0.2);
  }
}

TEST_CASE("MHA -> MoH conversion: a dense checkpoint loads into a qnorm-routed MoH model and keeps training") {
  // methods.md §3.6: same weights, first h_s heads shared, parameter-free
  // router (query norms), 0/1 gates with a straight-through estimator.  The
  // qnorm router adds no parameters, so the dense checkpoint loads strictly.
  Generator gen(21);
  ModelConfig dense_config = model_config("mha");
  DecoderLM dense(dense_config, gen);
  const std::string path = std::filesystem::temp_directory_path() / "headroom_mha_to_moh.safetensors";
  save_module(dense, path);

  ModelConfig all_heads = model_config("moh");
  all_heads.attention.options = {
      {"shared_heads", "2"}, {"routed_k", "2"}, {"router", "qnorm"}, {"allow_full_routing", "true"}};
  DecoderLM converted(all_heads, gen);
  load_module(converted, path);  // strict: the same names, no new parameters
  Tensor tokens = testing::token_rows({1, 2, 3, 4, 5, 6, 7, 8}, 2);
  {
    NoGradGuard no_grad;  // every head active: exactly the dense model
    CHECK_CLOSE(converted.forward(tokens).out, dense.forward(tokens).out, 1e-5);
  }

  ModelConfig sparse = model_config("moh");
  sparse.attention.options = {{"shared_heads", "2"}, {"routed_k", "1"}, {"router", "qnorm"}};
  DecoderLM moh(sparse, gen);
  load_module(moh, path);
  std::filesystem::remove(path);
  AdamW opt(moh.parameters(), 1e-3);
  ModelOutput out = moh.forward(tokens);
  REQUIRE(out.stats.size() == 2);
  CHECK(out.stats[0].indices.shape() == Shape{8, 1});  // one routed head of 2 per token
  Tensor before = moh.parameters()[1].detach().clone();
  training_loss(cross_entropy(out.out, tokens), out.aux_losses, 8).backward();
  opt.step();
  CHECK(testing::compare(moh.parameters()[1], before, 0) != "");  // it trains
}

TEST_CASE("MAE in an encoder-decoder: decoder self-attention gates on the source mean (methods.md §4.3 auto)") {
  Generator gen(31);
  ModelConfig c = model_config("mae");
  c.encoder_layers = c.decoder_layers = 1;
  EncoderDecoder model(c, gen);
  // A non-zero gate output layer, so responsibilities depend on their input.
  for (auto& layer : collect_modules<MAEAttention>(model)) {
    NoGradGuard g;
    layer->gate->fc2->weight.copy_(Tensor::randn(layer->gate->fc2->weight.shape(), gen));
  }
  Tensor src = testing::token_rows({1, 2, 3, 4, 5, 6, 7, 8}, 2);
  Tensor memory = model.encode(src).out;
  ModelOutput a = model.decode(testing::token_rows({0, 4, 2, 9, 0, 3, 3, 1}, 2), memory);
  ModelOutput b = model.decode(testing::token_rows({0, 7, 7, 7, 0, 1, 2, 3}, 2), memory);
  REQUIRE(a.stats.size() == 2);  // decoder self, cross
  // Self-attention's g: one per sequence (equal at every position), set by the
  // source alone (the same for other target tokens).
  std::vector<float> g = a.stats[0].gates.to_vector<float>();  // [B*T, h]
  for (int64_t t = 1; t < 4; ++t)
    for (int64_t j = 0; j < 4; ++j) CHECK(g[t * 4 + j] == g[j]);
  CHECK_CLOSE(a.stats[0].gates, b.stats[0].gates, 0);
}
