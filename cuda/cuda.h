#pragma once
// Entry points of the CUDA backend.  In a build without CUDA they exist too
// (cuda/no_cuda.cpp): is_available() says false and backend() throws.
#include <string>

namespace headroom {
class Backend;
namespace cuda {

bool is_available();     // built with CUDA and at least one device present
int device_count();      // 0 without CUDA
Backend& backend();      // throws headroom::Error when CUDA is not usable
std::string version_string();  // driver/runtime versions, or "built without CUDA"

}  // namespace cuda
}  // namespace headroom
