#pragma once
// CPU kernels of the neural-network family (ops/nn.h).  All work on
// contiguous row-major buffers; the ops in ops/nn.cpp validate, make inputs
// contiguous and move the reduced dimension last before calling them.
// Templated on the element type; instantiated for float and double.
#include <cstdint>

namespace headroom::cpu {

// ---- softmax / log_softmax over the last dimension ----------------------
// x, y: [rows, n].  `log` selects log_softmax.  A row of all -inf gives
// softmax 0 and log_softmax -inf (not NaN).
template <typename T> void softmax_forward(const T* x, T* y, int64_t rows, int64_t n, bool log);
// y: the forward output, dy: its gradient, dx: [rows, n].
//   softmax:      dx = y * (dy - sum(dy * y))
//   log_softmax:  dx = dy - exp(y) * sum(dy)
template <typename T> void softmax_backward(const T* y, const T* dy, T* dx, int64_t rows, int64_t n, bool log);

// ---- layer_norm (center = true) and rms_norm (center = false) ----------
// x, y: [rows, d]; weight, bias: [d] or null (no affine); mean, rstd: [rows].
//   y = (x - mean) * rstd * weight + bias,  rstd = 1 / sqrt(var + eps)
// rms_norm uses mean = 0, so var is the mean square.
template <typename T>
void norm_forward(const T* x, const T* weight, const T* bias, T* y, T* mean, T* rstd, int64_t rows, int64_t d,
                  double eps, bool center);
// dy: [rows, d].  dx (may be null), dweight and dbias ([d], may be null).
template <typename T>
void norm_backward(const T* x, const T* weight, const T* mean, const T* rstd, const T* dy, T* dx, T* dweight, T* dbias,
                   int64_t rows, int64_t d, bool center);

// ---- dropout --------------------------------------------------------------
// y[i] = x[i] * scale when uniform(seed, first + i) >= p, else 0; n elements.
// The mask is a pure function of (seed, first + i), so the backward applies
// the same kernel to the gradient instead of storing the mask.
template <typename T> void dropout_apply(const T* x, T* y, int64_t n, uint64_t seed, uint64_t first, double p, T scale);

// ---- embedding ------------------------------------------------------------
// weight: [V, d]; indices: [count], already checked to lie in [0, V); out: [count, d].
template <typename T> void embedding_forward(const T* weight, const int32_t* indices, T* out, int64_t count, int64_t d);
// dweight: [V, d], zero-filled by the caller; dy: [count, d].  Rows are added
// in index order, so repeated indices sum deterministically.
template <typename T>
void embedding_backward(const int32_t* indices, const T* dy, T* dweight, int64_t count, int64_t d);

// ---- cross_entropy (fused log_softmax + NLL) -------------------------------
// logits: [rows, classes]; targets: [rows], each in [0, classes) or == ignore_index.
// Writes each row's log-sum-exp and its loss
//   (1 - smoothing) * (lse - logit[target]) + smoothing * (lse - mean(logits)),
// with loss 0 for ignored rows.
template <typename T>
void cross_entropy_forward(const T* logits, const int32_t* targets, T* lse, T* row_loss, int64_t rows, int64_t classes,
                           int64_t ignore_index, double smoothing);
// dL/d(row loss of row r) = row_grad[r] * grad_scale, or row_grad[0] * grad_scale
// for every row when broadcast_grad (a reduced loss).  dlogits: [rows, classes],
// 0 on ignored rows, else that gradient * (softmax - (1 - smoothing) * onehot(target)
// - smoothing / classes).
template <typename T>
void cross_entropy_backward(const T* logits, const int32_t* targets, const T* lse, const T* row_grad,
                            bool broadcast_grad, double grad_scale, T* dlogits, int64_t rows, int64_t classes,
                            int64_t ignore_index, double smoothing);

}  // namespace headroom::cpu
