#include "headroom/models/moa.h"

#include <cmath>
#include <vector>

#include "headroom/core/grad_mode.h"
#include "headroom/ops/elementwise.h"
#include "headroom/ops/matmul.h"
#include "headroom/ops/nn.h"
#include "headroom/ops/reduce.h"
#include "headroom/ops/routing.h"
#include "headroom/ops/shape.h"

namespace headroom {

namespace {

// Xavier-uniform: U(-a, a), a = gain·√(6 / (fan_in + fan_out)).
Tensor xavier_uniform(const Shape& shape, int64_t fan_in, int64_t fan_out, double gain, Generator& gen) {
  const double bound = gain * std::sqrt(6.0 / double(fan_in + fan_out));
  return Tensor::rand(shape, gen, -bound, bound, DType::f32);
}

// log(1 + eˣ), linear above 20 as PyTorch's softplus (so exp never overflows).
Tensor softplus(const Tensor& x) { return where(gt(x, 20.0), x, log(1.0 + exp(minimum(x, 20.0)))); }

// v / max(‖v‖₁, 1e-12) for v >= 0 (F.normalize(p=1) of the official code).
Tensor l1_normalise(const Tensor& v) { return v / maximum(sum(v), 1e-12); }

// The chosen experts of every row of p [N, E] in sampling mode: the top
// k - s and then s more drawn without replacement from the others
// with probability ∝ p + 1e-6 (methods.md §2.3 step 4).  Returns i32 [N, k] on probs'
// device.  Sampling runs on the host, row by row from the generator's stream
// (the same draws on every device); on CUDA that costs a round trip.
Tensor sample_experts(const Tensor& probs, int64_t k, int64_t sampled, Generator& gen) {
  const int64_t rows = probs.size(0), experts = probs.size(1), kept = k - sampled;
  std::vector<double> p = probs.to_vector<double>();
  std::vector<int32_t> top = kept > 0 ? topk(probs, kept).indices.to_vector<int32_t>() : std::vector<int32_t>();
  std::vector<int32_t> chosen(rows * k);
  const uint64_t first = gen.reserve(uint64_t(rows * sampled));
  for (int64_t n = 0; n < rows; ++n) {
    std::vector<double> weight(experts);
    for (int64_t e = 0; e < experts; ++e) weight[e] = p[n * experts + e] + 1e-6;
    for (int64_t j = 0; j < kept; ++j) {
      chosen[n * k + j] = top[n * kept + j];
      weight[chosen[n * k + j]] = 0;
    }
    for (int64_t j = 0; j < sampled; ++j) {
      double total = 0;
      for (double w : weight) total += w;
      double target = gen.uniform64_at(first + uint64_t(n * sampled + j)) * total;
      int64_t pick = -1;  // the candidate whose interval holds target (the last one if rounding runs past)
      for (int64_t e = 0; e < experts; ++e) {
        if (weight[e] == 0) continue;
        pick = e;
        if (target < weight[e]) break;
        target -= weight[e];
      }
      chosen[n * k + kept + j] = int32_t(pick);
      weight[pick] = 0;
    }
  }
  return Tensor::from_vector(chosen, {rows, k}).to(probs.device());
}

// The position of each grouped row's token, past + t for token (b, t):
// i32 [N*k] in plan order, on the plan's device.
Tensor row_positions(const RoutePlan& plan, int64_t batch, int64_t seq, int64_t past) {
  Tensor positions = index_range(past + seq, plan.order.device()).narrow(0, past, seq);  // [T]
  // Pair p = token * k + slot, token = b * T + t: the positions in pair order, then in plan order.
  Tensor pairs = positions.view({1, seq, 1}).expand({batch, seq, plan.k}).reshape({plan.rows()});
  return index_select(pairs, 0, plan.order);
}

}  // namespace

// ---- ExpertLinear -------------------------------------------------------------

ExpertLinear::ExpertLinear(int64_t experts, int64_t in_features, int64_t out_features, Generator& gen) {
  HEADROOM_CHECK(experts > 0 && in_features > 0 && out_features > 0,
                 "[ExpertLinear] sizes must be positive, got E=", experts, " in=", in_features, " out=", out_features);
  weight = register_parameter(
      "weight", xavier_uniform({experts, in_features, out_features}, in_features, out_features, 1.0, gen));
}

Tensor ExpertLinear::forward(const Tensor& x_grouped, const RoutePlan& plan) const {
  return segment_matmul(x_grouped, weight, plan);
}

// ---- MoAAttention ----------------------------------------------------------------

MoAAttention::MoAAttention(const MoAConfig& cfg, Generator& gen) : config(cfg), gen_(&gen) {
  if (config.kv_dim == 0) config.kv_dim = config.dim;
  const int64_t d = config.dim, E = config.num_experts, d_h = config.head_dim, d_kv = config.kv_dim;
  HEADROOM_CHECK(d > 0 && E > 0 && d_h > 0 && d_kv > 0,
                 "[MoAAttention] dim, num_experts, head_dim and kv_dim must "
                 "be positive, got dim=",
                 d, " num_experts=", E, " head_dim=", d_h, " kv_dim=", d_kv);
  HEADROOM_CHECK(config.k >= 1 && config.k <= E, "[MoAAttention] k = ", config.k, " must lie in [1, num_experts = ", E,
                 "]");
  HEADROOM_CHECK(config.k < E || config.allow_full_routing, "[MoAAttention] k = num_experts = ", E,
                 ": every expert runs for every token, so nothing is routed; use a smaller k, or set "
                 "allow_full_routing");
  HEADROOM_CHECK(config.sample_topk >= 0 && config.sample_topk <= config.k,
                 "[MoAAttention] sample_topk = ", config.sample_topk, " must lie in [0, k = ", config.k, "]");
  router = register_module("router", std::make_shared<Linear>(d, E, false, gen));
  if (config.noisy_gating) noise = register_module("noise", std::make_shared<Linear>(d, E, false, gen));
  k_proj = register_module("k_proj", std::make_shared<Linear>(d_kv, d_h, false, gen));
  v_proj = register_module("v_proj", std::make_shared<Linear>(d_kv, d_h, false, gen));
  q_proj = register_module("q_proj", std::make_shared<ExpertLinear>(E, d, d_h, gen));
  o_proj = register_module("o_proj", std::make_shared<ExpertLinear>(E, d_h, d, gen));
  // methods.md §2.2: zero routers; shared K/V Xavier with gain 1/√2 when their input is the model width.
  NoGradGuard no_grad;
  router->weight.zero_();
  if (noise) noise->weight.zero_();
  const double kv_gain = d_kv == d ? 1 / std::sqrt(2.0) : 1.0;
  for (const auto& proj : {k_proj, v_proj}) proj->weight.copy_(xavier_uniform({d_h, d_kv}, d_kv, d_h, kv_gain, gen));
}

MoARouting MoAAttention::route_tokens(const Tensor& x_rows, const Tensor& query_padding) {
  return route_logits(router->forward(x_rows), x_rows, query_padding);
}

MoARouting MoAAttention::route_logits(const Tensor& logits, const Tensor& x_rows, const Tensor& query_padding) {
  const int64_t rows = x_rows.size(0), E = config.num_experts, k = config.k;
  MoARouting r;
  r.logits = logits;             // [N, E]
  if (noise && is_training()) {  // drawn on the host from the layer's stream, as on the CPU
    Tensor eps = Tensor::randn({rows, E}, *gen_, r.logits.dtype()).to(x_rows.device());
    r.logits = r.logits + eps * (softplus(noise->forward(x_rows)) + 0.01);
  }
  r.probs = softmax(r.logits, -1);  // over all E experts, before top-k
  if (query_padding.defined()) r.probs = r.probs * logical_not(query_padding).to(r.probs.dtype()).unsqueeze(1);

  const int64_t sampled = is_training() ? config.sample_topk : 0;
  if (sampled == 0) {  // the gates are the top-k probabilities themselves
    TopK top = topk(r.probs, k);
    r.indices = top.indices;
    r.gates = top.values;
  } else {
    r.indices = sample_experts(r.probs.detach(), k, sampled, *gen_);
    r.gates = index_select(r.probs.reshape({rows * E}), 0, flat_indices(r.indices, E)).view({rows, k});
  }

  // The gates in place, and the load c_e, which counts only gates > 0 (pads drop out).
  r.chosen = put_along_rows(r.gates, r.indices, E);
  r.counts = sum(gt(r.chosen, 0.0).to(DType::f32), {0});
  return r;
}

// Under a statistics group (data-parallel training) P, f, the z-loss mean and
// the importance are over the global batch; a loss joining the mean loss is
// scaled by (global rows / this rank's rows), as the ranks' gradients are
// averaged with weights proportional to their rows (docs/distributed.md).
Tensor MoAAttention::aux_loss(const MoARouting& r) const {
  const DType dtype = r.probs.dtype();
  const double E = double(config.num_experts);
  const int64_t rows = r.probs.size(0);
  const bool use_switch = config.w_switch != 0, use_z = config.w_z != 0;
  const bool use_cv = config.w_cv != 0 && config.num_experts > 1;
  // Σ_t p_t, the load c, Σ_t G_t [E] each; Σ_t logsumexp(z_t)² and the rows, those the weights use: one all-reduce.
  const std::vector<Tensor> sums = sum_over_group(
      {use_switch ? sum(r.probs, {0}) : Tensor(), use_switch ? r.counts.to(dtype) : Tensor(),
       use_cv ? sum(r.chosen, {0}) : Tensor(), use_z ? sum(pow(logsumexp(r.logits, {1}), 2.0)) : Tensor(),
       Tensor::full({}, double(rows), dtype, r.probs.device())});
  const Tensor &probs_sum = sums[0], &load = sums[1], &importance_sum = sums[2], &z_squared_sum = sums[3];
  const Tensor& all_rows = sums[4];
  Tensor total = Tensor::zeros({}, dtype, r.probs.device());
  if (use_switch)  // E · Σ_e P_e f_e, pads excluded (their p rows and counts are 0)
    total = total + config.w_switch * (E * sum(l1_normalise(probs_sum) * l1_normalise(load)));
  if (use_z)  // mean over all rows, pads included, of logsumexp(z)²
    total = total + config.w_z * (z_squared_sum / all_rows);
  if (use_cv) {  // cv² of the normalised importance Σ_t G_t
    Tensor importance = l1_normalise(importance_sum);
    total = total + config.w_cv * (var(importance, {0}, 1) / (pow(mean(importance), 2.0) + 1e-10));
  }
  if (config.aux_normalisation != MoAAuxNormalisation::reference) total = total * (all_rows / double(rows));
  return total;
}

struct MoAAttention::Prepared {
  int64_t batch, seq_len;
  Tensor x_rows;  // [N, d]
  MoARouting routing;
  KeysValues kv;  // [B, 1, S, d_h]
  AttentionOptions opts;
};

MoAAttention::Prepared MoAAttention::prepare(const AttentionInput& in) {
  const Tensor& x = in.x;
  HEADROOM_CHECK(x.defined() && x.dim() == 3 && x.size(2) == config.dim, "[MoAAttention] expected x of shape [B, T, ",
                 config.dim, "], got ", x.defined() ? shape_str(x.shape()) : "undefined");
  const int64_t B = x.size(0), T = x.size(1);
  check_rope("MoAAttention", rope(), config.head_dim);
  HEADROOM_CHECK(
      !in.memory.defined() || (in.memory.dim() == 3 && in.memory.size(0) == B && in.memory.size(2) == config.kv_dim),
      "[MoAAttention] expected memory of shape [", B, ", S, ", config.kv_dim, "], got ",
      in.memory.defined() ? shape_str(in.memory.shape()) : "");
  Tensor pad;
  if (in.query_padding.defined()) {
    HEADROOM_CHECK(in.query_padding.dtype() == DType::b8 && in.query_padding.shape() == Shape({B, T}),
                   "[MoAAttention] expected query_padding of dtype b8 and shape [", B, ", ", T, "], got ",
                   dtype_name(in.query_padding.dtype()), " ", shape_str(in.query_padding.shape()));
    pad = in.query_padding.reshape({B * T});
  }
  Prepared p{B, T, x.reshape({B * T, config.dim}), {}, {}, {}};
  if (in.memory.defined()) {  // cross-attention: K/V read the memory; MQA, one K/V head of width d_h
    p.routing = route_tokens(p.x_rows, pad);
    p.kv = headroom::keys_values(in, [this](const Tensor& source) {
      return std::make_pair(k_proj->forward(source).unsqueeze(1), v_proj->forward(source).unsqueeze(1));
    });
  } else {
    // Self-attention: the router and the shared K/V projections read the same
    // rows, so one GEMM over their stacked weights serves all three (one pass
    // over x forward, one dx product backward instead of three).
    const int64_t E = config.num_experts, d_h = config.head_dim;
    Tensor fused = linear(p.x_rows, cat({router->weight, k_proj->weight, v_proj->weight}, 0));  // [N, E + 2 d_h]
    p.routing = route_logits(fused.narrow(1, 0, E), p.x_rows, pad);
    p.kv = headroom::keys_values(
        in,
        [&](const Tensor&) {  // [B, 1, T, d_h] each
          // Column slices of the fused rows, viewed without a copy (the attention reads them in place).
          auto head = [&](int64_t first) { return fused.narrow(1, first, d_h).view({B, 1, T, d_h}); };
          return std::make_pair(head(E), head(E + d_h));
        },
        rope());
  }
  p.opts = attention_options(in, p.kv, config.attn_dropout, is_training(), *gen_);
  p.opts.scale = 1 / std::sqrt(double(config.head_dim));  // methods.md §2.3 step 7, applied inside the attention op
  return p;
}

AttentionOutput MoAAttention::finish(const Prepared& p, const Tensor& out_rows) const {
  AttentionOutput result;
  result.out = out_rows.reshape({p.batch, p.seq_len, config.dim});
  result.aux.value = aux_loss(p.routing);
  result.aux.joins_summed_loss = config.aux_normalisation == MoAAuxNormalisation::reference;
  result.stats.indices = p.routing.indices;
  result.stats.gates = p.routing.chosen.detach().to(DType::f32);
  result.stats.load = p.routing.counts;
  return result;
}

AttentionOutput MoAAttention::forward(const AttentionInput& in) {
  Prepared p = prepare(in);
  RoutePlan plan = route(p.routing.indices, config.num_experts);
  Tensor q_rows = gather_segment_matmul(p.x_rows, q_proj->weight, plan);  // [N*k, d_h]
  if (rope().applies_to(in)) {
    const int64_t end = p.kv.past + p.seq_len;  // the new tokens' positions are past .. end-1
    q_rows = rotary_embedding_rows(q_rows, row_positions(plan, p.batch, p.seq_len, p.kv.past), end, config.rope_theta);
  }
  Tensor heads = routed_attention(q_rows, p.kv.k, p.kv.v, plan, p.seq_len, p.opts);  // [N*k, d_h]
  // Each token sums its k experts' outputs through W_o, each times its gate
  // (applied after the expert's output projection, methods.md §2.3 step 9).
  return finish(p, segment_matmul_scatter(heads, o_proj->weight, plan, p.routing.gates));  // [N, d]
}

AttentionOutput MoAAttention::forward_dense_reference(const AttentionInput& in) {
  Prepared p = prepare(in);
  const int64_t B = p.batch, T = p.seq_len, E = config.num_experts, N = B * T;
  Tensor q = matmul(p.x_rows, q_proj->weight);                      // [E, N, d_h]
  q = q.reshape({E, B, T, config.head_dim}).permute({1, 0, 2, 3});  // [B, E, T, d_h]
  q = rotate_queries(in, p.kv, q, rope());
  Tensor heads = attention(q, p.kv.k, p.kv.v, p.opts);                                              // [B, E, T, d_h]
  Tensor y = matmul(heads.permute({1, 0, 2, 3}).reshape({E, N, config.head_dim}), o_proj->weight);  // [E, N, d]
  Tensor dense_gates = p.routing.chosen.t().unsqueeze(-1);                                          // [E, N, 1]
  return finish(p, sum(y * dense_gates, {0}));
}

std::string MoAAttention::summary() const {
  return "moa: top-" + std::to_string(config.k) + " of " + std::to_string(config.num_experts) + " experts of width " +
         std::to_string(config.head_dim);
}

int64_t MoAAttention::macs(int64_t T, int64_t S, bool causal) const {
  const int64_t d = config.dim, d_h = config.head_dim, k = config.k;
  const int64_t router_macs = T * d * config.num_experts;
  const int64_t shared_kv = 2 * S * config.kv_dim * d_h;
  const int64_t experts = 2 * k * T * d * d_h;
  const int64_t core = 2 * k * attended_pairs(T, S, causal) * d_h;
  return router_macs + shared_kv + experts + core;
}

}  // namespace headroom
