// Routing: the route plan (a stable counting sort of (token, slot) pairs by
// segment), top-k, index_select, and the gather / grouped-matmul / weighted
// scatter ops that move rows through a plan.  Each op's backward sits below
// its forward; gather and scatter are each other's transposes and share their
// kernels, so no kernel exists twice.  Tensors on another device go to its
// kernels (ops/kernels/routing.h), which mirror the CPU ones; each op keeps
// the device branch in one helper.
#include "headroom/ops/routing.h"

#include <tuple>
#include <utility>
#include <vector>

#include "headroom/autograd/node.h"
#include "headroom/ops/cpu/routing.h"
#include "headroom/ops/kernels/registry.h"
#include "headroom/ops/kernels/routing.h"
#include "headroom/ops/reference/kernels.h"
#include "headroom/ops/elementwise.h"
#include "headroom/ops/reduce.h"

namespace headroom {

namespace {

// The plan's host helpers read its arrays directly, at a row in [0, rows).
void check_host_row(const Tensor& t, const char* helper, int64_t r, int64_t rows) {
  HEADROOM_CHECK(t.device().is_cpu(), "[RoutePlan] ", helper, " reads the plan on the host, but it lives on ",
                 t.device(), "; copy its tensors to the CPU first");
  HEADROOM_CHECK(r >= 0 && r < rows, "[RoutePlan] ", helper, ": row ", r, " is outside [0, ", rows, ")");
}

}  // namespace

RoutePlan::RoutePlan(int64_t num_tokens, int64_t k, int64_t num_segments, Tensor offsets, Tensor order, Tensor position,
                     Tensor segment, Tensor counts)
    : num_tokens(num_tokens),
      k(k),
      num_segments(num_segments),
      offsets(std::move(offsets)),
      order(std::move(order)),
      position(std::move(position)),
      segment(std::move(segment)),
      counts(std::move(counts)),
      built_versions_(versions()) {}  // declared after the arrays, so they are set

uint64_t RoutePlan::versions() const {
  return offsets.version() + order.version() + position.version() + segment.version() + counts.version();
}

void RoutePlan::check_usable(const char* op, Device device) const {
  HEADROOM_CHECK(order.device() == device, "[", op, "] the route plan is on ", order.device(),
                 " but the inputs are on ", device);
  HEADROOM_CHECK(versions() == built_versions_, "[", op,
                 "] the route plan was written in place after route() built it, so its indices cannot be "
                 "trusted; build it again with route()");
}

int64_t RoutePlan::token_of_row(int64_t r) const {
  check_host_row(order, "token_of_row", r, rows());
  return order.data<int32_t>()[r] / k;
}
int64_t RoutePlan::segment_of_row(int64_t r) const {
  check_host_row(segment, "segment_of_row", r, rows());
  return segment.data<int32_t>()[r];
}

RoutePlan route(const Tensor& indices, int64_t num_segments) {
  check_dtype("route", indices, DType::i32, "indices");
  HEADROOM_CHECK(indices.dim() == 2, "[route] expected indices of shape [N, k], got ", shape_str(indices.shape()));
  HEADROOM_CHECK(num_segments >= 1, "[route] number of segments must be >= 1, got ", num_segments);
  const int64_t tokens = indices.size(0), k = indices.size(1), pairs = tokens * k;
  if (!indices.device().is_cpu()) {
    // Built on the device with no host synchronisation.  The range check runs
    // there too and reports a bad index at a later call (cuda/routing.cu says
    // why); until then bad indices count as segment 0, so nothing reads out
    // of bounds.  No consumer needs the counts on the host: the grouped GEMMs
    // find their segments on the device.
    const Device device = indices.device();
    Tensor chosen = Tensor::empty({pairs}, DType::i32, device);  // pair p -> segment
    kernels::device_kernels(indices).routing->check_indices(indices.contiguous().reshape({pairs}), num_segments,
                                                            kernels::IndexUse::route_segment, k, chosen);
    Tensor offsets = Tensor::empty({num_segments + 1}, DType::i32, device);
    Tensor order = Tensor::empty({pairs}, DType::i32, device);
    Tensor position = Tensor::empty({pairs}, DType::i32, device);
    Tensor segment = Tensor::empty({pairs}, DType::i32, device);
    Tensor counts = Tensor::empty({num_segments}, DType::i32, device);
    kernels::device_kernels(indices).routing->route(chosen, num_segments, offsets, order, position, segment, counts);
    return RoutePlan(tokens, k, num_segments, offsets, order, position, segment, counts);
  }
  std::vector<int32_t> chosen = indices.to_vector<int32_t>();  // pair p -> segment

  // 1. histogram   2. exclusive prefix sum   3. stable scatter in pair order.
  std::vector<int32_t> counts(num_segments, 0);
  for (int64_t p = 0; p < pairs; ++p) {
    HEADROOM_CHECK(chosen[p] >= 0 && chosen[p] < num_segments, "[route] index ", chosen[p], " of token ", p / k,
                   " is outside [0, ", num_segments, ")");
    ++counts[chosen[p]];
  }
  std::vector<int32_t> offsets(num_segments + 1, 0);
  for (int64_t e = 0; e < num_segments; ++e) offsets[e + 1] = offsets[e] + counts[e];
  std::vector<int32_t> next(offsets.begin(), offsets.end() - 1);
  std::vector<int32_t> order(pairs), position(pairs), segment(pairs);
  for (int64_t p = 0; p < pairs; ++p) {
    int32_t r = next[chosen[p]]++;
    order[r] = static_cast<int32_t>(p);
    position[p] = r;
    segment[r] = chosen[p];
  }
  return RoutePlan(tokens, k, num_segments, Tensor::from_vector(offsets), Tensor::from_vector(order),
                   Tensor::from_vector(position), Tensor::from_vector(segment), Tensor::from_vector(counts));
}

namespace {

// Checks that gates are [N, k] of y's dtype (or undefined, meaning all ones).
void check_gates(const char* op, const Tensor& gates, const Tensor& y, const RoutePlan& plan) {
  if (!gates.defined()) return;
  check_dtype(op, gates, y.dtype(), "gates");
  HEADROOM_CHECK(gates.shape() == Shape({plan.num_tokens, plan.k}), "[", op, "] gates have shape ",
                 shape_str(gates.shape()), " but the plan routes ", plan.num_tokens, " tokens with k=", plan.k,
                 ", expected (", plan.num_tokens, ",", plan.k, ")");
}

// ---- the kernels on either device: one branch each ------------------------------------

// For o < outer: out[o, r] = scale[pair[r]] * src[o, pair[r] / group] (scale undefined = 1).
// src: [outer, S, width]  pair: [R]  out: [outer, R, width]; f32, f64 or i32.
void run_gather_rows(const Tensor& src, int64_t outer, int64_t width, const Tensor& pair, int64_t group,
                     const Tensor& scale, const Tensor& out) {
  if (out.numel() == 0) return;
  if (!src.device().is_cpu())
    return kernels::device_kernels(src).routing->gather_rows(src, outer, width, pair, group, scale, out);
  const int64_t src_rows = src.numel() / (outer * width), rows = pair.numel();
  auto gather = [&](auto zero) {
    using T = decltype(zero);
    for (int64_t o = 0; o < outer; ++o) HEADROOM_CPU_KERNEL(gather_rows)
    (src.data<T>() + o * src_rows * width, width, pair.data<int32_t>(), group, data_or_null<T>(scale), rows,
     out.data<T>() + o * rows * width);
  };
  if (src.dtype() == DType::i32) gather(int32_t{});
  else dispatch_floating(src.dtype(), gather);
}

// For o < outer: out[o, d] = Σ over q in [starts[d], starts[d+1]), ascending, of
// weight[q] * src[o, row[q]] (weight undefined = 1; starts undefined = `group`
// entries per destination).   src: [outer, S, width]  out: [outer, dests, width]
void run_sum_rows(const Tensor& src, int64_t outer, int64_t width, const Tensor& starts, int64_t group,
                  const Tensor& row, const Tensor& weight, int64_t dests, const Tensor& out) {
  if (out.numel() == 0) return;
  if (!src.device().is_cpu())
    return kernels::device_kernels(src).routing->sum_rows(src, outer, width, starts, group, row, weight, dests, out);
  std::vector<int32_t> uniform;
  if (!starts.defined())
    for (int64_t d = 0; d <= dests; ++d) uniform.push_back(int32_t(d * group));
  const int32_t* first = starts.defined() ? starts.data<int32_t>() : uniform.data();
  const int64_t src_rows = src.numel() / (outer * width);
  dispatch_floating(src.dtype(), [&](auto zero) {
    using T = decltype(zero);
    for (int64_t o = 0; o < outer; ++o) HEADROOM_CPU_KERNEL(sum_rows)
    (src.data<T>() + o * src_rows * width, width, first, row.data<int32_t>(), data_or_null<T>(weight), dests,
     out.data<T>() + o * dests * width);
  });
}

// Between rows [rows, n] and their picked entries [rows, k] (index: [rows, k]):
//   take: out[row, j] = src[row, index[row, j]]
//   put:  out[row, index[row, j]] += src[row, j], j ascending (its transpose)
enum class Along { take, put };
void run_along_rows(Along along, const Tensor& src, const Tensor& index, int64_t rows, int64_t n, int64_t k,
                    const Tensor& out) {
  if (!src.device().is_cpu()) {
    kernels::RoutingKernels& kernels = *kernels::device_kernels(src).routing;
    if (along == Along::take) return kernels.take_along_rows(src, index, rows, n, k, out);
    return kernels.put_along_rows(src, index, rows, n, k, out);
  }
  dispatch_floating(src.dtype(), [&](auto zero) {
    using T = decltype(zero);
    if (along == Along::take) cpu::take_along_rows<T>(src.data<T>(), index.data<int32_t>(), rows, n, k, out.data<T>());
    else cpu::put_along_rows<T>(src.data<T>(), index.data<int32_t>(), rows, n, k, out.data<T>());
  });
}

// The indices to read with, each checked against [0, limit).  On the host
// bad_index(position, value) is called for a bad one and throws; on CUDA the check
// runs on the device, a bad index is read as 0 and a later call reports it
// (ops/kernels/routing.h).  flat: i32 [count], contiguous.
template <typename Message>
Tensor checked_indices(const Tensor& flat, int64_t limit, kernels::IndexUse use, Message&& bad_index) {
  if (!flat.device().is_cpu()) {
    Tensor safe = Tensor::empty(flat.shape(), DType::i32, flat.device());
    kernels::device_kernels(flat).routing->check_indices(flat, limit, use, 1, safe);
    return safe;
  }
  const int32_t* idx = flat.data<int32_t>();
  for (int64_t i = 0; i < flat.numel(); ++i)
    if (idx[i] < 0 || idx[i] >= limit) bad_index(i, idx[i]);
  return flat;
}

// [N*k, D]: row r = gates[pair] * x[pair / k] with pair = order[r] (gates
// undefined = 1).  x: [N, D]  gates: [N, k]  order: [N*k]
Tensor gather_slots(const Tensor& x, const Tensor& gates, const Tensor& order, int64_t k) {
  Tensor out = Tensor::empty({order.numel(), x.size(1)}, x.dtype(), x.device());
  run_gather_rows(x.contiguous(), 1, x.size(1), order, k, gates.defined() ? gates.contiguous() : gates, out);
  return out;
}

// [N, D]: out[t] = sum_j gates[t, j] * y[position[t*k + j]], j ascending (gates
// undefined = 1).  The transpose of gather_slots.  y: [N*k, D]  position: [N*k]
Tensor combine_slots(const Tensor& y, const Tensor& gates, const Tensor& position, int64_t tokens, int64_t k) {
  Tensor out = Tensor::empty({tokens, y.size(1)}, y.dtype(), y.device());
  run_sum_rows(y.contiguous(), 1, y.size(1), Tensor(), k, position, gates.defined() ? gates.contiguous() : gates,
               tokens, out);
  return out;
}

// The gates' part of the gated scatter's backward (CPU only, see
// segment_matmul_scatter): returns dgates [N, k] (dgates[p] = <y[r], dy[r]>
// for the pair p = order[r]) and y_gated [N*k, in] (each row times its gate),
// and scales dy's rows by their gates in place.   y, dy: [N*k, in]  gates: [N*k], pair order
std::pair<Tensor, Tensor> gate_rows_backward(const Tensor& y, const Tensor& gates, const Tensor& order, Tensor& dy,
                                             int64_t tokens, int64_t k) {
  Tensor y_rows = y.contiguous();
  Tensor dgates = Tensor::empty({tokens, k}, y.dtype()), y_gated = Tensor::empty(y.shape(), y.dtype());
  dispatch_floating(y.dtype(), [&](auto zero) {
    using T = decltype(zero);
    cpu::gate_rows_backward<T>(y_rows.data<T>(), gates.data<T>(), order.data<int32_t>(), y.size(0), y.size(1),
                               dy.data<T>(), dgates.data<T>(), y_gated.data<T>());
  });
  return {dgates, y_gated};
}

// [N, k]: dots[t, j] = <y[position[t*k + j]], dout[t]>, the gates' gradient.
Tensor slot_dots(const Tensor& y, const Tensor& dout, const Tensor& position, int64_t tokens, int64_t k) {
  Tensor a = y.contiguous(), b = dout.contiguous();
  Tensor out = Tensor::empty({tokens, k}, y.dtype(), y.device());
  if (!a.device().is_cpu()) {
    kernels::device_kernels(a).routing->row_dots(a, position, b, k, y.size(1), out);
    return out;
  }
  dispatch_floating(y.dtype(), [&](auto zero) {
    using T = decltype(zero);
    cpu::row_dots<T>(a.data<T>(), position.data<int32_t>(), b.data<T>(), k, y.size(1), position.numel(), out.data<T>());
  });
  return out;
}

using kernels::GroupedRows;  // the rows a grouped GEMM reads (ops/kernels/routing.h)

// The grouped GEMM on segments given by offsets [E + 1], w: [E, in, out]:
//   x: [R, in] -> x[seg e] · w[e]: [R, out];  transpose_w: x: [R, out] -> x[seg e] · w[e]ᵀ: [R, in]
Tensor segment_gemm(const GroupedRows& x, const Tensor& w, const Tensor& offsets, int64_t rows, bool transpose_w) {
  // A weight that is the transpose of a contiguous [E, out, in] (MoH's W_q by head) is read as it lies,
  // not copied: at decode the copy cost more than the product (docs/performance.md, "Decoding").
  if (!w.is_contiguous() && w.t().is_contiguous()) return segment_gemm(x, w.t(), offsets, rows, !transpose_w);
  const int64_t in = w.size(1), out_features = w.size(2);
  const Shape out_shape = {rows, transpose_w ? in : out_features};
  // BLAS rejects zero leading dimensions; an empty product is all zeros.
  if (in == 0 || out_features == 0) return Tensor::zeros(out_shape, w.dtype(), w.device());
  Tensor out = Tensor::empty(out_shape, w.dtype(), w.device());  // the segments cover every row
  GroupedRows a{x.data.contiguous(), x.order, x.k};
  Tensor b = w.contiguous();
  if (!b.device().is_cpu()) {
    kernels::device_kernels(b).routing->segment_matmul(a, b, offsets, transpose_w, out);
    return out;
  }
  dispatch_floating(w.dtype(), [&](auto zero) {
    using T = decltype(zero);
    HEADROOM_CPU_KERNEL(segment_matmul)
    (a.raw<T>(), b.data<T>(), offsets.data<int32_t>(), w.size(0), in, out_features, transpose_w, out.data<T>());
  });
  return out;
}

// Its transpose over tokens: y: [R, in] -> out[t] = Σ of y[r] · w[seg r] over
// the rows r of token t (transpose_w: y: [R, out], w[e]ᵀ) -> [tokens, out or in],
// each product scaled by gates[order[r]] when gates ([N*k], CPU only) are given.
// The CPU walks the rows through order, CUDA through position (a token's k rows).
Tensor segment_gemm_scatter(const Tensor& y, const Tensor& w, const Tensor& offsets, const Tensor& order,
                            const Tensor& position, int64_t k, int64_t tokens, bool transpose_w,
                            const Tensor& gates = Tensor()) {
  const int64_t in = w.size(1), out_features = w.size(2);
  const Shape out_shape = {tokens, transpose_w ? in : out_features};
  if (in == 0 || out_features == 0) return Tensor::zeros(out_shape, w.dtype(), w.device());
  Tensor out = Tensor::empty(out_shape, w.dtype(), w.device());  // every token row is written
  Tensor a = y.contiguous(), b = w.contiguous();
  if (!b.device().is_cpu()) {
    kernels::device_kernels(b).routing->segment_matmul_scatter(a, position, k, offsets, b, transpose_w, out);
    return out;
  }
  dispatch_floating(w.dtype(), [&](auto zero) {
    using T = decltype(zero);
    HEADROOM_CPU_KERNEL(segment_matmul_scatter)
    (a.data<T>(), order.data<int32_t>(), k, offsets.data<int32_t>(), w.size(0), b.data<T>(), in, out_features,
     transpose_w, tokens, out.data<T>(), data_or_null<T>(gates));
  });
  return out;
}

// dw[e] = x[seg e]ᵀ · dy[seg e]: [E, in, out], zero for empty segments.
Tensor segment_gemm_weight_grad(const GroupedRows& x, const GroupedRows& dy, const Tensor& offsets,
                                const Shape& w_shape) {
  const Device device = dy.data.device();
  if (shape_numel(w_shape) == 0) return Tensor::zeros(w_shape, dy.data.dtype(), device);
  Tensor dw = Tensor::empty(w_shape, dy.data.dtype(), device);  // the kernel zeroes slices no row uses
  GroupedRows a{x.data.contiguous(), x.order, x.k}, b{dy.data.contiguous(), dy.order, dy.k};
  if (!dw.device().is_cpu()) {
    kernels::device_kernels(dw).routing->segment_matmul_weight_grad(a, b, offsets, dw);
    return dw;
  }
  dispatch_floating(dw.dtype(), [&](auto zero) {
    using T = decltype(zero);
    HEADROOM_CPU_KERNEL(segment_matmul_weight_grad)
    (a.raw<T>(), b.raw<T>(), offsets.data<int32_t>(), w_shape[0], w_shape[1], w_shape[2], dw.data<T>());
  });
  return dw;
}

// The checks every grouped GEMM makes: x floating, weight [E, in, out] of
// x's dtype with E = plan.num_segments.
void check_segment_weight(const char* op, const Tensor& x, const char* x_name, const Tensor& weight,
                          const RoutePlan& plan) {
  check_same_device(op, {x, weight});
  check_floating(op, x, x_name);
  check_dtype(op, weight, x.dtype(), "weight");
  plan.check_usable(op, x.device());
  HEADROOM_CHECK(weight.dim() == 3, "[", op, "] expected weights of shape [E, in, out], got ",
                 shape_str(weight.shape()));
  HEADROOM_CHECK(weight.size(0) == plan.num_segments, "[", op, "] the plan has ", plan.num_segments,
                 " segments but weights have shape ", shape_str(weight.shape()));
}

// x must be [rows, width].
void check_rows(const char* op, const Tensor& x, const char* x_name, int64_t rows, int64_t width,
                const char* rows_meaning, const Tensor& weight) {
  HEADROOM_CHECK(x.dim() == 2 && x.size(0) == rows && x.size(1) == width, "[", op, "] expected ", x_name, " of shape (",
                 rows, ",", width, ") for a plan of ", rows, " ", rows_meaning, " and weights of shape ",
                 shape_str(weight.shape()), ", got ", shape_str(x.shape()));
}

}  // namespace

// ---- topk --------------------------------------------------------------------

TopK topk(const Tensor& x, int64_t k) {
  check_floating("topk", x);
  HEADROOM_CHECK(x.dim() >= 1, "[topk] expected at least one dimension, got a scalar");
  const int64_t n = x.size(-1);
  HEADROOM_CHECK(k >= 1, "[topk] k must be at least 1, got k=", k);
  HEADROOM_CHECK(k <= n, "[topk] k=", k, " exceeds the size ", n, " of the last dimension");
  // x: [rows, n]  ->  values, indices: [rows, k]
  const int64_t rows = n ? x.numel() / n : 0;
  Shape out_shape = x.shape();
  out_shape.back() = k;
  Tensor src = x.contiguous();
  TopK result{Tensor::empty(out_shape, x.dtype(), x.device()), Tensor::empty(out_shape, DType::i32, x.device())};
  if (!src.device().is_cpu()) {
    kernels::device_kernels(src).routing->topk_indices(src, rows, n, k, result.indices);
  } else {
    dispatch_floating(x.dtype(), [&](auto zero) {
      using T = decltype(zero);
      cpu::topk_indices<T>(src.data<T>(), rows, n, k, result.indices.data<int32_t>());
    });
  }
  run_along_rows(Along::take, src, result.indices, rows, n, k, result.values);

  const Shape in_shape = x.shape();
  // dx = g put back at the chosen positions, 0 elsewhere
  autograd::record(result.values, "topk", {x}, {result.indices},
                   [in_shape, rows, n, k](const autograd::Saved& s, const Tensor& g, autograd::Grads& grads) {
                     // g: [rows, k]  ->  dx: [rows, n], zero where nothing was selected
                     Tensor dx = Tensor::zeros(in_shape, g.dtype(), g.device());
                     run_along_rows(Along::put, g.contiguous(), s[0], rows, n, k, dx);
                     grads.add(0, dx);
                   });
  return result;
}

// ---- put_along_rows --------------------------------------------------------------

Tensor put_along_rows(const Tensor& values, const Tensor& indices, int64_t n) {
  const char* op = "put_along_rows";
  check_floating(op, values, "values");
  check_dtype(op, indices, DType::i32, "indices");
  check_same_device(op, {values, indices});
  HEADROOM_CHECK(values.dim() >= 1 && indices.shape() == values.shape(), "[", op,
                 "] expected values [..., k] and indices of the same shape, got ", shape_str(values.shape()), " and ",
                 shape_str(indices.shape()));
  HEADROOM_CHECK(n >= 0, "[", op, "] n must be >= 0, got ", n);
  // values, indices: [rows, k]  ->  out: [rows, n]
  const int64_t k = values.size(-1), rows = k ? values.numel() / k : 0;
  Shape out_shape = values.shape();
  out_shape.back() = n;
  // On CUDA a bad index is written to column 0, which rows of size 0 lack.
  HEADROOM_CHECK(indices.device().is_cpu() || n > 0 || indices.numel() == 0, "[", op, "] cannot put ", k,
                 " values per row into rows of size 0");
  Tensor index = checked_indices(
      indices.contiguous().reshape({-1}), n, kernels::IndexUse::put_column, [&](int64_t i, int32_t value) {
        HEADROOM_FAIL("[", op, "] index ", value, " at position ", i, " is outside [0, n = ", n, ")");
      });
  Tensor out = Tensor::zeros(out_shape, values.dtype(), values.device());
  run_along_rows(Along::put, values.contiguous(), index, rows, n, k, out);

  // dvalues = g taken at the positions the values were put
  autograd::record(
      out, op, {values}, {index},
      [rows, n, k, shape = values.shape()](const autograd::Saved& s, const Tensor& g, autograd::Grads& grads) {
        // g: [rows, n]  ->  dvalues: [rows, k], each value's entry of g
        Tensor dvalues = Tensor::empty(shape, g.dtype(), g.device());
        run_along_rows(Along::take, g.contiguous(), s[0], rows, n, k, dvalues);
        grads.add(0, dvalues);
      });
  return out;
}

// ---- index_select --------------------------------------------------------------

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& indices) {
  check_same_device("index_select", {x, indices});
  check_dtype("index_select", indices, DType::i32, "indices");
  HEADROOM_CHECK(x.dtype() != DType::b8, "[index_select] expected x of dtype f32, f64 or i32, got b8");
  HEADROOM_CHECK(indices.dim() <= 1, "[index_select] expected 0-d or 1-d indices, got shape ",
                 shape_str(indices.shape()));
  const int d = wrap_dim(dim, x.dim(), "index_select");
  // x: [outer, size, inner]  ->  out: [outer, count, inner]
  const int64_t size = x.size(d), count = indices.numel();
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < d; ++i) outer *= x.size(i);
  for (int i = d + 1; i < x.dim(); ++i) inner *= x.size(i);
  // On CUDA a bad index reads row 0 (cuda/routing.cu says why); a dimension
  // of size 0 has no row 0 to read instead, and every index is bad: refuse it here.
  HEADROOM_CHECK(indices.device().is_cpu() || size > 0 || count == 0, "[index_select] cannot select ", count,
                 " indices from dimension ", d, " of size 0 in shape ", shape_str(x.shape()));
  Tensor index = checked_indices(
      indices.contiguous().reshape({count}), size, kernels::IndexUse::select_row, [&](int64_t i, int32_t value) {
        HEADROOM_FAIL("[index_select] index ", value, " at position ", i, " is out of range for dimension ", d,
                      " of size ", size, " in shape ", shape_str(x.shape()));
      });
  Shape out_shape = x.shape();
  out_shape[d] = count;
  Tensor out = Tensor::empty(out_shape, x.dtype(), x.device());
  run_gather_rows(x.contiguous(), outer, inner, index, 1, Tensor(), out);

  const Shape in_shape = x.shape();
  // dx[i] = Σ of g over the output rows that selected row i
  autograd::record(out, "index_select", {x}, {index},
                   [in_shape, outer, size, inner](const autograd::Saved& s, const Tensor& g, autograd::Grads& grads) {
                     // g: [outer, count, inner]  ->  dx: [outer, size, inner]; a route plan
                     // over the indices lists, per destination, the rows that chose it in order.
                     const int64_t count = s[0].numel();
                     if (shape_numel(in_shape) == 0 || count == 0)
                       return grads.add(0, Tensor::zeros(in_shape, g.dtype(), g.device()));
                     Tensor dx = Tensor::empty(in_shape, g.dtype(), g.device());  // every destination row is written
                     RoutePlan plan = route(s[0].reshape({count, 1}), size);
                     run_sum_rows(g.contiguous(), outer, inner, plan.offsets, 1, plan.order, Tensor(), size, dx);
                     grads.add(0, dx);
                   });
  return out;
}

// ---- gather_rows / scatter_add_rows --------------------------------------------

Tensor gather_rows(const Tensor& x, const RoutePlan& plan) {
  check_floating("gather_rows", x);
  plan.check_usable("gather_rows", x.device());
  HEADROOM_CHECK(x.dim() == 2 && x.size(0) == plan.num_tokens, "[gather_rows] expected x of shape [", plan.num_tokens,
                 ", D] for a plan of ", plan.num_tokens, " tokens, got ", shape_str(x.shape()));
  // x: [N, D]  ->  grouped: [N*k, D]
  Tensor grouped = gather_slots(x, Tensor(), plan.order, plan.k);
  const int64_t tokens = plan.num_tokens, k = plan.k;
  // dx[t] = Σ_j g[position of slot (t, j)]: each token sums its slots' rows
  autograd::record(grouped, "gather_rows", {x}, {plan.position},
                   [tokens, k](const autograd::Saved& s, const Tensor& g, autograd::Grads& grads) {
                     grads.add(0, combine_slots(g, Tensor(), s[0], tokens, k));  // dx: [N, D]
                   });
  return grouped;
}

Tensor scatter_add_rows(const Tensor& y_grouped, const Tensor& gates, const RoutePlan& plan) {
  check_floating("scatter_add_rows", y_grouped, "y_grouped");
  plan.check_usable("scatter_add_rows", y_grouped.device());
  HEADROOM_CHECK(y_grouped.dim() == 2 && y_grouped.size(0) == plan.rows(),
                 "[scatter_add_rows] expected y_grouped of shape [", plan.rows(), ", D] for a plan of ",
                 plan.num_tokens, " tokens with k=", plan.k, ", got ", shape_str(y_grouped.shape()));
  if (gates.defined()) check_same_device("scatter_add_rows", {y_grouped, gates});
  check_gates("scatter_add_rows", gates, y_grouped, plan);
  // y_grouped: [N*k, D], gates: [N, k]  ->  out: [N, D]
  const int64_t tokens = plan.num_tokens, k = plan.k;
  Tensor out = combine_slots(y_grouped, gates, plan.position, tokens, k);
  // y_grouped is kept only for the gates' gradient: with constant (or no)
  // gates, backward needs the plan alone.
  Tensor saved_y = gates.defined() && gates.requires_grad() ? y_grouped : Tensor();
  // dy[r] = gate_r · g[token of r], dgate_r = ⟨y[r], g[token of r]⟩
  autograd::record(out, "scatter_add_rows", {y_grouped, gates}, {saved_y, gates, plan.order, plan.position},
                   [tokens, k](const autograd::Saved& s, const Tensor& g, autograd::Grads& grads) {
                     const Tensor &y = s[0], &gates = s[1], &order = s[2], &position = s[3];
                     if (grads.wants(0)) grads.add(0, gather_slots(g, gates, order, k));      // [N*k, D]
                     if (grads.wants(1)) grads.add(1, slot_dots(y, g, position, tokens, k));  // [N, k]
                   });
  return out;
}

// ---- segment_matmul and its gather / scatter forms ----------------------------------

Tensor segment_matmul(const Tensor& x_grouped, const Tensor& weight, const RoutePlan& plan) {
  const char* op = "segment_matmul";
  check_segment_weight(op, x_grouped, "x_grouped", weight, plan);
  check_rows(op, x_grouped, "x_grouped", plan.rows(), weight.size(1), "grouped rows", weight);
  // x: [N*k, in], w: [E, in, out]  ->  y: [N*k, out]
  const int64_t rows = plan.rows();
  Tensor y = segment_gemm({x_grouped}, weight, plan.offsets, rows, /*transpose_w=*/false);
  // per segment e: dx = g · W_eᵀ, dW_e = x_eᵀ · g
  autograd::record(y, op, {x_grouped, weight}, {x_grouped, weight, plan.offsets},
                   [rows](const autograd::Saved& s, const Tensor& g, autograd::Grads& grads) {
                     const Tensor &x = s[0], &w = s[1], &offsets = s[2];  // g: [N*k, out]
                     if (grads.wants(0)) grads.add(0, segment_gemm({g}, w, offsets, rows, /*transpose_w=*/true));
                     if (grads.wants(1)) grads.add(1, segment_gemm_weight_grad({x}, {g}, offsets, w.shape()));
                   });
  return y;
}

Tensor gather_segment_matmul(const Tensor& x, const Tensor& weight, const RoutePlan& plan) {
  const char* op = "gather_segment_matmul";
  check_segment_weight(op, x, "x", weight, plan);
  check_rows(op, x, "x", plan.num_tokens, weight.size(1), "tokens", weight);
  // x: [N, in], w: [E, in, out]  ->  y: [N*k, out]
  const int64_t rows = plan.rows(), tokens = plan.num_tokens, k = plan.k;
  Tensor y = segment_gemm({x, plan.order, k}, weight, plan.offsets, rows, /*transpose_w=*/false);
  // per segment e: dx = (g · W_eᵀ) scattered back to the token rows, dW_e = x_eᵀ · g with x read through the plan
  autograd::record(y, op, {x, weight}, {x, weight, plan.offsets, plan.order, plan.position},
                   [tokens, k](const autograd::Saved& s, const Tensor& g, autograd::Grads& grads) {
                     const Tensor &x = s[0], &w = s[1], &offsets = s[2], &order = s[3], &position = s[4];
                     // g: [N*k, out]
                     if (grads.wants(0))
                       grads.add(0, segment_gemm_scatter(g, w, offsets, order, position, k, tokens,
                                                         /*transpose_w=*/true));
                     if (grads.wants(1)) grads.add(1, segment_gemm_weight_grad({x, order, k}, {g}, offsets, w.shape()));
                   });
  return y;
}

Tensor segment_matmul_scatter(const Tensor& y_grouped, const Tensor& weight, const RoutePlan& plan,
                              const Tensor& gates) {
  const char* op = "segment_matmul_scatter";
  check_segment_weight(op, y_grouped, "y_grouped", weight, plan);
  check_rows(op, y_grouped, "y_grouped", plan.rows(), weight.size(1), "grouped rows", weight);
  if (gates.defined()) check_same_device(op, {y_grouped, gates});
  check_gates(op, gates, y_grouped, plan);
  // y: [N*k, in], w: [E, in, out], gates: [N, k]  ->  out: [N, out]
  const int64_t rows = plan.rows(), tokens = plan.num_tokens, k = plan.k;
  if (gates.defined() && !y_grouped.device().is_cpu())  // the CUDA kernel has no gates: scale the rows first
    return segment_matmul_scatter(y_grouped * index_select(gates.reshape({rows}), 0, plan.order).unsqueeze(1), weight,
                                  plan);
  Tensor flat_gates = gates.defined() ? gates.contiguous().reshape({rows}) : Tensor();  // [N*k], pair order
  Tensor out = segment_gemm_scatter(y_grouped, weight, plan.offsets, plan.order, plan.position, k, tokens,
                                    /*transpose_w=*/false, flat_gates);
  // out[t] = Σ_j gate_tj · y_r W_e:  dy_r = gate · g[t] · W_eᵀ, dW_e = Σ_r gate · y_rᵀ g[t], dgate = ⟨y_r W_e, g[t]⟩
  autograd::record(out, op, {y_grouped, weight, gates}, {y_grouped, weight, plan.offsets, plan.order, flat_gates},
                   [rows, tokens, k](const autograd::Saved& s, const Tensor& g, autograd::Grads& grads) {
                     const Tensor &y = s[0], &w = s[1], &offsets = s[2], &order = s[3], &gates = s[4];
                     // g: [N, out].  dy: the products' gradient, ungated, [N*k, in].
                     Tensor dy;
                     if (grads.wants(0) || grads.wants(2))
                       dy = segment_gemm({g, order, k}, w, offsets, rows, /*transpose_w=*/true);
                     Tensor y_gated = y;
                     if (gates.defined()) {  // on the CPU only: on CUDA the rows were scaled before this op
                       if (!dy.defined()) dy = Tensor::zeros(y.shape(), y.dtype());  // only w's gradient is wanted
                       Tensor dgates;
                       std::tie(dgates, y_gated) = gate_rows_backward(y, gates, order, dy, tokens, k);
                       if (grads.wants(2)) grads.add(2, dgates);
                     }
                     if (grads.wants(0)) grads.add(0, dy);
                     if (grads.wants(1))
                       grads.add(1, segment_gemm_weight_grad({y_gated}, {g, order, k}, offsets, w.shape()));
                   });
  return out;
}

}  // namespace headroom
