// The test binary's main.  The CPU/CUDA parity cases (named "cuda...") run
// only where a CUDA device is present and HEADROOM_TEST_DEVICE is not "cpu";
// elsewhere they are filtered out, so doctest counts them as skipped, and a
// ctest run of one of them prints the marker tests/CMakeLists.txt gives ctest
// as its SKIP_REGULAR_EXPRESSION.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "headroom/core/backend.h"

namespace {

bool cuda_cases_run() {
  const char* choice = std::getenv("HEADROOM_TEST_DEVICE");
  if (choice && std::strcmp(choice, "cpu") == 0) return false;
  return headroom::device_count(headroom::Device::Kind::cuda) > 0;
}

bool has_flag(int argc, char** argv, const char* flag, const char* short_flag) {
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], flag) == 0 || std::strcmp(argv[i], short_flag) == 0) return true;
  return false;
}

// True when the command line names test cases (--test-case=... or -tc=...,
// as ctest runs each case) and every one is a CUDA case.
bool asks_only_cuda_cases(int argc, char** argv) {
  bool named = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    for (const std::string prefix : {"--test-case=", "-tc="}) {
      if (arg.rfind(prefix, 0) != 0) continue;
      named = true;
      if (arg.compare(prefix.size(), 4, "cuda") != 0) return false;
    }
  }
  return named;
}

}  // namespace

int main(int argc, char** argv) {
  doctest::Context context;
  context.applyCommandLine(argc, argv);
  // ctest lists every case (doctest_discover_tests), the CUDA ones included.
  if (!cuda_cases_run() && !has_flag(argc, argv, "--list-test-cases", "-ltc")) {
    context.addFilter("test-case-exclude", "cuda*");
    if (asks_only_cuda_cases(argc, argv))
      std::printf("[headroom] skipped: no CUDA device (%s)\n",
                  headroom::device_summary(headroom::Device::Kind::cuda).c_str());
  }
  return context.run();
}
