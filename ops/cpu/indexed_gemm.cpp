// The indexed-row GEMMs of the routing ops (see the header).  One register
// tile: 6 result rows by 2 vector registers of columns, with b's panel of
// those columns reused by every row tile, as a BLAS micro-kernel does (except
// where the result rows are scattered: see indexed_gemm).
// indexed_gemm reads a row by row (a product's rows), indexed_gemm_tn column
// by column (a weight gradient's aᵀ), copying each of b's panels first.  At
// MoA's shapes (depth 64 or 512, ~64-256 rows per expert and tile)
// indexed_gemm beats copying the rows for OpenBLAS by 4-12%; indexed_gemm_tn,
// on W_o's weight gradient, beats BLAS by 17% (docs/performance.md).
#include "headroom/ops/cpu/indexed_gemm.h"

#include <algorithm>
#include <cstring>

#include "headroom/core/parallel.h"

namespace headroom::cpu {
namespace {

// One 256-bit vector of T (8 floats or 4 doubles) as a GCC/Clang vector type:
// AVX2 FMAs in the AVX2 and AVX-512 clones (cpu_dispatch.h), pairs of SSE operations in baseline code.
template <typename T> struct Vector;
template <> struct Vector<float> { typedef float type __attribute__((vector_size(32))); };
template <> struct Vector<double> { typedef double type __attribute__((vector_size(32))); };
template <typename T> using Vec = typename Vector<T>::type;
template <typename T> constexpr int64_t kLanes = int64_t(sizeof(Vec<T>) / sizeof(T));

// 6 rows x 2 vectors: 12 accumulators, plus b's two vectors and one broadcast
// of a, fit in the 16 vector registers of AVX2.
constexpr int64_t kTileRows = 6;
// indexed_gemm_tn's longest block of the summed dimension.
constexpr int64_t kMaxDepthBlock = 512;

template <typename T> Vec<T> load(const T* from) {
  Vec<T> v;
  std::memcpy(&v, from, sizeof v);
  return v;
}

template <typename T> void store(T* to, const Vec<T>& v) { std::memcpy(to, &v, sizeof v); }

template <typename T> const T* a_row(const IndexedRows<T>& p, int64_t i) {
  return p.a + (p.a_rows ? int64_t(p.a_rows[i]) : i) * p.lda;
}

template <typename T> T* c_row(const IndexedRows<T>& p, int64_t i) {
  return p.c + (p.c_rows ? int64_t(p.c_rows[i]) : i) * p.ldc;
}

// Whether row i adds to its c row rather than storing into it.
template <typename T> bool adds(const IndexedRows<T>& p, int64_t i) { return p.add && p.add[i]; }

// The register tile: acc[i] = Σ_kk a(i, kk) · b(kk)[0 : 2 kLanes) for the 6
// rows i, handed to finish(acc).  a(i, kk) is a scalar, b(kk) points at the
// tile's columns of b's row kk.  The first step sets the accumulators (depth
// >= 1 here): zeroing them first compiles to a memset of the array.
template <typename T, typename AAt, typename BRow, typename Finish>
inline void register_tile(int64_t depth, AAt&& a, BRow&& b, Finish&& finish) {
  constexpr int64_t lanes = kLanes<T>;
  Vec<T> acc[kTileRows][2];
  {
    const Vec<T> b0 = load(b(0)), b1 = load(b(0) + lanes);
    for (int64_t i = 0; i < kTileRows; ++i) {
      acc[i][0] = a(i, 0) * b0;
      acc[i][1] = a(i, 0) * b1;
    }
  }
  for (int64_t kk = 1; kk < depth; ++kk) {
    const Vec<T> b0 = load(b(kk)), b1 = load(b(kk) + lanes);
    for (int64_t i = 0; i < kTileRows; ++i) {
      const T s = a(i, kk);
      acc[i][0] += s * b0;
      acc[i][1] += s * b1;
    }
  }
  finish(acc);
}

// Rows [i0, i0 + count), count <= kTileRows, columns [j0, j0 + 2 kLanes).
template <typename T>
void row_tile(const IndexedRows<T>& p, int64_t i0, int64_t count, const T* b, int64_t depth, int64_t width,
              int64_t j0) {
  constexpr int64_t lanes = kLanes<T>;
  const T* a[kTileRows];  // rows past count repeat row i0: computed, never stored
  for (int64_t i = 0; i < kTileRows; ++i) a[i] = a_row(p, i0 + (i < count ? i : 0));
  register_tile<T>(
      depth, [&](int64_t i, int64_t kk) { return a[i][kk]; }, [&](int64_t kk) { return b + kk * width + j0; },
      [&](const Vec<T>(&acc)[kTileRows][2]) {
        // A loop of constant length, so that the accumulators stay in registers.
        for (int64_t i = 0; i < kTileRows; ++i) {
          if (i >= count) break;
          T* c = c_row(p, i0 + i) + j0;
          const T scale = p.scale ? p.scale[i0 + i] : T(1);
          for (int64_t half = 0; half < 2; ++half) {
            Vec<T> v = scale * acc[i][half];
            if (adds(p, i0 + i)) v += load(c + half * lanes);
            store(c + half * lanes, v);
          }
        }
      });
}

// Columns [j0, width), fewer than one tile wide: a dot product per element.
template <typename T>
void tail_columns(const IndexedRows<T>& p, int64_t rows, const T* b, int64_t depth, int64_t width, int64_t j0) {
  for (int64_t i = 0; i < rows; ++i) {
    const T* a = a_row(p, i);
    T* c = c_row(p, i);
    const T scale = p.scale ? p.scale[i] : T(1);
    for (int64_t j = j0; j < width; ++j) {
      T dot = 0;
      for (int64_t kk = 0; kk < depth; ++kk) dot += a[kk] * b[kk * width + j];
      c[j] = scale * dot + (adds(p, i) ? c[j] : T(0));
    }
  }
}

// Row kk of an operand of indexed_gemm_tn.
template <typename T> const T* depth_row(const T* x, int64_t ld, const int32_t* rows, int64_t kk) {
  return x + (rows ? int64_t(rows[kk]) : kk) * ld;
}

// The tile at rows [i0, i0 + 6) and columns [j0, j0 + 2 kLanes) of
// indexed_gemm_tn's c (rows >= 6 in all), summed over depth rows [d0, d0 +
// block), whose b columns are the rows of b_panel [block, 2 kLanes): stored
// for the first block (d0 = 0), added for later ones.  The last tile ends at
// c's last row, so it starts at `first` <= i0; its rows before i0 belong to
// the tile before and are computed again but written only by that one.
template <typename T>
void depth_tile(const DepthRows<T>& a, const T* b_panel, int64_t d0, int64_t block, int64_t rows, int64_t i0,
                int64_t j0, T* c, int64_t ldc) {
  constexpr int64_t lanes = kLanes<T>, panel = 2 * lanes;
  const int64_t first = std::min(i0, rows - kTileRows);
  register_tile<T>(
      block, [&](int64_t i, int64_t kk) { return depth_row(a.data, a.ld, a.rows, d0 + kk)[first + i]; },
      [&](int64_t kk) { return b_panel + kk * panel; },
      [&](const Vec<T>(&acc)[kTileRows][2]) {
        for (int64_t i = i0 - first; i < kTileRows; ++i)
          for (int64_t half = 0; half < 2; ++half) {
            T* to = c + (first + i) * ldc + j0 + half * lanes;
            store(to, d0 ? acc[i][half] + load(to) : acc[i][half]);
          }
      });
}

}  // namespace

template <typename T>
HEADROOM_CPU_CLONES void indexed_gemm(const IndexedRows<T>& rows_of, int64_t rows, const T* b, int64_t depth,
                                      int64_t width) {
  if (depth == 0) {  // empty sums: stored rows become 0, added rows keep their values
    for (int64_t i = 0; i < rows; ++i)
      if (!adds(rows_of, i)) std::fill(c_row(rows_of, i), c_row(rows_of, i) + width, T(0));
    return;
  }
  constexpr int64_t panel = 2 * kLanes<T>;
  const int64_t whole = width - width % panel;
  // Contiguous result rows: panel by panel, so that b's columns [j0, j0 +
  // panel) stay in L1 for all rows.  Scattered result rows (W_o's gated
  // scatter): row tile by row tile, each across all its panels, so that a c
  // row's cache lines are reached in order and the prefetcher fetches them
  // ahead; b is then read from L2.  Panel by panel, each c row would be
  // reached a line at a time, each line a miss of its own, which made MoA's
  // scatter up to 1.3x slower with cold caches (docs/performance.md).
  const int64_t columns_per_pass = rows_of.c_rows ? whole : panel;
  for (int64_t g0 = 0; g0 < whole; g0 += columns_per_pass)
    for (int64_t i0 = 0; i0 < rows; i0 += kTileRows)
      for (int64_t j0 = g0; j0 < g0 + columns_per_pass; j0 += panel)
        row_tile(rows_of, i0, std::min(kTileRows, rows - i0), b, depth, width, j0);
  if (whole < width) tail_columns(rows_of, rows, b, depth, width, whole);
}

template <typename T>
HEADROOM_CPU_CLONES void indexed_gemm_tn(const DepthRows<T>& a, const DepthRows<T>& b, int64_t depth, int64_t rows,
                                         int64_t width, T* c, int64_t ldc) {
  // Columns [j0, width) of every row, a dot product per element.
  auto scalar_columns = [&](int64_t j0) {
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = j0; j < width; ++j) {
        T dot = 0;
        for (int64_t kk = 0; kk < depth; ++kk)
          dot += depth_row(a.data, a.ld, a.rows, kk)[i] * depth_row(b.data, b.ld, b.rows, kk)[j];
        c[i * ldc + j] = dot;
      }
  };
  if (depth == 0 || rows < kTileRows) return scalar_columns(0);  // empty sums, or too few rows for a tile
  constexpr int64_t lanes = kLanes<T>, panel = 2 * lanes;
  const int64_t whole = width - width % panel;
  // Depth in equal blocks of at most kMaxDepthBlock, so that a panel of b's
  // block (at most [512, 16] in f32, 32 KiB) stays in L1 for all row tiles;
  // the first block stores, later ones add.  Unblocked, MoA's layer at
  // T = 1024 (depth ~1024 per expert) ran 5% slower; blocks of 256 made its
  // weight gradients at T = 256 (depth 254-275) 10% slower.
  const int64_t blocks = (depth + kMaxDepthBlock - 1) / kMaxDepthBlock, block_size = (depth + blocks - 1) / blocks;
  // Each panel of b's block is first copied into one contiguous [block, panel]
  // buffer: read through its indices once, then by every row tile in order.
  // Read in place, the scattered rows stay in L1 only while nothing evicts
  // them, and under cache pressure the kernel ran 1.7x slower (BLAS on the
  // same shapes: 1.0-1.15x; docs/performance.md).
  T* b_panel = thread_buffer<T>(2, block_size * panel);  // [block, panel]
  for (int64_t d0 = 0; d0 < depth; d0 += block_size) {
    const int64_t block = std::min(block_size, depth - d0);
    for (int64_t j0 = 0; j0 < whole; j0 += panel) {
      for (int64_t kk = 0; kk < block; ++kk) {
        const T* from = depth_row(b.data, b.ld, b.rows, d0 + kk) + j0;
        std::copy(from, from + panel, b_panel + kk * panel);
      }
      for (int64_t i0 = 0; i0 < rows; i0 += kTileRows) depth_tile(a, b_panel, d0, block, rows, i0, j0, c, ldc);
    }
  }
  if (whole < width) scalar_columns(whole);
}

template void indexed_gemm<float>(const IndexedRows<float>&, int64_t, const float*, int64_t, int64_t);
template void indexed_gemm<double>(const IndexedRows<double>&, int64_t, const double*, int64_t, int64_t);
template void indexed_gemm_tn<float>(const DepthRows<float>&, const DepthRows<float>&, int64_t, int64_t, int64_t,
                                     float*, int64_t);
template void indexed_gemm_tn<double>(const DepthRows<double>&, const DepthRows<double>&, int64_t, int64_t, int64_t,
                                      double*, int64_t);

}  // namespace headroom::cpu
