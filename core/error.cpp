#include "headroom/core/error.h"

namespace headroom::detail {

void throw_error(const std::string& message, const char* file, int line) {
  // Keep only the path from the project's top folder: "ops/matmul.cpp:41".
  std::string path(file);
  for (const char* top : {"/core/", "/autograd/", "/ops/", "/cuda/", "/models/", "/examples/", "/tests/"}) {
    size_t at = path.rfind(top);
    if (at != std::string::npos) {
      path = path.substr(at + 1);
      break;
    }
  }
  throw Error(message + " (" + path + ":" + std::to_string(line) + ")");
}

}  // namespace headroom::detail
