#include "headroom/models/transformer.h"

#include <cmath>
#include <sstream>

#include "headroom/core/grad_mode.h"
#include "headroom/core/safetensors.h"
#include "headroom/models/optim.h"
#include "headroom/ops/elementwise.h"
#include "headroom/ops/matmul.h"
#include "headroom/ops/reduce.h"
#include "headroom/ops/routing.h"
#include "headroom/ops/shape.h"

namespace headroom {

// ---- outputs and aux losses ----------------------------------------------------

void ModelOutput::add(const AttentionOutput& attn) {
  if (attn.aux.defined()) aux_losses.push_back(attn.aux);
  stats.push_back(attn.stats);
}

void ModelOutput::append(const ModelOutput& other) {
  aux_losses.insert(aux_losses.end(), other.aux_losses.begin(), other.aux_losses.end());
  stats.insert(stats.end(), other.stats.begin(), other.stats.end());
}

Tensor training_loss(const Tensor& task_mean_loss, const std::vector<AuxLoss>& aux_losses, int64_t target_tokens) {
  HEADROOM_CHECK(task_mean_loss.numel() == 1, "[training_loss] expected a scalar task loss, got shape ",
                 shape_str(task_mean_loss.shape()));
  HEADROOM_CHECK(target_tokens > 0, "[training_loss] target_tokens must be positive, got ", target_tokens);
  Tensor per_token, summed;  // the aux losses added to the mean loss, and to the summed loss
  for (const AuxLoss& aux : aux_losses) {
    if (!aux.defined()) continue;
    Tensor& total = aux.joins_summed_loss ? summed : per_token;
    total = total.defined() ? total + aux.value : aux.value;
  }
  Tensor loss = task_mean_loss;
  if (per_token.defined()) loss = loss + per_token;
  if (summed.defined()) loss = loss + summed / double(target_tokens);
  return loss;
}

Tensor sinusoidal_positions(int64_t start, int64_t length, int64_t dim, DType dtype, Device device) {
  HEADROOM_CHECK(dim > 0 && dim % 2 == 0 && start >= 0 && length >= 0,
                 "[sinusoidal_positions] expected an even dim > 0 "
                 "and start, length >= 0, got dim ",
                 dim, ", start ", start, ", length ", length);
  std::vector<double> table(length * dim);
  for (int64_t p = 0; p < length; ++p)
    for (int64_t i = 0; i < dim / 2; ++i) {
      const double angle = double(start + p) / std::pow(10000.0, 2.0 * i / dim);
      table[p * dim + 2 * i] = std::sin(angle);
      table[p * dim + 2 * i + 1] = std::cos(angle);
    }
  return Tensor::from_vector(table, {length, dim}).to(dtype).to(device);
}

void DecoderCache::reorder(const Tensor& rows) {
  for (auto* caches : {&self, &cross})
    for (AttentionCache& c : *caches) c.reorder(rows);
}

// ---- the block -------------------------------------------------------------------

namespace {
// field: the BlockConfig member; expected: e.g. "positive (the model width d)".
void check_block(bool ok, const char* field, const char* expected, double got) {
  HEADROOM_CHECK(ok, "[TransformerBlock] BlockConfig.", field, " must be ", expected, ", got ", got);
}

std::shared_ptr<FeedForward> make_feed_forward(const BlockConfig& c, Generator& gen) {
  if (c.mlp == MlpKind::gated)
    return std::make_shared<GatedMLP>(c.dim, c.ffn_hidden, c.activation, c.dropout, gen, c.mlp_bias);
  return std::make_shared<MLP>(c.dim, c.ffn_hidden, c.activation, c.dropout, gen, c.mlp_bias);
}
}  // namespace

TransformerBlock::TransformerBlock(const BlockConfig& block_config, std::shared_ptr<Attention> self_attention,
                                   std::shared_ptr<Attention> cross_attention, Generator& gen)
    : config(block_config) {
  check_block(config.dim > 0, "dim", "positive (the model width d)", double(config.dim));
  check_block(config.ffn_hidden > 0, "ffn_hidden", "positive (the MLP hidden width)", double(config.ffn_hidden));
  check_block(config.norm_eps > 0, "norm_eps", "positive (the norms' epsilon)", config.norm_eps);
  check_block(config.dropout >= 0 && config.dropout < 1, "dropout", "in [0, 1)", config.dropout);
  HEADROOM_CHECK(self_attention != nullptr, "[TransformerBlock] the self-attention layer is null");
  const int64_t d = config.dim;
  self_attn_norm = register_module("self_attn_norm", make_norm(config.norm_kind, d, config.norm_eps));
  self_attn = register_module("self_attn", std::move(self_attention));
  if (cross_attention) {
    cross_attn_norm = register_module("cross_attn_norm", make_norm(config.norm_kind, d, config.norm_eps));
    cross_attn = register_module("cross_attn", std::move(cross_attention));
  }
  mlp_norm = register_module("mlp_norm", make_norm(config.norm_kind, d, config.norm_eps));
  mlp = register_module("mlp", make_feed_forward(config, gen));
  drop = register_module("drop", std::make_shared<Dropout>(config.dropout, gen));
}

template <typename F> Tensor TransformerBlock::residual(const Tensor& x, const Norm& norm, F&& f) const {
  if (config.norm == NormPlacement::pre) return x + drop->forward(f(norm.forward(x)));
  return norm.forward(x + drop->forward(f(x)));
}

ModelOutput TransformerBlock::forward(const BlockInput& in) {
  ModelOutput result;
  auto attend = [&](Attention& attention, const AttentionInput& input) {
    AttentionOutput o = attention.forward(input);
    o.aux.layer = attention.path();
    result.add(o);
    return o.out;
  };
  Tensor x = residual(in.x, *self_attn_norm, [&](const Tensor& h) {
    return attend(*self_attn,
                  {h, Tensor(), config.causal, in.padding, in.padding, in.self_cache, in.memory, in.memory_padding});
  });
  if (cross_attn) {
    HEADROOM_CHECK(in.memory.defined(), "[TransformerBlock] a block with cross-attention needs the memory");
    x = residual(x, *cross_attn_norm, [&](const Tensor& h) {
      return attend(*cross_attn,
                    {h, in.memory, false, in.padding, in.memory_padding, in.cross_cache, Tensor(), Tensor()});
    });
  }
  result.out = residual(x, *mlp_norm, [&](const Tensor& h) { return mlp->forward(h); });
  return result;
}

int64_t TransformerBlock::macs(int64_t T, int64_t S) const {
  int64_t total = self_attn->macs(T, T, config.causal) + T * mlp->macs_per_token();
  if (cross_attn) total += cross_attn->macs(T, S, false);
  return total;
}

// ---- shared pieces ------------------------------------------------------------------

namespace {
// Overwrites a freshly registered parameter with N(0, stddev²) draws.
void init_normal(const Tensor& param, double stddev, Generator& gen) {
  NoGradGuard no_grad;
  param.detach().copy_(Tensor::randn(param.shape(), gen, 0, stddev, param.dtype()));
}

void check_config(bool ok, const char* model, const char* what) { HEADROOM_CHECK(ok, "[", model, "] config: ", what); }
}  // namespace

TokenEmbedding::TokenEmbedding(const ModelConfig& cfg, int64_t vocab, Generator& gen) : config(cfg) {
  check_config(vocab > 0 && cfg.dim > 0, "TokenEmbedding", "vocab and dim must be positive");
  tokens = register_module("tokens", std::make_shared<Embedding>(vocab, cfg.dim, gen));
  init_normal(tokens->weight, 1 / std::sqrt(double(cfg.dim)), gen);  // fairseq's N(0, 1/d)
  if (cfg.positions == PositionKind::learned) {
    check_config(cfg.max_len > 0, "TokenEmbedding", "learned positions need max_len > 0");
    positions = register_module("positions", std::make_shared<Embedding>(cfg.max_len, cfg.dim, gen));
    init_normal(positions->weight, 1 / std::sqrt(double(cfg.dim)), gen);
  }
  drop = register_module("drop", std::make_shared<Dropout>(cfg.dropout, gen));
}

Tensor TokenEmbedding::forward(const Tensor& ids, int64_t start) const {
  HEADROOM_CHECK(ids.dim() == 2, "[TokenEmbedding] expected tokens [B, T], got ", shape_str(ids.shape()));
  const int64_t T = ids.size(1);
  Tensor x = tokens->forward(ids);  // [B, T, d]
  if (config.scale_embeddings) x = x * std::sqrt(double(config.dim));
  if (config.positions == PositionKind::none) return drop->forward(x);
  Tensor pos;  // [T, d]
  if (positions) {
    HEADROOM_CHECK(start + T <= config.max_len, "[TokenEmbedding] positions ", start, "..", start + T - 1,
                   " exceed max_len ", config.max_len);
    pos = positions->forward(index_range(start + T, x.device()).narrow(0, start, T));
  } else {
    pos = sinusoids(start, T, x);
  }
  return drop->forward(x + pos);
}

Tensor TokenEmbedding::sinusoids(int64_t start, int64_t T, const Tensor& x) const {
  const Tensor& table = sinusoid_table_;
  if (!table.defined() || table.size(0) < start + T || table.dtype() != x.dtype() || table.device() != x.device()) {
    const int64_t rows = std::max(start + T, table.defined() ? 2 * table.size(0) : 0);
    sinusoid_table_ = sinusoidal_positions(0, rows, config.dim, x.dtype(), x.device());
  }
  return sinusoid_table_.narrow(0, start, T);
}

TransformerStack::TransformerStack(const ModelConfig& config, int64_t layers, AttentionRole role, bool with_cross,
                                   const AttentionFactory& factory, Generator& gen) {
  check_config(layers > 0, "TransformerStack", "the number of layers must be positive");
  blocks = register_module("blocks", std::make_shared<ModuleList>());
  for (int64_t i = 0; i < layers; ++i) {
    auto cross = with_cross ? factory(i, AttentionRole::cross) : nullptr;
    auto self = factory(i, role);
    blocks->push_back(std::make_shared<TransformerBlock>(config.block(role), self, cross, gen));
  }
  if (config.norm == NormPlacement::pre)
    norm = register_module("norm", make_norm(config.norm_kind, config.dim, config.norm_eps));
}

ModelOutput TransformerStack::forward(BlockInput in, DecoderCache* cache) {
  if (cache) {
    cache->self.resize(size());
    for (AttentionCache& layer : cache->self) layer.reserve(cache->reserved);
    cache->cross.resize(block(0)->cross_attn ? size() : 0);
  }
  ModelOutput result;
  for (size_t i = 0; i < size(); ++i) {
    if (cache) {
      in.self_cache = &cache->self[i];
      in.cross_cache = cache->cross.empty() ? nullptr : &cache->cross[i];
    }
    ModelOutput layer = block(i)->forward(in);
    result.append(layer);
    in.x = layer.out;
  }
  result.out = norm ? norm->forward(in.x) : in.x;
  return result;
}

int64_t TransformerStack::macs(int64_t T, int64_t S) const {
  int64_t total = 0;
  for (size_t i = 0; i < size(); ++i) total += block(i)->macs(T, S);
  return total;
}

std::string TransformerStack::describe_layers(const std::string& path, int64_t T, int64_t S) const {
  std::ostringstream os;
  for (size_t i = 0; i < size(); ++i) {
    const TransformerBlock& b = *block(i);
    auto line = [&](const char* name, const Attention& attention, int64_t keys, bool causal) {
      os << "\n  " << path << ".blocks." << i << "." << name << ": " << attention.summary() << "; "
         << attention.num_parameters() << " parameters, " << attention.macs(T, keys, causal) << " forward MACs";
    };
    line("self_attn", *b.self_attn, T, b.config.causal);
    if (b.cross_attn) line("cross_attn", *b.cross_attn, S, false);
  }
  return os.str();
}

namespace {

AttentionFactory factory_or_default(const AttentionFactory& factory, const ModelConfig& config, Generator& gen) {
  return factory ? factory : default_attention_factory(config, gen);
}

// Once a model's layers are built: weights the aux losses by layer count and,
// for layers a custom factory made, records what they are in the config.
void finish_attention(Module& model, ModelConfig& config, bool custom_factory,
                      const std::vector<std::pair<const TransformerStack*, AttentionRole>>& stacks) {
  share_aux_losses(model);
  if (!custom_factory) return;
  auto record = [&](const Attention& layer, AttentionRole role, int64_t i) {
    AttentionChoice choice = attention_choice(layer);
    if (!choice.type.empty()) config.attention.at[{role, i}] = choice;
  };
  for (const auto& [stack, role] : stacks)
    for (size_t i = 0; i < stack->size(); ++i) {
      const TransformerBlock& b = *stack->block(i);
      record(*b.self_attn, role, int64_t(i));
      if (b.cross_attn) record(*b.cross_attn, AttentionRole::cross, int64_t(i));
    }
}

std::shared_ptr<Linear> make_lm_head(Module& model, const ModelConfig& config, Generator& gen) {
  check_config(!(config.tie_embeddings && config.head_bias), "LM head",
               "head_bias needs an untied head (tie_embeddings=false): a tied head is the embedding alone");
  if (config.tie_embeddings) return nullptr;
  return model.register_module("lm_head", std::make_shared<Linear>(config.dim, config.vocab, config.head_bias, gen));
}

// Embeds the target tokens after the cache's position, runs the decoder
// stack and projects to the vocabulary (tied or untied head).
ModelOutput run_decoder(const TokenEmbedding& embed, TransformerStack& decoder, const Linear* lm_head,
                        const Tensor& tokens, const Tensor& padding, const Tensor& memory, const Tensor& memory_padding,
                        DecoderCache* cache) {
  HEADROOM_CHECK(!(cache && padding.defined()), "[decoder] incremental decoding takes no target padding");
  const int64_t start = cache ? cache->position : 0;
  BlockInput in(embed.forward(tokens, start), padding, memory, memory_padding);
  ModelOutput result = decoder.forward(in, cache);
  if (cache) cache->position += tokens.size(1);
  result.out = lm_head ? lm_head->forward(result.out) : linear(result.out, embed.tokens->weight);
  return result;
}

// The blocks' MLP and norms, e.g. "ffn 256, pre-LN" (the defaults) or
// "ffn 172 gated without biases, pre-LN RMSNorm" (LLaMA's).
std::string block_words(const ModelConfig& c) {
  std::string words = "ffn " + std::to_string(c.ffn_hidden);
  if (c.mlp == MlpKind::gated) words += " gated";
  if (!c.mlp_bias) words += " without biases";
  words += c.norm == NormPlacement::pre ? ", pre-LN" : ", post-LN";
  if (c.norm_kind == NormKind::rmsnorm) words += " RMSNorm";
  return words;
}

// An LM's layers and, when it has one, its head's bias, e.g. "2 layers, head bias".
std::string lm_words(const ModelConfig& c, const std::string& layers) {
  return layers + " layers" + (c.head_bias ? ", head bias" : "");
}

std::string describe_model(const std::string& name, const ModelConfig& c, const std::string& shape, int64_t parameters,
                           int64_t macs, const std::string& macs_at, const std::string& layers) {
  std::ostringstream os;
  os << name << ": " << shape << ", d " << c.dim << ", " << block_words(c) << "; " << parameters << " parameters; "
     << macs << " forward MACs " << macs_at << layers;
  return os.str();
}

}  // namespace

// ---- DecoderLM ------------------------------------------------------------------------

DecoderLM::DecoderLM(const ModelConfig& cfg, Generator& gen, const AttentionFactory& factory) : config(cfg) {
  embed = register_module("embed", std::make_shared<TokenEmbedding>(config, config.vocab, gen));
  decoder = register_module(
      "decoder", std::make_shared<TransformerStack>(config, config.decoder_layers, AttentionRole::decoder_self, false,
                                                    factory_or_default(factory, config, gen), gen));
  lm_head = make_lm_head(*this, config, gen);
  finish_attention(*this, config, bool(factory), {{decoder.get(), AttentionRole::decoder_self}});
}

ModelOutput DecoderLM::forward(const Tensor& tokens, const Tensor& padding, DecoderCache* cache) {
  return run_decoder(*embed, *decoder, lm_head.get(), tokens, padding, Tensor(), Tensor(), cache);
}

int64_t DecoderLM::forward_macs(int64_t T) const { return decoder->macs(T, T) + T * config.dim * config.vocab; }

std::string DecoderLM::describe(int64_t T) const {
  return describe_model(
      "DecoderLM", config,
      "vocab " + std::to_string(config.vocab) + ", " + lm_words(config, std::to_string(config.decoder_layers)),
      num_parameters(), forward_macs(T), "at T = " + std::to_string(T), decoder->describe_layers("decoder", T, T));
}

// ---- EncoderDecoder ----------------------------------------------------------------------

EncoderDecoder::EncoderDecoder(const ModelConfig& cfg, Generator& gen, const AttentionFactory& factory) : config(cfg) {
  AttentionFactory make = factory_or_default(factory, config, gen);
  src_embed = register_module("src_embed", std::make_shared<TokenEmbedding>(config, config.source_vocab(), gen));
  tgt_embed = register_module("tgt_embed", std::make_shared<TokenEmbedding>(config, config.vocab, gen));
  encoder = register_module(
      "encoder",
      std::make_shared<TransformerStack>(config, config.encoder_layers, AttentionRole::encoder_self, false, make, gen));
  decoder = register_module(
      "decoder",
      std::make_shared<TransformerStack>(config, config.decoder_layers, AttentionRole::decoder_self, true, make, gen));
  lm_head = make_lm_head(*this, config, gen);
  finish_attention(*this, config, bool(factory),
                   {{encoder.get(), AttentionRole::encoder_self}, {decoder.get(), AttentionRole::decoder_self}});
}

ModelOutput EncoderDecoder::encode(const Tensor& src, const Tensor& src_padding) {
  return encoder->forward(BlockInput(src_embed->forward(src), src_padding));
}

ModelOutput EncoderDecoder::decode(const Tensor& tgt, const Tensor& memory, const Tensor& src_padding,
                                   const Tensor& tgt_padding, DecoderCache* cache) {
  return run_decoder(*tgt_embed, *decoder, lm_head.get(), tgt, tgt_padding, memory, src_padding, cache);
}

int64_t EncoderDecoder::forward_macs(int64_t S, int64_t T) const {
  return encoder->macs(S, S) + decoder->macs(T, S) + T * config.dim * config.vocab;
}

std::string EncoderDecoder::describe(int64_t S, int64_t T) const {
  return describe_model(
      "EncoderDecoder", config,
      "vocab " + std::to_string(config.source_vocab()) + " -> " + std::to_string(config.vocab) + ", " +
          lm_words(config, std::to_string(config.encoder_layers) + "+" + std::to_string(config.decoder_layers)),
      num_parameters(), forward_macs(S, T), "at S = " + std::to_string(S) + ", T = " + std::to_string(T),
      encoder->describe_layers("encoder", S, S) + decoder->describe_layers("decoder", T, S));
}

// ---- ViT -------------------------------------------------------------------------------------

ViT::ViT(const ModelConfig& cfg, Generator& gen, const AttentionFactory& factory) : config(cfg) {
  check_config(config.patch_size > 0 && config.image_size % config.patch_size == 0 && config.image_size > 0, "ViT",
               "image_size must be a positive multiple of patch_size");
  check_config(config.channels > 0 && config.classes > 0, "ViT", "channels and classes must be positive");
  const int64_t patch_width = config.channels * config.patch_size * config.patch_size;
  patch_embed = register_module("patch_embed", std::make_shared<Linear>(patch_width, config.dim, true, gen));
  const bool with_cls = config.pooling == Pooling::cls;
  if (with_cls) {
    cls_token = register_parameter("cls_token", Tensor::zeros({1, 1, config.dim}));
    init_normal(cls_token, 0.02, gen);
  }
  pos_embed = register_parameter("pos_embed", Tensor::zeros({num_patches() + with_cls, config.dim}));
  init_normal(pos_embed, 0.02, gen);
  drop = register_module("drop", std::make_shared<Dropout>(config.dropout, gen));
  encoder = register_module(
      "encoder", std::make_shared<TransformerStack>(config, config.encoder_layers, AttentionRole::encoder_self, false,
                                                    factory_or_default(factory, config, gen), gen));
  head = register_module("head", std::make_shared<Linear>(config.dim, config.classes, true, gen));
  finish_attention(*this, config, bool(factory), {{encoder.get(), AttentionRole::encoder_self}});
}

int64_t ViT::num_patches() const {
  const int64_t side = config.image_size / config.patch_size;
  return side * side;
}

ModelOutput ViT::forward(const Tensor& images) {
  const int64_t C = config.channels, S = config.image_size, p = config.patch_size, g = S / p;
  HEADROOM_CHECK(images.dim() == 4 && images.size(1) == C && images.size(2) == S && images.size(3) == S,
                 "[ViT] expected images [B, ", C, ", ", S, ", ", S, "], got ", shape_str(images.shape()));
  const int64_t B = images.size(0);
  // [B, C, g, p, g, p] -> [B, g, g, C, p, p] -> [B, N, C·p·p]
  Tensor patches = images.reshape({B, C, g, p, g, p}).permute({0, 2, 4, 1, 3, 5}).reshape({B, g * g, C * p * p});
  Tensor x = patch_embed->forward(patches);  // [B, N, d]
  if (cls_token.defined()) x = cat({cls_token.expand({B, 1, config.dim}), x}, 1);
  ModelOutput result = encoder->forward(BlockInput(drop->forward(x + pos_embed)));
  Tensor pooled = cls_token.defined() ? result.out.select(1, 0) : mean(result.out, {1});  // [B, d]
  result.out = head->forward(pooled);
  return result;
}

int64_t ViT::forward_macs() const {
  const int64_t N = num_patches(), tokens = pos_embed.size(0);
  return N * patch_embed->weight.numel() + encoder->macs(tokens, tokens) + config.dim * config.classes;
}

std::string ViT::describe() const {
  return describe_model("ViT", config,
                        std::to_string(config.image_size) + "px / " + std::to_string(config.patch_size) +
                            "px patches, " + std::to_string(config.encoder_layers) + " layers, " +
                            std::to_string(config.classes) + " classes",
                        num_parameters(), forward_macs(), "per image",
                        encoder->describe_layers("encoder", pos_embed.size(0), pos_embed.size(0)));
}

// ---- loading ----------------------------------------------------------------------

namespace {
// The class whose tensors a file holds, told by their top-level names
// (DecoderLM: embed.*, EncoderDecoder: src_embed.*, ViT: patch_embed.*).
std::string model_class(const NamedTensors& tensors) {
  for (const auto& [name, tensor] : tensors) {
    if (name.rfind("src_embed.", 0) == 0) return "EncoderDecoder";
    if (name.rfind("patch_embed.", 0) == 0) return "ViT";
    if (name.rfind("embed.", 0) == 0) return "DecoderLM";
  }
  return "none of DecoderLM, EncoderDecoder, ViT";
}
template <typename M> const char* class_name();
template <> const char* class_name<DecoderLM>() { return "DecoderLM"; }
template <> const char* class_name<EncoderDecoder>() { return "EncoderDecoder"; }
template <> const char* class_name<ViT>() { return "ViT"; }
}  // namespace

template <typename M> std::shared_ptr<M> load_model(const std::string& path, Generator& gen) {
  const SafetensorsFile file = load_safetensors(path);
  const ModelConfig config = ModelConfig::from_checkpoint_metadata(file.metadata, path);
  HEADROOM_CHECK(model_class(file.tensors) == class_name<M>(), "[load_model] ", path, " holds a model of class ",
                 model_class(file.tensors), ", not ", class_name<M>());
  auto model = std::make_shared<M>(config, gen);
  NamedTensors weights;
  for (const auto& entry : file.tensors)
    if (!is_optimizer_entry(entry.first)) weights.push_back(entry);
  model->load_state_dict(weights);
  return model;
}
template std::shared_ptr<DecoderLM> load_model(const std::string&, Generator&);
template std::shared_ptr<EncoderDecoder> load_model(const std::string&, Generator&);
template std::shared_ptr<ViT> load_model(const std::string&, Generator&);

}  // namespace headroom
