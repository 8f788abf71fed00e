#include "headroom/core/backend.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

#include "headroom/core/error.h"
#include "headroom/cuda/cuda.h"

namespace headroom {
namespace {

// CPU memory: 64-byte aligned blocks (one cache line, the widest AVX-512
// load), straight from the system allocator.  No cache: malloc is fast on CPU.
class CpuBackend final : public Backend {
 public:
  const char* name() const override { return "cpu"; }

  void* allocate(size_t nbytes, int) override {
    size_t rounded = (nbytes + 63) / 64 * 64;
    void* ptr = rounded ? std::aligned_alloc(64, rounded) : nullptr;
    HEADROOM_CHECK(ptr || rounded == 0, "[cpu] out of memory: tried to allocate ", nbytes,
                   " bytes; in use by headroom ", active_.load(), " bytes");
    size_t now = active_ += nbytes;
    ++allocations_;
    size_t peak = peak_.load();
    while (now > peak && !peak_.compare_exchange_weak(peak, now)) {
    }
    return ptr;
  }
  void deallocate(void* ptr, size_t nbytes, int) override {
    std::free(ptr);
    active_ -= nbytes;
  }
  // n == 0 is skipped: empty tensors have null data, which memcpy/memset must not receive.
  void copy_to_host(void* dst, const void* src, size_t n, int) override { if (n) std::memcpy(dst, src, n); }
  void copy_from_host(void* dst, const void* src, size_t n, int) override { if (n) std::memcpy(dst, src, n); }
  void copy_within(void* dst, const void* src, size_t n, int) override { if (n) std::memmove(dst, src, n); }
  void fill_zero(void* dst, size_t n, int) override { if (n) std::memset(dst, 0, n); }
  void synchronize(int) override {}
  MemoryStats memory_stats() const override { return {active_.load(), peak_.load(), allocations_.load()}; }
  void reset_peak_memory() override { peak_ = active_.load(); }

 private:
  std::atomic<size_t> active_{0}, peak_{0}, allocations_{0};
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
