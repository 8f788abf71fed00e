#pragma once
// Strided element addressing on the device: the CUDA counterpart of
// for_each_offset.  A kernel gets one Layout per operand (the output's shape
// with each operand's own strides, 0 on broadcast dimensions) and maps a
// linear row-major index to an element offset.
#include <cstdint>

#include "headroom/core/shape.h"

namespace headroom::cuda {

constexpr int kMaxDims = 8;

struct Layout {
  int dims = 0;
  int64_t size[kMaxDims] = {};
  int64_t stride[kMaxDims] = {};  // in elements
  int64_t offset = 0;             // of element 0, in elements
};

// Layout of `strides` and `offset` over `shape`.  Throws for more than
// kMaxDims dimensions (after size-1 dimensions are dropped).
Layout make_layout(const Shape& shape, const Strides& strides, int64_t offset, const char* op);

// Offset of the element with row-major linear index i.
__device__ inline int64_t element_offset(const Layout& layout, int64_t i) {
  int64_t offset = layout.offset;
  for (int d = layout.dims - 1; d >= 0; --d) {
    const int64_t size = layout.size[d];
    offset += (i % size) * layout.stride[d];
    i /= size;
  }
  return offset;
}

}  // namespace headroom::cuda
