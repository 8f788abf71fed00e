#include "headroom/distributed/mpi.h"

#include <mpi.h>

#include <cstdlib>
#include <string>

#include "headroom/core/error.h"

namespace headroom {

namespace {

// Throws "[mpi] MPI_Allreduce failed on rank 1 of 2: <MPI's message>".
void check_mpi(int code, const char* call, int rank, int size) {
  if (code == MPI_SUCCESS) return;
  char message[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, message, &length);
  HEADROOM_FAIL("[mpi] ", call, " failed on rank ", rank, " of ", size, ": ", std::string(message, size_t(length)));
}

MPI_Datatype mpi_type(const char* op, DType dtype) {
  switch (dtype) {
    case DType::f32: return MPI_FLOAT;
    case DType::f64: return MPI_DOUBLE;
    case DType::i32: return MPI_INT32_T;
    case DType::b8: return MPI_UINT8_T;
  }
  HEADROOM_FAIL("[", op, "] unsupported dtype");
}

class MpiCommunicator : public Communicator {
 public:
  MpiCommunicator() {
    int initialised = 0, finalised = 0;
    MPI_Initialized(&initialised);
    MPI_Finalized(&finalised);
    HEADROOM_CHECK(!finalised,
                   "[mpi] MPI was finalised when the last mpi_world() handle went; keep one handle for the "
                   "whole program");
    if (!initialised) {
      int provided = 0;
      check_mpi(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread", -1, -1);
      owns_mpi_ = true;
    }
    // Errors come back as codes, which check_mpi turns into headroom::Error.
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
  }
  ~MpiCommunicator() override {
    int finalised = 0;
    MPI_Finalized(&finalised);
    if (owns_mpi_ && !finalised) MPI_Finalize();
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "mpi"; }

  void all_reduce(const Tensor& tensor, ReduceOp op) override {
    check_collective_tensor("all_reduce", tensor, Device::cpu());
    check_floating("all_reduce", tensor);
    check(MPI_Allreduce(MPI_IN_PLACE, tensor.raw_data(), count(tensor), mpi_type("all_reduce", tensor.dtype()), MPI_SUM,
                        MPI_COMM_WORLD),
          "MPI_Allreduce");
    if (op == ReduceOp::mean) scale_in_place(tensor, 1.0 / double(size_));
  }
  void broadcast(const Tensor& tensor, int root) override {
    check_collective_tensor("broadcast", tensor, Device::cpu());
    HEADROOM_CHECK(root >= 0 && root < size_, "[broadcast] root must be a rank in [0, ", size_, "), got ", root);
    check(MPI_Bcast(tensor.raw_data(), count(tensor), mpi_type("broadcast", tensor.dtype()), root, MPI_COMM_WORLD),
          "MPI_Bcast");
  }
  Tensor all_gather(const Tensor& tensor) override {
    check_collective_tensor("all_gather", tensor, Device::cpu());
    Shape shape = tensor.shape();
    shape.insert(shape.begin(), int64_t(size_));
    Tensor gathered = Tensor::empty(shape, tensor.dtype());
    const MPI_Datatype type = mpi_type("all_gather", tensor.dtype());
    check(
        MPI_Allgather(tensor.raw_data(), count(tensor), type, gathered.raw_data(), count(tensor), type, MPI_COMM_WORLD),
        "MPI_Allgather");
    return gathered;
  }
  void barrier() override { check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier"); }

 private:
  void check(int code, const char* call) const { check_mpi(code, call, rank_, size_); }
  int count(const Tensor& tensor) const {
    HEADROOM_CHECK(tensor.numel() <= int64_t(1 << 30), "[mpi] a collective takes at most 2^30 elements, got ",
                   tensor.numel(), " (split the tensor)");
    return int(tensor.numel());
  }
  static void scale_in_place(const Tensor& tensor, double factor) {
    dispatch_floating(tensor.dtype(), [&](auto zero) {
      using T = decltype(zero);
      T* values = tensor.data<T>();
      for (int64_t i = 0; i < tensor.numel(); ++i) values[i] = T(values[i] * factor);
    });
  }
  int rank_ = 0, size_ = 1;
  bool owns_mpi_ = false;
};

}  // namespace

bool launched_by_mpi() {
  for (const char* variable : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS", "SLURM_PROCID"})
    if (std::getenv(variable) != nullptr) return true;
  return false;
}

void mpi_abort(int code) {
  int initialised = 0, finalised = 0;
  MPI_Initialized(&initialised);
  MPI_Finalized(&finalised);
  if (initialised && !finalised) MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

std::shared_ptr<Communicator> mpi_world() {
  static std::weak_ptr<Communicator> world;
  std::shared_ptr<Communicator> shared = world.lock();
  if (!shared) {
    shared = std::make_shared<MpiCommunicator>();
    world = shared;
  }
  return shared;
}

}  // namespace headroom
