#pragma once
// The interface of a device's neural-network kernels (ops/nn.h), the
// counterparts of ops/cpu/nn.h method for method (CUDA: cuda/nn.cu).
//
// Every tensor argument is already on the device, contiguous and row-major,
// f32 or f64 (indices, targets and the embedding plan are i32); outputs are
// allocated by the caller.  Optional tensors (weight, bias, dx, ...) may be
// undefined.  Reductions run in a fixed order (per-row tree reductions, per
// column loops over rows): results are identical from run to run, and no
// float atomics are used.
#include <cstdint>

#include "headroom/core/tensor.h"

namespace headroom::kernels {

struct NnKernels {
  virtual ~NnKernels() = default;

  // ---- softmax / log_softmax over the last dimension ----------------------
  // x, y: [rows, n].  `log` selects log_softmax; a row of all -inf gives
  // softmax 0 and log_softmax -inf.
  virtual void softmax_forward(const Tensor& x, const Tensor& y, int64_t rows, int64_t n, bool log) = 0;
  // y: the forward output, dy: its gradient, dx: [rows, n].
  virtual void softmax_backward(const Tensor& y, const Tensor& dy, const Tensor& dx, int64_t rows, int64_t n,
                                bool log) = 0;

  // ---- layer_norm (center = true) and rms_norm (center = false) ----------
  // x, y: [rows, d]; weight, bias: [d] or undefined; mean, rstd: [rows].
  virtual void norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& y,
                            const Tensor& mean, const Tensor& rstd, int64_t rows, int64_t d, double eps,
                            bool center) = 0;
  // dy: [rows, d].  dx ([rows, d]), dweight and dbias ([d]): each undefined when not wanted.
  virtual void norm_backward(const Tensor& x, const Tensor& weight, const Tensor& mean, const Tensor& rstd,
                             const Tensor& dy, const Tensor& dx, const Tensor& dweight, const Tensor& dbias,
                             int64_t rows, int64_t d, bool center) = 0;

  // ---- dropout --------------------------------------------------------------
  // y[i] = x[i] * scale when Generator(seed).uniform_at(first + i) >= p, else 0:
  // the CPU's mask bit for bit.  x, y: [n]; scale = 1 / (1 - p) in x's dtype.
  virtual void dropout_apply(const Tensor& x, const Tensor& y, int64_t n, uint64_t seed, uint64_t first, double p,
                             double scale) = 0;

  // ---- embedding ------------------------------------------------------------
  // weight: [V, d]; indices: [count], already checked to lie in [0, V); out: [count, d].
  virtual void embedding_forward(const Tensor& weight, const Tensor& indices, const Tensor& out, int64_t count,
                                 int64_t d) = 0;
  // dweight: [V, d], zero-filled by the caller; dy: [count, d].  The plan
  // groups positions by index: segment s covers order[segment_start[s] ..
  // segment_start[s + 1]) (positions with index segment_row[s], ascending),
  // and its row of dweight adds those rows of dy in that order, as the CPU does.
  //   order: [count]   segment_start: [segments + 1]   segment_row: [segments]
  virtual void embedding_backward(const Tensor& order, const Tensor& segment_start, const Tensor& segment_row,
                                  const Tensor& dy, const Tensor& dweight, int64_t segments, int64_t d) = 0;

  // ---- cross_entropy (fused log_softmax + NLL) -------------------------------
  // logits: [rows, classes]; targets: [rows].  Writes lse and row_loss ([rows]),
  // as cpu::cross_entropy_forward.
  virtual void cross_entropy_forward(const Tensor& logits, const Tensor& targets, const Tensor& lse,
                                     const Tensor& row_loss, int64_t rows, int64_t classes, int64_t ignore_index,
                                     double smoothing) = 0;
  // As cpu::cross_entropy_backward, broadcasting row_grad when it has one
  // element (a reduced loss: no host read of the gradient).
  virtual void cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& lse,
                                      const Tensor& row_grad, double grad_scale, const Tensor& dlogits, int64_t rows,
                                      int64_t classes, int64_t ignore_index, double smoothing) = 0;
  // out (one element) = scale * the sum of values ([n]), summed in double in
  // a fixed order: the reduced loss, without copying row losses to the host.
  virtual void sum_scaled(const Tensor& values, int64_t n, double scale, const Tensor& out) = 0;
};
}  // namespace headroom::kernels
