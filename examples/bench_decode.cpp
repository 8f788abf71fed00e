// bench_decode: one decoding step of one attention layer per method, with a
// KV cache of L tokens, timed side by side in one process (docs/performance.md,
// "Decoding").
//
//   bench_decode [--threads N] [--iters N] [--batch B,B,...] [--context L,L,...] [--device D] [--smoke]
//
// d = 512, h = 8 (d_h = 64), causal self-attention, f32, eval mode, no
// autograd.  The cache is filled with random keys and values (a real prefill
// of L = 4096 would cost minutes and time nothing of decoding), then each
// timed call appends one token and attends to the L before it.  Methods:
// MHA, MoH (ρ = 0.5 and 0.75), MoA (E = 8, k = 2, d_h = 64, one shared K/V
// head) and MAE (mixture).  Per method: time per token, tokens/s (B rows per
// step), the cache's bytes; for MHA also the attention op alone against the
// cache-read bound (its bytes over the machine's memory bandwidth, measured
// here by an in-place add) and, where B·L is small enough, the
// recompute-everything baseline (the forward of all L + 1 tokens).
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "bench_common.h"
#include "headroom/core/threading.h"
#include "headroom/examples/common/cli.h"
#include "headroom/examples/common/trainer.h"
#include "headroom/headroom.h"

using namespace headroom;
using namespace headroom::bench;

namespace {

struct Options {
  int threads = 0;
  int iters = 20;
  std::string batch = "1,16", context = "512,4096", device = "cpu";
  bool smoke = false;
};

constexpr int64_t kDim = 512, kHeads = 8;
constexpr int64_t kMaxRecomputeTokens = 8192;  // B·L past which the baseline would take minutes

struct Method {
  std::string name;
  std::shared_ptr<Attention> layer;
  AttentionCache cache;
};

std::vector<Method> methods(Generator& gen, Device device) {
  struct Kind {
    const char* name;
    const char* type;
    StringMap options;
  };
  const Kind kinds[] = {{"MHA", "mha", {}},
                        {"MoH ρ=0.5", "moh", {{"shared_heads", "2"}, {"routed_k", "2"}}},
                        {"MoH ρ=0.75", "moh", {{"shared_heads", "2"}, {"routed_k", "4"}}},
                        {"MoA E=8 k=2", "moa", {{"experts", "8"}, {"k", "2"}, {"head_dim", "64"}}},
                        {"MAE", "mae", {}}};
  std::vector<Method> list;
  for (const Kind& kind : kinds) {
    ModelConfig config;
    config.dim = kDim, config.heads = kHeads, config.max_len = 1 << 20;
    config.attention = AttentionSpec(kind.type, kind.options);
    auto layer = make_attention(config, 0, AttentionRole::decoder_self, gen);
    layer->to(device);
    layer->eval();
    list.push_back({kind.name, layer, {}});
  }
  return list;
}

void wait_for(Device device) {
  if (device.is_cuda()) backend(device).synchronize(device.index);
}

// One token of B rows appended to a cache of `context` random keys and
// values, with room for the timed steps (no growth while timing).
void fill_cache(Method& m, int64_t batch, int64_t context, Generator& gen, Device device) {
  NoGradGuard no_grad;
  m.cache.clear();
  AttentionInput probe{Tensor::randn({batch, 1, kDim}, gen).to(device), Tensor(), true};
  probe.cache = &m.cache;
  m.layer->forward(probe);  // learns the cache's [B, h_kv, ., d_h]
  Shape shape = m.cache.k.shape();
  m.cache.clear();
  shape[2] = context;
  m.cache.append(Tensor::randn(shape, gen).to(device), Tensor::randn(shape, gen).to(device));
  shape[2] = 1;
  m.cache.append(Tensor::randn(shape, gen).to(device), Tensor::randn(shape, gen).to(device));  // grows to 2L now
}

int64_t cache_bytes(const AttentionCache& cache) {
  return (cache.k.numel() + cache.v.numel()) * int64_t(dtype_size(cache.k.dtype()));
}

// GB/s of an in-place add over 64 MiB arrays (reads 2, writes 1).
double memory_bandwidth(Device device) {
  Tensor x = Tensor::zeros({16 << 20}).to(device), y = Tensor::ones({16 << 20}).to(device);
  auto add = [&] {
    add_(x, y);
    wait_for(device);
  };
  std::vector<double> ms;
  for (int i = 0; i < 7; ++i) ms.push_back(time_ms(add, 1));
  return 3.0 * double(x.numel()) * 4 / (median(ms) * 1e6);
}

void bench_shape(const Options& o, int64_t batch, int64_t context, Device device, double gb_per_s) {
  Generator gen(3);
  std::vector<Method> list = methods(gen, device);
  for (Method& m : list) fill_cache(m, batch, context, gen, device);
  Tensor x = Tensor::randn({batch, 1, kDim}, gen).to(device);
  NoGradGuard no_grad;
  // Interleaved: every iteration times one step of each method in turn.
  std::vector<std::vector<double>> times(list.size());
  for (int i = 0; i < o.iters + 2; ++i)
    for (size_t j = 0; j < list.size(); ++j) {
      AttentionInput in{x, Tensor(), true};
      in.cache = &list[j].cache;
      auto step = [&] {
        list[j].layer->forward(in);
        wait_for(device);
      };
      const double ms = time_ms(step, 1);
      if (i >= 2) times[j].push_back(ms);  // the first two warm up
    }
  // MHA's attention op alone: one query per head against the cache.
  Method& mha = list[0];
  Tensor q = Tensor::randn({batch, kHeads, 1, kDim / kHeads}, gen).to(device);
  AttentionOptions causal;
  causal.causal = true, causal.causal_offset = mha.cache.length() - 1;
  auto core = [&] {
    attention(q, mha.cache.k, mha.cache.v, causal);
    wait_for(device);
  };
  std::vector<double> core_ms;
  for (int i = 0; i < o.iters + 2; ++i) core_ms.push_back(time_ms(core, 1));
  core_ms.erase(core_ms.begin(), core_ms.begin() + 2);
  const double bound_ms = double(cache_bytes(mha.cache)) / (gb_per_s * 1e6);
  // The baseline: no cache, the forward of all L + 1 tokens for the last one.
  std::string recompute = "—";
  if (batch * context <= kMaxRecomputeTokens) {
    Tensor whole = Tensor::randn({batch, context + 1, kDim}, gen).to(device);
    auto full = [&] {
      mha.layer->forward({whole, Tensor(), true});
      wait_for(device);
    };
    std::vector<double> ms;
    for (int i = 0; i < std::max(3, o.iters / 4); ++i) ms.push_back(time_ms(full, 1));
    recompute = format("%.2f ms", median(ms));
  }
  Table table("Decoding one token, B = " + std::to_string(batch) + ", L = " + std::to_string(context) + ", " +
                  (device.is_cpu() ? std::to_string(num_threads()) + " thread(s)" : device.str()),
              {"method", "ms / token step", "tokens/s", "vs MHA", "cache MiB"});
  const double mha_ms = median(times[0]);
  for (size_t j = 0; j < list.size(); ++j) {
    const double ms = median(times[j]);
    table.row({list[j].name, format("%.3f", ms) + format(" (IQR %.0f%%)", 100 * relative_iqr(times[j])),
               format("%.0f", double(batch) * 1e3 / ms), format("%.2f", ms / mha_ms),
               format("%.2f", double(cache_bytes(list[j].cache)) / (1 << 20))});
  }
  table.print();
  std::printf(
      "\nMHA: attention op %.3f ms against the cache-read bound %.3f ms (%.1fx; %.1f GB/s); "
      "recompute everything: %s per token\n",
      median(core_ms), bound_ms, median(core_ms) / bound_ms, gb_per_s, recompute.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  examples::Flags flags("bench_decode", "time per token of cached decoding, per attention method");
  flags.add("threads", &o.threads, "CPU threads (0: HEADROOM_NUM_THREADS or the core count)", {0, kMaxThreads});
  flags.add("iters", &o.iters, "timed steps per method", {1, 1'000'000});
  flags.add("batch", &o.batch, "rows per step, comma separated");
  flags.add("context", &o.context, "cached tokens L, comma separated");
  flags.add("device", &o.device, "cpu, cuda or cuda:N");
  flags.add("smoke", &o.smoke, "tiny shapes, one iteration (CI)");
  return examples::run_main(flags, [&] {
    if (!flags.parse(argc, argv)) return 0;
    std::vector<int64_t> batches = examples::parse_int_list("batch", o.batch, 1, 4096);
    std::vector<int64_t> contexts = examples::parse_int_list("context", o.context, 1, 1 << 20);
    if (o.smoke) o.iters = 1, batches = {1}, contexts = {16};
    if (o.threads > 0) set_num_threads(o.threads);
    const Device device = examples::training_device(o.device);
    const double gb_per_s = memory_bandwidth(device);
    for (int64_t batch : batches)
      for (int64_t context : contexts) bench_shape(o, batch, context, device, gb_per_s);
    return 0;
  });
}
