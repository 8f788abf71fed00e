#pragma once
// Backend: what a device must provide so that tensors can live on it.
//
// The CPU backend is always there (core/backend.cpp).  Other device kinds
// come from backend libraries that register themselves when linked in: the
// CUDA part (the CMake target headroom::cuda) registers Device::Kind::cuda.
// A tensor sent to a device whose backend is not linked gets an error that
// says what to link.  Op kernels are not here: each backend registers them
// with ops/kernels/registry.h.
#include <cstddef>
#include <cstdint>
#include <string>

#include "headroom/core/device.h"
#include "headroom/core/shape.h"

namespace headroom {

class Tensor;

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
  // Element walks on this device's tensors, any strides:
  // dst[i] = src[i] converted to dst's dtype, src_strides being src's strides
  // broadcast to dst's shape (0 on broadcast dimensions);
  virtual void copy(const Tensor& src, const Strides& src_strides, const Tensor& dst) = 0;
  // dst[i] = value (b8: value != 0);
  virtual void fill(const Tensor& dst, double value) = 0;
  // dst[i] += src[i], one shape and floating dtype (autograd's gradient sums).
  virtual void accumulate(const Tensor& src, const Tensor& dst) = 0;
  virtual void synchronize(int device_index) = 0;
  virtual MemoryStats memory_stats() const = 0;
  virtual void reset_peak_memory() = 0;
  virtual void empty_cache() = 0;  // returns cached idle blocks to the system
};

// What a backend library registers for its device kind.
class BackendProvider {
 public:
  virtual ~BackendProvider() = default;
  virtual int device_count() = 0;     // 0 when the driver or the devices are missing
  virtual std::string summary() = 0;  // runtime and driver versions, devices
  virtual Backend& backend() = 0;     // throws headroom::Error when device_count() is 0
};

// Called once by a backend library as it loads (a static initialiser).
void register_backend(Device::Kind kind, BackendProvider& provider);

Backend& backend(Device device);  // throws, naming what to link, when the kind is not linked
Backend& cpu_backend();

// Devices of a kind present and usable: 0 when its backend is not linked.
int device_count(Device::Kind kind);
// One line for logs and errors: the backend's versions and devices, or why there are none.
std::string device_summary(Device::Kind kind);

// Whether float32 matrix products may use TF32 tensor cores on devices that
// have them (CUDA); off by default, so results match the CPU.  Like PyTorch's
// torch.backends.cuda.matmul.allow_tf32.
void set_allow_tf32(bool allowed);
bool allow_tf32();

}  // namespace headroom
