#pragma once
// Loops that go to the OpenMP threads only when the work is worth it.
//
// `#pragma omp parallel for if (cond)` still enters libgomp when cond is
// false, and such a region costs microseconds (a futex call when the other
// thread sleeps; `bench_ops --only dispatch` measures it, numbers in
// docs/performance.md).  A layer that runs a router's ops on [N, E] tensors
// pays it dozens of times per step.
// These helpers run small work as a plain loop on the calling thread instead.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "headroom/core/cpu_dispatch.h"

namespace headroom::cpu {

// Element-wise loops, reductions, fills and copies over fewer elements than
// this stay on one thread: a region costs a few microseconds, a pass over 32k
// floats tens (autograd's copies of [N, d]-sized gradients, and cat, had run on
// one thread while the other waited).
constexpr int64_t kParallelMin = 1 << 15;

// body(i) for i in [0, n): split over the threads (static schedule) when
// `parallel`, else a plain loop.  Both loops, with the body inlined, get AVX2 and
// AVX-512 clones (cpu_dispatch.h): the element-wise kernels' loops are these.
template <typename Body> HEADROOM_CPU_CLONES void parallel_for(int64_t n, bool parallel, const Body& body) {
  if (!parallel) {
    for (int64_t i = 0; i < n; ++i) body(i);
    return;
  }
#pragma omp parallel for
  for (int64_t i = 0; i < n; ++i) body(i);
}

// body(begin, end) over [0, n) in chunks of `chunk` elements, the chunks split
// over the threads when `parallel`: fills and copies keep a plain std::fill or
// memset per chunk.
template <typename Body> void parallel_chunks(int64_t n, int64_t chunk, bool parallel, const Body& body) {
  parallel_for((n + chunk - 1) / chunk, parallel, [&](int64_t i) { body(i * chunk, std::min(n, (i + 1) * chunk)); });
}

// The same with per-thread scratch: each thread makes its own with
// make_scratch() once and reuses it, body(scratch, i).  (The form above is
// not written through this one: with an empty scratch passed along, GCC
// compiled the elementwise loops 15-20% slower, e.g. gt of [16k] 18.7 ->
// 22.8 µs.)
template <typename MakeScratch, typename Body>
HEADROOM_CPU_CLONES void parallel_for(int64_t n, bool parallel, const MakeScratch& make_scratch, const Body& body) {
  if (!parallel) {
    auto scratch = make_scratch();
    for (int64_t i = 0; i < n; ++i) body(scratch, i);
    return;
  }
#pragma omp parallel
  {
    auto scratch = make_scratch();
#pragma omp for
    for (int64_t i = 0; i < n; ++i) body(scratch, i);
  }
}

// A buffer of the calling thread that persists across calls (OpenMP keeps its
// threads): a fresh multi-page block per call would cost a page fault per
// 4 KiB, tens of microseconds each on our VMs (core/backend.cpp).  Slots are
// independent buffers of one element type: the routing ops use 0 and 1 for
// operands they hold at the same time, indexed_gemm_tn uses 2 for b's panel.
template <typename T> T* thread_buffer(int slot, int64_t size) {
  thread_local std::vector<T> buffers[3];
  std::vector<T>& buffer = buffers[slot];
  if (int64_t(buffer.size()) < size) buffer.resize(size);
  return buffer.data();
}

}  // namespace headroom::cpu
