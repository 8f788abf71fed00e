#pragma once
// CUDA kernels of the optimizers and of gradient clipping (models/optim.cpp).
// The update rules are models/optim_update.h's, the same code the CPU loop
// runs, so both devices compute in double and store in the parameter's type.
// No CUDA headers here: models/optim.cpp calls these through the interface.
#include <vector>

#include "headroom/core/tensor.h"
#include "headroom/models/optim_update.h"

namespace headroom::cuda {

struct OptimKernels {
  virtual ~OptimKernels() = default;
  // In place, element by element.  param, grad and the state tensors: one
  // device, one floating dtype (f32 or f64), one shape, all contiguous.
  // momentum_buffer is undefined for SGD without momentum.
  virtual void sgd(const Tensor& param, const Tensor& grad, const Tensor& momentum_buffer,
                   const SgdUpdate& update) = 0;
  virtual void adam(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                    const AdamUpdate& update) = 0;
  // Σ x² over every element of every tensor (f32 or f64, any strides, one
  // device), accumulated in double in a fixed order: an f64 scalar on that
  // device.  No host synchronisation.
  virtual Tensor sum_of_squares(const std::vector<Tensor>& tensors) = 0;
  // x = x * factor in place (computed in double), any strides.
  virtual void scale_(const Tensor& x, double factor) = 0;
};

OptimKernels& optim_kernels();  // throws without CUDA

}  // namespace headroom::cuda
