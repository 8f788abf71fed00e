#pragma once
// Shared by the model, decoding, trainer and MPI tests: a tiny model config,
// token batches and the optimizer of a model of any attention type.
#include <memory>
#include <vector>

#include "headroom/models/bcd.h"
#include "headroom/models/optim.h"
#include "headroom/models/transformer.h"

namespace headroom::testing {

// d 8, 2 heads, 2 + 2 layers, FFN 16 (GELU), pre-LN, sinusoidal positions, MHA.
inline ModelConfig tiny_model_config(int64_t vocab) {
  ModelConfig c;
  c.vocab = vocab;
  c.dim = 8;
  c.heads = 2;
  c.encoder_layers = 2;
  c.decoder_layers = 2;
  c.ffn_hidden = 16;
  c.activation = Activation::gelu;
  return c;
}

// tiny_model_config with LLaMA's architecture: RMSNorm, a SwiGLU MLP of width
// 12, no biases in the attention or the MLP, no position embedding but RoPE,
// one K/V head for the 2 query heads, an untied head without bias.
inline ModelConfig tiny_llama_config(int64_t vocab) {
  ModelConfig c = tiny_model_config(vocab);
  c.ffn_hidden = 12;
  c.activation = Activation::silu;
  c.norm_kind = NormKind::rmsnorm;
  c.mlp = MlpKind::gated;
  c.mlp_bias = false;
  c.positions = PositionKind::none;
  c.attention = {"mha", {{"bias", "false"}, {"rope", "true"}, {"kv_heads", "1"}}};
  return c;
}

// ids in row-major order -> i32 [B, ids.size() / B]
inline Tensor token_rows(const std::vector<int32_t>& ids, int64_t B) {
  return Tensor::from_vector(ids, {B, int64_t(ids.size()) / B});
}

// The training tasks' batch of `step`: two rows of 7 tokens counting mod 8
// from starts drawn from (seed, step).  i32 [2, 7] on the CPU.
inline Tensor counting_rows(uint64_t seed, int64_t step) {
  Generator data(seed + 1000003 * uint64_t(step + 1));
  std::vector<int32_t> ids;
  for (int row = 0; row < 2; ++row) {
    int64_t start = data.next_int(8);
    for (int t = 0; t < 7; ++t) ids.push_back(int32_t((start + t) % 8));
  }
  return token_rows(ids, 2);
}

// Trains a model with MAE layers by block coordinate descent (`bcd`'s F and
// G blocks, both at `lr`), any other by AdamW (β 0.9 and 0.98, ε 1e-9).
class ModelOptimizer {
 public:
  ModelOptimizer(Module& model, double lr, BCDOptions bcd, double weight_decay) {
    auto mae_layers = collect_modules<MAEAttention>(model);
    if (!mae_layers.empty()) bcd_ = std::make_unique<BlockCoordinateDescent>(model, mae_layers, lr, lr, bcd);
    else adamw_ = std::make_unique<AdamW>(model.parameters(), lr, 0.9, 0.98, 1e-9, weight_decay);
  }
  void begin(int64_t step) {  // before the forward pass
    if (bcd_) bcd_->begin_step(step);
    else adamw_->zero_grad();
  }
  void finish() {  // after backward (and any gradient averaging and clipping)
    if (bcd_) bcd_->finish_step();
    else adamw_->step();
  }

 private:
  std::unique_ptr<BlockCoordinateDescent> bcd_;
  std::unique_ptr<AdamW> adamw_;
};

}  // namespace headroom::testing
