#include "headroom/core/shape.h"

#include "headroom/core/error.h"

namespace headroom {

int64_t shape_numel(const Shape& shape) {
  // The product of the nonzero sizes must fit too: the strides of a shape
  // with a 0 somewhere are still products of the others.
  int64_t n = 1, nonzero = 1;
  for (int64_t s : shape) {
    HEADROOM_CHECK(s >= 0, "[shape] sizes must be >= 0, got shape ", shape_str(shape));
    if (s == 0) n = 0;
    else
      HEADROOM_CHECK(!__builtin_mul_overflow(nonzero, s, &nonzero), "[shape] shape ", shape_str(shape),
                     " has more elements than an int64 can count");
  }
  return n == 0 ? 0 : nonzero;
}

Strides contiguous_strides(const Shape& shape) {
  shape_numel(shape);  // checks the sizes and that every stride fits
  Strides strides(shape.size());
  int64_t step = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = step;
    step *= shape[i];
  }
  return strides;
}

std::optional<Strides> view_strides(const Shape& shape, const Strides& strides, const Shape& new_shape) {
  if (shape_numel(shape) == 0) return contiguous_strides(new_shape);  // no element to address
  std::vector<std::pair<int64_t, int64_t>> dims;                      // (size, stride) without the size-1 dimensions
  for (size_t i = 0; i < shape.size(); ++i)
    if (shape[i] != 1) dims.push_back({shape[i], strides[i]});
  Strides out(new_shape.size(), 1);
  size_t placed = new_shape.size();  // new dimensions [placed, end) have their strides
  for (size_t end = dims.size(); end > 0;) {
    // One run: old dimensions [begin, end), innermost stride `base`, `run` elements.
    size_t begin = end - 1;
    int64_t run = dims[begin].first;
    while (begin > 0 && dims[begin - 1].second == dims[begin].second * dims[begin].first) run *= dims[--begin].first;
    const int64_t base = dims[end - 1].second;
    int64_t covered = 1;  // new dimensions split the run, innermost first
    for (; placed > 0 && (covered < run || new_shape[placed - 1] == 1); --placed) {
      out[placed - 1] = covered * base;
      covered *= new_shape[placed - 1];
    }
    if (covered != run) return std::nullopt;
    end = begin;
  }
  return out;  // new dimensions left unplaced have size 1
}

std::string shape_str(const Shape& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
  return s + ")";
}

int wrap_dim(int64_t dim, int64_t ndim, const char* op) {
  HEADROOM_CHECK(dim >= -ndim && dim < ndim && ndim > 0, "[", op, "] dimension ", dim,
                 " is out of range for a tensor with ", ndim, " dimensions");
  return static_cast<int>(dim < 0 ? dim + ndim : dim);
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    HEADROOM_CHECK(da == db || da == 1 || db == 1, "[", op, "] shapes ", shape_str(a), " and ", shape_str(b),
                   " cannot be broadcast together (dimension ", i, ": ", da, " vs ", db, ")");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

}  // namespace headroom
