// CPU attention kernels (see attention.h for the layout and the plan).
// Every matrix product is a small single-threaded BLAS call on one tile; the
// parallelism is over tiles (forward) and query groups (backward).
#include "headroom/ops/cpu/attention.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "headroom/core/cpu_dispatch.h"
#include "headroom/core/threading.h"
#include "headroom/ops/cpu/nn.h"
#include "headroom/ops/cpu/vector_math.h"

namespace headroom::cpu {

namespace {

template <typename T> constexpr T kInf = std::numeric_limits<T>::infinity();

// y[m or n] = alpha * op(A) · x + beta * y, A [m, n] row-major, on the calling thread.
void gemv(bool trans, int64_t m, int64_t n, float alpha, const float* a, int64_t lda, const float* x, float beta,
          float* y) {
  cblas_sgemv(CblasRowMajor, trans ? CblasTrans : CblasNoTrans, int(m), int(n), alpha, a, int(lda), x, 1, beta, y, 1);
}
void gemv(bool trans, int64_t m, int64_t n, double alpha, const double* a, int64_t lda, const double* x, double beta,
          double* y) {
  cblas_dgemv(CblasRowMajor, trans ? CblasTrans : CblasNoTrans, int(m), int(n), alpha, a, int(lda), x, 1, beta, y, 1);
}

// C[m, n] = alpha * op(A) * op(B) + beta * C, row-major, on the calling thread.
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
          const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, int(m), int(n),
              int(k), alpha, a, int(lda), b, int(ldb), beta, c, int(ldc));
}
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha, const double* a, int64_t lda,
          const double* b, int64_t ldb, double beta, double* c, int64_t ldc) {
  cblas_dgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, int(m), int(n),
              int(k), alpha, a, int(lda), b, int(ldb), beta, c, int(ldc));
}

// Number of keys [0, n) that query position `pos` may see under the causal mask.
int64_t causal_extent(const AttentionProblem& p, int64_t pos) {
  if (!p.causal) return p.num_keys;
  return std::clamp<int64_t>(pos + p.causal_offset + 1, 0, p.num_keys);
}

// One tile: `rows` consecutive query rows of a group, sorted by position.
template <typename T> struct Tile {
  int64_t row0 = 0, rows = 0;  // rows [row0, row0 + rows) of q
  int64_t batch = 0, head = 0;
  const T* k = nullptr;  // [S, d_h] keys of the tile's K/V sequence, rows p.kv_strides[2] apart
  const T* v = nullptr;  // [S, d_h], the same layout
  int64_t num_keys = 0;  // keys [0, num_keys) are visible to at least its last row
};

template <typename T>
Tile<T> make_tile(const AttentionProblem& p, const AttentionGroup& g, int64_t row0, const T* k, const T* v) {
  Tile<T> tile;
  tile.row0 = row0;
  tile.rows = std::min(kQueryTile, g.row_end - row0);
  tile.batch = g.batch;
  tile.head = g.head;
  const int64_t kv = g.batch * p.kv_strides[0] + (p.kv_heads == 1 ? 0 : g.head) * p.kv_strides[1];
  tile.k = k + kv;
  tile.v = v + kv;
  tile.num_keys = causal_extent(p, p.positions[row0 + tile.rows - 1]);
  return tile;
}

// Work of a tile, for ordering the heaviest first.
template <typename T> int64_t tile_cost(const Tile<T>& tile) { return tile.rows * std::max<int64_t>(tile.num_keys, 1); }

// Threads for a pass of `cost` tile rows × keys: one when the work is too
// small to pay for waking a team (tens of microseconds when the other cores are busy).
int threads_for(const AttentionProblem& p, int64_t cost) {
  constexpr int64_t kMinParallelMultiplyAdds = int64_t(1) << 20;
  return cost * p.d_h < kMinParallelMultiplyAdds ? 1 : num_threads();
}

// Per-thread buffers, each one score block [kQueryTile, kKeyBlock].
template <typename T> struct Scratch {
  explicit Scratch(const AttentionProblem& p)
      : rows_in(p.row_of ? kQueryTile * p.d_h : 0), grad_rows_in(rows_in.size()), rows_out(rows_in.size()) {}
  std::vector<T> rows_in, grad_rows_in, rows_out;  // a tile's rows of q, dout and out/dq when p.row_of reorders
  std::vector<T> scores = std::vector<T>(kQueryTile * kKeyBlock);
  std::vector<T> grad_scores = std::vector<T>(kQueryTile * kKeyBlock);
  std::vector<T> dropped = std::vector<T>(kQueryTile * kKeyBlock);  // backward: P after dropout
  std::vector<T> row_max = std::vector<T>(kQueryTile);
  std::vector<T> row_sum = std::vector<T>(kQueryTile);  // forward: softmax sums; backward: D
  std::vector<T> all_scores;                            // forward_few_rows: [rows, S], grown on use
};

// The caller's row for kernel row r.
int64_t caller_row(const AttentionProblem& p, int64_t r) { return p.row_of ? p.row_of[r] : r; }

// The tile's rows of x [R, d_h] (caller's order) as one contiguous [rows, d_h]
// block: in place, or copied into `buffer` when p.row_of reorders.
template <typename T> const T* load_rows(const AttentionProblem& p, const Tile<T>& tile, const T* x, T* buffer) {
  const int64_t d = p.d_h;
  if (!p.row_of) return x + tile.row0 * d;
  for (int64_t i = 0; i < tile.rows; ++i) std::copy_n(x + caller_row(p, tile.row0 + i) * d, d, buffer + i * d);
  return buffer;
}

// Where the tile's output rows [rows, d_h] accumulate: x's rows in place, or
// `buffer`, which store_rows then copies to the caller's rows.
template <typename T> T* output_rows(const AttentionProblem& p, const Tile<T>& tile, T* x, T* buffer) {
  return p.row_of ? buffer : x + tile.row0 * p.d_h;
}

template <typename T> void store_rows(const AttentionProblem& p, const Tile<T>& tile, const T* rows, T* x) {
  const int64_t d = p.d_h;
  if (!p.row_of) return;
  for (int64_t i = 0; i < tile.rows; ++i) std::copy_n(rows + i * d, d, x + caller_row(p, tile.row0 + i) * d);
}

// -inf in scores [rows, n] (keys [s0, s0 + n)) where the key is hidden from
// the row: after its causal limit, or padded.
template <typename T>
void mask_scores(const AttentionProblem& p, const Tile<T>& tile, int64_t s0, int64_t n, T* scores) {
  const uint8_t* padded = p.key_padding ? p.key_padding + tile.batch * p.num_keys + s0 : nullptr;
  for (int64_t i = 0; i < tile.rows; ++i) {
    T* row = scores + i * n;
    const int64_t visible = causal_extent(p, p.positions[tile.row0 + i]) - s0;
    for (int64_t j = std::max<int64_t>(visible, 0); j < n; ++j) row[j] = -kInf<T>;
    if (padded)
      for (int64_t j = 0; j < n; ++j) row[j] = padded[j] ? -kInf<T> : row[j];
  }
}

// scores[rows, n] = scale * Q_tile · K[s0 : s0+n]ᵀ, masked.  q_rows: the
// tile's queries, [rows, d_h].
template <typename T>
void masked_scores(const AttentionProblem& p, const Tile<T>& tile, const T* q_rows, int64_t s0, int64_t n, T* scores) {
  const int64_t d = p.d_h, ld = p.kv_strides[2];
  gemm(false, true, tile.rows, n, d, T(p.scale), q_rows, d, tile.k + s0 * ld, ld, T(0), scores, n);
  mask_scores(p, tile, s0, n, scores);
}

// y[rows, n] = x with the tile's dropout mask applied (dropped → 0, kept ×
// 1/(1-p)), for keys [s0, s0 + n).  Element (b, head, t, s) uses draw
// first + ((b*h + head)*T + t)*S + s: the row-major index of the [B, h, T, S]
// probabilities, as dropout() on a materialised P would draw it.
template <typename T>
void apply_dropout(const AttentionProblem& p, const Tile<T>& tile, int64_t s0, int64_t n, const T* x, T* y) {
  const T kept_scale = T(1 / (1 - p.dropout));
  for (int64_t i = 0; i < tile.rows; ++i) {
    const int64_t t = p.positions[tile.row0 + i];
    const int64_t head = p.row_heads.empty() ? tile.head : p.row_heads[tile.row0 + i];
    const uint64_t first =
        p.dropout_first + uint64_t(((tile.batch * p.heads + head) * p.seq_len + t) * p.num_keys + s0);
    dropout_apply(x + i * n, y + i * n, n, p.dropout_seed, first, p.dropout, kept_scale);
  }
}

// x[j] = exp(x[j] - shift).
template <typename T> void exp_shifted(T* x, int64_t n, T shift) {
#pragma omp simd
  for (int64_t j = 0; j < n; ++j) x[j] -= shift;
  exp_inplace(x, n);
}

// One online-softmax step for one row: turns the row's scores into
// exp(score - running max), updates the running max and sum, and rescales the
// row's output accumulator [d] to the new max.
template <typename T> void online_softmax_row(T* x, int64_t n, T& running_max, T& running_sum, T* acc, int64_t d) {
  const T new_max = max_of(x, n, running_max);
  if (new_max == -kInf<T>) {  // nothing visible yet: no weight on these keys
    std::fill(x, x + n, T(0));
    return;
  }
  exp_shifted(x, n, new_max);
  const T rescale = running_max == -kInf<T> ? T(0) : std::exp(running_max - new_max);
  running_sum = running_sum * rescale + sum_of(x, n);
  running_max = new_max;
  if (rescale != T(1))
    for (int64_t c = 0; c < d; ++c) acc[c] *= rescale;
}

// The rows of `tile` that see at least one key of the block starting at s0.
// Rows are sorted by position, so the rows whose causal limit ends before s0
// form a prefix: a routed tile, whose rows are scattered over the sequence,
// multiplies only its live suffix against each later key block instead of
// computing (and masking) scores for rows that cannot see it.
template <typename T> Tile<T> rows_seeing(const AttentionProblem& p, const Tile<T>& tile, int64_t s0) {
  Tile<T> live = tile;
  while (live.rows > 0 && causal_extent(p, p.positions[live.row0]) <= s0) ++live.row0, --live.rows;
  return live;
}

// The end of a forward tile: divides each accumulated row [d] by its softmax
// sum (a row that saw no key stays 0), writes lse and the rows to `out`.
template <typename T>
void finish_rows(const AttentionProblem& p, const Tile<T>& tile, T* acc, const Scratch<T>& s, T* out, T* lse) {
  const int64_t d = p.d_h;
  for (int64_t i = 0; i < tile.rows; ++i) {
    const T sum = s.row_sum[i];
    const T inv = sum > 0 ? T(1) / sum : T(0);
    for (int64_t c = 0; c < d; ++c) acc[i * d + c] *= inv;
    lse[caller_row(p, tile.row0 + i)] = sum > 0 ? s.row_max[i] + std::log(sum) : kInf<T>;
  }
  store_rows(p, tile, acc, out);
}

// A tile of at most kFewRows rows (a decoding step's query, MoA's k experts
// of one token) meets all its keys at once, row by row: a matrix-vector
// product for the row's scores [S], an exact softmax, a product with V.
// Blocked, it would make two tiny BLAS calls per kKeyBlock keys, and a
// matrix product packs K and V first; a matrix-vector product reads each
// once (docs/performance.md, "Decoding").
constexpr int64_t kFewRows = 4;

template <typename T>
HEADROOM_CPU_CLONES void forward_few_rows(const AttentionProblem& p, const Tile<T>& tile, const T* q, T* out, T* lse,
                                          Scratch<T>& s) {
  const int64_t d = p.d_h, m = tile.rows, n = tile.num_keys, ld = p.kv_strides[2];
  const T* q_tile = load_rows(p, tile, q, s.rows_in.data());  // [m, d]
  T* acc = output_rows(p, tile, out, s.rows_out.data());      // [m, d]
  std::fill(acc, acc + m * d, T(0));
  std::fill(s.row_sum.begin(), s.row_sum.end(), T(0));
  if (n > 0) {
    s.all_scores.resize(size_t(m * n));
    T* probs = s.all_scores.data();  // [m, n]
    for (int64_t i = 0; i < m; ++i) gemv(false, n, d, T(p.scale), tile.k, ld, q_tile + i * d, T(0), probs + i * n);
    mask_scores(p, tile, 0, n, probs);
    for (int64_t i = 0; i < m; ++i) {
      T* row = probs + i * n;
      s.row_max[i] = max_of(row, n, -kInf<T>);
      if (s.row_max[i] == -kInf<T>) {  // sees no key
        std::fill(row, row + n, T(0));
        continue;
      }
      exp_shifted(row, n, s.row_max[i]);
      s.row_sum[i] = sum_of(row, n);
    }
    if (p.dropout > 0) apply_dropout(p, tile, 0, n, probs, probs);
    for (int64_t i = 0; i < m; ++i) gemv(true, n, d, T(1), tile.v, ld, probs + i * n, T(0), acc + i * d);  // Pᵀ·V
  }
  finish_rows(p, tile, acc, s, out, lse);
}

template <typename T>
HEADROOM_CPU_CLONES void forward_tile(const AttentionProblem& p, const Tile<T>& tile, const T* q, T* out, T* lse,
                                      Scratch<T>& s) {
  if (tile.rows <= kFewRows) return forward_few_rows(p, tile, q, out, lse, s);
  const int64_t d = p.d_h, m = tile.rows, ld = p.kv_strides[2];
  const T* q_tile = load_rows(p, tile, q, s.rows_in.data());  // [m, d]
  T* acc = output_rows(p, tile, out, s.rows_out.data());      // [m, d]: the output rows accumulate here
  std::fill(acc, acc + m * d, T(0));
  std::fill(s.row_max.begin(), s.row_max.end(), -kInf<T>);
  std::fill(s.row_sum.begin(), s.row_sum.end(), T(0));
  for (int64_t s0 = 0; s0 < tile.num_keys; s0 += kKeyBlock) {
    const int64_t n = std::min(kKeyBlock, tile.num_keys - s0);
    const Tile<T> live = rows_seeing(p, tile, s0);
    const int64_t first = live.row0 - tile.row0;  // live rows are tile rows [first, m)
    T* probs = s.scores.data();                   // [live.rows, n]
    masked_scores(p, live, q_tile + first * d, s0, n, probs);
    for (int64_t i = 0; i < live.rows; ++i)
      online_softmax_row(probs + i * n, n, s.row_max[first + i], s.row_sum[first + i], acc + (first + i) * d, d);
    if (p.dropout > 0) apply_dropout(p, live, s0, n, probs, probs);
    gemm(false, false, live.rows, d, n, T(1), probs, n, tile.v + s0 * ld, ld, T(1), acc + first * d, d);  // acc += P·V
  }
  finish_rows(p, tile, acc, s, out, lse);
}

// dq rows of the tile, and dk/dv [S, d_h] of its (b, head) (accumulated).
template <typename T>
HEADROOM_CPU_CLONES void backward_tile(const AttentionProblem& p, const Tile<T>& tile, const T* q, const T* out,
                                       const T* lse, const T* dout, T* dq, T* dk, T* dv, Scratch<T>& s) {
  const int64_t d = p.d_h, m = tile.rows, ld = p.kv_strides[2];
  const T* q_tile = load_rows(p, tile, q, s.rows_in.data());             // [m, d]
  const T* dout_tile = load_rows(p, tile, dout, s.grad_rows_in.data());  // [m, d]
  T* dq_tile = output_rows(p, tile, dq, s.rows_out.data());              // [m, d]
  std::fill(dq_tile, dq_tile + m * d, T(0));
  T* row_dot = s.row_sum.data();  // D = rowsum(dO ∘ O)  [m]
  for (int64_t i = 0; i < m; ++i) {
    const T* out_row = out + caller_row(p, tile.row0 + i) * d;
    T acc = 0;
    for (int64_t c = 0; c < d; ++c) acc += dout_tile[i * d + c] * out_row[c];
    row_dot[i] = acc;
  }
  for (int64_t s0 = 0; s0 < tile.num_keys; s0 += kKeyBlock) {
    const int64_t n = std::min(kKeyBlock, tile.num_keys - s0);
    const Tile<T> live = rows_seeing(p, tile, s0);
    const int64_t rows = live.rows, first = live.row0 - tile.row0;  // live rows are tile rows [first, m)
    const T* q_live = q_tile + first * d;                           // [rows, d]
    const T* dout_live = dout_tile + first * d;
    T* probs = s.scores.data();        // P  [rows, n]
    T* dprobs = s.grad_scores.data();  // dP, then dS  [rows, n]
    masked_scores(p, live, q_live, s0, n, probs);
    for (int64_t i = 0; i < rows; ++i) exp_shifted(probs + i * n, n, lse[caller_row(p, live.row0 + i)]);
    gemm(false, true, rows, n, d, T(1), dout_live, d, tile.v + s0 * ld, ld, T(0), dprobs, n);  // dO·Vᵀ
    const T* kept_probs = probs;                                                               // P after dropout
    if (p.dropout > 0) {
      apply_dropout(p, live, s0, n, probs, s.dropped.data());
      apply_dropout(p, live, s0, n, dprobs, dprobs);  // the gradient of P passes the same mask
      kept_probs = s.dropped.data();
    }
    gemm(true, false, n, d, rows, T(1), kept_probs, n, dout_live, d, T(1), dv + s0 * d, d);  // dV += Pᵀ·dO
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < n; ++j)
        dprobs[i * n + j] = probs[i * n + j] * (dprobs[i * n + j] - row_dot[first + i]);  // dS
    const T scale = T(p.scale);
    // dK += dSᵀ·Q, dQ += dS·K
    gemm(true, false, n, d, rows, scale, dprobs, n, q_live, d, T(1), dk + s0 * d, d);
    gemm(false, false, rows, d, n, scale, dprobs, n, tile.k + s0 * ld, ld, T(1), dq_tile + first * d, d);
  }
  store_rows(p, tile, dq_tile, dq);
}

// Calls fn(tile) for every tile of a group.
template <typename T, typename Fn>
void for_each_tile(const AttentionProblem& p, const AttentionGroup& g, const T* k, const T* v, Fn&& fn) {
  for (int64_t row0 = g.row_begin; row0 < g.row_end; row0 += kQueryTile) fn(make_tile(p, g, row0, k, v));
}

}  // namespace

template <typename T>
void attention_forward(const AttentionProblem& p, const T* q, const T* k, const T* v, T* out, T* lse) {
  std::vector<Tile<T>> tiles;
  for (const AttentionGroup& g : p.groups)
    for_each_tile(p, g, k, v, [&](const Tile<T>& tile) { tiles.push_back(tile); });
  std::stable_sort(tiles.begin(), tiles.end(),
                   [](const Tile<T>& a, const Tile<T>& b) { return tile_cost(a) > tile_cost(b); });
  int64_t total_cost = 0;
  for (const Tile<T>& tile : tiles) total_cost += tile_cost(tile);
  BlasSingleThreadGuard blas_single_thread;
#pragma omp parallel num_threads(threads_for(p, total_cost))
  {
    Scratch<T> scratch(p);
#pragma omp for schedule(dynamic, 1)
    for (int64_t i = 0; i < int64_t(tiles.size()); ++i) forward_tile(p, tiles[i], q, out, lse, scratch);
  }
}

template <typename T>
void attention_backward(const AttentionProblem& p, const T* q, const T* k, const T* v, const T* out, const T* lse,
                        const T* dout, T* dq, T* dk, T* dv) {
  // A work item owns the dK/dV slice its groups write: one group (b, head)
  // when every head has its own K/V; every group of batch b, in group order,
  // when all heads share K/V head 0 (no per-head partials to zero and sum).
  const int64_t kv_size = p.num_keys * p.d_h;
  const bool shared_kv = p.kv_heads != p.heads;
  std::fill(dk, dk + p.batch * p.kv_heads * kv_size, T(0));
  std::fill(dv, dv + p.batch * p.kv_heads * kv_size, T(0));
  std::vector<std::vector<size_t>> items(shared_kv ? p.batch : p.groups.size());
  for (size_t gi = 0; gi < p.groups.size(); ++gi) items[shared_kv ? p.groups[gi].batch : gi].push_back(gi);

  std::vector<std::pair<int64_t, size_t>> order;  // (-cost, item): heaviest first
  int64_t total_cost = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    int64_t cost = 0;
    for (size_t gi : items[i])
      for_each_tile(p, p.groups[gi], k, v, [&](const Tile<T>& tile) { cost += tile_cost(tile); });
    order.push_back({-cost, i});
    total_cost += cost;
  }
  std::stable_sort(order.begin(), order.end());
  BlasSingleThreadGuard blas_single_thread;
#pragma omp parallel num_threads(threads_for(p, total_cost))
  {
    Scratch<T> scratch(p);
#pragma omp for schedule(dynamic, 1)
    for (int64_t i = 0; i < int64_t(order.size()); ++i)
      for (size_t gi : items[order[i].second]) {
        const AttentionGroup& g = p.groups[gi];
        const int64_t slice = (g.batch * p.kv_heads + (shared_kv ? 0 : g.head)) * kv_size;
        for_each_tile(p, g, k, v, [&](const Tile<T>& tile) {
          backward_tile(p, tile, q, out, lse, dout, dq, dk + slice, dv + slice, scratch);
        });
      }
  }
}

template void attention_forward<float>(const AttentionProblem&, const float*, const float*, const float*, float*,
                                       float*);
template void attention_forward<double>(const AttentionProblem&, const double*, const double*, const double*, double*,
                                        double*);
template void attention_backward<float>(const AttentionProblem&, const float*, const float*, const float*, const float*,
                                        const float*, const float*, float*, float*, float*);
template void attention_backward<double>(const AttentionProblem&, const double*, const double*, const double*,
                                         const double*, const double*, const double*, double*, double*, double*);

}  // namespace headroom::cpu
