// Views and movement: reshape, permute, slice, expand, cat, ...  Views share
// storage with their input; the backward of each is the inverse movement.
#include "headroom/ops/shape.h"

#include <algorithm>
#include <numeric>

#include "headroom/core/grad_mode.h"
#include "headroom/autograd/node.h"
#include "headroom/core/backend.h"
#include "headroom/ops/reduce.h"

namespace headroom {

// Records a view op whose backward maps grad_out back to the input's shape.
namespace {
using GradMap = std::function<Tensor(const Tensor& grad_out)>;

Tensor record_view(Tensor out, const char* op, const Tensor& input, GradMap to_input) {
  // dinput = the view's inverse applied to g (to_input)
  autograd::record(out, op, {input}, {}, [to_input](const autograd::Saved&, const Tensor& g, autograd::Grads& grads) {
    grads.add(0, to_input(g));
  });
  return out;
}

// -1 in a requested shape takes the size that keeps numel.
Shape infer_shape(const Shape& requested, int64_t numel, const char* op) {
  Shape shape = requested;
  int64_t known = 1, infer_at = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      HEADROOM_CHECK(infer_at < 0, "[", op, "] only one dimension can be -1, got ", shape_str(requested));
      infer_at = int64_t(i);
    } else {
      HEADROOM_CHECK(shape[i] >= 0, "[", op, "] invalid size in ", shape_str(requested));
      known *= shape[i];
    }
  }
  if (infer_at >= 0) {
    HEADROOM_CHECK(known > 0 && numel % known == 0, "[", op, "] cannot infer -1 in ", shape_str(requested), " for ",
                   numel, " elements");
    shape[infer_at] = numel / known;
  }
  HEADROOM_CHECK(shape_numel(shape) == numel, "[", op, "] shape ", shape_str(requested), " is invalid for a tensor of ",
                 numel, " elements");
  return shape;
}
}  // namespace

Tensor Tensor::view(const Shape& requested) const {
  Shape shape = infer_shape(requested, numel(), "view");
  std::optional<Strides> strides = view_strides(this->shape(), this->strides(), shape);
  HEADROOM_CHECK(strides.has_value(), "[view] a tensor of shape ", shape_str(this->shape()), " with strides ",
                 shape_str(this->strides()), " cannot be viewed as ", shape_str(shape),
                 " without a copy; use reshape() (which copies) or contiguous() first");
  Shape in_shape = this->shape();
  return record_view(make_view(*this, shape, *strides, offset()), "view", *this,
                     [in_shape](const Tensor& g) { return g.reshape(in_shape); });
}

// A view when the tensor is contiguous, otherwise a contiguous copy (view()
// also takes strided tensors whose layout allows the new shape).
Tensor Tensor::reshape(const Shape& requested) const {
  return is_contiguous() ? view(requested) : contiguous().view(requested);
}

Tensor Tensor::permute(const std::vector<int64_t>& dims) const {
  HEADROOM_CHECK(int64_t(dims.size()) == dim(), "[permute] got ", dims.size(), " dimensions for a tensor of shape ",
                 shape_str(shape()));
  Shape shape(dim());
  Strides strides(dim());
  std::vector<int64_t> inverse(dim(), -1);
  for (int i = 0; i < dim(); ++i) {
    int d = wrap_dim(dims[i], dim(), "permute");
    HEADROOM_CHECK(inverse[d] < 0, "[permute] dimension ", d, " appears twice in ", shape_str(dims));
    inverse[d] = i;
    shape[i] = this->shape()[d];
    strides[i] = this->strides()[d];
  }
  return record_view(make_view(*this, shape, strides, offset()), "permute", *this,
                     [inverse](const Tensor& g) { return g.permute(inverse); });
}

Tensor Tensor::transpose(int64_t dim0, int64_t dim1) const {
  std::vector<int64_t> dims(dim());
  std::iota(dims.begin(), dims.end(), 0);
  std::swap(dims[wrap_dim(dim0, dim(), "transpose")], dims[wrap_dim(dim1, dim(), "transpose")]);
  return permute(dims);
}

Tensor Tensor::t() const {
  HEADROOM_CHECK(dim() >= 2, "[t] expected at least 2 dimensions, got shape ", shape_str(shape()));
  return transpose(-2, -1);
}

Tensor Tensor::slice(int64_t dim_, int64_t start, int64_t end, int64_t step) const {
  int d = wrap_dim(dim_, dim(), "slice");
  HEADROOM_CHECK(step >= 1, "[slice] step must be >= 1, got ", step);
  const int64_t n = shape()[d];
  auto clamp_index = [n](int64_t i) { return std::clamp<int64_t>(i < 0 ? i + n : i, 0, n); };
  start = clamp_index(start);
  end = std::max(start, clamp_index(end));
  const autograd::SliceRegion region{d, start, end, step};
  Shape shape = this->shape();
  Strides strides = this->strides();
  shape[d] = region.length();
  strides[d] *= step;
  Tensor out = make_view(*this, shape, strides, offset() + start * this->strides()[d]);
  // The gradient goes to the slice only (the engine adds it in place there).
  autograd::record(
      out, "slice", {*this}, {},
      [region](const autograd::Saved&, const Tensor& g, autograd::Grads& grads) { grads.add_to_slice(0, g, region); });
  return out;
}

Tensor Tensor::narrow(int64_t dim_, int64_t start, int64_t length) const {
  int d = wrap_dim(dim_, dim(), "narrow");
  HEADROOM_CHECK(start >= 0 && length >= 0 && start + length <= shape()[d], "[narrow] range [", start, ", ",
                 start + length, ") is outside dimension ", d, " of size ", shape()[d]);
  return slice(d, start, start + length);
}

Tensor Tensor::select(int64_t dim_, int64_t index) const {
  int d = wrap_dim(dim_, dim(), "select");
  const int64_t n = shape()[d];
  HEADROOM_CHECK(index >= -n && index < n, "[select] index ", index, " is out of range for dimension ", d, " of size ",
                 n);
  if (index < 0) index += n;
  return slice(d, index, index + 1).squeeze(d);
}

Tensor Tensor::expand(const Shape& requested) const {
  HEADROOM_CHECK(requested.size() >= shape().size(), "[expand] cannot expand shape ", shape_str(shape()),
                 " to fewer dimensions ", shape_str(requested));
  const size_t lead = requested.size() - shape().size();
  Shape shape(requested.size());
  Strides strides(requested.size(), 0);
  for (size_t i = 0; i < requested.size(); ++i) {
    if (i < lead) {
      HEADROOM_CHECK(requested[i] >= 0, "[expand] size -1 is not allowed for a new dimension");
      shape[i] = requested[i];
      continue;
    }
    int64_t have = this->shape()[i - lead];
    int64_t want = requested[i] == -1 ? have : requested[i];
    HEADROOM_CHECK(have == want || have == 1, "[expand] cannot expand shape ", shape_str(this->shape()), " to ",
                   shape_str(requested), " (dimension ", i, ": ", have, " to ", want, ")");
    shape[i] = want;
    strides[i] = have == want ? this->strides()[i - lead] : 0;
  }
  Shape in_shape = this->shape();
  return record_view(make_view(*this, shape, strides, offset()), "expand", *this,
                     [in_shape](const Tensor& g) { return sum_to_shape(g, in_shape); });
}

Tensor Tensor::unsqueeze(int64_t dim_) const {
  int d = wrap_dim(dim_, dim() + 1, "unsqueeze");
  Shape shape = this->shape();
  Strides strides = this->strides();
  int64_t inner = d < dim() ? strides[d] * shape[d] : 1;
  shape.insert(shape.begin() + d, 1);
  strides.insert(strides.begin() + d, inner);
  Shape in_shape = this->shape();
  return record_view(make_view(*this, shape, strides, offset()), "unsqueeze", *this,
                     [in_shape](const Tensor& g) { return g.reshape(in_shape); });
}

Tensor Tensor::squeeze(int64_t dim_) const {
  int d = wrap_dim(dim_, dim(), "squeeze");
  if (shape()[d] != 1) return *this;
  Shape shape = this->shape();
  Strides strides = this->strides();
  shape.erase(shape.begin() + d);
  strides.erase(strides.begin() + d);
  Shape in_shape = this->shape();
  return record_view(make_view(*this, shape, strides, offset()), "squeeze", *this,
                     [in_shape](const Tensor& g) { return g.reshape(in_shape); });
}

Tensor Tensor::flatten(int64_t start_dim, int64_t end_dim) const {
  if (dim() == 0) return reshape({1});
  int s = wrap_dim(start_dim, dim(), "flatten"), e = wrap_dim(end_dim, dim(), "flatten");
  HEADROOM_CHECK(s <= e, "[flatten] start_dim ", s, " is after end_dim ", e);
  Shape shape(this->shape().begin(), this->shape().begin() + s);
  int64_t merged = 1;
  for (int i = s; i <= e; ++i) merged *= this->shape()[i];
  shape.push_back(merged);
  shape.insert(shape.end(), this->shape().begin() + e + 1, this->shape().end());
  return reshape(shape);
}

Tensor Tensor::contiguous() const { return is_contiguous() ? *this : clone(); }

Tensor Tensor::clone() const {
  Tensor out = Tensor::empty(shape(), dtype(), device());
  copy_elements(*this, out);
  return record_view(out, "clone", *this, [](const Tensor& g) { return g; });
}

Tensor Tensor::to(DType target) const {
  if (target == dtype()) return *this;
  Tensor out = Tensor::empty(shape(), target, device());
  copy_elements(*this, out);
  if (!is_floating(target)) return out;  // casts to integers or masks end the graph
  DType source = dtype();
  return record_view(out, "to", *this, [source](const Tensor& g) { return g.to(source); });
}

Tensor Tensor::to(Device target) const {
  if (target == device()) return *this;
  Tensor src = contiguous();
  Tensor out = Tensor::empty(shape(), dtype(), target);
  size_t nbytes = size_t(numel()) * dtype_size(dtype());
  if (target.is_cpu()) backend(device()).copy_to_host(out.raw_data(), src.raw_data(), nbytes, device().index);
  else if (device().is_cpu()) backend(target).copy_from_host(out.raw_data(), src.raw_data(), nbytes, target.index);
  else HEADROOM_FAIL("[to] copies between two CUDA devices go through the CPU: call .to(cpu) first");
  Device source = device();
  return record_view(out, "to_device", *this, [source](const Tensor& g) { return g.to(source); });
}

Tensor cat(const std::vector<Tensor>& tensors, int64_t dim_) {
  HEADROOM_CHECK(!tensors.empty(), "[cat] expected at least one tensor");
  const Tensor& first = tensors[0];
  int d = wrap_dim(dim_, first.dim(), "cat");
  check_same_device("cat", tensors);
  Shape shape = first.shape();
  shape[d] = 0;
  for (const Tensor& t : tensors) {
    HEADROOM_CHECK(t.dtype() == first.dtype(), "[cat] dtypes differ: ", first.dtype(), " and ", t.dtype());
    bool compatible = t.dim() == first.dim();
    for (int i = 0; compatible && i < t.dim(); ++i) compatible = i == d || t.size(i) == first.size(i);
    HEADROOM_CHECK(compatible, "[cat] shapes ", shape_str(first.shape()), " and ", shape_str(t.shape()),
                   " differ outside dimension ", d);
    shape[d] += t.size(d);
  }
  Tensor out = Tensor::empty(shape, first.dtype(), first.device());
  std::vector<int64_t> starts;
  int64_t start = 0;
  for (const Tensor& t : tensors) {
    copy_elements(t, out.narrow(d, start, t.size(d)));
    starts.push_back(start);
    start += t.size(d);
  }
  std::vector<int64_t> lengths;
  for (const Tensor& t : tensors) lengths.push_back(t.size(d));
  if (out.is_floating_point())
    // each input gets its own stretch of g along d
    autograd::record(out, "cat", tensors, {},
                     [d, starts, lengths](const autograd::Saved&, const Tensor& g, autograd::Grads& grads) {
                       for (size_t i = 0; i < starts.size(); ++i)
                         if (grads.wants(i)) grads.add(i, g.narrow(d, starts[i], lengths[i]).contiguous());
                     });
  return out;
}

Tensor stack(const std::vector<Tensor>& tensors, int64_t dim_) {
  HEADROOM_CHECK(!tensors.empty(), "[stack] expected at least one tensor");
  int d = wrap_dim(dim_, tensors[0].dim() + 1, "stack");
  std::vector<Tensor> expanded;
  for (const Tensor& t : tensors) {
    HEADROOM_CHECK(t.shape() == tensors[0].shape(), "[stack] shapes differ: ", shape_str(tensors[0].shape()), " and ",
                   shape_str(t.shape()));
    expanded.push_back(t.unsqueeze(d));
  }
  return cat(expanded, d);
}

// The summed dimensions (the leading ones grad has beyond shape, and those
// where shape has 1 and grad more) are reduced by sum with keepdim, which
// runs on the gradient's device in a fixed order (deterministic on CUDA too);
// the reshape then drops the leading ones.
Tensor sum_to_shape(const Tensor& grad, const Shape& shape) {
  if (grad.shape() == shape) return grad;
  check_floating("sum_to_shape", grad);
  Shape broadcast = broadcast_shapes(shape, grad.shape(), "sum_to_shape");
  HEADROOM_CHECK(broadcast == grad.shape(), "[sum_to_shape] shape ", shape_str(shape),
                 " does not broadcast to the gradient's shape ", shape_str(grad.shape()));
  const int64_t lead = grad.dim() - static_cast<int64_t>(shape.size());
  std::vector<int64_t> summed;
  for (int64_t d = 0; d < grad.dim(); ++d)
    if (d < lead || (shape[d - lead] == 1 && grad.size(d) != 1)) summed.push_back(d);
  return sum(grad.detach(), summed, /*keepdim=*/true).reshape(shape);
}

}  // namespace headroom
