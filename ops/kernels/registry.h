#pragma once
// Where an op finds the kernels of a device other than the CPU.
//
// Every op chooses its device the same way:
//   if (!out.device().is_cpu()) return device_kernels(out).matmul->batched_gemm(...);
//   cpu::batched_gemm(...);
// The CPU kernels (ops/cpu/) are called directly; a backend library (the CUDA
// part, cuda/register.cpp) registers one DeviceKernels for its device kind as
// it loads, next to its core Backend.  The families' interfaces are the other
// headers of this folder, which both backends include.
#include "headroom/core/device.h"

namespace headroom {
class Tensor;
}

namespace headroom::kernels {

struct AttentionKernels;
struct ElementwiseKernels;
struct MatmulKernels;
struct NnKernels;
struct OptimKernels;
struct ReduceKernels;
struct RoutingKernels;

// One device kind's kernel families; a registered set has all of them.
struct DeviceKernels {
  AttentionKernels* attention = nullptr;
  ElementwiseKernels* elementwise = nullptr;
  MatmulKernels* matmul = nullptr;
  NnKernels* nn = nullptr;
  OptimKernels* optim = nullptr;
  ReduceKernels* reduce = nullptr;
  RoutingKernels* routing = nullptr;
};

void register_device_kernels(Device::Kind kind, const DeviceKernels& kernels);

// The kernels of t's device (not the CPU); throws, naming what to link, when
// no backend of that kind is linked.
const DeviceKernels& device_kernels(const Tensor& t);

}  // namespace headroom::kernels
