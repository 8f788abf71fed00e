// Plugs the CUDA part into headroom as the program loads: its memory backend
// into core (core/backend.h) and its kernels into the ops (ops/kernels/registry.h).
//
// The part is a static library, whose objects the linker keeps only when
// something refers to them; the CMake target headroom::cuda therefore links
// with -Wl,--undefined=headroom_cuda_registered, which keeps this file.
#include "headroom/core/backend.h"
#include "headroom/cuda/kernels.h"

namespace headroom::cuda {
namespace {

bool register_cuda() {
  register_backend(Device::Kind::cuda, backend_provider());
  kernels::DeviceKernels k;
  k.attention = &attention_kernels();
  k.elementwise = &elementwise_kernels();
  k.matmul = &matmul_kernels();
  k.nn = &nn_kernels();
  k.optim = &optim_kernels();
  k.reduce = &reduce_kernels();
  k.routing = &routing_kernels();
  kernels::register_device_kernels(Device::Kind::cuda, k);
  return true;
}

}  // namespace
}  // namespace headroom::cuda

extern "C" {
extern const bool headroom_cuda_registered;
const bool headroom_cuda_registered = headroom::cuda::register_cuda();
}
