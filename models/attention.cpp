#include "headroom/models/attention.h"

#include <map>
#include <mutex>

#include "headroom/core/grad_mode.h"
#include "headroom/ops/elementwise.h"
#include "headroom/ops/reduce.h"
#include "headroom/ops/routing.h"
#include "headroom/ops/shape.h"

namespace headroom {

void share_aux_losses(Module& model) {
  std::map<std::string, int64_t> layers_of_kind;
  auto layers = collect_modules<Attention>(model);
  for (const auto& layer : layers)
    if (layer->has_aux_loss()) ++layers_of_kind[layer->kind()];
  for (const auto& layer : layers)
    if (layer->has_aux_loss()) layer->set_aux_peers(layers_of_kind[layer->kind()]);
}

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

Tensor repeat_kv(const Tensor& kv, int64_t heads) {
  const int64_t kv_heads = kv.size(1);
  if (kv_heads == heads || kv_heads == 1) return kv;
  const Shape& s = kv.shape();
  return kv.unsqueeze(2).expand({s[0], kv_heads, heads / kv_heads, s[2], s[3]}).reshape({s[0], heads, s[2], s[3]});
}

Tensor index_range(int64_t n, Device device) {
  if (device.is_cpu()) return Tensor::arange(0, double(n), 1, DType::i32);
  static std::mutex mutex;
  // Never destroyed: device memory must not be freed after the allocator's own teardown at exit.
  static auto* ranges = new std::map<int, Tensor>();
  std::lock_guard<std::mutex> lock(mutex);
  Tensor& range = (*ranges)[device.index];
  if (!range.defined() || range.size(0) < n) {
    const int64_t length = std::max<int64_t>(n, range.defined() ? 2 * range.size(0) : 0);
    range = Tensor::arange(0, double(length), 1, DType::i32).to(device);
  }
  return range.narrow(0, 0, n);
}

Tensor k_hot(const Tensor& indices, int64_t n, DType dtype) {
  NoGradGuard no_grad;
  return put_along_rows(Tensor::ones(indices.shape(), dtype, indices.device()), indices, n);
}

Tensor flat_indices(const Tensor& indices, int64_t n) {
  NoGradGuard no_grad;
  // In f64, which holds these integers exactly (the elementwise ops take floating dtypes).
  const int64_t rows = indices.size(0);
  Tensor row_starts = index_range(rows, indices.device()).to(DType::f64).unsqueeze(1) * double(n);  // [N, 1]
  return (row_starts + indices.to(DType::f64)).to(DType::i32).reshape({-1});
}

int64_t attended_pairs(int64_t T, int64_t S, bool causal) {
  if (!causal) return T * S;
  // Query t (0-based among the last T of S positions) sees S - T + t + 1 keys.
  int64_t pairs = 0;
  for (int64_t t = 0; t < T; ++t) pairs += std::min<int64_t>(S, S - T + t + 1);
  return pairs;
}

}  // namespace headroom
