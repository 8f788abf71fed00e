// CUDA parity of the routing family: route() (the plan built on the device,
// compared entry by entry with the CPU's), topk, put_along_rows, index_select, gather_rows,
// scatter_add_rows and the three grouped matmuls, forward and backward through
// the public ops, on the edge cases every route plan must handle (an empty segment, all
// tokens on one segment, k == E, a single token, no tokens) and at sizes that
// are not multiples of the GEMM tiles (64 x 64, 16-deep steps).  Bad indices
// on the device are reported by a later call.  Skipped without a device.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "cuda_helpers.h"
#include "headroom/core/backend.h"
#include "headroom/ops/routing.h"

using namespace headroom;
using headroom::testing::check_parity;
using headroom::testing::compare;

namespace {

Tensor random_indices(int64_t tokens, int64_t k, int64_t segments, uint64_t seed) {
  Generator gen(seed);
  std::vector<int32_t> values(tokens * k);
  for (int32_t& v : values) v = int32_t(gen.next_int(segments));
  return Tensor::from_vector(values, {tokens, k});
}

// A routing of `tokens` tokens, k slots each, over `segments` segments.
struct RoutingCase {
  std::string name;
  Tensor indices;  // i32 [tokens, k], on the CPU
  int64_t segments;
};

// The plans every parity test runs on.  70 tokens make more rows than one
// 64-row tile; segment 2 of the first case gets no row.
std::vector<RoutingCase> routing_cases() {
  std::vector<int32_t> skip_two = random_indices(70, 2, 4, 1).to_vector<int32_t>();
  for (int32_t& e : skip_two) e = e == 2 ? 4 : e;
  std::vector<int32_t> every_segment;  // k == E: token t takes segments t, t+1, ... (mod E)
  for (int32_t t = 0; t < 33; ++t)
    for (int32_t j = 0; j < 3; ++j) every_segment.push_back((t + j) % 3);
  return {
      {"an empty segment", Tensor::from_vector(skip_two, {70, 2}), 5},
      {"all tokens on one segment", Tensor::full({150, 1}, 1, DType::i32), 3},
      {"k == E", Tensor::from_vector(every_segment, {33, 3}), 3},
      {"one token", Tensor::from_vector<int32_t>({2, 0}, {1, 2}), 4},
  };
}

std::vector<int32_t> host_ints(const Tensor& t) { return t.to(Device::cpu()).to_vector<int32_t>(); }

void check_same_plan(const RoutePlan& gpu, const RoutePlan& cpu) {
  CHECK(gpu.offsets.device() == Device::cuda());
  CHECK(host_ints(gpu.offsets) == host_ints(cpu.offsets));
  CHECK(host_ints(gpu.order) == host_ints(cpu.order));
  CHECK(host_ints(gpu.position) == host_ints(cpu.position));
  CHECK(host_ints(gpu.segment) == host_ints(cpu.segment));
  CHECK(host_ints(gpu.counts) == host_ints(cpu.counts));
}

Tensor randn(const Shape& shape, uint64_t seed, DType dtype = DType::f32) {
  Generator gen(seed);
  return Tensor::randn(shape, gen, dtype);
}

}  // namespace

// ---- route -------------------------------------------------------------------------

TEST_CASE("cuda routing: route() builds the CPU's plan on the device") {
  std::vector<RoutingCase> cases = routing_cases();
  // The pairs cut into 6 chunks; into 3, fewer because of the segment count;
  // more segments than pairs; so many segments that one chunk holds all 5000
  // pairs; no tokens at all.
  cases.push_back({"many chunks", random_indices(3000, 2, 7, 2), 7});
  cases.push_back({"chunks limited by segments", random_indices(3000, 2, 20000, 6), 20000});
  cases.push_back({"sparse segments", random_indices(40, 3, 5000, 3), 5000});
  cases.push_back({"one chunk", random_indices(2500, 2, 100003, 4), 100003});
  cases.push_back({"no tokens", Tensor::empty({0, 2}, DType::i32), 3});
  for (const RoutingCase& c : cases) {
    INFO(c.name);
    check_same_plan(route(c.indices.to(Device::cuda()), c.segments), route(c.indices, c.segments));
  }
  // Non-contiguous indices.
  Tensor wide = random_indices(3, 40, 6, 5);
  check_same_plan(route(wide.to(Device::cuda()).t(), 6), route(wide.t(), 6));
}

TEST_CASE("cuda routing: bad indices on the device are reported by a later call") {
  Tensor good = Tensor::from_vector<int32_t>({0, 1, 3, 2}, {2, 2}).to(Device::cuda());
  // Pair 2 (token 1) and pair 4 are out of range; they count as segment 0.
  RoutePlan plan = route(Tensor::from_vector<int32_t>({0, 1, 4, 2, -1, 0}, {3, 2}).to(Device::cuda()), 4);
  CHECK(host_ints(plan.counts) == std::vector<int32_t>{4, 1, 1, 0});  // copying waits for the device
  CHECK_THROWS_HEADROOM(route(good, 4), "[route] index 4 of token 1 is outside [0, 4)");
  CHECK_NOTHROW(route(good, 4));  // reported once

  Tensor x = randn({3, 2}, 1).to(Device::cuda());
  index_select(x, 0, Tensor::from_vector<int32_t>({2, 5, 0}).to(Device::cuda()));
  backend(Device::cuda()).synchronize(0);
  CHECK_THROWS_HEADROOM(index_select(x, 0, Tensor::from_vector<int32_t>({1}).to(Device::cuda())),
                        "[index_select] index 5 at position 1 is out of range for a dimension of size 3");
  CHECK_NOTHROW(index_select(x, 0, Tensor::from_vector<int32_t>({1}).to(Device::cuda())));
  // A dimension of size 0 has no row to read in place of a bad index: refused at once.
  CHECK_THROWS_HEADROOM(index_select(Tensor::zeros({2, 0, 3}, DType::f32, Device::cuda()), 1,
                                     Tensor::from_vector<int32_t>({0}).to(Device::cuda())),
                        "[index_select] cannot select 1 indices from dimension 1 of size 0");
}

TEST_CASE("cuda routing: a plan on another device than the inputs is refused") {
  RoutePlan plan = route(random_indices(4, 2, 3, 1), 3);
  CHECK_THROWS_HEADROOM(gather_rows(Tensor::zeros({4, 3}, DType::f32, Device::cuda()), plan),
                        "[gather_rows] the route plan is on cpu but the inputs are on cuda:0");
  RoutePlan gpu_plan = route(random_indices(4, 2, 3, 1).to(Device::cuda()), 3);
  CHECK_THROWS_HEADROOM(gpu_plan.token_of_row(0), "[RoutePlan] token_of_row reads the plan on the host");
}

// ---- topk ---------------------------------------------------------------------------

TEST_CASE("cuda routing: topk matches the CPU, ties, NaN, values and gradient") {
  // Small integers make many ties; lengths 1, 7, 33 (more than a warp) and 100.
  for (int64_t n : {1, 7, 33, 100}) {
    Generator gen{uint64_t(n)};
    std::vector<float> raw(5 * 3 * n);
    for (float& v : raw) v = float(gen.next_int(4));
    if (n > 1) raw[4] = NAN, raw[n + 1] = NAN;
    Tensor x = Tensor::from_vector(raw, {5, 3, n});
    for (int64_t k : {int64_t(1), std::min<int64_t>(n, 16), n}) {
      INFO("n = ", n, ", k = ", k);
      TopK cpu = topk(x, k), gpu = topk(x.to(Device::cuda()), k);
      CHECK(host_ints(gpu.indices) == host_ints(cpu.indices));
      std::vector<float> gpu_values = gpu.values.to(Device::cpu()).to_vector<float>();
      std::vector<float> cpu_values = cpu.values.to_vector<float>();
      for (size_t i = 0; i < cpu_values.size(); ++i)  // NaN where a NaN was picked
        CHECK((gpu_values[i] == cpu_values[i] || (std::isnan(gpu_values[i]) && std::isnan(cpu_values[i]))));
    }
  }
  // Gradient, through a non-contiguous input, f32 and f64.
  check_parity([](const std::vector<Tensor>& in) { return topk(in[0].transpose(0, 2), 4).values; },
               {randn({37, 3, 2}, 1)}, 0);
  check_parity([](const std::vector<Tensor>& in) { return topk(in[0], 16).values; }, {randn({9, 40}, 2, DType::f64)},
               0);
}

// ---- put_along_rows ----------------------------------------------------------------------

TEST_CASE("cuda routing: put_along_rows matches the CPU, repeated indices, values and gradient") {
  // 300 rows (more than one block of threads), k = 3 of n = 4 with repeats; f32 and f64.
  for (DType dtype : {DType::f32, DType::f64}) {
    Tensor indices = random_indices(300, 3, 4, 21);
    check_parity([&](const std::vector<Tensor>& in) { return put_along_rows(in[0], in[1], 4); },
                 {randn({300, 3}, 3, dtype), indices}, 0);
  }
  // A bad index is reported by a later call, as index_select's.
  Tensor values = randn({2, 2}, 4).to(Device::cuda());
  put_along_rows(values, Tensor::from_vector<int32_t>({0, 1, 7, 0}, {2, 2}).to(Device::cuda()), 4);
  backend(Device::cuda()).synchronize(0);
  CHECK_THROWS_HEADROOM(
      put_along_rows(values, Tensor::from_vector<int32_t>({0, 1, 2, 3}, {2, 2}).to(Device::cuda()), 4),
      "[put_along_rows] index 7 at position 2 is outside [0, n = 4)");
  CHECK_NOTHROW(put_along_rows(values, Tensor::from_vector<int32_t>({0, 1, 2, 3}, {2, 2}).to(Device::cuda()), 4));
}

// ---- index_select -----------------------------------------------------------------------

TEST_CASE("cuda routing: index_select forward and backward on every dimension") {
  Tensor x = randn({5, 6, 7}, 1);
  // Per dimension of the permuted view [6, 7, 5].
  const std::vector<int32_t> picks[3] = {{4, 1, 4, 0, 5}, {6, 0, 6}, {4, 4, 1, 0, 2, 4, 4}};
  for (int dim = 0; dim < 3; ++dim) {
    INFO("dim ", dim);
    Tensor indices = Tensor::from_vector(picks[dim]);
    check_parity(
        [&](const std::vector<Tensor>& in) {
          return index_select(in[0].permute({1, 2, 0}), dim, in[1]);
        },
        {x, indices}, 0);
  }
  // A 0-d index; no indices; integer and f64 tensors.
  check_parity([](const std::vector<Tensor>& in) { return index_select(in[0], 1, in[1]); },
               {x, Tensor::scalar(3, DType::i32)}, 0);
  check_parity([](const std::vector<Tensor>& in) { return index_select(in[0], 0, in[1]); },
               {x, Tensor::empty({0}, DType::i32)}, 0);
  check_parity([](const std::vector<Tensor>& in) { return index_select(in[0], 2, in[1]); },
               {randn({3, 2, 257}, 2, DType::f64), Tensor::from_vector<int32_t>({256, 0, 256})}, 0);
  Tensor ints = Tensor::arange(0, 24, 1, DType::i32).reshape({4, 6});
  Tensor picked = index_select(ints.to(Device::cuda()), 1, Tensor::from_vector<int32_t>({5, 0, 5}).to(Device::cuda()));
  CHECK(host_ints(picked) == index_select(ints, 1, Tensor::from_vector<int32_t>({5, 0, 5})).to_vector<int32_t>());
}

// ---- gather_rows / scatter_add_rows ---------------------------------------------------------

TEST_CASE("cuda routing: gather_rows and scatter_add_rows, with and without gates") {
  for (const RoutingCase& c : routing_cases()) {
    INFO(c.name);
    const int64_t tokens = c.indices.size(0), k = c.indices.size(1), segments = c.segments;
    for (int64_t width : {1, 33}) {
      // x is a column slice (non-contiguous).
      check_parity(
          [&](const std::vector<Tensor>& in) {
            return gather_rows(in[0].slice(1, 1, width + 1), route(in[1], segments));
          },
          {randn({tokens, width + 2}, 1), c.indices}, 1e-6);
      check_parity(
          [&](const std::vector<Tensor>& in) { return scatter_add_rows(in[0], in[1].t(), route(in[2], segments)); },
          {randn({tokens * k, width}, 2), randn({k, tokens}, 3), c.indices}, 1e-5);
      check_parity(
          [&](const std::vector<Tensor>& in) { return scatter_add_rows(in[0], Tensor(), route(in[1], segments)); },
          {randn({tokens * k, width}, 4), c.indices}, 1e-5);
    }
  }
  RoutingCase first = routing_cases()[0];
  check_parity(
      [&](const std::vector<Tensor>& in) {
        RoutePlan plan = route(in[2], first.segments);
        return scatter_add_rows(gather_rows(in[0], plan), in[1], plan);
      },
      {randn({70, 7}, 5, DType::f64), randn({70, 2}, 6, DType::f64), first.indices}, 1e-12);
}

// ---- grouped matmuls ------------------------------------------------------------------------

// Widths (in, out) around the tile sizes: one column, odd, over two tiles.
const std::vector<std::pair<int64_t, int64_t>> kMatmulWidths = {{70, 33}, {1, 130}, {17, 1}};

TEST_CASE("cuda routing: segment_matmul forward and backward (tiled, empty segments)") {
  for (const RoutingCase& c : routing_cases()) {
    const int64_t rows = c.indices.numel(), segments = c.segments;
    for (auto in_out : kMatmulWidths) {
      auto in = in_out.first;  // named: Clang 14 lambdas cannot capture structured bindings
      auto out = in_out.second;
      INFO(c.name, ", in = ", in, ", out = ", out);
      // The weight is a transposed view (non-contiguous).
      check_parity(
          [&](const std::vector<Tensor>& in_) {
            return segment_matmul(in_[0], in_[1].transpose(1, 2), route(in_[2], segments));
          },
          {randn({rows, in}, 1), randn({segments, out, in}, 2), c.indices}, 1e-4);
    }
  }
  RoutingCase first = routing_cases()[0];
  check_parity(
      [&](const std::vector<Tensor>& in) { return segment_matmul(in[0], in[1], route(in[2], first.segments)); },
      {randn({140, 65}, 3, DType::f64), randn({5, 65, 20}, 4, DType::f64), first.indices}, 1e-10);
}

TEST_CASE("cuda routing: gather_segment_matmul and segment_matmul_scatter forward and backward") {
  for (const RoutingCase& c : routing_cases()) {
    const int64_t tokens = c.indices.size(0), rows = c.indices.numel(), segments = c.segments;
    for (auto in_out : kMatmulWidths) {
      auto in = in_out.first;  // named: Clang 14 lambdas cannot capture structured bindings
      auto out = in_out.second;
      INFO(c.name, ", in = ", in, ", out = ", out);
      check_parity(
          [&](const std::vector<Tensor>& in_) {
            return gather_segment_matmul(in_[0], in_[1], route(in_[2], segments));
          },
          {randn({tokens, in}, 1), randn({segments, in, out}, 2), c.indices}, 1e-4);
      check_parity(
          [&](const std::vector<Tensor>& in_) {
            return segment_matmul_scatter(in_[0], in_[1], route(in_[2], segments));
          },
          {randn({rows, in}, 3), randn({segments, in, out}, 4), c.indices}, 1e-4);
    }
  }
  RoutingCase first = routing_cases()[0];
  check_parity(
      [&](const std::vector<Tensor>& in) {
        RoutePlan plan = route(in[3], first.segments);
        return segment_matmul_scatter(gather_segment_matmul(in[0], in[1], plan), in[2], plan);
      },
      {randn({70, 9}, 5, DType::f64), randn({5, 9, 66}, 6, DType::f64), randn({5, 66, 3}, 7, DType::f64),
       first.indices},
      1e-10);
}

TEST_CASE("cuda routing: grouped matmul gradients are identical run to run") {
  RoutingCase first = routing_cases()[0];
  Tensor indices = first.indices.to(Device::cuda());
  Tensor seed = randn({70, 50}, 3).to(Device::cuda());
  auto weight_grads = [&]() {
    Tensor x = randn({70, 50}, 1).to(Device::cuda());
    Tensor w_in = randn({5, 50, 40}, 2).to(Device::cuda()).set_requires_grad();
    Tensor w_out = randn({5, 40, 50}, 4).to(Device::cuda()).set_requires_grad();
    RoutePlan plan = route(indices, first.segments);
    segment_matmul_scatter(gather_segment_matmul(x, w_in, plan), w_out, plan).backward(seed);
    return std::vector<Tensor>{w_in.grad().to(Device::cpu()), w_out.grad().to(Device::cpu())};
  };
  std::vector<Tensor> first_run = weight_grads(), second_run = weight_grads();
  CHECK(compare(first_run[0], second_run[0], 0) == "");
  CHECK(compare(first_run[1], second_run[1], 0) == "");
}
