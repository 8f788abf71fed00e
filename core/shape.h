#pragma once
// Shapes and strides, in NumPy order: dimension 0 is the outermost, the last
// dimension is contiguous in a row-major tensor.  Strides count elements.
#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

namespace headroom {

using Shape = std::vector<int64_t>;
using Strides = std::vector<int64_t>;

int64_t shape_numel(const Shape& shape);
Strides contiguous_strides(const Shape& shape);

// The strides that show a tensor of `shape` laid out with `strides` as
// `new_shape` (same numel) without moving an element, or nothing when no
// strides can.  The old dimensions fall into runs laid out back to back
// (stride[d] = stride[d + 1] * shape[d + 1]); the new dimensions must split
// each run on its own, as PyTorch's view() requires.
std::optional<Strides> view_strides(const Shape& shape, const Strides& strides, const Shape& new_shape);
std::string shape_str(const Shape& shape);  // "(2,3)"

// Maps a possibly negative dimension to [0, ndim); throws naming `op` if out of range.
int wrap_dim(int64_t dim, int64_t ndim, const char* op);

// NumPy broadcasting of two shapes; throws naming `op` when they are incompatible.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);

}  // namespace headroom

namespace std {
inline ostream& operator<<(ostream& os, const headroom::Shape& s) { return os << headroom::shape_str(s); }
}  // namespace std
