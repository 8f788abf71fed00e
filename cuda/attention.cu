// CUDA attention kernels (see attention.h; the problem, its query groups, the
// masks and the dropout draws are ops/cpu/attention.h's).
//
// Work split (lane = thread of a warp, R = kRowsPerWarp):
//   forward, dQ:  a block per query tile of one group; each warp owns R query
//                 rows; a block of 32 keys is streamed through shared memory
//                 and lane j scores key j against the warp's rows; then lane
//                 c accumulates output columns c, c + 32, ... of each row.
//   dK/dV:        a block per (key block, (b, head)); each warp owns R keys and
//                 streams the group's query rows in chunks of 32, lane i
//                 scoring row i, then lane c accumulates columns of dK and dV.
// With K/V shared by all heads (h_kv = 1), dK/dV go to per-head partial
// buffers that a last kernel sums over heads in head order: no atomics, and
// every result is the same run to run.
#include <algorithm>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "headroom/core/backend.h"
#include "headroom/core/rng.h"
#include "headroom/cuda/kernels.h"
#include "headroom/ops/kernels/attention.h"
#include "headroom/cuda/backend.h"

namespace headroom::cuda {

namespace {

using kernels::AttentionGroup;
using kernels::AttentionProblem;

constexpr int kWarp = 32;
constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kRowsPerWarp = 4;  // query rows (forward, dQ) or keys (dK/dV) of each warp
constexpr int kKeyBlock = 32;    // keys per streamed block (forward, dQ): one per lane
constexpr int kRowChunk = 32;    // query rows per streamed chunk (dK/dV): one per lane
constexpr int kMaxWarps = 8;     // per block of the tile kernels (fewer when shared memory is short)

// ---- tables built on the host from the problem's groups ---------------------

// `rows` consecutive rows of one group; keys [0, num_keys) are visible to at
// least its last (latest) row, so later key blocks are skipped.
struct QueryTile {
  int32_t row0, rows, batch, head, num_keys;
};
struct RowRange {
  int32_t begin, end;  // rows [begin, end) of q; empty when (b, head) has no group
};

// The small per-call tables, in one device buffer.
struct GroupTables {
  Tensor storage;                       // i32 on the device, holding the three below
  const int32_t* positions = nullptr;   // [R]: query position of each row
  const QueryTile* tiles = nullptr;     // [num_tiles], heaviest first
  const RowRange* pair_rows = nullptr;  // [B*h]: the rows of group (b, head)
  int num_tiles = 0;
};

int64_t causal_extent(const AttentionProblem& p, int64_t pos) {
  if (!p.causal) return p.num_keys;
  return std::clamp<int64_t>(pos + p.causal_offset + 1, 0, p.num_keys);
}

// Cuts every group into tiles of `tile_rows` rows and copies positions, tiles
// and the (b, head) → rows map to the device in one copy (a host-to-device
// copy waits for the stream; the tables come from the plan on the host).
GroupTables upload_tables(const AttentionProblem& p, int tile_rows, Device device) {
  const int64_t rows = int64_t(p.positions.size());
  constexpr int64_t kLimit = int64_t(1) << 31;  // rows and keys are int32 in the tables
  HEADROOM_CHECK(rows < kLimit && p.num_keys < kLimit,
                 "[attention] CUDA kernels take fewer than 2^31 query rows and keys, got ", rows, " rows and ",
                 p.num_keys, " keys");
  HEADROOM_CHECK(p.row_heads.empty() && !p.row_of,
                 "[attention] CUDA kernels take one head per query group, "
                 "rows in the caller's order");
  std::vector<QueryTile> tiles;
  std::vector<RowRange> pair_rows(p.batch * p.heads, RowRange{0, 0});
  for (const AttentionGroup& g : p.groups) {
    RowRange& range = pair_rows[g.batch * p.heads + g.head];
    HEADROOM_CHECK(range.begin == range.end, "[attention] two query groups for (batch ", g.batch, ", head ", g.head,
                   ")");
    range = {int32_t(g.row_begin), int32_t(g.row_end)};
    for (int64_t row0 = g.row_begin; row0 < g.row_end; row0 += tile_rows) {
      const int64_t n = std::min<int64_t>(tile_rows, g.row_end - row0);
      tiles.push_back({int32_t(row0), int32_t(n), int32_t(g.batch), int32_t(g.head),
                       int32_t(causal_extent(p, p.positions[row0 + n - 1]))});
    }
  }
  auto cost = [](const QueryTile& t) { return int64_t(t.rows) * std::max(t.num_keys, 1); };
  std::stable_sort(tiles.begin(), tiles.end(),
                   [&](const QueryTile& a, const QueryTile& b) { return cost(a) > cost(b); });

  static_assert(sizeof(QueryTile) == 5 * sizeof(int32_t) && sizeof(RowRange) == 2 * sizeof(int32_t));
  const size_t tile_ints = tiles.size() * 5, range_ints = pair_rows.size() * 2;
  std::vector<int32_t> host(size_t(rows) + tile_ints + range_ints);
  std::copy(p.positions.begin(), p.positions.end(), host.begin());
  std::memcpy(host.data() + rows, tiles.data(), tile_ints * sizeof(int32_t));
  std::memcpy(host.data() + rows + tile_ints, pair_rows.data(), range_ints * sizeof(int32_t));

  GroupTables t;
  t.storage = Tensor::empty({int64_t(host.size())}, DType::i32, device);
  backend(device).copy_from_host(t.storage.raw_data(), host.data(), host.size() * sizeof(int32_t), device.index);
  const int32_t* base = t.storage.data<int32_t>();
  t.positions = base;
  t.tiles = reinterpret_cast<const QueryTile*>(base + rows);
  t.pair_rows = reinterpret_cast<const RowRange*>(base + rows + tile_ints);
  t.num_tiles = int(tiles.size());
  return t;
}

// ---- what every kernel reads ------------------------------------------------

// Row stride of shared rows that each lane reads whole: odd, so the 32 lanes
// of a warp reading column c of 32 rows hit 32 different banks.
int64_t padded_stride(int64_t d) { return d % 2 == 0 ? d + 1 : d; }

template <typename T> struct Params {
  int d = 0, heads = 0, kv_heads = 0, seq_len = 0, num_keys = 0;
  int padded = 0;  // padded_stride(d)
  T scale = 1;
  bool causal = false;
  int64_t causal_offset = 0;
  const uint8_t* key_padding = nullptr;  // [B, S] on the device, or null
  double dropout = 0;
  T kept_scale = 1;  // 1 / (1 - dropout)
  Generator generator{0};
  uint64_t dropout_first = 0;
  const int32_t* positions = nullptr;  // [R]
  int64_t kv_strides[3] = {0, 0, 0};   // K and V element (b, head, s, c) at b·[0] + head·[1] + s·[2] + c
};

template <typename T> Params<T> make_params(const AttentionProblem& p, const GroupTables& tables) {
  Params<T> k;
  k.d = int(p.d_h);
  k.heads = int(p.heads);
  k.kv_heads = int(p.kv_heads);
  k.seq_len = int(p.seq_len);
  k.num_keys = int(p.num_keys);
  k.padded = int(padded_stride(p.d_h));
  k.scale = T(p.scale);
  k.causal = p.causal;
  k.causal_offset = p.causal_offset;
  k.key_padding = p.key_padding;
  k.dropout = p.dropout;
  k.kept_scale = T(1 / (1 - p.dropout));
  k.generator = Generator(p.dropout_seed);
  k.dropout_first = p.dropout_first;
  k.positions = tables.positions;
  for (int i = 0; i < 3; ++i) k.kv_strides[i] = p.kv_strides[i];
  return k;
}

template <typename T> __device__ constexpr T infinity() { return std::numeric_limits<T>::infinity(); }
__device__ inline float exp_of(float x) { return expf(x); }
__device__ inline double exp_of(double x) { return exp(x); }
__device__ inline float log_of(float x) { return logf(x); }
__device__ inline double log_of(double x) { return log(x); }

template <typename T> __device__ T larger(T a, T b) { return b > a ? b : a; }
template <typename T> __device__ T warp_max(T x) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) x = larger(x, __shfl_xor_sync(kFullMask, x, offset));
  return x;
}
// A butterfly: every lane ends with the same sum, in a fixed order.
template <typename T> __device__ T warp_sum(T x) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) x += __shfl_xor_sync(kFullMask, x, offset);
  return x;
}

// Offset of the K/V sequence that (b, head) reads, in [B, h_kv, S, d_h] laid
// out as p.kv_strides says (a KV cache's valid prefix is read in place).
template <typename T> __device__ int64_t kv_offset(const Params<T>& p, int64_t batch, int64_t head) {
  return batch * p.kv_strides[0] + (p.kv_heads == 1 ? 0 : head) * p.kv_strides[1];
}

// Whether query position `pos` of batch b sees key s (causal limit, padding).
template <typename T> __device__ bool visible(const Params<T>& p, int64_t batch, int64_t pos, int64_t key) {
  if (p.causal && key > pos + p.causal_offset) return false;
  return !(p.key_padding && p.key_padding[batch * p.num_keys + key]);
}

// Whether dropout keeps element (b, head, t, s): draw
// first + ((b*h + head)*T + t)*S + s compared as on the CPU (cpu::dropout_apply).
template <typename T> __device__ bool kept(const Params<T>& p, int64_t batch, int64_t head, int64_t pos, int64_t key) {
  const uint64_t draw = p.dropout_first + uint64_t(((batch * p.heads + head) * p.seq_len + pos) * p.num_keys + key);
  return p.generator.uniform_at(draw) >= p.dropout;
}

// Block-wide: dst[i*stride + c] = src[i*src_stride + c] for i < rows, 0 for
// rows [rows, capacity), c < d.  Callers synchronise.
template <typename T>
__device__ void load_rows(const T* src, int64_t src_stride, int rows, int capacity, int d, T* dst, int stride) {
  for (int idx = threadIdx.x; idx < capacity * d; idx += blockDim.x) {
    const int i = idx / d, c = idx % d;
    dst[i * stride + c] = i < rows ? src[int64_t(i) * src_stride + c] : T(0);
  }
}

// Shared memory of the kernels, from one raw buffer (16-byte aligned).
extern __shared__ __align__(16) unsigned char shared_raw[];
template <typename T> __device__ T* shared_buffer() { return reinterpret_cast<T*>(shared_raw); }

// One query row per (warp, r) of a tile: its index in the tile and position.
struct TileRows {
  int local[kRowsPerWarp];
  bool active[kRowsPerWarp];
  int64_t pos[kRowsPerWarp];
};

template <typename T> __device__ TileRows tile_rows(const Params<T>& p, const QueryTile& tile, int warp) {
  TileRows rows;
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    rows.local[r] = warp * kRowsPerWarp + r;
    rows.active[r] = rows.local[r] < tile.rows;
    rows.pos[r] = rows.active[r] ? p.positions[tile.row0 + rows.local[r]] : 0;
  }
  return rows;
}

// dots[r] = lane_row · warp_rows[r] for the warp's kRowsPerWarp rows
// (lane_row [d] and warp_rows [kRowsPerWarp, d] in shared memory).
template <typename T> __device__ void row_dots(const T* lane_row, const T* warp_rows, int d, T (&dots)[kRowsPerWarp]) {
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) dots[r] = 0;
  for (int c = 0; c < d; ++c) {
    const T x = lane_row[c];
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) dots[r] += x * warp_rows[r * d + c];
  }
}

// acc[r] += Σ_{j < n} w_j[r] · block[j, :], where w_j is lane j's weight[r]
// and block [n, d] sits in shared memory with row stride `stride`: lane c
// accumulates columns c, c + 32, ... of each of the warp's rows.
template <typename T, int kCols>
__device__ void accumulate_rows(T (&acc)[kRowsPerWarp][kCols], const T (&weight)[kRowsPerWarp], const T* block, int n,
                                int stride, int d) {
  const int lane = threadIdx.x % kWarp;
  for (int j = 0; j < n; ++j) {
    T cols[kCols];  // block[j, lane + 32 i]
#pragma unroll
    for (int i = 0; i < kCols; ++i) {
      const int c = lane + i * kWarp;
      cols[i] = c < d ? block[j * stride + c] : T(0);
    }
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      const T w = __shfl_sync(kFullMask, weight[r], j);
#pragma unroll
      for (int i = 0; i < kCols; ++i) acc[r][i] += w * cols[i];
    }
  }
}

// dst[c] = factor · acc (the columns this lane holds) for c < d.
template <typename T, int kCols> __device__ void store_row(const T (&acc)[kCols], T factor, T* dst, int d) {
  const int lane = threadIdx.x % kWarp;
#pragma unroll
  for (int i = 0; i < kCols; ++i) {
    const int c = lane + i * kWarp;
    if (c < d) dst[c] = factor * acc[i];
  }
}

// ---- forward ------------------------------------------------------------------

// out [R, d], lse [R]: one block per tile, warps × kRowsPerWarp rows.
// Shared: q_tile [rows, d] | k_block [32, padded] | v_block [32, d].
template <typename T, int kCols>
__global__ void __launch_bounds__(kMaxWarps* kWarp)
    forward_kernel(Params<T> p, const QueryTile* tiles, const T* q, const T* k, const T* v, T* out, T* lse) {
  const int d = p.d, warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int tile_capacity = (blockDim.x / kWarp) * kRowsPerWarp;
  const QueryTile tile = tiles[blockIdx.x];
  T* q_tile = shared_buffer<T>();
  T* k_block = q_tile + tile_capacity * d;
  T* v_block = k_block + kKeyBlock * p.padded;
  load_rows(q + int64_t(tile.row0) * d, d, tile.rows, tile_capacity, d, q_tile, d);
  const T* k_seq = k + kv_offset(p, tile.batch, tile.head);
  const T* v_seq = v + kv_offset(p, tile.batch, tile.head);
  const TileRows rows = tile_rows(p, tile, warp);
  const T* q_rows = q_tile + warp * kRowsPerWarp * d;  // this warp's rows [kRowsPerWarp, d]

  T row_max[kRowsPerWarp], row_sum[kRowsPerWarp], acc[kRowsPerWarp][kCols];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    row_max[r] = -infinity<T>();
    row_sum[r] = 0;
#pragma unroll
    for (int i = 0; i < kCols; ++i) acc[r][i] = 0;
  }

  for (int s0 = 0; s0 < tile.num_keys; s0 += kKeyBlock) {
    const int n = min(kKeyBlock, tile.num_keys - s0), key = s0 + lane;
    __syncthreads();  // the previous block is consumed (and q_tile is loaded)
    load_rows(k_seq + int64_t(s0) * p.kv_strides[2], p.kv_strides[2], n, kKeyBlock, d, k_block, p.padded);
    load_rows(v_seq + int64_t(s0) * p.kv_strides[2], p.kv_strides[2], n, kKeyBlock, d, v_block, d);
    __syncthreads();

    // Lane j: scores of key s0 + j against the warp's rows.
    T score[kRowsPerWarp] = {};
    if (lane < n) row_dots(k_block + lane * p.padded, q_rows, d, score);

    // Online softmax per row: prob = exp(score - running max), the running
    // sum and the accumulator rescaled to the new max (cpu online_softmax_row).
    T prob[kRowsPerWarp];
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      const bool seen = rows.active[r] && lane < n && visible(p, tile.batch, rows.pos[r], key);
      const T s = seen ? score[r] * p.scale : -infinity<T>();
      const T new_max = larger(row_max[r], warp_max(s));
      prob[r] = 0;
      if (new_max == -infinity<T>()) continue;  // nothing visible yet (the same on every lane)
      prob[r] = exp_of(s - new_max);
      const T rescale = row_max[r] == -infinity<T>() ? T(0) : exp_of(row_max[r] - new_max);
      row_sum[r] = row_sum[r] * rescale + warp_sum(prob[r]);
      row_max[r] = new_max;
#pragma unroll
      for (int i = 0; i < kCols; ++i) acc[r][i] *= rescale;
      if (p.dropout > 0 && seen)
        prob[r] = kept(p, tile.batch, tile.head, rows.pos[r], key) ? prob[r] * p.kept_scale : T(0);
    }

    accumulate_rows(acc, prob, v_block, n, d, d);  // acc += P · V_block
  }

  // Normalise; a row that saw no key gets output 0 and lse +inf.
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    if (!rows.active[r]) continue;
    const int64_t row = tile.row0 + rows.local[r];
    store_row(acc[r], row_sum[r] > 0 ? T(1) / row_sum[r] : T(0), out + row * d, d);
    if (lane == 0) lse[row] = row_sum[r] > 0 ? row_max[r] + log_of(row_sum[r]) : infinity<T>();
  }
}

// ---- backward -----------------------------------------------------------------

// D[r] = Σ_c dout[r, c] · out[r, c]: one warp per row.
template <typename T> __global__ void row_dot_kernel(const T* dout, const T* out, T* row_dot, int64_t rows, int d) {
  const int64_t row = blockIdx.x * int64_t(blockDim.x / kWarp) + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (row >= rows) return;  // the whole warp
  T acc = 0;
  for (int c = lane; c < d; c += kWarp) acc += dout[row * d + c] * out[row * d + c];
  acc = warp_sum(acc);
  if (lane == 0) row_dot[row] = acc;
}

// dq [R, d]: one block per tile; dS = P ∘ (dP - D), dQ = scale · dS · K.
// Shared: q_tile, dout_tile [rows, d] | k_block, v_block [32, padded].
template <typename T, int kCols>
__global__ void __launch_bounds__(kMaxWarps* kWarp)
    dq_kernel(Params<T> p, const QueryTile* tiles, const T* q, const T* k, const T* v, const T* lse, const T* dout,
              const T* row_dot, T* dq) {
  const int d = p.d, warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int tile_capacity = (blockDim.x / kWarp) * kRowsPerWarp;
  const QueryTile tile = tiles[blockIdx.x];
  T* q_tile = shared_buffer<T>();
  T* dout_tile = q_tile + tile_capacity * d;
  T* k_block = dout_tile + tile_capacity * d;
  T* v_block = k_block + kKeyBlock * p.padded;
  load_rows(q + int64_t(tile.row0) * d, d, tile.rows, tile_capacity, d, q_tile, d);
  load_rows(dout + int64_t(tile.row0) * d, d, tile.rows, tile_capacity, d, dout_tile, d);
  const T* k_seq = k + kv_offset(p, tile.batch, tile.head);
  const T* v_seq = v + kv_offset(p, tile.batch, tile.head);
  const TileRows rows = tile_rows(p, tile, warp);
  const T* q_rows = q_tile + warp * kRowsPerWarp * d;
  const T* dout_rows = dout_tile + warp * kRowsPerWarp * d;

  T row_lse[kRowsPerWarp], row_d[kRowsPerWarp], acc[kRowsPerWarp][kCols];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int64_t row = tile.row0 + rows.local[r];
    row_lse[r] = rows.active[r] ? lse[row] : infinity<T>();
    row_d[r] = rows.active[r] ? row_dot[row] : T(0);
#pragma unroll
    for (int i = 0; i < kCols; ++i) acc[r][i] = 0;
  }

  for (int s0 = 0; s0 < tile.num_keys; s0 += kKeyBlock) {
    const int n = min(kKeyBlock, tile.num_keys - s0), key = s0 + lane;
    __syncthreads();
    load_rows(k_seq + int64_t(s0) * p.kv_strides[2], p.kv_strides[2], n, kKeyBlock, d, k_block, p.padded);
    load_rows(v_seq + int64_t(s0) * p.kv_strides[2], p.kv_strides[2], n, kKeyBlock, d, v_block, p.padded);
    __syncthreads();

    // Lane j: score q·k_j and dP = dout·v_j for the warp's rows.
    T score[kRowsPerWarp] = {}, dprob[kRowsPerWarp] = {};
    if (lane < n) {
      row_dots(k_block + lane * p.padded, q_rows, d, score);
      row_dots(v_block + lane * p.padded, dout_rows, d, dprob);
    }
    T dscore[kRowsPerWarp];
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      dscore[r] = 0;
      if (!(rows.active[r] && lane < n && visible(p, tile.batch, rows.pos[r], key))) continue;
      const T prob = exp_of(score[r] * p.scale - row_lse[r]);
      T dp = dprob[r];  // the gradient of P passes the forward's dropout mask
      if (p.dropout > 0) dp = kept(p, tile.batch, tile.head, rows.pos[r], key) ? dp * p.kept_scale : T(0);
      dscore[r] = prob * (dp - row_d[r]);
    }

    accumulate_rows(acc, dscore, k_block, n, p.padded, d);  // acc += dS · K_block
  }

#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r)
    if (rows.active[r]) store_row(acc[r], p.scale, dq + (tile.row0 + rows.local[r]) * int64_t(d), d);
}

// First row of [begin, end) whose position sees a key >= s0 (rows are sorted
// by position, so the causal rows before it see nothing of keys s0...).
template <typename T> __device__ int first_row_seeing(const Params<T>& p, int begin, int end, int64_t s0) {
  if (!p.causal) return begin;
  while (begin < end) {
    const int mid = begin + (end - begin) / 2;
    if (p.positions[mid] + p.causal_offset < s0) begin = mid + 1;
    else end = mid;
  }
  return begin;
}

// dk, dv of (b, head) for keys [s0, s0 + warps·kRowsPerWarp): one block per
// (key block, pair); writes slice `pair` of dk_out/dv_out [B*h, S, d] (the
// gradients themselves when h_kv = h, per-head partials when h_kv = 1).
// Shared: k_rows, v_rows [keys, d] | q_chunk, dout_chunk [32, padded] |
// lse, D [32] | positions [32].
template <typename T, int kCols>
__global__ void __launch_bounds__(kMaxWarps* kWarp)
    dkdv_kernel(Params<T> p, const RowRange* pair_rows, int pairs, const T* q, const T* k, const T* v, const T* lse,
                const T* dout, const T* row_dot, T* dk_out, T* dv_out) {
  const int d = p.d, warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int block_keys = (blockDim.x / kWarp) * kRowsPerWarp;
  const int pair = blockIdx.x % pairs, s0 = (blockIdx.x / pairs) * block_keys;  // key-block major: heavy first
  const int batch = pair / p.heads, head = pair % p.heads;
  const RowRange group = pair_rows[pair];
  T* k_rows = shared_buffer<T>();
  T* v_rows = k_rows + block_keys * d;
  T* q_chunk = v_rows + block_keys * d;
  T* dout_chunk = q_chunk + kRowChunk * p.padded;
  T* chunk_lse = dout_chunk + kRowChunk * p.padded;
  T* chunk_d = chunk_lse + kRowChunk;
  int32_t* chunk_pos = reinterpret_cast<int32_t*>(chunk_d + kRowChunk);
  const int n = min(block_keys, p.num_keys - s0);
  load_rows(k + kv_offset(p, batch, head) + int64_t(s0) * p.kv_strides[2], p.kv_strides[2], n, block_keys, d, k_rows,
            d);
  load_rows(v + kv_offset(p, batch, head) + int64_t(s0) * p.kv_strides[2], p.kv_strides[2], n, block_keys, d, v_rows,
            d);

  int64_t key[kRowsPerWarp];
  T acc_k[kRowsPerWarp][kCols], acc_v[kRowsPerWarp][kCols];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    key[r] = s0 + warp * kRowsPerWarp + r;
#pragma unroll
    for (int i = 0; i < kCols; ++i) acc_k[r][i] = acc_v[r][i] = 0;
  }
  const T* k_warp = k_rows + warp * kRowsPerWarp * d;  // this warp's keys [kRowsPerWarp, d]
  const T* v_warp = v_rows + warp * kRowsPerWarp * d;

  for (int c0 = first_row_seeing(p, group.begin, group.end, s0); c0 < group.end; c0 += kRowChunk) {
    const int m = min(kRowChunk, group.end - c0);
    __syncthreads();  // the previous chunk is consumed (and k_rows, v_rows are loaded)
    load_rows(q + int64_t(c0) * d, d, m, kRowChunk, d, q_chunk, p.padded);
    load_rows(dout + int64_t(c0) * d, d, m, kRowChunk, d, dout_chunk, p.padded);
    if (threadIdx.x < m) {
      chunk_lse[threadIdx.x] = lse[c0 + threadIdx.x];
      chunk_d[threadIdx.x] = row_dot[c0 + threadIdx.x];
      chunk_pos[threadIdx.x] = p.positions[c0 + threadIdx.x];
    }
    __syncthreads();

    // Lane i: score q_i·k and dP = dout_i·v for the warp's keys.
    T score[kRowsPerWarp] = {}, dprob[kRowsPerWarp] = {};
    if (lane < m) {
      row_dots(q_chunk + lane * p.padded, k_warp, d, score);
      row_dots(dout_chunk + lane * p.padded, v_warp, d, dprob);
    }
    T kept_prob[kRowsPerWarp], dscore[kRowsPerWarp];  // P after dropout, and dS
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      kept_prob[r] = dscore[r] = 0;
      if (!(lane < m && key[r] < p.num_keys && visible(p, batch, chunk_pos[lane], key[r]))) continue;
      const T prob = exp_of(score[r] * p.scale - chunk_lse[lane]);
      T dp = dprob[r];
      kept_prob[r] = prob;
      if (p.dropout > 0) {  // P and its gradient pass the forward's mask
        const bool keep = kept(p, batch, head, chunk_pos[lane], key[r]);
        kept_prob[r] = keep ? prob * p.kept_scale : T(0);
        dp = keep ? dp * p.kept_scale : T(0);
      }
      dscore[r] = prob * (dp - chunk_d[lane]);
    }

    accumulate_rows(acc_v, kept_prob, dout_chunk, m, p.padded, d);  // dV += P_keptᵀ · dout
    accumulate_rows(acc_k, dscore, q_chunk, m, p.padded, d);        // dK += dSᵀ · Q
  }

  const int64_t slice = int64_t(pair) * p.num_keys * d;
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    if (key[r] >= p.num_keys) continue;
    store_row(acc_k[r], p.scale, dk_out + slice + key[r] * d, d);
    store_row(acc_v[r], T(1), dv_out + slice + key[r] * d, d);
  }
}

// dk[b, 0] = Σ_head partial_k[b, head] in head order (same for dv): the
// shared K/V head's gradient.  partial [B, h, S·d] → dk, dv [B, 1, S·d].
template <typename T>
__global__ void sum_heads_kernel(const T* partial_k, const T* partial_v, T* dk, T* dv, int64_t batch, int heads,
                                 int64_t slice) {
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < batch * slice;
       idx += int64_t(gridDim.x) * blockDim.x) {
    const int64_t b = idx / slice, e = idx % slice;
    T sum_k = 0, sum_v = 0;
    for (int head = 0; head < heads; ++head) {
      sum_k += partial_k[(b * heads + head) * slice + e];
      sum_v += partial_v[(b * heads + head) * slice + e];
    }
    dk[idx] = sum_k;
    dv[idx] = sum_v;
  }
}

// ---- launches -------------------------------------------------------------------

// Calls fn(std::integral_constant<int, kCols>) with the columns each lane
// holds per row: d_h up to 32, 64, 128 or 256.
template <typename Fn> void with_columns(int64_t d, Fn&& fn) {
  if (d <= 32) fn(std::integral_constant<int, 1>{});
  else if (d <= 64) fn(std::integral_constant<int, 2>{});
  else if (d <= 128) fn(std::integral_constant<int, 4>{});
  else fn(std::integral_constant<int, 8>{});
}

// The most warps per block (kMaxWarps, halved down to 1) whose shared memory fits the device;
// bytes_for(warps) is the kernel's need.
template <typename Bytes> int warps_that_fit(Bytes&& bytes_for, int device, int64_t d) {
  int limit = 0;
  HEADROOM_CUDA_CHECK(cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  for (int warps = kMaxWarps; warps >= 1; warps /= 2)
    if (bytes_for(warps) <= size_t(limit)) return warps;
  HEADROOM_FAIL("[attention] d_h = ", d, " needs ", bytes_for(1), " bytes of shared memory per block; device ", device,
                " has ", limit);
}

template <typename Kernel, typename... Args>
void launch(Kernel kernel, const char* name, unsigned blocks, int warps, size_t shared_bytes, int device,
            Args... args) {
  HEADROOM_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(shared_bytes)));
  kernel<<<blocks, warps * kWarp, shared_bytes, stream(device)>>>(args...);
  check_launch(name);
}

template <typename T, int kCols>
void run_forward(const AttentionProblem& p, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                 const Tensor& lse) {
  const Device device = q.device();
  const int64_t d = p.d_h, padded = padded_stride(d);
  auto bytes = [&](int warps) { return size_t(warps * kRowsPerWarp * d + kKeyBlock * (padded + d)) * sizeof(T); };
  const int warps = warps_that_fit(bytes, device.index, d);
  GroupTables tables = upload_tables(p, warps * kRowsPerWarp, device);
  if (tables.num_tiles == 0) return;
  launch(forward_kernel<T, kCols>, "attention forward_kernel", unsigned(tables.num_tiles), warps, bytes(warps),
         device.index, make_params<T>(p, tables), tables.tiles, q.data<T>(), k.data<T>(), v.data<T>(), out.data<T>(),
         lse.data<T>());
}

template <typename T, int kCols>
void run_backward(const AttentionProblem& p, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                  const Tensor& lse, const Tensor& dout, const Tensor& dq, const Tensor& dk, const Tensor& dv) {
  const Device device = q.device();
  const int64_t d = p.d_h, padded = padded_stride(d), rows = q.size(0);
  auto dq_bytes = [&](int warps) { return size_t(2 * warps * kRowsPerWarp * d + 2 * kKeyBlock * padded) * sizeof(T); };
  auto dkdv_bytes = [&](int warps) {
    return size_t(2 * warps * kRowsPerWarp * d + 2 * kRowChunk * padded + 2 * kRowChunk) * sizeof(T) +
           kRowChunk * sizeof(int32_t);
  };
  const int dq_warps = warps_that_fit(dq_bytes, device.index, d);
  const int dkdv_warps = warps_that_fit(dkdv_bytes, device.index, d);
  GroupTables tables = upload_tables(p, dq_warps * kRowsPerWarp, device);
  Params<T> params = make_params<T>(p, tables);

  Tensor row_dot = Tensor::empty({rows}, q.dtype(), device);  // D = rowsum(dout ∘ out)  [R]
  if (rows > 0) {
    const int warps_per_block = kThreads / kWarp;
    row_dot_kernel<T><<<grid_for(rows, warps_per_block), kThreads, 0, stream(device.index)>>>(
        dout.data<T>(), out.data<T>(), row_dot.data<T>(), rows, int(d));
    check_launch("attention row_dot_kernel");
  }
  if (tables.num_tiles > 0)
    launch(dq_kernel<T, kCols>, "attention dq_kernel", unsigned(tables.num_tiles), dq_warps, dq_bytes(dq_warps),
           device.index, params, tables.tiles, q.data<T>(), k.data<T>(), v.data<T>(), lse.data<T>(), dout.data<T>(),
           row_dot.data<T>(), dq.data<T>());

  // dK/dV over every (b, head) pair, also those without query rows (they write 0).
  const int64_t pairs = p.batch * p.heads, block_keys = dkdv_warps * kRowsPerWarp;
  const int64_t key_blocks = (p.num_keys + block_keys - 1) / block_keys;
  if (pairs * key_blocks == 0) return;
  HEADROOM_CHECK(pairs * key_blocks < (int64_t(1) << 31),
                 "[attention] too many (key block, head) pairs: ", pairs * key_blocks);
  const bool shared_kv = p.kv_heads != p.heads;
  Tensor partial_k, partial_v;  // [B, h, S, d]: per-head gradients of the shared K/V head
  if (shared_kv) {
    partial_k = Tensor::empty({p.batch, p.heads, p.num_keys, d}, q.dtype(), device);
    partial_v = Tensor::empty({p.batch, p.heads, p.num_keys, d}, q.dtype(), device);
  }
  const Tensor& dk_out = shared_kv ? partial_k : dk;
  const Tensor& dv_out = shared_kv ? partial_v : dv;
  launch(dkdv_kernel<T, kCols>, "attention dkdv_kernel", unsigned(pairs * key_blocks), dkdv_warps,
         dkdv_bytes(dkdv_warps), device.index, params, tables.pair_rows, int(pairs), q.data<T>(), k.data<T>(),
         v.data<T>(), lse.data<T>(), dout.data<T>(), row_dot.data<T>(), dk_out.data<T>(), dv_out.data<T>());
  if (shared_kv) {
    const int64_t slice = p.num_keys * d;
    sum_heads_kernel<T><<<capped_grid(p.batch * slice), kThreads, 0, stream(device.index)>>>(
        partial_k.data<T>(), partial_v.data<T>(), dk.data<T>(), dv.data<T>(), p.batch, int(p.heads), slice);
    check_launch("attention sum_heads_kernel");
  }
}

struct CudaAttentionKernels final : kernels::AttentionKernels {
  int64_t max_head_dim() const override { return 256; }  // with_columns' largest width
  void forward(const AttentionProblem& p, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
               const Tensor& lse) override {
    DeviceGuard guard(q.device().index);
    dispatch_floating(q.dtype(), [&](auto zero) {
      using T = decltype(zero);
      with_columns(p.d_h, [&](auto cols) { run_forward<T, decltype(cols)::value>(p, q, k, v, out, lse); });
    });
  }

  void backward(const AttentionProblem& p, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                const Tensor& lse, const Tensor& dout, const Tensor& dq, const Tensor& dk, const Tensor& dv) override {
    DeviceGuard guard(q.device().index);
    dispatch_floating(q.dtype(), [&](auto zero) {
      using T = decltype(zero);
      with_columns(p.d_h,
                   [&](auto cols) { run_backward<T, decltype(cols)::value>(p, q, k, v, out, lse, dout, dq, dk, dv); });
    });
  }
};

}  // namespace

kernels::AttentionKernels& attention_kernels() {
  static CudaAttentionKernels kernels;
  return kernels;
}

}  // namespace headroom::cuda
