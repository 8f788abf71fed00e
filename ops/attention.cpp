// Attention: validation, the query groups of the dense and routed forms, and
// the one recorded op both go through (backward below its forward).
#include "headroom/ops/attention.h"

#include <cmath>
#include <memory>

#include "headroom/autograd/node.h"
#include "headroom/ops/cpu/attention.h"
#include "headroom/ops/kernels/attention.h"
#include "headroom/ops/kernels/registry.h"
#include "headroom/ops/reference/kernels.h"
#include "headroom/ops/routing.h"

namespace headroom {
namespace {

using cpu::AttentionGroup;
using cpu::AttentionProblem;

// k, v [B, h_kv, S, d_h] with h_kv == h or 1, of q's dtype and device; the mask
// b8 [B, S]; the option values in range.
void check_inputs(const char* op, const Tensor& q, const Tensor& k, const Tensor& v, int64_t batch, int64_t heads,
                  int64_t d_h, const AttentionOptions& opts) {
  check_floating(op, q, "q");
  check_dtype(op, k, q.dtype(), "k");
  check_dtype(op, v, q.dtype(), "v");
  check_same_device(op, {q, k, v});
  HEADROOM_CHECK(d_h >= 1, "[", op, "] head dimension d_h must be >= 1, got q of shape ", shape_str(q.shape()));
  const int64_t max_d_h = q.device().is_cpu() ? d_h : kernels::device_kernels(q).attention->max_head_dim();
  HEADROOM_CHECK(d_h <= max_d_h, "[", op, "] the ", q.device(), " kernels take a head dimension d_h <= ", max_d_h,
                 ", got ", d_h);
  HEADROOM_CHECK(k.dim() == 4 && k.size(0) == batch && k.size(3) == d_h, "[", op, "] expected k of shape [B=", batch,
                 ", h_kv, S, d_h=", d_h, "], got ", shape_str(k.shape()));
  HEADROOM_CHECK(v.shape() == k.shape(), "[", op, "] expected v of the shape of k ", shape_str(k.shape()), ", got ",
                 shape_str(v.shape()));
  HEADROOM_CHECK(k.size(1) == heads || k.size(1) == 1, "[", op, "] k and v must have h_kv == h (", heads,
                 ") or 1 heads, got h_kv = ", k.size(1));
  const Tensor& mask = opts.key_padding_mask;
  if (mask.defined()) {
    check_dtype(op, mask, DType::b8, "key_padding_mask");
    check_same_device(op, {q, mask});
    HEADROOM_CHECK(mask.dim() == 2 && mask.size(0) == batch && mask.size(1) == k.size(2), "[", op,
                   "] expected key_padding_mask of shape [B=", batch, ", S=", k.size(2), "], got ",
                   shape_str(mask.shape()));
  }
  HEADROOM_CHECK(opts.dropout >= 0 && opts.dropout < 1, "[", op, "] dropout must be in [0, 1), got ", opts.dropout);
  HEADROOM_CHECK(std::isfinite(opts.scale), "[", op, "] scale must be finite, got ", opts.scale);
}

// Everything but the groups and positions; reserves the dropout draws.
AttentionProblem make_problem(const Tensor& k, int64_t heads, int64_t seq_len, int64_t d_h,
                              const AttentionOptions& opts) {
  AttentionProblem p;
  p.batch = k.size(0);
  p.d_h = d_h;
  p.heads = heads;
  p.kv_heads = k.size(1);
  p.seq_len = seq_len;
  p.num_keys = k.size(2);
  p.scale = opts.scale != 0 ? opts.scale : 1 / std::sqrt(double(d_h));
  p.causal = opts.causal;
  p.causal_offset = opts.causal_offset;
  p.dropout = opts.dropout;
  if (opts.dropout > 0) {
    Generator& gen = opts.generator ? *opts.generator : default_generator();
    p.dropout_seed = gen.seed();
    p.dropout_first = gen.reserve(uint64_t(p.batch * heads * seq_len * p.num_keys));
  }
  return p;
}

// The kernels of q's device.  q [R, d_h]; k, v [B, h_kv, S, d_h] (as
// p.kv_strides says); out [R, d_h]; lse [R], contiguous; p.key_padding on
// the same device.
void run_forward(const AttentionProblem& p, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                 const Tensor& lse) {
  if (!q.device().is_cpu()) return kernels::device_kernels(q).attention->forward(p, q, k, v, out, lse);
  dispatch_floating(q.dtype(), [&](auto tag) {
    using T = decltype(tag);
    HEADROOM_CPU_KERNEL(attention_forward)(p, q.data<T>(), k.data<T>(), v.data<T>(), out.data<T>(), lse.data<T>());
  });
}

// dout [R, d_h] → dq [R, d_h], dk, dv [B, h_kv, S, d_h].
void run_backward(const AttentionProblem& p, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                  const Tensor& lse, const Tensor& dout, const Tensor& dq, const Tensor& dk, const Tensor& dv) {
  if (!q.device().is_cpu())
    return kernels::device_kernels(q).attention->backward(p, q, k, v, out, lse, dout, dq, dk, dv);
  dispatch_floating(q.dtype(), [&](auto tag) {
    using T = decltype(tag);
    HEADROOM_CPU_KERNEL(attention_backward)
    (p, q.data<T>(), k.data<T>(), v.data<T>(), out.data<T>(), lse.data<T>(), dout.data<T>(), dq.data<T>(), dk.data<T>(),
     dv.data<T>());
  });
}

// The op both forms share.  q_rows [R, d_h]; k, v [B, h_kv, S, d_h] → [R, d_h].
// The problem's rows are in the kernel's order; q and the result in the
// caller's, which row_of (i32 [R], CPU only) maps kernel rows to when the two
// differ (undefined: the same order).
Tensor attention_rows(const char* op, const Tensor& q_rows, const Tensor& k, const Tensor& v, AttentionProblem problem,
                      const Tensor& key_padding_mask, const Tensor& row_of = Tensor()) {
  // The kernels read K and V in place when they share a layout with
  // contiguous rows: MoA's are column slices of one projection, a KV cache's
  // the valid prefix of its storage (models/attention.h).
  const bool kv_in_place = k.strides() == v.strides() && k.strides()[3] == 1;
  Tensor q_c = q_rows.contiguous(), k_c = kv_in_place ? k : k.contiguous(), v_c = kv_in_place ? v : v.contiguous();
  for (int i = 0; i < 3; ++i) problem.kv_strides[i] = k_c.strides()[i];
  Tensor mask = key_padding_mask.defined() ? key_padding_mask.contiguous() : Tensor();
  problem.key_padding = mask.defined() ? mask.data<uint8_t>() : nullptr;
  problem.row_of = row_of.defined() ? row_of.data<int32_t>() : nullptr;
  Tensor out = Tensor::empty(q_c.shape(), q_c.dtype(), q_c.device());    // [R, d_h]
  Tensor lse = Tensor::empty({q_c.size(0)}, q_c.dtype(), q_c.device());  // [R]: log-sum-exp of each row's scores
  run_forward(problem, q_c, k_c, v_c, out, lse);

  // Backward recomputes P from q, k and lse (cpu/attention.h).
  auto shared = std::make_shared<const AttentionProblem>(std::move(problem));
  // P = softmax(q kᵀ·scale + mask): dv = Pᵀ g, dP = g vᵀ, dS = P ⊙ (dP − rowsum(g ⊙ out)), dq = dS k·scale, dk = dSᵀ
  // q·scale
  autograd::record(out, op, {q_c, k_c, v_c}, {q_c, k_c, v_c, out.detach(), lse, mask, row_of},
                   [shared](const autograd::Saved& s, const Tensor& g, autograd::Grads& grads) {
                     const Tensor &q = s[0], &k = s[1], &v = s[2], &out = s[3], &lse = s[4], &mask = s[5],
                                  &row_of = s[6];
                     AttentionProblem p = *shared;
                     p.key_padding = mask.defined() ? mask.data<uint8_t>() : nullptr;
                     p.row_of = row_of.defined() ? row_of.data<int32_t>() : nullptr;
                     Tensor dq = Tensor::empty(q.shape(), q.dtype(), q.device());  // [R, d_h]
                     Tensor dk = Tensor::empty(k.shape(), k.dtype(), k.device());  // [B, h_kv, S, d_h]
                     Tensor dv = Tensor::empty(v.shape(), v.dtype(), v.device());
                     run_backward(p, q, k, v, out, lse, g.contiguous(), dq, dk, dv);
                     if (grads.wants(0)) grads.add(0, dq);
                     if (grads.wants(1)) grads.add(1, dk);
                     if (grads.wants(2)) grads.add(2, dv);
                   });
  return out;
}

}  // namespace

Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& opts) {
  HEADROOM_CHECK(q.dim() == 4, "[attention] expected q of shape [B, h, T, d_h], got ", shape_str(q.shape()));
  const int64_t batch = q.size(0), heads = q.size(1), seq_len = q.size(2), d_h = q.size(3);
  check_inputs("attention", q, k, v, batch, heads, d_h, opts);

  // One group per (b, head): rows (b*h + head)*T + t of q viewed as [B*h*T, d_h].
  AttentionProblem p = make_problem(k, heads, seq_len, d_h, opts);
  for (int64_t bh = 0; bh < batch * heads; ++bh) {
    p.groups.push_back({bh * seq_len, (bh + 1) * seq_len, bh / heads, bh % heads});
    for (int64_t t = 0; t < seq_len; ++t) p.positions.push_back(int32_t(t));
  }
  Tensor out =
      attention_rows("attention", q.reshape({batch * heads * seq_len, d_h}), k, v, std::move(p), opts.key_padding_mask);
  return out.view({batch, heads, seq_len, d_h});
}

Tensor routed_attention(const Tensor& q_rows, const Tensor& k, const Tensor& v, const RoutePlan& plan, int64_t seq_len,
                        const AttentionOptions& opts) {
  const char* op = "routed_attention";
  HEADROOM_CHECK(q_rows.dim() == 2 && q_rows.size(0) == plan.rows(), "[", op,
                 "] expected q_rows of shape [plan.rows()=", plan.rows(), ", d_h], got ", shape_str(q_rows.shape()));
  HEADROOM_CHECK(k.dim() == 4, "[", op, "] expected k of shape [B, h_kv, S, d_h], got ", shape_str(k.shape()));
  HEADROOM_CHECK(seq_len >= 1 && plan.num_tokens == k.size(0) * seq_len, "[", op, "] plan has ", plan.num_tokens,
                 " tokens but B*T = ", k.size(0), "*", seq_len);
  const int64_t heads = plan.num_segments, d_h = q_rows.size(1);
  check_inputs(op, q_rows, k, v, k.size(0), heads, d_h, opts);
  plan.check_usable(op, q_rows.device());

  AttentionProblem p = make_problem(k, heads, seq_len, d_h, opts);
  const bool shared_kv = k.size(1) == 1;
  if (shared_kv && q_rows.device().is_cpu()) {
    // With one K/V head for all heads (MoA), a row's output depends only on its
    // query and its token, so the CPU kernel takes the rows in token order:
    // one group per batch, sorted by position, k rows per position, whose
    // tiles meet the causal diagonal as dense attention's do.  Grouped by head,
    // a tile's rows would spread over the whole sequence, most key blocks
    // seen by only part of it (1.15-1.2x slower for MoA at T = 256).
    const std::vector<int32_t> segment = plan.segment.to_vector<int32_t>(),
                               position = plan.position.to_vector<int32_t>();
    for (int64_t b = 0; b < k.size(0); ++b)
      p.groups.push_back({b * seq_len * plan.k, (b + 1) * seq_len * plan.k, b, 0});
    for (int64_t pair = 0; pair < plan.rows(); ++pair) {  // pair = token * k + slot
      p.positions.push_back(int32_t(pair / plan.k % seq_len));
      p.row_heads.push_back(segment[position[pair]]);
    }
    return attention_rows(op, q_rows, k, v, std::move(p), opts.key_padding_mask, plan.position.contiguous());
  }
  // One group per (segment = head, batch): route() keeps a segment's rows in
  // token order, so each batch's rows form one run, sorted by position.  The
  // groups are built on the host (a copy of the plan's offsets and order when
  // it lives on the device).
  p.positions.resize(plan.rows());
  const std::vector<int32_t> offsets = plan.offsets.to_vector<int32_t>(), order = plan.order.to_vector<int32_t>();
  for (int64_t head = 0; head < heads; ++head) {
    for (int64_t r = offsets[head]; r < offsets[head + 1]; ++r) {
      const int64_t token = order[r] / plan.k, batch = token / seq_len;
      p.positions[r] = int32_t(token % seq_len);
      if (r == offsets[head] || batch != p.groups.back().batch) p.groups.push_back({r, r, batch, head});
      p.groups.back().row_end = r + 1;
    }
  }
  return attention_rows(op, q_rows, k, v, std::move(p), opts.key_padding_mask);
}

}  // namespace headroom
