#include "headroom/models/mae.h"

#include <unordered_set>

#include "headroom/core/grad_mode.h"
#include "headroom/ops/nn.h"
#include "headroom/ops/reduce.h"
#include "headroom/ops/shape.h"

namespace headroom {

using GateInput = MAEConfig::GateInput;

namespace {

const MAEConfig& checked(const MAEConfig& config) {
  HEADROOM_CHECK(config.mha.heads >= 2, "[MAEAttention] needs at least 2 heads (an expert is h-1 of them), got ",
                 config.mha.heads);
  HEADROOM_CHECK(config.gate_hidden >= 0, "[MAEAttention] gate_hidden must be >= 0 (0 = d), got ", config.gate_hidden);
  return config;
}

// 1 at real positions of a [B, L] padding mask (1 = padded), 0 at padding:
// [B, L, 1] in `dtype` on `device`; all ones when there is no mask.
Tensor real_positions(const Tensor& padding, int64_t B, int64_t L, DType dtype, Device device) {
  if (!padding.defined()) return Tensor::ones({B, L, 1}, dtype, device);
  HEADROOM_CHECK(padding.dim() == 2 && padding.size(0) == B && padding.size(1) == L,
                 "[MAEAttention] expected a padding mask of shape [", B, ", ", L, "], got ",
                 shape_str(padding.shape()));
  return (1.0 - padding.to(dtype)).unsqueeze(-1);
}

// The padding of x's positions: query_padding, or in self-attention the key
// padding's last T columns (the new tokens are the last T keys).
Tensor x_padding(const AttentionInput& in) {
  if (in.query_padding.defined() || in.memory.defined() || !in.key_padding.defined()) return in.query_padding;
  const int64_t T = in.x.size(1), S = in.key_padding.size(-1);
  return S >= T ? in.key_padding.narrow(1, S - T, T) : in.key_padding;
}

// Mean over the real positions of v [B, L, d] (keep: [B, L, 1]) -> [B, 1, d];
// 0 for a row without any.
Tensor masked_mean(const Tensor& v, const Tensor& keep) {
  return sum(v * keep, {1}, true) / maximum(sum(keep, {1}, true), 1.0);
}

// x̄_t = mean of the real x_τ, τ <= t, counting the tokens of earlier calls
// from the cache.  The cache's `extra` holds, per sequence, the sum of the
// real inputs so far and in its last column their count: [B, d + 1].
Tensor prefix_mean(const AttentionInput& in) {
  const Tensor& x = in.x;
  const int64_t B = x.size(0), T = x.size(1), d = x.size(2);
  Tensor keep = real_positions(x_padding(in), B, T, x.dtype(), x.device());  // [B, T, 1]
  Tensor running = cumsum(cat({x * keep, keep}, -1), 1);                     // [B, T, d + 1]: sums, counts
  AttentionCache* cache = in.cache;
  if (cache && cache->extra.defined()) {
    HEADROOM_CHECK(cache->extra.dim() == 2 && cache->extra.size(0) == B && cache->extra.size(1) == d + 1,
                   "[MAEAttention] the cache's prefix state has shape ", shape_str(cache->extra.shape()),
                   ", expected [", B, ", ", d + 1, "]");
    running = running + cache->extra.unsqueeze(1);
  }
  if (cache) {
    cache->extra = running.select(1, T - 1).detach();
    cache->extra_count += T;
  }
  return running.narrow(-1, 0, d) / maximum(running.narrow(-1, d, 1), 1.0);
}

// The mean of the source's real positions, [B, 1, d] (the memory in
// cross-attention; the encoder output given as `source` in a decoder's
// self-attention): computed on the first call and kept in the cache's `extra`
// (extra_count = S) for the others.
Tensor source_mean(const AttentionInput& in) {
  AttentionCache* cache = in.cache;
  if (cache && cache->extra.defined()) return cache->extra;
  const bool cross = in.memory.defined();
  const Tensor& m = cross ? in.memory : in.source;
  const Tensor& padding = cross ? in.key_padding : in.source_padding;
  Tensor mean_memory = masked_mean(m, real_positions(padding, m.size(0), m.size(1), m.dtype(), m.device()));
  if (cache) cache->extra = mean_memory.detach(), cache->extra_count = m.size(1);
  return mean_memory;
}

// Per-head weights of "expert i alone" (head i dropped, the others scaled by
// h/(h−1)): experts i32 [B, R] -> [B, R, h].
Tensor drop_one_head(const Tensor& experts, int64_t h, DType dtype) {
  Tensor dropped = k_hot(experts.reshape({-1, 1}), h, dtype);  // [B*R, h], 1 at the dropped head
  return ((1.0 - dropped) * (double(h) / double(h - 1))).view({experts.size(0), experts.size(1), h});
}

// What the layer reports: g per query token, the expert used, and the load.
RoutingStats routing_stats(const Tensor& g, const Tensor& experts, int64_t B, int64_t T) {
  NoGradGuard no_grad;
  const int64_t h = g.size(-1);
  RoutingStats stats;
  stats.gates = g.expand({B, T, h}).reshape({B * T, h}).to(DType::f32).contiguous();
  if (!experts.defined()) {
    stats.load = sum(stats.gates, {0});
    return stats;
  }
  stats.indices = experts.expand({B, T}).reshape({B * T, 1}).contiguous();
  stats.load = sum(k_hot(stats.indices, h, DType::f32), {0});
  return stats;
}

}  // namespace

MAEGate::MAEGate(int64_t dim, int64_t hidden, int64_t experts, MAEConfig::GateActivation act, Generator& gen)
    : activation(act) {
  fc1 = register_module("fc1", std::make_shared<Linear>(dim, hidden, true, gen));
  fc2 = register_module("fc2", std::make_shared<Linear>(hidden, experts, true, gen));
  NoGradGuard no_grad;
  fc2->weight.zero_();
  fc2->bias.zero_();
}

Tensor MAEGate::forward(const Tensor& summary) const {
  Tensor hidden = fc1->forward(summary);
  hidden = activation == MAEConfig::GateActivation::relu ? relu(hidden) : tanh(hidden);
  return softmax(fc2->forward(hidden), -1);
}

MAEAttention::MAEAttention(const MAEConfig& cfg, Generator& gen)
    : MultiHeadAttention(checked(cfg).mha, gen), mae_config(cfg), sampler_(&gen) {
  const int64_t hidden = cfg.gate_hidden > 0 ? cfg.gate_hidden : config.dim;
  gate = register_module("gate", std::make_shared<MAEGate>(config.dim, hidden, config.heads, cfg.gate_activation, gen));
}

GateInput MAEAttention::resolve_gate_input(const AttentionInput& in) const {
  // methods.md §4.3 auto: the source mean in every decoder sublayer of an
  // encoder–decoder model, the prefix mean in a decoder-only causal layer,
  // the sequence mean elsewhere.
  const bool has_source = in.memory.defined() || in.source.defined();
  GateInput source = mae_config.gate_input;
  if (source == GateInput::auto_)
    source = has_source ? GateInput::source_mean : in.causal ? GateInput::prefix_mean : GateInput::seq_mean;
  HEADROOM_CHECK(!(source == GateInput::seq_mean && in.causal),
                 "[MAEAttention] a seq_mean gate on a causal layer would read future tokens; use prefix_mean "
                 "(or auto)");
  HEADROOM_CHECK(!(source == GateInput::seq_mean && in.cache),
                 "[MAEAttention] a seq_mean gate needs the whole sequence and cannot decode with a cache; use "
                 "prefix_mean");
  HEADROOM_CHECK(!(source == GateInput::source_mean && !has_source),
                 "[MAEAttention] a source_mean gate needs the memory (cross-attention) or the source (decoder "
                 "self-attention of an encoder-decoder model); this call has neither");
  return source;
}

bool MAEAttention::sample_per_token(GateInput source) const {
  const bool per_token_gate = source == GateInput::prefix_mean;
  switch (mae_config.sample_per) {
    case MAEConfig::SamplePer::auto_: return per_token_gate;
    case MAEConfig::SamplePer::token: return true;
    case MAEConfig::SamplePer::sequence: break;
  }
  HEADROOM_CHECK(
      !per_token_gate,
      "[MAEAttention] sample_per = sequence needs a per-sequence gate, but prefix_mean gives one g per token");
  return false;
}

Tensor MAEAttention::responsibilities(const AttentionInput& in) {
  HEADROOM_CHECK(in.x.defined() && in.x.dim() == 3 && in.x.size(2) == config.dim,
                 "[MAEAttention] expected x of shape [B, T, ", config.dim, "]");
  Tensor summary;
  switch (resolve_gate_input(in)) {
    case GateInput::prefix_mean: summary = prefix_mean(in); break;
    case GateInput::source_mean: summary = source_mean(in); break;
    default:
      summary =
          masked_mean(in.x, real_positions(x_padding(in), in.x.size(0), in.x.size(1), in.x.dtype(), in.x.device()));
  }
  return gate->forward(summary);
}

// Inverse-CDF sampling of one expert per row of g, from this layer's
// generator: on the host, row by row (the same draws on every device; on
// CUDA g comes over and the choice goes back).
Tensor MAEAttention::sample_experts(const Tensor& g) {
  const int64_t h = g.size(-1), rows = g.numel() / h;
  std::vector<double> probs = g.contiguous().to_vector<double>();
  std::vector<int32_t> chosen(rows);
  const uint64_t first = sampler_->reserve(rows);
  for (int64_t r = 0; r < rows; ++r) {
    double u = sampler_->uniform64_at(first + r), cumulative = 0;
    int32_t e = 0;
    while (e < h - 1 && u >= (cumulative += probs[r * h + e])) ++e;  // the last expert takes rounding leftovers
    chosen[r] = e;
  }
  return Tensor::from_vector(chosen, {g.size(0), g.size(1)}).to(g.device());
}

AttentionOutput MAEAttention::forward(const AttentionInput& in) {
  const GateInput source = resolve_gate_input(in);  // validates before the cache is touched
  const bool per_token_samples = sample_per_token(source);
  Tensor heads = head_outputs(in);  // [B, h, T, d_h]
  const int64_t B = in.x.size(0), T = in.x.size(1), h = config.heads;
  const bool top1 = !is_training() && mae_config.inference == MAEConfig::Inference::top1;
  const MAEMode mode = is_training() ? mode_ : MAEMode::mixture;
  Tensor g, experts, weights;  // g: [B, 1 or T, h]; experts: i32 [B, 1 or T]; weights: [B, 1 or T, h]
  if (mode == MAEMode::uniform) {
    g = Tensor::full({B, 1, h}, 1.0 / double(h), heads.dtype(), heads.device());
  } else if (mode == MAEMode::mixture && !top1) {
    g = responsibilities(in);
    weights = (1.0 - g) * (double(h) / double(h - 1));
  } else {
    {
      NoGradGuard no_grad;  // the F-step does not train the gate
      g = responsibilities(in);
    }
    if (top1) experts = argmax(g, -1);
    else experts = sample_experts(per_token_samples ? g.expand({B, T, h}) : g);
    weights = drop_one_head(experts, h, heads.dtype());
  }
  AttentionOutput result;
  result.out = project_out(heads, weights.defined() ? weights.expand({B, T, h}) : Tensor());
  result.stats = routing_stats(g, experts, B, T);
  return result;
}

int64_t MAEAttention::macs(int64_t T, int64_t S, bool causal) const {
  const GateInput source = mae_config.gate_input;
  const bool per_token = source == GateInput::prefix_mean || (source == GateInput::auto_ && causal);
  const int64_t gate_mlp = config.dim * gate->fc1->weight.size(0) + gate->fc2->weight.numel();
  return MultiHeadAttention::macs(T, S, causal) + (per_token ? T : 1) * gate_mlp;
}

std::vector<Tensor> MAEAttention::gate_parameters() const { return gate->parameters(); }

std::vector<Tensor> MAEAttention::expert_parameters() const {
  std::unordered_set<const void*> gate_params;
  for (const Tensor& p : gate_parameters()) gate_params.insert(p.impl_ptr());
  std::vector<Tensor> experts;
  for (const Tensor& p : parameters())
    if (!gate_params.count(p.impl_ptr())) experts.push_back(p);
  return experts;
}

std::string MAEAttention::summary() const {
  // Expert i is every head but head i (methods.md §4.2).
  return "mae: " + std::to_string(config.heads) + " experts of " + std::to_string(config.heads - 1) +
         " heads of width " + std::to_string(head_dim);
}

}  // namespace headroom
