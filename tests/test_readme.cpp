// The README's API tour, compiled and run: if the README's code stops working,
// this test fails.  Keep the two in step.
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <sstream>

#include "helpers.h"

using namespace headroom;

TEST_CASE("the README API tour runs") {
  std::ostringstream cout;  // the tour prints; keep the test output quiet
  std::string path = (std::filesystem::temp_directory_path() / "headroom_readme_mlp.safetensors").string();

  Generator gen(42);
  Tensor x = Tensor::randn({4, 8}, gen);
  Tensor w = Tensor::randn({8, 3}, gen, DType::f64);
  Tensor first_rows = x.slice(0, 0, 2);
  std::vector<float> values = x.to_vector<float>();
  cout << x.t() << "\n";
  CHECK(first_rows.same_storage(x));
  CHECK(w.dtype() == DType::f64);
  CHECK(values.size() == 32);

  Tensor a = Tensor::randn({3}, gen).set_requires_grad();
  Tensor loss = sum(exp(a) * a);
  loss.backward();
  CHECK_CLOSE(a.grad(), exp(a.detach()) * (a.detach() + 1), 1e-5);
  {
    NoGradGuard no_grad;
    CHECK_FALSE((a * 2).requires_grad());
  }

  auto result = gradcheck([](const std::vector<Tensor>& in) { return softmax(in[0], -1); },
                          {Tensor::randn({2, 5}, gen, DType::f64).set_requires_grad()});
  CHECK_MESSAGE(result.ok, result.message);

  MLP mlp(/*dim=*/8, /*hidden=*/32, Activation::gelu);
  AdamW opt(mlp.parameters(), 1e-3);
  opt.zero_grad();
  Tensor logits = mlp.forward(x);
  cross_entropy(logits, Tensor::from_vector<int32_t>({0, 3, 1, 7})).backward();
  clip_grad_norm(opt.params(), 1.0);
  opt.step();

  save_module(mlp, path, {{"note", "demo"}});
  load_module(mlp, path);
  std::filesystem::remove(path);

  Tensor router_logits = Tensor::randn({4, 4}, gen);
  TopK top = topk(softmax(router_logits, -1), 2);
  RoutePlan plan = route(top.indices, /*segments=*/4);
  Tensor experts = Tensor::randn({4, 8, 8}, gen);
  Tensor y = scatter_add_rows(segment_matmul(gather_rows(x, plan), experts, plan), top.values, plan);
  CHECK(y.shape() == Shape{4, 8});
}

TEST_CASE("the README models snippet runs (at tiny sizes)") {
  Tensor tokens = Tensor::from_vector<int32_t>({1, 2, 3, 4, 5, 6, 7, 8}, {2, 4});
  const int64_t n_tokens = 8;
  const std::string path = (std::filesystem::temp_directory_path() / "headroom_readme_lm.safetensors").string();
  ModelConfig c;
  c.vocab = 16, c.dim = 16, c.heads = 4, c.decoder_layers = 2, c.ffn_hidden = 32;
  c.attention = {"moh", {{"routed_k", "2"}}};  // every layer: "mha" | "moa" | "moh" | "mae"
  c.attention.layers[0] = {"mha", {}};         // ... but a dense first layer
  DecoderLM lm(c);
  std::printf("%s\n", lm.describe(128).c_str());  // one line per layer: method, parameters, MACs
  ModelOutput out = lm.forward(tokens);           // logits, every layer's aux loss, routing stats
  Tensor loss = training_loss(cross_entropy(out.out, tokens), out.aux_losses, n_tokens);
  save_module(lm, path, lm.config.to_metadata());
  DecoderLM again(ModelConfig::from_metadata(load_safetensors(path).metadata));
  load_module(again, path);  // the metadata alone rebuilds the mixed model
  Tensor prompt = tokens.narrow(1, 0, 2);
  Generated text = greedy(again, prompt, {/*max_new=*/5});  // also beam_search, sample
  std::filesystem::remove(path);
  loss.backward();
  CHECK(out.out.shape() == Shape{2, 4, 16});
  CHECK(out.aux_losses.size() == 1);  // layer 0 is dense
  CHECK(again.decoder->block(0)->self_attn->kind() == "mha");
  CHECK(again.decoder->block(1)->self_attn->kind() == "moh");
  CHECK(text.tokens == greedy(lm, prompt, {/*max_new=*/5}).tokens);
}
