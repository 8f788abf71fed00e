#pragma once
// Shared by the model, decoding and trainer tests: a tiny model config and
// token batches.
#include <vector>

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

}  // namespace headroom::testing
