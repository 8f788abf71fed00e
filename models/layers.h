#pragma once
// The basic layers: Linear, Embedding, LayerNorm, RMSNorm, Dropout, MLP,
// GatedMLP.  Each is a Module whose forward() calls a few ops; parameter
// names and initialisation follow PyTorch (nn.Linear's weight is [out, in]),
// so checkpoints map one to one onto PyTorch state dicts.
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

// What LayerNorm and RMSNorm share: a model picks one by its norm kind (make_norm).
class Norm : public Module {
 public:
  virtual Tensor forward(const Tensor& x) const = 0;  // normalises the last dimension: [..., d] -> [..., d]
};

// y = (x − mean) / √(var + eps) · weight + bias over the last dimension.  weight [d] (ones), bias [d] (zeros).
class LayerNorm : public Norm {
 public:
  explicit LayerNorm(int64_t dim, double eps = 1e-5, bool affine = true);
  Tensor forward(const Tensor& x) const override;
  Tensor weight, bias;
  double eps;
};

// y = x / √(mean(x²) + eps) · weight over the last dimension (LLaMA).  weight [d] (ones), no bias.
class RMSNorm : public Norm {
 public:
  explicit RMSNorm(int64_t dim, double eps = 1e-6);
  Tensor forward(const Tensor& x) const override;
  Tensor weight;
  double eps;
};

enum class NormKind { layernorm, rmsnorm };
std::shared_ptr<Norm> make_norm(NormKind kind, int64_t dim, double eps);

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

// What MLP and GatedMLP share: a transformer block's feed-forward branch.
class FeedForward : public Module {
 public:
  virtual Tensor forward(const Tensor& x) const = 0;  // [..., d] -> [..., d]
  virtual int64_t macs_per_token() const = 0;         // forward multiply-accumulates of one token
};

// The transformer feed-forward block: fc2(dropout(act(fc1(x)))).
// fc1 [hidden, d], fc2 [d, hidden]; bias: both have one.
class MLP : public FeedForward {
 public:
  MLP(int64_t dim, int64_t hidden, Activation activation = Activation::gelu, double dropout = 0,
      Generator& gen = default_generator(), bool bias = true);
  Tensor forward(const Tensor& x) const override;
  int64_t macs_per_token() const override;  // 2 · d · hidden
  std::shared_ptr<Linear> fc1, fc2;
  std::shared_ptr<Dropout> drop;
  Activation activation;
};

// The gated feed-forward block of LLaMA (SwiGLU with Activation::silu, GeGLU with gelu):
//   down_proj(dropout(act(gate_proj(x)) ⊙ up_proj(x)))
// gate_proj, up_proj [hidden, d], down_proj [d, hidden] (Hugging Face's names);
// bias: all three have one.
class GatedMLP : public FeedForward {
 public:
  GatedMLP(int64_t dim, int64_t hidden, Activation activation = Activation::silu, double dropout = 0,
           Generator& gen = default_generator(), bool bias = true);
  Tensor forward(const Tensor& x) const override;
  int64_t macs_per_token() const override;  // 3 · d · hidden
  std::shared_ptr<Linear> gate_proj, up_proj, down_proj;
  std::shared_ptr<Dropout> drop;
  Activation activation;
};

}  // namespace headroom
