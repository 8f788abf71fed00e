#pragma once
// CPU/CUDA parity tests.  Every case's name starts with "cuda"; on a machine
// without a device (CI, most developer machines), or with
// HEADROOM_TEST_DEVICE=cpu, tests/main.cpp skips them, and doctest and ctest
// count them as skipped.
#include <functional>
#include <vector>

#include "helpers.h"

namespace headroom::testing {

// Runs `fn` on the CPU inputs and on CUDA copies of them, then backward from
// the same random seed gradient, and compares the outputs and the gradient of
// every floating input (atol + rtol * |cpu|).  Integer inputs (indices, masks)
// are copied as they are.
inline void check_parity(const std::function<Tensor(const std::vector<Tensor>&)>& fn, const std::vector<Tensor>& inputs,
                         double atol, double rtol = 1e-4) {
  auto run = [&](Device device, std::vector<Tensor>& leaves) {
    for (const Tensor& input : inputs) {
      Tensor leaf = input.detach().to(device).clone();
      if (leaf.is_floating_point()) leaf.set_requires_grad();
      leaves.push_back(leaf);
    }
    Tensor out = fn(leaves);
    Generator gen(1234);
    Tensor seed = Tensor::randn(out.shape(), gen, out.dtype()).to(device);
    if (out.requires_grad()) out.backward(seed);
    return out;
  };
  std::vector<Tensor> cpu_leaves, cuda_leaves;
  Tensor cpu_out = run(Device::cpu(), cpu_leaves);
  Tensor cuda_out = run(Device::cuda(), cuda_leaves);
  CHECK(cuda_out.device() == Device::cuda());
  INFO("output");
  const std::string out_diff = compare(cuda_out.to(Device::cpu()), cpu_out, atol, rtol);
  CHECK_MESSAGE(out_diff == "", out_diff);
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!cpu_leaves[i].grad().defined()) continue;
    INFO("gradient of input ", i);
    REQUIRE(cuda_leaves[i].grad().defined());
    std::string diff = compare(cuda_leaves[i].grad().to(Device::cpu()), cpu_leaves[i].grad(), atol, rtol);
    CHECK_MESSAGE(diff == "", diff);
  }
}

}  // namespace headroom::testing
