// The test binary's main.  HEADROOM_TEST_DEVICE=cpu|cuda chooses where
// device-parity tests run (unset: every device available).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

int main(int argc, char** argv) {
  doctest::Context context;
  context.applyCommandLine(argc, argv);
  return context.run();
}
