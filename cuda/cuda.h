#pragma once
// Entry points of the CUDA backend.  In a build without CUDA they exist too
// (cuda/no_cuda.cpp): is_available() says false and backend() throws.
// Kernels are reached through one interface per family (cuda/<family>.h).
#include <string>

namespace headroom {
class Backend;
namespace cuda {

bool is_available();     // built with CUDA and at least one device present
int device_count();      // 0 without CUDA
Backend& backend();      // throws headroom::Error when CUDA is not usable
std::string version_string();  // driver/runtime versions and devices, or "built without CUDA"

// TF32 tensor-core math in cuBLAS matmuls: off by default (FP32 results that
// match the CPU); an explicit opt-in (--tf32 in the binaries).
void set_tf32(bool enabled);
bool tf32_enabled();

}  // namespace cuda
}  // namespace headroom
