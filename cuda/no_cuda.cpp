// Compiled when headroom is configured without CUDA (HEADROOM_CUDA=OFF, or AUTO
// on a machine without nvcc): keeps the API identical and fails politely.
// Each kernel family's interface (cuda/<family>.h) gets one line here.
#include "headroom/core/backend.h"
#include "headroom/core/error.h"
#include "headroom/cuda/attention.h"
#include "headroom/cuda/copy.h"
#include "headroom/cuda/cuda.h"
#include "headroom/cuda/elementwise.h"
#include "headroom/cuda/matmul.h"
#include "headroom/cuda/nn.h"
#include "headroom/cuda/optim.h"
#include "headroom/cuda/reduce.h"
#include "headroom/cuda/routing.h"

namespace headroom::cuda {

namespace {
[[noreturn]] void unavailable() {
  HEADROOM_FAIL("[cuda] headroom was built without CUDA support "
                "(reconfigure with -DHEADROOM_CUDA=ON on a machine with the CUDA toolkit)");
}
}  // namespace

bool is_available() { return false; }
int device_count() { return 0; }
std::string version_string() { return "built without CUDA"; }
void set_tf32(bool) {}
bool tf32_enabled() { return false; }

Backend& backend() { unavailable(); }
AttentionKernels& attention_kernels() { unavailable(); }
CopyKernels& copy_kernels() { unavailable(); }
ElementwiseKernels& elementwise_kernels() { unavailable(); }
MatmulKernels& matmul_kernels() { unavailable(); }
NnKernels& nn_kernels() { unavailable(); }
OptimKernels& optim_kernels() { unavailable(); }
ReduceKernels& reduce_kernels() { unavailable(); }
RoutingKernels& routing_kernels() { unavailable(); }

}  // namespace headroom::cuda
