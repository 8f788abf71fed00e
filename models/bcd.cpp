#include "headroom/models/bcd.h"

#include <unordered_set>

namespace headroom {

std::vector<Tensor> gate_parameters(const BlockCoordinateDescent::Layers& layers) {
  std::vector<Tensor> params;
  for (const auto& layer : layers) {
    HEADROOM_CHECK(layer != nullptr, "[BlockCoordinateDescent] a layer is null");
    for (const Tensor& p : layer->gate_parameters()) params.push_back(p);
  }
  return params;
}

std::vector<Tensor> expert_parameters(const Module& model, const BlockCoordinateDescent::Layers& layers) {
  std::unordered_set<const void*> gates;
  for (const Tensor& p : gate_parameters(layers)) gates.insert(p.impl_ptr());
  std::vector<Tensor> params;
  for (const Tensor& p : model.parameters())
    if (!gates.count(p.impl_ptr())) params.push_back(p);
  return params;
}

namespace {

void set_requires_grad(const std::vector<Tensor>& params, bool on) {
  for (Tensor p : params) p.set_requires_grad(on);
}

}  // namespace

BlockCoordinateDescent::BlockCoordinateDescent(Layers layers, std::shared_ptr<Optimizer> expert_optimizer,
                                               std::shared_ptr<Optimizer> gate_optimizer, const BCDOptions& options)
    : layers_(std::move(layers)),
      expert_optimizer_(std::move(expert_optimizer)),
      gate_optimizer_(std::move(gate_optimizer)),
      options_(options) {
  HEADROOM_CHECK(!layers_.empty(), "[BlockCoordinateDescent] needs at least one MAE layer");
  HEADROOM_CHECK(expert_optimizer_ && gate_optimizer_, "[BlockCoordinateDescent] both optimizers are required");
  HEADROOM_CHECK(options_.warm_start_updates >= 0 && options_.f_updates > 0 && options_.g_updates > 0,
                 "[BlockCoordinateDescent] expected warm_start_updates >= 0 and f_updates, g_updates > 0, got ",
                 options_.warm_start_updates, ", ", options_.f_updates, ", ", options_.g_updates);
  std::unordered_set<const void*> gates;
  for (const Tensor& p : gate_optimizer_->params()) gates.insert(p.impl_ptr());
  for (const Tensor& p : gate_parameters(layers_))
    HEADROOM_CHECK(gates.count(p.impl_ptr()),
                   "[BlockCoordinateDescent] the gate optimizer must hold every gate parameter");
  for (const Tensor& p : expert_optimizer_->params())
    HEADROOM_CHECK(!gates.count(p.impl_ptr()),
                   "[BlockCoordinateDescent] a parameter is in both the expert and the gate optimizer");
}

BlockCoordinateDescent::BlockCoordinateDescent(const Module& model, Layers layers, double expert_lr, double gate_lr,
                                               const BCDOptions& options)
    : BlockCoordinateDescent(layers, std::make_shared<AdamW>(expert_parameters(model, layers), expert_lr),
                             std::make_shared<AdamW>(gate_parameters(layers), gate_lr), options) {}

BlockCoordinateDescent::Block BlockCoordinateDescent::block(int64_t step) const {
  HEADROOM_CHECK(step >= 0, "[BlockCoordinateDescent] step must be >= 0, got ", step);
  if (step < options_.warm_start_updates) return Block::warm;
  if (options_.training == BCDOptions::Training::joint) return Block::joint;
  const int64_t in_cycle = (step - options_.warm_start_updates) % (options_.f_updates + options_.g_updates);
  return in_cycle < options_.f_updates ? Block::F : Block::G;
}

std::string BlockCoordinateDescent::block_kind(int64_t step) const {
  switch (block(step)) {
    case Block::warm: return "warm";
    case Block::F: return "F";
    case Block::G: return "G";
    case Block::joint: return "joint";
  }
  return "";
}

void BlockCoordinateDescent::begin_step(int64_t step) {
  current_ = block(step);
  const MAEMode mode = current_ == Block::warm ? MAEMode::uniform
                       : current_ == Block::F  ? MAEMode::sampled_expert
                                               : MAEMode::mixture;
  for (const auto& layer : layers_) layer->set_mode(mode);
  expert_optimizer_->zero_grad();
  gate_optimizer_->zero_grad();
  set_requires_grad(expert_optimizer_->params(), trains_experts());
  set_requires_grad(gate_optimizer_->params(), trains_gates());
  in_step_ = true;
}

void BlockCoordinateDescent::finish_step() {
  HEADROOM_CHECK(in_step_, "[BlockCoordinateDescent] finish_step() without begin_step()");
  if (trains_experts()) expert_optimizer_->step();
  if (trains_gates()) gate_optimizer_->step();
  set_requires_grad(expert_optimizer_->params(), true);  // between steps every parameter is trainable as usual
  set_requires_grad(gate_optimizer_->params(), true);
  in_step_ = false;
}

std::vector<Tensor> BlockCoordinateDescent::trained_parameters() const {
  std::vector<Tensor> params;
  if (trains_experts()) params = expert_optimizer_->params();
  if (trains_gates())
    for (const Tensor& p : gate_optimizer_->params()) params.push_back(p);
  return params;
}

}  // namespace headroom
