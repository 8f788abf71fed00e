// Neural-network ops: validation, dispatch to the CPU kernels in
// ops/cpu/nn.cpp or the CUDA kernels in cuda/nn.cu, and each op's backward
// right below its forward.
#include "headroom/ops/nn.h"

#include <algorithm>
#include <limits>
#include <numeric>

#include "headroom/autograd/node.h"
#include "headroom/ops/cpu/nn.h"
#include "headroom/ops/kernels/nn.h"
#include "headroom/ops/kernels/registry.h"
#include "headroom/ops/reference/kernels.h"

namespace headroom {

namespace {

// The inputs of an op that are defined (optional weights may not be).
std::vector<Tensor> defined_only(const std::vector<Tensor>& tensors) {
  std::vector<Tensor> out;
  for (const Tensor& t : tensors)
    if (t.defined()) out.push_back(t);
  return out;
}

void check_inputs(const char* op, const std::vector<Tensor>& tensors) { check_same_device(op, defined_only(tensors)); }

// The device branch of every kernel call: device_kernel(the NnKernels of t's
// device) when `t` is not on the CPU, else cpu_kernel(T{}) with T the C++ type
// of t's floating dtype.  Both get the same (device) tensors.
template <typename DeviceKernel, typename CpuKernel>
void run_kernel(const Tensor& t, DeviceKernel device_kernel, CpuKernel cpu_kernel) {
  if (!t.device().is_cpu()) return device_kernel(*kernels::device_kernels(t).nn);
  dispatch_floating(t.dtype(), cpu_kernel);
}

// Swaps dimension d with the last one and makes the result contiguous: the
// [rows, n] layout the row kernels need.  Its own inverse.  Not recorded.
Tensor swap_last_contiguous(const Tensor& t, int d) { return t.detach().transpose(d, t.dim() - 1).contiguous(); }

}  // namespace

// ---- softmax / log_softmax ------------------------------------------------------

namespace {

Tensor softmax_op(const Tensor& x, int64_t dim, bool log) {
  const char* op = log ? "log_softmax" : "softmax";
  check_inputs(op, {x});
  check_floating(op, x);
  const int d = wrap_dim(dim, x.dim(), op);
  Tensor x_rows = swap_last_contiguous(x, d);  // [rows, n], `d` moved last
  const int64_t n = x.size(d), rows = n == 0 ? 0 : x.numel() / n;
  Tensor y_rows = Tensor::empty(x_rows.shape(), x.dtype(), x.device());
  run_kernel(
      x_rows, [&](kernels::NnKernels& k) { k.softmax_forward(x_rows, y_rows, rows, n, log); },
      [&](auto zero) {
        using T = decltype(zero);
        HEADROOM_CPU_KERNEL(softmax_forward)(x_rows.data<T>(), y_rows.data<T>(), rows, n, log);
      });
  Tensor out = swap_last_contiguous(y_rows, d);  // x's shape

  // Saved detached: out holds the node, and the node must not hold out.
  // softmax: dx = y ⊙ (g − Σ y⊙g); log_softmax: dx = g − softmax(x) · Σ g
  autograd::record(out, op, {x}, {out.detach()},
                   [d, rows, n, log](const autograd::Saved& s, const Tensor& g, autograd::Grads& grads) {
                     Tensor y_rows = swap_last_contiguous(s[0], d), g_rows = swap_last_contiguous(g, d);
                     Tensor dx_rows = Tensor::empty(y_rows.shape(), y_rows.dtype(), y_rows.device());
                     run_kernel(
                         y_rows,
                         [&](kernels::NnKernels& k) { k.softmax_backward(y_rows, g_rows, dx_rows, rows, n, log); },
                         [&](auto zero) {
                           using T = decltype(zero);
                           HEADROOM_CPU_KERNEL(softmax_backward)
                           (y_rows.data<T>(), g_rows.data<T>(), dx_rows.data<T>(), rows, n, log);
                         });
                     grads.add(0, swap_last_contiguous(dx_rows, d));
                   });
  return out;
}

}  // namespace

Tensor softmax(const Tensor& x, int64_t dim) { return softmax_op(x, dim, /*log=*/false); }
Tensor log_softmax(const Tensor& x, int64_t dim) { return softmax_op(x, dim, /*log=*/true); }

// ---- layer_norm / rms_norm -----------------------------------------------------

namespace {

void check_affine(const char* op, const Tensor& param, const Tensor& x, const char* what) {
  if (!param.defined()) return;
  const int64_t d = x.size(-1);
  HEADROOM_CHECK(param.shape() == Shape{d}, "[", op, "] expected ", what, " of shape (", d,
                 ") to match the last dimension of input ", shape_str(x.shape()), ", got ", shape_str(param.shape()));
  check_dtype(op, param, x.dtype(), what);
}

// layer_norm (center = true) and rms_norm (center = false) over the last dimension.
Tensor normalize_last_dim(const char* op, const Tensor& x, const Tensor& weight, const Tensor& bias, double eps,
                          bool center) {
  check_inputs(op, {x, weight, bias});
  check_floating(op, x);
  HEADROOM_CHECK(x.dim() >= 1 && x.size(-1) >= 1, "[", op,
                 "] expected an input with a non-empty last dimension, got shape ", shape_str(x.shape()));
  check_affine(op, weight, x, "weight");
  check_affine(op, bias, x, "bias");
  const int64_t d = x.size(-1), rows = x.numel() / d;
  Tensor xc = x.detach().contiguous();  // [rows, d]
  Tensor wc = weight.defined() ? weight.detach().contiguous() : Tensor();
  Tensor bc = bias.defined() ? bias.detach().contiguous() : Tensor();
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  Tensor mean = Tensor::empty({rows}, x.dtype(), x.device()), rstd = Tensor::empty({rows}, x.dtype(), x.device());
  run_kernel(
      xc, [&](kernels::NnKernels& k) { k.norm_forward(xc, wc, bc, out, mean, rstd, rows, d, eps, center); },
      [&](auto zero) {
        using T = decltype(zero);
        HEADROOM_CPU_KERNEL(norm_forward)
        (xc.data<T>(), data_or_null<T>(wc), data_or_null<T>(bc), out.data<T>(), mean.data<T>(), rstd.data<T>(), rows, d,
         eps, center);
      });

  // x̂ = (x − μ)·rstd (rms: x·rstd), y = x̂ ⊙ w + b:  db = Σ_rows g, dw = Σ_rows g ⊙ x̂,
  // dx = rstd · (ĝ − mean(ĝ) − x̂ · mean(ĝ ⊙ x̂)) with ĝ = g ⊙ w (rms: no mean(ĝ) term)
  autograd::record(out, op, {x, weight, bias}, {xc, wc, mean, rstd},
                   [rows, d, center](const autograd::Saved& s, const Tensor& g, autograd::Grads& grads) {
                     const Tensor &xc = s[0], &wc = s[1], &mean = s[2], &rstd = s[3];
                     Tensor gc = g.contiguous();  // [rows, d]
                     auto grad_if = [&](size_t i, const Shape& shape) {
                       return grads.wants(i) ? Tensor::empty(shape, xc.dtype(), xc.device()) : Tensor();
                     };
                     Tensor dx = grad_if(0, xc.shape()), dweight = grad_if(1, {d}), dbias = grad_if(2, {d});
                     run_kernel(
                         xc,
                         [&](kernels::NnKernels& k) {
                           k.norm_backward(xc, wc, mean, rstd, gc, dx, dweight, dbias, rows, d, center);
                         },
                         [&](auto zero) {
                           using T = decltype(zero);
                           HEADROOM_CPU_KERNEL(norm_backward)
                           (xc.data<T>(), data_or_null<T>(wc), mean.data<T>(), rstd.data<T>(), gc.data<T>(),
                            data_or_null<T>(dx), data_or_null<T>(dweight), data_or_null<T>(dbias), rows, d, center);
                         });
                     if (dx.defined()) grads.add(0, dx);
                     if (dweight.defined()) grads.add(1, dweight);
                     if (dbias.defined()) grads.add(2, dbias);
                   });
  return out;
}

}  // namespace

Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  return normalize_last_dim("layer_norm", x, weight, bias, eps, /*center=*/true);
}

Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps) {
  return normalize_last_dim("rms_norm", x, weight, Tensor(), eps, /*center=*/false);
}

// ---- dropout ---------------------------------------------------------------------

namespace {

// out = in with the dropout mask of draws [first, first + numel) of `seed`.
Tensor apply_dropout(const Tensor& in, uint64_t seed, uint64_t first, double p) {
  Tensor ic = in.detach().contiguous();
  Tensor out = Tensor::empty(in.shape(), in.dtype(), in.device());
  const int64_t n = in.numel();
  run_kernel(
      ic, [&](kernels::NnKernels& k) { k.dropout_apply(ic, out, n, seed, first, p, 1 / (1 - p)); },
      [&](auto zero) {
        using T = decltype(zero);
        cpu::dropout_apply(ic.data<T>(), out.data<T>(), n, seed, first, p, T(1 / (1 - p)));
      });
  return out;
}

}  // namespace

Tensor dropout(const Tensor& x, double p, bool training, Generator& gen) {
  check_inputs("dropout", {x});
  check_floating("dropout", x);
  HEADROOM_CHECK(p >= 0 && p < 1, "[dropout] p must be in [0, 1), got ", p);
  if (!training || p == 0) return x;
  const uint64_t seed = gen.seed(), first = gen.reserve(uint64_t(x.numel()));
  Tensor out = apply_dropout(x, seed, first, p);
  // dx = dy * mask * scale: the same kernel on the gradient, same draws.
  autograd::record(out, "dropout", {x}, {},
                   [seed, first, p](const autograd::Saved&, const Tensor& g, autograd::Grads& grads) {
                     grads.add(0, apply_dropout(g, seed, first, p));
                   });
  return out;
}

Tensor dropout(const Tensor& x, double p, bool training) { return dropout(x, p, training, default_generator()); }

// ---- embedding -------------------------------------------------------------------

namespace {

// What the CUDA backward needs to add the rows of repeated indices in index
// order without atomics: the positions grouped by index (see ops/kernels/nn.h).
struct EmbeddingGradPlan {
  Tensor order;          // i32 [count]: positions sorted by index, ascending within one index
  Tensor segment_start;  // i32 [segments + 1]: where each index's positions start in order
  Tensor segment_row;    // i32 [segments]: the index (row of the weight) of each segment
};

// Built on the host from indices the range check has already read there, then uploaded.
EmbeddingGradPlan plan_embedding_grad(const int32_t* index, int64_t count, Device device) {
  std::vector<int32_t> order(count), start, row;
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return index[a] < index[b]; });
  for (int64_t k = 0; k < count; ++k) {
    if (k > 0 && index[order[k]] == index[order[k - 1]]) continue;
    start.push_back(int32_t(k));
    row.push_back(index[order[k]]);
  }
  start.push_back(int32_t(count));
  return {Tensor::from_vector(order).to(device), Tensor::from_vector(start).to(device),
          Tensor::from_vector(row).to(device)};
}

}  // namespace

Tensor embedding(const Tensor& weight, const Tensor& indices) {
  check_inputs("embedding", {weight, indices});
  check_floating("embedding", weight, "weight");
  check_dtype("embedding", indices, DType::i32, "indices");
  HEADROOM_CHECK(weight.dim() == 2, "[embedding] expected weight of shape [V, D], got ", shape_str(weight.shape()));
  const int64_t vocab = weight.size(0), d = weight.size(1), count = indices.numel();
  HEADROOM_CHECK(count <= std::numeric_limits<int32_t>::max(), "[embedding] expected fewer than 2^31 indices, got ",
                 count);
  Tensor ic = indices.contiguous();  // [count]
  // The range check reads the indices on the host (for CUDA indices, a copy
  // that waits for the device): a bad index must fail here with a message,
  // not read out of bounds inside a kernel.
  Tensor host_indices = ic.to(Device::cpu());
  const int32_t* index = host_indices.data<int32_t>();
  for (int64_t i = 0; i < count; ++i)
    HEADROOM_CHECK(index[i] >= 0 && index[i] < vocab, "[embedding] index ", index[i], " at position ", i,
                   " is out of range for a weight with V = ", vocab, " rows");
  Shape out_shape = indices.shape();
  out_shape.push_back(d);
  Tensor wc = weight.detach().contiguous();  // [V, D]
  Tensor out = Tensor::empty(out_shape, weight.dtype(), weight.device());
  run_kernel(
      wc, [&](kernels::NnKernels& k) { k.embedding_forward(wc, ic, out, count, d); },
      [&](auto zero) {
        using T = decltype(zero);
        cpu::embedding_forward(wc.data<T>(), index, out.data<T>(), count, d);
      });

  EmbeddingGradPlan plan;
  if (!weight.device().is_cpu() && autograd::needs_grad({weight}))
    plan = plan_embedding_grad(index, count, weight.device());
  // dweight[v] = Σ of g over the positions whose index is v
  autograd::record(
      out, "embedding", {weight}, {ic, plan.order, plan.segment_start, plan.segment_row},
      [vocab, d, count](const autograd::Saved& s, const Tensor& g, autograd::Grads& grads) {
        Tensor gc = g.contiguous();  // [count, D]
        Tensor dweight = Tensor::zeros({vocab, d}, g.dtype(), g.device());
        run_kernel(
            gc, [&](kernels::NnKernels& k) { k.embedding_backward(s[1], s[2], s[3], gc, dweight, s[3].numel(), d); },
            [&](auto zero) {
              using T = decltype(zero);
              cpu::embedding_backward(s[0].data<int32_t>(), gc.data<T>(), dweight.data<T>(), count, d);
            });
        grads.add(0, dweight);
      });
  return out;
}

// ---- cross_entropy ----------------------------------------------------------------

namespace {

// Checks every target and returns how many are not ignored.
int64_t count_valid_targets(const Tensor& targets, int64_t classes, int64_t ignore_index) {
  const int32_t* target = targets.data<int32_t>();
  int64_t valid = 0;
  for (int64_t i = 0; i < targets.numel(); ++i) {
    if (target[i] == ignore_index) continue;
    HEADROOM_CHECK(target[i] >= 0 && target[i] < classes, "[cross_entropy] target ", target[i], " at position ", i,
                   " is outside [0, ", classes, ") and is not ignore_index ", ignore_index);
    ++valid;
  }
  return valid;
}

// The factor that turns a sum of row losses into the reduced loss: 1/valid
// for mean (0 when nothing is valid, see nn.h), 1 for sum.
double reduction_scale(Reduction reduction, int64_t valid) {
  if (reduction != Reduction::mean) return 1;
  return valid == 0 ? 0 : 1.0 / double(valid);
}

// scale * the sum of the row losses ([...]) as a scalar of their dtype,
// summed in double in a fixed order (on the device for CUDA losses).
Tensor reduce_row_losses(const Tensor& row_loss, double scale) {
  if (!row_loss.device().is_cpu()) {
    Tensor out = Tensor::empty({}, row_loss.dtype(), row_loss.device());
    kernels::device_kernels(row_loss).nn->sum_scaled(row_loss, row_loss.numel(), scale, out);
    return out;
  }
  double total = 0;  // in row order
  for (double v : row_loss.to_vector<double>()) total += v;
  return Tensor::scalar(total * scale, row_loss.dtype());
}

}  // namespace

Tensor cross_entropy(const Tensor& logits, const Tensor& targets, const CrossEntropyOptions& opts) {
  check_inputs("cross_entropy", {logits, targets});
  check_floating("cross_entropy", logits, "logits");
  check_dtype("cross_entropy", targets, DType::i32, "targets");
  HEADROOM_CHECK(logits.dim() >= 1 && logits.size(-1) >= 1,
                 "[cross_entropy] expected logits of shape [..., C] with C >= 1, got ", shape_str(logits.shape()));
  const Shape batch(logits.shape().begin(), logits.shape().end() - 1);
  HEADROOM_CHECK(targets.shape() == batch, "[cross_entropy] targets of shape ", shape_str(targets.shape()),
                 " do not match logits of shape ", shape_str(logits.shape()), " (expected targets of shape ",
                 shape_str(batch), ")");
  HEADROOM_CHECK(opts.label_smoothing >= 0 && opts.label_smoothing <= 1,
                 "[cross_entropy] label_smoothing must be in [0, 1], got ", opts.label_smoothing);
  const int64_t classes = logits.size(-1), rows = targets.numel();
  Tensor tc = targets.contiguous();  // [rows]
  // Checked on the host (for CUDA targets, a copy that waits for the device):
  // a bad target fails here with a message, and mean needs the valid count.
  const int64_t valid = count_valid_targets(tc.to(Device::cpu()), classes, opts.ignore_index);
  Tensor xc = logits.detach().contiguous();  // [rows, C]
  Tensor lse = Tensor::empty({rows}, logits.dtype(), logits.device());
  Tensor row_loss = Tensor::empty(batch, logits.dtype(), logits.device());  // [...]
  run_kernel(
      xc,
      [&](kernels::NnKernels& k) {
        k.cross_entropy_forward(xc, tc, lse, row_loss, rows, classes, opts.ignore_index, opts.label_smoothing);
      },
      [&](auto zero) {
        using T = decltype(zero);
        cpu::cross_entropy_forward(xc.data<T>(), tc.data<int32_t>(), lse.data<T>(), row_loss.data<T>(), rows, classes,
                                   opts.ignore_index, opts.label_smoothing);
      });
  const double scale = reduction_scale(opts.reduction, valid);
  Tensor out = opts.reduction == Reduction::none ? row_loss : reduce_row_losses(row_loss, scale);

  // dlogits = (softmax(logits) − smoothed one-hot target) · dL/d(row loss); ignored rows 0
  autograd::record(out, "cross_entropy", {logits}, {xc, tc, lse},
                   [opts, rows, classes, scale](const autograd::Saved& s, const Tensor& g, autograd::Grads& grads) {
                     // dL/d(row loss): g itself for none ([rows]), else g (a scalar, read by
                     // the kernel where it lives: no host sync on CUDA) * scale.
                     const bool per_row = opts.reduction == Reduction::none;
                     const double grad_scale = per_row ? 1 : scale;
                     Tensor gc = g.contiguous();
                     Tensor dlogits = Tensor::empty(s[0].shape(), s[0].dtype(), s[0].device());
                     run_kernel(
                         dlogits,
                         [&](kernels::NnKernels& k) {
                           k.cross_entropy_backward(s[0], s[1], s[2], gc, grad_scale, dlogits, rows, classes,
                                                    opts.ignore_index, opts.label_smoothing);
                         },
                         [&](auto zero) {
                           using T = decltype(zero);
                           cpu::cross_entropy_backward(s[0].data<T>(), s[1].data<int32_t>(), s[2].data<T>(),
                                                       gc.data<T>(), !per_row, grad_scale, dlogits.data<T>(), rows,
                                                       classes, opts.ignore_index, opts.label_smoothing);
                         });
                     grads.add(0, dlogits);
                   });
  return out;
}

}  // namespace headroom
