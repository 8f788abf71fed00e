#include "headroom/models/module.h"

#include <set>

#include "headroom/core/grad_mode.h"

namespace headroom {

// ---- registration ------------------------------------------------------------------

void Module::check_new_name(const std::string& name, const char* kind) const {
  HEADROOM_CHECK(!name.empty() && name.find('.') == std::string::npos, "[Module] ", kind, " name '", name,
                 "' must be non-empty and contain no '.'");
  auto taken = [&](const auto& entries) {
    for (const auto& entry : entries)
      if (entry.first == name) return true;
    return false;
  };
  HEADROOM_CHECK(!taken(parameters_) && !taken(buffers_) && !taken(children_), "[Module] cannot register ", kind, " '",
                 name, "': the name is already used in this module");
}

Tensor Module::register_parameter(const std::string& name, Tensor value) {
  check_new_name(name, "parameter");
  HEADROOM_CHECK(value.defined(), "[Module] parameter '", name, "' is undefined");
  value.set_requires_grad(true);  // checks it is a floating-point leaf
  parameters_.emplace_back(name, value);
  return value;
}

Tensor Module::register_buffer(const std::string& name, Tensor value) {
  check_new_name(name, "buffer");
  HEADROOM_CHECK(value.defined(), "[Module] buffer '", name, "' is undefined");
  buffers_.emplace_back(name, value);
  return value;
}

void Module::add_child(const std::string& name, std::shared_ptr<Module> module) {
  check_new_name(name, "module");
  HEADROOM_CHECK(module != nullptr, "[Module] module '", name, "' is null");
  children_.emplace_back(name, std::move(module));
}

// ---- traversal ---------------------------------------------------------------------

void Module::collect(const std::string& prefix, bool parameters, bool buffers, NamedTensors& out) const {
  if (parameters)
    for (const auto& [name, t] : parameters_) out.emplace_back(prefix + name, t);
  if (buffers)
    for (const auto& [name, t] : buffers_) out.emplace_back(prefix + name, t);
  for (const auto& [name, child] : children_) child->collect(prefix + name + ".", parameters, buffers, out);
}

NamedTensors Module::named_parameters() const {
  NamedTensors out;
  collect("", true, false, out);
  return out;
}

NamedTensors Module::named_buffers() const {
  NamedTensors out;
  collect("", false, true, out);
  return out;
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (const auto& entry : named_parameters()) out.push_back(entry.second);
  return out;
}

NamedTensors Module::state_dict() const {
  NamedTensors out = named_parameters();
  for (auto& entry : named_buffers()) out.push_back(std::move(entry));
  return out;
}

int64_t Module::num_parameters() const {
  int64_t total = 0;
  for (const auto& entry : named_parameters()) total += entry.second.numel();
  return total;
}

// ---- loading -----------------------------------------------------------------------

namespace {
void append_problem(std::string& problems, const char* label, const std::vector<std::string>& names) {
  if (names.empty()) return;
  problems += problems.empty() ? "" : "; ";
  problems += label;
  for (size_t i = 0; i < names.size(); ++i) problems += (i == 0 ? " " : ", ") + names[i];
}
}  // namespace

void Module::load_state_dict(const NamedTensors& entries, bool strict) {
  std::map<std::string, Tensor> given;
  std::vector<std::string> duplicate, undefined, unexpected, missing, mismatched;
  for (const auto& [name, t] : entries) {
    if (!given.emplace(name, t).second) duplicate.push_back(name);
    if (!t.defined()) undefined.push_back(name);
  }
  NamedTensors own = state_dict();
  std::set<std::string> own_names;
  for (const auto& [name, target] : own) {
    own_names.insert(name);
    auto it = given.find(name);
    if (it == given.end()) {
      missing.push_back(name);
    } else if (it->second.defined() && (it->second.shape() != target.shape() || it->second.dtype() != target.dtype())) {
      mismatched.push_back(detail::concat(name, " (checkpoint ", shape_str(it->second.shape()), " ", it->second.dtype(),
                                          ", module ", shape_str(target.shape()), " ", target.dtype(), ")"));
    }
  }
  for (const auto& entry : entries)
    if (!own_names.count(entry.first)) unexpected.push_back(entry.first);

  std::string problems;
  append_problem(problems, "missing:", strict ? missing : std::vector<std::string>{});
  append_problem(problems, "unexpected:", strict ? unexpected : std::vector<std::string>{});
  append_problem(problems, "shape or dtype mismatch:", mismatched);
  append_problem(problems, "duplicate:", duplicate);
  append_problem(problems, "undefined:", undefined);
  HEADROOM_CHECK(problems.empty(), "[load_state_dict] ", problems);

  NoGradGuard no_grad;
  for (auto& [name, target] : own) {
    auto it = given.find(name);
    if (it != given.end()) target.copy_(it->second.to(target.device()));
  }
}

void Module::load_state_dict(const SafetensorsFile& file, bool strict) { load_state_dict(file.tensors, strict); }

// ---- modes -------------------------------------------------------------------------

void Module::train(bool on) {
  training_ = on;
  for (auto& entry : children_) entry.second->train(on);
}

void Module::zero_grad() {
  for (const Tensor& p : parameters()) p.zero_grad();
}

// ---- checkpoints -------------------------------------------------------------------

void save_module(const Module& module, const std::string& path, const std::map<std::string, std::string>& metadata) {
  save_safetensors(path, module.state_dict(), metadata);
}

void load_module(Module& module, const std::string& path, bool strict) {
  module.load_state_dict(load_safetensors(path), strict);
}

namespace {
// Points every handle of `entry` (they share its TensorImpl) at `value`'s
// storage; the shape stays, the gradient is dropped.
void rebind(const Tensor& entry, const Tensor& value) {
  TensorImpl& impl = *entry.impl_shared();
  impl.storage = value.impl_shared()->storage;
  impl.strides = value.strides();
  impl.offset = value.offset();
  impl.dtype = value.dtype();
  impl.grad = nullptr;
}
}  // namespace

void Module::to(DType dtype) {
  HEADROOM_CHECK(is_floating(dtype), "[Module::to] parameters can only be converted to f32 or f64, got ", dtype);
  for (auto& [name, t] : state_dict())
    if (t.is_floating_point() && t.dtype() != dtype) rebind(t, t.detach().to(dtype));
}

void Module::to(Device device) {
  for (auto& [name, t] : state_dict()) {
    if (t.device() == device) continue;
    Tensor source = t.detach();
    if (!source.device().is_cpu() && !device.is_cpu())
      source = source.to(Device::cpu());  // no direct device-to-device copy
    rebind(t, source.to(device));
  }
}

const Tensor* Module::first_tensor(bool parameter) const {
  const NamedTensors& own = parameter ? parameters_ : buffers_;
  if (!own.empty()) return &own.front().second;
  for (const auto& entry : children_)
    if (const Tensor* found = entry.second->first_tensor(parameter)) return found;
  return nullptr;
}

Device Module::device() const {  // without building state_dict(): tasks ask once per batch
  const Tensor* first = first_tensor(true);
  if (!first) first = first_tensor(false);
  return first ? first->device() : Device::cpu();
}

}  // namespace headroom
