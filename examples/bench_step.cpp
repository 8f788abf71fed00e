// bench_step: whole training steps of a 2-layer DecoderLM per attention method, over a grid of
// widths, head counts and lengths, the methods alternating step by step within each cell
// (docs/performance.md, "Training-step grid").
//
//   bench_step [--threads N,N,...] [--rounds N] [--dims d,...] [--heads h,...] [--seqs T,...]
//              [--tokens N] [--methods mha,moh50,moh75,moa,mae] [--json FILE] [--smoke]
//
// A cell is (d, h, T) with B = max(1, tokens / T) sequences (tokens = 4096: B·T = 4096 for every
// T up to 4096); 2 layers, FFN 4d with GELU, vocabulary 256, dropout 0, pre-LN, sinusoidal
// positions, untied head.  A step: zero_grad, forward of tokens[:, :-1], cross_entropy against
// tokens[:, 1:] (logits [B·T, V]), training_loss with the aux losses, backward, AdamW step.
// Methods: MHA; MoH ρ = 0.5 and 0.75 (h/4 shared heads, routed_k = h/4 and h/2); MoA E = 8,
// k = 2, d_h = d/h; MAE with its defaults.  Per cell, after one untimed step of each, `rounds`
// rounds of one step of each (the order reversed every other round, A B C, C B A, ...).  Per
// method: the median ms/step, tokens/s, the speed-up MHA ms / method ms (> 1: faster than MHA),
// the one DecoderLM::forward_macs predicts (MHA's MACs / method's) and the share of the predicted
// saving realised, (1 − 1/measured) / (1 − 1/predicted).  MHA's step rate (3 × 2 × forward
// MACs per step) is set against an SGEMM timed between the rounds at the same thread count.
// With several --threads, each method runs at each count in the same rounds, and a table gives
// the scaling.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "bench_common.h"
#include "headroom/examples/common/cli.h"
#include "headroom/headroom.h"

using namespace headroom;
using namespace headroom::bench;

namespace {

constexpr int64_t kVocab = 256, kLayers = 2;

struct Options {
  std::string threads = "1";  // the grid's goal is on one thread; 0 = HEADROOM_NUM_THREADS or the core count
  int rounds = 3;             // the default grid takes under 10 minutes on one thread of the dev VM
  std::string dims = "128,256,512", heads = "4,8", seqs = "128,256,1024";
  int64_t tokens = 4096;  // B = max(1, tokens / T)
  std::string methods = "mha,moh50,moh75,moa,mae";
  std::string json;
  bool smoke = false;
};

void add_flags(examples::Flags& flags, Options& o) {
  flags.add("threads", &o.threads, "CPU thread counts, comma separated (0: HEADROOM_NUM_THREADS or the core count)");
  flags.add("rounds", &o.rounds, "timed rounds per cell (one step of each method per round)", {1, 100000});
  flags.add("dims", &o.dims, "model widths d, comma separated");
  flags.add("heads", &o.heads, "head counts h, comma separated (each divisible by 4 and dividing d)");
  flags.add("seqs", &o.seqs, "sequence lengths T, comma separated");
  flags.add("tokens", &o.tokens, "tokens per step: B = max(1, tokens / T)", {1, 1 << 20});
  flags.add("methods", &o.methods, "methods, comma separated, of mha, moh50, moh75, moa, mae (MHA always runs)");
  flags.add("json", &o.json, "also write one JSON line per cell and method to this file");
  flags.add("smoke", &o.smoke, "one tiny cell, one round (CI)");
}

struct Method {
  std::string key, name, type;
  StringMap options;
};

// The methods of a model with h heads (h divisible by 4) and width d: MHA first.
std::vector<Method> all_methods(int64_t d, int64_t h) {
  const std::string shared = std::to_string(h / 4), head_dim = std::to_string(d / h);
  return {{"mha", "MHA", "mha", {}},
          {"moh50", "MoH ρ=0.5", "moh", {{"shared_heads", shared}, {"routed_k", std::to_string(h / 4)}}},
          {"moh75", "MoH ρ=0.75", "moh", {{"shared_heads", shared}, {"routed_k", std::to_string(h / 2)}}},
          {"moa", "MoA E=8 k=2", "moa", {{"experts", "8"}, {"k", "2"}, {"head_dim", head_dim}}},
          {"mae", "MAE", "mae", {}}};
}

// The keys of --methods; throws UsageError for an unknown one.
std::vector<std::string> method_keys(const std::string& list) {
  const std::vector<std::string> keys = examples::split_list(list);
  for (const std::string& key : keys)
    if (key != "mha" && key != "moh50" && key != "moh75" && key != "moa" && key != "mae")
      throw examples::UsageError("--methods expects mha, moh50, moh75, moa or mae, got '" + key + "'");
  return keys;
}

// The methods --methods names, MHA (every ratio's baseline) always first.
std::vector<Method> chosen_methods(const std::string& list, int64_t d, int64_t h) {
  const std::vector<std::string> keys = method_keys(list);
  std::vector<Method> chosen;
  for (const Method& m : all_methods(d, h))
    if (m.key == "mha" || std::find(keys.begin(), keys.end(), m.key) != keys.end()) chosen.push_back(m);
  return chosen;
}

struct Cell {
  int64_t d, h, T, B;
};

// The grid's cells, d-major; throws for a head count the methods cannot use.
std::vector<Cell> cells(const Options& o) {
  if (o.smoke) return {{32, 4, 16, 2}};
  std::vector<Cell> list;
  for (int64_t d : examples::parse_int_list("dims", o.dims, 4, 8192))
    for (int64_t h : examples::parse_int_list("heads", o.heads, 4, 1024))
      for (int64_t T : examples::parse_int_list("seqs", o.seqs, 2, 65536)) {
        if (h % 4 != 0 || d % h != 0 || (d / h) % 2 != 0)
          throw examples::UsageError("--heads " + std::to_string(h) + " must be divisible by 4 and split d = " +
                                     std::to_string(d) + " into heads of even width");
        list.push_back({d, h, T, std::max<int64_t>(1, o.tokens / T)});
      }
  return list;
}

// One method at one thread count: its model, optimiser and step times.
struct Runner {
  const Method* method;
  int threads;
  std::unique_ptr<DecoderLM> lm;
  std::unique_ptr<AdamW> opt;
  std::vector<double> ms;  // one per timed round
};

std::unique_ptr<DecoderLM> make_model(const Cell& cell, const Method& m, Generator& gen) {
  ModelConfig c;
  c.vocab = kVocab, c.dim = cell.d, c.heads = cell.h, c.decoder_layers = kLayers, c.ffn_hidden = 4 * cell.d;
  c.activation = Activation::gelu, c.max_len = cell.T;
  c.attention = AttentionSpec(m.type, m.options);
  auto lm = std::make_unique<DecoderLM>(c, gen);
  // MoA's routers start at zero, sending every token to experts 0 and 1; random ones spread the
  // load as a trained router does.
  NoGradGuard no_grad;
  for (auto& moa : collect_modules<MoAAttention>(*lm))
    moa->router->weight.copy_(Tensor::randn(moa->router->weight.shape(), gen) * 0.5);
  return lm;
}

// One training step on inputs, targets: i32 [B, T]; returns its milliseconds.
double step(Runner& r, const Tensor& inputs, const Tensor& targets) {
  set_num_threads(r.threads);
  auto run = [&] {
    r.opt->zero_grad();
    ModelOutput out = r.lm->forward(inputs);  // logits [B, T, V]
    Tensor loss = cross_entropy(out.out.reshape({-1, kVocab}), targets.reshape({-1}));
    training_loss(loss, out.aux_losses, targets.numel()).backward();
    r.opt->step();
  };
  return time_ms(run, 1);
}

// A cell's numbers for one runner, ratios against MHA at the same thread count.
struct Result {
  Method method;
  int threads = 0;
  std::vector<double> per_round;  // ms of each timed step
  double ms = 0, iqr = 0;         // their median and relative interquartile range
  double speedup = 0;             // MHA's median ms / this one's
  double round_speedup = 0;       // the median over rounds of MHA's ms / this one's
  double predicted = 0;           // MHA's forward MACs / this one's
  int64_t macs = 0;               // forward MACs of one sequence
  int64_t params = 0;
  double sgemm = 0;  // the SGEMM anchor of the cell's rounds at this thread count, GFLOP/s
};

// a[i] / b[i] for each i.
std::vector<double> ratios(const std::vector<double>& a, const std::vector<double>& b) {
  std::vector<double> r;
  for (size_t i = 0; i < a.size(); ++i) r.push_back(a[i] / b[i]);
  return r;
}

// (1 − 1/measured) / (1 − 1/predicted): the share of the FLOP saving that shows in the step time.
std::string realised_share(double measured, double predicted) {
  if (predicted <= 1) return "n/a";
  return format("%.0f%%", 100 * (1 - 1 / measured) / (1 - 1 / predicted));
}

// The step's rate: 3 × 2 × forward MACs × B (forward, and backward at twice the forward) over its time.
double step_gflops(const Result& r, const Cell& cell) { return 6.0 * double(r.macs * cell.B) / (r.ms * 1e6); }

// A runner per method and thread count, method-major (MHA's first).
std::vector<Runner> make_runners(const Cell& cell, const std::vector<Method>& methods, const std::vector<int>& threads,
                                 Generator& gen) {
  std::vector<Runner> runners;
  for (const Method& m : methods)
    for (int n : threads) {
      Runner r{&m, n, make_model(cell, m, gen), nullptr, {}};
      r.opt = std::make_unique<AdamW>(r.lm->parameters(), 1e-4);
      runners.push_back(std::move(r));
    }
  return runners;
}

// One untimed step of each runner, then `rounds` rounds of one step of each, in order and in
// reverse by turns, so that no method always follows the same one.  After each round, an SGEMM
// at each thread count, so that the anchor sees the load the steps see; returns the anchor's
// median rate per thread count.
std::vector<double> run_rounds(std::vector<Runner>& runners, const std::vector<int>& threads, int rounds,
                               const Tensor& inputs, const Tensor& targets) {
  std::vector<std::vector<double>> anchor(threads.size());
  for (Runner& r : runners) step(r, inputs, targets);
  for (int round = 0; round < rounds; ++round) {
    for (size_t i = 0; i < runners.size(); ++i) {
      Runner& r = runners[round % 2 == 0 ? i : runners.size() - 1 - i];
      r.ms.push_back(step(r, inputs, targets));
    }
    for (size_t t = 0; t < threads.size(); ++t) anchor[t].push_back(sgemm_gflops(1024, 512, 512, threads[t], 4));
  }
  std::vector<double> rates;
  for (const std::vector<double>& samples : anchor) rates.push_back(median(samples));
  return rates;
}

// Times every chosen method at every thread count in one cell.
std::vector<Result> measure_cell(const Options& o, const Cell& cell, const std::vector<int>& threads) {
  Generator gen(2026);  // outlives the models, as DecoderLM asks
  Tensor tokens = Tensor::rand({cell.B, cell.T + 1}, gen, 0, kVocab, DType::f32).to(DType::i32);
  Tensor inputs = tokens.narrow(1, 0, cell.T).contiguous(), targets = tokens.narrow(1, 1, cell.T).contiguous();
  const std::vector<Method> methods = chosen_methods(o.methods, cell.d, cell.h);
  std::vector<Runner> runners = make_runners(cell, methods, threads, gen);
  const std::vector<double> sgemm = run_rounds(runners, threads, o.rounds, inputs, targets);
  std::vector<Result> results;
  for (size_t i = 0; i < runners.size(); ++i) {
    const Runner& r = runners[i];
    const Runner& mha = runners[i % threads.size()];  // MHA at the same thread count
    Result res;
    res.method = *r.method, res.threads = r.threads, res.per_round = r.ms;
    res.ms = median(r.ms), res.iqr = relative_iqr(r.ms);
    res.speedup = median(mha.ms) / res.ms, res.round_speedup = median(ratios(mha.ms, r.ms));
    res.macs = r.lm->forward_macs(cell.T), res.params = r.lm->num_parameters();
    res.predicted = double(mha.lm->forward_macs(cell.T)) / double(res.macs);
    res.sgemm = sgemm[i % threads.size()];
    results.push_back(res);
  }
  set_num_threads(threads.front());
  return results;
}

std::string cell_name(const Cell& c) {
  return "d=" + std::to_string(c.d) + " h=" + std::to_string(c.h) + " T=" + std::to_string(c.T) +
         " B=" + std::to_string(c.B);
}

std::string options_text(const Method& m) {
  std::string text;
  for (const auto& [key, value] : m.options) text += (text.empty() ? "" : " ") + key + "=" + value;
  return text;
}

void print_cell(const Cell& cell, const std::vector<Result>& results, int rounds) {
  Table table(
      "training step, 2-layer DecoderLM " + cell_name(cell) + ", medians of " + std::to_string(rounds) + " rounds",
      {"method", "options", "threads", "ms / step (IQR)", "tokens / s", "speed-up vs MHA", "median per-round speed-up",
       "FLOP-predicted speed-up", "saving realised", "GFLOP/s (of SGEMM)"});
  for (const Result& r : results) {
    const double gflops = step_gflops(r, cell);
    table.row({r.method.name, options_text(r.method), std::to_string(r.threads),
               format("%.1f", r.ms) + format(" (%.0f%%)", 100 * r.iqr),
               examples::format_si(double(cell.B * cell.T) / r.ms * 1000), format("%.2f", r.speedup),
               format("%.2f", r.round_speedup), format("%.2f", r.predicted), realised_share(r.speedup, r.predicted),
               format("%.0f", gflops) + format(" (%.2f)", gflops / r.sgemm)});
  }
  table.print();
}

// One table over the grid at one thread count: MHA's step against the SGEMM anchor, and each
// other method's speed-up as "measured / predicted (share realised)".
void print_grid(const std::vector<Cell>& grid, const std::vector<std::vector<Result>>& results, int threads) {
  std::vector<std::string> columns{"d", "h", "T", "B", "MHA ms", "MHA tokens/s", "MHA / SGEMM"};
  for (const Result& r : results.front())
    if (r.threads == threads && r.method.key != "mha") columns.push_back(r.method.name);
  Table table("training-step grid, " + std::to_string(threads) +
                  " thread(s): speed-up vs MHA measured / FLOP-predicted (saving realised)",
              columns);
  for (size_t c = 0; c < grid.size(); ++c) {
    const Cell& cell = grid[c];
    std::vector<std::string> row{std::to_string(cell.d), std::to_string(cell.h), std::to_string(cell.T),
                                 std::to_string(cell.B)};
    for (const Result& r : results[c]) {
      if (r.threads != threads) continue;
      if (r.method.key == "mha") {
        row.push_back(format("%.1f", r.ms));
        row.push_back(examples::format_si(double(cell.B * cell.T) / r.ms * 1000));
        row.push_back(format("%.2f", step_gflops(r, cell) / r.sgemm));
      } else {
        row.push_back(format("%.2f", r.speedup) + " / " + format("%.2f", r.predicted) + " (" +
                      realised_share(r.speedup, r.predicted) + ")");
      }
    }
    table.row(row);
  }
  table.print();
}

// Per cell and method: the step at each thread count, and the speed-up of each over the first
// (the median of the per-round ratios).
void print_scaling(const std::vector<Cell>& grid, const std::vector<std::vector<Result>>& results,
                   const std::vector<int>& threads) {
  std::vector<std::string> columns{"cell", "method"};
  for (int n : threads) columns.push_back(std::to_string(n) + " thread(s) ms");
  for (size_t t = 1; t < threads.size(); ++t)
    columns.push_back(std::to_string(threads[t]) + " vs " + std::to_string(threads[0]));
  Table table("thread scaling: step time per thread count, speed-up = median per-round ratio", columns);
  for (size_t c = 0; c < grid.size(); ++c)
    for (size_t m = 0; m < results[c].size(); m += threads.size()) {
      const Result& base = results[c][m];
      std::vector<std::string> row{cell_name(grid[c]), base.method.name};
      for (size_t t = 0; t < threads.size(); ++t) row.push_back(format("%.1f", results[c][m + t].ms));
      for (size_t t = 1; t < threads.size(); ++t) {
        row.push_back(format("%.2f", median(ratios(base.per_round, results[c][m + t].per_round))));
      }
      table.row(row);
    }
  table.print();
}

// One JSON object per line: a cell, a method at one thread count, and its numbers.
std::string json_line(const Cell& cell, const Result& r, int rounds) {
  std::string times;
  for (double ms : r.per_round) times += (times.empty() ? "" : ", ") + format("%.3f", ms);
  char head[640];
  std::snprintf(head, sizeof head,
                "{\"bench\": \"step\", \"d\": %lld, \"h\": %lld, \"T\": %lld, \"B\": %lld, \"method\": \"%s\", "
                "\"name\": \"%s\", \"threads\": %d, \"rounds\": %d, \"ms\": %.3f, \"iqr\": %.4f, "
                "\"tokens_per_s\": %.1f, \"speedup\": %.4f, \"round_speedup\": %.4f, \"predicted\": %.4f, "
                "\"forward_macs\": %lld, \"parameters\": %lld, \"sgemm_gflops\": %.1f",
                (long long)cell.d, (long long)cell.h, (long long)cell.T, (long long)cell.B, r.method.key.c_str(),
                r.method.name.c_str(), r.threads, rounds, r.ms, r.iqr, double(cell.B * cell.T) / r.ms * 1000, r.speedup,
                r.round_speedup, r.predicted, (long long)r.macs, (long long)r.params, r.sgemm);
  return std::string(head) + ", \"times_ms\": [" + times + "]}";
}

int run(const Options& o) {
  std::vector<int> threads;
  for (int64_t n : examples::parse_int_list("threads", o.threads, 0, kMaxThreads))
    threads.push_back(n == 0 ? num_threads() : int(n));
  const std::vector<Cell> grid = cells(o);
  method_keys(o.methods);
  const int rounds = o.smoke ? 1 : o.rounds;
  Options run_options = o;
  run_options.rounds = rounds;
  std::ofstream json;
  if (!o.json.empty()) {
    json.open(o.json);
    HEADROOM_CHECK(json.good(), "[bench_step] cannot write --json ", o.json);
  }
  std::printf("# bench_step\n");
  const double anchor_before = sgemm_gflops(1024, 512, 512, 1);
  std::vector<std::vector<Result>> results;
  for (const Cell& cell : grid) {
    results.push_back(measure_cell(run_options, cell, threads));
    print_cell(cell, results.back(), rounds);
    if (json.is_open())
      for (const Result& r : results.back()) json << json_line(cell, r, rounds) << "\n";
    std::fflush(stdout);
  }
  for (int n : threads) print_grid(grid, results, n);
  if (threads.size() > 1) print_scaling(grid, results, threads);
  std::printf("\nSGEMM 1024x512x512 on 1 thread: %.0f GFLOP/s before the grid, %.0f after\n", anchor_before,
              sgemm_gflops(1024, 512, 512, 1));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  examples::Flags flags("bench_step", "whole training steps per attention method over a grid of d, h and T");
  add_flags(flags, o);
  return examples::run_main(flags, [&] {
    if (!flags.parse(argc, argv)) return 0;
    return run(o);
  });
}
