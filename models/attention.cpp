#include "headroom/models/attention.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>
#include <tuple>
#include <vector>

#include "headroom/core/grad_mode.h"
#include "headroom/ops/elementwise.h"
#include "headroom/ops/reduce.h"
#include "headroom/ops/routing.h"
#include "headroom/ops/shape.h"

namespace headroom {

namespace {
// Sets the path of every attention layer under `module`, whose own path is `prefix`.
void set_attention_paths(const Module& module, const std::string& prefix) {
  for (const auto& [name, child] : module.children()) {
    const std::string path = prefix.empty() ? name : prefix + "." + name;
    if (auto* layer = dynamic_cast<Attention*>(child.get())) layer->set_path(path);
    set_attention_paths(*child, path);
  }
}
}  // namespace

void share_aux_losses(Module& model) {
  std::map<std::string, int64_t> layers_of_kind;
  auto layers = collect_modules<Attention>(model);
  for (const auto& layer : layers)
    if (layer->has_aux_loss()) ++layers_of_kind[layer->kind()];
  for (const auto& layer : layers)
    if (layer->has_aux_loss()) layer->set_aux_peers(layers_of_kind[layer->kind()]);
  set_attention_paths(model, "");
}

std::vector<Tensor> Attention::sum_over_group(const std::vector<Tensor>& parts) const {
  if (!grouped()) return parts;
  Tensor packed;  // [Σ numel], f64 on the host: every part in one message
  {
    NoGradGuard no_grad;
    std::vector<Tensor> flat;
    for (const Tensor& part : parts)
      if (part.defined()) flat.push_back(part.detach().to(Device::cpu()).to(DType::f64).reshape({-1}));
    packed = cat(flat, 0).contiguous();
    statistics_group_->all_reduce(packed, ReduceOp::sum);
  }
  std::vector<Tensor> totals;
  int64_t offset = 0;
  for (const Tensor& part : parts) {
    if (!part.defined()) {
      totals.push_back(part);
      continue;
    }
    Tensor total = packed.narrow(0, offset, part.numel()).reshape(part.shape()).to(part.dtype()).to(part.device());
    offset += part.numel();
    totals.push_back(part.requires_grad() ? part + (total - part.detach()) : total);
  }
  return totals;
}

KeysValues keys_values(const AttentionInput& in, const ProjectKeysValues& project, const Rope& rope) {
  const bool cross = in.memory.defined();
  AttentionCache* cache = in.cache;
  if (cache && cross && cache->k.defined()) return {cache->k, cache->v, 0};
  auto [k, v] = project(cross ? in.memory : in.x);  // [B, h_kv, S_new, d_h]
  const int64_t past = cache && !cross ? cache->length() : 0;
  if (rope.applies_to(in)) k = rotary_embedding(k, past, rope.theta);
  if (!cache) return {k, v, past};
  if (cross) cache->k = k, cache->v = v;
  else cache->append(k, v);
  return {cache->k, cache->v, past};
}

void AttentionCache::append(const Tensor& k_new, const Tensor& v_new) {
  const int64_t past = length(), total = past + k_new.size(2);
  if (k.defined())
    HEADROOM_CHECK(k.size(0) == k_new.size(0) && k.size(1) == k_new.size(1) && k.size(3) == k_new.size(3) &&
                       k.dtype() == k_new.dtype() && k.device() == k_new.device(),
                   "[attention] cache holds keys of shape ", shape_str(k.shape()), " but the new keys have shape ",
                   shape_str(k_new.shape()));
  // Doubling: each position is copied O(1) times over a decode.
  if (total > capacity()) grow(k_new, std::max({total, 2 * capacity(), reserved_}));
  k_storage_.narrow(2, past, k_new.size(2)).copy_(k_new);
  v_storage_.narrow(2, past, v_new.size(2)).copy_(v_new);
  k = k_storage_.narrow(2, 0, total), v = v_storage_.narrow(2, 0, total);
}

void AttentionCache::reserve(int64_t positions) {
  HEADROOM_CHECK(positions >= 0, "[attention] a cache cannot reserve ", positions, " positions");
  reserved_ = std::max(reserved_, positions);
  if (k_storage_.defined() && positions > capacity()) grow(k_storage_, positions);
}

void AttentionCache::grow(const Tensor& like, int64_t positions) {
  Shape shape = like.shape();
  shape[2] = positions;
  Tensor k_grown = Tensor::empty(shape, like.dtype(), like.device());
  Tensor v_grown = Tensor::empty(shape, like.dtype(), like.device());
  const int64_t past = length();
  if (past > 0) k_grown.narrow(2, 0, past).copy_(k), v_grown.narrow(2, 0, past).copy_(v);
  k_storage_ = k_grown, v_storage_ = v_grown;
  if (past > 0) k = k_storage_.narrow(2, 0, past), v = v_storage_.narrow(2, 0, past);
}

void AttentionCache::reorder(const Tensor& rows) {
  auto select = [&](Tensor& t) {
    if (t.defined()) t = index_select(t, 0, rows.to(t.device()));
  };
  select(extra);
  if (!k_storage_.defined()) return select(k), select(v);  // cross-attention: whole tensors
  const int64_t kept = length();
  select(k_storage_), select(v_storage_);
  k = k_storage_.narrow(2, 0, kept), v = v_storage_.narrow(2, 0, kept);
}

AttentionOptions attention_options(const AttentionInput& in, const KeysValues& kv, double dropout, bool training,
                                   Generator& generator) {
  AttentionOptions opts;
  opts.causal = in.causal && !in.memory.defined();
  opts.causal_offset = kv.past;
  opts.key_padding_mask = in.key_padding;
  opts.dropout = training ? dropout : 0;
  opts.generator = &generator;
  return opts;
}

Tensor split_heads(const Tensor& x, int64_t heads) {
  HEADROOM_CHECK(x.dim() == 3 && x.size(2) % heads == 0, "[split_heads] expected [B, T, h * d_h] with h = ", heads,
                 ", got shape ", shape_str(x.shape()));
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

// ---- rotary position embedding ------------------------------------------------

namespace {

// cos and sin tables of positions 0 .. length-1, [length, d_h] each.  The
// sign of rotate_half is folded into `sin`: cat(−sin(angle), sin(angle)), so
// that out = x · cos + swap_halves(x) · sin.
struct RotaryTables {
  Tensor cos, sin;
};

RotaryTables build_rotary_tables(int64_t length, int64_t d_h, double theta, DType dtype, Device device) {
  const int64_t half = d_h / 2;
  std::vector<double> cos_table(length * d_h), sin_table(length * d_h);
  for (int64_t p = 0; p < length; ++p)
    for (int64_t i = 0; i < half; ++i) {
      const double angle = double(p) * std::pow(theta, -2.0 * double(i) / double(d_h));
      double* c = cos_table.data() + p * d_h;
      double* s = sin_table.data() + p * d_h;
      c[i] = c[half + i] = std::cos(angle);
      s[i] = -std::sin(angle);
      s[half + i] = std::sin(angle);
    }
  auto to_tensor = [&](const std::vector<double>& t) {
    return Tensor::from_vector(t, {length, d_h}).to(dtype).to(device);
  };
  return {to_tensor(cos_table), to_tensor(sin_table)};
}

// The tables of at least `length` positions, cached per (d_h, θ, dtype, device).
RotaryTables rotary_tables(int64_t length, int64_t d_h, double theta, DType dtype, Device device) {
  using Key = std::tuple<int64_t, double, int, int, int>;
  static std::mutex mutex;
  // Never destroyed: device memory must not be freed after the allocator's own teardown at exit.
  static auto* cache = new std::map<Key, RotaryTables>();
  std::lock_guard<std::mutex> lock(mutex);
  RotaryTables& tables = (*cache)[Key{d_h, theta, int(dtype), int(device.kind), device.index}];
  if (!tables.cos.defined() || tables.cos.size(0) < length) {
    const int64_t rows = std::max<int64_t>(length, tables.cos.defined() ? 2 * tables.cos.size(0) : 0);
    tables = build_rotary_tables(rows, d_h, theta, dtype, device);
  }
  return tables;
}

void check_rotary_input(const char* op, const Tensor& x, int64_t dims, double theta) {
  HEADROOM_CHECK(x.dim() == dims && x.size(-1) > 0 && x.size(-1) % 2 == 0, "[", op, "] expected a ", dims,
                 "-d input whose last dimension (the head width) is even, got shape ", shape_str(x.shape()));
  HEADROOM_CHECK(theta > 0, "[", op, "] theta must be > 0, got ", theta);
}

// x · cos + swap_halves(x) · sin for x [..., d_h] and tables broadcastable to it.
Tensor rotate(const Tensor& x, const Tensor& cos, const Tensor& sin) {
  const int64_t half = x.size(-1) / 2;
  Tensor swapped = cat({x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
  return x * cos + swapped * sin;
}

}  // namespace

Tensor rotary_embedding(const Tensor& x, int64_t start, double theta) {
  check_rotary_input("rotary_embedding", x, 4, theta);
  HEADROOM_CHECK(start >= 0, "[rotary_embedding] start must be >= 0, got ", start);
  const int64_t T = x.size(2);
  RotaryTables tables = rotary_tables(start + T, x.size(3), theta, x.dtype(), x.device());
  return rotate(x, tables.cos.narrow(0, start, T), tables.sin.narrow(0, start, T));  // tables [T, d_h]
}

Tensor rotary_embedding_rows(const Tensor& rows, const Tensor& positions, int64_t end, double theta) {
  check_rotary_input("rotary_embedding_rows", rows, 2, theta);
  HEADROOM_CHECK(positions.dtype() == DType::i32 && positions.dim() == 1 && positions.size(0) == rows.size(0),
                 "[rotary_embedding_rows] expected i32 positions of shape [", rows.size(0), "], got ",
                 dtype_name(positions.dtype()), " ", shape_str(positions.shape()));
  RotaryTables tables = rotary_tables(end, rows.size(1), theta, rows.dtype(), rows.device());
  return rotate(rows, index_select(tables.cos, 0, positions), index_select(tables.sin, 0, positions));  // [R, d_h]
}

void check_rope(const char* layer, const Rope& rope, int64_t head_dim) {
  if (!rope.on) return;
  HEADROOM_CHECK(head_dim % 2 == 0, "[", layer, "] rope needs an even head_dim, got ", head_dim);
  HEADROOM_CHECK(rope.theta > 0, "[", layer, "] rope_theta must be > 0, got ", rope.theta);
}

Tensor rotate_queries(const AttentionInput& in, const KeysValues& kv, const Tensor& q, const Rope& rope) {
  return rope.applies_to(in) ? rotary_embedding(q, kv.past, rope.theta) : q;
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
