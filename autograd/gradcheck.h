#pragma once
// gradcheck: compares the gradients autograd computes for fn with central
// finite differences.  Public, so users can check their own ops.
//
// fn maps the inputs to one output tensor y.  The check reduces y to the
// scalar L = sum(y * r) with a fixed random r, so every output element is
// tested, and compares dL/dx from backward() with
// (L(x + eps) - L(x - eps)) / (2 eps) for every element of every input that
// requires grad.  Use f64 inputs: f32 differences are too noisy for tight
// tolerances.  An element passes when |analytic - numeric| <= atol + rtol * |numeric|.
#include <functional>
#include <string>
#include <vector>

#include "headroom/core/tensor.h"

namespace headroom::autograd {

struct GradcheckResult {
  bool ok = true;
  double max_abs_error = 0;
  std::string message;  // names the input, element and both values of the worst failure
  explicit operator bool() const { return ok; }
};

using GradcheckFn = std::function<Tensor(const std::vector<Tensor>&)>;

GradcheckResult gradcheck(const GradcheckFn& fn, const std::vector<Tensor>& inputs, double eps = 1e-6,
                          double atol = 1e-5, double rtol = 1e-3);

}  // namespace headroom::autograd

namespace headroom {
using autograd::gradcheck;
}
