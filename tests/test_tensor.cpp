// Tensor creation, views over shared storage, printing, the RNG.
#include <cmath>
#include <limits>

#include "helpers.h"

using namespace headroom;

TEST_CASE("creation: zeros, ones, full, arange, from_vector") {
  CHECK(Tensor::zeros({2, 3}).to_vector<float>() == std::vector<float>(6, 0.f));
  CHECK(Tensor::ones({4}, DType::f64).to_vector<double>() == std::vector<double>(4, 1.0));
  CHECK(Tensor::full({2}, 7, DType::i32).to_vector<int32_t>() == std::vector<int32_t>{7, 7});
  CHECK(Tensor::arange(5).to_vector<float>() == std::vector<float>{0, 1, 2, 3, 4});
  CHECK(Tensor::arange(1, 2, 0.25, DType::f64).to_vector<double>() == std::vector<double>{1, 1.25, 1.5, 1.75});
  Tensor t = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  CHECK(t.shape() == Shape{2, 3});
  CHECK(t.strides() == Strides{3, 1});
  CHECK(t.dtype() == DType::f32);
  CHECK(Tensor::scalar(2.5).item() == 2.5);
  CHECK_THROWS_HEADROOM(Tensor::from_vector<float>({1, 2, 3}, {2, 2}), "cannot fill shape (2,2)");
  CHECK_THROWS_HEADROOM(t.item(), "expected a tensor with one element");
}

TEST_CASE("creation errors: NaN or huge arange ranges, byte counts past int64, thread counts out of range") {
  const double nan = std::nan("");
  CHECK_THROWS_HEADROOM(Tensor::arange(0, nan), "[arange] start 0, end nan and step 1 must be finite");
  CHECK_THROWS_HEADROOM(Tensor::arange(0, 1, std::numeric_limits<double>::infinity()), "must be finite");
  CHECK_THROWS_HEADROOM(Tensor::arange(0, 1e300), "elements, more than the 9007199254740992 arange makes");
  CHECK(Tensor::arange(5, 1).numel() == 0);  // an empty range stays empty, as in numpy
  // 2^61 f64 elements count in an int64, their 2^64 bytes do not.
  CHECK_THROWS_HEADROOM(Tensor::empty({int64_t(1) << 61}, DType::f64),
                        "[empty] shape (2305843009213693952) of f64 needs more bytes than an int64 can count");
  const int previous = num_threads();
  CHECK_THROWS_HEADROOM(set_num_threads(kMaxThreads + 1), "[threads] thread count must be from 1 to 1024, got 1025");
  CHECK_THROWS_HEADROOM(set_num_threads(0), "got 0");
  CHECK(num_threads() == previous);
}

TEST_CASE("views share storage and follow numpy semantics") {
  Tensor t = Tensor::arange(24).reshape({2, 3, 4});
  Tensor p = t.permute({2, 0, 1});
  CHECK(p.shape() == Shape{4, 2, 3});
  CHECK(p.same_storage(t));
  CHECK_FALSE(p.is_contiguous());
  // p[i, j, k] == t[j, k, i]
  std::vector<float> pv = p.to_vector<float>();
  std::vector<float> tv = t.to_vector<float>();
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 2; ++j)
      for (int k = 0; k < 3; ++k) CHECK(pv[(i * 2 + j) * 3 + k] == tv[(j * 3 + k) * 4 + i]);
  CHECK(t.slice(2, 1, 4, 2).to_vector<float>() == std::vector<float>{1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23});
  CHECK(t.slice(1, -1, 3).to_vector<float>() == std::vector<float>{8, 9, 10, 11, 20, 21, 22, 23});
  CHECK(t.select(0, 1).shape() == Shape{3, 4});
  CHECK(t.narrow(1, 1, 1).to_vector<float>() == std::vector<float>{4, 5, 6, 7, 16, 17, 18, 19});
  Tensor e = Tensor::from_vector<float>({1, 2, 3}, {3, 1}).expand({2, 3, 4});
  CHECK(e.strides() == Strides{0, 1, 0});
  CHECK(e.to_vector<float>()[5] == 2);
  CHECK(t.transpose(0, 2).contiguous().is_contiguous());
  CHECK(t.flatten(1).shape() == Shape{2, 12});
  CHECK(t.unsqueeze(-1).shape() == Shape{2, 3, 4, 1});
  CHECK(t.unsqueeze(1).squeeze(1).shape() == Shape{2, 3, 4});
  CHECK(t.reshape({-1, 4}).shape() == Shape{6, 4});
  CHECK_THROWS_HEADROOM(t.permute({0, 1}).numel(), "got 2 dimensions");
  CHECK_THROWS_HEADROOM(t.reshape({5, -1}), "cannot infer -1");
  CHECK_THROWS_HEADROOM(p.view({24}),
                        "[view] a tensor of shape (4,2,3) with strides (1,12,4) cannot be viewed as (24)");
  CHECK_THROWS_HEADROOM(t.expand({2, 5, 4}), "cannot expand shape (2,3,4)");
  CHECK_THROWS_HEADROOM(t.size(3), "dimension 3 is out of range");
}

TEST_CASE("view splits and merges the runs a strided layout allows, as PyTorch's view") {
  Tensor t = Tensor::arange(2 * 3 * 10).reshape({6, 10});
  Tensor cols = t.narrow(1, 2, 4);  // [6, 4], strides (10, 1): rows of 4 spaced by 10
  Tensor v = cols.view({2, 1, 3, 4});
  CHECK(v.same_storage(t));
  CHECK(v.strides() == Strides{30, 30, 10, 1});
  CHECK(v.to_vector<float>() == cols.to_vector<float>());
  CHECK(cols.view({6, 2, 2}).to_vector<float>() == cols.to_vector<float>());
  CHECK_THROWS_HEADROOM(cols.view({24}), "cannot be viewed as (24)");  // rows 10 apart do not merge
  CHECK_THROWS_HEADROOM(cols.view({3, 8}), "cannot be viewed as (3,8)");
  Tensor p = t.reshape({2, 3, 10}).permute({1, 0, 2});  // [3, 2, 10], strides (10, 30, 1)
  CHECK(p.view({3, 2, 5, 2}).strides() == Strides{10, 30, 2, 1});
  CHECK_THROWS_HEADROOM(p.view({6, 10}), "cannot be viewed as (6,10)");
  CHECK(t.select(1, 0).view({2, 3}).strides() == Strides{30, 10});  // size-1 and 0-d cases
  CHECK(Tensor::full({}, 2.0).view({1, 1}).item() == 2.0);
  CHECK(Tensor::zeros({0, 4}).narrow(1, 0, 2).view({2, 0}).numel() == 0);
}

TEST_CASE("reshape of a non-contiguous tensor copies; writes through views are seen") {
  Tensor t = Tensor::arange(6).reshape({2, 3});
  Tensor r = t.t().reshape({6});
  CHECK_FALSE(r.same_storage(t));
  CHECK(r.to_vector<float>() == std::vector<float>{0, 3, 1, 4, 2, 5});
  Tensor row = t.select(0, 1);
  row.fill_(9);
  CHECK(t.to_vector<float>() == std::vector<float>{0, 1, 2, 9, 9, 9});
  CHECK(t.version() == 1);
}

TEST_CASE("cat, stack and dtype conversion") {
  Tensor a = Tensor::from_vector<float>({1, 2}, {1, 2});
  Tensor b = Tensor::from_vector<float>({3, 4, 5, 6}, {2, 2});
  CHECK(cat({a, b}, 0).to_vector<float>() == std::vector<float>{1, 2, 3, 4, 5, 6});
  CHECK(stack({b, b}, 1).shape() == Shape{2, 2, 2});
  CHECK(stack({b, b}, 1).to_vector<float>() == std::vector<float>{3, 4, 3, 4, 5, 6, 5, 6});
  CHECK(b.to(DType::i32).dtype() == DType::i32);
  CHECK(Tensor::from_vector<float>({1.7f, -2.2f}).to(DType::i32).to_vector<int32_t>() == std::vector<int32_t>{1, -2});
  CHECK_THROWS_HEADROOM(cat({a, b.t().reshape({1, 4})}, 0), "differ outside dimension 0");
  CHECK_THROWS_HEADROOM(cat({a, a.to(DType::f64)}, 0), "dtypes differ");
}

TEST_CASE("printing") {
  Tensor t = Tensor::from_vector<float>({1, 2, 3, 4}, {2, 2});
  CHECK(t.str() == "tensor([[1, 2],\n        [3, 4]], shape=(2,2), dtype=f32)");
  CHECK(Tensor::arange(10, DType::i32).str() == "tensor([0, 1, 2, ..., 7, 8, 9], shape=(10), dtype=i32)");
}

TEST_CASE("rng is counter based, seeded and reproducible") {
  Generator g1(42), g2(42), g3(43);
  Tensor a = Tensor::randn({1000}, g1);
  CHECK(a.to_vector<float>() == Tensor::randn({1000}, g2).to_vector<float>());
  CHECK(a.to_vector<float>() != Tensor::randn({1000}, g3).to_vector<float>());
  CHECK(g1.offset() == 2000);
  std::vector<float> v = a.to_vector<float>();
  double mean = 0, var = 0;
  for (float x : v) mean += x / 1000.0;
  for (float x : v) var += (x - mean) * (x - mean) / 1000.0;
  CHECK(std::abs(mean) < 0.1);
  CHECK(std::abs(var - 1) < 0.1);
  std::vector<float> u = Tensor::rand({1000}, g1, -2, 2, DType::f32).to_vector<float>();
  CHECK(*std::min_element(u.begin(), u.end()) >= -2);
  CHECK(*std::max_element(u.begin(), u.end()) < 2);
  // One order for every random tensor: shape, generator, the distribution's parameters, dtype.
  Generator h1(4), h2(4), h3(4), h4(4);
  CHECK_CLOSE(Tensor::rand({6}, h1, 2, 5, DType::f64), Tensor::rand({6}, h2, DType::f64) * 3 + 2, 1e-12);
  CHECK_CLOSE(Tensor::randn({6}, h3, 1, 2, DType::f64), Tensor::randn({6}, h4, DType::f64) * 2 + 1, 1e-12);
  Generator i1(4), i2(4);
  CHECK(Tensor::randint({6}, i1, 10, 20, DType::f64).to_vector<double>() ==
        (Tensor::randint({6}, i2, 0, 10, DType::f64) + 10).to_vector<double>());
}

TEST_CASE("a row share: the ranks' draws for their rows put together are one process's draws for the batch") {
  // A batch of 5 rows of 3 elements cut as data-parallel ranks cut it: rows [0, 3) and [3, 5).
  Generator whole(9);
  const std::vector<float> uniform = Tensor::rand({5, 3}, whole).to_vector<float>();
  const std::vector<float> normal = Tensor::randn({5, 3}, whole).to_vector<float>();
  std::vector<float> shared_uniform, shared_normal;
  uint64_t end_offset = 0;
  for (const auto& [begin, count] : std::vector<std::pair<int64_t, int64_t>>{{0, 3}, {3, 2}}) {
    Generator part(9);
    part.share_rows(uint64_t(begin), uint64_t(count), 5);
    for (float x : Tensor::rand({count, 3}, part).to_vector<float>()) shared_uniform.push_back(x);
    for (float x : Tensor::randn({count, 3}, part).to_vector<float>()) shared_normal.push_back(x);
    // 15 uniforms and 30 normal draws: past the whole batch's, whatever the slice.
    end_offset = part.offset();
    CHECK(end_offset == whole.offset());
    CHECK_THROWS_HEADROOM(part.reserve(uint64_t(count) * 3 + 1), "cannot be split over the");
    part.clear_row_share();
    CHECK(part.reserve(1) == end_offset);
  }
  CHECK(shared_uniform == uniform);
  CHECK(shared_normal == normal);
  Generator bad(1);
  CHECK_THROWS_HEADROOM(bad.share_rows(4, 2, 5), "are not a non-empty part of a batch of 5");
  CHECK_THROWS_HEADROOM(bad.share_rows(0, 0, 5), "are not a non-empty part");
}

TEST_CASE("randint: integers low <= v < high, one draw each, seeded, about uniform, in i32, f32 and f64") {
  Generator g1(5), g2(5), g3(6);
  Tensor a = Tensor::randint({40, 50}, g1, -3, 7);
  CHECK(a.dtype() == DType::i32);
  CHECK(a.shape() == Shape{40, 50});
  CHECK(a.device().is_cpu());
  CHECK(g1.offset() == 2000);
  const std::vector<int32_t> v = a.to_vector<int32_t>();
  CHECK(v == Tensor::randint({40, 50}, g2, -3, 7).to_vector<int32_t>());
  CHECK(v != Tensor::randint({40, 50}, g3, -3, 7).to_vector<int32_t>());
  // Each of the 10 values about 200 times (binomial sd 13.4); chi-square over 9 degrees of freedom.
  std::vector<int64_t> counts(10, 0);
  for (int32_t x : v) {
    REQUIRE(x >= -3);
    REQUIRE(x < 7);
    ++counts[x + 3];
  }
  double chi_square = 0;
  for (int64_t c : counts) {
    CHECK(c > 140);
    CHECK(c < 260);
    chi_square += double(c - 200) * double(c - 200) / 200;
  }
  CHECK(chi_square < 27.9);  // the 0.999 quantile
  // A one-value range, and the draws are the same whichever dtype holds them.
  CHECK(Tensor::randint({3}, g1, 4, 5).to_vector<int32_t>() == std::vector<int32_t>{4, 4, 4});
  Generator f1(9), f2(9), f3(9);
  const std::vector<double> as_i32 = Tensor::randint({64}, f1, -50, 50).to_vector<double>();
  CHECK(Tensor::randint({64}, f2, -50, 50, DType::f32).to_vector<double>() == as_i32);
  Tensor as_f64 = Tensor::randint({64}, f3, -50, 50, DType::f64);
  CHECK(as_f64.dtype() == DType::f64);
  CHECK(as_f64.to_vector<double>() == as_i32);
  // The widest ranges each dtype holds exactly: every value an integer within bounds, both signs drawn.
  const int64_t two53 = int64_t(1) << 53;
  Tensor wide_i32 = Tensor::randint({1000}, g1, INT32_MIN, int64_t(INT32_MAX) + 1);
  Tensor wide_f64 = Tensor::randint({1000}, g1, -two53, two53 + 1, DType::f64);
  int64_t negative = 0;
  for (const Tensor& wide : {wide_i32, wide_f64})
    for (double x : wide.to_vector<double>()) {
      REQUIRE(std::floor(x) == x);
      REQUIRE(std::abs(x) <= double(two53));
      negative += x < 0;
    }
  CHECK(negative > 900);
  CHECK(negative < 1100);
  // The default generator's overload follows manual_seed.
  manual_seed(21);
  const std::vector<int32_t> seeded = Tensor::randint({16}, 0, 1000).to_vector<int32_t>();
  manual_seed(21);
  CHECK(Tensor::randint({16}, 0, 1000).to_vector<int32_t>() == seeded);
  CHECK(Tensor::randint({0}, g1, 0, 3).numel() == 0);
}

TEST_CASE("randint errors: an empty range, a dtype that cannot hold the range, b8; nothing is drawn") {
  Generator g(1);
  CHECK_THROWS_HEADROOM(Tensor::randint({3}, g, 5, 5),
                        "[randint] got low = 5 and high = 5, expected low < high (values are drawn from [low, high))");
  CHECK_THROWS_HEADROOM(Tensor::randint({3}, g, 2, -1), "got low = 2 and high = -1, expected low < high");
  CHECK_THROWS_HEADROOM(Tensor::randint({3}, g, 0, int64_t(INT32_MAX) + 2),
                        "[randint] got [low, high) = [0, 2147483649), expected values in [-2147483648, 2147483647] "
                        "for dtype i32");
  CHECK_THROWS_HEADROOM(Tensor::randint({3}, g, -(int64_t(1) << 24) - 1, 0, DType::f32),
                        "expected values in [-16777216, 16777216] for dtype f32");
  CHECK_THROWS_HEADROOM(Tensor::randint({3}, g, 0, (int64_t(1) << 53) + 2, DType::f64), "for dtype f64");
  CHECK_THROWS_HEADROOM(Tensor::randint({3}, g, 0, 2, DType::b8), "[randint] expected dtype i32, f32 or f64, got b8");
  CHECK(g.offset() == 0);
}

TEST_CASE("devices: parsing, and CUDA entry points without CUDA") {
  CHECK(Device::parse("cuda:1") == Device::cuda(1));
  CHECK(Device::parse("cpu").is_cpu());
  CHECK_THROWS_HEADROOM(Device::parse("tpu"), "cannot parse device 'tpu'");
  // A device index too long for an int is a headroom::Error, not std::out_of_range.
  CHECK_THROWS_HEADROOM(Device::parse("cuda:99999999999"), "with N from 0 to 9999");
  if (device_count(Device::Kind::cuda) == 0) {
    // A program without the CUDA part says what to link; with it, on a
    // machine without a GPU, that no device is present.
    const char* why = HEADROOM_HAS_CUDA ? "no CUDA device is available" : "link the CMake target headroom::cuda";
    CHECK_THROWS_HEADROOM(Tensor::zeros({2}, DType::f32, Device::cuda()), why);
    CHECK_THROWS_HEADROOM(Tensor::zeros({2}).to(Device::cuda()), why);
  }
}

TEST_CASE("memory is returned when tensors die") {
  size_t before = cpu_backend().memory_stats().active_bytes;
  {
    Tensor big = Tensor::zeros({1024, 1024});
    CHECK(cpu_backend().memory_stats().active_bytes >= before + 4 * 1024 * 1024);
  }
  CHECK(cpu_backend().memory_stats().active_bytes == before);
}

TEST_CASE("large freed blocks are cached and reused; empty_cache returns them") {
  cpu_backend().empty_cache();
  void* first = nullptr;
  {
    Tensor a = Tensor::empty({1 << 20});  // 4 MiB
    first = a.raw_data();
  }
  CHECK(cpu_backend().memory_stats().cached_bytes >= (size_t(4) << 20));
  {
    Tensor b = Tensor::empty({1 << 20});
    CHECK(b.raw_data() == first);  // the same block, no new pages to fault in
    CHECK(cpu_backend().memory_stats().cached_bytes == 0);
  }
  cpu_backend().empty_cache();
  CHECK(cpu_backend().memory_stats().cached_bytes == 0);
}

namespace {
// view's elements in row-major order, read from base's flat values through
// view's own offset and strides: the naive reference for copy_elements.
std::vector<double> read_through_strides(const std::vector<double>& flat, const Tensor& view) {
  std::vector<double> out;
  std::vector<int64_t> index(view.dim(), 0);
  for (int64_t i = 0; i < view.numel(); ++i) {
    int64_t at = view.offset();
    for (int d = 0; d < view.dim(); ++d) at += index[d] * view.stride(d);
    out.push_back(flat[at]);
    for (int d = view.dim() - 1; d >= 0 && ++index[d] == view.size(d); --d) index[d] = 0;
  }
  return out;
}
}  // namespace

TEST_CASE("copies and fills large enough to be split between the threads match a naive walk") {
  const int previous = num_threads();
  set_num_threads(2);  // the split runs on any host
  Generator gen(8);
  Tensor base = Tensor::randn({3, 130, 140}, gen, DType::f64);  // 54600 elements, above the threshold
  const std::vector<double> flat = base.to_vector<double>();
  for (const Tensor& view : {base.permute({2, 0, 1}), base.narrow(2, 8, 128),
                             base.narrow(0, 1, 1).expand({3, 130, 140}), base.view({3 * 130 * 140})}) {
    CAPTURE(shape_str(view.shape()));
    CHECK(view.contiguous().to_vector<double>() == read_through_strides(flat, view));
    CHECK(view.clone().to_vector<double>() == read_through_strides(flat, view));
  }
  for (int64_t n : {int64_t(1) << 15, int64_t(50001)}) {  // a whole number of fill chunks, and a partial last one
    CHECK(Tensor::zeros({n}).to_vector<float>() == std::vector<float>(n, 0.f));
    CHECK(Tensor::full({n}, 3, DType::i32).to_vector<int32_t>() == std::vector<int32_t>(n, 3));
  }
  set_num_threads(previous);
}

TEST_CASE("copies of strided views match a naive index walk: permutes, steps, broadcasts, casts, 0-d") {
  Generator gen(7);
  Tensor base = Tensor::randn({3, 4, 5, 6}, gen, DType::f64);
  const std::vector<double> flat = base.to_vector<double>();
  const std::vector<Tensor> views = {
      base.permute({0, 2, 1, 3}),                // a head split: rows stay contiguous
      base.permute({3, 1, 0, 2}),                // the last dimension strided
      base.slice(3, 1, 6, 2).slice(1, 0, 4, 3),  // stepped rows and columns
      base.select(2, 4).t(),
      base.narrow(0, 1, 1).expand({4, 4, 5, 6}),                 // stride 0 on a broadcast dimension
      base.select(0, 2).select(0, 1).select(0, 3).select(0, 5),  // 0-d
  };
  for (const Tensor& view : views) {
    CAPTURE(shape_str(view.shape()));
    CHECK(view.contiguous().to_vector<double>() == read_through_strides(flat, view));
    std::vector<double> as_f32 = view.to(DType::f32).to_vector<double>(), expected = read_through_strides(flat, view);
    for (double& v : expected) v = double(float(v));
    CHECK(as_f32 == expected);
  }
  // A strided destination, written from a broadcast source.
  Tensor dst = Tensor::zeros({6, 5}, DType::f64);
  dst.t().copy_(base.select(0, 0).select(0, 0).select(1, 2).unsqueeze(1));  // [5, 1] into the [5, 6] view
  const std::vector<double> column = read_through_strides(flat, base.select(0, 0).select(0, 0).select(1, 2));
  std::vector<double> got = dst.to_vector<double>();
  for (int64_t i = 0; i < 6; ++i)
    for (int64_t j = 0; j < 5; ++j) CHECK(got[i * 5 + j] == column[j]);
}
