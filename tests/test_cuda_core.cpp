// CUDA backend core: device tensors, copies, fills, the caching allocator and
// its out-of-memory message.  Skipped (and passing) without a device.
#include "cuda_helpers.h"

using namespace headroom;
using headroom::testing::check_parity;
using headroom::testing::compare;

TEST_CASE("cuda: round trip through the device keeps every dtype") {
  Generator gen(3);
  for (DType dtype : {DType::f32, DType::f64}) {
    Tensor x = Tensor::randn({3, 5, 7}, gen, dtype);
    Tensor y = x.to(Device::cuda());
    CHECK(y.device() == Device::cuda());
    CHECK(compare(y.to(Device::cpu()), x, 0) == "");
  }
  Tensor idx = Tensor::from_vector<int32_t>({4, -1, 7, 0});
  CHECK(idx.to(Device::cuda()).to(Device::cpu()).to_vector<int32_t>() == idx.to_vector<int32_t>());
  Tensor empty = Tensor::empty({0, 3}).to(Device::cuda());
  CHECK(empty.numel() == 0);
}

TEST_CASE("cuda: strided and broadcast copies with dtype conversion match the CPU") {
  Generator gen(4);
  Tensor x = Tensor::randn({4, 6, 5}, gen);
  Tensor xd = x.to(Device::cuda());
  // permute + contiguous: a strided gather on the device.
  CHECK(compare(xd.permute({2, 0, 1}).contiguous().to(Device::cpu()), x.permute({2, 0, 1}).contiguous(), 0) == "");
  // slice with a step, then a conversion to f64 and to i32.
  CHECK(compare(xd.slice(1, 1, 6, 2).to(DType::f64).to(Device::cpu()), x.slice(1, 1, 6, 2).to(DType::f64), 0) == "");
  CHECK(compare(xd.to(DType::i32).to(Device::cpu()), x.to(DType::i32), 0) == "");
  // copy_ broadcasts a row into a strided destination.
  Tensor row = Tensor::randn({5}, gen);
  Tensor dst_cpu = Tensor::zeros({5, 4}).t(), dst_gpu = Tensor::zeros({5, 4}, DType::f32, Device::cuda()).t();
  dst_cpu.copy_(row);
  dst_gpu.copy_(row.to(Device::cuda()));
  CHECK(compare(dst_gpu.to(Device::cpu()), dst_cpu, 0) == "");
}

TEST_CASE("cuda: fill_, zeros and full on the device") {
  Tensor t = Tensor::zeros({3, 4}, DType::f32, Device::cuda());
  CHECK(t.to(Device::cpu()).to_vector<float>() == std::vector<float>(12, 0.f));
  t.slice(1, 0, 4, 2).fill_(2.5);
  std::vector<float> expected = {2.5f, 0, 2.5f, 0, 2.5f, 0, 2.5f, 0, 2.5f, 0, 2.5f, 0};
  CHECK(t.to(Device::cpu()).to_vector<float>() == expected);
  CHECK(Tensor::full({2}, 7, DType::i32, Device::cuda()).to(Device::cpu()).to_vector<int32_t>() ==
        std::vector<int32_t>{7, 7});
}

TEST_CASE("cuda: randint on the device holds the CPU's draws") {
  for (DType dtype : {DType::i32, DType::f32}) {
    Generator on_cpu(6), on_cuda(6);
    Tensor expected = Tensor::randint({3, 70}, on_cpu, -4, 9, dtype);
    Tensor got = Tensor::randint({3, 70}, on_cuda, -4, 9, dtype, Device::cuda());
    CHECK(got.device() == Device::cuda());
    CHECK(got.dtype() == dtype);
    CHECK(compare(got.to(Device::cpu()), expected, 0) == "");
  }
}

TEST_CASE("cuda: autograd through to(device) returns the gradient to the CPU") {
  Generator gen(5);
  check_parity([](const std::vector<Tensor>& in) { return in[0].t().contiguous(); }, {Tensor::randn({3, 4}, gen)}, 0);
}

TEST_CASE("cuda: the caching allocator reuses blocks and reports its statistics") {
  Backend& gpu = backend(Device::cuda());
  gpu.empty_cache();
  const size_t active_before = gpu.memory_stats().active_bytes;
  void* first = nullptr;
  {
    Tensor a = Tensor::empty({1 << 20}, DType::f32, Device::cuda());  // 4 MiB
    first = a.raw_data();
    CHECK(gpu.memory_stats().active_bytes >= active_before + (4u << 20));
  }
  CHECK(gpu.memory_stats().cached_bytes >= (4u << 20));
  Tensor b = Tensor::empty({1 << 20}, DType::f32, Device::cuda());
  CHECK(b.raw_data() == first);  // the same block, from the cache
  CHECK(gpu.memory_stats().peak_bytes >= gpu.memory_stats().active_bytes);
  gpu.empty_cache();
  CHECK(gpu.memory_stats().cached_bytes == 0);
}

TEST_CASE("cuda: out of memory names the request and what is held") {
  // 2^40 floats = 4 TiB: more than any GPU has.
  CHECK_THROWS_WITH_AS(Tensor::empty({int64_t(1) << 40}, DType::f32, Device::cuda()),
                       doctest::Contains("out of memory: tried to allocate 4194304.0 MiB"), Error);
  // The failure left no sticky error behind: the next allocation works.
  CHECK(Tensor::zeros({4}, DType::f32, Device::cuda()).to(Device::cpu()).to_vector<float>().size() == 4);
}
