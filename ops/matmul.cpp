// Matrix products: matmul and linear, with their backward passes.  Both reduce
// to one kernel, cpu::batched_gemm, on operands viewed as stacks of matrices
// [..., rows, cols] whose strides cblas can read directly.
#include "headroom/ops/matmul.h"

#include <algorithm>
#include <functional>
#include <numeric>

#include "headroom/autograd/node.h"
#include "headroom/ops/cpu/matmul.h"
#include "headroom/ops/kernels/matmul.h"
#include "headroom/ops/kernels/registry.h"
#include "headroom/ops/reference/kernels.h"
#include "headroom/ops/shape.h"

namespace headroom {
namespace {

Shape batch_of(const Tensor& t) { return Shape(t.shape().begin(), t.shape().end() - 2); }

// Product of all dimensions but the last: the rows of a [..., cols] tensor.
int64_t leading_rows(const Shape& shape) {
  return std::accumulate(shape.begin(), shape.end() - 1, int64_t(1), std::multiplies<int64_t>());
}

// torch.matmul's promotion of 1-D operands, as views: a [K] -> [1, K], b [K] -> [K, 1].
Tensor promote_first(const Tensor& a) {
  return a.dim() == 1 ? make_view(a, {1, a.size(0)}, {0, a.stride(0)}, a.offset()) : a;
}
Tensor promote_second(const Tensor& b) {
  return b.dim() == 1 ? make_view(b, {b.size(0), 1}, {b.stride(0), 0}, b.offset()) : b;
}

// The shape of the product before 1-D promotions are squeezed: [batch..., M, N].
Shape promoted_out_shape(const Tensor& a2, const Tensor& b2) {
  Shape shape = broadcast_shapes(batch_of(a2), batch_of(b2), "matmul");
  shape.push_back(a2.size(-2));
  shape.push_back(b2.size(-1));
  return shape;
}

// torch.matmul's result shape: the promoted shape without the dims added for 1-D inputs.
Shape squeeze_promotions(Shape promoted, const Tensor& a, const Tensor& b) {
  if (b.dim() == 1) promoted.pop_back();
  if (a.dim() == 1) promoted.erase(promoted.end() - (b.dim() == 1 ? 1 : 2));
  return promoted;
}

// cblas reads a [rows, cols] matrix with strides (row_stride, col_stride) in
// place when one of the two strides is 1 (a row-major matrix or the transpose
// of one); the stride of a size-1 dimension never matters.
bool blas_layout(int64_t rows, int64_t cols, int64_t row_stride, int64_t col_stride, cpu::MatrixLayout& layout) {
  if ((cols == 1 || col_stride == 1) && (rows == 1 || row_stride >= std::max<int64_t>(1, cols))) {
    layout = {false, rows == 1 ? std::max<int64_t>(1, cols) : row_stride};
    return true;
  }
  if ((rows == 1 || row_stride == 1) && (cols == 1 || col_stride >= std::max<int64_t>(1, rows))) {
    layout = {true, cols == 1 ? std::max<int64_t>(1, rows) : col_stride};
    return true;
  }
  return false;
}

// t itself when the matrices of t ([..., rows, cols]) are BLAS-readable, else
// a row-major copy.  Plain copies: the forward pass records nothing inside.
Tensor blas_ready(const Tensor& t, cpu::MatrixLayout& layout) {
  const int d = t.dim();
  const int64_t rows = t.shape()[d - 2], cols = t.shape()[d - 1];
  if (blas_layout(rows, cols, t.strides()[d - 2], t.strides()[d - 1], layout)) return t;
  Tensor copy = Tensor::empty(t.shape(), t.dtype(), t.device());
  copy_elements(t, copy);
  layout = {false, std::max<int64_t>(1, cols)};
  return copy;
}

// Strides of t's batch dimensions seen from the broadcast batch shape: 0 where t is broadcast.
Strides batch_strides(const Tensor& t, const Shape& batch) {
  Strides strides(batch.size(), 0);
  const size_t lead = batch.size() - (t.dim() - 2);
  for (size_t i = lead; i < batch.size(); ++i)
    if (t.shape()[i - lead] != 1) strides[i] = t.strides()[i - lead];
  return strides;
}

// out = a · b (+ bias on every row) on a's device, matrix by matrix of the
// broadcast batch.   a: [..., M, K]   b: [..., K, N]   out: [batch..., M, N] contiguous
void run_batched_gemm(const Tensor& a, const cpu::MatrixLayout& la, const Tensor& b, const cpu::MatrixLayout& lb,
                      const Tensor& bias, const Tensor& out) {
  const Shape batch = batch_of(out);
  std::vector<int64_t> a_offsets, b_offsets;  // of each matrix, from a's and b's first elements
  for_each_offset2(batch, batch_strides(a, batch), 0, batch_strides(b, batch), 0,
                   [&](int64_t a_offset, int64_t b_offset) {
                     a_offsets.push_back(a_offset);
                     b_offsets.push_back(b_offset);
                   });
  const int64_t m = a.size(-2), n = b.size(-1), k = a.size(-1);
  if (!out.device().is_cpu())
    return kernels::device_kernels(out).matmul->batched_gemm(m, n, k, a, a_offsets, la, b, b_offsets, lb, bias, out);
  dispatch_floating(out.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const cpu::MatrixStack<T> a_stack{a.data<T>(), std::move(a_offsets), la},
        b_stack{b.data<T>(), std::move(b_offsets), lb};
    HEADROOM_CPU_KERNEL(batched_gemm)(m, n, k, a_stack, b_stack, data_or_null<T>(bias), out.data<T>());
  });
}

// a · b (+ bias on every row), both at least 2-D.   a: [..., M, K]   b: [..., K, N]
// -> [batch..., M, N] contiguous.
Tensor batched_product(const Tensor& a, const Tensor& b, const Tensor& bias) {
  cpu::MatrixLayout la, lb;
  Tensor a_ready = blas_ready(a, la), b_ready = blas_ready(b, lb);
  Tensor out = Tensor::empty(promoted_out_shape(a, b), a.dtype(), a.device());
  run_batched_gemm(a_ready, la, b_ready, lb, bias.defined() ? bias.contiguous() : bias, out);
  return out;
}

// The forward of matmul and linear; records nothing.
//   a: [..., M, K] or [K]   b: [..., K, N] or [K]   bias: [N] or undefined
Tensor product(const Tensor& a, const Tensor& b, const Tensor& bias) {
  Tensor a2 = promote_first(a), b2 = promote_second(b);
  const Shape shape = squeeze_promotions(promoted_out_shape(a2, b2), a, b);
  if (b2.dim() == 2 && a2.dim() > 2 && a2.is_contiguous()) {
    // [..., M, K] · [K, N]: the batch folds into the rows of one GEMM.
    const int64_t k = a2.size(-1);
    a2 = make_view(a2, {leading_rows(a2.shape()), k}, {k, 1}, a2.offset());
  }
  Tensor out = batched_product(a2, b2, bias);
  return shape == out.shape() ? out : make_view(out, shape, contiguous_strides(shape), 0);
}

// linear's forward: x [..., in] · weight_t [in, out] (+ bias) as one GEMM over
// x's rows, without matmul's 1-D promotions; a strided or 1-D x goes through product.
Tensor rows_product(const Tensor& x, const Tensor& weight_t, const Tensor& bias) {
  if (x.dim() < 2 || !x.is_contiguous()) return product(x, weight_t, bias);
  const int64_t in = x.size(-1);
  Tensor out = batched_product(make_view(x, {leading_rows(x.shape()), in}, {in, 1}, x.offset()), weight_t, bias);
  Shape shape = x.shape();
  shape.back() = weight_t.size(1);
  return make_view(out, shape, contiguous_strides(shape), 0);  // [..., out]
}

// One floating dtype, one device for all inputs.
void check_operands(const char* op, const std::vector<Tensor>& inputs) {
  check_floating(op, inputs[0]);
  for (const Tensor& t : inputs)
    HEADROOM_CHECK(t.dtype() == inputs[0].dtype(), "[", op, "] expected inputs of one dtype, got ", inputs[0].dtype(),
                   " and ", t.dtype());
  check_same_device(op, inputs);
}

// Batch dimensions (all but the last two) broadcast against each other.
bool batches_broadcast(const Tensor& a2, const Tensor& b2) {
  const Shape batch_a = batch_of(a2), batch_b = batch_of(b2);
  for (size_t i = 1; i <= std::min(batch_a.size(), batch_b.size()); ++i) {
    const int64_t da = batch_a[batch_a.size() - i], db = batch_b[batch_b.size() - i];
    if (da != db && da != 1 && db != 1) return false;
  }
  return true;
}

void check_matmul(const Tensor& a, const Tensor& b) {
  HEADROOM_CHECK(a.dim() >= 1 && b.dim() >= 1, "[matmul] both inputs need at least 1 dimension, got shapes ", a.shape(),
                 " and ", b.shape());
  check_operands("matmul", {a, b});
  const int64_t k = b.dim() == 1 ? b.size(0) : b.size(-2);
  HEADROOM_CHECK(a.size(-1) == k, "[matmul] last dimension of first input with shape ", a.shape(), " must match ",
                 b.dim() == 1 ? "the size of the 1-D second input" : "second-to-last dimension of second input",
                 " with shape ", b.shape());
  HEADROOM_CHECK(batches_broadcast(promote_first(a), promote_second(b)), "[matmul] batch dimensions of shapes ",
                 a.shape(), " and ", b.shape(), " cannot be broadcast together");
}

// dB = Aᵀ · g, summed over the batch dimensions b was broadcast along.
//   a2: [..., M, K]   g2: [batch..., M, N]   -> b2's shape [..., K, N]
Tensor grad_of_second(const Tensor& a2, const Tensor& g2, const Shape& b2_shape) {
  if (b2_shape.size() == 2 && a2.dim() > 2)  // b shared by the whole batch: one GEMM over all rows
    return matmul(a2.reshape({leading_rows(a2.shape()), a2.size(-1)}).t(),
                  g2.reshape({leading_rows(g2.shape()), g2.size(-1)}));
  return sum_to_shape(matmul(a2.t(), g2), b2_shape);
}

// db = the sum of g over its rows.   g_rows: [rows, out]   -> [out]
Tensor sum_rows(const Tensor& g_rows) {
  Tensor g = g_rows.contiguous();
  const int64_t rows = g.size(0), cols = g.size(1);
  Tensor out = Tensor::empty({cols}, g.dtype(), g.device());
  if (!g.device().is_cpu()) {
    kernels::device_kernels(g).matmul->sum_rows(g, out, rows, cols);
  } else {
    dispatch_floating(g.dtype(), [&](auto zero) {
      using T = decltype(zero);
      HEADROOM_CPU_KERNEL(sum_rows)(g.data<T>(), rows, cols, out.data<T>());
    });
  }
  return out;
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) {
  check_matmul(a, b);
  Tensor out = product(a, b, Tensor());  // [batch..., M, N], M or N dropped for 1-D inputs
  // dA = g · Bᵀ, dB = Aᵀ · g (summed over broadcast batch dimensions)
  autograd::record(out, "matmul", {a, b}, {a, b},
                   [](const autograd::Saved& s, const Tensor& g, autograd::Grads& grads) {
                     Tensor a2 = promote_first(s[0]), b2 = promote_second(s[1]);  // [..., M, K], [..., K, N]
                     Tensor g2 = g.reshape(promoted_out_shape(a2, b2));           // [batch..., M, N]
                     if (grads.wants(0))                                          // dA = g · Bᵀ   [..., M, K]
                       grads.add(0, sum_to_shape(matmul(g2, b2.t()), a2.shape()).reshape(s[0].shape()));
                     if (grads.wants(1))  // dB = Aᵀ · g   [..., K, N]
                       grads.add(1, grad_of_second(a2, g2, b2.shape()).reshape(s[1].shape()));
                   });
  return out;
}

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  HEADROOM_CHECK(x.dim() >= 1, "[linear] expected an input of shape [..., in], got ", x.shape());
  HEADROOM_CHECK(weight.dim() == 2, "[linear] expected a weight of shape [out, in], got ", weight.shape());
  check_operands("linear", bias.defined() ? std::vector<Tensor>{x, weight, bias} : std::vector<Tensor>{x, weight});
  const int64_t in = weight.size(1), out_features = weight.size(0);
  HEADROOM_CHECK(x.size(-1) == in, "[linear] last dimension of input with shape ", x.shape(),
                 " must match the in dimension (1) of weight with shape ", weight.shape());
  HEADROOM_CHECK(!bias.defined() || (bias.dim() == 1 && bias.size(0) == out_features),
                 "[linear] expected a bias of shape (", out_features, ") for weight with shape ", weight.shape(),
                 ", got ", bias.defined() ? bias.shape() : Shape{});

  // weightᵀ as a view: [in, out] with strides swapped, read by cblas with CblasTrans.
  Tensor weight_t = make_view(weight, {in, out_features}, {weight.stride(1), weight.stride(0)}, weight.offset());
  Tensor out = rows_product(x, weight_t, bias);  // [..., out]
  // dx = g · W, dW = gᵀ · x, db = Σ_rows g
  autograd::record(out, "linear", {x, weight, bias}, {x, weight},
                   [](const autograd::Saved& s, const Tensor& g, autograd::Grads& grads) {
                     const Tensor& x = s[0];                                           // [..., in]
                     const Tensor& w = s[1];                                           // [out, in]
                     Tensor g_rows = g.reshape({leading_rows(g.shape()), w.size(0)});  // [rows, out]
                     if (grads.wants(0)) grads.add(0, matmul(g, w));                   // dx = g · W   [..., in]
                     if (grads.wants(1))                                               // dW = gᵀ · x   [out, in]
                       grads.add(1, matmul(g_rows.t(), x.reshape({leading_rows(x.shape()), w.size(1)})));
                     if (grads.wants(2)) grads.add(2, sum_rows(g_rows));  // db = Σ_rows g   [out]
                   });
  return out;
}

}  // namespace headroom
