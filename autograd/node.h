#pragma once
// The autograd graph.  Each recorded op output holds a Node: edges to its
// inputs, the tensors it saved (with their storage versions), and a backward
// function written beside the op's forward in ops/<family>.cpp.
//
// Recording an op (see ops/matmul.cpp for a short example):
//
//   if (autograd::needs_grad({a, b}))
//     autograd::record(out, "matmul", {a, b}, {a, b},
//         [](const autograd::Saved& s, const Tensor& g, autograd::Grads& grads) {
//           if (grads.wants(0)) grads.add(0, matmul(g, s[1].t()));
//           if (grads.wants(1)) grads.add(1, matmul(s[0].t(), g));
//         });
//
// Backward functions run with grad mode off, so they may call ordinary ops.
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "headroom/core/tensor.h"

namespace headroom::autograd {

struct Node;

// Where an input's gradient goes: the node that produced it, or (for a leaf
// that requires grad) the leaf itself.  Neither when the input needs no grad.
struct Edge {
  std::shared_ptr<Node> node;
  std::shared_ptr<TensorImpl> leaf;
  bool active() const { return node || leaf; }
};

// Tensors saved for backward.  operator[] returns them after the engine has
// checked that none was modified in place since it was saved.
class Saved {
 public:
  void add(const Tensor& t) { items_.push_back({t, t.defined() ? t.version() : 0}); }
  const Tensor& operator[](size_t i) const { return items_.at(i).tensor; }
  size_t size() const { return items_.size(); }
  void check_versions(const std::string& op) const;
  void clear() { items_.clear(); }

 private:
  struct Item {
    Tensor tensor;
    uint64_t version;
  };
  std::vector<Item> items_;
};

// The elements input.slice(dim, start, end, step) of an op input.
struct SliceRegion {
  int dim = 0;
  int64_t start = 0, end = 0, step = 1;
  int64_t length() const { return (end - start + step - 1) / step; }  // elements along dim
};

// A gradient for one input: for the whole input, or (slice's backward) for
// the region `slice` of it, the rest being 0.
struct InputGrad {
  Tensor grad;
  std::optional<SliceRegion> slice;
};

// The gradients a backward function produces, one slot per op input.
class Grads {
 public:
  Grads(std::vector<bool> wanted, std::vector<Shape> shapes, std::string op)
      : wanted_(std::move(wanted)), shapes_(std::move(shapes)), values_(wanted_.size()), op_(std::move(op)) {}
  bool wants(size_t i) const { return i < wanted_.size() && wanted_[i]; }
  void add(size_t i, const Tensor& grad);  // accumulates; checks the shape matches the input
  // The gradient of one slice of input i, which is all this backward gives
  // that input.  The engine adds it into that slice of the input's gradient,
  // so splitting a fused projection into column slices does not build a
  // full-size tensor of zeros per slice and then sum them.
  void add_to_slice(size_t i, const Tensor& grad, const SliceRegion& region);
  InputGrad take(size_t i) { return std::move(values_[i]); }  // the engine hands each one on once

 private:
  bool wanted_checked(size_t i) const;  // wants(i), but throws for an input the op lacks
  void check_shape(size_t i, const Tensor& grad, const Shape& expected) const;
  std::vector<bool> wanted_;
  std::vector<Shape> shapes_;
  std::vector<InputGrad> values_;
  std::string op_;
};

using BackwardFn = std::function<void(const Saved& saved, const Tensor& grad_out, Grads& grads)>;

struct Node {
  std::string name;          // the op's name, used in error messages
  std::vector<Edge> inputs;  // one per op input
  std::vector<Shape> input_shapes;
  std::vector<DType> input_dtypes;
  Saved saved;
  BackwardFn backward;
  Shape out_shape;
  bool released = false;  // saved tensors freed after a backward without retain_graph
};

// True when grad mode is on and any (defined) input requires grad.
bool needs_grad(const std::vector<Tensor>& inputs);

// Attaches a Node to `out` when needs_grad(inputs); otherwise does nothing.
// `out` must be a floating-point tensor: integer outputs are never differentiable.
void record(Tensor& out, const char* op, const std::vector<Tensor>& inputs, const std::vector<Tensor>& saved,
            BackwardFn backward);

// Runs reverse-mode differentiation from `root` (Tensor::backward calls this).
void backward(const Tensor& root, const Tensor& seed, bool retain_graph);

// sum += g (sum = g when sum is undefined); shapes equal.  In place only when
// nothing else can see sum's memory, otherwise sum becomes a new tensor.
void accumulate(Tensor& sum, Tensor g);

}  // namespace headroom::autograd
