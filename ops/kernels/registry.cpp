#include "headroom/ops/kernels/registry.h"

#include "headroom/core/backend.h"
#include "headroom/core/error.h"
#include "headroom/core/tensor.h"

namespace headroom::kernels {

namespace {
DeviceKernels& slot(Device::Kind kind) {
  static DeviceKernels registered[2];  // by Device::Kind; the CPU's stays empty
  return registered[int(kind)];
}
}  // namespace

void register_device_kernels(Device::Kind kind, const DeviceKernels& kernels) {
  HEADROOM_CHECK(kind != Device::Kind::cpu && kernels.attention && kernels.elementwise && kernels.matmul &&
                     kernels.nn && kernels.optim && kernels.reduce && kernels.routing,
                 "[kernels] a device backend must register every kernel family, for a device other than the CPU");
  slot(kind) = kernels;
}

const DeviceKernels& device_kernels(const Tensor& t) {
  const DeviceKernels& kernels = slot(t.device().kind);
  if (!kernels.matmul) backend(t.device());  // throws the message that says what to link
  HEADROOM_CHECK(kernels.matmul, "[kernels] no kernels are registered for device ", t.device());
  return kernels;
}

}  // namespace headroom::kernels
