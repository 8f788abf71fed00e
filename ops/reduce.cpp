// Reductions: each op arranges its input as a contiguous [outer, n, inner]
// block (ReduceLayout) and runs one CPU or CUDA kernel; backward broadcasts the
// gradient back over the reduced dimensions with reshape + expand.
#include "headroom/ops/reduce.h"

#include "headroom/autograd/node.h"
#include "headroom/ops/cpu/reduce.h"
#include "headroom/ops/kernels/reduce.h"
#include "headroom/ops/kernels/registry.h"
#include "headroom/ops/elementwise.h"

namespace headroom {
namespace {

// Which dimensions of x are reduced.  Validates dims: in range, no repeats;
// an empty list means all of them.
std::vector<bool> reduced_dims(const char* op, const Tensor& x, const std::vector<int64_t>& dims) {
  std::vector<bool> reduced(x.dim(), dims.empty());
  for (int64_t d : dims) {
    int wrapped = wrap_dim(d, x.dim(), op);
    HEADROOM_CHECK(!reduced[wrapped], "[", op, "] dimension ", d, " appears twice in ", shape_str(dims));
    reduced[wrapped] = true;
  }
  return reduced;
}

// How a reduction of x is laid out for the kernel.  When the reduced
// dimensions are adjacent in x (always so for one dimension), x's contiguous
// data already is [outer, n, inner]; otherwise x is permuted so that they come
// last (inner = 1) and copied.  Holds only shapes, so backward functions can
// keep it.
struct ReduceLayout {
  cpu::ReduceDims dims;
  std::vector<int64_t> perm;  // applied to x before the kernel; empty when not needed
  Shape x_shape;
  Shape keep_shape;  // x_shape with 1 at the reduced dimensions
  Shape out_shape;   // keep_shape, or without the reduced dimensions

  // x as the kernel reads it: contiguous [outer, n, inner].  Detached: the op
  // records its own node.
  Tensor arrange(const Tensor& x) const {
    Tensor base = x.detach();
    return (perm.empty() ? base : base.permute(perm)).contiguous();
  }
  // The inverse of arrange for a gradient: [outer, n, inner] data back to x's shape.
  Tensor unarrange(const Tensor& t) const {
    if (perm.empty()) return t.reshape(x_shape);
    Shape arranged_shape;
    std::vector<int64_t> inverse(perm.size());
    for (size_t i = 0; i < perm.size(); ++i) {
      arranged_shape.push_back(x_shape[perm[i]]);
      inverse[perm[i]] = static_cast<int64_t>(i);
    }
    return t.reshape(arranged_shape).permute(inverse);
  }
  // A gradient of the output's shape, broadcast to x's shape.
  Tensor expand(const Tensor& g) const { return g.reshape(keep_shape).expand(x_shape); }
};

ReduceLayout layout_reduction(const char* op, const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  check_floating(op, x);
  const std::vector<bool> reduced = reduced_dims(op, x, dims);
  ReduceLayout r;
  r.x_shape = x.shape();
  std::vector<int64_t> kept_list, reduced_list;
  for (int d = 0; d < x.dim(); ++d) {
    (reduced[d] ? reduced_list : kept_list).push_back(d);
    r.keep_shape.push_back(reduced[d] ? 1 : x.size(d));
    if (!reduced[d] || keepdim) r.out_shape.push_back(r.keep_shape.back());
  }
  // The reduced dimensions occupy positions [first, last] of the arranged tensor.
  int64_t first = 0, last = -1;  // a 0-d x: nothing to reduce, n = 1
  if (!reduced_list.empty()) {
    first = reduced_list.front();
    last = reduced_list.back();
    if (last - first + 1 != static_cast<int64_t>(reduced_list.size())) {
      r.perm = kept_list;
      r.perm.insert(r.perm.end(), reduced_list.begin(), reduced_list.end());
      first = static_cast<int64_t>(kept_list.size());
      last = x.dim() - 1;
    }
  }
  for (int64_t i = 0; i < x.dim(); ++i) {
    int64_t size = x.size(r.perm.empty() ? i : r.perm[i]);
    (i < first ? r.dims.outer : i <= last ? r.dims.n : r.dims.inner) *= size;
  }
  return r;
}

// Runs a value reduction: out has the layout's output shape.
Tensor reduce_values(cpu::ReduceOp op, const Tensor& x, const ReduceLayout& r) {
  Tensor out = Tensor::empty(r.out_shape, x.dtype(), x.device());
  if (!x.device().is_cpu()) kernels::device_kernels(x).reduce->reduce(op, r.arrange(x), r.dims, out);
  else cpu::reduce(op, r.arrange(x), r.dims, out);
  return out;
}

// The indices (i32, output shape) of the first extreme element of each slice,
// and its value when `values` is defined.
Tensor reduce_arg(const char* op, cpu::Extreme which, const Tensor& x, const ReduceLayout& r, const Tensor& values) {
  HEADROOM_CHECK(r.dims.n > 0, "[", op, "] cannot reduce over an empty dimension (input shape ", shape_str(x.shape()),
                 ")");
  Tensor indices = Tensor::empty(r.out_shape, DType::i32, x.device());
  if (!x.device().is_cpu()) kernels::device_kernels(x).reduce->reduce_arg(which, r.arrange(x), r.dims, values, indices);
  else cpu::reduce_arg(which, r.arrange(x), r.dims, values, indices);
  return indices;
}

// Running sums of x's [outer, n, inner] data (contiguous) along n, in x's shape.
Tensor running_sums(const Tensor& x, const ReduceLayout& r, bool reverse) {
  Tensor out = Tensor::empty(r.x_shape, x.dtype(), x.device());
  if (!x.device().is_cpu()) kernels::device_kernels(x).reduce->running_sum(x, r.dims, reverse, out);
  else cpu::running_sum(x, r.dims, reverse, out);
  return out;
}

// max and min: values, with the gradient routed to the chosen element.
Tensor extreme(const char* op, cpu::Extreme which, const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  ReduceLayout r = layout_reduction(op, x, dims, keepdim);
  Tensor values = Tensor::empty(r.out_shape, x.dtype(), x.device());
  Tensor indices = reduce_arg(op, which, x, r, values);
  // dx = g at the first extreme of each slice (the saved indices), 0 elsewhere
  autograd::record(values, op, {x}, {indices}, [r](const autograd::Saved& s, const Tensor& g, autograd::Grads& grads) {
    Tensor grad = Tensor::empty({r.dims.outer, r.dims.n, r.dims.inner}, g.dtype(), g.device());
    Tensor gc = g.contiguous();
    if (!g.device().is_cpu()) kernels::device_kernels(g).reduce->scatter_to_indices(gc, s[0], r.dims, grad);
    else cpu::scatter_to_indices(gc, s[0], r.dims, grad);
    grads.add(0, r.unarrange(grad));
  });
  return values;
}

}  // namespace

Tensor sum(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  ReduceLayout r = layout_reduction("sum", x, dims, keepdim);
  Tensor out = reduce_values(cpu::ReduceOp::sum, x, r);
  // Every element of a slice receives the slice's gradient.
  autograd::record(out, "sum", {x}, {},
                   [r](const autograd::Saved&, const Tensor& g, autograd::Grads& grads) { grads.add(0, r.expand(g)); });
  return out;
}

Tensor mean(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  ReduceLayout r = layout_reduction("mean", x, dims, keepdim);
  Tensor out = reduce_values(cpu::ReduceOp::mean, x, r);
  // dx = g / n for every element of the slice
  autograd::record(out, "mean", {x}, {}, [r](const autograd::Saved&, const Tensor& g, autograd::Grads& grads) {
    grads.add(0, div(r.expand(g), static_cast<double>(r.dims.n)));
  });
  return out;
}

Tensor sum(const Tensor& x) { return sum(x, {}); }
Tensor mean(const Tensor& x) { return mean(x, {}); }

Tensor max(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  return extreme("max", cpu::Extreme::max, x, dims, keepdim);
}
Tensor min(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  return extreme("min", cpu::Extreme::min, x, dims, keepdim);
}
Tensor max(const Tensor& x) { return max(x, {}); }
Tensor min(const Tensor& x) { return min(x, {}); }

// Composed from mean, sub, mul and sum (two passes, numerically sound); its
// gradient 2 (x - mean) / (n - correction) comes from theirs.
Tensor var(const Tensor& x, const std::vector<int64_t>& dims, int64_t correction, bool keepdim) {
  check_floating("var", x);
  const std::vector<bool> reduced = reduced_dims("var", x, dims);
  int64_t n = 1;
  for (int d = 0; d < x.dim(); ++d)
    if (reduced[d]) n *= x.size(d);
  HEADROOM_CHECK(n > correction, "[var] ", n, " reduced element(s) of shape ", shape_str(x.shape()),
                 " leave no degrees of freedom with correction ", correction);
  Tensor centered = x - mean(x, dims, /*keepdim=*/true);
  return sum(centered * centered, dims, keepdim) / static_cast<double>(n - correction);
}

Tensor logsumexp(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  ReduceLayout r = layout_reduction("logsumexp", x, dims, keepdim);
  Tensor out = reduce_values(cpu::ReduceOp::logsumexp, x, r);
  // Saved detached: out's own node must not hold out (a reference cycle).
  autograd::record(out, "logsumexp", {x}, {x, out.detach()},
                   [r](const autograd::Saved& s, const Tensor& g, autograd::Grads& grads) {
                     // d/dx = exp(x - logsumexp(x)), the softmax of each slice.
                     Tensor softmax = exp(s[0] - s[1].reshape(r.keep_shape));  // [x_shape]
                     grads.add(0, g.reshape(r.keep_shape) * softmax);
                   });
  return out;
}

Tensor cumsum(const Tensor& x, int64_t dim) {
  HEADROOM_CHECK(x.dim() >= 1, "[cumsum] expected a tensor with at least one dimension, got a scalar");
  ReduceLayout r = layout_reduction("cumsum", x, {dim}, /*keepdim=*/true);  // one dim: [outer, n, inner] in place
  Tensor out = running_sums(r.arrange(x), r, /*reverse=*/false);
  // x[j] reaches every out[i] with i >= j: its gradient sums g from the far end.
  autograd::record(out, "cumsum", {x}, {}, [r](const autograd::Saved&, const Tensor& g, autograd::Grads& grads) {
    grads.add(0, running_sums(g.contiguous(), r, /*reverse=*/true));
  });
  return out;
}

Tensor argmax(const Tensor& x, int64_t dim, bool keepdim) {
  return reduce_arg("argmax", cpu::Extreme::max, x, layout_reduction("argmax", x, {dim}, keepdim), Tensor());
}
Tensor argmin(const Tensor& x, int64_t dim, bool keepdim) {
  return reduce_arg("argmin", cpu::Extreme::min, x, layout_reduction("argmin", x, {dim}, keepdim), Tensor());
}

}  // namespace headroom
