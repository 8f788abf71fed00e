#include "headroom/autograd/gradcheck.h"

#include <cmath>
#include <sstream>

#include "headroom/core/grad_mode.h"
#include "headroom/core/rng.h"

namespace headroom::autograd {
namespace {

// sum(y * r) in double, y and r of one shape.
double project(const Tensor& y, const std::vector<double>& r) {
  std::vector<double> values = y.to_vector<double>();
  double total = 0;
  for (size_t i = 0; i < values.size(); ++i) total += values[i] * r[i];
  return total;
}

// Offsets (in elements) of x's elements in row-major order.
std::vector<int64_t> element_offsets(const Tensor& x) {
  std::vector<int64_t> offsets;
  for_each_offset(x.shape(), x.strides(), x.offset(), [&](int64_t off) { offsets.push_back(off); });
  return offsets;
}

}  // namespace

GradcheckResult gradcheck(const GradcheckFn& fn, const std::vector<Tensor>& inputs, double eps, double atol,
                          double rtol) {
  GradcheckResult result;
  for (const Tensor& x : inputs) {
    x.zero_grad();
    if (x.requires_grad()) HEADROOM_CHECK(x.is_leaf(), "[gradcheck] inputs must be leaf tensors");
  }
  // Analytic gradients: backward of y with seed r.
  Tensor y = fn(inputs);
  HEADROOM_CHECK(y.requires_grad(),
                 "[gradcheck] the function's output does not require grad; "
                 "no input that requires grad reaches it");
  Generator gen(20261130);
  std::vector<double> r(y.numel());
  for (double& v : r) v = 2 * gen.next_uniform() - 1;
  Tensor seed = Tensor::from_vector(r, y.shape()).to(y.dtype());
  y.backward(seed);

  NoGradGuard no_grad;
  std::ostringstream report;
  for (size_t k = 0; k < inputs.size(); ++k) {
    const Tensor& x = inputs[k];
    if (!x.defined() || !x.requires_grad()) continue;
    HEADROOM_CHECK(x.dtype() == DType::f64, "[gradcheck] input ", k, " must be f64 for finite differences, got ",
                   x.dtype());
    std::vector<double> analytic =
        x.grad().defined() ? x.grad().to_vector<double>() : std::vector<double>(x.numel(), 0.0);
    std::vector<int64_t> offsets = element_offsets(x);
    for (size_t i = 0; i < offsets.size(); ++i) {
      // Perturb the element in the input's own storage (views included),
      // bumping its version as every in-place write does, so that what was
      // derived from the old values (MoH's kept W_o copy) is derived again.
      double& value = static_cast<double*>(x.impl_shared()->storage->data)[offsets[i]];
      const double saved = value;
      auto set = [&](double v) {
        value = v;
        x.bump_version();
      };
      set(saved + eps);
      double plus = project(fn(inputs), r);
      set(saved - eps);
      double minus = project(fn(inputs), r);
      set(saved);
      double numeric = (plus - minus) / (2 * eps);
      double error = std::abs(analytic[i] - numeric);
      result.max_abs_error = std::max(result.max_abs_error, error);
      if (error > atol + rtol * std::abs(numeric) && result.ok) {
        result.ok = false;
        report << "[gradcheck] input " << k << " (shape " << shape_str(x.shape()) << ") element " << i << ": analytic "
               << analytic[i] << " vs numeric " << numeric << " (error " << error << ")";
      }
    }
  }
  result.message = result.ok ? "ok" : report.str();
  return result;
}

}  // namespace headroom::autograd
