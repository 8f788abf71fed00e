#include "headroom/core/threading.h"

#include <omp.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <string>
#include <thread>

#include "headroom/core/error.h"

extern "C" {
void openblas_set_num_threads(int num_threads);
int openblas_get_parallel(void);  // 0: sequential build, 1: pthreads, 2: OpenMP
}

namespace headroom {
namespace {

int initial_threads() {
  if (const char* env = std::getenv("HEADROOM_NUM_THREADS")) {
    // All of the value as one decimal number (from_chars takes no space or '+', as strtol would).
    const std::string text = env;
    int n = 0;
    const auto [stop, error] = std::from_chars(text.data(), text.data() + text.size(), n);
    HEADROOM_CHECK(error == std::errc() && stop == text.data() + text.size() && n >= 1 && n <= kMaxThreads,
                   "[threads] HEADROOM_NUM_THREADS='", text, "' must be a whole number from 1 to ", kMaxThreads);
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
  HEADROOM_CHECK(n >= 1 && n <= kMaxThreads, "[threads] thread count must be from 1 to ", kMaxThreads, ", got ", n);
  current() = n;
  omp_set_num_threads(n);
  openblas_set_num_threads(n);
}

int num_threads() { return current(); }

namespace {

// The OpenMP build already runs on one thread when called inside a parallel
// region, and its openblas_set_num_threads() would also shrink our own
// OpenMP team (it calls omp_set_num_threads), so only the pthread build is
// told.
bool blas_has_own_pool() {
  static const bool own_pool = openblas_get_parallel() == 1;
  return own_pool;
}

}  // namespace

BlasSingleThreadGuard::BlasSingleThreadGuard() : previous_(num_threads()) {
  if (blas_has_own_pool()) openblas_set_num_threads(1);
}
BlasSingleThreadGuard::~BlasSingleThreadGuard() {
  if (blas_has_own_pool()) openblas_set_num_threads(previous_);
}

}  // namespace headroom
