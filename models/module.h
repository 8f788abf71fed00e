#pragma once
// Module: the base class of layers and models.  A module owns named
// parameters (trainable leaves), buffers (state that is saved but not
// trained) and child modules; names join into dotted paths such as
// "blocks.0.attn.q_proj.weight", in registration order, which are the names
// of the module's checkpoint.  Modules are held through std::shared_ptr.
//
//   struct Linear : Module {
//     Tensor weight, bias;
//     Linear(int64_t in, int64_t out) {
//       weight = register_parameter("weight", Tensor::randn({in, out}));
//       bias = register_parameter("bias", Tensor::zeros({out}));
//     }
//   };
//   struct Block : Module {
//     std::shared_ptr<Linear> proj = register_module("proj", std::make_shared<Linear>(4, 4));
//   };
//
// A registered Tensor is a handle to the same storage as the module's entry,
// so members stay valid across load_state_dict, which copies values in place.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "headroom/core/safetensors.h"
#include "headroom/core/tensor.h"

namespace headroom {

class Module {
 public:
  Module() = default;
  virtual ~Module() = default;
  Module(const Module&) = delete;  // parameters are shared handles; copying would alias them silently
  Module& operator=(const Module&) = delete;

  // ---- registration: names are non-empty, without '.', unique in this module --
  // Marks the tensor requires_grad (it must be a floating-point leaf) and returns it.
  Tensor register_parameter(const std::string& name, Tensor value);
  Tensor register_buffer(const std::string& name, Tensor value);
  template <typename M> std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> module) {
    add_child(name, module);
    return module;
  }

  // ---- traversal (depth first, registration order, own entries before children's)
  NamedTensors named_parameters() const;
  std::vector<Tensor> parameters() const;
  NamedTensors named_buffers() const;
  NamedTensors state_dict() const;  // parameters, then buffers
  const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& children() const { return children_; }
  int64_t num_parameters() const;  // total elements over all parameters

  // Copies each entry into the tensor of the same name (under NoGradGuard),
  // from whatever device the entry is on (a checkpoint read on the CPU loads
  // into a model on CUDA).
  // Throws one error listing missing names, unexpected names (both ignored
  // when strict is false) and every shape or dtype mismatch; nothing is
  // copied unless everything matches.
  void load_state_dict(const NamedTensors& entries, bool strict = true);
  void load_state_dict(const SafetensorsFile& file, bool strict = true);

  // ---- modes -----------------------------------------------------------------
  void train(bool on = true);  // this module and all descendants
  void eval() { train(false); }
  bool is_training() const { return training_; }

  void zero_grad();  // drops every parameter's gradient
  // Converts every parameter and floating buffer to `dtype` in place (f64 for
  // gradchecks through whole modules); handles held in members follow, since
  // they share the converted TensorImpl.  Gradients are dropped.
  void to(DType dtype);
  // Moves every parameter and buffer to `device` in the same way (model.to(Device::cuda())
  // before building the optimizer, whose state lives beside the parameters).
  void to(Device device);
  // Where the first parameter (else buffer) lives: the device of the whole
  // module after to(device); the CPU for a module without tensors.
  Device device() const;

 private:
  void add_child(const std::string& name, std::shared_ptr<Module> module);
  void check_new_name(const std::string& name, const char* kind) const;
  void collect(const std::string& prefix, bool parameters, bool buffers, NamedTensors& out) const;
  const Tensor* first_tensor(bool parameter) const;  // depth first; null when there is none

  NamedTensors parameters_;
  NamedTensors buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;
};

// A module whose children are named "0", "1", ... in the order they are added.
class ModuleList : public Module {
 public:
  template <typename M> std::shared_ptr<M> push_back(std::shared_ptr<M> module) {
    return register_module(std::to_string(children().size()), std::move(module));
  }
  size_t size() const { return children().size(); }
  const std::shared_ptr<Module>& operator[](size_t i) const {
    HEADROOM_CHECK(i < size(), "[ModuleList] index ", i, " is out of range for a list of ", size(), " modules");
    return children()[i].second;
  }
  // The i-th child as its concrete type; throws when it is of another type.
  template <typename M> std::shared_ptr<M> at(size_t i) const {
    auto typed = std::dynamic_pointer_cast<M>((*this)[i]);
    HEADROOM_CHECK(typed != nullptr, "[ModuleList] child ", i, " is not of the requested type");
    return typed;
  }
};

// Every descendant of `root` (depth first, registration order) that is an M,
// e.g. collect_modules<MAEAttention>(model) for MAE's BCD trainer.
template <typename M> std::vector<std::shared_ptr<M>> collect_modules(const Module& root) {
  std::vector<std::shared_ptr<M>> found;
  for (const auto& [name, child] : root.children()) {
    if (auto typed = std::dynamic_pointer_cast<M>(child)) found.push_back(typed);
    for (auto& deeper : collect_modules<M>(*child)) found.push_back(deeper);
  }
  return found;
}

// Checkpoints on top of safetensors: the module's state_dict and metadata.
void save_module(const Module& module, const std::string& path,
                 const std::map<std::string, std::string>& metadata = {});
void load_module(Module& module, const std::string& path, bool strict = true);

}  // namespace headroom
