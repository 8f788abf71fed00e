// Neural-network ops: validation, dispatch to the CPU kernels in
// ops/cpu/nn.cpp, and each op's backward right below its forward.
#include "headroom/ops/nn.h"

#include "headroom/autograd/node.h"
#include "headroom/ops/cpu/nn.h"

namespace headroom {

namespace {

// The inputs of an op that are defined (optional weights may not be).
std::vector<Tensor> defined_only(const std::vector<Tensor>& tensors) {
  std::vector<Tensor> out;
  for (const Tensor& t : tensors)
    if (t.defined()) out.push_back(t);
  return out;
}

void check_inputs(const char* op, const std::vector<Tensor>& tensors) {
  std::vector<Tensor> present = defined_only(tensors);
  check_cpu(op, present);
  check_same_device(op, present);
}

// Swaps dimension d with the last one and makes the result contiguous: the
// [rows, n] layout the row kernels need.  Its own inverse.  Not recorded.
Tensor swap_last_contiguous(const Tensor& t, int d) {
  return t.detach().transpose(d, t.dim() - 1).contiguous();
}

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
  Tensor y_rows = Tensor::empty(x_rows.shape(), x.dtype());
  dispatch_floating(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    cpu::softmax_forward(x_rows.data<T>(), y_rows.data<T>(), rows, n, log);
  });
  Tensor out = swap_last_contiguous(y_rows, d);  // x's shape

  // Saved detached: out holds the node, and the node must not hold out.
  autograd::record(out, op, {x}, {out.detach()},
                   [d, rows, n, log](const autograd::Saved& s, const Tensor& g, autograd::Grads& grads) {
                     Tensor y_rows = swap_last_contiguous(s[0], d), g_rows = swap_last_contiguous(g, d);
                     Tensor dx_rows = Tensor::empty(y_rows.shape(), y_rows.dtype());
                     dispatch_floating(y_rows.dtype(), [&](auto zero) {
                       using T = decltype(zero);
                       cpu::softmax_backward(y_rows.data<T>(), g_rows.data<T>(), dx_rows.data<T>(), rows,
                                             n, log);
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
                 ") to match the last dimension of input ", shape_str(x.shape()), ", got ",
                 shape_str(param.shape()));
  check_dtype(op, param, x.dtype(), what);
}

// layer_norm (center = true) and rms_norm (center = false) over the last dimension.
Tensor normalize_last_dim(const char* op, const Tensor& x, const Tensor& weight, const Tensor& bias,
                          double eps, bool center) {
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
  Tensor out = Tensor::empty(x.shape(), x.dtype());
  Tensor mean = Tensor::empty({rows}, x.dtype()), rstd = Tensor::empty({rows}, x.dtype());
  dispatch_floating(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    cpu::norm_forward(xc.data<T>(), data_or_null<T>(wc), data_or_null<T>(bc), out.data<T>(),
                      mean.data<T>(), rstd.data<T>(), rows, d, eps, center);
  });

  autograd::record(
      out, op, {x, weight, bias}, {xc, wc, mean, rstd},
      [rows, d, center](const autograd::Saved& s, const Tensor& g, autograd::Grads& grads) {
        const Tensor &xc = s[0], &wc = s[1], &mean = s[2], &rstd = s[3];
        Tensor gc = g.contiguous();  // [rows, d]
        Tensor dx = grads.wants(0) ? Tensor::empty(xc.shape(), xc.dtype()) : Tensor();
        Tensor dweight = grads.wants(1) ? Tensor::empty({d}, xc.dtype()) : Tensor();
        Tensor dbias = grads.wants(2) ? Tensor::empty({d}, xc.dtype()) : Tensor();
        dispatch_floating(xc.dtype(), [&](auto zero) {
          using T = decltype(zero);
          cpu::norm_backward(xc.data<T>(), data_or_null<T>(wc), mean.data<T>(), rstd.data<T>(),
                             gc.data<T>(), data_or_null<T>(dx), data_or_null<T>(dweight),
                             data_or_null<T>(dbias), rows, d, center);
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
  Tensor out = Tensor::empty(in.shape(), in.dtype());
  dispatch_floating(in.dtype(), [&](auto zero) {
    using T = decltype(zero);
    cpu::dropout_apply(ic.data<T>(), out.data<T>(), in.numel(), seed, first, p, T(1 / (1 - p)));
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

Tensor dropout(const Tensor& x, double p, bool training) {
  return dropout(x, p, training, default_generator());
}

// ---- embedding -------------------------------------------------------------------

Tensor embedding(const Tensor& weight, const Tensor& indices) {
  check_inputs("embedding", {weight, indices});
  check_floating("embedding", weight, "weight");
  check_dtype("embedding", indices, DType::i32, "indices");
  HEADROOM_CHECK(weight.dim() == 2, "[embedding] expected weight of shape [V, D], got ",
                 shape_str(weight.shape()));
  const int64_t vocab = weight.size(0), d = weight.size(1), count = indices.numel();
  Tensor ic = indices.contiguous();  // [count]
  const int32_t* index = ic.data<int32_t>();
  for (int64_t i = 0; i < count; ++i)
    HEADROOM_CHECK(index[i] >= 0 && index[i] < vocab, "[embedding] index ", index[i], " at position ", i,
                   " is out of range for a weight with V = ", vocab, " rows");
  Shape out_shape = indices.shape();
  out_shape.push_back(d);
  Tensor wc = weight.detach().contiguous();  // [V, D]
  Tensor out = Tensor::empty(out_shape, weight.dtype());
  dispatch_floating(weight.dtype(), [&](auto zero) {
    using T = decltype(zero);
    cpu::embedding_forward(wc.data<T>(), index, out.data<T>(), count, d);
  });

  autograd::record(out, "embedding", {weight}, {ic},
                   [vocab, d, count](const autograd::Saved& s, const Tensor& g, autograd::Grads& grads) {
                     Tensor gc = g.contiguous();  // [count, D]
                     Tensor dweight = Tensor::zeros({vocab, d}, g.dtype());
                     dispatch_floating(g.dtype(), [&](auto zero) {
                       using T = decltype(zero);
                       cpu::embedding_backward(s[0].data<int32_t>(), gc.data<T>(), dweight.data<T>(),
                                               count, d);
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
    HEADROOM_CHECK(target[i] >= 0 && target[i] < classes, "[cross_entropy] target ", target[i],
                   " at position ", i, " is outside [0, ", classes, ") and is not ignore_index ",
                   ignore_index);
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

}  // namespace

Tensor cross_entropy(const Tensor& logits, const Tensor& targets, const CrossEntropyOptions& opts) {
  check_inputs("cross_entropy", {logits, targets});
  check_floating("cross_entropy", logits, "logits");
  check_dtype("cross_entropy", targets, DType::i32, "targets");
  HEADROOM_CHECK(logits.dim() >= 1 && logits.size(-1) >= 1,
                 "[cross_entropy] expected logits of shape [..., C] with C >= 1, got ",
                 shape_str(logits.shape()));
  const Shape batch(logits.shape().begin(), logits.shape().end() - 1);
  HEADROOM_CHECK(targets.shape() == batch, "[cross_entropy] targets of shape ", shape_str(targets.shape()),
                 " do not match logits of shape ", shape_str(logits.shape()), " (expected targets of shape ",
                 shape_str(batch), ")");
  HEADROOM_CHECK(opts.label_smoothing >= 0 && opts.label_smoothing <= 1,
                 "[cross_entropy] label_smoothing must be in [0, 1], got ", opts.label_smoothing);
  const int64_t classes = logits.size(-1), rows = targets.numel();
  Tensor tc = targets.contiguous();  // [rows]
  const int64_t valid = count_valid_targets(tc, classes, opts.ignore_index);
  Tensor xc = logits.detach().contiguous();  // [rows, C]
  Tensor lse = Tensor::empty({rows}, logits.dtype());
  Tensor row_loss = Tensor::empty(batch, logits.dtype());  // [...]
  dispatch_floating(logits.dtype(), [&](auto zero) {
    using T = decltype(zero);
    cpu::cross_entropy_forward(xc.data<T>(), tc.data<int32_t>(), lse.data<T>(), row_loss.data<T>(), rows,
                               classes, opts.ignore_index, opts.label_smoothing);
  });
  Tensor out = row_loss;
  const double scale = reduction_scale(opts.reduction, valid);
  if (opts.reduction != Reduction::none) {
    double total = 0;  // in row order, in double: deterministic and accurate
    for (double v : row_loss.to_vector<double>()) total += v;
    out = Tensor::scalar(total * scale, logits.dtype());
  }

  autograd::record(out, "cross_entropy", {logits}, {xc, tc, lse},
                   [opts, rows, classes, scale](const autograd::Saved& s, const Tensor& g,
                                                autograd::Grads& grads) {
                     // row_grad: [rows], dL/d(row loss): g itself for none, else g * scale.
                     Tensor row_grad = opts.reduction == Reduction::none
                                           ? g.contiguous()
                                           : Tensor::full({rows}, g.item() * scale, g.dtype());
                     Tensor dlogits = Tensor::empty(s[0].shape(), s[0].dtype());
                     dispatch_floating(dlogits.dtype(), [&](auto zero) {
                       using T = decltype(zero);
                       cpu::cross_entropy_backward(s[0].data<T>(), s[1].data<int32_t>(), s[2].data<T>(),
                                                   row_grad.data<T>(), dlogits.data<T>(), rows, classes,
                                                   opts.ignore_index, opts.label_smoothing);
                     });
                     grads.add(0, dlogits);
                   });
  return out;
}

}  // namespace headroom
