#include "headroom/core/backend.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

#include "headroom/core/error.h"
#include "headroom/core/parallel.h"
#include "headroom/core/tensor.h"

namespace headroom {
namespace {

// ---- the CPU's element walks ------------------------------------------------------

template <typename T> void fill_typed(T* ptr, int64_t n, T value) {
  cpu::parallel_chunks(n, int64_t(1) << 14, n >= cpu::kParallelMin,
                       [&](int64_t begin, int64_t end) { std::fill(ptr + begin, ptr + end, value); });
}

// Writes value (converted) into n contiguous elements of dtype at ptr.
void fill_contiguous(void* ptr, DType dtype, int64_t n, double value) {
  switch (dtype) {
    case DType::f32: return fill_typed(static_cast<float*>(ptr), n, static_cast<float>(value));
    case DType::f64: return fill_typed(static_cast<double*>(ptr), n, value);
    case DType::i32: return fill_typed(static_cast<int32_t*>(ptr), n, static_cast<int32_t>(value));
    case DType::b8: return fill_typed(static_cast<uint8_t*>(ptr), n, uint8_t(value != 0 ? 1 : 0));
  }
}

// to = from (converted), or to += from when Add.
template <bool Add, typename S, typename D> inline void store(D& to, S from) {
  if constexpr (Add) to = static_cast<D>(to + from);
  else to = static_cast<D>(from);
}

template <bool Add, typename S, typename D>
void copy_typed(const Tensor& src, const Strides& src_strides, const Tensor& dst) {
  const S* s = static_cast<const S*>(src.impl_shared()->storage->data);
  D* d = static_cast<D*>(dst.impl_shared()->storage->data);
  const int64_t n = dst.numel();
  if (src.is_contiguous() && dst.is_contiguous() && src.shape() == dst.shape()) {
    const S* sp = s + src.offset();
    D* dp = d + dst.offset();
    cpu::parallel_for(n, n >= cpu::kParallelMin, [&](int64_t i) { store<Add>(dp[i], sp[i]); });
    return;
  }
  if (dst.dim() == 0) {
    store<Add>(d[dst.offset()], s[src.offset()]);
    return;
  }
  // Walk dst row by row (a row: its last dimension), src with its broadcast
  // strides in step; a row that is contiguous on both sides (a head split or
  // merge moves d_h-long runs) is a plain loop the compiler vectorises.  The
  // threads take whole slices of the first dimension.
  const int last = dst.dim() - 1;
  const int64_t cols = dst.size(last), d_step = dst.stride(last), s_step = src_strides[last];
  const int64_t slices = last > 0 ? dst.size(0) : 1;
  const Shape rows(dst.shape().begin() + (last > 0), dst.shape().end() - 1);  // rows of one slice
  const Strides d_rows(dst.strides().begin() + (last > 0), dst.strides().end() - 1);
  const Strides s_rows(src_strides.begin() + (last > 0), src_strides.end() - 1);
  const int64_t d_slice = last > 0 ? dst.stride(0) : 0, s_slice = last > 0 ? src_strides[0] : 0;
  auto copy_row = [&](int64_t d_off, int64_t s_off) {
    D* to = d + d_off;
    const S* from = s + s_off;
    if (d_step == 1 && s_step == 1) {
      for (int64_t c = 0; c < cols; ++c) store<Add>(to[c], from[c]);
    } else {
      for (int64_t c = 0; c < cols; ++c) store<Add>(to[c * d_step], from[c * s_step]);
    }
  };
  cpu::parallel_for(slices, n >= cpu::kParallelMin, [&](int64_t i) {
    for_each_offset2(rows, d_rows, dst.offset() + i * d_slice, s_rows, src.offset() + i * s_slice, copy_row);
  });
}

template <typename S> void copy_from(const Tensor& src, const Strides& strides, const Tensor& dst) {
  switch (dst.dtype()) {
    case DType::f32: return copy_typed<false, S, float>(src, strides, dst);
    case DType::f64: return copy_typed<false, S, double>(src, strides, dst);
    case DType::i32: return copy_typed<false, S, int32_t>(src, strides, dst);
    case DType::b8: return copy_typed<false, S, uint8_t>(src, strides, dst);
  }
}

// ---- the CPU backend -------------------------------------------------------------

// CPU memory: 64-byte aligned blocks (one cache line, the widest AVX-512
// load).  Large blocks are cached after free and reused for a request of the
// same rounded size: a fresh multi-MiB block from the system comes back as
// new pages, and touching them costs one page fault per 4 KiB (~25 us each
// on our VMs), which made `out = matmul(a, b)` 1.5x slower than sgemm into a
// reused buffer.  Small blocks go straight to malloc, which caches them itself.
class CpuBackend final : public Backend {
 public:
  static constexpr size_t kCacheMin = 256 << 10;          // cache blocks >= 256 KiB
  static constexpr size_t kCacheRound = 64 << 10;         // rounded up to 64 KiB
  static constexpr size_t kCacheLimit = size_t(2) << 30;  // at most 2 GiB held idle

  ~CpuBackend() override { empty_cache(); }
  const char* name() const override { return "cpu"; }

  void* allocate(size_t nbytes, int) override {
    if (nbytes == 0) return nullptr;
    size_t rounded = round_size(nbytes);
    void* ptr = take_cached(rounded);
    if (!ptr) ptr = std::aligned_alloc(64, rounded);
    if (!ptr) {  // give the cache back to the system and retry once
      empty_cache();
      ptr = std::aligned_alloc(64, rounded);
    }
    HEADROOM_CHECK(ptr, "[cpu] out of memory: tried to allocate ", nbytes, " bytes; in use by headroom ",
                   active_.load(), " bytes");
    size_t now = active_ += nbytes;
    ++allocations_;
    size_t peak = peak_.load();
    while (now > peak && !peak_.compare_exchange_weak(peak, now)) {}
    return ptr;
  }
  void deallocate(void* ptr, size_t nbytes, int) override {
    if (!ptr) return;
    active_ -= nbytes;
    size_t rounded = round_size(nbytes);
    if (rounded >= kCacheMin) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (cached_bytes_ + rounded <= kCacheLimit) {
        free_blocks_.emplace(rounded, ptr);
        cached_bytes_ += rounded;
        return;
      }
    }
    std::free(ptr);
  }
  void empty_cache() override {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& [size, ptr] : free_blocks_) std::free(ptr);
    free_blocks_.clear();
    cached_bytes_ = 0;
  }
  // Empty tensors have null data, and mem* functions must not see null even for
  // zero bytes (UBSan flags it).
  void copy_to_host(void* dst, const void* src, size_t n, int) override {
    if (n) std::memcpy(dst, src, n);
  }
  void copy_from_host(void* dst, const void* src, size_t n, int) override {
    if (n) std::memcpy(dst, src, n);
  }
  void copy_within(void* dst, const void* src, size_t n, int) override {
    if (n) std::memmove(dst, src, n);
  }
  // Blocks of kParallelMin floats (128 KiB) and more are split between the
  // threads: autograd zeroes whole [N, d]-sized gradients, and one thread's
  // memset left the other idle.
  void fill_zero(void* dst, size_t n, int) override {
    char* bytes = static_cast<char*>(dst);
    cpu::parallel_chunks(int64_t(n), int64_t(64) << 10, n >= cpu::kParallelMin * sizeof(float),
                         [&](int64_t begin, int64_t end) { std::memset(bytes + begin, 0, size_t(end - begin)); });
  }
  void copy(const Tensor& src, const Strides& strides, const Tensor& dst) override {
    switch (src.dtype()) {
      case DType::f32: return copy_from<float>(src, strides, dst);
      case DType::f64: return copy_from<double>(src, strides, dst);
      case DType::i32: return copy_from<int32_t>(src, strides, dst);
      case DType::b8: return copy_from<uint8_t>(src, strides, dst);
    }
  }
  void fill(const Tensor& dst, double value) override {
    if (dst.is_contiguous()) return fill_contiguous(dst.raw_data(), dst.dtype(), dst.numel(), value);
    Tensor scalar = Tensor::full({}, value, dst.dtype());
    copy(scalar, Strides(dst.dim(), 0), dst);
  }
  void accumulate(const Tensor& src, const Tensor& dst) override {
    if (dst.dtype() == DType::f32) return copy_typed<true, float, float>(src, src.strides(), dst);
    copy_typed<true, double, double>(src, src.strides(), dst);
  }
  void synchronize(int) override {}
  MemoryStats memory_stats() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return {active_.load(), peak_.load(), allocations_.load(), cached_bytes_};
  }
  void reset_peak_memory() override { peak_ = active_.load(); }

 private:
  static size_t round_size(size_t nbytes) {
    return nbytes >= kCacheMin ? (nbytes + kCacheRound - 1) / kCacheRound * kCacheRound : (nbytes + 63) / 64 * 64;
  }
  void* take_cached(size_t rounded) {
    if (rounded < kCacheMin) return nullptr;
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = free_blocks_.find(rounded);
    if (it == free_blocks_.end()) return nullptr;
    void* ptr = it->second;
    free_blocks_.erase(it);
    cached_bytes_ -= rounded;
    return ptr;
  }

  std::atomic<size_t> active_{0}, peak_{0}, allocations_{0};
  mutable std::mutex mutex_;
  std::multimap<size_t, void*> free_blocks_;  // rounded size -> idle block
  size_t cached_bytes_ = 0;
};

}  // namespace

Backend& cpu_backend() {
  static CpuBackend instance;
  return instance;
}

namespace {

// Device kinds other than the CPU, indexed by Device::Kind; null until linked.
BackendProvider*& provider_slot(Device::Kind kind) {
  static BackendProvider* providers[2] = {nullptr, nullptr};
  return providers[int(kind)];
}

const char* kind_name(Device::Kind kind) { return kind == Device::Kind::cuda ? "cuda" : "cpu"; }

std::atomic<bool> tf32_allowed{false};

}  // namespace

void register_backend(Device::Kind kind, BackendProvider& provider) { provider_slot(kind) = &provider; }

Backend& backend(Device device) {
  if (device.is_cpu()) return cpu_backend();
  BackendProvider* provider = provider_slot(device.kind);
  HEADROOM_CHECK(
      provider, "[device] ", device, " needs headroom's ", kind_name(device.kind),
      " backend, which is not linked into this program: link the CMake target headroom::", kind_name(device.kind),
      " (find_package(headroom COMPONENTS ", kind_name(device.kind), ") with a headroom built with it)");
  return provider->backend();
}

int device_count(Device::Kind kind) {
  if (kind == Device::Kind::cpu) return 1;
  BackendProvider* provider = provider_slot(kind);
  return provider ? provider->device_count() : 0;
}

std::string device_summary(Device::Kind kind) {
  if (kind == Device::Kind::cpu) return "cpu";
  BackendProvider* provider = provider_slot(kind);
  if (!provider)
    return std::string("headroom's ") + kind_name(kind) + " backend is not linked (headroom::" + kind_name(kind) + ")";
  return provider->summary();
}

void set_allow_tf32(bool allowed) { tf32_allowed = allowed; }
bool allow_tf32() { return tf32_allowed; }

}  // namespace headroom
