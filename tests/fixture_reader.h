#pragma once
// Reads the frozen PyTorch fixtures (tests/fixtures/*.safetensors) for tests:
// `Fixture f(path); f.get("q"); f.metadata("torch_version")`, on top of the
// library's own safetensors loader.
#include <string>

#include "headroom/core/safetensors.h"

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

}  // namespace headroom::testing
