#pragma once
// CUDA attention kernels behind attention() and routed_attention(): the same
// query groups as the CPU kernels (ops/cpu/attention.h describes the problem,
// the row layout, the masks and the dropout draws), computed FlashAttention-2
// style: a thread block per query tile streams K/V blocks through shared
// memory with an online softmax, and backward recomputes P from the saved
// log-sum-exp (one kernel for dQ over query tiles, one for dK/dV over key
// blocks).  No float atomics: every output element is written by one thread.
// No CUDA headers here: ops/attention.cpp calls these through the interface.
#include "headroom/core/tensor.h"
#include "headroom/ops/cpu/attention.h"

namespace headroom::cuda {

// Largest head dimension the CUDA kernels take (a row of the accumulator
// lives in registers, d_h / 32 values per lane).
constexpr int64_t kMaxAttentionHeadDim = 256;

struct AttentionKernels {
  virtual ~AttentionKernels() = default;
  // As cpu::attention_forward.  q [R, d_h]; k, v [B, h_kv, S, d_h]; out [R, d_h];
  // lse [R]; all contiguous, f32 or f64, on one device.  p.key_padding, when
  // set, points to device memory (b8 [B, S]); p.groups and p.positions are host
  // vectors (copied to the device once per call).
  virtual void forward(const cpu::AttentionProblem& p, const Tensor& q, const Tensor& k, const Tensor& v,
                       const Tensor& out, const Tensor& lse) = 0;
  // As cpu::attention_backward: dout [R, d_h] → dq [R, d_h], dk, dv
  // [B, h_kv, S, d_h] (fully overwritten).  Same layout rules as forward.
  virtual void backward(const cpu::AttentionProblem& p, const Tensor& q, const Tensor& k, const Tensor& v,
                        const Tensor& out, const Tensor& lse, const Tensor& dout, const Tensor& dq,
                        const Tensor& dk, const Tensor& dv) = 0;
};

AttentionKernels& attention_kernels();  // throws without CUDA

}  // namespace headroom::cuda
