#pragma once
// Shapes and strides, in NumPy order: dimension 0 is the outermost, the last
// dimension is contiguous in a row-major tensor.  Strides count elements.
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace headroom {

using Shape = std::vector<int64_t>;
using Strides = std::vector<int64_t>;

int64_t shape_numel(const Shape& shape);
Strides contiguous_strides(const Shape& shape);
std::string shape_str(const Shape& shape);  // "(2,3)"

// Maps a possibly negative dimension to [0, ndim); throws naming `op` if out of range.
int wrap_dim(int64_t dim, int64_t ndim, const char* op);

// NumPy broadcasting of two shapes; throws naming `op` when they are incompatible.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);

}  // namespace headroom

namespace std {
inline ostream& operator<<(ostream& os, const headroom::Shape& s) {
  return os << headroom::shape_str(s);
}
}  // namespace std
