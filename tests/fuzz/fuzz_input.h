#pragma once
// What every fuzz target shares: the input written to a file, for the loaders
// that take a path (the way users reach them), and the rule that a
// headroom::Error is a clean rejection while anything else is a finding.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>

#include "headroom/core/error.h"

namespace headroom::fuzz {

// One file per process and extension, in tmpfs (/dev/shm, else $TMPDIR), so
// rewriting it on every execution costs no disk I/O and parallel jobs never
// share one.
inline std::string input_path(const char* extension) {
  static const std::string prefix = [] {
    const char* tmp = std::getenv("TMPDIR");
    std::string dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : (tmp ? tmp : "/tmp");
    return dir + "/headroom-fuzz-" + std::to_string(getpid());
  }();
  return prefix + extension;
}

// Writes the input to input_path(extension) and returns that path.
inline std::string write_input(const uint8_t* data, size_t size, const char* extension) {
  std::string path = input_path(extension);
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(reinterpret_cast<const char*>(data), size);
  return path;
}

// Runs `load`; a headroom::Error is the expected answer to a bad input.  Any
// other exception escapes, aborts, and libFuzzer reports it with its input.
template <typename Load> void expect_clean(Load&& load) {
  try {
    load();
  } catch (const headroom::Error&) {}
}

}  // namespace headroom::fuzz
