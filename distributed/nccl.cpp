#include "headroom/distributed/nccl.h"

#include <nccl.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "headroom/core/backend.h"
#include "headroom/core/error.h"
#include "headroom/cuda/backend.h"

namespace headroom {

namespace {

// Throws "[nccl] ncclAllReduce failed on rank 1 of 2: <NCCL's message>".
void check_nccl(ncclResult_t result, const char* call, int rank, int size) {
  if (result == ncclSuccess) return;
  HEADROOM_FAIL("[nccl] ", call, " failed on rank ", rank, " of ", size, ": ", ncclGetErrorString(result));
}

ncclDataType_t nccl_type(const char* op, DType dtype) {
  switch (dtype) {
    case DType::f32: return ncclFloat32;
    case DType::f64: return ncclFloat64;
    case DType::i32: return ncclInt32;
    case DType::b8: return ncclUint8;
  }
  HEADROOM_FAIL("[", op, "] unsupported dtype");
}

class NcclCommunicator : public Communicator {
 public:
  NcclCommunicator(std::shared_ptr<Communicator> bootstrap, Device device)
      : bootstrap_(std::move(bootstrap)), device_(device) {
    HEADROOM_CHECK(bootstrap_ != nullptr, "[nccl] got no bootstrap communicator");
    HEADROOM_CHECK(device_.is_cuda(), "[nccl] expected a CUDA device, got ", device_.str());
    rank_ = bootstrap_->rank(), size_ = bootstrap_->size();
    ncclUniqueId id;
    if (rank_ == 0) check(ncclGetUniqueId(&id), "ncclGetUniqueId");
    Tensor id_bytes = Tensor::empty({int64_t(sizeof id)}, DType::b8);  // rank 0's id to every rank
    std::memcpy(id_bytes.raw_data(), &id, sizeof id);
    bootstrap_->broadcast(id_bytes, 0);
    std::memcpy(&id, id_bytes.raw_data(), sizeof id);
    cuda::DeviceGuard guard(device_.index);
    check(ncclCommInitRank(&comm_, size_, id, rank_), "ncclCommInitRank");
  }
  ~NcclCommunicator() override { ncclCommDestroy(comm_); }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "nccl"; }

  void all_reduce(const Tensor& tensor, ReduceOp op) override {
    on_device("all_reduce", tensor, [&](const Tensor& t) {
      HEADROOM_CHECK(t.dtype() == DType::f32 || t.dtype() == DType::f64,
                     "[all_reduce] expected an f32 or f64 tensor, got ", t.dtype());
      check(ncclAllReduce(t.raw_data(), t.raw_data(), size_t(t.numel()), nccl_type("all_reduce", t.dtype()),
                          op == ReduceOp::mean ? ncclAvg : ncclSum, comm_, stream()),
            "ncclAllReduce");
    });
  }
  void broadcast(const Tensor& tensor, int root) override {
    HEADROOM_CHECK(root >= 0 && root < size_, "[broadcast] root must be a rank in [0, ", size_, "), got ", root);
    on_device("broadcast", tensor, [&](const Tensor& t) {
      check(ncclBroadcast(t.raw_data(), t.raw_data(), size_t(t.numel()), nccl_type("broadcast", t.dtype()), root, comm_,
                          stream()),
            "ncclBroadcast");
    });
  }
  Tensor all_gather(const Tensor& tensor) override {
    const Device home = tensor.device();
    check_collective_tensor("all_gather", tensor, home);
    const Tensor mine = tensor.to(device_);
    Shape shape = tensor.shape();
    shape.insert(shape.begin(), int64_t(size_));
    Tensor gathered = Tensor::empty(shape, tensor.dtype(), device_);
    check(ncclAllGather(mine.raw_data(), gathered.raw_data(), size_t(mine.numel()),
                        nccl_type("all_gather", mine.dtype()), comm_, stream()),
          "ncclAllGather");
    return gathered.to(home);
  }
  void barrier() override { all_reduce(Tensor::zeros({1}, DType::f32, device_), ReduceOp::sum); }

 private:
  cudaStream_t stream() const { return cuda::stream(device_.index); }
  void check(ncclResult_t result, const char* call) const { check_nccl(result, call, rank_, size_); }

  // Runs `collective` on `tensor` where it lies on this rank's device, or on
  // a device copy written back for a CPU tensor.
  template <typename F> void on_device(const char* op, const Tensor& tensor, F collective) {
    const bool on_host = tensor.device().is_cpu();
    check_collective_tensor(op, tensor, on_host ? Device::cpu() : device_);
    if (!on_host) return collective(tensor);
    Tensor copy = tensor.to(device_);
    collective(copy);
    Tensor target = tensor;
    target.copy_(copy.to(Device::cpu()));
  }

  std::shared_ptr<Communicator> bootstrap_;  // kept: MPI outlives the NCCL communicator
  Device device_;
  ncclComm_t comm_ = nullptr;
  int rank_ = 0, size_ = 1;
};

}  // namespace

std::shared_ptr<Communicator> nccl_world(std::shared_ptr<Communicator> bootstrap, Device device) {
  return std::make_shared<NcclCommunicator>(std::move(bootstrap), device);
}

Device local_cuda_device() {
  const int devices = device_count(Device::Kind::cuda);
  HEADROOM_CHECK(devices > 0, "[nccl] no CUDA device: ", device_summary(Device::Kind::cuda));
  for (const char* variable : {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "MPI_LOCALRANKID"})
    if (const char* local = std::getenv(variable))
      return Device::parse("cuda:" + std::to_string(std::atoi(local) % devices));
  return Device::parse("cuda:0");
}

}  // namespace headroom
