// CPU reduction kernels: one loop over [outer, n, inner] slices
// (reduce_slices) and an accumulator per op.
#include "headroom/ops/cpu/reduce.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "headroom/core/parallel.h"
#include "headroom/ops/cpu/vector_math.h"

namespace headroom::cpu {
namespace {

// The one reduction loop.  Output j = (o, i) reduces x[o, 0..n-1, i]:
// acc.init() starts a state, acc.step(state, value, r) folds element r in,
// acc.store(j, state) writes the output.  Outputs are independent: threads
// split them.
template <typename T, typename Acc> void reduce_slices(const Tensor& x, ReduceDims d, const Acc& acc) {
  const T* data = x.data<T>();  // [outer, n, inner]
  const int64_t outputs = d.outer * d.inner;
  parallel_for(outputs, outputs * d.n >= kParallelMin, [&](int64_t j) {
    const T* slice = data + (j / d.inner) * d.n * d.inner + j % d.inner;  // element r: slice[r * inner]
    auto state = acc.init();
    for (int64_t r = 0; r < d.n; ++r) acc.step(state, slice[r * d.inner], r);
    acc.store(j, state);
  });
}

// sum, and mean with scale = 1/n.  Accumulates in double, so f32 sums of many
// elements keep their precision.
template <typename T> struct SumAcc {
  T* out;
  double scale;
  double init() const { return 0; }
  void step(double& sum, T v, int64_t) const { sum += v; }
  void store(int64_t j, double sum) const { out[j] = static_cast<T>(sum * scale); }
};

// log(sum(exp(x))) in one stable pass: the state is the running max m and
// sum(exp(x - m)), rescaled whenever m grows, so no exp overflows.
template <typename T> struct LogSumExpAcc {
  T* out;
  struct State {
    double max = -INFINITY;
    double sum = 0;  // stays 0 only while every element is -inf
  };
  State init() const { return {}; }
  void step(State& s, T v, int64_t) const {
    if (v > s.max) {
      s.sum = s.sum * std::exp(s.max - v) + 1;
      s.max = v;
    } else if (v != -INFINITY) {  // a NaN lands here and makes the sum NaN
      s.sum += std::exp(v - s.max);
    }
  }
  void store(int64_t j, const State& s) const {
    out[j] = static_cast<T>(s.sum == 0 ? -INFINITY : s.max + std::log(s.sum));
  }
};

// logsumexp of contiguous slices (inner == 1, as a router's [N, E] logits):
// a max pass, then x - max through the vectorised exp, summed in double.  The
// one-pass accumulator above calls std::exp once or twice per element (3x
// slower on [1024, 8]).  NaN anywhere gives NaN, +inf gives +inf, all -inf
// (or an empty slice) gives -inf, as there.
template <typename T> void logsumexp_rows(const T* x, int64_t rows, int64_t n, T* out) {
  const int64_t block = rows_per_block(n), blocks = (rows + block - 1) / block;
  struct Scratch {
    std::vector<T> shifted, top;  // exp(row - max) for a block of rows, and the maxima
  };
  auto make_scratch = [&] { return Scratch{std::vector<T>(block * n), std::vector<T>(block)}; };
  parallel_for(blocks, rows * n >= kParallelMin, make_scratch, [&](Scratch& scratch, int64_t b) {
    const int64_t first = b * block, count = std::min(block, rows - first);
    const T* top = scratch.top.data();
    exp_minus_row_max(x + first * n, count, n, scratch.shifted.data(), scratch.top.data());
    for (int64_t r = 0; r < count; ++r) {
      const T* row = x + (first + r) * n;
      bool has_nan = false;
      for (int64_t j = 0; j < n; ++j) has_nan |= row[j] != row[j];
      if (has_nan || std::isinf(top[r])) {
        out[first + r] = has_nan ? T(NAN) : top[r];
        continue;
      }
      double sum = 0;
      for (int64_t j = 0; j < n; ++j) sum += scratch.shifted[r * n + j];
      out[first + r] = static_cast<T>(top[r] + std::log(sum));
    }
  });
}

// The first maximal (or minimal) element and its index.  A NaN beats every
// number, and the first NaN stays.
template <typename T, Extreme Which> struct ArgAcc {
  T* values;  // null when only the indices are wanted
  int32_t* indices;
  struct State {
    T best = 0;
    int64_t index = -1;
  };
  State init() const { return {}; }
  static bool better(T v, T best) {
    if (best != best) return false;
    if (v != v) return true;
    return Which == Extreme::max ? v > best : v < best;
  }
  void step(State& s, T v, int64_t r) const {
    if (s.index < 0 || better(v, s.best)) s = {v, r};
  }
  void store(int64_t j, const State& s) const {
    if (values) values[j] = s.best;
    indices[j] = static_cast<int32_t>(s.index);
  }
};

}  // namespace

void reduce(ReduceOp op, const Tensor& x, ReduceDims dims, const Tensor& out) {
  dispatch_floating(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    T* o = out.data<T>();
    if (op == ReduceOp::logsumexp && dims.inner == 1) logsumexp_rows<T>(x.data<T>(), dims.outer, dims.n, o);
    else if (op == ReduceOp::logsumexp) reduce_slices<T>(x, dims, LogSumExpAcc<T>{o});
    else reduce_slices<T>(x, dims, SumAcc<T>{o, op == ReduceOp::mean ? 1.0 / double(dims.n) : 1.0});
  });
}

void reduce_arg(Extreme which, const Tensor& x, ReduceDims dims, const Tensor& values, const Tensor& indices) {
  dispatch_floating(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    T* v = values.defined() ? values.data<T>() : nullptr;
    int32_t* idx = indices.data<int32_t>();
    if (which == Extreme::max) reduce_slices<T>(x, dims, ArgAcc<T, Extreme::max>{v, idx});
    else reduce_slices<T>(x, dims, ArgAcc<T, Extreme::min>{v, idx});
  });
}

void running_sum(const Tensor& x, ReduceDims d, bool reverse, const Tensor& out) {
  dispatch_floating(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* src = x.data<T>();  // [outer, n, inner]
    T* dst = out.data<T>();
    // Per outer slice: the inner running sums advance together, one step of n at a time.
    auto make_sums = [&] { return std::vector<double>(d.inner); };
    const bool parallel = d.outer * d.n * d.inner >= kParallelMin;
    parallel_for(d.outer, parallel, make_sums, [&](std::vector<double>& sums, int64_t o) {
      std::fill(sums.begin(), sums.end(), 0.0);
      for (int64_t step = 0; step < d.n; ++step) {
        const int64_t at = (o * d.n + (reverse ? d.n - 1 - step : step)) * d.inner;
        for (int64_t c = 0; c < d.inner; ++c) dst[at + c] = T(sums[c] += double(src[at + c]));
      }
    });
  });
}

void scatter_to_indices(const Tensor& g, const Tensor& indices, ReduceDims d, const Tensor& grad) {
  dispatch_floating(g.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* src = g.data<T>();  // [outer, inner]
    const int32_t* idx = indices.data<int32_t>();
    T* out = grad.data<T>();  // [outer, n, inner]
    std::fill(out, out + d.outer * d.n * d.inner, T(0));
    const int64_t outputs = d.outer * d.inner;
    parallel_for(outputs, outputs >= kParallelMin,
                 [&](int64_t j) { out[((j / d.inner) * d.n + idx[j]) * d.inner + j % d.inner] = src[j]; });
  });
}

}  // namespace headroom::cpu
