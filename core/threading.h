#pragma once
// CPU thread count.  headroom parallelises with OpenMP and calls OpenBLAS;
// Debian's OpenBLAS is the pthread build with its own pool, so the two are
// set together, and OpenBLAS runs single-threaded inside our OpenMP regions
// (otherwise two pools oversubscribe the cores).
//
// Default: the HEADROOM_NUM_THREADS environment variable if set, else the
// number of cores.
namespace headroom {

void set_num_threads(int n);  // n >= 1
int num_threads();

// Put around (not inside) an OpenMP parallel region whose threads each call
// OpenBLAS: OpenBLAS runs on one thread per caller for the scope.
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
