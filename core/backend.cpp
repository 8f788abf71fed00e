#include "headroom/core/backend.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

#include "headroom/core/error.h"
#include "headroom/core/parallel.h"
#include "headroom/cuda/cuda.h"

namespace headroom {
namespace {

// CPU memory: 64-byte aligned blocks (one cache line, the widest AVX-512
// load).  Large blocks are cached after free and reused for a request of the
// same rounded size: a fresh multi-MiB block from the system comes back as
// new pages, and touching them costs one page fault per 4 KiB (~25 us each
// on our VMs), which made `out = matmul(a, b)` 1.5x slower than sgemm into a
// reused buffer.  Small blocks go straight to malloc, which caches them itself.
class CpuBackend final : public Backend {
 public:
  static constexpr size_t kCacheMin = 256 << 10;      // cache blocks >= 256 KiB
  static constexpr size_t kCacheRound = 64 << 10;     // rounded up to 64 KiB
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
    HEADROOM_CHECK(ptr, "[cpu] out of memory: tried to allocate ", nbytes,
                   " bytes; in use by headroom ", active_.load(), " bytes");
    size_t now = active_ += nbytes;
    ++allocations_;
    size_t peak = peak_.load();
    while (now > peak && !peak_.compare_exchange_weak(peak, now)) {
    }
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
  void copy_to_host(void* dst, const void* src, size_t n, int) override { if (n) std::memcpy(dst, src, n); }
  void copy_from_host(void* dst, const void* src, size_t n, int) override { if (n) std::memcpy(dst, src, n); }
  void copy_within(void* dst, const void* src, size_t n, int) override { if (n) std::memmove(dst, src, n); }
  // Blocks of kParallelMin floats (128 KiB) and more are split between the
  // threads: autograd zeroes whole [N, d]-sized gradients, and one thread's
  // memset left the other idle.
  void fill_zero(void* dst, size_t n, int) override {
    char* bytes = static_cast<char*>(dst);
    cpu::parallel_chunks(int64_t(n), int64_t(64) << 10, n >= cpu::kParallelMin * sizeof(float),
                         [&](int64_t begin, int64_t end) { std::memset(bytes + begin, 0, size_t(end - begin)); });
  }
  void synchronize(int) override {}
  MemoryStats memory_stats() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return {active_.load(), peak_.load(), allocations_.load(), cached_bytes_};
  }
  void reset_peak_memory() override { peak_ = active_.load(); }

 private:
  static size_t round_size(size_t nbytes) {
    return nbytes >= kCacheMin ? (nbytes + kCacheRound - 1) / kCacheRound * kCacheRound
                               : (nbytes + 63) / 64 * 64;
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

Backend& backend(Device device) {
  if (device.is_cpu()) return cpu_backend();
  return cuda::backend();
}

}  // namespace headroom
