#include "headroom/core/threading.h"

#include <omp.h>

#include <cstdlib>
#include <string>
#include <thread>

#include "headroom/core/error.h"

extern "C" {
void openblas_set_num_threads(int num_threads);
int openblas_get_num_threads(void);
}

namespace headroom {
namespace {

int initial_threads() {
  if (const char* env = std::getenv("HEADROOM_NUM_THREADS")) {
    int n = std::atoi(env);
    HEADROOM_CHECK(n >= 1, "[threads] HEADROOM_NUM_THREADS='", env, "' must be a positive integer");
    return n;
  }
  return std::max(1u, std::thread::hardware_concurrency());
}

int& current() {
  static int threads = [] {
    int n = initial_threads();
    omp_set_num_threads(n);
    openblas_set_num_threads(n);
    return n;
  }();
  return threads;
}

}  // namespace

void set_num_threads(int n) {
  HEADROOM_CHECK(n >= 1, "[threads] thread count must be >= 1, got ", n);
  current() = n;
  omp_set_num_threads(n);
  openblas_set_num_threads(n);
}

int num_threads() { return current(); }

BlasSingleThreadGuard::BlasSingleThreadGuard() : previous_(num_threads()) {
  openblas_set_num_threads(1);
}
BlasSingleThreadGuard::~BlasSingleThreadGuard() { openblas_set_num_threads(previous_); }

}  // namespace headroom
