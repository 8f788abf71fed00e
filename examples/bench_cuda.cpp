// bench_cuda: the GPU benchmarks of the CUDA backend, each measured side by
// side in one run, against the baseline it has to beat (docs/gpu.md):
//   1. linear layers (our op) against raw cuBLAS at the same shape, forward
//      and forward+backward (goal: ≥ 90% of cuBLAS);
//   2. fused attention forward and forward+backward, with PyTorch's
//      scaled_dot_product_attention beside it when --torch FILE holds the
//      timings scripts/bench_cuda_torch.py measured on the same GPU;
//   3. a full training step (forward, backward, AdamW) of a 2-layer MHA
//      DecoderLM, tokens/s, with PyTorch's step from the same file.
//
//   bench_cuda [--iters N] [--torch FILE] [--tf32] [--smoke]
//
// f32 throughout (TF32 only with --tf32).  Without a CUDA device it says so
// and exits 0.
#include <algorithm>
#include <cstdio>
#include <functional>
#include <map>
#include <sstream>
#include <string>

#include "bench_common.h"
#include "headroom/core/read_file.h"
#include "headroom/examples/common/cli.h"
#include "headroom/headroom.h"
#if HEADROOM_HAS_CUDA
#include "headroom/cuda/backend.h"
#endif

using namespace headroom;
using namespace headroom::bench;

namespace {

struct Options {
  int iters = 20;
  std::string torch_file;
  bool tf32 = false, smoke = false;
};

const Device kGpu = Device::cuda(0);

// `reps` calls of fn, then a wait for the GPU: one timed sample, so that all
// the work the calls queued is counted.
std::function<void()> calls_then_sync(const std::function<void()>& fn, int reps) {
  return [&fn, reps] {
    for (int r = 0; r < reps; ++r) fn();
    wait_for(kGpu);
  };
}

// Milliseconds per call of fn on the GPU, after two warm-up calls (allocator
// cache, cuBLAS heuristics).
double gpu_ms(const std::function<void()>& fn, int reps) {
  calls_then_sync(fn, 2)();
  std::function<void()> sample = calls_then_sync(fn, reps);
  return time_ms(sample, 1) / reps;
}

// Side by side: A, B alternately `iters` times, each sample `reps` calls
// followed by a device synchronisation.
Comparison gpu_compare(const std::function<void()>& a, const std::function<void()>& b, int iters, int reps) {
  Comparison c = time_interleaved(calls_then_sync(a, reps), calls_then_sync(b, reps), iters, 1, 2);
  c.a_ms /= reps, c.b_ms /= reps;
  return c;
}

constexpr uint64_t kMaxTorchFileBytes = uint64_t(1) << 20;  // a few dozen lines in practice

// Timings PyTorch measured (scripts/bench_cuda_torch.py writes one "name ms" per
// line): name -> milliseconds.
std::map<std::string, double> read_torch(const std::string& path) {
  std::map<std::string, double> times;
  if (path.empty()) return times;
  std::istringstream in(read_regular_file(path, kMaxTorchFileBytes, "bench_cuda --torch"));
  std::string name;
  double ms = 0;
  while (in >> name >> ms) times[name] = ms;
  return times;
}

std::string torch_cell(const std::map<std::string, double>& torch, const std::string& key, double ours_ms) {
  auto it = torch.find(key);
  if (it == torch.end()) return "n/a | n/a";
  return format("%.3f", it->second) + " | " + format("%.2f", it->second / ours_ms);
}

#if HEADROOM_HAS_CUDA
// Raw cuBLAS for y[M, N] = x[M, K] · w[N, K]ᵀ, row-major: in column-major
// terms yᵀ = w · xᵀ, i.e. gemm(op(w) = T, op(x) = N).
void raw_linear(const float* x, const float* w, float* y, int64_t m, int64_t n, int64_t k) {
  const float one = 1, zero = 0;
  HEADROOM_CUBLAS_CHECK(cublasSgemm(cuda::cublas(0), CUBLAS_OP_T, CUBLAS_OP_N, int(n), int(m), int(k), &one, w, int(k),
                                    x, int(k), &zero, y, int(n)));
}

// The two backward GEMMs of a linear layer: dx[M, K] = dy · w, dw[N, K] = dyᵀ · x.
void raw_linear_backward(const float* x, const float* w, const float* dy, float* dx, float* dw, int64_t m, int64_t n,
                         int64_t k) {
  const float one = 1, zero = 0;
  HEADROOM_CUBLAS_CHECK(cublasSgemm(cuda::cublas(0), CUBLAS_OP_N, CUBLAS_OP_N, int(k), int(m), int(n), &one, w, int(k),
                                    dy, int(n), &zero, dx, int(k)));
  HEADROOM_CUBLAS_CHECK(cublasSgemm(cuda::cublas(0), CUBLAS_OP_N, CUBLAS_OP_T, int(k), int(n), int(m), &one, x, int(k),
                                    dy, int(n), &zero, dw, int(k)));
}
#endif

void bench_linear(const Options& o) {
#if HEADROOM_HAS_CUDA
  Table table("linear layers, f32" + std::string(o.tf32 ? " (TF32)" : "") + ": ours vs raw cuBLAS",
              {"M x K -> N", "pass", "ours ms", "cuBLAS ms", "ours / cuBLAS speed", "TFLOP/s (ours)"});
  struct Shape3 {
    int64_t m, k, n;
  };
  const Shape3 shapes[] = {{8192, 512, 512}, {8192, 512, 2048}, {8192, 2048, 512}, {16384, 1024, 4096}};
  Generator gen(7);
  for (const Shape3& s : shapes) {
    if (o.smoke && s.m > 8192) continue;
    Tensor x = Tensor::randn({s.m, s.k}, gen).to(kGpu).set_requires_grad();
    Tensor w = (Tensor::randn({s.n, s.k}, gen) * 0.02).to(kGpu).set_requires_grad();
    Tensor dy = Tensor::randn({s.m, s.n}, gen).to(kGpu);
    Tensor y_raw = Tensor::empty({s.m, s.n}, DType::f32, kGpu);
    Tensor dx_raw = Tensor::empty({s.m, s.k}, DType::f32, kGpu), dw_raw = Tensor::empty({s.n, s.k}, DType::f32, kGpu);
    const double flops = 2.0 * double(s.m) * double(s.n) * double(s.k);
    auto ours_fwd = [&] {
      NoGradGuard g;
      linear(x, w);
    };
    auto raw_fwd = [&] { raw_linear(x.data<float>(), w.data<float>(), y_raw.data<float>(), s.m, s.n, s.k); };
    auto ours_step = [&] {
      x.zero_grad(), w.zero_grad();
      linear(x, w).backward(dy);
    };
    auto raw_step = [&] {
      raw_fwd();
      raw_linear_backward(x.data<float>(), w.data<float>(), dy.data<float>(), dx_raw.data<float>(),
                          dw_raw.data<float>(), s.m, s.n, s.k);
    };
    const std::string shape =
        format("%.0f", double(s.m)) + " x " + format("%.0f", double(s.k)) + " -> " + format("%.0f", double(s.n));
    for (bool backward : {false, true}) {
      Comparison c =
          backward ? gpu_compare(ours_step, raw_step, o.iters, 5) : gpu_compare(ours_fwd, raw_fwd, o.iters, 10);
      const double total_flops = backward ? 3 * flops : flops;
      table.row({shape, backward ? "fwd+bwd" : "forward", format("%.3f", c.a_ms), format("%.3f", c.b_ms),
                 format("%.3f", c.b_ms / c.a_ms), format("%.1f", total_flops / c.a_ms / 1e9)});
    }
  }
  table.print();
#endif
}

// The shapes scripts/bench_cuda_torch.py measures too; keys "attn/<name>/<pass>".
struct AttentionShape {
  std::string name;
  int64_t batch, heads, seq, head_dim;
  bool causal;
};

void bench_attention(const Options& o, const std::map<std::string, double>& torch) {
  Table table("fused attention, f32: ours vs PyTorch scaled_dot_product_attention (same GPU)",
              {"B, h, T, d_h", "causal", "pass", "ours ms", "TFLOP/s (ours)", "PyTorch ms", "PyTorch / ours"});
  const AttentionShape shapes[] = {{"b4h8t1024d64", 4, 8, 1024, 64, true},
                                   {"b4h8t1024d64nc", 4, 8, 1024, 64, false},
                                   {"b4h8t4096d64", 4, 8, 4096, 64, true},
                                   {"b2h16t2048d128", 2, 16, 2048, 128, true}};
  Generator gen(8);
  for (const AttentionShape& s : shapes) {
    if (o.smoke && s.seq > 1024) continue;
    Shape shape = {s.batch, s.heads, s.seq, s.head_dim};
    Tensor q = Tensor::randn(shape, gen).to(kGpu).set_requires_grad();
    Tensor k = Tensor::randn(shape, gen).to(kGpu).set_requires_grad();
    Tensor v = Tensor::randn(shape, gen).to(kGpu).set_requires_grad();
    Tensor dout = Tensor::randn(shape, gen).to(kGpu);
    AttentionOptions opts;
    opts.causal = s.causal;
    // Score and value products: 4·B·h·T²·d_h, halved by a causal mask; backward ≈ 2.5×.
    const double fwd_flops =
        4.0 * double(s.batch * s.heads) * double(s.seq) * double(s.seq) * double(s.head_dim) * (s.causal ? 0.5 : 1.0);
    for (bool backward : {false, true}) {
      std::function<void()> fn = [&] {
        if (!backward) {
          NoGradGuard g;
          attention(q, k, v, opts);
          return;
        }
        q.zero_grad(), k.zero_grad(), v.zero_grad();
        attention(q, k, v, opts).backward(dout);
      };
      const double ms = gpu_ms(fn, o.smoke ? 1 : o.iters);
      const std::string pass = backward ? "fwd+bwd" : "forward";
      table.row({format("%.0f", double(s.batch)) + ", " + format("%.0f", double(s.heads)) + ", " +
                     format("%.0f", double(s.seq)) + ", " + format("%.0f", double(s.head_dim)),
                 s.causal ? "yes" : "no", pass, format("%.3f", ms),
                 format("%.1f", fwd_flops * (backward ? 3.5 : 1.0) / ms / 1e9),
                 torch_cell(torch, "attn/" + s.name + "/" + pass, ms)});
    }
  }
  table.print();
}

// One training step (forward, backward, AdamW) of the 2-layer MHA DecoderLM
// of bench_attention (d = 512, h = 8, FFN 2048, vocabulary 256) against the
// same model in PyTorch (scripts/bench_cuda_torch.py).  The other attention
// types: bench_attention --device cuda.
void bench_training_step(const Options& o, const std::map<std::string, double>& torch) {
  const int64_t batch = 8, T = o.smoke ? 128 : 1024;
  Table table("training step, 2-layer MHA DecoderLM d=512 h=8 FFN 2048 vocab 256, B=8 T=" + format("%.0f", double(T)),
              {"ms / step", "tokens / s", "PyTorch ms", "PyTorch / ours"});
  ModelConfig c;
  c.vocab = 256, c.dim = 512, c.heads = 8, c.decoder_layers = 2, c.ffn_hidden = 2048, c.max_len = T;
  Generator gen(5);
  DecoderLM lm(c, gen);
  lm.to(kGpu);
  AdamW opt(lm.parameters(), 1e-4);
  Tensor tokens = Tensor::rand({batch, T}, gen, 0, 256, DType::f32).to(DType::i32).to(kGpu);
  std::function<void()> step = [&] {
    opt.zero_grad();
    ModelOutput out = lm.forward(tokens);
    training_loss(cross_entropy(out.out, tokens), out.aux_losses, batch * T).backward();
    opt.step();
  };
  const double ms = gpu_ms(step, o.smoke ? 1 : std::max(o.iters / 2, 1));
  table.row({format("%.2f", ms), format("%.0f", double(batch * T) / ms * 1000), torch_cell(torch, "train/mha", ms)});
  table.print();
}

void add_flags(examples::Flags& flags, Options& o) {
  flags.add("iters", &o.iters, "timed samples per measurement", {1, 1'000'000});
  flags.add("torch", &o.torch_file, "PyTorch's timings from scripts/bench_cuda_torch.py, one 'name ms' a line");
  flags.add("tf32", &o.tf32, "TF32 tensor-core matmuls");
  flags.add("smoke", &o.smoke, "small shapes, 2 iterations (CI)");
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  examples::Flags flags("bench_cuda", "the CUDA backend's benchmarks against cuBLAS and PyTorch");
  add_flags(flags, o);
  return examples::run_main(flags, [&] {
    if (!flags.parse(argc, argv)) return 0;
    if (o.smoke) o.iters = 2;
    std::printf("# bench_cuda\n\n%s\n", device_summary(Device::Kind::cuda).c_str());
    if (device_count(Device::Kind::cuda) == 0) {
      std::printf("skipped: no CUDA device\n");
      return 0;
    }
    set_allow_tf32(o.tf32);
    std::map<std::string, double> torch = read_torch(o.torch_file);
    bench_linear(o);
    bench_attention(o, torch);
    bench_training_step(o, torch);
    return 0;
  });
}
