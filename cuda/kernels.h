#pragma once
// What the CUDA part's files give each other: one object per kernel family
// (cuda/<family>.cu), registered by cuda/register.cpp, and the element walks
// of the backend (cuda/copy.cu).  No CUDA headers here.
#include <string>

#include "headroom/core/backend.h"
#include "headroom/core/tensor.h"
#include "headroom/ops/kernels/registry.h"

namespace headroom::cuda {

kernels::AttentionKernels& attention_kernels();
kernels::ElementwiseKernels& elementwise_kernels();
kernels::MatmulKernels& matmul_kernels();
kernels::NnKernels& nn_kernels();
kernels::OptimKernels& optim_kernels();
kernels::ReduceKernels& reduce_kernels();
kernels::RoutingKernels& routing_kernels();

// As Backend::copy, fill and accumulate (core/backend.h), on dst's device.
void copy(const Tensor& src, const Strides& src_strides, const Tensor& dst);
void fill(const Tensor& dst, double value);
void accumulate(const Tensor& src, const Tensor& dst);

int device_count();            // 0 without a driver or a device
std::string version_string();  // runtime and driver versions, devices
BackendProvider& backend_provider();

}  // namespace headroom::cuda
