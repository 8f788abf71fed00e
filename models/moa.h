#pragma once
// MoA: Mixture of Attention Heads (Zhang et al., EMNLP 2022), as the official
// code computes it (methods.md §2).  A pool of E attention experts replaces
// the h heads; every token picks k of them with a softmax router.  Each
// expert owns a query and an output projection; the key and value
// projections are single and shared (multi-query attention of width d_h).
//
//   z = x W_gᵀ                      router logits [N, E]       (N = B*T)
//   p = softmax_E(z), pad rows 0    taken over ALL E experts, before top-k
//   (g, e) = top-k of p             ties: lowest index; no renormalisation
//   K = m W_kᵀ, V = m W_vᵀ          [B, S, d_h]                (m = memory or x)
//   y_t = Σ_j g_tj · softmax(x_t W_q^e (K)ᵀ / √d_h + mask) V W_o^e     (e = e_tj)
//   with rope on (self-attention), x_t W_q^e and K rotated to their positions
//
// Only the N·k selected (token, expert) pairs are computed: they travel
// through a route plan (ops/routing.h) as gather_segment_matmul(x, W_q) →
// routed_attention → gate the rows → segment_matmul_scatter(W_o).
//
// Pads (AttentionInput::query_padding): their router row p is 0, so their k
// slots get gate 0.  They keep their rows in the plan (a plan has k rows per
// token) and are multiplied by that 0 gate: output exactly 0, no gradient to
// anything.  Any other gate that underflows to 0 is treated the same way,
// which equals the official code's dropping of zero gates; load counts (and
// so the switch loss) only count gates > 0.
#include <cstdint>
#include <memory>

#include "headroom/core/rng.h"
#include "headroom/models/attention.h"
#include "headroom/models/layers.h"
#include "headroom/ops/routing.h"

namespace headroom {

// How a MoA layer's aux loss joins the task loss (methods.md §2.5 item 5); with either,
// the model's aux losses are summed over its MoA layers.
enum class MoAAuxNormalisation {
  reference,  // added to the summed NLL, the total divided by the target-token count (fairseq; default)
  mean,       // added to the mean loss: the aux weights are relative to the per-token loss
};

struct MoAConfig {
  int64_t dim = 0;          // d
  int64_t num_experts = 8;  // E
  int64_t k = 2;            // experts per token, 1 <= k <= E (the official code's "attention heads")
  int64_t head_dim = 0;     // d_h, the width of every expert and of the shared K and V
  double attn_dropout = 0;  // on the attention probabilities, training only
  // Aux loss weights (methods.md §2.5 item 4; the WMT recipe's values).
  double w_switch = 0.01, w_z = 0.001, w_cv = 0;
  bool noisy_gating = false;  // training only: z += ε·(softplus(x W_noiseᵀ) + 0.01), ε ~ N(0, 1)
  int64_t sample_topk = 0;    // training only: the last s of the k experts are sampled (methods.md §2.3 step 4)
  int64_t kv_dim = 0;         // width of the key/value source (memory); 0 = dim
  MoAAuxNormalisation aux_normalisation = MoAAuxNormalisation::reference;
  // k = E runs every expert for every token: nothing is routed.  Refused unless set.
  bool allow_full_routing = false;
  // Rotary position embedding (attention.h) of self-attention's expert
  // queries and shared keys; cross-attention ignores it.  Needs an even head_dim.
  bool rope = false;
  double rope_theta = 10000;
};

// E independent [in, out] matrices applied to the rows of a route plan
// (segment e is expert e).  Xavier-uniform per expert: U(-a, a),
// a = √(6 / (in + out)).
class ExpertLinear : public Module {
 public:
  ExpertLinear(int64_t experts, int64_t in_features, int64_t out_features, Generator& gen = default_generator());
  Tensor forward(const Tensor& x_grouped, const RoutePlan& plan) const;  // [N*k, in] -> [N*k, out]
  Tensor weight;                                                         // [E, in, out]
};

// The routing decision of one call (methods.md §2.3 steps 2-4).
struct MoARouting {
  Tensor logits;   // z [N, E], noisy when noisy gating is on and training
  Tensor probs;    // p [N, E], pad rows 0
  Tensor indices;  // i32 [N, k]: the chosen experts, best first
  Tensor gates;    // [N, k]: p at the chosen experts
  Tensor chosen;   // [N, E]: the gates in place, p where an expert was chosen, else 0
  Tensor counts;   // f32 [E]: c_e = (token, slot) pairs with gate > 0
};

class MoAAttention : public Attention {
 public:
  explicit MoAAttention(const MoAConfig& config, Generator& gen = default_generator());

  AttentionOutput forward(const AttentionInput& in) override;
  std::string kind() const override { return "moa"; }
  std::string summary() const override;  // e.g. "moa: top-2 of 8 experts of width 16"
  bool has_aux_loss() const override { return true; }
  // methods.md §2.9: T·d·E (router) + 2·S·d_kv·d_h (shared K, V) + 2k·T·d·d_h (expert
  // projections) + 2k·(attended pairs)·d_h (scores and A·V).
  int64_t macs(int64_t T, int64_t S, bool causal) const override;

  // The same layer computed densely, for tests: every expert's query for
  // every token, attention over the shared K/V, every expert's output
  // projection, summed with the dense gate matrix G = p ⊙ selected.  Same
  // routing, aux loss and stats as forward().
  AttentionOutput forward_dense_reference(const AttentionInput& in);

  // x_rows [N, d]; query_padding b8 [N] or undefined.
  MoARouting route_tokens(const Tensor& x_rows, const Tensor& query_padding);
  // w_cv·cv² + w_switch·L_switch + w_z·L_z of one routing (methods.md §2.5), a scalar.
  Tensor aux_loss(const MoARouting& routing) const;

  Rope rope() const { return {config.rope, config.rope_theta}; }

  MoAConfig config;
  std::shared_ptr<Linear> router;          // router.weight [E, d], zeros
  std::shared_ptr<Linear> noise;           // noise.weight [E, d], zeros; only with noisy gating
  std::shared_ptr<Linear> k_proj, v_proj;  // weight [d_h, d_kv]
  std::shared_ptr<ExpertLinear> q_proj;    // weight [E, d, d_h]
  std::shared_ptr<ExpertLinear> o_proj;    // weight [E, d_h, d]

 private:
  struct Prepared;  // the pieces forward() and forward_dense_reference() share
  Prepared prepare(const AttentionInput& in);
  // route_tokens with the router logits [N, E] already computed.
  MoARouting route_logits(const Tensor& logits, const Tensor& x_rows, const Tensor& query_padding);
  AttentionOutput finish(const Prepared& prepared, const Tensor& out_rows) const;
  Generator* gen_;  // noise and sampling
};

}  // namespace headroom
