#include "headroom/core/communicator.h"

#include "headroom/core/error.h"

namespace headroom {

void check_collective_tensor(const char* op, const Tensor& tensor, Device device) {
  HEADROOM_CHECK(tensor.defined(), "[", op, "] got an undefined tensor");
  HEADROOM_CHECK(tensor.is_contiguous(), "[", op, "] needs a contiguous tensor, got shape ", shape_str(tensor.shape()),
                 " with strides ", shape_str(tensor.strides()));
  HEADROOM_CHECK(tensor.device() == device, "[", op, "] this communicator serves ", device.str(),
                 " tensors, got one on ", tensor.device().str());
}

void LocalCommunicator::all_reduce(const Tensor& tensor, ReduceOp) {
  check_collective_tensor("all_reduce", tensor, tensor.device());
  check_floating("all_reduce", tensor);
}

void LocalCommunicator::broadcast(const Tensor& tensor, int root) {
  check_collective_tensor("broadcast", tensor, tensor.device());
  HEADROOM_CHECK(root == 0, "[broadcast] root must be a rank in [0, 1), got ", root);
}

Tensor LocalCommunicator::all_gather(const Tensor& tensor) {
  check_collective_tensor("all_gather", tensor, tensor.device());
  return tensor.clone().unsqueeze(0);
}

}  // namespace headroom
