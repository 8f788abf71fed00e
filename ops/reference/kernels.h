#pragma once
// Reference kernels: the plain loop of each CPU kernel family, llm.c style.
// Each has the signature of the tuned headroom::cpu:: kernel it mirrors
// (ops/cpu/*.h says what the arguments mean) and none of its speed: no
// OpenMP, no BLAS, no SIMD, no tiling.  The tests compare the tuned kernels
// against these, and HEADROOM_REFERENCE_KERNELS=1 makes the ops call them
// instead (HEADROOM_CPU_KERNEL below; docs/architecture.md, "Reference kernels").
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <vector>

#include "headroom/core/error.h"
#include "headroom/core/rng.h"
#include "headroom/ops/kernels/attention.h"
#include "headroom/ops/kernels/matmul.h"
#include "headroom/ops/kernels/routing.h"

namespace headroom::reference {

// A value of HEADROOM_REFERENCE_KERNELS: "1" is on; "0", "" and unset
// (null) are off; any other value throws.
inline bool parse_reference_kernels(const char* value) {
  if (value == nullptr || *value == '\0' || std::strcmp(value, "0") == 0) return false;
  HEADROOM_CHECK(std::strcmp(value, "1") == 0, "[reference kernels] HEADROOM_REFERENCE_KERNELS='", value,
                 "' must be 1 (the reference kernels) or 0 (the tuned ones, as when it is empty or unset)");
  return true;
}

// HEADROOM_REFERENCE_KERNELS, read once (a bad value throws at every call).
inline bool use_reference_kernels() {
  static const bool on = parse_reference_kernels(std::getenv("HEADROOM_REFERENCE_KERNELS"));
  return on;
}

// ---- matmul (cpu::batched_gemm, cpu::sum_rows in ops/cpu/matmul.h) ----------------

// Element (r, c) of matrix i of a stack, row-major or transposed.
template <typename T> T stack_at(const kernels::MatrixStack<T>& s, size_t i, int64_t r, int64_t c) {
  return s.data[s.offsets[i] + (s.layout.transposed ? c * s.layout.ld + r : r * s.layout.ld + c)];
}

// c[i][r, j] = bias[j] + Σ_p a[i][r, p] · b[i][p, j]
//   a[i]: [m, k]   b[i]: [k, n]   bias: [n] or null   c: [batch, m, n]
template <typename T>
void batched_gemm(int64_t m, int64_t n, int64_t k, const kernels::MatrixStack<T>& a, const kernels::MatrixStack<T>& b,
                  const T* bias, T* c) {
  for (size_t i = 0; i < a.offsets.size(); ++i)
    for (int64_t r = 0; r < m; ++r)
      for (int64_t j = 0; j < n; ++j) {
        T sum = 0;
        for (int64_t p = 0; p < k; ++p) sum += stack_at(a, i, r, p) * stack_at(b, i, p, j);
        c[(int64_t(i) * m + r) * n + j] = sum + (bias ? bias[j] : T(0));
      }
}

// out[j] = Σ_i g[i, j]   g: [rows, cols]   out: [cols]
template <typename T> void sum_rows(const T* g, int64_t rows, int64_t cols, T* out) {
  for (int64_t j = 0; j < cols; ++j) {
    T sum = 0;
    for (int64_t i = 0; i < rows; ++i) sum += g[i * cols + j];
    out[j] = sum;
  }
}

// ---- softmax / log_softmax over the last dimension (ops/cpu/nn.h) --------------------

// y = exp(x − max) / Σ exp(x − max);  log: y = x − max − log Σ exp(x − max).
//   x, y: [rows, n]; a row of all −inf gives 0 (log: −inf).
template <typename T> void softmax_forward(const T* x, T* y, int64_t rows, int64_t n, bool log) {
  const T inf = std::numeric_limits<T>::infinity();
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * n;
    T* yr = y + r * n;
    T max = -inf, sum = 0;
    for (int64_t j = 0; j < n; ++j) max = std::max(max, xr[j]);
    if (max == -inf) {  // every entry −inf
      std::fill(yr, yr + n, log ? -inf : T(0));
      continue;
    }
    for (int64_t j = 0; j < n; ++j) sum += std::exp(xr[j] - max);
    for (int64_t j = 0; j < n; ++j) yr[j] = log ? xr[j] - max - std::log(sum) : std::exp(xr[j] - max) / sum;
  }
}

// softmax: dx = y ⊙ (dy − Σ y⊙dy);  log_softmax: dx = dy − exp(y) · Σ dy.   y, dy, dx: [rows, n]
template <typename T> void softmax_backward(const T* y, const T* dy, T* dx, int64_t rows, int64_t n, bool log) {
  for (int64_t r = 0; r < rows; ++r) {
    const T *yr = y + r * n, *gr = dy + r * n;
    T sum = 0;
    for (int64_t j = 0; j < n; ++j) sum += log ? gr[j] : yr[j] * gr[j];
    for (int64_t j = 0; j < n; ++j) dx[r * n + j] = log ? gr[j] - std::exp(yr[j]) * sum : yr[j] * (gr[j] - sum);
  }
}

// ---- layer_norm (center) and rms_norm (!center) over the last dimension (ops/cpu/nn.h) ----

// y = (x − mean) · rstd · weight + bias,  rstd = 1 / sqrt(mean((x − mean)²) + eps); rms_norm: mean = 0.
//   x, y: [rows, d]   weight, bias: [d] or null   mean, rstd: [rows]
template <typename T>
void norm_forward(const T* x, const T* weight, const T* bias, T* y, T* mean, T* rstd, int64_t rows, int64_t d,
                  double eps, bool center) {
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * d;
    T mu = 0, var = 0;
    for (int64_t j = 0; j < d && center; ++j) mu += xr[j] / T(d);
    for (int64_t j = 0; j < d; ++j) var += (xr[j] - mu) * (xr[j] - mu) / T(d);
    mean[r] = mu;
    rstd[r] = T(1 / std::sqrt(double(var) + eps));
    for (int64_t j = 0; j < d; ++j)
      y[r * d + j] = (xr[j] - mu) * rstd[r] * (weight ? weight[j] : T(1)) + (bias ? bias[j] : T(0));
  }
}

// With x̂ = (x − mean) · rstd and g = dy ⊙ weight:
//   dx = rstd · (g − mean(g) − x̂ · mean(g ⊙ x̂))  (rms_norm: without − mean(g))
//   dweight = Σ_rows dy ⊙ x̂,  dbias = Σ_rows dy.   dy, dx: [rows, d]; dx, dweight, dbias may be null
template <typename T>
void norm_backward(const T* x, const T* weight, const T* mean, const T* rstd, const T* dy, T* dx, T* dweight, T* dbias,
                   int64_t rows, int64_t d, bool center) {
  if (dweight) std::fill(dweight, dweight + d, T(0));
  if (dbias) std::fill(dbias, dbias + d, T(0));
  for (int64_t r = 0; r < rows; ++r) {
    const T *xr = x + r * d, *gr = dy + r * d;
    T mean_g = 0, mean_gx = 0;
    for (int64_t j = 0; j < d; ++j) {
      const T g = gr[j] * (weight ? weight[j] : T(1)), xhat = (xr[j] - mean[r]) * rstd[r];
      mean_g += center ? g / T(d) : T(0);
      mean_gx += g * xhat / T(d);
      if (dweight) dweight[j] += gr[j] * xhat;
      if (dbias) dbias[j] += gr[j];
    }
    for (int64_t j = 0; j < d && dx; ++j) {
      const T g = gr[j] * (weight ? weight[j] : T(1)), xhat = (xr[j] - mean[r]) * rstd[r];
      dx[r * d + j] = rstd[r] * (g - mean_g - xhat * mean_gx);
    }
  }
}

// ---- attention, dense and routed (ops/cpu/attention.h; the problem: ops/kernels/attention.h) ----
// The whole problem: query groups, row_of, row_heads, h_kv = 1, causal with
// offset, key padding and dropout, materialising one row of P at a time.

// Row i of group g: the caller's row, its head and query position, and where its K/V head starts.
struct AttentionRow {
  int64_t row, head, t, kv;
};
inline AttentionRow attention_row(const kernels::AttentionProblem& p, const kernels::AttentionGroup& g, int64_t i) {
  const int64_t head = p.row_heads.empty() ? g.head : p.row_heads[i];
  const int64_t kv = g.batch * p.kv_strides[0] + (p.kv_heads == 1 ? 0 : head) * p.kv_strides[1];
  return {p.row_of ? p.row_of[i] : i, head, p.positions[i], kv};
}

// prob[s] = exp(scale · q·k_s − lse), 0 where masked; returns lse = log Σ_visible exp(scale · q·k_s)
// (+inf when no key is visible).  With `lse` given (backward), uses it instead.
template <typename T>
T attention_probs(const kernels::AttentionProblem& p, const kernels::AttentionGroup& g, const AttentionRow& r,
                  const T* q, const T* k, T* prob, const T* lse = nullptr) {
  const T inf = std::numeric_limits<T>::infinity();
  T max = -inf, sum = 0;
  for (int64_t s = 0; s < p.num_keys; ++s) {
    const bool masked =
        (p.causal && s > r.t + p.causal_offset) || (p.key_padding && p.key_padding[g.batch * p.num_keys + s]);
    T dot = 0;
    for (int64_t c = 0; c < p.d_h; ++c) dot += q[r.row * p.d_h + c] * k[r.kv + s * p.kv_strides[2] + c];
    prob[s] = masked ? -inf : T(p.scale) * dot;
    max = std::max(max, prob[s]);
  }
  for (int64_t s = 0; s < p.num_keys; ++s) sum += max == -inf ? T(0) : std::exp(prob[s] - max);
  const T row_lse = lse ? lse[r.row] : max == -inf ? inf : max + std::log(sum);
  for (int64_t s = 0; s < p.num_keys; ++s) prob[s] = std::exp(prob[s] - row_lse);
  return row_lse;
}

// The dropout factor of P[row, s]: 0 (dropped) or 1 / (1 − dropout); draw (b, head, t, s) as in the problem.
template <typename T>
T attention_keep(const kernels::AttentionProblem& p, const kernels::AttentionGroup& g, const AttentionRow& r,
                 int64_t s) {
  if (p.dropout <= 0) return T(1);
  const uint64_t draw = p.dropout_first + uint64_t(((g.batch * p.heads + r.head) * p.seq_len + r.t) * p.num_keys + s);
  return Generator(p.dropout_seed).uniform_at(draw) >= p.dropout ? T(1 / (1 - p.dropout)) : T(0);
}

// out = dropout(softmax(scale · q kᵀ + mask)) v,  lse = log Σ exp(scale · q kᵀ + mask)
//   q, out: [R, d_h]   k, v: [B, h_kv, S, d_h] strided as p.kv_strides   lse: [R]
template <typename T>
void attention_forward(const kernels::AttentionProblem& p, const T* q, const T* k, const T* v, T* out, T* lse) {
  std::vector<T> prob(p.num_keys);
  for (const kernels::AttentionGroup& g : p.groups)
    for (int64_t i = g.row_begin; i < g.row_end; ++i) {
      const AttentionRow r = attention_row(p, g, i);
      lse[r.row] = attention_probs(p, g, r, q, k, prob.data());
      for (int64_t c = 0; c < p.d_h; ++c) {
        T sum = 0;
        for (int64_t s = 0; s < p.num_keys; ++s)
          sum += prob[s] * attention_keep<T>(p, g, r, s) * v[r.kv + s * p.kv_strides[2] + c];
        out[r.row * p.d_h + c] = sum;
      }
    }
}

// With P = exp(scores − lse) and P̃ = P ⊙ keep (dropout):
//   dv_s += P̃_s · dout,  dS_s = P_s · (keep_s · dout·v_s − dout·out),
//   dq = scale · Σ_s dS_s k_s,  dk_s += scale · dS_s q
//   dout, dq: [R, d_h]   dk, dv: [B, h_kv, S, d_h] contiguous, overwritten
template <typename T>
void attention_backward(const kernels::AttentionProblem& p, const T* q, const T* k, const T* v, const T* out,
                        const T* lse, const T* dout, T* dq, T* dk, T* dv) {
  const int64_t S = p.num_keys, d = p.d_h, kv_size = p.batch * p.kv_heads * S * d;
  std::fill(dk, dk + kv_size, T(0));
  std::fill(dv, dv + kv_size, T(0));
  std::vector<T> prob(S);
  for (const kernels::AttentionGroup& g : p.groups)
    for (int64_t i = g.row_begin; i < g.row_end; ++i) {
      const AttentionRow r = attention_row(p, g, i);
      attention_probs(p, g, r, q, k, prob.data(), lse);
      const T *dout_r = dout + r.row * d, *q_r = q + r.row * d;
      const int64_t dkv = (g.batch * p.kv_heads + (p.kv_heads == 1 ? 0 : r.head)) * S * d;  // contiguous dk, dv
      T delta = 0;                                                                          // dout · out
      for (int64_t c = 0; c < d; ++c) delta += dout_r[c] * out[r.row * d + c];
      std::fill(dq + r.row * d, dq + (r.row + 1) * d, T(0));
      for (int64_t s = 0; s < S; ++s) {
        const T keep = attention_keep<T>(p, g, r, s);
        T dp = 0;  // dout · v_s
        for (int64_t c = 0; c < d; ++c) dp += dout_r[c] * v[r.kv + s * p.kv_strides[2] + c];
        const T ds = prob[s] * (keep * dp - delta);
        for (int64_t c = 0; c < d; ++c) {
          dq[r.row * d + c] += T(p.scale) * ds * k[r.kv + s * p.kv_strides[2] + c];
          dk[dkv + s * d + c] += T(p.scale) * ds * q_r[c];
          dv[dkv + s * d + c] += prob[s] * keep * dout_r[c];
        }
      }
    }
}

// ---- gather / scatter of rows (ops/cpu/routing.h) --------------------------------------

// out[r] = scale[pair[r]] · src[pair[r] / group]   src: [*, width]  out: [out_rows, width]  scale: [*] or null
template <typename T>
void gather_rows(const T* src, int64_t width, const int32_t* pair, int64_t group, const T* scale, int64_t out_rows,
                 T* out) {
  for (int64_t r = 0; r < out_rows; ++r)
    for (int64_t c = 0; c < width; ++c)
      out[r * width + c] = (scale ? scale[pair[r]] : T(1)) * src[pair[r] / group * width + c];
}

// out[d] = Σ_{q ∈ [starts[d], starts[d+1])} weight[q] · src[row[q]]   (weight null: 1)
//   src: [*, width]  out: [dests, width]  starts: [dests + 1]
template <typename T>
void sum_rows(const T* src, int64_t width, const int32_t* starts, const int32_t* row, const T* weight, int64_t dests,
              T* out) {
  for (int64_t d = 0; d < dests; ++d)
    for (int64_t c = 0; c < width; ++c) {
      T sum = 0;
      for (int64_t q = starts[d]; q < starts[d + 1]; ++q) sum += (weight ? weight[q] : T(1)) * src[row[q] * width + c];
      out[d * width + c] = sum;
    }
}

// ---- grouped matmuls over the segments of a plan (ops/cpu/routing.h) ----------------------
// offsets: [segments + 1]; w: [E, in, out]; rows of segment e are [offsets[e], offsets[e+1]).

// y = x · w[e]: [out] from x [in];  transpose_w: y = x · w[e]ᵀ: [in] from x [out].  w_e: [in, out]
template <typename T>
void row_times_weight(const T* x, const T* w_e, int64_t in, int64_t out_features, bool transpose_w, T* y) {
  for (int64_t j = 0; j < (transpose_w ? in : out_features); ++j) {
    T sum = 0;
    for (int64_t c = 0; c < (transpose_w ? out_features : in); ++c)
      sum += x[c] * (transpose_w ? w_e[j * out_features + c] : w_e[c * out_features + j]);
    y[j] = sum;
  }
}

// out[r] = x[r] · w[e] for every row r of segment e.   out: [R, out or in]
template <typename T>
void segment_matmul(const kernels::GroupedRows::Raw<T>& x, const T* w, const int32_t* offsets, int64_t segments,
                    int64_t in, int64_t out_features, bool transpose_w, T* out) {
  const int64_t width = transpose_w ? in : out_features;
  for (int64_t e = 0; e < segments; ++e)
    for (int64_t r = offsets[e]; r < offsets[e + 1]; ++r)
      row_times_weight(x.row(r), w + e * in * out_features, in, out_features, transpose_w, out + r * width);
}

// out[order[r] / k] += gates[order[r]] · y[r] · w[e], segments ascending (gates null: 1).
//   y: [R, out or in]  order: [R]  out: [tokens, in or out]
template <typename T>
void segment_matmul_scatter(const T* y, const int32_t* order, int64_t k, const int32_t* offsets, int64_t segments,
                            const T* w, int64_t in, int64_t out_features, bool transpose_w, int64_t tokens, T* out,
                            const T* gates = nullptr) {
  const int64_t y_width = transpose_w ? out_features : in, width = transpose_w ? in : out_features;
  std::vector<T> product(width);
  std::fill(out, out + tokens * width, T(0));
  for (int64_t e = 0; e < segments; ++e)
    for (int64_t r = offsets[e]; r < offsets[e + 1]; ++r) {
      row_times_weight(y + r * y_width, w + e * in * out_features, in, out_features, transpose_w, product.data());
      const T gate = gates ? gates[order[r]] : T(1);
      for (int64_t j = 0; j < width; ++j) out[order[r] / k * width + j] += gate * product[j];
    }
}

// dw[e][i, j] = Σ_{r in segment e} x[r][i] · dy[r][j]; zero for empty segments.   dw: [E, in, out]
template <typename T>
void segment_matmul_weight_grad(const kernels::GroupedRows::Raw<T>& x, const kernels::GroupedRows::Raw<T>& dy,
                                const int32_t* offsets, int64_t segments, int64_t in, int64_t out_features, T* dw) {
  std::fill(dw, dw + segments * in * out_features, T(0));
  for (int64_t e = 0; e < segments; ++e)
    for (int64_t r = offsets[e]; r < offsets[e + 1]; ++r)
      for (int64_t i = 0; i < in; ++i)
        for (int64_t j = 0; j < out_features; ++j) dw[(e * in + i) * out_features + j] += x.row(r)[i] * dy.row(r)[j];
}

}  // namespace headroom::reference

// A CPU kernel call in ops/*.cpp: HEADROOM_CPU_KERNEL(softmax_forward)(x, y, rows, n, log) runs
// cpu::softmax_forward, or reference::softmax_forward under HEADROOM_REFERENCE_KERNELS=1.
#define HEADROOM_CPU_KERNEL(kernel)                                                             \
  [&](auto&&... args) {                                                                         \
    if (::headroom::reference::use_reference_kernels()) ::headroom::reference::kernel(args...); \
    else ::headroom::cpu::kernel(args...);                                                      \
  }
