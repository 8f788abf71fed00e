#include "headroom/core/rng.h"

#include <cmath>

#include "headroom/core/error.h"

namespace headroom {

uint64_t Generator::reserve(uint64_t n) {
  uint64_t first = offset_;
  if (share_count_ == 0) {
    offset_ += n;
    return first;
  }
  HEADROOM_CHECK(n % share_count_ == 0, "[Generator::reserve] ", n, " draws cannot be split over the ", share_count_,
                 " rows this process computes; under a row share every draw must be per row");
  const uint64_t per_row = n / share_count_;
  offset_ += per_row * share_total_;
  return first + per_row * share_begin_;
}

void Generator::share_rows(uint64_t begin, uint64_t count, uint64_t total) {
  HEADROOM_CHECK(count > 0 && begin + count <= total, "[Generator::share_rows] rows [", begin, ", ", begin + count,
                 ") are not a non-empty part of a batch of ", total);
  share_begin_ = begin, share_count_ = count, share_total_ = total;
}

double Generator::next_normal() {
  uint64_t i = reserve(2);
  double u1 = 1.0 - uniform64_at(i);  // (0, 1]: log is finite
  double u2 = uniform64_at(i + 1);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
}

Generator& default_generator() {
  static Generator generator(0);
  return generator;
}

void manual_seed(uint64_t seed) { default_generator().set_state(seed, 0); }

}  // namespace headroom
