#include "headroom/models/layers.h"

#include <cmath>

#include "headroom/ops/matmul.h"
#include "headroom/ops/nn.h"

namespace headroom {

Linear::Linear(int64_t in_features, int64_t out_features, bool with_bias, Generator& gen) {
  HEADROOM_CHECK(in_features > 0 && out_features > 0, "[Linear] sizes must be positive, got in=", in_features,
                 " out=", out_features);
  const double bound = 1.0 / std::sqrt(double(in_features));
  weight = register_parameter("weight", Tensor::rand({out_features, in_features}, gen, -bound, bound, DType::f32));
  if (with_bias) bias = register_parameter("bias", Tensor::rand({out_features}, gen, -bound, bound, DType::f32));
}

Tensor Linear::forward(const Tensor& x) const { return linear(x, weight, bias); }

Embedding::Embedding(int64_t num_embeddings, int64_t dim, Generator& gen) {
  weight = register_parameter("weight", Tensor::randn({num_embeddings, dim}, gen));
}

Tensor Embedding::forward(const Tensor& indices) const { return embedding(weight, indices); }

LayerNorm::LayerNorm(int64_t dim, double eps_, bool affine) : eps(eps_) {
  if (affine) {
    weight = register_parameter("weight", Tensor::ones({dim}));
    bias = register_parameter("bias", Tensor::zeros({dim}));
  }
}

Tensor LayerNorm::forward(const Tensor& x) const { return layer_norm(x, weight, bias, eps); }

RMSNorm::RMSNorm(int64_t dim, double eps_) : eps(eps_) { weight = register_parameter("weight", Tensor::ones({dim})); }

Tensor RMSNorm::forward(const Tensor& x) const { return rms_norm(x, weight, eps); }

std::shared_ptr<Norm> make_norm(NormKind kind, int64_t dim, double eps) {
  if (kind == NormKind::rmsnorm) return std::make_shared<RMSNorm>(dim, eps);
  return std::make_shared<LayerNorm>(dim, eps);
}

Tensor Dropout::forward(const Tensor& x) const { return dropout(x, p, is_training(), *gen_); }

Tensor activate(const Tensor& x, Activation activation) {
  switch (activation) {
    case Activation::relu: return relu(x);
    case Activation::gelu: return gelu(x, GeluApprox::erf);
    case Activation::gelu_tanh: return gelu(x, GeluApprox::tanh);
    case Activation::silu: return silu(x);
  }
  HEADROOM_FAIL("[activate] unknown activation");
}

MLP::MLP(int64_t dim, int64_t hidden, Activation act, double p, Generator& gen, bool bias) : activation(act) {
  fc1 = register_module("fc1", std::make_shared<Linear>(dim, hidden, bias, gen));
  fc2 = register_module("fc2", std::make_shared<Linear>(hidden, dim, bias, gen));
  drop = register_module("drop", std::make_shared<Dropout>(p, gen));
}

Tensor MLP::forward(const Tensor& x) const {
  return fc2->forward(drop->forward(activate(fc1->forward(x), activation)));
}

int64_t MLP::macs_per_token() const { return fc1->weight.numel() + fc2->weight.numel(); }

GatedMLP::GatedMLP(int64_t dim, int64_t hidden, Activation act, double p, Generator& gen, bool bias) : activation(act) {
  gate_proj = register_module("gate_proj", std::make_shared<Linear>(dim, hidden, bias, gen));
  up_proj = register_module("up_proj", std::make_shared<Linear>(dim, hidden, bias, gen));
  down_proj = register_module("down_proj", std::make_shared<Linear>(hidden, dim, bias, gen));
  drop = register_module("drop", std::make_shared<Dropout>(p, gen));
}

Tensor GatedMLP::forward(const Tensor& x) const {
  Tensor hidden = activate(gate_proj->forward(x), activation) * up_proj->forward(x);  // [..., hidden]
  return down_proj->forward(drop->forward(hidden));
}

int64_t GatedMLP::macs_per_token() const {
  return gate_proj->weight.numel() + up_proj->weight.numel() + down_proj->weight.numel();
}

}  // namespace headroom
