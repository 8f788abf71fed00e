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
// step), the cache's bytes; for MoH its attention part against MHA's; for
// MHA also the attention op alone against the
// cache-read bound (its bytes over the machine's read bandwidth, measured
// here by a streaming read beside it) and, where B·L is small enough, the
// recompute-everything baseline (the forward of all L + 1 tokens).  One JSON
// line per method and shape, which scripts/bench-decode sets beside PyTorch's.
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
  std::string batch = "1,16", context = "512,4096", device = "cpu", only;
  bool smoke = false;
};

constexpr int64_t kDim = 512, kHeads = 8;
constexpr int64_t kMaxRecomputeTokens = 8192;  // B·L past which the baseline would take minutes

struct Method {
  std::string name;
  std::shared_ptr<Attention> layer;
  AttentionCache cache;
  int64_t active_heads = 0;  // MoH: shared + routed heads per token; 0 for the others
};

struct Kind {
  const char* name;
  const char* type;
  StringMap options;
};
// The methods timed: every one, or MHA (the baseline of every ratio) and
// those of the --only types.
std::vector<Kind> kinds(const Options& o) {
  const std::vector<Kind> list{{"MHA", "mha", {}},
                               {"MoH ρ=0.5", "moh", {{"shared_heads", "2"}, {"routed_k", "2"}}},
                               {"MoH ρ=0.75", "moh", {{"shared_heads", "2"}, {"routed_k", "4"}}},
                               {"MoA E=8 k=2", "moa", {{"experts", "8"}, {"k", "2"}, {"head_dim", "64"}}},
                               {"MAE", "mae", {}}};
  if (o.only.empty()) return list;
  std::vector<Kind> chosen{list[0]};
  for (const std::string& type : examples::split_list(o.only)) {
    if (type != "mha" && type != "moh" && type != "moa" && type != "mae")
      throw examples::UsageError("--only expects mha, moh, moa or mae, got '" + type + "'");
    for (size_t j = 1; j < list.size(); ++j)
      if (list[j].type == type) chosen.push_back(list[j]);
  }
  return chosen;
}

std::vector<Method> methods(const std::vector<Kind>& timed, Generator& gen, Device device) {
  std::vector<Method> list;
  for (const Kind& kind : timed) {
    ModelConfig config;
    config.dim = kDim, config.heads = kHeads, config.max_len = 1 << 20;
    config.attention = AttentionSpec(kind.type, kind.options);
    auto layer = make_attention(config, 0, AttentionRole::decoder_self, gen);
    layer->to(device);
    layer->eval();
    const bool moh = kind.type == std::string("moh");
    const int64_t active =
        moh ? std::stoll(kind.options.at("shared_heads")) + std::stoll(kind.options.at("routed_k")) : 0;
    list.push_back({kind.name, layer, {}, active});
  }
  return list;
}

// A cache of `context` random keys and values, reserved for `context +
// steps` positions as generation reserves prompt + new tokens (no growth
// while timing).
void fill_cache(Method& m, int64_t batch, int64_t context, int64_t steps, Generator& gen, Device device) {
  NoGradGuard no_grad;
  m.cache.clear();
  AttentionInput probe{Tensor::randn({batch, 1, kDim}, gen).to(device), Tensor(), true};
  probe.cache = &m.cache;
  m.layer->forward(probe);  // learns the cache's [B, h_kv, ., d_h]
  Shape shape = m.cache.k.shape();
  m.cache.clear();
  m.cache.reserve(context + steps);
  shape[2] = context;
  m.cache.append(Tensor::randn(shape, gen).to(device), Tensor::randn(shape, gen).to(device));
}

int64_t cache_bytes(const AttentionCache& cache) {
  return (cache.k.numel() + cache.v.numel()) * int64_t(dtype_size(cache.k.dtype()));
}

// Reads x (f32, contiguous, on the CPU) once: a sum in 32 independent lanes,
// so the loads, not the additions' latency, set the pace.
float read_once(const Tensor& x) {
  constexpr int64_t kLanes = 32;
  const float* data = x.data<float>();
  float lanes[kLanes] = {};
  const int64_t n = x.numel() / kLanes * kLanes;
  for (int64_t i = 0; i < n; i += kLanes)
    for (int64_t j = 0; j < kLanes; ++j) lanes[j] += data[i + j];
  float total = 0;
  for (float lane : lanes) total += lane;
  return total;
}

// MHA's attention op alone (one query per head against the cache), timed
// interleaved with a read of 64 MiB that gives the memory bandwidth of the
// moment, so each pair's bound (the cache's bytes read once at that rate)
// sees the same neighbours as its op.  On the CPU the read is read_once, one
// thread like the op at --threads 1; on a GPU, an in-place add (reads 2,
// writes 1), which runs at the device's bandwidth.
struct OpAgainstBound {
  double op_ms = 0, bound_ms = 0, ratio = 0, gb_per_s = 0;  // medians; ratio: over pairs
};

OpAgainstBound mha_op_against_bound(const Options& o, const Method& mha, Generator& gen, Device device) {
  const int64_t batch = mha.cache.k.size(0);
  Tensor q = Tensor::randn({batch, kHeads, 1, kDim / kHeads}, gen).to(device);
  AttentionOptions causal;
  causal.causal = true, causal.causal_offset = mha.cache.length() - 1;
  auto op = [&] {
    attention(q, mha.cache.k, mha.cache.v, causal);
    wait_for(device);
  };
  Tensor x = Tensor::ones({16 << 20}).to(device), y = Tensor::zeros({16 << 20}).to(device);
  const double probe_bytes = (device.is_cpu() ? 1.0 : 3.0) * double(x.numel()) * 4;
  auto probe = [&] {
    if (device.is_cpu()) {
      const float total = read_once(x);
      do_not_optimize(&total);
    } else {
      add_(y, x);
      wait_for(device);
    }
  };
  const double bytes = double(cache_bytes(mha.cache));
  const Comparison c = time_interleaved(op, probe, std::max(o.iters, 3), 1, 2);
  OpAgainstBound r;
  r.gb_per_s = probe_bytes / (c.b_ms * 1e6);
  r.op_ms = c.a_ms;
  r.bound_ms = bytes / (r.gb_per_s * 1e6);
  r.ratio = c.median_pair_time_ratio * probe_bytes / bytes;  // (op / probe) · (the probe's bytes / the cache's)
  return r;
}

// MoH's attention part alone: routed_attention of each row's active heads
// (shared heads 0 and 1, routed ones spread over the rest) against its
// cache, as the layer's routed path runs it, timed interleaved with MHA's op
// over every head.  Returns the median over pairs of MoH's time / MHA's.
double moh_attention_share(const Options& o, const Method& mha, const Method& moh, Generator& gen, Device device) {
  const int64_t batch = moh.cache.k.size(0), d_h = kDim / kHeads, active = moh.active_heads;
  std::vector<int32_t> heads;  // [B, active], distinct within a row
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t j = 0; j < active; ++j) heads.push_back(int32_t(j < 2 ? j : 2 + (b + j - 2) % (kHeads - 2)));
  const RoutePlan plan = route(Tensor::from_vector(heads, {batch, active}).to(device), kHeads);
  Tensor q_rows = Tensor::randn({plan.rows(), d_h}, gen).to(device);
  Tensor q = Tensor::randn({batch, kHeads, 1, d_h}, gen).to(device);
  AttentionOptions causal;
  causal.causal = true, causal.causal_offset = moh.cache.length() - 1;
  auto routed = [&] {
    routed_attention(q_rows, moh.cache.k, moh.cache.v, plan, 1, causal);
    wait_for(device);
  };
  auto dense = [&] {
    attention(q, mha.cache.k, mha.cache.v, causal);
    wait_for(device);
  };
  return time_interleaved(routed, dense, std::max(o.iters, 3), 1, 2).median_pair_time_ratio;
}

// The median ms per step of each method, by the order of methods().
std::vector<double> bench_shape(const Options& o, const std::vector<Kind>& timed, int64_t batch, int64_t context,
                                Device device) {
  Generator gen(3);
  std::vector<Method> list = methods(timed, gen, device);
  for (Method& m : list) fill_cache(m, batch, context, o.iters + 2, gen, device);
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
  Method& mha = list[0];
  const OpAgainstBound core = mha_op_against_bound(o, mha, gen, device);
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
  std::vector<double> medians;
  for (const auto& t : times) medians.push_back(median(t));
  for (size_t j = 0; j < list.size(); ++j) {
    const double ms = medians[j];
    table.row({list[j].name, format("%.3f", ms) + format(" (IQR %.0f%%)", 100 * relative_iqr(times[j])),
               format("%.0f", double(batch) * 1e3 / ms), format("%.2f", ms / medians[0]),
               format("%.2f", double(cache_bytes(list[j].cache)) / (1 << 20))});
  }
  table.print();
  for (size_t j = 0; j < list.size(); ++j)  // for scripts/bench-decode
    std::printf("JSON {\"bench\": \"decode\", \"B\": %lld, \"L\": %lld, \"method\": \"%s\", \"ms\": %.4f}\n",
                (long long)batch, (long long)context, list[j].name.c_str(), medians[j]);
  std::printf(
      "\nMHA: attention op %.3f ms against the cache-read bound %.3f ms (%.1fx; %.1f GB/s); "
      "recompute everything: %s per token\n",
      core.op_ms, core.bound_ms, core.ratio, core.gb_per_s, recompute.c_str());
  for (const Method& m : list) {
    if (m.active_heads == 0) continue;
    const double share = moh_attention_share(o, mha, m, gen, device), rho = double(m.active_heads) / kHeads;
    std::printf("%s: attention part %.2fx MHA's (%.0f%% of the saving of rho = %.2f)\n", m.name.c_str(), share,
                100 * (1 - share) / (1 - rho), rho);
  }
  return medians;
}

// Per batch size, each method's ms per step against L, with µs per cached
// token in brackets: growth linear in L keeps the bracket flat or falling
// (a fixed cost spread over more tokens); a quadratic term makes it climb.
void print_growth(const std::vector<Kind>& timed, int64_t batch, const std::vector<int64_t>& contexts,
                  const std::vector<std::vector<double>>& ms) {
  if (contexts.size() < 2) return;
  std::vector<std::string> columns{"method"};
  for (int64_t L : contexts) columns.push_back("L = " + std::to_string(L));
  Table table("Time per step against L, B = " + std::to_string(batch) + ": ms (µs per cached token)", columns);
  for (size_t j = 0; j < timed.size(); ++j) {
    std::vector<std::string> cells{timed[j].name};
    for (size_t c = 0; c < contexts.size(); ++c)
      cells.push_back(format("%.3f", ms[c][j]) + format(" (%.2f)", 1e3 * ms[c][j] / double(contexts[c])));
    table.row(cells);
  }
  table.print();
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
  flags.add("only", &o.only, "time only MHA and these methods (moh, moa, mae, comma separated; default: all)");
  flags.add("smoke", &o.smoke, "tiny shapes, one iteration (CI)");
  return examples::run_main(flags, [&] {
    if (!flags.parse(argc, argv)) return 0;
    std::vector<int64_t> batches = examples::parse_int_list("batch", o.batch, 1, 4096);
    std::vector<int64_t> contexts = examples::parse_int_list("context", o.context, 1, 1 << 20);
    const std::vector<Kind> timed = kinds(o);
    if (o.smoke) o.iters = 1, batches = {1}, contexts = {16};
    if (o.threads > 0) set_num_threads(o.threads);
    const Device device = examples::training_device(o.device);
    for (int64_t batch : batches) {
      std::vector<std::vector<double>> ms;  // [context][method]
      for (int64_t context : contexts) ms.push_back(bench_shape(o, timed, batch, context, device));
      print_growth(timed, batch, contexts, ms);
    }
    return 0;
  });
}
