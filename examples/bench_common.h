#pragma once
// Timing and output helpers shared by the benchmark binaries (bench_ops,
// bench_attention, bench_decode, bench_step, bench_cuda): interleaved side-by-side timing, so that drift and the
// host's neighbours hit both sides alike (A, B, B, A, ...; medians; ratio of
// medians and median of per-pair ratios; docs/performance.md), and Markdown
// tables.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "headroom/core/backend.h"
#include "headroom/core/error.h"
#include "headroom/core/grad_mode.h"
#include "headroom/core/rng.h"
#include "headroom/core/threading.h"
#include "headroom/ops/matmul.h"

namespace headroom::bench {

// ---- timing ---------------------------------------------------------------

// Keeps the compiler from deleting work whose result is never read.
inline void do_not_optimize(const void* p) { asm volatile("" : : "g"(p) : "memory"); }

// The q-quantile (0 <= q <= 1) of values, interpolated linearly between
// order statistics (numpy's default); throws for no values.
inline double quantile(std::vector<double> values, double q) {
  HEADROOM_CHECK(!values.empty(), "[bench] the quantile of no timings; expected at least one");
  std::sort(values.begin(), values.end());
  const double at = q * double(values.size() - 1);
  const size_t below = size_t(at);
  if (below + 1 >= values.size()) return values.back();
  return values[below] + (at - double(below)) * (values[below + 1] - values[below]);
}
inline double median(const std::vector<double>& values) { return quantile(values, 0.5); }
// The interquartile range relative to the median: how much the timings spread.
inline double relative_iqr(const std::vector<double>& values) {
  return (quantile(values, 0.75) - quantile(values, 0.25)) / median(values);
}

// Waits for the device's queued work (a no-op on the CPU), so that a timing
// covers the kernels and not only their launch.
inline void wait_for(Device device) {
  if (device.is_cuda()) backend(device).synchronize(device.index);
}

// Milliseconds for `reps` calls of fn.
template <typename Fn> double time_ms(Fn& fn, int reps) {
  auto start = std::chrono::steady_clock::now();
  for (int r = 0; r < reps; ++r) fn();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

// Two timings taken side by side.  Times are per call; ratios are b / a, so
// a ratio of 0.95 says A runs at 95% of B's speed.
struct Comparison {
  double a_ms = 0, b_ms = 0;
  double a_iqr = 0, b_iqr = 0;  // interquartile ranges relative to the medians
  double ratio_of_medians = 0;
  double median_pair_ratio = 0;
  double median_pair_time_ratio = 0;  // the median over pairs of a's time / b's
};

// Runs a and b alternately (A,B then B,A, ...) `iters` times after `warmup`
// pairs; each sample times `reps` back-to-back calls (for calls too short to
// time one by one).
template <typename FnA, typename FnB>
Comparison time_interleaved(FnA&& a, FnB&& b, int iters, int reps = 1, int warmup = 3) {
  for (int i = 0; i < warmup; ++i) {
    time_ms(a, reps);
    time_ms(b, reps);
  }
  std::vector<double> ta, tb, pair_ratios, time_ratios;
  for (int i = 0; i < iters; ++i) {
    double first, second;
    if (i % 2 == 0) {
      first = time_ms(a, reps);
      second = time_ms(b, reps);
    } else {
      second = time_ms(b, reps);
      first = time_ms(a, reps);
    }
    ta.push_back(first / reps);
    tb.push_back(second / reps);
    pair_ratios.push_back(second / first);
    time_ratios.push_back(first / second);
  }
  Comparison c;
  c.a_ms = median(ta);
  c.b_ms = median(tb);
  c.a_iqr = relative_iqr(ta);
  c.b_iqr = relative_iqr(tb);
  c.ratio_of_medians = c.b_ms / c.a_ms;
  c.median_pair_ratio = median(pair_ratios);
  c.median_pair_time_ratio = median(time_ratios);
  return c;
}

// The rate of an f32 matmul [m, k] · [k, n] on `threads` threads, in GFLOP/s:
// the median of `calls` calls after 2 untimed ones (the first starts the
// thread pool).  An anchor for a benchmark's own rates, measured in the same
// run, since a shared host moves both.  The thread count in use is restored.
inline double sgemm_gflops(int64_t m, int64_t k, int64_t n, int threads, int calls = 12) {
  const int previous = num_threads();
  set_num_threads(threads);
  Generator gen(1);
  Tensor a = Tensor::randn({m, k}, gen), b = Tensor::randn({k, n}, gen);
  NoGradGuard no_grad;
  auto gemm = [&] { do_not_optimize(matmul(a, b).data<float>()); };
  std::vector<double> ms;
  for (int i = 0; i < calls + 2; ++i) ms.push_back(time_ms(gemm, 1));
  ms.erase(ms.begin(), ms.begin() + 2);
  set_num_threads(previous);
  return 2.0 * double(m * k * n) / (median(ms) * 1e6);
}

// ---- output ---------------------------------------------------------------

inline std::string format(const char* fmt, double value) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, fmt, value);
  return buffer;
}

// A Markdown table, printed when the section is done.
class Table {
 public:
  Table(std::string title, std::vector<std::string> columns) : title_(std::move(title)), columns_(std::move(columns)) {}
  void row(std::vector<std::string> cells) { rows_.push_back(std::move(cells)); }
  void print() const {
    std::printf("\n### %s\n\n", title_.c_str());
    print_row(columns_);
    std::string rule = "|";
    for (size_t i = 0; i < columns_.size(); ++i) rule += "---|";
    std::printf("%s\n", rule.c_str());
    for (const auto& cells : rows_) print_row(cells);
  }

 private:
  static void print_row(const std::vector<std::string>& cells) {
    std::string line = "|";
    for (const auto& cell : cells) line += " " + cell + " |";
    std::printf("%s\n", line.c_str());
  }
  std::string title_;
  std::vector<std::string> columns_;
  std::vector<std::vector<std::string>> rows_;
};

}  // namespace headroom::bench
