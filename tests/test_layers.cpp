// Layers (models/layers.h): names, shapes, initialisation and that forward is
// the op it wraps.
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
