#pragma once
// The basic layers: Linear, Embedding, LayerNorm, RMSNorm, Dropout, MLP.
// Each is a Module whose forward() calls one or two ops; parameter names and
// initialisation follow PyTorch (nn.Linear's weight is [out, in]), so
// checkpoints map one to one onto PyTorch state dicts.
#include <cstdint>
#include <memory>

#include "headroom/core/rng.h"
#include "headroom/models/module.h"
#include "headroom/ops/elementwise.h"

namespace headroom {

// y = x·Wᵀ + b.  weight [out, in], bias [out]; both U(-1/√in, 1/√in) as in PyTorch.
class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true, Generator& gen = default_generator());
  Tensor forward(const Tensor& x) const;  // x: [..., in] -> [..., out]
  Tensor weight, bias;
};

// Rows of a [num_embeddings, dim] table, initialised N(0, 1).
class Embedding : public Module {
 public:
  Embedding(int64_t num_embeddings, int64_t dim, Generator& gen = default_generator());
  Tensor forward(const Tensor& indices) const;  // i32 [...] -> [..., dim]
  Tensor weight;
};

class LayerNorm : public Module {
 public:
  explicit LayerNorm(int64_t dim, double eps = 1e-5, bool affine = true);
  Tensor forward(const Tensor& x) const;  // normalises the last dimension
  Tensor weight, bias;
  double eps;
};

class RMSNorm : public Module {
 public:
  explicit RMSNorm(int64_t dim, double eps = 1e-6);
  Tensor forward(const Tensor& x) const;
  Tensor weight;
  double eps;
};

// Inverted dropout, active only in training mode.
class Dropout : public Module {
 public:
  explicit Dropout(double p, Generator& gen = default_generator()) : p(p), gen_(&gen) {}
  Tensor forward(const Tensor& x) const;
  double p;

 private:
  Generator* gen_;
};

enum class Activation { relu, gelu, gelu_tanh, silu };
Tensor activate(const Tensor& x, Activation activation);

// The transformer feed-forward block: fc2(dropout(act(fc1(x)))).
class MLP : public Module {
 public:
  MLP(int64_t dim, int64_t hidden, Activation activation = Activation::gelu, double dropout = 0,
      Generator& gen = default_generator());
  Tensor forward(const Tensor& x) const;
  std::shared_ptr<Linear> fc1, fc2;
  std::shared_ptr<Dropout> drop;
  Activation activation;
};

}  // namespace headroom
