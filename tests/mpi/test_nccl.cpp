// The NCCL part on the GPUs of this machine, one rank per GPU (ctest runs it
// with `mpirun -np 1`, which one GPU allows): the collectives on CUDA tensors
// and on CPU tensors (through the device), against their definitions.
// Without a CUDA device it prints the skip marker and ctest reports it skipped.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <memory>
#include <vector>

#include "headroom/distributed/mpi.h"
#include "headroom/distributed/nccl.h"
#include "headroom/headroom.h"

using namespace headroom;

namespace {

std::shared_ptr<Communicator> world() {
  static std::shared_ptr<Communicator> handle = nccl_world(mpi_world(), local_cuda_device());
  return handle;
}

// Rank r holds r + 1 + i at element i.
Tensor rank_values(int64_t n, Device device) {
  std::vector<float> values;
  for (int64_t i = 0; i < n; ++i) values.push_back(float(world()->rank() + 1 + i));
  return Tensor::from_vector(values, {n}).to(device);
}

}  // namespace

TEST_CASE("nccl: all-reduce, broadcast and all-gather on CUDA and CPU tensors") {
  const int ranks = world()->size();
  const double rank_sum = ranks * (ranks + 1) / 2.0;  // Σ_r (r + 1)
  CHECK(world()->backend() == "nccl");
  for (Device device : {local_cuda_device(), Device::cpu()}) {
    CAPTURE(device.str());
    Tensor summed = rank_values(5, device);
    world()->all_reduce(summed, ReduceOp::sum);
    Tensor averaged = rank_values(5, device);
    world()->all_reduce(averaged, ReduceOp::mean);
    Tensor from_root = rank_values(5, device);
    world()->broadcast(from_root, 0);
    Tensor gathered = world()->all_gather(rank_values(3, device));
    CHECK(summed.device() == device);
    CHECK(gathered.device() == device);
    CHECK(gathered.shape() == Shape{ranks, 3});
    const std::vector<float> sums = summed.to(Device::cpu()).to_vector<float>();
    const std::vector<float> means = averaged.to(Device::cpu()).to_vector<float>();
    const std::vector<float> roots = from_root.to(Device::cpu()).to_vector<float>();
    const std::vector<float> all = gathered.to(Device::cpu()).to_vector<float>();
    for (int64_t i = 0; i < 5; ++i) {
      CHECK(sums[size_t(i)] == doctest::Approx(rank_sum + ranks * i));
      CHECK(means[size_t(i)] == doctest::Approx(rank_sum / ranks + i));
      CHECK(roots[size_t(i)] == float(1 + i));
    }
    for (int r = 0; r < ranks; ++r)
      for (int64_t i = 0; i < 3; ++i) CHECK(all[size_t(r * 3 + i)] == float(r + 1 + i));
  }
  world()->barrier();
}

int main(int argc, char** argv) {
  if (device_count(Device::Kind::cuda) == 0) {
    std::printf("[headroom] skipped: no CUDA device (%s)\n", device_summary(Device::Kind::cuda).c_str());
    return 0;
  }
  doctest::Context context(argc, argv);
  return context.run();
}
