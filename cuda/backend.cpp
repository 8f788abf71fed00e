// The CUDA backend's memory: a caching allocator over cudaMalloc, the one
// stream and cuBLAS handle per device, and copies to and from the host.
//
// cudaMalloc and cudaFree synchronise the device and cost tens of
// microseconds, far more than a small kernel, so freed blocks are kept in
// free lists by rounded size and handed to the next request of that size.
// All work on a device runs on one stream, in order, so a block freed by the
// host can be reused at once: any kernel that still reads it was queued
// before the kernel that will overwrite it.
#include <atomic>
#include <map>
#include <mutex>
#include <sstream>
#include <vector>

#include "headroom/core/backend.h"
#include "headroom/core/tensor.h"
#include "headroom/cuda/kernels.h"
#include "headroom/cuda/backend.h"

namespace headroom::cuda {

namespace {

std::string mib(size_t bytes) {
  std::ostringstream os;
  os.precision(1);
  os << std::fixed << double(bytes) / double(1 << 20) << " MiB";
  return os.str();
}

// Per-device resources, created on first use.
struct DeviceState {
  cudaStream_t stream = nullptr;
  cublasHandle_t cublas = nullptr;
};

std::mutex& state_mutex() {
  static std::mutex m;
  return m;
}

DeviceState& device_state(int device) {
  static std::vector<DeviceState> states(std::max(device_count(), 1));
  HEADROOM_CHECK(device >= 0 && device < device_count(), "[cuda] no device cuda:", device, " (", device_count(),
                 " CUDA devices present)");
  std::lock_guard<std::mutex> lock(state_mutex());
  DeviceState& s = states[device];
  if (!s.stream) {
    DeviceGuard guard(device);
    HEADROOM_CUDA_CHECK(cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking));
    HEADROOM_CUBLAS_CHECK(cublasCreate(&s.cublas));
    HEADROOM_CUBLAS_CHECK(cublasSetStream(s.cublas, s.stream));
    // FP32 by default; TF32 is an explicit opt-in (set_allow_tf32).
    HEADROOM_CUBLAS_CHECK(cublasSetMathMode(s.cublas, CUBLAS_DEFAULT_MATH));
  }
  return s;
}

class CudaBackend final : public Backend {
 public:
  // Size classes: small requests round up to 512 B, requests of 1 MiB or more
  // to 2 MiB, so that a block freed by one step fits the next step's request
  // of a slightly different size.
  static constexpr size_t kSmallRound = 512;
  static constexpr size_t kLargeMin = size_t(1) << 20;
  static constexpr size_t kLargeRound = size_t(2) << 20;

  const char* name() const override { return "cuda"; }

  void* allocate(size_t nbytes, int device) override {
    if (nbytes == 0) return nullptr;
    const size_t rounded = round_size(nbytes);
    std::lock_guard<std::mutex> lock(mutex_);
    void* ptr = take_cached(device, rounded);
    if (!ptr) ptr = fresh_block(device, nbytes, rounded);
    active_ += rounded;
    peak_ = std::max(peak_, active_);
    ++allocations_;
    return ptr;
  }

  void deallocate(void* ptr, size_t nbytes, int device) override {
    if (!ptr) return;
    const size_t rounded = round_size(nbytes);
    std::lock_guard<std::mutex> lock(mutex_);
    free_blocks_[{device, rounded}].push_back(ptr);
    active_ -= rounded;
    cached_ += rounded;
  }

  void copy_to_host(void* host_dst, const void* src, size_t n, int device) override {
    if (!n) return;
    DeviceGuard guard(device);
    HEADROOM_CUDA_CHECK(cudaMemcpyAsync(host_dst, src, n, cudaMemcpyDeviceToHost, stream(device)));
    HEADROOM_CUDA_CHECK(cudaStreamSynchronize(stream(device)));
  }
  void copy_from_host(void* dst, const void* host_src, size_t n, int device) override {
    if (!n) return;
    DeviceGuard guard(device);
    // No wait: from pageable host memory the copy is staged before the call
    // returns, so the caller may free or reuse host_src at once.
    HEADROOM_CUDA_CHECK(cudaMemcpyAsync(dst, host_src, n, cudaMemcpyHostToDevice, stream(device)));
  }
  void copy_within(void* dst, const void* src, size_t n, int device) override {
    if (!n) return;
    DeviceGuard guard(device);
    HEADROOM_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, stream(device)));
  }
  void fill_zero(void* dst, size_t n, int device) override {
    if (!n) return;
    DeviceGuard guard(device);
    HEADROOM_CUDA_CHECK(cudaMemsetAsync(dst, 0, n, stream(device)));
  }
  void copy(const Tensor& src, const Strides& src_strides, const Tensor& dst) override {
    cuda::copy(src, src_strides, dst);
  }
  void fill(const Tensor& dst, double value) override { cuda::fill(dst, value); }
  void accumulate(const Tensor& src, const Tensor& dst) override { cuda::accumulate(src, dst); }
  void synchronize(int device) override {
    DeviceGuard guard(device);
    HEADROOM_CUDA_CHECK(cudaStreamSynchronize(stream(device)));
  }

  MemoryStats memory_stats() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return {active_, peak_, allocations_, cached_};
  }
  void reset_peak_memory() override {
    std::lock_guard<std::mutex> lock(mutex_);
    peak_ = active_;
  }
  void empty_cache() override {
    std::lock_guard<std::mutex> lock(mutex_);
    release_cached();
  }

 private:
  static size_t round_size(size_t n) {
    const size_t round = n >= kLargeMin ? kLargeRound : kSmallRound;
    return (n + round - 1) / round * round;
  }

  void* take_cached(int device, size_t rounded) {
    auto it = free_blocks_.find({device, rounded});
    if (it == free_blocks_.end() || it->second.empty()) return nullptr;
    void* ptr = it->second.back();
    it->second.pop_back();
    cached_ -= rounded;
    return ptr;
  }

  // cudaMalloc; on failure, return the cache to the driver and retry once,
  // then throw with the numbers a user needs to decide what to shrink.
  void* fresh_block(int device, size_t nbytes, size_t rounded) {
    DeviceGuard guard(device);
    void* ptr = nullptr;
    if (cudaMalloc(&ptr, rounded) == cudaSuccess) return ptr;
    cudaGetLastError();  // clear the error so the next launch does not report it
    release_cached();
    if (cudaMalloc(&ptr, rounded) == cudaSuccess) return ptr;
    cudaGetLastError();
    size_t free_bytes = 0, total_bytes = 0;
    cudaMemGetInfo(&free_bytes, &total_bytes);
    HEADROOM_FAIL("[cuda] out of memory: tried to allocate ", mib(nbytes), " on cuda:", device, "; device total ",
                  mib(total_bytes), "; in use by headroom ", mib(active_), "; cached ", mib(cached_),
                  "; free (cudaMemGetInfo) ", mib(free_bytes));
  }

  // Caller holds mutex_.  Waits for queued kernels first: a cached block may
  // still be read by work on the stream.
  void release_cached() {
    for (auto& [key, blocks] : free_blocks_) {
      if (blocks.empty()) continue;
      DeviceGuard guard(key.first);
      cudaStreamSynchronize(stream(key.first));
      for (void* ptr : blocks) cudaFree(ptr);
      blocks.clear();
    }
    cached_ = 0;
  }

  mutable std::mutex mutex_;
  std::map<std::pair<int, size_t>, std::vector<void*>> free_blocks_;  // (device, size) -> idle blocks
  size_t active_ = 0, peak_ = 0, allocations_ = 0, cached_ = 0;
};

}  // namespace

cudaStream_t stream(int device) { return device_state(device).stream; }
cublasHandle_t cublas(int device) { return device_state(device).cublas; }

DeviceGuard::DeviceGuard(int device) {
  HEADROOM_CUDA_CHECK(cudaGetDevice(&previous_));
  if (device != previous_) HEADROOM_CUDA_CHECK(cudaSetDevice(device));
}
DeviceGuard::~DeviceGuard() { cudaSetDevice(previous_); }

void check_launch(const char* kernel) {
  cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess) HEADROOM_FAIL("[cuda] launch of ", kernel, " failed: ", cudaGetErrorString(status));
}

int device_count() {
  static const int count = [] {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      cudaGetLastError();  // no driver or no device: a CPU-only machine
      return 0;
    }
    return n;
  }();
  return count;
}

std::string version_string() {
  int driver = 0, runtime = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  std::ostringstream os;
  os << "CUDA runtime " << runtime / 1000 << "." << runtime % 1000 / 10 << ", driver ";
  if (driver) os << driver / 1000 << "." << driver % 1000 / 10;
  else os << "none";
  os << ", " << device_count() << " device(s)";
  for (int d = 0; d < device_count(); ++d) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, d) == cudaSuccess)
      os << "; cuda:" << d << " " << prop.name << " (sm_" << prop.major << prop.minor << ", "
         << mib(prop.totalGlobalMem) << ")";
  }
  return os.str();
}

namespace {
class CudaProvider final : public BackendProvider {
 public:
  int device_count() override { return cuda::device_count(); }
  std::string summary() override { return version_string(); }
  Backend& backend() override {
    HEADROOM_CHECK(device_count() > 0, "[cuda] no CUDA device is available (", version_string(), ")");
    static CudaBackend instance;
    return instance;
  }
};
}  // namespace

BackendProvider& backend_provider() {
  static CudaProvider provider;
  return provider;
}

}  // namespace headroom::cuda
