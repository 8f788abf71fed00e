// bench_attention: one attention layer of each conditional method against our
// dense MHA at the same shape, forward and forward+backward, timed side by
// side in one process (the tables, and how they are measured: docs/performance.md).
//
//   bench_attention [--threads N] [--iters N] [--batch B] [--seq T,T,...] [--device D] [--tf32]
//                   [--by-host-state N] [--smoke]
//
// d = 512, h = 8 (d_h = 64), causal self-attention, f32.  Each row reports
// t(method) / t(MHA) beside the FLOP bound f = MACs(method) / MACs(MHA) from
// the layers' own macs(), and η = f / ratio, the fraction of the FLOP saving
// realised (goal on the CPU: η ≥ 0.8).  Before timing, each routed layer is
// checked against its dense reference path at the benchmark's own shape.
// Medians of 20 interleaved pairs by default, with their interquartile ranges
// and the median of the per-pair ratios, and the machine's state (an SGEMM
// rate and a memory bandwidth) measured before and after each table, since
// the host's neighbours move all of these.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bench_common.h"
#include "headroom/examples/common/cli.h"
#include "headroom/examples/common/trainer.h"
#include "headroom/headroom.h"

using namespace headroom;
using namespace headroom::bench;

namespace {

struct Options {
  int threads = 0;  // 0: HEADROOM_NUM_THREADS or the core count
  int iters = 20;   // timed pairs, as docs/performance.md's method has it
  int64_t batch = 4;
  std::string seq = "256,1024";
  std::vector<int64_t> seqs;  // seq's lengths
  std::string device = "cpu";
  bool tf32 = false;
  bool smoke = false;
  int host_rounds = 0;  // --by-host-state N: η by quarter of MHA's time over N rounds (0: off)
};

constexpr int64_t kMaxSeq = 65536;

void add_flags(examples::Flags& flags, Options& o) {
  flags.add("threads", &o.threads, "CPU threads (0: HEADROOM_NUM_THREADS or the core count)", {0, kMaxThreads});
  flags.add("iters", &o.iters, "timed pairs per measurement", {1, 1'000'000});
  flags.add("batch", &o.batch, "sequences per batch", {1, 4096});
  flags.add("seq", &o.seq, "sequence lengths, comma separated, each in [1, 65536]");
  flags.add("device", &o.device, "cpu, cuda or cuda:N");
  flags.add("tf32", &o.tf32, "CUDA: TF32 tensor-core matmuls");
  flags.add("by-host-state", &o.host_rounds,
            "also N rounds of each layer's and MHA's forward+backward, η by quarter of MHA's time (how the saving "
            "moves with a shared host's load)",
            {0, 1'000'000});
  flags.add("smoke", &o.smoke, "tiny shapes, one iteration (CI)");
}

// The lengths of --seq, then the smoke mode's shapes.
void finish_options(Options& o) {
  o.seqs = examples::parse_int_list("seq", o.seq, 1, kMaxSeq);
  if (o.smoke) o.iters = 1, o.batch = 1, o.seqs = {32}, o.host_rounds = std::min(o.host_rounds, 4);
}

struct Candidate {
  std::string name;
  std::shared_ptr<Attention> layer;
  // Routed output vs the method's dense reference path (max |difference|).
  std::function<double(const AttentionInput&)> check;
  // The routing work alone (router, top-k, plan) for x [B, T, d], no grad.
  std::function<void(const Tensor& x)> route_only;
};

double max_difference(const Tensor& a, const Tensor& b) {
  std::vector<float> x = a.to_vector<float>(), y = b.to_vector<float>();
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) worst = std::max(worst, double(std::abs(x[i] - y[i])));
  return worst;
}

std::vector<Candidate> candidates(int64_t d, int64_t h, Generator& gen) {
  std::vector<Candidate> list;
  auto moa = std::make_shared<MoAAttention>(MoAConfig{d, 8, 2, 64}, gen);
  // A zero-initialised router sends every token to experts 0 and 1; a random
  // one spreads the load as a trained router would.
  {
    NoGradGuard g;
    moa->router->weight.copy_(Tensor::randn(moa->router->weight.shape(), gen) * 0.5);
  }
  list.push_back({"MoA E=8 k=2 d_h=64", moa,
                  [moa](const AttentionInput& in) {
                    NoGradGuard g;
                    return max_difference(moa->forward(in).out, moa->forward_dense_reference(in).out);
                  },
                  [moa](const Tensor& x) {
                    MoARouting r = moa->route_tokens(x.reshape({-1, x.size(-1)}), Tensor());
                    route(r.indices, moa->config.num_experts);
                  }});
  // MoH at ρ = (h_s + K_r) / h = 0.5 and 0.75, learned router with random
  // weights (a zero router would be a tie).
  for (int64_t routed_k : {2, 4}) {
    MoHConfig config;
    config.mha = {d, h};
    config.shared_heads = 2;
    config.routed_k = routed_k;
    auto moh = std::make_shared<MoHAttention>(config, gen);
    char name[64];
    std::snprintf(name, sizeof name, "MoH h_s=2 K_r=%lld (ρ=%.2f)", (long long)routed_k,
                  double(2 + routed_k) / double(h));
    list.push_back(
        {name, moh,
         [moh](const AttentionInput& in) {
           NoGradGuard g;
           return max_difference(moh->forward(in).out, moh->forward_dense_reference(in).out);
         },
         [moh](const Tensor& x) {  // the learned router of methods.md §3.3 as the layer runs it: one GEMM
           // over the three concatenated router matrices, softmaxes, top-k, plan
           Tensor rows = x.reshape({-1, x.size(-1)});
           const int64_t routed = moh->routed_heads(), shared = moh->moh_config.shared_heads;
           Tensor logits =
               linear(rows, cat({moh->router_routed->weight, moh->router_shared->weight, moh->router_mix->weight}, 0));
           TopK top = topk(softmax(logits.narrow(1, 0, routed), -1), moh->moh_config.routed_k);
           softmax(logits.narrow(1, routed, shared), -1);
           softmax(logits.narrow(1, routed + shared, 2), -1);
           route(top.indices, moh->config.heads);
         }});
  }
  // MAE: the mixture is MHA with per-head weights plus a small gate MLP (no
  // routed path to check; its cost should sit just above MHA's).
  MAEConfig mae_config;
  mae_config.mha = {d, h};
  mae_config.gate_input = MAEConfig::GateInput::prefix_mean;
  auto mae = std::make_shared<MAEAttention>(mae_config, gen);
  mae->set_mode(MAEMode::mixture);
  list.push_back({"MAE h=8 mixture", mae, nullptr, nullptr});
  return list;
}

// "4 thread(s)" on the CPU, the device otherwise: the title's hardware.
std::string hardware(const Options& o, Device device) {
  return device.is_cpu() ? std::to_string(num_threads()) + " thread(s)" : device.str() + (o.tf32 ? " TF32" : "");
}

// One pass of a layer: forward only (no grad) or forward + backward.
std::function<void()> pass(Attention& layer, const Tensor& x, const Tensor& dout, bool backward) {
  return [&layer, x, dout, backward] {
    AttentionInput in{x, Tensor(), true};
    if (!backward) {
      NoGradGuard g;
      layer.forward(in);
    } else {
      layer.zero_grad();
      x.zero_grad();
      layer.forward(in).out.backward(dout);
    }
    wait_for(x.device());
  };
}

// The machine's state while a table is measured, before and after it (a busy
// host moves the ratios; docs/performance.md), at the run's thread count: the
// rate of a dense SGEMM of MHA's projection shape, the rate of one of MoA's
// expert-product shape (depth 64: a quarter of the multiply-adds per byte of
// output), and the bandwidth of an in-place add over arrays larger than the
// last-level cache.  Each is run twice untimed first:
// the first anchor of a run used to catch the thread pool starting.
std::string anchors(Device device) {
  if (!device.is_cpu()) return "";
  Generator gen(1);
  Tensor a = Tensor::randn({1024, 512}, gen), b = Tensor::randn({512, 512}, gen);
  Tensor heads = Tensor::randn({2048, 64}, gen), w_o = Tensor::randn({64, 512}, gen);
  Tensor x = Tensor::zeros({16 << 20}), y = Tensor::ones({16 << 20});  // 64 MiB each
  NoGradGuard no_grad;
  auto gemm = [&] { matmul(a, b); };
  auto thin_gemm = [&] { matmul(heads, w_o); };
  auto add = [&] { add_(x, y); };
  std::vector<double> gemm_ms, thin_ms, add_ms;
  for (int i = 0; i < 2; ++i) gemm(), thin_gemm(), add();
  for (int i = 0; i < 12; ++i)
    gemm_ms.push_back(time_ms(gemm, 1)), thin_ms.push_back(time_ms(thin_gemm, 1)), add_ms.push_back(time_ms(add, 1));
  const double gflops = 2.0 * 1024 * 512 * 512 / (median(gemm_ms) * 1e6);
  const double thin_gflops = 2.0 * 2048 * 64 * 512 / (median(thin_ms) * 1e6);
  const double gbytes = 3.0 * double(x.numel()) * sizeof(float) / (median(add_ms) * 1e6);  // 2 reads, 1 write
  return format("SGEMM 1024x512x512 %.0f GFLOP/s", gflops) + format(", 2048x64x512 %.0f", thin_gflops) +
         format(" (%.2f of it)", thin_gflops / gflops) + format(", x += y over 64 MiB %.1f GB/s", gbytes);
}

// η by the host's state: `rounds` rounds of a layer's and MHA's forward+backward
// (alternating which goes first), sorted by MHA's time and cut into quarters.
// On a shared host MHA's own time says how busy the host was; the median
// ratio in each quarter shows how much of the saving a layer keeps as the
// load grows (docs/performance.md: the small MoA layer loses most).
void print_by_host_state(int rounds, const std::vector<Candidate>& list, Attention& mha, const Tensor& x,
                         const Tensor& dout, int64_t T) {
  Table table("η by the host's state, T=" + std::to_string(T) + ": " + std::to_string(rounds) +
                  " rounds of forward+backward, in quarters by MHA's time",
              {"layer", "quarter", "MHA ms", "median ratio", "η = f / ratio"});
  const char* quarters[] = {"quickest", "second", "third", "slowest"};
  const double mha_macs = double(mha.macs(T, T, true));
  for (const Candidate& c : list) {
    auto layer = pass(*c.layer, x, dout, true), dense = pass(mha, x, dout, true);
    std::vector<std::pair<double, double>> by_mha;  // (MHA ms, layer ms / MHA ms)
    for (int i = 0; i < rounds; ++i) {
      double layer_ms, mha_ms;
      if (i % 2 == 0) layer_ms = time_ms(layer, 1), mha_ms = time_ms(dense, 1);
      else mha_ms = time_ms(dense, 1), layer_ms = time_ms(layer, 1);
      by_mha.push_back({mha_ms, layer_ms / mha_ms});
    }
    std::sort(by_mha.begin(), by_mha.end());
    const double bound = double(c.layer->macs(T, T, true)) / mha_macs;
    for (size_t q = 0; q < 4; ++q) {
      const size_t first = by_mha.size() * q / 4, end = by_mha.size() * (q + 1) / 4;
      if (first == end) continue;
      std::vector<double> ratios;
      for (size_t r = first; r < end; ++r) ratios.push_back(by_mha[r].second);
      const double ratio = median(ratios);
      table.row({c.name, quarters[q], format("%.1f", by_mha[first].first) + "–" + format("%.1f", by_mha[end - 1].first),
                 format("%.3f", ratio), format("%.2f", bound / ratio)});
    }
  }
  table.print();
}

size_t peak_bytes(const std::function<void()>& fn, Device device) {
  Backend& memory = backend(device);
  size_t base = memory.memory_stats().active_bytes;
  memory.reset_peak_memory();
  fn();
  return memory.memory_stats().peak_bytes - base;
}

void run(const Options& o, Device device) {
  const int64_t d = 512, h = 8;
  Generator gen(2026);
  MultiHeadAttention mha({d, h}, gen);
  std::vector<Candidate> list = candidates(d, h, gen);
  mha.to(device);
  for (Candidate& c : list) c.layer->to(device);
  for (int64_t T : o.seqs) {
    Tensor x = Tensor::randn({o.batch, T, d}, gen).to(device).set_requires_grad();
    Tensor dout = Tensor::randn({o.batch, T, d}, gen).to(device);
    char title[200];
    std::snprintf(title, sizeof title, "attention layer, d=%lld h=%lld B=%lld T=%lld causal f32, %s", (long long)d,
                  (long long)h, (long long)o.batch, (long long)T, hardware(o, device).c_str());
    const std::string anchors_before = anchors(device);
    Table table(title, {"layer", "pass", "ms (IQR)", "MHA ms (IQR)", "ratio", "median pair ratio", "FLOP bound f",
                        "η = f / ratio", "peak MiB (fwd+bwd)", "routing overhead", "routed vs dense max diff"});
    const double mha_macs = double(mha.macs(T, T, true));
    for (Candidate& c : list) {
      double diff = c.check ? c.check({x.detach(), Tensor(), true}) : 0;
      HEADROOM_CHECK(diff < 1e-3, "[bench_attention] ", c.name,
                     " routed output differs from its dense "
                     "reference by ",
                     diff, ": not timing a wrong kernel");
      const double bound = double(c.layer->macs(T, T, true)) / mha_macs;
      double peak = double(peak_bytes(pass(*c.layer, x, dout, true), device)) / (1 << 20);
      double mha_peak = double(peak_bytes(pass(mha, x, dout, true), device)) / (1 << 20);
      // Router + top-k + plan against the dense layer's forward (goal ≤ 5%).
      std::string overhead = "n/a";
      if (c.route_only) {
        Tensor xd = x.detach();
        auto route_only = [&] {
          NoGradGuard g;
          c.route_only(xd);
          wait_for(device);
        };
        Comparison r = time_interleaved(route_only, pass(mha, x, dout, false), o.iters, 1, o.smoke ? 0 : 2);
        overhead = format("%.1f%%", 100 * r.a_ms / r.b_ms);
      }
      for (bool backward : {false, true}) {
        Comparison cmp = time_interleaved(pass(*c.layer, x, dout, backward), pass(mha, x, dout, backward), o.iters, 1,
                                          o.smoke ? 0 : 2);
        const double ratio = cmp.a_ms / cmp.b_ms;
        auto with_iqr = [](double ms, double iqr) { return format("%.2f", ms) + format(" (%.0f%%)", 100 * iqr); };
        table.row({c.name, backward ? "fwd+bwd" : "forward", with_iqr(cmp.a_ms, cmp.a_iqr),
                   with_iqr(cmp.b_ms, cmp.b_iqr), format("%.3f", ratio), format("%.3f", cmp.median_pair_time_ratio),
                   format("%.3f", bound), format("%.2f", bound / ratio),
                   backward ? format("%.0f", peak) + " (MHA " + format("%.0f", mha_peak) + ")" : "",
                   backward ? "" : overhead, c.check ? format("%.1e", diff) : "n/a"});
      }
    }
    table.print();
    if (device.is_cpu())
      std::printf("\nMachine state (anchors) before: %s; after: %s\n", anchors_before.c_str(), anchors(device).c_str());
    if (o.host_rounds > 0) print_by_host_state(o.host_rounds, list, mha, x, dout, T);
  }
}

// A whole training step (forward, backward, AdamW) of a 2-layer DecoderLM per
// attention type: tokens per second, d = 512, h = 8, vocabulary 256, causal.
void run_training_steps(const Options& o, Device device) {
  const int64_t T = o.seqs.front();
  char title[160];
  std::snprintf(title, sizeof title, "training step, 2-layer DecoderLM d=512 h=8 vocab 256, B=%lld T=%lld, %s",
                (long long)o.batch, (long long)T, hardware(o, device).c_str());
  Table table(title, {"attention", "options", "ms / step", "tokens / s", "vs MHA"});
  struct Kind {
    const char* type;
    StringMap options;
  };
  const Kind kinds[] = {{"mha", {}},
                        {"moa", {{"experts", "8"}, {"k", "2"}, {"head_dim", "64"}}},
                        {"moh", {{"shared_heads", "2"}, {"routed_k", "2"}}},
                        {"moh", {{"shared_heads", "2"}, {"routed_k", "4"}}},
                        {"mae", {}}};
  double mha_ms = 0;
  for (const Kind& kind : kinds) {
    ModelConfig c;
    c.vocab = 256, c.dim = 512, c.heads = 8, c.decoder_layers = 2, c.ffn_hidden = 2048, c.max_len = T;
    c.attention.type = kind.type;
    c.attention.options = kind.options;
    Generator gen(5);
    DecoderLM lm(c, gen);
    lm.to(device);
    AdamW opt(lm.parameters(), 1e-4);
    Tensor tokens = Tensor::rand({o.batch, T}, gen, 0, 256, DType::f32).to(DType::i32).to(device);
    auto step = [&] {
      opt.zero_grad();
      ModelOutput out = lm.forward(tokens);
      training_loss(cross_entropy(out.out, tokens), out.aux_losses, o.batch * T).backward();
      opt.step();
      wait_for(device);
    };
    std::vector<double> times;
    const int warmup = o.smoke ? 0 : 2, timed = o.smoke ? 1 : std::max(o.iters / 2, 1);
    for (int i = 0; i < warmup + timed; ++i) times.push_back(time_ms(step, 1));
    times.erase(times.begin(), times.begin() + warmup);
    const double ms = median(times);
    if (std::string(kind.type) == "mha") mha_ms = ms;
    std::string options;
    for (auto& [k, v] : kind.options) options += k + "=" + v + " ";
    table.row({kind.type, options, format("%.1f", ms), format("%.0f", double(o.batch * T) / ms * 1000),
               format("%.2f", ms / mha_ms)});
  }
  table.print();
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  examples::Flags flags("bench_attention", "each conditional attention layer against dense MHA, timed side by side");
  add_flags(flags, o);
  return examples::run_main(flags, [&] {
    if (!flags.parse(argc, argv)) return 0;
    finish_options(o);
    if (o.threads > 0) set_num_threads(o.threads);
    const Device device = examples::training_device(o.device);
    set_allow_tf32(o.tf32);
    std::printf("# bench_attention\n");
    if (device.is_cuda()) std::printf("%s\n", device_summary(device.kind).c_str());
    run(o, device);
    run_training_steps(o, device);
    return 0;
  });
}
