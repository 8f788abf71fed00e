#pragma once
// The attention problem both backends solve (the query groups, the masks and
// the dropout draws: ops/cpu/attention.h explains the row layout), and the
// interface of a device's attention kernels.
//
// CUDA (cuda/attention.cu) computes the same query groups FlashAttention-2
// style: a thread block per query tile streams K/V blocks through shared
// memory with an online softmax, and backward recomputes P from the saved
// log-sum-exp (one kernel for dQ over query tiles, one for dK/dV over key
// blocks).  No float atomics: every output element is written by one thread.
#include <cstdint>
#include <vector>

#include "headroom/core/tensor.h"

namespace headroom::kernels {

struct AttentionGroup {
  int64_t row_begin = 0, row_end = 0;  // rows [row_begin, row_end) of q
  int64_t batch = 0, head = 0;
};

struct AttentionProblem {
  int64_t batch = 0;  // B
  int64_t d_h = 0;
  int64_t heads = 0;     // h
  int64_t kv_heads = 0;  // h_kv: h, or 1 (every head reads K/V head 0)
  int64_t seq_len = 0;   // T: query positions per sequence (dropout index)
  int64_t num_keys = 0;  // S
  double scale = 1;
  bool causal = false;
  int64_t kv_strides[3] = {0, 0, 0};             // K and V element (b, head, s, c) at b·[0] + head·[1] + s·[2] + c
  int64_t causal_offset = 0;                     // key s visible to position t iff s <= t + offset
  const uint8_t* key_padding = nullptr;          // [B, S], 1 = never attended; null = none
  double dropout = 0;                            // drop probability on P
  uint64_t dropout_seed = 0, dropout_first = 0;  // element (b, head, t, s) uses draw
                                                 // first + ((b*h + head)*T + t)*S + s
                                                 // (cpu::dropout_apply's convention)
  std::vector<AttentionGroup> groups;
  std::vector<int32_t> positions;   // [R]: query position t of each row
  std::vector<int32_t> row_heads;   // [R]: the head of each row, when a group mixes heads
                                    // (K/V shared); empty: every row has its group's head
  const int32_t* row_of = nullptr;  // [R]: the caller's row (of q, out, lse, dout, dq) that
                                    // kernel row i stands for, when the kernel takes the rows
                                    // in another order; null: the same order
};

struct AttentionKernels {
  virtual ~AttentionKernels() = default;
  // Largest head dimension d_h the kernels take (CUDA: a row of the
  // accumulator lives in registers, d_h / 32 values per lane).
  virtual int64_t max_head_dim() const = 0;
  // As cpu::attention_forward (ops/cpu/attention.h).  q [R, d_h]; k, v [B, h_kv, S, d_h] laid out as
  // p.kv_strides says (rows of d_h contiguous); out [R, d_h]; lse [R]; all
  // but k and v contiguous, f32 or f64, on one device.  p.key_padding, when
  // set, points to device memory (b8 [B, S]); p.groups and p.positions are host
  // vectors (copied to the device once per call).
  virtual void forward(const AttentionProblem& p, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                       const Tensor& lse) = 0;
  // As cpu::attention_backward: dout [R, d_h] → dq [R, d_h], dk, dv
  // [B, h_kv, S, d_h] (fully overwritten).  Same layout rules as forward.
  virtual void backward(const AttentionProblem& p, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                        const Tensor& lse, const Tensor& dout, const Tensor& dq, const Tensor& dk,
                        const Tensor& dv) = 0;
};

}  // namespace headroom::kernels
