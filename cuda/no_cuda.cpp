// Compiled when headroom is configured without CUDA (HEADROOM_CUDA=OFF, or AUTO
// on a machine without nvcc): keeps the API identical and fails politely.
#include "headroom/core/backend.h"
#include "headroom/core/error.h"
#include "headroom/cuda/cuda.h"

namespace headroom::cuda {

bool is_available() { return false; }
int device_count() { return 0; }
std::string version_string() { return "built without CUDA"; }

Backend& backend() {
  HEADROOM_FAIL("[cuda] headroom was built without CUDA support "
                "(reconfigure with -DHEADROOM_CUDA=ON on a machine with the CUDA toolkit)");
}

}  // namespace headroom::cuda
