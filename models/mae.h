#pragma once
// MAE, the Mixture of Attentive Experts (Peng et al., ACL 2020, "A Mixture of
// h−1 Heads is Better than h Heads"; methods.md §4).  Expert i is MHA without
// head i, the others rescaled by h/(h−1); a gate MLP gives input-dependent
// responsibilities g over the h experts.  Swapping the sums (methods.md §4.2) turns the
// mixture into MHA with one weight per head:
//
//   MAE(x) = Σ_i g_i f_i(x) = Σ_j w_j H_j W_O^j + b_O,   w_j = (h/(h−1)) (1 − g_j)
//   g = softmax(fc2(act(fc1(x̄))))       x̄: a mean of the inputs (gate_input)
//
// so uniform g (the zero-initialised gate's output) is exactly MHA.  What the
// layer computes depends on its mode (set by the trainer, models/bcd.h) while
// training, and on `inference` in eval mode:
//   uniform         g = 1/h, plain MHA (the warm start)
//   mixture         the weights w_j above; the gate gets gradients (G-step, joint)
//   sampled_expert  g under no-grad, one expert i ~ Categorical(g) per sequence
//                   or token: w_i = 0, the others h/(h−1) (F-step, head dropout)
//   top1 (eval)     like sampled_expert with i = argmax g (ties: lowest index)
//
// Parameters: MHA's (q_proj, k_proj, v_proj, o_proj: the experts, θ) and
// gate.fc1, gate.fc2 (the gate, φ).  MAE has no auxiliary loss.
#include <memory>
#include <vector>

#include "headroom/models/mha.h"

namespace headroom {

struct MAEConfig {
  MHAConfig mha;  // heads >= 2

  // What the gate reads (methods.md §4.3, §4.4).  Padded positions are left
  // out of every mean: query_padding (or, in self-attention, the key padding)
  // for x, key_padding for the memory.
  enum class GateInput {
    auto_,        // source_mean in an encoder-decoder decoder (cross-attention, or self-attention
                  // given the source), prefix_mean for other causal layers, else seq_mean
    seq_mean,     // mean of x over the sequence: one g per sequence (rejected when causal)
    prefix_mean,  // mean of x over positions <= t: one g per token, exact under the KV cache
    source_mean,  // mean of the memory (cross-attention only): one g per sequence
  };
  GateInput gate_input = GateInput::auto_;

  int64_t gate_hidden = 0;  // width of the gate MLP's hidden layer; 0 = d
  enum class GateActivation { relu, tanh };
  GateActivation gate_activation = GateActivation::relu;

  // F-step sampling granularity; auto_ follows the gate (token for prefix_mean).
  enum class SamplePer { auto_, sequence, token };
  SamplePer sample_per = SamplePer::auto_;

  // Eval-mode behaviour: the deterministic mixture, or the arg-max expert only.
  enum class Inference { mixture, top1 };
  Inference inference = Inference::mixture;
};

// The gate MLP: g = softmax over the h experts of fc2(act(fc1(summary))).
// fc2 starts at zero, so g starts uniform and the layer starts as MHA.
class MAEGate : public Module {
 public:
  MAEGate(int64_t dim, int64_t hidden, int64_t experts, MAEConfig::GateActivation activation, Generator& gen);
  Tensor forward(const Tensor& summary) const;  // [..., d] -> [..., h]
  std::shared_ptr<Linear> fc1, fc2;
  MAEConfig::GateActivation activation;
};

// The training-mode forward, switched per block by the trainer.
enum class MAEMode { uniform, mixture, sampled_expert };

class MAEAttention : public MultiHeadAttention {
 public:
  // gen initialises the weights and draws the F-step samples; it is kept by
  // reference and must outlive the layer.
  explicit MAEAttention(const MAEConfig& config, Generator& gen = default_generator());

  // stats.gates [N, h]: the responsibilities g of each query token (N = B*T);
  // stats.indices [N, 1]: the expert used (sampled_expert, top1; else undefined);
  // stats.load [h]: tokens per used expert, or the summed responsibilities.
  AttentionOutput forward(const AttentionInput& in) override;
  std::string kind() const override { return "mae"; }
  std::string summary() const override;  // e.g. "mae: 4 experts of 3 heads of width 16"
  // MHA's MACs plus the gate MLP: once per sequence, or per query token for a
  // per-token gate (prefix_mean, which auto_ picks when causal).
  int64_t macs(int64_t T, int64_t S, bool causal) const override;

  void set_mode(MAEMode mode) { mode_ = mode; }
  MAEMode mode() const { return mode_; }

  // The responsibilities g: [B, 1, h] for a per-sequence gate, [B, T, h] per
  // token.  Advances in.cache's gate state (prefix sums, source mean) as forward does.
  Tensor responsibilities(const AttentionInput& in);

  std::vector<Tensor> gate_parameters() const;    // φ
  std::vector<Tensor> expert_parameters() const;  // θ: every other parameter

  MAEConfig mae_config;
  std::shared_ptr<MAEGate> gate;

 private:
  MAEConfig::GateInput resolve_gate_input(const AttentionInput& in) const;
  bool sample_per_token(MAEConfig::GateInput source) const;
  Tensor sample_experts(const Tensor& g);  // g: [B, R, h] -> i32 [B, R]

  MAEMode mode_ = MAEMode::mixture;
  Generator* sampler_;
};

}  // namespace headroom
