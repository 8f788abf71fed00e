#pragma once
// Reads the frozen PyTorch fixtures (tests/fixtures/*.safetensors) for tests:
// `Fixture f(path); f.get("q"); f.metadata("torch_version")`, on top of the
// library's own safetensors loader; fixture_layer builds a layer with a
// fixture's weights.
#include <memory>
#include <string>

#include "headroom/core/safetensors.h"
#include "headroom/models/module.h"

namespace headroom::testing {

class Fixture {
 public:
  explicit Fixture(const std::string& path) : file_(load_safetensors(path)) {}
  // A fresh copy per call, so one test marking it requires_grad cannot affect another.
  Tensor get(const std::string& name) const { return file_.get(name).detach().clone(); }
  std::string metadata(const std::string& key) const {
    auto it = file_.metadata.find(key);
    return it == file_.metadata.end() ? "" : it->second;
  }

 private:
  SafetensorsFile file_;
};

// A Layer built from `config` with a fixture case's weights (stored as
// prefix + parameter name), converted to `dtype`.
template <typename Layer, typename Config>
std::shared_ptr<Layer> fixture_layer(const Fixture& f, const std::string& prefix, const Config& config, DType dtype) {
  auto layer = std::make_shared<Layer>(config);
  NamedTensors weights;
  for (const auto& [name, p] : layer->named_parameters()) weights.push_back({name, f.get(prefix + name)});
  layer->load_state_dict(weights);
  layer->to(dtype);
  return layer;
}

}  // namespace headroom::testing
