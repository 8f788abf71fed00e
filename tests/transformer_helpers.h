#pragma once
// Shared by test_transformer.cpp and test_decoding.cpp: a tiny model config
// and token batches from literals.
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

}  // namespace headroom::testing
