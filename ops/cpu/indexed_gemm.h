#pragma once
// A small GEMM whose operand rows are read, and whose result rows are written,
// through indices: the shape of a routed projection.  BLAS needs contiguous
// rows, so with it a routed layer first copies its token rows into a tile, and
// the scatter after W_o writes every product to a buffer and sums the k
// products of each token in a second pass.  This kernel reads and writes the
// token rows in place, scales each result row by its gate and adds it to what
// its token row holds.  Single-threaded: the routing ops call it per tile from
// their own parallel loops.
#include <cstdint>

namespace headroom::cpu {

// The rows of one product (row i of the product, 0 <= i < rows):
//   c[c_row(i)]  =  scale[i] · a[a_row(i)] · b           (add null, or add[i] == 0)
//   c[c_row(i)] +=  scale[i] · a[a_row(i)] · b           (add[i] != 0)
// a_row(i) is a_rows[i], or i when a_rows is null; c_row likewise; scale null: 1.
// Rows i read a row `depth` wide, b is [depth, width] row-major, and c rows
// are `width` wide; lda and ldc are the strides between a's and c's rows.
template <typename T> struct IndexedRows {
  const T* a = nullptr;
  int64_t lda = 0;
  const int32_t* a_rows = nullptr;
  T* c = nullptr;
  int64_t ldc = 0;
  const int32_t* c_rows = nullptr;
  const T* scale = nullptr;
  const uint8_t* add = nullptr;
};

template <typename T>
void indexed_gemm(const IndexedRows<T>& rows_of, int64_t rows, const T* b, int64_t depth, int64_t width);

// An operand of indexed_gemm_tn, read row by row along the summed dimension:
// row kk is data + rows[kk]·ld (rows null: data + kk·ld).
template <typename T> struct DepthRows {
  const T* data = nullptr;
  int64_t ld = 0;
  const int32_t* rows = nullptr;
};

// The weight gradient's product, aᵀ·b with both operands' rows reached through
// indices: a's read in place, b's copied one panel (at most 512 rows by 16 or
// 8 columns) at a time into a buffer of the calling thread.  BLAS would need
// the rows of both copied first.
//   c[i·ldc + j] = Σ_kk a_row(kk)[i] · b_row(kk)[j]     0 <= i < rows, 0 <= j < width, 0 <= kk < depth
// Every element is stored.  It runs fastest with rows <= width (the tile is 6
// rows by 16 or 8 columns).
template <typename T>
void indexed_gemm_tn(const DepthRows<T>& a, const DepthRows<T>& b, int64_t depth, int64_t rows, int64_t width, T* c,
                     int64_t ldc);

}  // namespace headroom::cpu
