#include "headroom/models/moh.h"

#include <algorithm>
#include <limits>
#include <string>
#include <vector>

#include "headroom/core/grad_mode.h"
#include "headroom/ops/elementwise.h"
#include "headroom/ops/matmul.h"
#include "headroom/ops/nn.h"
#include "headroom/ops/reduce.h"
#include "headroom/ops/routing.h"
#include "headroom/ops/shape.h"

namespace headroom {

// What the router decided for N tokens.
struct MoHAttention::Routing {
  Tensor gates;    // [N, h]: every head's gate, 0 for inactive heads; differentiable
  Tensor heads;    // i32 [N, h_s + K_r]: the active heads of each token, shared ones first
  Tensor scores;   // r [N, E_r]: routed-head probabilities (undefined when K_r = 0)
  Tensor mask;     // [N, E_r]: 1 for the selected routed heads (constant)
  Tensor counted;  // [N, 1]: 1 for the tokens the load balance averages over; undefined = all
};

namespace {

constexpr double kStdEps = 1e-6;      // qnorm: the std of the head norms is at least this
constexpr double kMinSquare = 1e-30;  // qnorm: ‖q‖² floor, so the norm's gradient stays finite

double machine_epsilon(DType dtype) {
  return dtype == DType::f64 ? std::numeric_limits<double>::epsilon() : std::numeric_limits<float>::epsilon();
}

// The shared heads 0..h_s-1, then the chosen routed heads (i32 [N, K] in
// [0, E_r), or undefined) shifted by h_s  ->  i32 [N, h_s + K] on `device`.
Tensor active_head_list(int64_t tokens, int64_t shared, int64_t heads, const Tensor& routed_chosen, Device device) {
  Tensor all_heads = index_range(heads, device);
  Tensor shared_heads = all_heads.narrow(0, 0, shared).unsqueeze(0).expand({tokens, shared});  // [N, h_s]
  if (!routed_chosen.defined()) return shared_heads.contiguous();
  // Routed head e is head h_s + e: look the choices up in the range h_s..h-1.
  const int64_t k = routed_chosen.size(1);
  Tensor routed = index_select(all_heads.narrow(0, shared, heads - shared), 0, routed_chosen.reshape({-1}));
  routed = routed.view({tokens, k});
  return shared == 0 ? routed : cat({shared_heads, routed}, 1);
}

// 1 - padding as [N, 1] in `dtype`: the tokens that count (query_padding b8 [B, T], 1 = pad).
Tensor real_tokens(const Tensor& query_padding, int64_t n, DType dtype) {
  HEADROOM_CHECK(query_padding.dtype() == DType::b8 && query_padding.dim() == 2 && query_padding.numel() == n,
                 "[MoHAttention] expected query_padding of dtype b8 and shape [B, T] with B*T = ", n, ", got ",
                 dtype_name(query_padding.dtype()), " ", shape_str(query_padding.shape()));
  return logical_not(query_padding).to(dtype).reshape({n, 1});
}

}  // namespace

namespace {
// MoHConfig with the -1 defaults of shared_heads and routed_k made concrete.
MoHConfig resolve_defaults(MoHConfig cfg) {
  const int64_t quarter = std::max<int64_t>(1, cfg.mha.heads / 4);
  if (cfg.shared_heads == -1) cfg.shared_heads = quarter;
  if (cfg.routed_k == -1) cfg.routed_k = quarter;
  return cfg;
}
}  // namespace

MoHAttention::MoHAttention(const MoHConfig& config_in, Generator& gen)
    : MultiHeadAttention(config_in.mha, gen), moh_config(resolve_defaults(config_in)) {
  const MoHConfig& cfg = moh_config;
  const int64_t h = config.heads, shared = cfg.shared_heads, k = cfg.routed_k;
  HEADROOM_CHECK(shared >= 0 && k >= 0, "[MoHAttention] shared_heads (", shared, ") and routed_k (", k,
                 ") must be >= 0");
  HEADROOM_CHECK(shared + k <= h, "[MoHAttention] shared_heads + routed_k = ", shared, " + ", k,
                 " exceeds heads = ", h);
  HEADROOM_CHECK(k > 0 || shared == h,
                 "[MoHAttention] routed_k = 0 needs every head shared (shared_heads = heads = ", h,
                 "), got shared_heads = ", shared);
  HEADROOM_CHECK(cfg.beta >= 0, "[MoHAttention] beta must be >= 0, got ", cfg.beta);
  HEADROOM_CHECK(shared + k < h || cfg.allow_full_routing, "[MoHAttention] shared_heads + routed_k = ", shared, " + ",
                 k,
                 " = heads: every head is active for every token, so nothing is routed (MHA at a higher "
                 "cost); use fewer shared or routed heads, or set allow_full_routing");
  if (cfg.router == MoHConfig::Router::qnorm) return;
  auto router = [&](const char* name, int64_t outputs) {
    auto linear = register_module(name, std::make_shared<Linear>(config.dim, outputs, false, gen));
    NoGradGuard no_grad;
    linear->weight.copy_(Tensor::randn(linear->weight.shape(), gen) * 0.02);
    return linear;
  };
  if (k > 0) router_routed = router("router_routed", h - shared);
  if (shared > 1) router_shared = router("router_shared", shared);
  if (shared > 0 && k > 0) router_mix = router("router_mix", 2);
}

// ---- routing -------------------------------------------------------------------

// The learned router's logits x W_rᵀ, x W_sᵀ and x W_hᵀ, each undefined where
// the router has no such matrix.
struct MoHAttention::RouterLogits {
  Tensor routed, shared, mix;
};

MoHAttention::RouterLogits MoHAttention::router_logits(const Tensor& x) const {
  // One GEMM over the concatenated weights [E_r + h_s + 2, d]: one pass over
  // x forward and one dX backward instead of three.
  const std::shared_ptr<Linear> routers[] = {router_routed, router_shared, router_mix};
  std::vector<Tensor> weights;
  for (const auto& router : routers)
    if (router) weights.push_back(router->weight);
  if (weights.empty()) return {};
  Tensor all = linear(x, weights.size() == 1 ? weights[0] : cat(weights, 0));  // [N, E_r + h_s + 2]
  int64_t first = 0;
  auto take = [&](const std::shared_ptr<Linear>& router) {
    if (!router) return Tensor();
    const int64_t rows = router->weight.size(0);
    first += rows;
    return all.narrow(1, first - rows, rows);
  };
  RouterLogits logits;
  logits.routed = take(router_routed);
  logits.shared = take(router_shared);
  logits.mix = take(router_mix);
  return logits;
}

Tensor MoHAttention::routed_scores(const RouterLogits& logits, const Tensor& q) const {
  if (moh_config.router == MoHConfig::Router::learned) return softmax(logits.routed, -1);
  // qnorm: ‖q_i‖₂ of the routed heads, over their unbiased std, softmax.
  const int64_t n = q.size(0) * q.size(2), shared = moh_config.shared_heads;
  Tensor routed_q = q.permute({0, 2, 1, 3}).reshape({n, config.heads, head_dim}).narrow(1, shared, routed_heads());
  Tensor norms = sqrt(maximum(sum(routed_q * routed_q, {2}), kMinSquare));  // [N, E_r]
  if (routed_heads() > 1) norms = norms / sqrt(maximum(var(norms, {1}, 1, true), kStdEps * kStdEps));
  return softmax(norms, -1);
}

Tensor MoHAttention::routed_gates(const Tensor& r, const Tensor& mask) const {
  const MoHConfig& c = moh_config;
  if (c.router == MoHConfig::Router::qnorm) {  // exactly 0/1; STE backward
    Tensor surrogate = r - r.detach();         // 0 forward, ∂/∂r = 1
    return mask + (c.ste == MoHConfig::Ste::all ? surrogate : mask * surrogate);
  }
  Tensor selected = r * mask;
  if (c.scaling == MoHConfig::GateScaling::paper) return selected;
  Tensor total = maximum(sum(selected, {1}, true), machine_epsilon(r.dtype()));
  return selected / total * double(c.routed_k);
}

Tensor MoHAttention::shared_gates(const RouterLogits& logits, const Tensor& x) const {
  const int64_t n = x.size(0), shared = moh_config.shared_heads;
  if (!router_shared)
    return Tensor::ones({n, shared}, x.dtype(), x.device());  // qnorm, or the constant gate of h_s = 1
  Tensor s = softmax(logits.shared, -1);
  return moh_config.scaling == MoHConfig::GateScaling::code ? s * double(shared) : s;
}

MoHAttention::Routing MoHAttention::route_tokens(const Tensor& x, const Tensor& q, const Tensor& query_padding) const {
  const int64_t n = x.size(0), shared = moh_config.shared_heads, k = moh_config.routed_k;
  Routing routing;
  if (moh_config.balance_padding == MoHConfig::BalancePadding::exclude && query_padding.defined())
    routing.counted = real_tokens(query_padding, n, x.dtype());
  RouterLogits logits = router_logits(x);
  Tensor g_shared = shared > 0 ? shared_gates(logits, x) : Tensor();
  Tensor g_routed, chosen;
  if (k > 0) {
    routing.scores = routed_scores(logits, q);
    chosen = topk(routing.scores.detach(), k).indices;        // [N, K_r] in [0, E_r)
    routing.mask = k_hot(chosen, routed_heads(), x.dtype());  // constant
    g_routed = routed_gates(routing.scores, routing.mask);
  }
  if (router_mix) {  // two-stage routing: [α1, α2] balance the shared and the routed group
    Tensor alpha = softmax(logits.mix, -1);
    if (moh_config.scaling == MoHConfig::GateScaling::code) alpha = alpha * 2.0;
    g_shared = g_shared * alpha.narrow(1, 0, 1);
    g_routed = g_routed * alpha.narrow(1, 1, 1);
  }
  routing.gates = k == 0 ? g_shared : shared == 0 ? g_routed : cat({g_shared, g_routed}, 1);
  routing.heads = active_head_list(n, shared, config.heads, chosen, x.device());
  return routing;
}

// Σ_e P_e f_e over the counted tokens, scaled to join the mean loss as MoA's
// is (moa.cpp): under a statistics group, over the global batch, with the
// rank's share (global rows / this rank's rows) in one all-reduce.
Tensor MoHAttention::load_balance(const Routing& routing) const {
  const int64_t rows = routing.gates.size(0);
  const DType dtype = routing.scores.dtype();
  const Device device = routing.scores.device();
  const Tensor& counted = routing.counted;  // [N, 1], or undefined: every token counts
  auto counted_sum = [&](const Tensor& v) { return sum(counted.defined() ? v * counted : v, {0}); };
  const Tensor rows_part = Tensor::full({}, double(rows), dtype, device);
  // Σ_t w_t s_t, Σ_t w_t m_t [E_r]; Σ_t w_t and the rows, with w the counted tokens.
  const std::vector<Tensor> sums = sum_over_group({counted_sum(routing.scores), counted_sum(routing.mask),
                                                   counted.defined() ? sum(counted) : rows_part, rows_part});
  const Tensor tokens = maximum(sums[2], 1.0);
  Tensor balance = sum((sums[0] / tokens) * (sums[1] / tokens));
  if (moh_config.load_balance == MoHConfig::LoadBalance::code) balance = balance * double(routed_heads());
  return balance * (sums[3] / double(rows));
}

AttentionOutput MoHAttention::finish(const Routing& routing, const Tensor& out) const {
  AttentionOutput result;
  result.out = out;
  const int64_t shared = moh_config.shared_heads, k = moh_config.routed_k;
  if (k > 0 && is_training()) result.aux.value = load_balance(routing) * (moh_config.beta / double(aux_peers_));
  if (k > 0) result.stats.indices = routing.heads.narrow(1, shared, k).contiguous();
  result.stats.gates = routing.gates.detach().to(DType::f32);
  result.stats.load = sum(k_hot(routing.heads, config.heads, DType::f32), {0});
  return result;
}

// ---- the two forward paths -------------------------------------------------------

Tensor MoHAttention::query_rows(const Tensor& x, const Tensor& q, const RoutePlan& plan,
                                const Tensor& token_head_rows) const {
  if (q.defined())  // qnorm computed every head's query to route: pick the active rows
    return index_select(q.permute({0, 2, 1, 3}).reshape({x.size(0) * config.heads, head_dim}), 0, token_head_rows);
  // Head j's query is x · W_q[j·d_h : (j+1)·d_h, :]ᵀ: W_q viewed as [h, d, d_h].
  Tensor w_heads = q_proj->weight.reshape({config.heads, head_dim, config.dim}).permute({0, 2, 1});
  Tensor rows = gather_segment_matmul(x, w_heads, plan);  // [N*k, d_h]
  if (q_proj->bias.defined())
    rows = rows + index_select(q_proj->bias.reshape({config.heads, head_dim}), 0, plan.segment);
  return rows;
}

Tensor MoHAttention::out_weights_by_head() {
  const Tensor& w = o_proj->weight;  // [d, h·d_h]
  auto by_head = [&] { return w.t().reshape({config.heads, head_dim, config.dim}); };
  if (autograd::grad_enabled()) return by_head();  // training: the copy is part of the graph
  const bool fresh =
      w_out_by_head_.source.defined() && w_out_by_head_.source.same_storage(w) && w_out_by_head_.version == w.version();
  if (!fresh) w_out_by_head_ = {w.detach(), w.version(), by_head().contiguous()};
  return w_out_by_head_.value;
}

AttentionOutput MoHAttention::forward(const AttentionInput& in) {
  const bool qnorm = moh_config.router == MoHConfig::Router::qnorm;
  if (qnorm && moh_config.ste == MoHConfig::Ste::all) return forward_dense_reference(in);  // every H_i has a gradient
  const Tensor& x = in.x;
  HEADROOM_CHECK(x.dim() == 3 && x.size(2) == config.dim, "[MoHAttention] expected x of shape [B, T, ", config.dim,
                 "], got ", shape_str(x.shape()));
  const int64_t batch = x.size(0), seq = x.size(1), n = batch * seq, h = config.heads;
  Tensor tokens = x.reshape({n, config.dim});
  // Every head's query [B, h, T, d_h]: to route (qnorm, before rotation) or to rotate.
  Tensor q = qnorm || rope().applies_to(in) ? queries(x) : Tensor();
  Routing routing = route_tokens(tokens, q, in.query_padding);
  RoutePlan plan = route(routing.heads, h);  // segment = head
  // Each slot's (token, head) pair as its flat position token * h + head in [N, h]: [N*k], slot order.
  Tensor slot_pairs = flat_indices(routing.heads, h);
  // Grouped row r is the pair of slot plan.order[r].
  Tensor token_head_rows = index_select(slot_pairs, 0, plan.order);  // [N*k]

  KeysValues kv = keys_values(in);  // every head: all tokens need them
  AttentionOptions opts = attention_options(in, kv, config.attn_dropout, is_training(), *generator_);
  Tensor rows = query_rows(tokens, rotate_queries(in, kv, q, rope()), plan, token_head_rows);      // [N*k, d_h]
  Tensor heads = routed_attention(rows, repeat_kv(kv.k, h), repeat_kv(kv.v, h), plan, seq, opts);  // [N*k, d_h]
  // Head j's share of the output is g_j · H_j · W_o[:, j·d_h : (j+1)·d_h]ᵀ: W_oᵀ viewed as [h, d_h, d],
  // each token's gates in slot order [N, k] applied as its rows are summed.
  Tensor w_out = out_weights_by_head();
  Tensor slot_gates = index_select(routing.gates.reshape({n * h}), 0, slot_pairs).view(routing.heads.shape());
  Tensor out = segment_matmul_scatter(heads, w_out, plan, slot_gates);  // [N, d]
  if (o_proj->bias.defined()) out = out + o_proj->bias;                 // not gated
  return finish(routing, out.reshape({batch, seq, config.dim}));
}

AttentionOutput MoHAttention::forward_dense_reference(const AttentionInput& in) {
  const Tensor& x = in.x;
  Tensor q = moh_config.router == MoHConfig::Router::qnorm ? queries(x) : Tensor();
  Tensor heads = head_outputs(in);  // checks x; [B, h, T, d_h]
  const int64_t batch = x.size(0), seq = x.size(1);
  Routing routing = route_tokens(x.reshape({batch * seq, config.dim}), q, in.query_padding);
  return finish(routing, project_out(heads, routing.gates.reshape({batch, seq, config.heads})));
}

void MoHAttention::set_aux_peers(int64_t routed_layers) {
  HEADROOM_CHECK(routed_layers > 0, "[MoHAttention] set_aux_peers needs at least this layer, got ", routed_layers);
  aux_peers_ = routed_layers;
}

std::string MoHAttention::summary() const {
  const int64_t shared = moh_config.shared_heads, k = moh_config.routed_k;
  return "moh: " + std::to_string(shared) + " shared + top-" + std::to_string(k) + " of " +
         std::to_string(routed_heads()) + " routed heads (" + std::to_string(active_heads()) + " of " +
         std::to_string(config.heads) + " active)";
}

int64_t MoHAttention::macs(int64_t T, int64_t S, bool causal) const {
  const int64_t d = config.dim, d_h = head_dim, active = active_heads();
  const int64_t shared = moh_config.shared_heads, k = moh_config.routed_k;
  const int64_t kv_macs = 2 * S * d * config.kv_heads * d_h;
  const int64_t core = 2 * attended_pairs(T, S, causal) * d_h * active;
  const int64_t out = T * active * d_h * d;
  const bool qnorm = moh_config.router == MoHConfig::Router::qnorm;
  // Every head's query when it is needed to route (qnorm) or to rotate (rope), else the active ones.
  const int64_t queries = T * d * (qnorm || config.rope ? config.heads : active) * d_h;
  int64_t router = 0;
  if (qnorm) {
    router = k > 0 ? T * routed_heads() * d_h : 0;  // the squared norms
    if (moh_config.ste == MoHConfig::Ste::all) return MultiHeadAttention::macs(T, S, causal) + router;  // dense
  } else {
    const int64_t router_rows =
        (k > 0 ? routed_heads() : 0) + (shared > 1 ? shared : 0) + (shared > 0 && k > 0 ? 2 : 0);
    router = T * d * router_rows;
  }
  return kv_macs + queries + core + out + router;
}

std::shared_ptr<MoHAttention> moh_from_mha(const MultiHeadAttention& dense, int64_t shared_heads, int64_t routed_k,
                                           bool allow_full_routing) {
  MoHConfig cfg;
  cfg.mha = dense.config;
  cfg.shared_heads = shared_heads;
  cfg.routed_k = routed_k;
  cfg.router = MoHConfig::Router::qnorm;
  cfg.allow_full_routing = allow_full_routing;
  Generator unused(0);  // qnorm has no router; the projections' draws are overwritten below
  auto moh = std::make_shared<MoHAttention>(cfg, unused);
  moh->to(dense.q_proj->weight.dtype());
  moh->to(dense.device());
  moh->load_state_dict(dense.state_dict());
  moh->train(dense.is_training());
  return moh;
}

}  // namespace headroom
