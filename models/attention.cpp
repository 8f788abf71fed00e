#include "headroom/models/attention.h"

#include "headroom/ops/shape.h"

namespace headroom {

KeysValues keys_values(const AttentionInput& in, const ProjectKeysValues& project) {
  const bool cross = in.memory.defined();
  AttentionCache* cache = in.cache;
  if (cache && cross && cache->k.defined()) return {cache->k, cache->v, 0};
  auto [k, v] = project(cross ? in.memory : in.x);  // [B, h_kv, S_new, d_h]
  int64_t past = 0;
  if (cache) {
    if (!cross && cache->k.defined()) {
      HEADROOM_CHECK(cache->k.size(0) == k.size(0) && cache->k.size(1) == k.size(1) &&
                         cache->k.size(3) == k.size(3),
                     "[attention] cache holds keys of shape ", shape_str(cache->k.shape()),
                     " but the new keys have shape ", shape_str(k.shape()));
      past = cache->length();
      k = cat({cache->k, k}, 2);
      v = cat({cache->v, v}, 2);
    }
    cache->k = k;
    cache->v = v;
  }
  return {k, v, past};
}

AttentionOptions attention_options(const AttentionInput& in, const KeysValues& kv, double dropout,
                                   bool training) {
  AttentionOptions opts;
  opts.causal = in.causal && !in.memory.defined();
  opts.causal_offset = kv.past;
  opts.key_padding_mask = in.key_padding;
  opts.dropout = training ? dropout : 0;
  return opts;
}

Tensor split_heads(const Tensor& x, int64_t heads) {
  HEADROOM_CHECK(x.dim() == 3 && x.size(2) % heads == 0, "[split_heads] expected [B, T, h * d_h] with h = ",
                 heads, ", got shape ", shape_str(x.shape()));
  return x.reshape({x.size(0), x.size(1), heads, x.size(2) / heads}).permute({0, 2, 1, 3});
}

Tensor merge_heads(const Tensor& x) {
  HEADROOM_CHECK(x.dim() == 4, "[merge_heads] expected [B, h, T, d_h], got shape ", shape_str(x.shape()));
  return x.permute({0, 2, 1, 3}).reshape({x.size(0), x.size(2), x.size(1) * x.size(3)});
}

int64_t attended_pairs(int64_t T, int64_t S, bool causal) {
  if (!causal) return T * S;
  // Query t (0-based among the last T of S positions) sees S - T + t + 1 keys.
  int64_t pairs = 0;
  for (int64_t t = 0; t < T; ++t) pairs += std::min<int64_t>(S, S - T + t + 1);
  return pairs;
}

}  // namespace headroom
