// The backward engine: an iterative topological sort, then one reverse walk
// that calls each node's backward function and accumulates the gradients it
// returns into the node's inputs.
#include <unordered_map>
#include <unordered_set>

#include "headroom/core/grad_mode.h"
#include "headroom/autograd/node.h"

namespace headroom::autograd {

void Saved::check_versions(const std::string& op) const {
  for (const Item& item : items_) {
    if (!item.tensor.defined()) continue;
    HEADROOM_CHECK(item.tensor.version() == item.version, "[", op,
                   "] a tensor saved for backward was modified in place (version ", item.tensor.version(),
                   ", expected ", item.version, ")");
  }
}

// True when nothing but `g` can see its memory: its only handle, dense over a
// storage of its own.  Such a gradient can be kept or added to in place; any
// other (a backward function may hand one tensor to several inputs, or pass
// grad_out or a saved tensor through) is copied or summed into a new tensor.
bool sole_owner(const Tensor& g) {
  const std::shared_ptr<TensorImpl>& impl = g.impl_shared();
  return impl.use_count() == 1 && impl->storage.use_count() == 1 && impl->offset == 0 && g.is_contiguous() &&
         impl->storage->nbytes == size_t(g.numel()) * dtype_size(g.dtype());
}

// The sum runs on the gradients' device (Backend::accumulate).
void accumulate(Tensor& sum, Tensor g) {
  if (!sum.defined()) {
    sum = std::move(g);
    return;
  }
  HEADROOM_CHECK(sum.shape() == g.shape(), "[autograd] cannot accumulate a gradient of shape ", shape_str(g.shape()),
                 " into one of shape ", shape_str(sum.shape()));
  if (g.dtype() != sum.dtype()) g = g.to(sum.dtype());
  if (!sole_owner(sum)) sum = sum.clone();
  accumulate_elements(g, sum);
}

// The elements of `full` that `region` names, and their shape.
Tensor region_of(const Tensor& full, const SliceRegion& region) {
  return full.slice(region.dim, region.start, region.end, region.step);
}
Shape region_shape(Shape shape, const SliceRegion& region) {
  shape[region.dim] = region.length();
  return shape;
}

// Zeros of `shape` with g in `region`.
Tensor zeros_around(const Shape& shape, const Tensor& g, const SliceRegion& region) {
  Tensor whole = Tensor::zeros(shape, g.dtype(), g.device());
  region_of(whole, region).copy_(g);
  return whole;
}

// whole's elements in `region` += g, in place: the rest is not touched.
void add_to_region(const Tensor& whole, const Tensor& g, const SliceRegion& region) {
  accumulate_elements(g, region_of(whole, region));
}

// sum (the gradient of a tensor of shape `shape`, undefined while none has
// arrived) += g placed in `region`; a shared sum is copied first.
void accumulate_slice(Tensor& sum, const Shape& shape, Tensor g, const SliceRegion& region) {
  if (!sum.defined()) {
    sum = zeros_around(shape, g, region);
    return;
  }
  if (g.dtype() != sum.dtype()) g = g.to(sum.dtype());
  if (!sole_owner(sum)) sum = sum.clone();
  add_to_region(sum, g, region);
}

bool Grads::wanted_checked(size_t i) const {
  HEADROOM_CHECK(i < wanted_.size(), "[", op_, "] backward wrote gradient ", i, " but the op has ", wanted_.size(),
                 " inputs");
  return wanted_[i];
}

void Grads::check_shape(size_t i, const Tensor& grad, const Shape& expected) const {
  HEADROOM_CHECK(grad.shape() == expected, "[", op_, "] backward produced a gradient of shape ",
                 shape_str(grad.shape()), " for input ", i, " of shape ", shape_str(expected));
}

void Grads::add(size_t i, const Tensor& grad) {
  if (!wanted_checked(i)) return;
  check_shape(i, grad, shapes_[i]);
  InputGrad& value = values_[i];
  if (value.slice) value = {zeros_around(shapes_[i], value.grad, *value.slice), std::nullopt};  // now whole
  accumulate(value.grad, grad);
}

void Grads::add_to_slice(size_t i, const Tensor& grad, const SliceRegion& region) {
  if (!wanted_checked(i)) return;
  check_shape(i, grad, region_shape(shapes_[i], region));
  HEADROOM_CHECK(!values_[i].grad.defined(), "[", op_, "] backward gave input ", i,
                 " a slice gradient after another gradient");
  values_[i] = {grad, region};
}

bool needs_grad(const std::vector<Tensor>& inputs) {
  if (!grad_enabled()) return false;
  for (const Tensor& t : inputs)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

void record(Tensor& out, const char* op, const std::vector<Tensor>& inputs, const std::vector<Tensor>& saved,
            BackwardFn backward_fn) {
  if (!needs_grad(inputs)) return;
  HEADROOM_CHECK(out.is_floating_point(), "[", op, "] output of dtype ", out.dtype(), " cannot carry a gradient");
  auto node = std::make_shared<Node>();
  node->name = op;
  for (const Tensor& in : inputs) {
    Edge edge;
    if (in.defined() && in.requires_grad()) {
      if (in.grad_fn()) edge.node = in.grad_fn();
      else edge.leaf = in.impl_shared();
    }
    node->inputs.push_back(edge);
    node->input_shapes.push_back(in.defined() ? in.shape() : Shape{});
    node->input_dtypes.push_back(in.defined() ? in.dtype() : DType::f32);
  }
  for (const Tensor& s : saved) node->saved.add(s);
  node->backward = std::move(backward_fn);
  node->out_shape = out.shape();
  // `out` may be a fresh tensor or a view of an input; either way it gets its
  // own impl so that the input's grad_fn is untouched.
  out.impl_shared()->grad_fn = std::move(node);
}

namespace {

// Post-order DFS with an explicit stack: no recursion-depth limit.  The order
// holds owning pointers because releasing a node frees its edges, which may
// be the last owners of the nodes still to be visited.
std::vector<std::shared_ptr<Node>> topological_order(const std::shared_ptr<Node>& root) {
  std::vector<std::shared_ptr<Node>> order;
  std::unordered_set<Node*> visited{root.get()};
  std::vector<std::pair<std::shared_ptr<Node>, size_t>> stack{{root, 0}};
  while (!stack.empty()) {
    auto& [node, next] = stack.back();
    if (next < node->inputs.size()) {
      std::shared_ptr<Node> child = node->inputs[next++].node;
      if (child && visited.insert(child.get()).second) stack.push_back({child, 0});
    } else {
      order.push_back(node);
      stack.pop_back();
    }
  }
  return order;  // inputs before the nodes that use them
}

// A leaf's .grad is its own contiguous tensor (optimizers and clipping write
// it in place), so the first gradient is copied and later ones added into it.
// A leaf keeps its first gradient when it is the sole owner (a fresh GEMM
// result, say) and copies it otherwise; later gradients are added in place.
void accumulate_leaf(TensorImpl& leaf, InputGrad input_grad) {
  Tensor g = std::move(input_grad.grad);  // moved: a copy of the handle would make g look shared
  if (g.dtype() != leaf.dtype) g = g.to(leaf.dtype);
  if (input_grad.slice) {  // .grad is the leaf's own: the slice is added in place
    if (!leaf.grad) leaf.grad = zeros_around(leaf.shape, g, *input_grad.slice).impl_shared();
    else add_to_region(Tensor(leaf.grad), g, *input_grad.slice);
    return;
  }
  if (!leaf.grad) {
    leaf.grad = (sole_owner(g) ? g : g.clone()).impl_shared();
    return;
  }
  Tensor current(leaf.grad);
  HEADROOM_CHECK(current.shape() == g.shape(), "[autograd] cannot accumulate a gradient of shape ",
                 shape_str(g.shape()), " into a leaf of shape ", shape_str(current.shape()));
  accumulate_elements(g, current);
}

void release(Node& node) {
  node.saved.clear();
  node.backward = nullptr;
  node.inputs.clear();
  node.released = true;
}

}  // namespace

void backward(const Tensor& root, const Tensor& seed, bool retain_graph) {
  HEADROOM_CHECK(root.requires_grad(), "[backward] called on a tensor of shape ", shape_str(root.shape()),
                 " and dtype ", root.dtype(), " that does not require grad",
                 root.is_floating_point() ? "" : " (integer and mask tensors are never differentiable)");
  Tensor grad_root = seed;
  if (!grad_root.defined()) {
    HEADROOM_CHECK(root.numel() == 1, "[backward] a seed gradient is needed for a tensor of shape ",
                   shape_str(root.shape()), " (only one-element tensors are seeded with 1)");
    grad_root = Tensor::ones(root.shape(), root.dtype(), root.device());
  }
  HEADROOM_CHECK(grad_root.shape() == root.shape(), "[backward] seed of shape ", shape_str(grad_root.shape()),
                 " does not match the output shape ", shape_str(root.shape()));
  NoGradGuard no_grad;
  if (root.is_leaf()) {
    accumulate_leaf(*root.impl_shared(), {grad_root, std::nullopt});
    return;
  }
  Node* root_node = root.grad_fn().get();
  HEADROOM_CHECK(!root_node->released, "[backward] the graph through '", root_node->name,
                 "' was already freed by an earlier backward(); pass retain_graph=true to it "
                 "to call backward twice");
  std::vector<std::shared_ptr<Node>> order = topological_order(root.grad_fn());
  std::unordered_map<Node*, Tensor> pending{{root_node, grad_root}};
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    Node& node = **it;
    auto found = pending.find(&node);
    if (found == pending.end()) continue;  // no gradient flowed here
    Tensor grad_out = std::move(found->second);
    pending.erase(found);
    HEADROOM_CHECK(!node.released, "[backward] the graph through '", node.name,
                   "' was already freed by an earlier backward(); pass retain_graph=true to it");
    node.saved.check_versions(node.name);
    std::vector<bool> wanted;
    for (const Edge& e : node.inputs) wanted.push_back(e.active());
    Grads grads(wanted, node.input_shapes, node.name);
    node.backward(node.saved, grad_out, grads);
    grad_out = Tensor();  // a view of it passed on (reshape's gradient) may now own its storage alone
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      InputGrad g = grads.take(i);
      if (!g.grad.defined()) continue;
      const Edge& edge = node.inputs[i];
      if (edge.node) {
        Tensor& sum = pending[edge.node.get()];
        if (g.slice) accumulate_slice(sum, node.input_shapes[i], std::move(g.grad), *g.slice);
        else accumulate(sum, std::move(g.grad));
      } else if (edge.leaf) {
        accumulate_leaf(*edge.leaf, std::move(g));
      }
    }
    if (!retain_graph) release(node);
  }
}

}  // namespace headroom::autograd

namespace headroom {

Tensor& Tensor::set_requires_grad(bool flag) {
  HEADROOM_CHECK(is_leaf(),
                 "[set_requires_grad] only leaf tensors can be marked; this tensor was "
                 "made by '",
                 grad_fn()->name, "' (use detach() first)");
  HEADROOM_CHECK(!flag || is_floating_point(), "[set_requires_grad] tensors of dtype ", dtype(),
                 " cannot require grad; only f32 and f64 can");
  impl().requires_grad = flag;
  return *this;
}

Tensor Tensor::grad() const { return impl().grad ? Tensor(impl().grad) : Tensor(); }

void Tensor::set_grad(const Tensor& grad) const {
  HEADROOM_CHECK(!grad.defined() || grad.shape() == shape(), "[set_grad] gradient of shape ", shape_str(grad.shape()),
                 " for a tensor of shape ", shape_str(shape()));
  impl().grad = grad.defined() ? grad.impl_shared() : nullptr;
}

void Tensor::zero_grad() const { impl().grad = nullptr; }

void Tensor::backward(const Tensor& seed, bool retain_graph) const { autograd::backward(*this, seed, retain_graph); }

Tensor Tensor::detach() const { return make_view(*this, shape(), strides(), offset()); }

}  // namespace headroom
