#include "headroom/models/mha.h"

#include <string>

#include "headroom/ops/elementwise.h"

namespace headroom {

MultiHeadAttention::MultiHeadAttention(const MHAConfig& cfg, Generator& gen) : config(cfg), generator_(&gen) {
  if (config.kv_heads == 0) config.kv_heads = config.heads;
  HEADROOM_CHECK(config.heads > 0 && config.head_dim >= 0, "[MultiHeadAttention] heads (", config.heads,
                 ") must be positive and head_dim (", config.head_dim, ") >= 0");
  HEADROOM_CHECK(config.head_dim > 0 || config.dim % config.heads == 0, "[MultiHeadAttention] dim ", config.dim,
                 " must be a positive multiple of heads ", config.heads, " when head_dim = 0 (d / h)");
  HEADROOM_CHECK(config.kv_heads > 0 && config.heads % config.kv_heads == 0, "[MultiHeadAttention] kv_heads ",
                 config.kv_heads, " must divide heads ", config.heads);
  if (config.head_dim == 0) config.head_dim = config.dim / config.heads;
  head_dim = config.head_dim;
  HEADROOM_CHECK(config.dim > 0 && head_dim > 0, "[MultiHeadAttention] dim (", config.dim, ") and head_dim (", head_dim,
                 ") must be positive");
  check_rope("MultiHeadAttention", rope(), head_dim);
  const int64_t width = config.heads * head_dim, kv_width = config.kv_heads * head_dim;
  q_proj = register_module("q_proj", std::make_shared<Linear>(config.dim, width, config.bias, gen));
  k_proj = register_module("k_proj", std::make_shared<Linear>(config.dim, kv_width, config.bias, gen));
  v_proj = register_module("v_proj", std::make_shared<Linear>(config.dim, kv_width, config.bias, gen));
  o_proj = register_module("o_proj", std::make_shared<Linear>(width, config.dim, config.bias, gen));
}

Tensor MultiHeadAttention::queries(const Tensor& x) const {
  HEADROOM_CHECK(x.dim() == 3 && x.size(2) == config.dim, "[MultiHeadAttention] expected x of shape [B, T, ",
                 config.dim, "], got ", shape_str(x.shape()));
  return split_heads(q_proj->forward(x), config.heads);
}

KeysValues MultiHeadAttention::keys_values(const AttentionInput& in) const {
  return headroom::keys_values(
      in,
      [this](const Tensor& source) {
        return std::make_pair(split_heads(k_proj->forward(source), config.kv_heads),
                              split_heads(v_proj->forward(source), config.kv_heads));
      },
      rope());
}

Tensor MultiHeadAttention::head_outputs(const AttentionInput& in) {
  Tensor q = queries(in.x);  // checks x
  KeysValues kv = keys_values(in);
  q = rotate_queries(in, kv, q, rope());
  AttentionOptions opts = attention_options(in, kv, config.attn_dropout, is_training(), *generator_);
  return attention(q, repeat_kv(kv.k, config.heads), repeat_kv(kv.v, config.heads), opts);
}

Tensor MultiHeadAttention::project_out(const Tensor& heads, const Tensor& head_weights) const {
  Tensor weighted = heads;
  if (head_weights.defined()) weighted = heads * head_weights.permute({0, 2, 1}).unsqueeze(-1);  // [B, h, T, 1]
  return o_proj->forward(merge_heads(weighted));
}

AttentionOutput MultiHeadAttention::forward(const AttentionInput& in) {
  AttentionOutput result;
  result.out = project_out(head_outputs(in), Tensor());
  return result;
}

int64_t MultiHeadAttention::macs(int64_t T, int64_t S, bool causal) const {
  const int64_t d = config.dim, width = config.heads * head_dim, kv_width = config.kv_heads * head_dim;
  const int64_t projections = 2 * T * d * width + 2 * S * d * kv_width;             // q, o and k, v
  const int64_t core = 2 * attended_pairs(T, S, causal) * head_dim * config.heads;  // q·kᵀ and p·v
  return projections + core;
}

std::string MultiHeadAttention::summary() const {
  std::string s = kind() + ": " + std::to_string(config.heads) + " heads of width " + std::to_string(head_dim);
  if (config.kv_heads != config.heads) s += ", " + std::to_string(config.kv_heads) + " KV heads";
  return s;
}

}  // namespace headroom
