// CUDA matrix products (see matmul.h): strided-batched cuBLAS GEMMs over
// runs of the batch, and a fixed-order column sum for bias gradients.
#include <algorithm>
#include <limits>
#include <type_traits>

#include "headroom/core/backend.h"
#include "headroom/cuda/kernels.h"
#include "headroom/ops/kernels/matmul.h"
#include "headroom/cuda/backend.h"

namespace headroom::cuda {

namespace {

constexpr int64_t kRowsPerChunk = 64;  // rows per partial sum of sum_rows

// out[c, j] = sum of in[r, j] over the rows r of chunk c, in row order.
//   in: [rows, cols]   out: [chunks, cols]   grid: (chunks, column blocks)
template <typename T> __global__ void column_sums_kernel(const T* in, T* out, int64_t rows, int64_t cols) {
  const int64_t c = blockIdx.x;
  const int64_t j = blockIdx.y * int64_t(blockDim.x) + threadIdx.x;
  if (j >= cols) return;
  const int64_t r_end = std::min(rows, (c + 1) * kRowsPerChunk);
  T acc = 0;
  for (int64_t r = c * kRowsPerChunk; r < r_end; ++r) acc += in[r * cols + j];
  out[c * cols + j] = acc;
}

// cuBLAS takes 32-bit sizes.
int blas_int(int64_t value) {
  HEADROOM_CHECK(value <= std::numeric_limits<int>::max(), "[matmul] size ", value,
                 " exceeds the 32-bit sizes cuBLAS accepts");
  return static_cast<int>(value);
}

// Consecutive matrices first .. first + count - 1 of the batch whose a and b
// offsets advance by constant strides: one strided-batched call.
struct StridedRun {
  int64_t first = 0, count = 1;
  int64_t a_stride = 0, b_stride = 0;  // in elements; 0 for a broadcast operand
};

// Splits the batch into maximal strided runs.  A batch without broadcasting,
// or with one operand broadcast whole, is one run (the common case); mixed
// broadcasts (a: [2, 1, m, k] with b: [1, 3, k, n]) give one run per inner block.
std::vector<StridedRun> strided_runs(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  const int64_t batch = static_cast<int64_t>(a.size());
  std::vector<StridedRun> runs;
  for (int64_t i = 0; i < batch; i += runs.back().count) {
    StridedRun run;
    run.first = i;
    if (i + 1 < batch) run.a_stride = a[i + 1] - a[i], run.b_stride = b[i + 1] - b[i];
    auto continues = [&](int64_t j) { return a[j] - a[j - 1] == run.a_stride && b[j] - b[j - 1] == run.b_stride; };
    while (i + run.count < batch && run.count < std::numeric_limits<int>::max() && continues(i + run.count))
      ++run.count;
    runs.push_back(run);
  }
  return runs;
}

// c[i] = a[i] · b[i] + beta · c[i] for the run's matrices, all row-major
// (or transposed as la / lb say), c[i]: [m, n] contiguous.
//
// The one place where row-major meets cuBLAS's column-major.  A row-major
// [r, s] matrix with leading dimension ld, read column-major, is its
// transpose [s, r].  So instead of C = A · B we ask cuBLAS for
// Cᵀ = Bᵀ · Aᵀ: the operands swap places and m and n swap.  An operand
// stored row-major, read column-major, already is the transpose we need
// (CUBLAS_OP_N); one stored transposed is read as the matrix itself and
// needs CUBLAS_OP_T.  C written column-major as [n, m] with ldc = n is the
// row-major [m, n] result.
template <typename T>
void row_major_gemm(int device, int64_t m, int64_t n, int64_t k, const T* a, const kernels::MatrixLayout& la,
                    const T* b, const kernels::MatrixLayout& lb, T* c, const StridedRun& run, T beta) {
  constexpr bool f32 = std::is_same<T, float>::value;
  const cudaDataType_t type = f32 ? CUDA_R_32F : CUDA_R_64F;
  const cublasComputeType_t compute = !f32           ? CUBLAS_COMPUTE_64F
                                      : allow_tf32() ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                     : CUBLAS_COMPUTE_32F;
  const T alpha = 1;
  HEADROOM_CUBLAS_CHECK(cublasGemmStridedBatchedEx(cublas(device), lb.transposed ? CUBLAS_OP_T : CUBLAS_OP_N,
                                                   la.transposed ? CUBLAS_OP_T : CUBLAS_OP_N, blas_int(n), blas_int(m),
                                                   blas_int(k), &alpha,                     //
                                                   b, type, blas_int(lb.ld), run.b_stride,  // first operand: Bᵀ
                                                   a, type, blas_int(la.ld), run.a_stride,  // second operand: Aᵀ
                                                   &beta, c, type, blas_int(n), m * n,      // Cᵀ
                                                   static_cast<int>(run.count), compute, CUBLAS_GEMM_DEFAULT));
}

struct CudaMatmulKernels final : kernels::MatmulKernels {
  void batched_gemm(int64_t m, int64_t n, int64_t k, const Tensor& a, const std::vector<int64_t>& a_offsets,
                    const kernels::MatrixLayout& la, const Tensor& b, const std::vector<int64_t>& b_offsets,
                    const kernels::MatrixLayout& lb, const Tensor& bias, const Tensor& c) override {
    const int64_t batch = static_cast<int64_t>(a_offsets.size());
    if (batch == 0 || m == 0 || n == 0) return;
    const int device = c.device().index;
    DeviceGuard guard(device);
    // c starts at the bias on every row, and the GEMM accumulates onto it
    // (beta = 1); without a bias, an empty sum (k = 0) leaves zeros.
    if (bias.defined()) copy_elements(bias, make_view(c, {batch * m, n}, {n, 1}, c.offset()));
    else if (k == 0)
      HEADROOM_CUDA_CHECK(
          cudaMemsetAsync(c.raw_data(), 0, size_t(batch * m * n) * dtype_size(c.dtype()), stream(device)));
    if (k == 0) return;
    const std::vector<StridedRun> runs = strided_runs(a_offsets, b_offsets);
    dispatch_floating(c.dtype(), [&](auto zero) {
      using T = decltype(zero);
      const T beta = bias.defined() ? T(1) : T(0);
      for (const StridedRun& run : runs)
        row_major_gemm<T>(device, m, n, k, a.data<T>() + a_offsets[run.first], la, b.data<T>() + b_offsets[run.first],
                          lb, c.data<T>() + run.first * m * n, run, beta);
    });
  }

  // Column sums in chunks of kRowsPerChunk rows, then the chunks' partial
  // sums the same way, until one chunk is left: a fixed order for any size.
  void sum_rows(const Tensor& g, const Tensor& out, int64_t rows, int64_t cols) override {
    if (cols == 0) return;
    const int device = out.device().index;
    DeviceGuard guard(device);
    const int64_t chunks = std::max<int64_t>(1, (rows + kRowsPerChunk - 1) / kRowsPerChunk);
    Tensor partial = chunks == 1 ? out : Tensor::empty({chunks, cols}, g.dtype(), g.device());  // [chunks, cols]
    const dim3 grid(unsigned(chunks), grid_for(cols));
    dispatch_floating(g.dtype(), [&](auto zero) {
      using T = decltype(zero);
      column_sums_kernel<T><<<grid, kThreads, 0, stream(device)>>>(g.data<T>(), partial.data<T>(), rows, cols);
    });
    check_launch("column_sums_kernel");
    if (chunks > 1) sum_rows(partial, out, chunks, cols);
  }
};

}  // namespace

kernels::MatmulKernels& matmul_kernels() {
  static CudaMatmulKernels kernels;
  return kernels;
}

}  // namespace headroom::cuda
