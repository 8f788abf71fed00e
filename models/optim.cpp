#include "headroom/models/optim.h"

#include <cmath>
#include <type_traits>

#include "headroom/core/parallel.h"
#include "headroom/ops/kernels/optim.h"
#include "headroom/ops/kernels/registry.h"

namespace headroom {

// ---- Optimizer -------------------------------------------------------------------

namespace {
void check_hyper(bool ok, const char* optimizer, const char* what, double value) {
  HEADROOM_CHECK(ok, "[", optimizer, "] invalid ", what, ": ", value);
}
}  // namespace

Optimizer::Optimizer(std::vector<Tensor> params, double lr, const char* name)
    : name_(name), params_(std::move(params)), lr_(0) {
  HEADROOM_CHECK(!params_.empty(), "[", name_, "] got an empty parameter list");
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    HEADROOM_CHECK(p.defined(), "[", name_, "] parameter ", i, " is undefined");
    check_floating(name_, p, "parameter");
    HEADROOM_CHECK(p.is_leaf() && p.is_contiguous(), "[", name_, "] parameter ", i, " of shape ", shape_str(p.shape()),
                   " must be a contiguous leaf tensor");
  }
  set_lr(lr);
}

void Optimizer::set_lr(double lr) {
  check_hyper(lr >= 0 && std::isfinite(lr), name_, "learning rate", lr);
  lr_ = lr;
}

void Optimizer::zero_grad() {
  for (const Tensor& p : params_) p.zero_grad();
}

void Optimizer::declare_slot(const std::string& slot, bool per_element) {
  slots_[slot] = Slot{per_element, std::vector<Tensor>(params_.size())};
}

bool Optimizer::has_state(const std::string& slot, size_t param) const {
  return slots_.at(slot).tensors.at(param).defined();
}

Tensor& Optimizer::state_tensor(const std::string& slot, size_t param) {
  Slot& s = slots_.at(slot);
  Tensor& t = s.tensors.at(param);
  if (!t.defined())  // per-element state beside its parameter; counts on the CPU, where they are read
    t = s.per_element ? Tensor::zeros(params_[param].shape(), params_[param].dtype(), params_[param].device())
                      : Tensor::zeros({}, DType::f64);
  return t;
}

Tensor Optimizer::checked_grad(size_t i) const {
  const Tensor& p = params_[i];
  Tensor grad = p.grad();
  if (!grad.defined()) return grad;
  HEADROOM_CHECK(grad.shape() == p.shape() && grad.dtype() == p.dtype(), "[", name_, "] gradient of parameter ", i,
                 " has shape ", shape_str(grad.shape()), " and dtype ", grad.dtype(), ", expected ",
                 shape_str(p.shape()), " and ", p.dtype());
  return grad.contiguous();
}

NamedTensors Optimizer::state() const {
  NamedTensors out;
  out.emplace_back("optim.steps", Tensor::scalar(double(steps_), DType::f64));
  for (const auto& [slot, s] : slots_)
    for (size_t i = 0; i < s.tensors.size(); ++i)
      if (s.tensors[i].defined()) out.emplace_back("optim." + slot + "." + std::to_string(i), s.tensors[i]);
  return out;
}

void Optimizer::load_state(const NamedTensors& entries) {
  std::map<std::string, Slot> loaded = slots_;
  for (auto& entry : loaded) entry.second.tensors.assign(params_.size(), Tensor());
  bool found_steps = false;
  int64_t steps = 0;
  const std::string prefix = "optim.";
  for (const auto& [name, t] : entries) {
    if (name.compare(0, prefix.size(), prefix) != 0) continue;
    HEADROOM_CHECK(t.defined(), "[", name_, "] state entry '", name, "' is undefined");
    if (name == "optim.steps") {
      steps = static_cast<int64_t>(t.item());
      found_steps = true;
      continue;
    }
    // "optim.<slot>.<index>"
    size_t dot = name.rfind('.');
    std::string slot = name.substr(prefix.size(), dot - prefix.size());
    std::string index = name.substr(dot + 1);
    auto it = loaded.find(slot);
    HEADROOM_CHECK(dot > prefix.size() && it != loaded.end(), "[", name_, "] unknown state entry '", name, "'");
    HEADROOM_CHECK(!index.empty() && index.size() < 10 && index.find_first_not_of("0123456789") == std::string::npos &&
                       std::stoul(index) < params_.size(),
                   "[", name_, "] state entry '", name, "' names no parameter (there are ", params_.size(), ")");
    const size_t i = std::stoul(index);
    const Tensor& p = params_[i];
    const Shape shape = it->second.per_element ? p.shape() : Shape{};
    const DType dtype = it->second.per_element ? p.dtype() : DType::f64;
    HEADROOM_CHECK(t.shape() == shape && t.dtype() == dtype, "[", name_, "] state entry '", name, "' has shape ",
                   shape_str(t.shape()), " and dtype ", t.dtype(), ", expected ", shape_str(shape), " and ", dtype);
    it->second.tensors[i] = t.to(it->second.per_element ? p.device() : Device::cpu()).clone();
  }
  HEADROOM_CHECK(found_steps, "[", name_, "] the state has no 'optim.steps' entry");
  slots_ = std::move(loaded);
  steps_ = steps;
}

// ---- SGD ---------------------------------------------------------------------------

SGD::SGD(std::vector<Tensor> params, double lr, double momentum, double weight_decay, bool nesterov)
    : Optimizer(std::move(params), lr, "SGD"), momentum_(momentum), weight_decay_(weight_decay), nesterov_(nesterov) {
  check_hyper(momentum >= 0 && std::isfinite(momentum), name_, "momentum", momentum);
  check_hyper(weight_decay >= 0 && std::isfinite(weight_decay), name_, "weight_decay", weight_decay);
  HEADROOM_CHECK(!nesterov || momentum > 0, "[SGD] nesterov momentum requires momentum > 0");
  declare_slot("momentum_buffer");
}

void SGD::step() {
  update_each([&](size_t i, const Tensor& grad, auto type) {
    using T = decltype(type);
    const Tensor& param = params()[i];
    kernels::SgdUpdate update{lr(), momentum_, weight_decay_, nesterov_, !has_state("momentum_buffer", i)};
    const Tensor buffer = momentum_ != 0 ? state_tensor("momentum_buffer", i) : Tensor();
    if (!param.device().is_cpu()) return kernels::device_kernels(param).optim->sgd(param, grad, buffer, update);
    T* p = param.data<T>();
    const T* g = grad.data<T>();
    T* b = data_or_null<T>(buffer);
    const int64_t n = grad.numel();
    cpu::parallel_for(n, n >= cpu::kParallelMin, [&](int64_t j) { update.apply(p[j], g[j], b ? b + j : nullptr); });
  });
}

// ---- Adam and AdamW --------------------------------------------------------------

Adam::Adam(std::vector<Tensor> params, double lr, double beta1, double beta2, double eps, double weight_decay)
    : Adam(std::move(params), lr, beta1, beta2, eps, weight_decay, false, "Adam") {}

Adam::Adam(std::vector<Tensor> params, double lr, double beta1, double beta2, double eps, double weight_decay,
           bool decoupled, const char* name)
    : Optimizer(std::move(params), lr, name),
      beta1_(beta1),
      beta2_(beta2),
      eps_(eps),
      weight_decay_(weight_decay),
      decoupled_(decoupled) {
  check_hyper(beta1 >= 0 && beta1 < 1, name_, "beta1", beta1);
  check_hyper(beta2 >= 0 && beta2 < 1, name_, "beta2", beta2);
  check_hyper(eps >= 0 && std::isfinite(eps), name_, "eps", eps);
  check_hyper(weight_decay >= 0 && std::isfinite(weight_decay), name_, "weight_decay", weight_decay);
  declare_slot("exp_avg");
  declare_slot("exp_avg_sq");
  declare_slot("step", /*per_element=*/false);
}

void Adam::step() {
  update_each([&](size_t i, const Tensor& grad, auto type) {
    using T = decltype(type);
    const Tensor& param = params()[i];
    const double t = ++state_tensor("step", i).data<double>()[0];
    const kernels::AdamUpdate update =
        kernels::AdamUpdate::at(t, lr(), beta1_, beta2_, eps_, weight_decay_, decoupled_);
    const Tensor& exp_avg = state_tensor("exp_avg", i);
    const Tensor& exp_avg_sq = state_tensor("exp_avg_sq", i);
    if (!param.device().is_cpu())
      return kernels::device_kernels(param).optim->adam(param, grad, exp_avg, exp_avg_sq, update);
    T* p = param.data<T>();
    const T* g = grad.data<T>();
    T* m = exp_avg.data<T>();
    T* v = exp_avg_sq.data<T>();
    // Through parallel_for: its AVX2/AVX-512 clones (core/cpu_dispatch.h) and the threads.
    const int64_t n = grad.numel();
    cpu::parallel_for(n, n >= cpu::kParallelMin, [&](int64_t j) { update.apply(p[j], g[j], m[j], v[j]); });
  });
}

AdamW::AdamW(std::vector<Tensor> params, double lr, double beta1, double beta2, double eps, double weight_decay)
    : Adam(std::move(params), lr, beta1, beta2, eps, weight_decay, true, "AdamW") {}

// ---- gradient clipping ----------------------------------------------------------

namespace {
// Calls fn(element&) for every element of an f32 or f64 CPU tensor, any strides.
template <typename Fn> void for_each_element(const Tensor& t, Fn&& fn) {
  auto walk = [&](auto* data) { for_each_offset(t.shape(), t.strides(), 0, [&](int64_t off) { fn(data[off]); }); };
  if (t.dtype() == DType::f32) walk(t.data<float>());
  else walk(t.data<double>());
}
}  // namespace

double clip_grad_norm(const std::vector<Tensor>& params, double max_norm) {
  HEADROOM_CHECK(max_norm > 0 && std::isfinite(max_norm), "[clip_grad_norm] max_norm must be positive, got ", max_norm);
  std::vector<Tensor> grads;
  for (const Tensor& p : params) {
    Tensor g = p.defined() ? p.grad() : Tensor();
    if (!g.defined()) continue;
    check_floating("clip_grad_norm", g, "gradient");
    grads.push_back(g);
  }
  check_same_device("clip_grad_norm", grads);
  const bool on_device = !grads.empty() && !grads[0].device().is_cpu();
  double sum_squares = 0;
  if (on_device)
    sum_squares = kernels::device_kernels(grads[0]).optim->sum_of_squares(grads).item();  // the step's one sync: the
                                                                                          // norm is returned
  else
    for (const Tensor& g : grads) for_each_element(g, [&](auto x) { sum_squares += double(x) * double(x); });
  const double norm = std::sqrt(sum_squares);
  const double scale = max_norm / (norm + 1e-6);
  if (!std::isfinite(norm) || scale >= 1) return norm;
  for (const Tensor& g : grads) {
    if (on_device) kernels::device_kernels(g).optim->scale_(g, scale);
    else
      for_each_element(g, [&](auto& x) { x = static_cast<std::remove_reference_t<decltype(x)>>(double(x) * scale); });
    g.bump_version();
  }
  return norm;
}

// ---- schedules ---------------------------------------------------------------------

double WarmupCosine::factor(int64_t step) const {
  HEADROOM_CHECK(warmup >= 0 && total > warmup && step >= 0 && min_ratio >= 0 && min_ratio <= 1,
                 "[WarmupCosine] needs 0 <= warmup < total, step >= 0 and min_ratio in [0, 1]; got warmup=", warmup,
                 " total=", total, " min_ratio=", min_ratio, " step=", step);
  if (step < warmup) return double(step) / double(warmup);
  const double progress = std::min(1.0, double(step - warmup) / double(total - warmup));
  return min_ratio + (1 - min_ratio) * 0.5 * (1 + std::cos(M_PI * progress));
}

double InverseSqrt::factor(int64_t step) const {
  HEADROOM_CHECK(warmup >= 1 && step >= 0, "[InverseSqrt] needs warmup >= 1 and step >= 0; got warmup=", warmup,
                 " step=", step);
  if (step == 0) return 0;
  return std::min(double(step) / double(warmup), std::sqrt(double(warmup) / double(step)));
}

bool is_optimizer_entry(const std::string& name) {
  return name.rfind("optim.", 0) == 0 || name.find(".optim.") != std::string::npos;
}

}  // namespace headroom
