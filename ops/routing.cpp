// Routing: the route plan (a stable counting sort of (token, slot) pairs by
// segment).
#include "headroom/ops/routing.h"

namespace headroom {

int64_t RoutePlan::token_of_row(int64_t r) const { return order.data<int32_t>()[r] / k; }
int64_t RoutePlan::segment_of_row(int64_t r) const { return segment.data<int32_t>()[r]; }

RoutePlan route(const Tensor& indices, int64_t num_segments) {
  check_dtype("route", indices, DType::i32, "indices");
  check_cpu("route", {indices});
  HEADROOM_CHECK(indices.dim() == 2, "[route] expected indices of shape [N, k], got ",
                 shape_str(indices.shape()));
  HEADROOM_CHECK(num_segments >= 1, "[route] number of segments must be >= 1, got ", num_segments);
  RoutePlan plan;
  plan.num_tokens = indices.size(0);
  plan.k = indices.size(1);
  plan.num_segments = num_segments;
  const int64_t pairs = plan.rows();
  std::vector<int32_t> chosen = indices.to_vector<int32_t>();  // pair p -> segment

  // 1. histogram   2. exclusive prefix sum   3. stable scatter in pair order.
  std::vector<int32_t> counts(num_segments, 0);
  for (int64_t p = 0; p < pairs; ++p) {
    HEADROOM_CHECK(chosen[p] >= 0 && chosen[p] < num_segments, "[route] index ", chosen[p],
                   " of token ", p / plan.k, " is outside [0, ", num_segments, ")");
    ++counts[chosen[p]];
  }
  std::vector<int32_t> offsets(num_segments + 1, 0);
  for (int64_t e = 0; e < num_segments; ++e) offsets[e + 1] = offsets[e] + counts[e];
  std::vector<int32_t> next(offsets.begin(), offsets.end() - 1);
  std::vector<int32_t> order(pairs), position(pairs), segment(pairs);
  for (int64_t p = 0; p < pairs; ++p) {
    int32_t r = next[chosen[p]]++;
    order[r] = static_cast<int32_t>(p);
    position[p] = r;
    segment[r] = chosen[p];
  }
  plan.offsets = Tensor::from_vector(offsets);
  plan.order = Tensor::from_vector(order);
  plan.position = Tensor::from_vector(position);
  plan.segment = Tensor::from_vector(segment);
  plan.counts = Tensor::from_vector(counts);
  return plan;
}

}  // namespace headroom
