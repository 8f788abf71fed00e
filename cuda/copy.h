#pragma once
// CUDA kernels behind the tensor core: strided copies with broadcasting and
// dtype conversion (contiguous(), clone(), to(dtype), copy_()) and fills.
// No CUDA headers here: core/tensor.cpp calls these through the interface.
#include "headroom/core/tensor.h"

namespace headroom::cuda {

struct CopyKernels {
  virtual ~CopyKernels() = default;
  // dst[i] = src[i] for every element of dst; src_strides are src's strides
  // broadcast to dst's shape (0 on broadcast dimensions).
  virtual void copy(const Tensor& src, const Strides& src_strides, const Tensor& dst) = 0;
  virtual void fill(const Tensor& dst, double value) = 0;  // any strides
};

CopyKernels& copy_kernels();  // throws without CUDA

}  // namespace headroom::cuda
