// Module: dotted names, state dicts, checkpoints, modes and registration errors.
#include <unistd.h>

#include <cstdio>

#include "headroom/models/module.h"
#include "helpers.h"

using namespace headroom;

namespace {

struct Linear : Module {
  Tensor weight, bias;
  Linear(int64_t in, int64_t out, Generator& gen) {
    weight = register_parameter("weight", Tensor::randn({in, out}, gen));
    bias = register_parameter("bias", Tensor::zeros({out}));
  }
};

struct Attention : Module {
  std::shared_ptr<Linear> q_proj, o_proj;
  explicit Attention(Generator& gen) {
    q_proj = register_module("q_proj", std::make_shared<Linear>(4, 4, gen));
    o_proj = register_module("o_proj", std::make_shared<Linear>(4, 4, gen));
  }
};

struct Block : Module {
  Tensor scale, mask;
  std::shared_ptr<Attention> attn;
  explicit Block(Generator& gen) {
    scale = register_parameter("scale", Tensor::ones({4}));
    mask = register_buffer("mask", Tensor::from_vector<uint8_t>({1, 0, 1}));
    attn = register_module("attn", std::make_shared<Attention>(gen));
  }
};

struct Model : Module {
  std::shared_ptr<ModuleList> blocks;
  std::shared_ptr<Linear> head;
  explicit Model(uint64_t seed) {
    Generator gen(seed);
    blocks = register_module("blocks", std::make_shared<ModuleList>());
    for (int i = 0; i < 2; ++i) blocks->push_back(std::make_shared<Block>(gen));
    head = register_module("head", std::make_shared<Linear>(4, 2, gen));
  }
};

std::vector<std::string> names_of(const NamedTensors& entries) {
  std::vector<std::string> names;
  for (const auto& entry : entries) names.push_back(entry.first);
  return names;
}

NamedTensors without(NamedTensors entries, const std::string& name) {
  entries.erase(std::remove_if(entries.begin(), entries.end(), [&](const auto& e) { return e.first == name; }),
                entries.end());
  return entries;
}

}  // namespace

TEST_CASE("module: dotted names in registration order, buffers apart, parameter count") {
  Model model(1);
  std::vector<std::string> expected;
  for (std::string b : {"blocks.0.", "blocks.1."})
    for (std::string leaf :
         {"scale", "attn.q_proj.weight", "attn.q_proj.bias", "attn.o_proj.weight", "attn.o_proj.bias"})
      expected.push_back(b + leaf);
  expected.push_back("head.weight");
  expected.push_back("head.bias");
  CHECK(names_of(model.named_parameters()) == expected);
  CHECK(names_of(model.named_buffers()) == std::vector<std::string>{"blocks.0.mask", "blocks.1.mask"});
  NamedTensors state = model.state_dict();
  CHECK(state.size() == expected.size() + 2);
  CHECK(state.back().first == "blocks.1.mask");
  CHECK(model.num_parameters() == 2 * (4 + 2 * (16 + 4)) + (8 + 2));
  for (const Tensor& p : model.parameters()) CHECK(p.requires_grad());
  CHECK_FALSE(model.blocks->at<Block>(0)->mask.requires_grad());
  // The registered tensor and the member are one tensor.
  CHECK(model.named_parameters().back().second.is_same(model.head->bias));
  CHECK(model.blocks->size() == 2);
  CHECK(model.blocks->at<Block>(1)->attn->o_proj->weight.is_same(model.named_parameters()[8].second));
}

TEST_CASE("module: load_state_dict copies values into the existing tensors") {
  Model a(1), b(2);
  CHECK(a.head->weight.to_vector<float>() != b.head->weight.to_vector<float>());
  Tensor member = b.head->weight;  // a handle kept before loading
  const uint64_t version = member.version();
  b.load_state_dict(a.state_dict());
  for (size_t i = 0; i < a.state_dict().size(); ++i) CHECK_CLOSE(b.state_dict()[i].second, a.state_dict()[i].second, 0);
  CHECK(member.is_same(b.head->weight));
  CHECK(member.version() > version);
  CHECK(member.requires_grad());
  // The source stays independent of the destination.
  NoGradGuard no_grad;
  b.head->weight.fill_(7);
  CHECK(a.head->weight.to_vector<float>()[0] != 7);
}

TEST_CASE("module: save_module and load_module through a safetensors file") {
  Model a(1), b(2);
  std::string path = "/tmp/headroom_module_" + std::to_string(getpid()) + ".safetensors";
  save_module(a, path, {{"model", "test"}});
  SafetensorsFile file = load_safetensors(path);
  CHECK(file.metadata.at("model") == "test");
  CHECK(file.tensors.size() == a.state_dict().size());
  load_module(b, path);
  std::remove(path.c_str());
  CHECK_CLOSE(b.blocks->at<Block>(1)->attn->q_proj->weight, a.blocks->at<Block>(1)->attn->q_proj->weight, 0);
  CHECK(b.blocks->at<Block>(0)->mask.to_vector<int>() == std::vector<int>{1, 0, 1});
}

TEST_CASE("module: load_state_dict reports missing, unexpected and mismatched entries") {
  Model model(1);
  NamedTensors state = model.state_dict();
  Tensor before = model.head->bias.clone();

  CHECK_THROWS_HEADROOM(model.load_state_dict(without(state, "head.bias")), "missing: head.bias");
  NamedTensors extra = state;
  extra.emplace_back("extra.weight", Tensor::zeros({1}));
  CHECK_THROWS_HEADROOM(model.load_state_dict(extra), "unexpected: extra.weight");
  NamedTensors both = without(without(extra, "blocks.0.mask"), "head.weight");
  CHECK_THROWS_HEADROOM(model.load_state_dict(both),
                        "[load_state_dict] missing: head.weight, blocks.0.mask; unexpected: extra.weight");

  NamedTensors wrong = state;
  for (auto& [name, t] : wrong) {
    if (name == "head.weight") t = Tensor::zeros({2, 4});
    if (name == "head.bias") t = Tensor::full({2}, 3, DType::f64);
  }
  CHECK_THROWS_HEADROOM(model.load_state_dict(wrong),
                        "shape or dtype mismatch: head.weight (checkpoint (2,4) f32, module (4,2) f32), "
                        "head.bias (checkpoint (2) f64, module (2) f32)");
  CHECK_CLOSE(model.head->bias, before, 0);  // nothing was copied

  NamedTensors twice = state;
  twice.push_back(state.front());
  CHECK_THROWS_HEADROOM(model.load_state_dict(twice), "duplicate: blocks.0.scale");
}

TEST_CASE("module: non-strict loading skips missing and unexpected names") {
  Model a(1), b(2);
  NamedTensors partial = without(a.state_dict(), "head.weight");
  partial.emplace_back("extra", Tensor::zeros({1}));
  Tensor old_head = b.head->weight.clone();
  b.load_state_dict(partial, /*strict=*/false);
  CHECK_CLOSE(b.head->weight, old_head, 0);
  CHECK_CLOSE(b.head->bias, a.head->bias, 0);
  CHECK_CLOSE(b.blocks->at<Block>(0)->scale, a.blocks->at<Block>(0)->scale, 0);
  NamedTensors wrong = {{"head.bias", Tensor::zeros({3})}};
  CHECK_THROWS_HEADROOM(b.load_state_dict(wrong, false), "shape or dtype mismatch: head.bias");
}

TEST_CASE("module: train and eval reach every descendant; zero_grad drops gradients") {
  Model model(1);
  CHECK(model.is_training());
  model.eval();
  CHECK_FALSE(model.is_training());
  CHECK_FALSE(model.blocks->is_training());
  CHECK_FALSE(model.blocks->at<Block>(1)->attn->q_proj->is_training());
  model.blocks->at<Block>(0)->train();
  CHECK(model.blocks->at<Block>(0)->attn->o_proj->is_training());
  CHECK_FALSE(model.head->is_training());
  model.train();
  CHECK(model.head->is_training());

  for (const Tensor& p : model.parameters()) p.set_grad(Tensor::ones(p.shape()));
  model.zero_grad();
  for (const Tensor& p : model.parameters()) CHECK_FALSE(p.grad().defined());
}

TEST_CASE("module: registration errors") {
  Module m;
  m.register_parameter("w", Tensor::zeros({2}));
  CHECK_THROWS_HEADROOM(m.register_buffer("w", Tensor::zeros({2})),
                        "cannot register buffer 'w': the name is already used");
  CHECK_THROWS_HEADROOM(m.register_module("w", std::make_shared<Module>()), "cannot register module 'w'");
  CHECK_THROWS_HEADROOM(m.register_parameter("a.b", Tensor::zeros({2})), "must be non-empty and contain no '.'");
  CHECK_THROWS_HEADROOM(m.register_parameter("", Tensor::zeros({2})), "must be non-empty");
  CHECK_THROWS_HEADROOM(m.register_parameter("i", Tensor::zeros({2}, DType::i32)), "set_requires_grad");
  CHECK_THROWS_HEADROOM(m.register_parameter("u", Tensor()), "parameter 'u' is undefined");
  CHECK_THROWS_HEADROOM(m.register_module("n", std::shared_ptr<Module>()), "module 'n' is null");
  ModuleList list;
  list.push_back(std::make_shared<Module>());
  CHECK_THROWS_HEADROOM(list[1], "index 1 is out of range for a list of 1 modules");
  CHECK_THROWS_HEADROOM(list.at<ModuleList>(0), "child 0 is not of the requested type");
  CHECK(list.children()[0].first == "0");
}
