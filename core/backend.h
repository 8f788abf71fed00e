#pragma once
// Backend: what a device must provide so that tensors can live on it.
//
// Every device kind (CPU always, CUDA when compiled in) implements memory
// management here.  Op kernels live beside their ops (ops/cpu/<family>.cpp,
// cuda/<family>.cu); an op picks the kernel for its inputs' device.  The CPU
// backend is always available; backend(Device::cuda()) throws a clear error
// when headroom was built without CUDA.
#include <cstddef>
#include <cstdint>

#include "headroom/core/device.h"

namespace headroom {

struct MemoryStats {
  size_t active_bytes = 0;  // held by live tensors
  size_t peak_bytes = 0;    // highest active_bytes since the last reset
  size_t allocations = 0;   // number of allocate() calls
  size_t cached_bytes = 0;  // freed blocks kept for reuse (see empty_cache)
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;
  virtual void* allocate(size_t nbytes, int device_index) = 0;
  virtual void deallocate(void* ptr, size_t nbytes, int device_index) = 0;
  // Copies between this device's memory and host memory (byte counts).
  virtual void copy_to_host(void* host_dst, const void* src, size_t nbytes, int device_index) = 0;
  virtual void copy_from_host(void* dst, const void* host_src, size_t nbytes, int device_index) = 0;
  virtual void copy_within(void* dst, const void* src, size_t nbytes, int device_index) = 0;
  virtual void fill_zero(void* dst, size_t nbytes, int device_index) = 0;
  virtual void synchronize(int device_index) = 0;
  virtual MemoryStats memory_stats() const = 0;
  virtual void reset_peak_memory() = 0;
  virtual void empty_cache() = 0;  // returns cached idle blocks to the system
};

Backend& backend(Device device);
Backend& cpu_backend();

}  // namespace headroom
