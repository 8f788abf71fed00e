// CUDA kernels of the routing family (see routing.h): the index check, the
// route plan (a stable counting sort built on the device), top-k, the row
// gathers and their per-destination transposes, and the tiled grouped GEMMs.
//
// Nothing here synchronises with the host.  The plan's offsets stay on the
// device; the grouped GEMMs find each thread block's segment there (a tile
// map scanned on the device, then a binary search), launching an upper bound
// of blocks of which the surplus exits at once, so the tile count never has
// to come back to the host (ScatterMoE and vLLM launch the same way).
// Every sum runs per destination in a fixed order; the only atomics are
// integer ones (histogram counts, the lowest bad position), whose results do
// not depend on the order, so every result is identical run to run.
#include <algorithm>
#include <mutex>
#include <sstream>
#include <vector>

#include "headroom/cuda/kernels.h"
#include "headroom/ops/kernels/routing.h"
#include "headroom/cuda/backend.h"

namespace headroom::cuda {

using kernels::GroupedRows;
using kernels::IndexUse;

namespace {

constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kWarp = 32;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The i-th item of a grid-stride loop over threads, or over whole warps.
__device__ int64_t thread_index() { return blockIdx.x * int64_t(blockDim.x) + threadIdx.x; }
__device__ int64_t thread_count() { return int64_t(gridDim.x) * blockDim.x; }
__device__ int64_t warp_index() { return thread_index() / kWarp; }
__device__ int64_t warp_count() { return thread_count() / kWarp; }

// ---- bad indices, reported without a host synchronisation -------------------------
//
// route() and index_select() on CUDA mostly get indices made on the device
// (topk of router logits, a plan's order), valid by construction.  Checking
// them on the host would copy them back and wait for every queued kernel on
// each call, stalling the queue that the device plan exists to keep full.
// So a kernel replaces bad indices by 0 (the kernels after it stay in bounds)
// and records the first bad one in a per-device record that only the host
// clears.  The record is copied into pinned host memory behind the check, and
// the next check on that device polls (cudaEventQuery: no waiting) whether
// the copy has landed, and throws what it found.  Valid input never waits;
// a bad index is reported by the first route() or index_select() issued on
// the device after the device has passed it.

struct IndexError {  // found == 0: no bad index since the host last cleared it
  long long found, use, value, position, limit, group;
};

struct IndexCheckState {         // on the device
  unsigned long long first_bad;  // the lowest bad position of the running check
  IndexError error;              // sticky: the first error found
};

struct IndexErrorSlot {
  IndexCheckState* device_state = nullptr;
  IndexError* host_copy = nullptr;  // pinned; written by the copy behind each check
  cudaEvent_t copied = nullptr;     // recorded after that copy
  bool pending = false;             // a copy was queued that the host has not read
};

std::string index_error_message(const IndexError& e, int device) {
  std::ostringstream os;
  if (e.use == static_cast<long long>(IndexUse::route_segment))
    os << "[route] index " << e.value << " of token " << e.position / e.group << " is outside [0, " << e.limit << ")";
  else if (e.use == static_cast<long long>(IndexUse::put_column))
    os << "[put_along_rows] index " << e.value << " at position " << e.position << " is outside [0, n = " << e.limit
       << ")";
  else
    os << "[index_select] index " << e.value << " at position " << e.position
       << " is out of range for a dimension of size " << e.limit;
  os << " (found on cuda:" << device
     << " after that call returned: on CUDA, route() and index_select() check indices on the device and report a "
        "bad one at a later call, so that valid input never waits for the device)";
  return os.str();
}

// One slot per device, created on first use; the caller holds index_error_mutex().
std::mutex& index_error_mutex() {
  static std::mutex m;
  return m;
}

IndexErrorSlot& index_error_slot(int device) {
  static std::vector<IndexErrorSlot> slots(std::max(device_count(), 1));
  IndexErrorSlot& slot = slots.at(device);
  if (!slot.device_state) {
    HEADROOM_CUDA_CHECK(cudaMalloc(&slot.device_state, sizeof(IndexCheckState)));
    // On the device's stream: a plain cudaMemset goes to the legacy default
    // stream, which does not order work on the non-blocking stream(device), so
    // the first check could read the record before it is zeroed.
    HEADROOM_CUDA_CHECK(cudaMemsetAsync(slot.device_state, 0, sizeof(IndexCheckState), stream(device)));
    HEADROOM_CUDA_CHECK(cudaHostAlloc(&slot.host_copy, sizeof(IndexError), cudaHostAllocDefault));
    *slot.host_copy = IndexError{};
    HEADROOM_CUDA_CHECK(cudaEventCreateWithFlags(&slot.copied, cudaEventDisableTiming));
  }
  return slot;
}

// Throws the error an earlier check found, once its copy has reached the host.
void throw_finished_index_error(IndexErrorSlot& slot, int device) {
  if (!slot.pending) return;
  const cudaError_t status = cudaEventQuery(slot.copied);
  if (status == cudaErrorNotReady) {
    cudaGetLastError();  // "not ready" is not an error; keep it from a later check_launch
    return;
  }
  HEADROOM_CUDA_CHECK(status);
  slot.pending = false;
  if (!slot.host_copy->found) return;
  const IndexError error = *slot.host_copy;
  *slot.host_copy = IndexError{};
  // The device record is sticky; clear it behind everything queued so far.
  HEADROOM_CUDA_CHECK(cudaMemsetAsync(&slot.device_state->error, 0, sizeof(IndexError), stream(device)));
  HEADROOM_FAIL(index_error_message(error, device));
}

// safe[i] = indices[i] if in [0, limit), else 0; first_bad = the lowest bad i.
__global__ void check_indices_kernel(const int32_t* indices, int64_t n, int64_t limit, int32_t* safe,
                                     unsigned long long* first_bad) {
  for (int64_t i = thread_index(); i < n; i += thread_count()) {
    const int32_t v = indices[i];
    const bool ok = v >= 0 && v < limit;
    safe[i] = ok ? v : 0;
    if (!ok) atomicMin(first_bad, static_cast<unsigned long long>(i));
  }
}

// One thread: keeps the first error ever found until the host clears it.
__global__ void record_index_error(const int32_t* indices, int64_t n, IndexCheckState* state, long long use,
                                   long long limit, long long group) {
  const unsigned long long bad = state->first_bad;
  if (bad >= static_cast<unsigned long long>(n) || state->error.found) return;
  state->error = IndexError{1, use, indices[bad], static_cast<long long>(bad), limit, group};
}

// ---- scans -----------------------------------------------------------------------

// Exclusive prefix sum by one block (blockDim.x a multiple of 32, at most
// 1024): store(i, sum of load(j) for j < i) for i in [0, n], so store(n, .)
// gets the total (from thread 0).  Runs of blockDim.x values at a time: a warp
// scan by shuffles, then a scan of the warp totals, plus the carry of earlier runs.
template <typename Load, typename Store> __device__ void block_exclusive_scan(int64_t n, Load load, Store store) {
  __shared__ int32_t warp_totals[kWarp];
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, warps = blockDim.x / kWarp;
  int32_t carry = 0;
  for (int64_t base = 0; base < n; base += blockDim.x) {
    const int64_t i = base + threadIdx.x;
    const int32_t value = i < n ? load(i) : 0;
    int32_t inclusive = value;  // within the warp
    for (int d = 1; d < kWarp; d *= 2) {
      const int32_t below = __shfl_up_sync(kFullMask, inclusive, d);
      if (lane >= d) inclusive += below;
    }
    if (lane == kWarp - 1) warp_totals[warp] = inclusive;
    __syncthreads();
    if (warp == 0) {
      int32_t total = lane < warps ? warp_totals[lane] : 0;
      for (int d = 1; d < kWarp; d *= 2) {
        const int32_t below = __shfl_up_sync(kFullMask, total, d);
        if (lane >= d) total += below;
      }
      if (lane < warps) warp_totals[lane] = total;  // inclusive over the warps
    }
    __syncthreads();
    const int32_t before_warp = warp > 0 ? warp_totals[warp - 1] : 0;
    if (i < n) store(i, carry + before_warp + inclusive - value);
    carry += warp_totals[warps - 1];
    __syncthreads();  // warp_totals is rewritten by the next run
  }
  if (threadIdx.x == 0) store(n, carry);
}

constexpr int kScanThreads = 1024;

// ---- the route plan: a stable counting sort -----------------------------------------
//
// The pairs are cut into chunks of consecutive pairs.  (1) hist[e * chunks + c]
// counts chunk c's pairs of segment e.  (2) One block scans hist in that
// segment-major order, so each entry becomes the first grouped row of chunk
// c's pairs of segment e, and hist[e * chunks] is offsets[e].  (3) One block
// per chunk walks its pairs in order and places each at its entry's running
// cursor: pairs of a segment keep their order p, as on the CPU.

// Pairs per chunk, at least: a block of kThreads walks ~4 tiles of its chunk.
constexpr int64_t kRouteChunk = 1024;

// Chunks for `pairs` pairs over `segments` segments.  The one-block scan reads
// segments * chunks entries, so with many segments (index_select's backward
// routes over all rows of a tensor) the chunks grow instead: at most
// max(4 * pairs, 65536) entries.
int64_t route_chunks(int64_t pairs, int64_t segments) {
  const int64_t budget = std::max<int64_t>(4 * pairs, int64_t(1) << 16);
  return std::max<int64_t>(1, std::min(ceil_div(pairs, kRouteChunk), budget / segments));
}

__global__ void route_histogram(const int32_t* chosen, int64_t pairs, int64_t chunk, int64_t chunks, int32_t* hist) {
  for (int64_t p = thread_index(); p < pairs; p += thread_count())
    atomicAdd(&hist[int64_t(chosen[p]) * chunks + p / chunk], 1);
}

// One block of kScanThreads.   hist: [segments * chunks] in place  offsets: [segments + 1]  counts: [segments]
__global__ void route_offsets(int32_t* hist, int64_t segments, int64_t chunks, int32_t* offsets, int32_t* counts) {
  block_exclusive_scan(
      segments * chunks, [&](int64_t i) { return hist[i]; },
      [&](int64_t i, int32_t first_row) {
        if (i < segments * chunks) hist[i] = first_row;
        if (i % chunks == 0) offsets[i / chunks] = first_row;
      });
  __syncthreads();  // offsets[segments] comes from thread 0
  for (int64_t e = threadIdx.x; e < segments; e += blockDim.x) counts[e] = offsets[e + 1] - offsets[e];
}

// One block of kThreads per chunk, walking it kThreads pairs at a time: a
// pair's grouped row is its segment's cursor plus the number of earlier pairs
// of the same segment in the tile; the tile's last such pair advances the cursor.
__global__ void route_scatter(const int32_t* chosen, int64_t pairs, int64_t chunk, int64_t chunks, int32_t* cursor,
                              int32_t* order, int32_t* position, int32_t* segment) {
  __shared__ int32_t tile[kThreads];
  const int64_t c = blockIdx.x, begin = c * chunk, end = begin + chunk < pairs ? begin + chunk : pairs;
  const int me = threadIdx.x;
  for (int64_t base = begin; base < end; base += blockDim.x) {
    const int64_t p = base + me;
    const int active = end - base < blockDim.x ? int(end - base) : int(blockDim.x);
    const int32_t e = p < end ? chosen[p] : -1;
    tile[me] = e;
    __syncthreads();
    int rank = 0;
    bool last = true;
    if (p < end) {
      for (int j = 0; j < active; ++j) {
        if (tile[j] != e) continue;
        if (j < me) ++rank;
        if (j > me) last = false;
      }
      const int32_t r = cursor[int64_t(e) * chunks + c] + rank;
      order[r] = int32_t(p);
      position[p] = r;
      segment[r] = e;
    }
    __syncthreads();  // every pair of the tile has read its cursor
    if (p < end && last) cursor[int64_t(e) * chunks + c] += rank + 1;
    __syncthreads();  // cursors advanced and tile[] free before the next tile
  }
}

// ---- selection -------------------------------------------------------------------

// The strict order of cpu::topk_indices: NaN first, then larger values, then lower indices.
template <typename T> __device__ bool ranks_before(T va, int32_t a, T vb, int32_t b) {
  const bool a_nan = isnan(va), b_nan = isnan(vb);
  if (a_nan != b_nan) return a_nan;
  if (!a_nan && va != vb) return va > vb;
  return a < b;
}

// One warp per row of x [rows, n], k rounds: round j picks the entry that
// ranks first among those ranking after round j-1's pick (so no set of picked
// entries is kept).  Each lane scans a strided share of the row; a butterfly
// of shuffles leaves every lane with the warp's pick.
template <typename T> __global__ void topk_kernel(const T* x, int64_t rows, int64_t n, int64_t k, int32_t* indices) {
  const int lane = threadIdx.x % kWarp;
  for (int64_t row = warp_index(); row < rows; row += warp_count()) {
    const T* v = x + row * n;
    int32_t previous = -1;
    T previous_value = 0;
    for (int64_t j = 0; j < k; ++j) {
      int32_t best = -1;
      T best_value = 0;
      for (int64_t i = lane; i < n; i += kWarp) {
        const T value = v[i];
        if (previous >= 0 && !ranks_before(previous_value, previous, value, int32_t(i))) continue;
        if (best < 0 || ranks_before(value, int32_t(i), best_value, best)) {
          best = int32_t(i);
          best_value = value;
        }
      }
      for (int offset = kWarp / 2; offset > 0; offset /= 2) {
        const int32_t other = __shfl_xor_sync(kFullMask, best, offset);
        const T other_value = __shfl_xor_sync(kFullMask, best_value, offset);
        if (other >= 0 && (best < 0 || ranks_before(other_value, other, best_value, best))) {
          best = other;
          best_value = other_value;
        }
      }
      if (lane == 0) indices[row * k + j] = best;
      previous = best;
      previous_value = best_value;
    }
  }
}

// out[row, j] = src[row, index[row, j]], one thread per element.
template <typename T>
__global__ void take_along_rows_kernel(const T* src, const int32_t* index, int64_t n, int64_t k, int64_t total,
                                       T* out) {
  for (int64_t i = thread_index(); i < total; i += thread_count()) out[i] = src[(i / k) * n + index[i]];
}

// dst[row, index[row, j]] += src[row, j]: one thread per row, j ascending, so
// repeated indices add in a fixed order and no two threads meet.
template <typename T>
__global__ void put_along_rows_kernel(const T* src, const int32_t* index, int64_t n, int64_t k, int64_t rows, T* dst) {
  for (int64_t row = thread_index(); row < rows; row += thread_count())
    for (int64_t j = 0; j < k; ++j) dst[row * n + index[row * k + j]] += src[row * k + j];
}

// ---- row moves -------------------------------------------------------------------

// out[o, r, c] = scale[pair[r]] * src[o, pair[r] / group, c]; total = outer * rows * width.
template <typename T>
__global__ void gather_rows_kernel(const T* src, int64_t src_rows, int64_t width, const int32_t* pair, int64_t group,
                                   const T* scale, int64_t rows, int64_t total, T* out) {
  for (int64_t i = thread_index(); i < total; i += thread_count()) {
    const int64_t c = i % width, r = (i / width) % rows, o = i / (width * rows);
    const int32_t p = pair[r];
    const T s = scale ? scale[p] : T(1);
    out[i] = s * src[(o * src_rows + p / group) * width + c];
  }
}

// out[o, d, c] = Σ over q in [first(d), first(d + 1)) ascending of weight[q] * src[o, row[q], c],
// first(d) = starts[d], or d * group without starts.  total = outer * dests * width.
template <typename T>
__global__ void sum_rows_kernel(const T* src, int64_t src_rows, int64_t width, const int32_t* starts, int64_t group,
                                const int32_t* row, const T* weight, int64_t dests, int64_t total, T* out) {
  for (int64_t i = thread_index(); i < total; i += thread_count()) {
    const int64_t c = i % width, d = (i / width) % dests, o = i / (width * dests);
    const int64_t first = starts ? starts[d] : d * group, end = starts ? starts[d + 1] : (d + 1) * group;
    const T* block = src + o * src_rows * width + c;
    T sum = 0;
    for (int64_t q = first; q < end; ++q) sum += (weight ? weight[q] : T(1)) * block[int64_t(row[q]) * width];
    out[i] = sum;
  }
}

// One warp per pair: out[p] = <a[a_row[p]], b[p / group]>, lanes over columns,
// then a fixed butterfly of shuffles (lane 0's sum is written).
template <typename T>
__global__ void row_dots_kernel(const T* a, const int32_t* a_row, const T* b, int64_t group, int64_t width,
                                int64_t pairs, T* out) {
  const int lane = threadIdx.x % kWarp;
  for (int64_t p = warp_index(); p < pairs; p += warp_count()) {
    const T* u = a + int64_t(a_row[p]) * width;
    const T* v = b + (p / group) * width;
    T dot = 0;
    for (int64_t c = lane; c < width; c += kWarp) dot += u[c] * v[c];
    for (int offset = kWarp / 2; offset > 0; offset /= 2) dot += __shfl_xor_sync(kFullMask, dot, offset);
    if (lane == 0) out[p] = dot;
  }
}

// ---- grouped GEMMs -----------------------------------------------------------------
//
// Classic shared-memory tiling: a block of kGemmThreads computes a
// kTile x kTile output tile, each thread a 4 x 4 grid of it (rows ty + 16 i,
// columns tx + 16 j), stepping through the reduction kStep at a time.  Each
// step loads an A tile a[kk][m] (the output tile's rows) and a B tile
// b[kk][n] (its columns) into shared memory.  Gathered rows are read through
// the plan's order as they are loaded, so no gathered copy is made.

constexpr int kTile = 64, kStep = 16, kGemmThreads = 256, kPerThread = kTile / 16;
constexpr int kTileStride = kTile + 1;  // padding: fewer bank conflicts when a tile is stored along kk

template <typename T> using StepTile = T[kStep][kTileStride];

// tile[kk][m] = element(kk, m) over the whole step tile, 4 entries per thread.
// Consecutive threads take consecutive kk (kk_fastest: the operand's memory
// runs along kk) or consecutive m, so that global reads coalesce.
template <bool kk_fastest, typename T, typename Element>
__device__ void load_step_tile(StepTile<T>& tile, Element element) {
  for (int idx = threadIdx.x; idx < kStep * kTile; idx += kGemmThreads) {
    const int kk = kk_fastest ? idx % kStep : idx / kTile;
    const int m = kk_fastest ? idx / kStep : idx % kTile;
    tile[kk][m] = element(kk, m);
  }
}

// acc[i][j] += Σ_kk a[kk][ty + 16 i] * b[kk][tx + 16 j]
template <typename T>
__device__ void multiply_step(const StepTile<T>& a, const StepTile<T>& b, T (&acc)[kPerThread][kPerThread]) {
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  for (int kk = 0; kk < kStep; ++kk) {
    T a_values[kPerThread], b_values[kPerThread];
    for (int i = 0; i < kPerThread; ++i) a_values[i] = a[kk][ty + 16 * i];
    for (int j = 0; j < kPerThread; ++j) b_values[j] = b[kk][tx + 16 * j];
    for (int i = 0; i < kPerThread; ++i)
      for (int j = 0; j < kPerThread; ++j) acc[i][j] += a_values[i] * b_values[j];
  }
}

// out[m0 + m, n0 + n] = acc for m < rows, n0 + n < cols.   out: [*, ld]
template <typename T>
__device__ void store_tile(const T (&acc)[kPerThread][kPerThread], int64_t rows, int64_t n0, int64_t cols, T* out,
                           int64_t ld) {
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  for (int i = 0; i < kPerThread; ++i)
    for (int j = 0; j < kPerThread; ++j) {
      const int64_t m = ty + 16 * i, n = n0 + tx + 16 * j;
      if (m < rows && n < cols) out[m * ld + n] = acc[i][j];
    }
}

// One block: tile_starts[e] = the first row tile of segment e, a segment of c rows
// having ceil(c / kTile) tiles; tile_starts[segments] = all tiles.
__global__ void segment_tile_starts(const int32_t* offsets, int64_t segments, int32_t* tile_starts) {
  block_exclusive_scan(
      segments, [&](int64_t e) { return (offsets[e + 1] - offsets[e] + kTile - 1) / kTile; },
      [&](int64_t e, int32_t first_tile) { tile_starts[e] = first_tile; });
}

// Block (t, col tile): row tile t of the plan, of segment e, times w[e]
// (or w[e]ᵀ).  x: rows K wide  w: [E, in, out]  out: [R, N]
//   K, N = in, out    (transpose_w: out, in)
template <typename T>
__global__ void __launch_bounds__(kGemmThreads)
    segment_matmul_kernel(GroupedRows::Raw<T> x, const T* w, const int32_t* offsets, const int32_t* tile_starts,
                          int64_t segments, int64_t in, int64_t out_features, bool transpose_w, T* out) {
  const int64_t tile = blockIdx.x;
  if (tile >= tile_starts[segments]) return;  // the grid is an upper bound on the tiles
  int64_t lo = 0, hi = segments - 1;          // e = the last segment with tile_starts[e] <= tile
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) / 2;
    if (tile_starts[mid] <= tile) lo = mid;
    else hi = mid - 1;
  }
  const int64_t e = lo, row0 = offsets[e] + (tile - tile_starts[e]) * kTile;
  const int64_t rows = offsets[e + 1] - row0 < kTile ? offsets[e + 1] - row0 : kTile;
  const int64_t depth = transpose_w ? out_features : in, cols = transpose_w ? in : out_features;
  const int64_t col0 = int64_t(blockIdx.y) * kTile;
  const T* we = w + e * in * out_features;  // [in, out]

  __shared__ StepTile<T> a, b;
  T acc[kPerThread][kPerThread] = {};
  for (int64_t k0 = 0; k0 < depth; k0 += kStep) {
    load_step_tile<true>(a,
                         [&](int kk, int m) { return m < rows && k0 + kk < depth ? x.row(row0 + m)[k0 + kk] : T(0); });
    if (transpose_w)  // b[kk][n] = w[e][col0 + n][k0 + kk]
      load_step_tile<true>(b, [&](int kk, int n) {
        return col0 + n < cols && k0 + kk < depth ? we[(col0 + n) * depth + k0 + kk] : T(0);
      });
    else  // b[kk][n] = w[e][k0 + kk][col0 + n]
      load_step_tile<false>(b, [&](int kk, int n) {
        return col0 + n < cols && k0 + kk < depth ? we[(k0 + kk) * cols + col0 + n] : T(0);
      });
    __syncthreads();
    multiply_step(a, b, acc);
    __syncthreads();
  }
  store_tile(acc, rows, col0, cols, out + row0 * cols, cols);
}

// Block (e, out tile, in tile): dw[e] = Σ over the rows r of segment e, in
// order, of x[r]ᵀ dy[r]: a [in, out] tile, zero for an empty segment.
template <typename T>
__global__ void __launch_bounds__(kGemmThreads)
    segment_weight_grad_kernel(GroupedRows::Raw<T> x, GroupedRows::Raw<T> dy, const int32_t* offsets, int64_t in,
                               int64_t out_features, T* dw) {
  const int64_t e = blockIdx.x, col0 = int64_t(blockIdx.y) * kTile, in0 = int64_t(blockIdx.z) * kTile;
  const int64_t end = offsets[e + 1];
  __shared__ StepTile<T> a, b;
  T acc[kPerThread][kPerThread] = {};
  for (int64_t r0 = offsets[e]; r0 < end; r0 += kStep) {
    load_step_tile<false>(a, [&](int kk, int m) {  // a[kk][m] = x[r0 + kk][in0 + m]
      return r0 + kk < end && in0 + m < in ? x.row(r0 + kk)[in0 + m] : T(0);
    });
    load_step_tile<false>(b, [&](int kk, int n) {  // b[kk][n] = dy[r0 + kk][col0 + n]
      return r0 + kk < end && col0 + n < out_features ? dy.row(r0 + kk)[col0 + n] : T(0);
    });
    __syncthreads();
    multiply_step(a, b, acc);
    __syncthreads();
  }
  const int64_t in_rows = in - in0 < kTile ? in - in0 : kTile;
  store_tile(acc, in_rows, col0, out_features, dw + e * in * out_features + in0 * out_features, out_features);
}

// Grid dimensions y and z are limited to 65535 blocks.
unsigned tiles_of(int64_t size, const char* op) {
  const int64_t tiles = ceil_div(size, kTile);
  HEADROOM_CHECK(tiles <= 65535, "[", op, "] CUDA kernel supports matrix widths up to ", 65535 * kTile, ", got ", size);
  return unsigned(tiles < 1 ? 1 : tiles);
}

// ---- the interface -----------------------------------------------------------------

struct CudaRoutingKernels final : kernels::RoutingKernels {
  void check_indices(const Tensor& indices, int64_t limit, IndexUse use, int64_t group, const Tensor& safe) override {
    const int device = indices.device().index;
    DeviceGuard guard(device);
    std::lock_guard<std::mutex> lock(index_error_mutex());
    IndexErrorSlot& slot = index_error_slot(device);
    throw_finished_index_error(slot, device);
    const int64_t n = indices.numel();
    if (n == 0) return;
    cudaStream_t s = stream(device);
    HEADROOM_CUDA_CHECK(cudaMemsetAsync(&slot.device_state->first_bad, 0xff, sizeof(unsigned long long), s));
    check_indices_kernel<<<capped_grid(n), kThreads, 0, s>>>(indices.data<int32_t>(), n, limit, safe.data<int32_t>(),
                                                             &slot.device_state->first_bad);
    check_launch("check_indices_kernel");
    record_index_error<<<1, 1, 0, s>>>(indices.data<int32_t>(), n, slot.device_state, static_cast<long long>(use),
                                       limit, group);
    check_launch("record_index_error");
    HEADROOM_CUDA_CHECK(
        cudaMemcpyAsync(slot.host_copy, &slot.device_state->error, sizeof(IndexError), cudaMemcpyDeviceToHost, s));
    HEADROOM_CUDA_CHECK(cudaEventRecord(slot.copied, s));
    slot.pending = true;
  }

  void route(const Tensor& chosen, int64_t segments, const Tensor& offsets, const Tensor& order, const Tensor& position,
             const Tensor& segment, const Tensor& counts) override {
    const int64_t pairs = chosen.numel();
    const int device = chosen.device().index;
    DeviceGuard guard(device);
    cudaStream_t s = stream(device);
    const int64_t chunks = route_chunks(pairs, segments);
    const int64_t chunk = std::max<int64_t>(1, ceil_div(pairs, chunks));
    Tensor hist = Tensor::zeros({segments * chunks}, DType::i32, chosen.device());  // [segments, chunks]
    route_histogram<<<capped_grid(pairs), kThreads, 0, s>>>(chosen.data<int32_t>(), pairs, chunk, chunks,
                                                            hist.data<int32_t>());
    check_launch("route_histogram");
    route_offsets<<<1, kScanThreads, 0, s>>>(hist.data<int32_t>(), segments, chunks, offsets.data<int32_t>(),
                                             counts.data<int32_t>());
    check_launch("route_offsets");
    route_scatter<<<unsigned(chunks), kThreads, 0, s>>>(chosen.data<int32_t>(), pairs, chunk, chunks,
                                                        hist.data<int32_t>(), order.data<int32_t>(),
                                                        position.data<int32_t>(), segment.data<int32_t>());
    check_launch("route_scatter");
  }

  void topk_indices(const Tensor& x, int64_t rows, int64_t n, int64_t k, const Tensor& indices) override {
    if (rows == 0) return;
    const int device = x.device().index;
    DeviceGuard guard(device);
    dispatch_floating(x.dtype(), [&](auto zero) {
      using T = decltype(zero);
      topk_kernel<T><<<capped_grid(rows * kWarp), kThreads, 0, stream(device)>>>(x.data<T>(), rows, n, k,
                                                                                 indices.data<int32_t>());
    });
    check_launch("topk_kernel");
  }

  void take_along_rows(const Tensor& src, const Tensor& index, int64_t rows, int64_t n, int64_t k,
                       const Tensor& out) override {
    // One thread per picked element.
    launch_floating(src, rows * k, "take_along_rows_kernel", [&](auto zero, unsigned grid, cudaStream_t s) {
      using T = decltype(zero);
      take_along_rows_kernel<T>
          <<<grid, kThreads, 0, s>>>(src.data<T>(), index.data<int32_t>(), n, k, rows * k, out.data<T>());
    });
  }

  void put_along_rows(const Tensor& src, const Tensor& index, int64_t rows, int64_t n, int64_t k,
                      const Tensor& dst) override {
    // One thread per row: repeated indices add in order.
    launch_floating(src, k > 0 ? rows : 0, "put_along_rows_kernel", [&](auto zero, unsigned grid, cudaStream_t s) {
      using T = decltype(zero);
      put_along_rows_kernel<T>
          <<<grid, kThreads, 0, s>>>(src.data<T>(), index.data<int32_t>(), n, k, rows, dst.data<T>());
    });
  }

  void gather_rows(const Tensor& src, int64_t outer, int64_t width, const Tensor& pair, int64_t group,
                   const Tensor& scale, const Tensor& out) override {
    const int64_t total = out.numel();
    if (total == 0) return;
    const int device = src.device().index;
    DeviceGuard guard(device);
    auto launch = [&](auto zero) {
      using T = decltype(zero);
      gather_rows_kernel<T><<<capped_grid(total), kThreads, 0, stream(device)>>>(
          src.data<T>(), src.numel() / (outer * width), width, pair.data<int32_t>(), group, data_or_null<T>(scale),
          pair.numel(), total, out.data<T>());
    };
    if (src.dtype() == DType::i32) launch(int32_t{});
    else dispatch_floating(src.dtype(), launch);
    check_launch("gather_rows_kernel");
  }

  void sum_rows(const Tensor& src, int64_t outer, int64_t width, const Tensor& starts, int64_t group, const Tensor& row,
                const Tensor& weight, int64_t dests, const Tensor& out) override {
    const int64_t total = outer * dests * width;
    if (total == 0) return;
    const int device = src.device().index;
    DeviceGuard guard(device);
    dispatch_floating(src.dtype(), [&](auto zero) {
      using T = decltype(zero);
      sum_rows_kernel<T><<<capped_grid(total), kThreads, 0, stream(device)>>>(
          src.data<T>(), src.numel() / (outer * width), width, data_or_null<int32_t>(starts), group,
          row.data<int32_t>(), data_or_null<T>(weight), dests, total, out.data<T>());
    });
    check_launch("sum_rows_kernel");
  }

  void row_dots(const Tensor& a, const Tensor& a_row, const Tensor& b, int64_t group, int64_t width,
                const Tensor& out) override {
    const int64_t pairs = a_row.numel();
    if (pairs == 0) return;
    const int device = a.device().index;
    DeviceGuard guard(device);
    dispatch_floating(a.dtype(), [&](auto zero) {
      using T = decltype(zero);
      row_dots_kernel<T><<<capped_grid(pairs * kWarp), kThreads, 0, stream(device)>>>(
          a.data<T>(), a_row.data<int32_t>(), b.data<T>(), group, width, pairs, out.data<T>());
    });
    check_launch("row_dots_kernel");
  }

  void segment_matmul(const GroupedRows& x, const Tensor& w, const Tensor& offsets, bool transpose_w,
                      const Tensor& out) override {
    const int64_t rows = out.size(0), segments = w.size(0), in = w.size(1), out_features = w.size(2);
    if (out.numel() == 0) return;
    const int device = w.device().index;
    DeviceGuard guard(device);
    cudaStream_t s = stream(device);
    Tensor tile_starts = Tensor::empty({segments + 1}, DType::i32, w.device());
    segment_tile_starts<<<1, kScanThreads, 0, s>>>(offsets.data<int32_t>(), segments, tile_starts.data<int32_t>());
    check_launch("segment_tile_starts");
    // Σ ceil(c_e / kTile) <= rows / kTile + segments: an upper bound needing no host copy of the counts.
    const dim3 grid(unsigned(ceil_div(rows, kTile) + segments),
                    tiles_of(transpose_w ? in : out_features, "segment_matmul"));
    dispatch_floating(w.dtype(), [&](auto zero) {
      using T = decltype(zero);
      segment_matmul_kernel<T><<<grid, kGemmThreads, 0, s>>>(x.raw<T>(), w.data<T>(), offsets.data<int32_t>(),
                                                             tile_starts.data<int32_t>(), segments, in, out_features,
                                                             transpose_w, out.data<T>());
    });
    check_launch("segment_matmul_kernel");
  }

  // The products go through one [R, out] buffer, summed per token in slot
  // order: determinism without atomics (vLLM's moe_sum does the same).
  void segment_matmul_scatter(const Tensor& y, const Tensor& position, int64_t k, const Tensor& offsets,
                              const Tensor& w, bool transpose_w, const Tensor& out) override {
    const int64_t width = out.size(1), tokens = out.size(0);
    Tensor products = Tensor::empty({y.size(0), width}, w.dtype(), w.device());  // [R, width]
    segment_matmul(GroupedRows{y}, w, offsets, transpose_w, products);
    sum_rows(products, 1, width, Tensor(), k, position, Tensor(), tokens, out);
  }

  void segment_matmul_weight_grad(const GroupedRows& x, const GroupedRows& dy, const Tensor& offsets,
                                  const Tensor& dw) override {
    const int64_t segments = dw.size(0), in = dw.size(1), out_features = dw.size(2);
    if (dw.numel() == 0) return;
    const int device = dw.device().index;
    DeviceGuard guard(device);
    const dim3 grid(unsigned(segments), tiles_of(out_features, "segment_matmul"), tiles_of(in, "segment_matmul"));
    dispatch_floating(dw.dtype(), [&](auto zero) {
      using T = decltype(zero);
      segment_weight_grad_kernel<T><<<grid, kGemmThreads, 0, stream(device)>>>(
          x.raw<T>(), dy.raw<T>(), offsets.data<int32_t>(), in, out_features, dw.data<T>());
    });
    check_launch("segment_weight_grad_kernel");
  }
};

}  // namespace

kernels::RoutingKernels& routing_kernels() {
  static CudaRoutingKernels kernels;
  return kernels;
}

}  // namespace headroom::cuda
