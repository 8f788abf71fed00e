// CPU element-wise kernels: one broadcast loop (map_elements) and the small
// functors it applies.  Each functor holds an op's value and its derivative.
#include "headroom/ops/cpu/elementwise.h"

#include <array>
#include <cmath>
#include <cstdint>
#include <tuple>
#include <utility>

#include "headroom/core/parallel.h"
#include "headroom/ops/kernels/elementwise_math.h"

namespace headroom::cpu {
namespace {

using elementwise::with_binary;
using elementwise::with_compare;
using elementwise::with_unary;

// t's strides seen from `shape` (t broadcast to it): 0 on new and size-1 dimensions.
Strides broadcast_strides(const Tensor& t, const Shape& shape) {
  Strides strides(shape.size(), 0);
  const size_t lead = shape.size() - t.dim();
  for (int i = 0; i < t.dim(); ++i) strides[lead + i] = t.size(i) == 1 ? 0 : t.stride(i);
  return strides;
}

// Offset of row `row` (a row-major index over every dimension but the last)
// in an operand with `strides`.
int64_t row_offset(int64_t row, const Shape& shape, const Strides& strides) {
  int64_t offset = 0;
  for (int d = static_cast<int>(shape.size()) - 2; d >= 0; --d) {
    offset += (row % shape[d]) * strides[d];
    row /= shape[d];
  }
  return offset;
}

// The broadcast loop: out[i] = fn(in_0[i], in_1[i], ...) over out's shape.
// The inputs are read through their broadcast strides; out may be strided
// too (add_ into a slice of a gradient, autograd's slice accumulation).
//   Fast path: out is contiguous and each input is contiguous with out's shape
//   (step 1 through the flat index) or a single element (step 0), so the loop
//   is one flat index.
//   General path: rows along the last dimension; each row finds its operands'
//   start offsets from its index, so rows are independent work for threads.
template <typename Out, typename... In, typename Fn, size_t... K>
void map_impl(Fn fn, const Tensor& out, const std::array<Tensor, sizeof...(In)>& in, std::index_sequence<K...>) {
  constexpr size_t N = sizeof...(In);
  Out* o = out.data<Out>();
  const std::tuple<const In*...> base{in[K].template data<In>()...};
  const Shape& shape = out.shape();
  const int64_t n = out.numel();
  const bool flat =
      out.is_contiguous() && ((in[K].numel() == 1 || (in[K].shape() == shape && in[K].is_contiguous())) && ...);
  if (flat) {
    const std::array<int64_t, N> step{(in[K].numel() == 1 ? 0 : 1)...};
    parallel_for(n, n >= kParallelMin, [&](int64_t i) { o[i] = fn(std::get<K>(base)[i * step[K]]...); });
    return;
  }
  // Here out has at least one dimension: 0-d inputs and outputs take the fast path.
  const std::array<Strides, N> strides{broadcast_strides(in[K], shape)...};
  const std::array<int64_t, N> col_stride{strides[K].back()...};
  const int64_t cols = shape.back(), out_step = out.strides().back();
  const int64_t rows = cols == 0 ? 0 : n / cols;
  parallel_for(rows, n >= kParallelMin, [&](int64_t r) {
    const std::array<int64_t, N> start{row_offset(r, shape, strides[K])...};
    Out* out_row = o + row_offset(r, shape, out.strides());
    for (int64_t c = 0; c < cols; ++c) out_row[c * out_step] = fn(std::get<K>(base)[start[K] + c * col_stride[K]]...);
  });
}

// map_elements<Out, In...>(fn, out, {inputs}): the element types are spelled
// out; Tensor::data checks them against the dtypes.
template <typename Out, typename... In, typename Fn>
void map_elements(Fn fn, const Tensor& out, const std::array<Tensor, sizeof...(In)>& in) {
  map_impl<Out, In...>(fn, out, in, std::index_sequence_for<In...>{});
}

}  // namespace

void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  with_binary(op, [&](auto f) {
    dispatch_floating(out.dtype(), [&](auto zero) {
      using T = decltype(zero);
      map_elements<T, T, T>([f](T x, T y) { return f(x, y); }, out, {a, b});
    });
  });
}

void binary_grad(BinaryOp op, int wrt, const Tensor& a, const Tensor& b, const Tensor& g, const Tensor& grad) {
  with_binary(op, [&](auto f) {
    dispatch_floating(grad.dtype(), [&](auto zero) {
      using T = decltype(zero);
      if (wrt == 0) map_elements<T, T, T, T>([f](T x, T y, T dz) { return dz * f.da(x, y); }, grad, {a, b, g});
      else map_elements<T, T, T, T>([f](T x, T y, T dz) { return dz * f.db(x, y); }, grad, {a, b, g});
    });
  });
}

void unary(UnaryOp op, UnaryArgs args, const Tensor& x, const Tensor& out) {
  with_unary(op, args, [&](auto f) {
    dispatch_floating(out.dtype(), [&](auto zero) {
      using T = decltype(zero);
      map_elements<T, T>([f](T v) { return f(v); }, out, {x});
    });
  });
}

void unary_grad(UnaryOp op, UnaryArgs args, const Tensor& x, const Tensor& g, const Tensor& grad) {
  with_unary(op, args, [&](auto f) {
    dispatch_floating(grad.dtype(), [&](auto zero) {
      using T = decltype(zero);
      map_elements<T, T, T>([f](T v, T dy) { return dy * f.grad(v); }, grad, {x, g});
    });
  });
}

void compare(CompareOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  with_compare(op, [&](auto f) {
    dispatch_any(a.dtype(), [&](auto zero) {
      using T = decltype(zero);
      map_elements<uint8_t, T, T>([f](T x, T y) -> uint8_t { return f(x, y); }, out, {a, b});
    });
  });
}

void logical(LogicalOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  const bool both = op == LogicalOp::logical_and;
  map_elements<uint8_t, uint8_t, uint8_t>(
      [both](uint8_t x, uint8_t y) -> uint8_t { return both ? (x && y) : (x || y); }, out, {a, b});
}

void logical_not(const Tensor& x, const Tensor& out) {
  map_elements<uint8_t, uint8_t>([](uint8_t v) -> uint8_t { return !v; }, out, {x});
}

void where(const Tensor& mask, const Tensor& a, const Tensor& b, const Tensor& out) {
  dispatch_any(out.dtype(), [&](auto zero) {
    using T = decltype(zero);
    map_elements<T, uint8_t, T, T>([](uint8_t m, T x, T y) { return m ? x : y; }, out, {mask, a, b});
  });
}

}  // namespace headroom::cpu
