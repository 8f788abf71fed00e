// Layers (models/layers.h): names, shapes, initialisation and that forward is
// the op it wraps; the gated MLP against its composition and by gradcheck (f64).
#include "helpers.h"

using namespace headroom;

TEST_CASE("Linear: PyTorch layout, init bounds, forward = linear op") {
  Generator gen(3);
  Linear layer(8, 4, true, gen);
  CHECK(layer.weight.shape() == Shape{4, 8});
  CHECK(layer.bias.shape() == Shape{4});
  std::vector<float> w = layer.weight.to_vector<float>();
  const float bound = 1.0f / std::sqrt(8.0f);
  CHECK(*std::max_element(w.begin(), w.end()) <= bound);
  CHECK(*std::min_element(w.begin(), w.end()) >= -bound);
  Tensor x = Tensor::randn({3, 8}, gen);
  CHECK_CLOSE(layer.forward(x), matmul(x, layer.weight.t()) + layer.bias, 1e-5);
  Linear no_bias(8, 4, false, gen);
  CHECK_FALSE(no_bias.bias.defined());
  CHECK(no_bias.named_parameters().size() == 1);
  CHECK_THROWS_HEADROOM(Linear(0, 3), "sizes must be positive");
}

TEST_CASE("MLP: names, parameter count, dropout only in training") {
  Generator gen(5);
  MLP mlp(6, 12, Activation::gelu, 0.5, gen);
  NamedTensors params = mlp.named_parameters();
  REQUIRE(params.size() == 4);
  CHECK(params[0].first == "fc1.weight");
  CHECK(params[3].first == "fc2.bias");
  CHECK(mlp.num_parameters() == 6 * 12 + 12 + 12 * 6 + 6);
  Tensor x = Tensor::randn({5, 6}, gen);
  mlp.eval();
  Tensor expected = mlp.fc2->forward(gelu(mlp.fc1->forward(x)));
  CHECK_CLOSE(mlp.forward(x), expected, 1e-6);
  mlp.train();
  CHECK(testing::compare(mlp.forward(x), expected, 1e-6) != "");  // half the hidden units dropped
}

TEST_CASE("Embedding, LayerNorm, RMSNorm wrap their ops") {
  Generator gen(9);
  Embedding emb(10, 4, gen);
  Tensor ids = Tensor::from_vector<int32_t>({3, 3, 9}, {3});
  CHECK(emb.forward(ids).shape() == Shape{3, 4});
  CHECK_CLOSE(emb.forward(ids).select(0, 1), emb.weight.select(0, 3), 0);
  LayerNorm ln(4);
  Tensor x = Tensor::randn({2, 4}, gen);
  CHECK_CLOSE(ln.forward(x), layer_norm(x, Tensor(), Tensor()), 1e-6);
  CHECK(LayerNorm(4, 1e-5, false).named_parameters().empty());
  RMSNorm rms(4);
  CHECK_CLOSE(rms.forward(x), rms_norm(x, Tensor()), 1e-6);
}

TEST_CASE("GatedMLP: Hugging Face's names, parameter count, the SwiGLU composition, no biases, dropout") {
  Generator gen(6);
  GatedMLP mlp(6, 10, Activation::silu, 0.5, gen, /*bias=*/false);
  NamedTensors params = mlp.named_parameters();
  REQUIRE(params.size() == 3);
  CHECK(params[0].first == "gate_proj.weight");
  CHECK(params[1].first == "up_proj.weight");
  CHECK(params[2].first == "down_proj.weight");
  CHECK(mlp.down_proj->weight.shape() == Shape{6, 10});
  CHECK(mlp.num_parameters() == 3 * 6 * 10);
  CHECK(mlp.macs_per_token() == 3 * 6 * 10);
  CHECK(GatedMLP(6, 10, Activation::silu, 0, gen).num_parameters() == 3 * 6 * 10 + 2 * 10 + 6);
  Tensor x = Tensor::randn({2, 5, 6}, gen);
  mlp.eval();
  // down(silu(gate x) ⊙ up x), written out with the ops: silu(g) = g · sigmoid(g).
  Tensor gate = matmul(x, mlp.gate_proj->weight.t()), up = matmul(x, mlp.up_proj->weight.t());
  Tensor expected = matmul(gate * sigmoid(gate) * up, mlp.down_proj->weight.t());
  CHECK_CLOSE(mlp.forward(x), expected, 1e-6, 1e-5);
  mlp.train();
  CHECK(testing::compare(mlp.forward(x), expected, 1e-6) != "");  // half the hidden units dropped
}

TEST_CASE("MLP and GatedMLP without biases; make_norm builds the kind asked for") {
  Generator gen(7);
  MLP mlp(6, 12, Activation::relu, 0, gen, /*bias=*/false);
  CHECK(mlp.named_parameters().size() == 2);
  CHECK(mlp.macs_per_token() == 2 * 6 * 12);
  CHECK(std::dynamic_pointer_cast<LayerNorm>(make_norm(NormKind::layernorm, 4, 1e-5))->bias.defined());
  auto rms = std::dynamic_pointer_cast<RMSNorm>(make_norm(NormKind::rmsnorm, 4, 1e-3));
  REQUIRE(rms);
  CHECK(rms->eps == 1e-3);
  CHECK(rms->named_parameters().size() == 1);
}

TEST_CASE("gradcheck GatedMLP with and without biases, SwiGLU and GeGLU (f64)") {
  Generator gen(8);
  for (bool bias : {true, false})
    for (Activation act : {Activation::silu, Activation::gelu}) {
      CAPTURE(bias);
      GatedMLP mlp(4, 6, act, 0, gen, bias);
      mlp.to(DType::f64);
      std::vector<Tensor> inputs = mlp.parameters();
      inputs.insert(inputs.begin(), Tensor::randn({2, 3, 4}, gen, DType::f64).set_requires_grad());
      auto result = gradcheck([&](const std::vector<Tensor>& in) { return mlp.forward(in[0]); }, inputs);
      CHECK_MESSAGE(result.ok, result.message);
    }
}
