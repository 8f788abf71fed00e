// bench_ops: headroom's ops against the raw kernels they call, timed side by
// side in one process (interleaved A, B, A, B, ..., alternating which goes
// first, so drift and neighbours hit both alike; medians; ratio of medians
// and median of the per-pair ratios; the tables are in docs/performance.md).
//
//   bench_ops [--threads N] [--iters N] [--smoke] [--only SECTION]
//
// Sections (each prints one Markdown table):
//   1. matmul   headroom::matmul vs cblas_sgemm on the same buffers, 1024³ f32,
//               and vs cblas_sgemm writing a newly allocated output per call
//   2. dispatch nanoseconds per call of tiny ops (matmul [1,1]·[1,1], reshape,
//               add and clone of 4 elements), grad mode off and recording, against
//               the raw kernel
//   3. attention fused attention (blocked online softmax, backward by
//               recomputation) vs the same math composed from headroom ops
//               (matmul, mask, softmax, matmul), B=8 h=8 T=512 d_h=64 causal
//               f32, forward and forward+backward; also prints one JSON line
//               that scripts/bench-attention compares with PyTorch
//   4. routing  MoA's grouped projections (gather_segment_matmul for W_q,
//               segment_matmul_scatter with gates for W_o; 1024 tokens, d=512,
//               d_h=64, E=8, k=2) vs headroom::matmul on contiguous rows with
//               the same FLOPs, forward and forward+backward: the share of a
//               dense projection's speed that routing keeps
// A new section is a function taking the Options, named in kSections; it
// builds its Table rows from time_interleaved() comparisons.
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "bench_common.h"
#include "headroom/examples/common/cli.h"
#include "headroom/headroom.h"
#include "headroom/ops/matmul.h"
#include "headroom/ops/attention.h"
#include "headroom/ops/elementwise.h"
#include "headroom/ops/nn.h"
#include "headroom/ops/reduce.h"
#include "headroom/ops/routing.h"

using namespace headroom;

using namespace headroom::bench;

namespace {

// ---- options --------------------------------------------------------------

struct Options {
  int threads = 0;     // 0: HEADROOM_NUM_THREADS or the core count
  int iters = 20;      // timed pairs per measurement
  bool smoke = false;  // tiny sizes, one iteration: checks that every section runs
  std::string only;    // run just this section (empty: all)
};

void add_flags(examples::Flags& flags, Options& options) {
  flags.add("threads", &options.threads,
            "CPU threads for OpenMP and OpenBLAS (0: HEADROOM_NUM_THREADS or the core count)", {0, kMaxThreads});
  flags.add("iters", &options.iters, "timed pairs per measurement, after warm-up (matmul uses at least 20)",
            {1, 1'000'000});
  flags.add("smoke", &options.smoke, "tiny sizes and 1 iteration, for CI");
  flags.add("only", &options.only, "run one section: matmul, dispatch, attention or routing (default: all)");
}

// ---- section 1: matmul against cblas_sgemm --------------------------------

void bench_matmul(const Options& options) {
  const int n = options.smoke ? 64 : 1024;  // M = N = K
  NoGradGuard no_grad;
  Tensor a = Tensor::randn({n, n}), b = Tensor::randn({n, n});
  Tensor c_raw = Tensor::empty({n, n});
  Tensor c_headroom;
  auto sgemm_into = [&](const Tensor& c) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data<float>(), n, b.data<float>(), n, 0.0f,
                c.data<float>(), n);
  };
  auto headroom_call = [&] { c_headroom = matmul(a, b); };  // allocates its output, as real use does
  auto raw_call = [&] { sgemm_into(c_raw); };
  // The raw call with matmul's allocation pattern: separates the cost of fresh
  // output memory (allocator, page faults) from matmul's own work.
  auto raw_fresh_call = [&] {
    Tensor c = Tensor::empty({n, n});
    sgemm_into(c);
    c_raw = c;
  };

  // Correctness first: both must compute the same product.
  headroom_call();
  raw_call();
  std::vector<float> got = c_headroom.to_vector<float>(), want = c_raw.to_vector<float>();
  for (size_t i = 0; i < got.size(); ++i)
    HEADROOM_CHECK(std::abs(got[i] - want[i]) <= 1e-3f * (1 + std::abs(want[i])),
                   "[bench_ops] matmul and cblas_sgemm disagree at element ", i, ": ", got[i], " vs ", want[i]);

  const int iters = std::max(options.iters, options.smoke ? 1 : 20);
  const double gflop = 2.0 * n * n * n * 1e-9;
  auto gflops = [&](double ms) { return format("%.1f", gflop / (ms * 1e-3)); };
  Table table("matmul " + std::to_string(n) + "³ f32, " + std::to_string(options.threads) +
                  " thread(s); speed ratio = raw ms / headroom ms (goal ≥ 0.90)",
              {"headroom::matmul vs", "headroom ms", "raw ms", "headroom GFLOP/s", "raw GFLOP/s", "ratio of medians",
               "median pair ratio"});
  for (bool fresh_output : {false, true}) {
    Comparison t = fresh_output ? time_interleaved(headroom_call, raw_fresh_call, iters)
                                : time_interleaved(headroom_call, raw_call, iters);
    table.row({fresh_output ? "cblas_sgemm into a new tensor per call" : "cblas_sgemm, same buffers",
               format("%.2f", t.a_ms), format("%.2f", t.b_ms), gflops(t.a_ms), gflops(t.b_ms),
               format("%.3f", t.ratio_of_medians), format("%.3f", t.median_pair_ratio)});
  }
  table.print();
}

// ---- section 2: dispatch overhead of tiny ops -----------------------------

// One row: ns per call of an op and of its raw kernel, measured interleaved.
template <typename Op, typename Raw>
void overhead_row(Table& table, const Options& options, const std::string& op, const std::string& mode,
                  const std::string& raw_name, Op&& op_call, Raw&& raw_call) {
  const int reps = options.smoke ? 10 : 2000;
  Comparison t = time_interleaved(op_call, raw_call, options.iters, reps);
  const double op_ns = t.a_ms * 1e6, raw_ns = t.b_ms * 1e6;
  table.row({op, mode, format("%.0f", op_ns), raw_name, format("%.0f", raw_ns), format("%.0f", op_ns - raw_ns)});
}

// The same op timed with grad mode off and with autograd recording (inputs
// that require grad; every call builds a graph node, freed with its output).
template <typename MakeOp, typename Raw>
void overhead_rows(Table& table, const Options& options, const std::string& op, const std::string& raw_name,
                   MakeOp&& make_op, Raw&& raw_call) {
  for (bool recording : {false, true}) {
    NoGradGuard restore_grad_mode_after;  // the guard's destructor restores the mode set below
    autograd::set_grad_enabled(recording);
    auto op_call = make_op(recording);
    overhead_row(table, options, op, recording ? "autograd recording" : "no grad", raw_name, op_call, raw_call);
  }
}

void bench_dispatch(const Options& options) {
  Table table("dispatch overhead per call, tiny tensors (ns)",
              {"op", "mode", "headroom ns", "raw kernel", "raw ns", "overhead ns"});
  Tensor sink;

  // matmul [1,1]·[1,1] vs the cblas_sgemm call it makes.
  float x = 1.5f, y = 2.0f, z = 0;
  auto sgemm_1x1 = [&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, 1, 1, 1, 1.0f, &x, 1, &y, 1, 0.0f, &z, 1);
    do_not_optimize(&z);
  };
  overhead_rows(
      table, options, "matmul [1,1]·[1,1]", "cblas_sgemm 1×1×1",
      [&](bool grad) {
        Tensor a = Tensor::ones({1, 1}).set_requires_grad(grad), b = Tensor::ones({1, 1}).set_requires_grad(grad);
        return [&sink, a, b] { sink = matmul(a, b); };
      },
      sgemm_1x1);

  // reshape [4] -> [2,2]: a view, so the raw cost is making a view by hand.
  overhead_rows(
      table, options, "reshape [4]→[2,2]", "make_view",
      [&](bool grad) {
        Tensor t = Tensor::ones({4}).set_requires_grad(grad);
        return [&sink, t] { sink = t.reshape({2, 2}); };
      },
      [&, t = Tensor::ones({4})] {
        sink = make_view(t, {2, 2}, {2, 1}, 0);
      });

  // add of two [4] tensors vs the loop it runs (small elementwise work stays
  // off the OpenMP team: core/parallel.h).
  float lhs[4] = {1, 2, 3, 4}, rhs[4] = {4, 3, 2, 1}, sums[4];
  overhead_rows(
      table, options, "add [4]+[4]", "4 adds",
      [&](bool grad) {
        Tensor a = Tensor::ones({4}).set_requires_grad(grad), b = Tensor::ones({4});
        return [&sink, a, b] { sink = a + b; };
      },
      [&] {
        do_not_optimize(lhs);
        for (int i = 0; i < 4; ++i) sums[i] = lhs[i] + rhs[i];
        do_not_optimize(sums);
      });

  // clone of 4 floats vs copying 16 bytes.
  float src[4] = {1, 2, 3, 4}, dst[4];
  overhead_rows(
      table, options, "clone [4]", "memcpy 16 B",
      [&](bool grad) {
        Tensor t = Tensor::ones({4}).set_requires_grad(grad);
        return [&sink, t] { sink = t.clone(); };
      },
      [&] {
        do_not_optimize(src);
        std::memcpy(dst, src, sizeof dst);
        do_not_optimize(dst);
      });
  table.print();
}

// ---- section 3: fused attention against the composed math path ------------

// softmax(q·kᵀ·scale + causal mask)·v from separate ops: what PyTorch's math
// path computes, materialising the [B, h, T, T] scores.
Tensor composed_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask) {
  const double scale = 1.0 / std::sqrt(double(q.size(-1)));
  Tensor minus_inf = Tensor::full({}, -INFINITY, q.dtype());
  return matmul(softmax(where(mask, matmul(q, k.t()) * scale, minus_inf), -1), v);
}

void bench_attention(const Options& options) {
  const int64_t B = options.smoke ? 1 : 8, h = options.smoke ? 2 : 8;
  const int64_t T = options.smoke ? 64 : 512, d_h = 64;
  Generator gen(1337);
  Tensor q = Tensor::randn({B, h, T, d_h}, gen).set_requires_grad();
  Tensor k = Tensor::randn({B, h, T, d_h}, gen).set_requires_grad();
  Tensor v = Tensor::randn({B, h, T, d_h}, gen).set_requires_grad();
  Tensor dout = Tensor::randn({B, h, T, d_h}, gen);
  // mask[t, s] = s <= t, broadcast over batch and heads.
  Tensor mask = le(Tensor::arange(T).unsqueeze(0), Tensor::arange(T).unsqueeze(1));
  AttentionOptions causal;
  causal.causal = true;
  {  // correctness first: a fast wrong kernel must not report a win
    NoGradGuard no_grad;
    std::string mismatch;
    std::vector<float> fused = attention(q, k, v, causal).to_vector<float>();
    std::vector<float> composed = composed_attention(q, k, v, mask).to_vector<float>();
    for (size_t i = 0; i < fused.size(); ++i)
      HEADROOM_CHECK(std::abs(fused[i] - composed[i]) < 1e-4,
                     "[bench_attention] fused and composed "
                     "attention differ at element ",
                     i, ": ", fused[i], " vs ", composed[i]);
  }
  auto forward = [&](auto&& fn) {
    return [&, fn] {
      NoGradGuard no_grad;
      fn();
    };
  };
  auto train_step = [&](auto&& fn) {
    return [&, fn] {
      q.zero_grad(), k.zero_grad(), v.zero_grad();
      fn().backward(dout);
    };
  };
  auto fused = [&] { return attention(q, k, v, causal); };
  auto composed = [&] { return composed_attention(q, k, v, mask); };
  const int iters = options.smoke ? 1 : std::max(5, options.iters / 2);
  Comparison fwd = time_interleaved(forward(fused), forward(composed), iters, 1, options.smoke ? 0 : 2);
  Comparison step = time_interleaved(train_step(fused), train_step(composed), iters, 1, options.smoke ? 0 : 2);
  char title[160];
  std::snprintf(title, sizeof title,
                "attention B=%lld h=%lld T=%lld d_h=%lld causal f32, %d thread(s); "
                "speed-up = composed ms / fused ms",
                (long long)B, (long long)h, (long long)T, (long long)d_h, options.threads);
  Table table(title, {"pass", "fused ms", "composed ms", "speed-up (ratio of medians)", "median pair ratio"});
  for (auto& [name, c] : {std::pair<const char*, Comparison>{"forward", fwd}, {"forward+backward", step}})
    table.row({name, format("%.2f", c.a_ms), format("%.2f", c.b_ms), format("%.2f", c.ratio_of_medians),
               format("%.2f", c.median_pair_ratio)});
  table.print();
  std::printf(
      "\nJSON {\"bench\": \"attention\", \"threads\": %d, \"forward_ms\": %.3f, "
      "\"forward_backward_ms\": %.3f}\n",
      options.threads, fwd.a_ms, step.a_ms);
}

// ---- section 4: routed grouped products against dense matmuls -------------

void bench_routing(const Options& options) {
  const int64_t tokens = options.smoke ? 64 : 1024, d = options.smoke ? 32 : 512, d_h = options.smoke ? 16 : 64;
  const int64_t experts = 8, k = 2, rows = tokens * k;
  Generator gen(2026);
  Tensor x = Tensor::randn({tokens, d}, gen), w_q = Tensor::randn({experts, d, d_h}, gen);
  Tensor heads = Tensor::randn({rows, d_h}, gen), w_o = Tensor::randn({experts, d_h, d}, gen);
  TopK top = topk(softmax(Tensor::randn({tokens, experts}, gen), -1), k);
  RoutePlan plan = route(top.indices, experts);
  Tensor dq = Tensor::randn({rows, d_h}, gen), dout = Tensor::randn({tokens, d}, gen);
  // The dense stand-ins: the same multiply-adds on contiguous rows, through
  // headroom::matmul (each thread a band of rows, as MHA's projections run).
  Tensor x_rows = Tensor::randn({rows, d}, gen), y_rows = Tensor::randn({rows, d}, gen);
  Tensor w_q0 = Tensor::randn({d, d_h}, gen), w_o0 = Tensor::randn({d_h, d}, gen);
  struct Case {
    std::string op, pass;
    std::function<void()> routed, dense;
  };
  std::vector<Case> cases = {
      {"gather_segment_matmul (W_q)", "forward",
       [&] {
         NoGradGuard ng;
         gather_segment_matmul(x, w_q, plan);
       },
       [&] {
         NoGradGuard ng;
         matmul(x_rows, w_q0);
       }},
      {"gather_segment_matmul (W_q)", "fwd+bwd",
       [&] {
         Tensor xg = x.detach().set_requires_grad(), wg = w_q.detach().set_requires_grad();
         gather_segment_matmul(xg, wg, plan).backward(dq);
       },
       [&] {
         NoGradGuard ng;
         matmul(x_rows, w_q0);    // Q = X·W
         matmul(dq, w_q0.t());    // dX = dQ·Wᵀ
         matmul(x_rows.t(), dq);  // dW = Xᵀ·dQ
       }},
      {"segment_matmul_scatter (W_o, gated)", "forward",
       [&] {
         NoGradGuard ng;
         segment_matmul_scatter(heads, w_o, plan, top.values);
       },
       [&] {
         NoGradGuard ng;
         matmul(heads, w_o0);
       }},
      {"segment_matmul_scatter (W_o, gated)", "fwd+bwd",
       [&] {
         Tensor hg = heads.detach().set_requires_grad(), wg = w_o.detach().set_requires_grad();
         Tensor gg = top.values.detach().set_requires_grad();
         segment_matmul_scatter(hg, wg, plan, gg).backward(dout);
       },
       [&] {
         NoGradGuard ng;
         matmul(heads, w_o0);        // Y = H·W
         matmul(y_rows, w_o0.t());   // dH = dY·Wᵀ
         matmul(heads.t(), y_rows);  // dW = Hᵀ·dY
       }},
  };
  Table table("MoA's grouped products, " + std::to_string(tokens) + " tokens, d=" + std::to_string(d) +
                  ", d_h=" + std::to_string(d_h) + ", E=8, k=2, f32, " + std::to_string(options.threads) +
                  " thread(s); speed ratio = dense ms / routed ms",
              {"op", "pass", "routed ms", "dense matmuls ms", "ratio of medians", "median pair ratio"});
  for (const Case& c : cases) {
    Comparison t = time_interleaved(c.routed, c.dense, options.iters);
    table.row({c.op, c.pass, format("%.3f", t.a_ms), format("%.3f", t.b_ms), format("%.3f", t.ratio_of_medians),
               format("%.3f", t.median_pair_ratio)});
  }
  table.print();
}

// ---- main -----------------------------------------------------------------

struct Section {
  const char* name;
  void (*run)(const Options&);
};
const Section kSections[] = {
    {"matmul", bench_matmul}, {"dispatch", bench_dispatch}, {"attention", bench_attention}, {"routing", bench_routing}};

}  // namespace

int main(int argc, char** argv) {
  Options options;
  examples::Flags flags("bench_ops", "headroom's ops against the raw kernels they call, timed side by side");
  add_flags(flags, options);
  return examples::run_main(flags, [&] {
    if (!flags.parse(argc, argv)) return 0;
    auto named = [&](const Section& section) { return options.only.empty() || options.only == section.name; };
    if (std::none_of(std::begin(kSections), std::end(kSections), named))
      throw examples::UsageError("--only names no section: '" + options.only + "'");
    if (options.smoke) options.iters = 1;
    if (options.threads == 0) options.threads = num_threads();  // the section titles show it
    set_num_threads(options.threads);
    std::printf("# bench_ops\n\nthreads %d | iters %d%s | OpenBLAS %s\n\n", options.threads, options.iters,
                options.smoke ? " | smoke" : "", openblas_get_config());
    for (const Section& section : kSections)
      if (named(section)) section.run(options);
    return 0;
  });
}
