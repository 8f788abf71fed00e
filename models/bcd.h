#pragma once
// Block coordinate descent for MAE (methods.md §4.5): the training steps are
// split into blocks that update either the experts θ (every parameter that is
// not a gate parameter) or the gates φ, never both:
//
//   warm   g fixed to uniform (plain MHA), θ updated        (warm_start_updates steps)
//   F      one sampled expert per sequence/token, θ updated (f_updates steps)
//   G      the full mixture, φ updated                      (g_updates steps)
//   joint  the mixture, θ and φ together (the NoBCD baseline, training = joint)
//
// After the warm start, BCD alternates F, G, F, G, ... (F first: a G-step on
// untrained experts teaches the gate nothing).  θ and φ have separate
// optimizers; the frozen block's parameters get no gradient and its optimizer
// is not stepped, so both stay bitwise unchanged.
//
//   BlockCoordinateDescent bcd(model, layers, 1e-3, 1e-3, {0, 100, 100});
//   for (int64_t step = 0; step < steps; ++step) {
//     bcd.begin_step(step);                 // modes, requires_grad, zero_grad
//     loss(model).backward();
//     clip_grad_norm(bcd.trained_parameters(), 1.0);
//     bcd.finish_step();                    // steps this block's optimizer(s)
//   }
#include <memory>
#include <string>
#include <vector>

#include "headroom/models/mae.h"
#include "headroom/models/optim.h"

namespace headroom {

struct BCDOptions {
  int64_t warm_start_updates = 0;  // plain-MHA updates before the first block
  int64_t f_updates = 1;           // optimizer updates per F-block (> 0)
  int64_t g_updates = 1;           // optimizer updates per G-block (> 0)
  enum class Training { bcd, joint };
  Training training = Training::bcd;
};

class BlockCoordinateDescent {
 public:
  using Layers = std::vector<std::shared_ptr<MAEAttention>>;
  enum class Block { warm, F, G, joint };

  // expert_optimizer steps θ, gate_optimizer steps φ (the layers' gate parameters).
  BlockCoordinateDescent(Layers layers, std::shared_ptr<Optimizer> expert_optimizer,
                         std::shared_ptr<Optimizer> gate_optimizer, const BCDOptions& options);
  // AdamW (PyTorch defaults) for both: θ = the parameters of `model` that are
  // no layer's gate parameter, φ = the layers' gate parameters.
  BlockCoordinateDescent(const Module& model, Layers layers, double expert_lr, double gate_lr,
                         const BCDOptions& options);

  Block block(int64_t step) const;
  std::string block_kind(int64_t step) const;  // "warm", "F", "G" or "joint", for logs

  // Sets every layer's mode and which parameters require gradients for the
  // block of `step`, and drops all gradients.
  void begin_step(int64_t step);
  // Steps the optimizer(s) of the block begin_step chose, then makes every
  // parameter require gradients again.
  void finish_step();
  // The parameters the current block trains (for gradient clipping).
  std::vector<Tensor> trained_parameters() const;

  Optimizer& expert_optimizer() { return *expert_optimizer_; }
  Optimizer& gate_optimizer() { return *gate_optimizer_; }
  const BCDOptions& options() const { return options_; }

 private:
  bool trains_experts() const { return current_ != Block::G; }
  bool trains_gates() const { return current_ == Block::G || current_ == Block::joint; }

  Layers layers_;
  std::shared_ptr<Optimizer> expert_optimizer_, gate_optimizer_;
  BCDOptions options_;
  Block current_ = Block::warm;
  bool in_step_ = false;
};

// The split BCD trains by: φ, every gate parameter of `layers`, and θ, the
// parameters of `model` that are not in φ (for building the two optimizers).
std::vector<Tensor> gate_parameters(const BlockCoordinateDescent::Layers& layers);
std::vector<Tensor> expert_parameters(const Module& model, const BlockCoordinateDescent::Layers& layers);

}  // namespace headroom
