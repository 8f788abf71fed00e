// CPU kernels of the routing family: selection, row gathers and their
// per-destination transposes, and the grouped (segment) GEMM.
#include "headroom/ops/cpu/routing.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "headroom/core/parallel.h"
#include "headroom/core/threading.h"
#include "headroom/ops/cpu/indexed_gemm.h"

namespace headroom::cpu {
namespace {

// Loops over fewer elements than this stay on one thread (parallel.h): an
// OpenMP region costs microseconds, more than copying a few thousand floats.
constexpr int64_t kParallelElements = 1 << 14;
// Ranking costs more per element than a copy: top-2 of a router's [1024, 8]
// took 31 µs on one thread and 18 µs split over two (with the op's overhead).
constexpr int64_t kParallelTopK = 1 << 13;
// Up to this k (routers pick 1-8 of a few experts), topk inserts each index into
// the sorted best k so far (insert_top_k: n·k comparisons at worst, about n on
// random rows); above it, a partial sort (n·log k).
constexpr int64_t kInsertionTopK = 8;

void gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
          const float* b, int64_t ldb, float* c, int64_t ldc, float beta = 0) {
  cblas_sgemm(CblasRowMajor, ta, tb, int(m), int(n), int(k), 1.0f, a, int(lda), b, int(ldb), beta, c, int(ldc));
}
void gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t m, int64_t n, int64_t k, const double* a, int64_t lda,
          const double* b, int64_t ldb, double* c, int64_t ldc, double beta = 0) {
  cblas_dgemm(CblasRowMajor, ta, tb, int(m), int(n), int(k), 1.0, a, int(lda), b, int(ldb), beta, c, int(ldc));
}

// Rows per work item of a gathered segment_matmul, and tokens per work item of
// segment_matmul_scatter: enough to reuse each loaded panel of the weight many
// times, few enough to balance two threads.
constexpr int64_t kGatherTile = 256;
constexpr int64_t kTokenBlock = 256;
constexpr int64_t kWholeSegment = std::numeric_limits<int64_t>::max();

// The token rows of grouped rows [first, first + rows) of x (x.order set),
// order[r] / k, in the calling thread's i32 buffer `slot`.
template <typename T> const int32_t* token_rows(const GroupedRows::Raw<T>& x, int64_t first, int64_t rows, int slot) {
  int32_t* tokens = thread_buffer<int32_t>(slot, rows);
  for (int64_t i = 0; i < rows; ++i) tokens[i] = int32_t(x.order[first + i] / x.k);
  return tokens;
}

// Grouped rows [first, first + rows) of x as one contiguous [rows, width]
// block: in place, or gathered into the calling thread's buffer `slot`.
template <typename T> const T* tile_rows(const GroupedRows::Raw<T>& x, int64_t first, int64_t rows, int slot) {
  if (!x.order) return x.data + first * x.width;
  T* tile = thread_buffer<T>(slot, rows * x.width);
  for (int64_t i = 0; i < rows; ++i) {
    const T* from = x.data + int64_t(x.order[first + i] / x.k) * x.width;
    std::copy(from, from + x.width, tile + i * x.width);
  }
  return tile;
}

// The first row in [begin, end) whose token order[r] / k is >= t: a segment's
// rows are in token order.
int64_t first_row_of_token(const int32_t* order, int64_t k, int64_t begin, int64_t end, int64_t t) {
  while (begin < end) {
    const int64_t mid = begin + (end - begin) / 2;
    if (order[mid] / k < t) begin = mid + 1;
    else end = mid;
  }
  return begin;
}

// Calls fn(e, lo, hi) for every segment e with rows of tokens [t0, t1): its
// grouped rows [lo, hi), one run because a segment's rows are in token order.
template <typename Fn>
void for_each_run(const int32_t* order, int64_t k, const int32_t* offsets, int64_t segments, int64_t t0, int64_t t1,
                  Fn&& fn) {
  for (int64_t e = 0; e < segments; ++e) {
    const int64_t lo = first_row_of_token(order, k, offsets[e], offsets[e + 1], t0);
    const int64_t hi = first_row_of_token(order, k, lo, offsets[e + 1], t1);
    if (lo < hi) fn(e, lo, hi);
  }
}

// Calls fn(item) for every item, in parallel, heaviest first so the threads
// finish together, each with single-threaded OpenBLAS: independent one-thread
// GEMMs beat OpenBLAS's own threading at these shapes, as the per-thread bands
// of a dense matmul do (docs/performance.md).  A lone item keeps all of
// OpenBLAS's threads instead.  Each item must write only its own output, so
// the result does not depend on the schedule.
template <typename Item, typename Cost, typename Fn>
void run_heaviest_first(std::vector<Item> items, Cost&& cost, Fn&& fn) {
  std::stable_sort(items.begin(), items.end(), [&](const Item& a, const Item& b) { return cost(a) > cost(b); });
  if (items.size() == 1) return fn(items[0]);
  BlasSingleThreadGuard blas_single_thread;
  const int64_t n = int64_t(items.size());
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t i = 0; i < n; ++i) fn(items[i]);
}

// Calls fn(e, first_row, rows) once per tile of at most `tile` rows of every
// non-empty segment, in parallel (run_heaviest_first).
template <typename Fn> void for_each_segment_tile(const int32_t* offsets, int64_t segments, int64_t tile, Fn&& fn) {
  struct Tile {
    int64_t segment, first, rows;
  };
  std::vector<Tile> tiles;
  for (int64_t e = 0; e < segments; ++e)
    for (int64_t first = offsets[e], rows; first < offsets[e + 1]; first += rows) {
      rows = std::min<int64_t>(tile, offsets[e + 1] - first);
      tiles.push_back({e, first, rows});
    }
  run_heaviest_first(
      std::move(tiles), [](const Tile& t) { return t.rows; }, [&](const Tile& t) { fn(t.segment, t.first, t.rows); });
}

// The k of indices [0, n) that rank first, in rank order, into best [k]:
// index j, in increasing order, is inserted into the sorted best k so far.
// ranks_before(j, i), asked only for j > i, says whether j ranks before i
// (false on a tie, which the lower index wins).
template <typename Before> void insert_top_k(int64_t n, int64_t k, int32_t* best, Before&& ranks_before) {
  int64_t kept = 0;
  for (int32_t j = 0; j < int32_t(n); ++j) {
    if (kept == k && !ranks_before(j, best[k - 1])) continue;
    int64_t pos = kept < k ? kept++ : k - 1;
    for (; pos > 0 && ranks_before(j, best[pos - 1]); --pos) best[pos] = best[pos - 1];
    best[pos] = j;
  }
}

// Rows without NaN, the usual case, are ranked by plain comparisons: 1.2-1.4x
// faster than testing every comparison for NaN (top-2 of [1024, 8]: 20.5 ->
// 14.4 us; of [16384, 64]: 3.9 -> 3.3 ms, one thread).
template <typename T> bool has_nan(const T* v, int64_t n) {
  bool nan = false;
  for (int64_t j = 0; j < n; ++j) nan |= std::isnan(v[j]);
  return nan;
}

}  // namespace

template <typename T> void topk_indices(const T* x, int64_t rows, int64_t n, int64_t k, int32_t* indices) {
  // Per thread: the candidate indices of a row for the partial sort, reused across rows.
  auto make_candidates = [n] { return std::vector<int32_t>(n); };
  parallel_for(rows, rows * n >= kParallelTopK, make_candidates, [&](std::vector<int32_t>& candidates, int64_t row) {
    const T* v = x + row * n;
    // A strict weak order: NaN first, then larger values, then lower indices.
    auto ranks_before = [v](int32_t a, int32_t b) {
      const bool a_nan = std::isnan(v[a]), b_nan = std::isnan(v[b]);
      if (a_nan != b_nan) return a_nan;
      if (!a_nan && v[a] != v[b]) return v[a] > v[b];
      return a < b;
    };
    if (k <= kInsertionTopK) {
      int32_t* best = indices + row * k;
      if (has_nan(v, n)) insert_top_k(n, k, best, ranks_before);
      else insert_top_k(n, k, best, [v](int32_t j, int32_t i) { return v[j] > v[i]; });  // the same order
      return;
    }
    std::iota(candidates.begin(), candidates.end(), 0);
    std::partial_sort(candidates.begin(), candidates.begin() + k, candidates.end(), ranks_before);
    std::copy(candidates.begin(), candidates.begin() + k, indices + row * k);
  });
}

template <typename T>
void take_along_rows(const T* src, const int32_t* index, int64_t rows, int64_t n, int64_t k, T* out) {
  for (int64_t row = 0; row < rows; ++row)
    for (int64_t j = 0; j < k; ++j) out[row * k + j] = src[row * n + index[row * k + j]];
}

template <typename T>
void put_along_rows(const T* src, const int32_t* index, int64_t rows, int64_t n, int64_t k, T* dst) {
  for (int64_t row = 0; row < rows; ++row)
    for (int64_t j = 0; j < k; ++j) dst[row * n + index[row * k + j]] += src[row * k + j];
}

template <typename T>
void gather_rows(const T* src, int64_t width, const int32_t* pair, int64_t group, const T* scale, int64_t out_rows,
                 T* out) {
  parallel_for(out_rows, out_rows * width > kParallelElements, [&](int64_t r) {
    const T* from = src + (pair[r] / group) * width;  // from: [width]
    const T s = scale ? scale[pair[r]] : T(1);
    T* to = out + r * width;
    for (int64_t c = 0; c < width; ++c) to[c] = s * from[c];
  });
}

template <typename T>
void sum_rows(const T* src, int64_t width, const int32_t* starts, const int32_t* row, const T* weight, int64_t dests,
              T* out) {
  parallel_for(dests, int64_t(starts[dests]) * width > kParallelElements, [&](int64_t d) {
    T* to = out + d * width;  // to: [width]
    std::fill(to, to + width, T(0));
    for (int64_t q = starts[d]; q < starts[d + 1]; ++q) {
      const T* from = src + int64_t(row[q]) * width;
      const T w = weight ? weight[q] : T(1);
      for (int64_t c = 0; c < width; ++c) to[c] += w * from[c];
    }
  });
}

template <typename T>
void row_dots(const T* a, const int32_t* a_row, const T* b, int64_t group, int64_t width, int64_t pairs, T* out) {
  parallel_for(pairs, pairs * width > kParallelElements, [&](int64_t p) {
    const T* u = a + int64_t(a_row[p]) * width;
    const T* v = b + (p / group) * width;
    T dot = 0;
    for (int64_t c = 0; c < width; ++c) dot += u[c] * v[c];
    out[p] = dot;
  });
}

template <typename T>
void gate_rows_backward(const T* y, const T* gates, const int32_t* order, int64_t rows, int64_t width, T* dy, T* dgates,
                        T* y_gated) {
  parallel_for(rows, rows * width > kParallelElements, [&](int64_t r) {
    const T* y_row = y + r * width;  // [width] each
    T* dy_row = dy + r * width;
    T* y_gated_row = y_gated + r * width;
    const T gate = gates[order[r]];
    T dot = 0;
    for (int64_t c = 0; c < width; ++c) {
      dot += y_row[c] * dy_row[c];
      dy_row[c] *= gate;
      y_gated_row[c] = gate * y_row[c];
    }
    dgates[order[r]] = dot;
  });
}

template <typename T>
void segment_matmul(const GroupedRows::Raw<T>& x, const T* w, const int32_t* offsets, int64_t segments, int64_t in,
                    int64_t out_features, bool transpose_w, T* out) {
  // Forward: [rows, in] · [in, out].  Transposed: [rows, out] · [in, out]ᵀ.
  const int64_t y_width = transpose_w ? in : out_features;
  if (x.order && !transpose_w) {  // the indexed GEMM reads each tile's token rows where they are
    for_each_segment_tile(offsets, segments, kGatherTile, [&](int64_t e, int64_t first, int64_t rows) {
      IndexedRows<T> tile;
      tile.a = x.data, tile.lda = x.width, tile.a_rows = token_rows(x, first, rows, 0);
      tile.c = out + first * y_width, tile.ldc = y_width;
      indexed_gemm(tile, rows, w + e * in * out_features, in, out_features);
    });
    return;
  }
  // BLAS, which reads a transposed w in its packing (transposing it for our
  // kernel cost more than the kernel saved); gathered rows are copied per tile.
  const int64_t tile = x.order ? kGatherTile : kWholeSegment;  // rows in place: one GEMM per segment
  for_each_segment_tile(offsets, segments, tile, [&](int64_t e, int64_t first, int64_t rows) {
    gemm(CblasNoTrans, transpose_w ? CblasTrans : CblasNoTrans, rows, y_width, x.width, tile_rows(x, first, rows, 0),
         x.width, w + e * in * out_features, out_features, out + first * y_width, y_width);
  });
}

template <typename T>
void segment_matmul_scatter(const T* y, const int32_t* order, int64_t k, const int32_t* offsets, int64_t segments,
                            const T* w, int64_t in, int64_t out_features, bool transpose_w, int64_t tokens, T* out,
                            const T* gates) {
  const int64_t y_width = transpose_w ? out_features : in, out_width = transpose_w ? in : out_features;
  // Tokens [t0, t1): each segment's rows of these tokens are one run.  The
  // indexed GEMM writes a run's products straight into their token rows, the
  // first of a token's k (lowest segment) stored and the later ones added.
  // With transpose_w, BLAS writes them to a per-thread buffer instead, and
  // each token row is then written once as the sum of its k.  Either way a row
  // sums its products in segment order.
  auto transposed_block = [&](int64_t t0, int64_t t1) {
    const int64_t rows = (t1 - t0) * k;
    T* products = thread_buffer<T>(0, rows * out_width);  // [rows, out_width], segment after segment
    struct Part {
      int64_t product;  // its row of products
      T gate;
    };
    std::vector<Part> parts(rows);  // token t0 + t's i-th: parts[t * k + i]
    std::vector<int64_t> filled(t1 - t0, 0);
    int64_t done = 0;
    for_each_run(order, k, offsets, segments, t0, t1, [&](int64_t e, int64_t lo, int64_t hi) {
      gemm(CblasNoTrans, CblasTrans, hi - lo, out_width, y_width, y + lo * y_width, y_width, w + e * in * out_features,
           out_features, products + done * out_width, out_width);
      for (int64_t r = lo; r < hi; ++r) {
        const int64_t t = order[r] / k - t0;
        parts[t * k + filled[t]++] = {done + (r - lo), gates ? gates[order[r]] : T(1)};
      }
      done += hi - lo;
    });
    for (int64_t t = 0; t < t1 - t0; ++t) {
      T* to = out + (t0 + t) * out_width;  // [out_width]
      for (int64_t i = 0; i < k; ++i) {
        const T* from = products + parts[t * k + i].product * out_width;
        const T gate = parts[t * k + i].gate;
        if (i == 0)
          for (int64_t c = 0; c < out_width; ++c) to[c] = gate * from[c];
        else
          for (int64_t c = 0; c < out_width; ++c) to[c] += gate * from[c];
      }
    }
  };
  auto indexed_block = [&](int64_t t0, int64_t t1) {
    const int64_t rows = (t1 - t0) * k;  // at most this many in one segment
    int32_t* token_of = thread_buffer<int32_t>(0, rows);
    uint8_t* adds = thread_buffer<uint8_t>(0, rows);
    T* gate_of = thread_buffer<T>(0, rows);
    std::vector<uint8_t> written(t1 - t0, 0);
    for_each_run(order, k, offsets, segments, t0, t1, [&](int64_t e, int64_t lo, int64_t hi) {
      for (int64_t r = lo; r < hi; ++r) {
        const int64_t t = order[r] / k;
        token_of[r - lo] = int32_t(t);
        adds[r - lo] = written[t - t0];
        written[t - t0] = 1;
        if (gates) gate_of[r - lo] = gates[order[r]];
      }
      IndexedRows<T> run;
      run.a = y + lo * y_width, run.lda = y_width;
      run.c = out, run.ldc = out_width, run.c_rows = token_of;
      run.scale = gates ? gate_of : nullptr, run.add = adds;
      indexed_gemm(run, hi - lo, w + e * in * out_features, y_width, out_width);
    });
  };
  auto block = [&](int64_t t0, int64_t t1) {
    if (k == 0) return std::fill(out + t0 * out_width, out + t1 * out_width, T(0));  // tokens routed nowhere
    transpose_w ? transposed_block(t0, t1) : indexed_block(t0, t1);
  };
  const int64_t blocks = (tokens + kTokenBlock - 1) / kTokenBlock;
  if (blocks <= 1) return block(0, tokens);  // one block keeps all of OpenBLAS's threads
  BlasSingleThreadGuard blas_single_thread;
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t b = 0; b < blocks; ++b) block(b * kTokenBlock, std::min(tokens, (b + 1) * kTokenBlock));
}

template <typename T>
void segment_matmul_weight_grad(const GroupedRows::Raw<T>& x, const GroupedRows::Raw<T>& dy, const int32_t* offsets,
                                int64_t segments, int64_t in, int64_t out_features, T* dw) {
  // dw[e]: [in, out] = x[seg e]ᵀ [in, rows] · dy[seg e] [rows, out].
  std::vector<int64_t> used;  // the segments with rows; a weight slice no row uses gets 0
  for (int64_t e = 0; e < segments; ++e) {
    if (offsets[e + 1] > offsets[e]) used.push_back(e);
    else std::fill(dw + e * in * out_features, dw + (e + 1) * in * out_features, T(0));
  }
  if (in > out_features) {
    // W_q's shape ([512, 64]): BLAS, one work item per segment, its gathered
    // rows copied 256 at a time.  The indexed kernel would have to run its tile
    // along `out` and store dw[e] transposed: it is within 2% of BLAS with
    // cold caches aside, and BLAS is 1.2-1.35x faster under memory pressure
    // (docs/performance.md).
    auto rows_of = [offsets](int64_t e) { return offsets[e + 1] - offsets[e]; };
    run_heaviest_first(std::move(used), rows_of, [&](int64_t e) {
      for (int64_t first = offsets[e], rows; first < offsets[e + 1]; first += rows) {
        rows = std::min(kGatherTile, offsets[e + 1] - first);
        gemm(CblasTrans, CblasNoTrans, in, out_features, rows, tile_rows(x, first, rows, 0), x.width,
             tile_rows(dy, first, rows, 1), dy.width, dw + e * in * out_features, out_features,
             T(first > offsets[e] ? 1 : 0));
      }
    });
    return;
  }
  // W_o's shape ([64, 512]): both operands reached through their token
  // indices (indexed_gemm_tn) instead of copied for BLAS, which was 17% slower
  // here on two threads.  Each segment's dw is two work items, halves of its
  // columns, so that eight experts of unequal loads keep two threads busy to
  // the end (MoA's W_o gradient: 825 -> 765 µs on 2 threads, README).
  struct Block {
    int64_t segment, col0, cols;  // columns [col0, col0 + cols) of dw[segment]
  };
  std::vector<Block> blocks;
  for (int64_t e : used) {
    const int64_t half = (out_features / 2 + 15) / 16 * 16;  // on a whole tile of columns
    if (half < out_features) blocks.insert(blocks.end(), {{e, 0, half}, {e, half, out_features - half}});
    else blocks.push_back({e, 0, out_features});
  }
  auto cost = [offsets](const Block& b) { return (offsets[b.segment + 1] - offsets[b.segment]) * b.cols; };
  run_heaviest_first(std::move(blocks), cost, [&](const Block& block) {
    const int64_t first = offsets[block.segment], depth = offsets[block.segment + 1] - first;
    // The segment's rows of g from column col0 on: in place, or through its token rows.
    auto operand = [&](const GroupedRows::Raw<T>& g, int64_t col0, int slot) {
      if (!g.order) return DepthRows<T>{g.data + first * g.width + col0, g.width};
      return DepthRows<T>{g.data + col0, g.width, token_rows(g, first, depth, slot)};
    };
    indexed_gemm_tn(operand(x, 0, 0), operand(dy, block.col0, 1), depth, in, block.cols,
                    dw + block.segment * in * out_features + block.col0, out_features);
  });
}

#define HEADROOM_ROUTING_FLOAT_KERNELS(T)                                                                             \
  template void topk_indices<T>(const T*, int64_t, int64_t, int64_t, int32_t*);                                       \
  template void take_along_rows<T>(const T*, const int32_t*, int64_t, int64_t, int64_t, T*);                          \
  template void put_along_rows<T>(const T*, const int32_t*, int64_t, int64_t, int64_t, T*);                           \
  template void sum_rows<T>(const T*, int64_t, const int32_t*, const int32_t*, const T*, int64_t, T*);                \
  template void row_dots<T>(const T*, const int32_t*, const T*, int64_t, int64_t, int64_t, T*);                       \
  template void gate_rows_backward<T>(const T*, const T*, const int32_t*, int64_t, int64_t, T*, T*, T*);              \
  template void segment_matmul<T>(const GroupedRows::Raw<T>&, const T*, const int32_t*, int64_t, int64_t, int64_t,    \
                                  bool, T*);                                                                          \
  template void segment_matmul_scatter<T>(const T*, const int32_t*, int64_t, const int32_t*, int64_t, const T*,       \
                                          int64_t, int64_t, bool, int64_t, T*, const T*);                             \
  template void segment_matmul_weight_grad<T>(const GroupedRows::Raw<T>&, const GroupedRows::Raw<T>&, const int32_t*, \
                                              int64_t, int64_t, int64_t, T*);
HEADROOM_ROUTING_FLOAT_KERNELS(float)
HEADROOM_ROUTING_FLOAT_KERNELS(double)
#undef HEADROOM_ROUTING_FLOAT_KERNELS

// index_select also moves integer tensors.
template void gather_rows<float>(const float*, int64_t, const int32_t*, int64_t, const float*, int64_t, float*);
template void gather_rows<double>(const double*, int64_t, const int32_t*, int64_t, const double*, int64_t, double*);
template void gather_rows<int32_t>(const int32_t*, int64_t, const int32_t*, int64_t, const int32_t*, int64_t, int32_t*);

}  // namespace headroom::cpu
