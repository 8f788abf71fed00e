#pragma once
// MoH: multi-head attention as a mixture of heads (Jin et al. 2024,
// methods.md §3).  The h heads and projections of MHA stay; a tiny router
// gives each token a gate per head, and the output is Σ_i g_i H_i W_O^i:
//
//   heads 0 .. h_s-1           shared: always active
//   heads h_s .. h-1           routed: each token activates its top-K_r
//   out = Σ_{active i} g_i · H_i W_O^i + b_O     (the bias is not gated)
//
// Gates (learned router, weights W_r [h-h_s, d], W_s [h_s, d], W_h [2, d], no biases):
//   r = softmax(x W_rᵀ), M = top-K_r mask of r
//   code (methods.md §3.3, the default):
//     g_routed = K_r · (r ⊙ M) / max(Σ r ⊙ M, ε);  g_shared = h_s · softmax(x W_sᵀ)
//     (the constant 1 when h_s = 1);  [a1, a2] = 2 · softmax(x W_hᵀ)
//   paper (methods.md §3.2):
//     g_routed = r ⊙ M;  g_shared = softmax(x W_sᵀ);  [a1, a2] = softmax(x W_hᵀ)
//   g_shared ← a1 · g_shared, g_routed ← a2 · g_routed  only when h_s > 0 and K_r > 0.
//   K_r = 0 requires h_s = h (every head shared, soft re-weighting, no top-k).
//
// Parameter-free router (qnorm, methods.md §3.6, for conversions from a dense model):
// the score of routed head i is ‖q_i‖₂ (the layer's own query, before any
// positional rotation), divided by the unbiased std over the routed heads
// (std ≥ 1e-6), r = softmax of that, top-K_r → gates exactly 0/1 (shared 1).
// Backward uses a straight-through estimator (MoHConfig::Ste):
//   selected (default)  g = M + M ⊙ (r − stopgrad(r)): ∂L/∂r_i = M_i ∂L/∂g_i,
//                       the selected heads only, whose H_i the routed path has;
//   all                 g = M + r − stopgrad(r) over every routed head, the
//                       literal estimator: ∂L/∂r_i = ∂L/∂g_i = <H_i W_O^i, ∂L/∂out>
//                       also for unselected heads, so forward() then runs the
//                       dense path (every H_i is needed for the gradient).
// Both have the 0/1 forward gates.  GateScaling does not apply to qnorm.
//
// Load balance (training only, layers with K_r > 0), P_e = mean_t r_t[e],
// f_e = mean_t M_t[e]:  paper L_b = Σ_e P_e f_e;  code L_b = E_r · Σ_e P_e f_e.
// The layer returns beta · L_b / n as its aux loss, n being the number of
// routed MoH layers in its model (set_aux_peers), so the model's sum of aux
// losses is beta times their mean, as in the official code.  The means run
// over every query token (BalancePadding::include, the default: padded
// tokens are routed and counted), or over the tokens that
// AttentionInput::query_padding marks real (exclude).  Attention itself
// ignores query_padding, as in MHA.
//
// RoPE (MHAConfig::rope) rotates self-attention's queries and keys as in MHA;
// the routed path then computes every head's rotated query and picks the
// active rows.
// Two forward paths with equal outputs and gradients:
//   forward()                  computes only the (token, head) pairs that are
//                              active: Q rows per head (grouped GEMM reading
//                              x through the plan), routed attention, gated
//                              head rows through O per head, summed per token.
//                              K and V are computed for every head and token.
//   forward_dense_reference()  every head, then gates before W_O (the
//                              official code's computation).
#include <memory>

#include "headroom/models/mha.h"

namespace headroom {

struct MoHConfig {
  enum class GateScaling { code, paper };
  enum class Router { learned, qnorm };
  enum class LoadBalance { code, paper };
  enum class Ste { selected, all };                // qnorm router's estimator (above)
  enum class BalancePadding { include, exclude };  // which query tokens the load balance averages over

  MHAConfig mha;  // d, h, h_kv, bias, attention dropout, d_h, RoPE
  // -1 (the default): a quarter of the heads each, at least 1, so half the
  // heads are active per token (h = 4: 1 shared + top-1 of 3 routed).
  int64_t shared_heads = -1;  // h_s: heads 0 .. h_s-1 are always active
  int64_t routed_k = -1;      // K_r: routed heads per token (0: every head shared, h_s = h)
  GateScaling scaling = GateScaling::code;
  Router router = Router::learned;
  LoadBalance load_balance = LoadBalance::code;
  Ste ste = Ste::selected;
  BalancePadding balance_padding = BalancePadding::include;
  // Weight of the load-balance loss: the model's aux losses sum to beta ·
  // the mean of L_b over its routed layers.
  double beta = 0.01;
  // A layer whose every head is active (h_s + K_r = h) routes nothing: MHA
  // at a higher cost.  It is refused unless this is set.
  bool allow_full_routing = false;
};

class MoHAttention : public MultiHeadAttention {
 public:
  // Router weights (learned) are drawn N(0, 0.02²): the official ViT code's
  // trunc_normal_(std=0.02) truncates at ±2, i.e. at 100 std, so the draws
  // have the same distribution.
  explicit MoHAttention(const MoHConfig& config, Generator& gen = default_generator());

  AttentionOutput forward(const AttentionInput& in) override;  // the routed path (qnorm with Ste::all: dense)
  AttentionOutput forward_dense_reference(const AttentionInput& in);
  std::string kind() const override { return "moh"; }
  std::string summary() const override;  // e.g. "moh: 1 shared + top-1 of 3 routed heads (2 of 4 active)"
  bool has_aux_loss() const override { return moh_config.routed_k > 0; }
  void set_aux_peers(int64_t routed_layers) override;
  // K and V for all S keys; Q, the attention core and O for the h_s + K_r
  // active heads only; the router (qnorm: all of Q, plus the norms).  With
  // rope on, all of Q (counted as self-attention); qnorm with Ste::all, the
  // dense path.
  int64_t macs(int64_t T, int64_t S, bool causal) const override;

  int64_t active_heads() const { return moh_config.shared_heads + moh_config.routed_k; }
  int64_t routed_heads() const { return config.heads - moh_config.shared_heads; }  // E_r

  MoHConfig moh_config;  // shared_heads and routed_k resolved; `config` (inherited) is the resolved MHAConfig
  // Learned router only; each undefined where methods.md §3.3 step 1 has none.
  std::shared_ptr<Linear> router_routed;  // W_r [h - h_s, d]: when K_r > 0
  std::shared_ptr<Linear> router_shared;  // W_s [h_s, d]: when h_s > 1
  std::shared_ptr<Linear> router_mix;     // W_h [2, d]: when h_s > 0 and K_r > 0

 private:
  struct Routing;
  struct RouterLogits;
  // x: [N, d]; q: [B, h, T, d_h] for qnorm (unrotated), else unused;
  // query_padding: b8 [B, T] or undefined, for BalancePadding::exclude.
  Routing route_tokens(const Tensor& x, const Tensor& q, const Tensor& query_padding) const;
  RouterLogits router_logits(const Tensor& x) const;
  Tensor routed_scores(const RouterLogits& logits, const Tensor& q) const;  // r [N, E_r]
  Tensor routed_gates(const Tensor& r, const Tensor& mask) const;
  Tensor shared_gates(const RouterLogits& logits, const Tensor& x) const;
  // token_head_rows: i32 [N*k], grouped row r's row token * h + head of an [N, h] layout;
  // q: every head's query [B, h, T, d_h] as attention uses it (rotated), or
  // undefined: the active rows are computed from x.
  Tensor query_rows(const Tensor& x, const Tensor& q, const RoutePlan& plan, const Tensor& token_head_rows) const;
  Tensor load_balance(const Routing& routing) const;
  AttentionOutput finish(const Routing& routing, const Tensor& out) const;
  // W_oᵀ by head, [h, d_h, d], the layout segment_matmul_scatter takes.
  // Without autograd (evaluation, decoding) the copy is kept until W_o changes
  // (another storage or version): a one-token step would otherwise spend more
  // copying W_o than computing with it (docs/performance.md, "Decoding").
  Tensor out_weights_by_head();
  struct CachedWeight {
    Tensor source;  // shares the storage the copy was made from
    uint64_t version = 0;
    Tensor value;
  };
  CachedWeight w_out_by_head_;
  int64_t aux_peers_ = 1;  // routed MoH layers in the model: the aux loss is beta / aux_peers_ · L_b
};

// A MoH layer with the dense layer's weights (copied) and configuration
// (head width, RoPE), the first h_s heads shared and the qnorm router
// choosing K_r of the others per token.
std::shared_ptr<MoHAttention> moh_from_mha(const MultiHeadAttention& dense, int64_t shared_heads, int64_t routed_k,
                                           bool allow_full_routing = false);

}  // namespace headroom
