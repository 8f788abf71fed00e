#include "headroom/core/rng.h"

#include <cmath>

namespace headroom {

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
