#pragma once
// The per-element update rules of the optimizers (models/optim.h), shared by
// the CPU loop (models/optim.cpp) and a device's kernels (CUDA: cuda/optim.cu)
// so the devices compute the same thing: arithmetic in double, the result
// stored in the parameter's type T (float or double); and the interface of a
// device's optimizer and gradient-clipping kernels.
#include <math.h>

#include <cstdint>
#include <vector>

#include "headroom/core/rng.h"  // HEADROOM_HOST_DEVICE
#include "headroom/core/tensor.h"

namespace headroom::kernels {

// One SGD step of one parameter tensor:
//   d = g + weight_decay * p;  with momentum: b = momentum * b + d (b = d at the first
//   step), d = nesterov ? d + momentum * b : b;  then p -= lr * d.
struct SgdUpdate {
  double lr = 0, momentum = 0, weight_decay = 0;
  bool nesterov = false;
  bool first = false;  // the momentum buffer is not initialised yet

  // buffer: the element's momentum buffer, null without momentum.
  template <typename T> HEADROOM_HOST_DEVICE void apply(T& p, T g, T* buffer) const {
    double d = double(g) + weight_decay * double(p);
    if (buffer) {
      const double b = first ? d : momentum * double(*buffer) + d;
      *buffer = static_cast<T>(b);
      d = nesterov ? d + momentum * b : b;
    }
    p = static_cast<T>(double(p) - lr * d);
  }
};

// One Adam / AdamW step of one parameter tensor at step count t, with the
// per-tensor constants folded in (see AdamUpdate::at):
//   g' = g + l2 * p;  m = b1 m + (1 - b1) g';  v = b2 v + (1 - b2) g'^2
//   p = p * decay - step_size * m / (sqrt(v) / bias2_sqrt + eps)
struct AdamUpdate {
  double beta1 = 0, beta2 = 0, eps = 0;
  double step_size = 0;   // lr / (1 - beta1^t)
  double bias2_sqrt = 0;  // sqrt(1 - beta2^t)
  double decay = 1;       // AdamW: 1 - lr * weight_decay (p shrinks first); Adam: 1
  double l2 = 0;          // Adam: weight_decay (decay through the gradient); AdamW: 0

  static AdamUpdate at(double t, double lr, double beta1, double beta2, double eps, double weight_decay,
                       bool decoupled) {
    AdamUpdate u;
    u.beta1 = beta1, u.beta2 = beta2, u.eps = eps;
    u.step_size = lr / (1 - pow(beta1, t));
    u.bias2_sqrt = sqrt(1 - pow(beta2, t));
    u.decay = decoupled ? 1 - lr * weight_decay : 1;
    u.l2 = decoupled ? 0 : weight_decay;
    return u;
  }

  template <typename T> HEADROOM_HOST_DEVICE void apply(T& p, T g, T& m, T& v) const {
    const double gj = double(g) + l2 * double(p);
    m = static_cast<T>(beta1 * double(m) + (1 - beta1) * gj);
    v = static_cast<T>(beta2 * double(v) + (1 - beta2) * gj * gj);
    const double denom = sqrt(double(v)) / bias2_sqrt + eps;
    p = static_cast<T>(double(p) * decay - step_size * double(m) / denom);
  }
};

struct OptimKernels {
  virtual ~OptimKernels() = default;
  // In place, element by element.  param, grad and the state tensors: one
  // device, one floating dtype (f32 or f64), one shape, all contiguous.
  // momentum_buffer is undefined for SGD without momentum.
  virtual void sgd(const Tensor& param, const Tensor& grad, const Tensor& momentum_buffer, const SgdUpdate& update) = 0;
  virtual void adam(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                    const AdamUpdate& update) = 0;
  // Σ x² over every element of every tensor (f32 or f64, any strides, one
  // device), accumulated in double in a fixed order: an f64 scalar on that
  // device.  No host synchronisation.
  virtual Tensor sum_of_squares(const std::vector<Tensor>& tensors) = 0;
  // x = x * factor in place (computed in double), any strides.
  virtual void scale_(const Tensor& x, double factor) = 0;
};

}  // namespace headroom::kernels
