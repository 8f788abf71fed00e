#pragma once
// Optimizers, gradient clipping and learning-rate schedules, following
// PyTorch's definitions so that a run can be checked against it.
//
//   AdamW opt(model->parameters(), 3e-4);
//   WarmupCosine schedule{100, 10000, 0.1};
//   for (int64_t step = 0; step < 10000; ++step) {
//     opt.zero_grad();
//     loss(model).backward();
//     clip_grad_norm(opt.params(), 1.0);
//     opt.set_lr(3e-4 * schedule.factor(step + 1));  // update step + 1: the first at lr / warmup, not 0
//     opt.step();
//   }
//
// Updates run under NoGradGuard, write the parameters in place and bump
// their versions; parameters without a gradient are skipped.  Arithmetic is
// done in double and stored in the parameter's dtype (f32 or f64), by the
// rules of ops/kernels/optim.h on either device (one fused kernel per
// parameter on CUDA).
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "headroom/core/grad_mode.h"
#include "headroom/core/safetensors.h"
#include "headroom/core/tensor.h"

namespace headroom {

class Optimizer {
 public:
  // params: floating-point, contiguous leaves, on the CPU or CUDA; at least one.
  // Per-element state (moments, momentum) lives on its parameter's device,
  // step counts on the CPU; load_state moves loaded entries there.
  Optimizer(std::vector<Tensor> params, double lr, const char* name);
  virtual ~Optimizer() = default;

  virtual void step() = 0;
  void zero_grad();  // drops every parameter's gradient

  double lr() const { return lr_; }
  void set_lr(double lr);
  int64_t steps() const { return steps_; }  // how many times step() has run
  const std::vector<Tensor>& params() const { return params_; }

  // Checkpointing: "optim.steps" (f64 scalar) and one entry per state tensor,
  // "optim.<slot>.<param index>", e.g. "optim.exp_avg.3".  Save them beside
  // the model's tensors (the names do not collide) or in a sibling file.
  NamedTensors state() const;
  // Restores what state() returned.  Entries whose names do not begin with
  // "optim." are ignored, so a whole checkpoint file can be passed; unknown
  // slots, bad indices and shape or dtype mismatches throw.
  void load_state(const NamedTensors& entries);

 protected:
  // A kind of per-parameter state.  per_element: a tensor shaped and typed
  // like the parameter (moments, momentum); otherwise an f64 scalar (counts).
  void declare_slot(const std::string& slot, bool per_element = true);
  bool has_state(const std::string& slot, size_t param) const;
  // The state tensor, created as zeros on first use.
  Tensor& state_tensor(const std::string& slot, size_t param);

  // The loop every step() shares: counts the step, then for each parameter
  // with a gradient calls fn(index, contiguous gradient, T{}) with T the
  // parameter's element type, under NoGradGuard, and bumps the version.
  template <typename Fn> void update_each(Fn&& fn);

  const char* name_;

 private:
  Tensor checked_grad(size_t i) const;

  struct Slot {
    bool per_element = true;
    std::vector<Tensor> tensors;  // one per parameter, undefined until first used
  };
  std::vector<Tensor> params_;
  double lr_;
  int64_t steps_ = 0;
  std::map<std::string, Slot> slots_;
};

// p -= lr * d, with d = grad + weight_decay * p, and with momentum:
// buf = momentum * buf + d (buf = d at the first step), d = buf, or
// d = d + momentum * buf when nesterov (PyTorch's SGD without dampening).
class SGD : public Optimizer {
 public:
  SGD(std::vector<Tensor> params, double lr, double momentum = 0, double weight_decay = 0, bool nesterov = false);
  void step() override;

 private:
  double momentum_, weight_decay_;
  bool nesterov_;
};

// PyTorch's Adam: weight decay as L2 (grad += weight_decay * p), moments
// m and v, bias correction, p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps).
// The step count t is kept per parameter, as PyTorch does.
class Adam : public Optimizer {
 public:
  Adam(std::vector<Tensor> params, double lr, double beta1 = 0.9, double beta2 = 0.999, double eps = 1e-8,
       double weight_decay = 0);
  void step() override;

 protected:
  // decoupled: AdamW's p *= 1 - lr * weight_decay instead of the L2 term.
  Adam(std::vector<Tensor> params, double lr, double beta1, double beta2, double eps, double weight_decay,
       bool decoupled, const char* name);

 private:
  double beta1_, beta2_, eps_, weight_decay_;
  bool decoupled_;
};

// PyTorch's AdamW: p *= 1 - lr * weight_decay, then the Adam update.
class AdamW : public Adam {
 public:
  AdamW(std::vector<Tensor> params, double lr, double beta1 = 0.9, double beta2 = 0.999, double eps = 1e-8,
        double weight_decay = 0.01);
};

// Scales all gradients together so that their global L2 norm is at most
// max_norm (by max_norm / (norm + 1e-6), as PyTorch does) and returns the
// norm before clipping.  A NaN or infinite norm is returned with the
// gradients untouched, for the caller to act on.  The gradients share one
// device; on CUDA the norm is one device reduction and one copy to the host.
double clip_grad_norm(const std::vector<Tensor>& params, double max_norm);

// ---- learning-rate schedules: factor(step) multiplies the base rate ------------

// Linear warm-up from 0 at step 0 to 1 at step `warmup`, then a cosine decay
// to min_ratio at step `total` (held there afterwards).
struct WarmupCosine {
  int64_t warmup = 0, total = 0;
  double min_ratio = 0;
  double factor(int64_t step) const;
};

// Vaswani et al.'s schedule, min(step^-0.5, step * warmup^-1.5), scaled to
// reach 1 at the end of warm-up: min(step / warmup, sqrt(warmup / step)).
struct InverseSqrt {
  int64_t warmup = 1;
  double factor(int64_t step) const;
};

// ---- template definitions ----------------------------------------------

template <typename Fn> void Optimizer::update_each(Fn&& fn) {
  NoGradGuard no_grad;
  ++steps_;
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor grad = checked_grad(i);
    if (!grad.defined()) continue;
    if (params_[i].dtype() == DType::f32) fn(i, grad, float{});
    else fn(i, grad, double{});
    params_[i].bump_version();
  }
}

// Whether a checkpoint entry is optimizer state rather than a model tensor:
// "optim." entries, and those of MAE's two BCD optimizers ("expert.optim.",
// "gate.optim.").
bool is_optimizer_entry(const std::string& name);

}  // namespace headroom
