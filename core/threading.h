#pragma once
// CPU thread count.  headroom parallelises with OpenMP and calls OpenBLAS.
// CMake prefers Debian's OpenMP build of OpenBLAS (libopenblas-openmp-dev),
// which runs on the same libgomp thread pool as our kernels.  With the
// default pthread build, OpenBLAS keeps a second pool of its own: the two
// counts are set together, and OpenBLAS is made single-threaded inside our
// OpenMP regions (otherwise two pools oversubscribe the cores), but its idle
// threads still spin for a while after each call and slow our regions down.
//
// Default: the HEADROOM_NUM_THREADS environment variable if set (a whole
// number in 1..kMaxThreads, else an error), else the number of cores.
namespace headroom {

// The most threads headroom runs (OpenMP and OpenBLAS spin, not speed up,
// past the core count; a larger request is a typo).
constexpr int kMaxThreads = 1024;

void set_num_threads(int n);  // 1 <= n <= kMaxThreads
int num_threads();

// Put around (not inside) an OpenMP parallel region whose threads each call
// OpenBLAS: OpenBLAS runs on one thread per caller for the scope (a no-op
// with the OpenMP build, which does so by itself).
class BlasSingleThreadGuard {
 public:
  BlasSingleThreadGuard();
  ~BlasSingleThreadGuard();
  BlasSingleThreadGuard(const BlasSingleThreadGuard&) = delete;
  BlasSingleThreadGuard& operator=(const BlasSingleThreadGuard&) = delete;

 private:
  int previous_;
};

}  // namespace headroom
