#pragma once
// A group of processes that exchange tensors: the collectives data-parallel
// training needs (docs/distributed.md).  The library holds the interface and
// the one-process LocalCommunicator; the MPI backend (CPU tensors) is the
// optional component headroom::mpi (distributed/mpi.h).
//
// Every rank must call the same collectives in the same order with tensors of
// one shape and dtype; a collective is refused for a non-contiguous tensor or
// one on a device the backend does not serve.
#include <memory>
#include <string>

#include "headroom/core/tensor.h"

namespace headroom {

enum class ReduceOp { sum, mean };

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;  // 0 .. size() - 1
  virtual int size() const = 0;
  virtual std::string backend() const = 0;  // "local", "mpi"

  // In place: every rank's `tensor` (f32 or f64) becomes the sum, or the mean,
  // of all ranks' tensors.
  virtual void all_reduce(const Tensor& tensor, ReduceOp op = ReduceOp::sum) = 0;
  // In place: every rank's `tensor` becomes rank `root`'s.
  virtual void broadcast(const Tensor& tensor, int root = 0) = 0;
  // Every rank's `tensor` stacked in rank order: [size(), ...tensor.shape()].
  virtual Tensor all_gather(const Tensor& tensor) = 0;
  virtual void barrier() = 0;
};

// One process: rank 0 of 1, every collective leaves its tensor as it is.
class LocalCommunicator : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string backend() const override { return "local"; }
  void all_reduce(const Tensor& tensor, ReduceOp op = ReduceOp::sum) override;
  void broadcast(const Tensor& tensor, int root = 0) override;
  Tensor all_gather(const Tensor& tensor) override;
  void barrier() override {}
};

// Throws "[op] ..." unless `tensor` is defined, contiguous and on `device`.
void check_collective_tensor(const char* op, const Tensor& tensor, Device device);

}  // namespace headroom
