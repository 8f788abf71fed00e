#include "headroom/core/device.h"

#include "headroom/core/error.h"

namespace headroom {

Device Device::parse(const std::string& text) {
  if (text == "cpu") return cpu();
  if (text == "cuda") return cuda(0);
  if (text.rfind("cuda:", 0) == 0) {
    std::string digits = text.substr(5);
    bool numeric = !digits.empty() && digits.find_first_not_of("0123456789") == std::string::npos;
    HEADROOM_CHECK(numeric && digits.size() <= 4, "[device] cannot parse device '", text,
                   "': expected cpu, cuda or cuda:N with N from 0 to 9999");
    return cuda(std::stoi(digits));
  }
  HEADROOM_FAIL("[device] cannot parse device '", text, "': expected cpu, cuda or cuda:N");
}

}  // namespace headroom
