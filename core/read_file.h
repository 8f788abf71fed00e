#pragma once
// Bounded reads of regular files, for every loader a user can point at a
// path: a directory, FIFO, device (/dev/zero) or socket is refused before
// anything is read, and so is a file over the caller's limit, so a wrong
// path never blocks or grows memory without bound.
//
//   std::string bytes = read_regular_file(path, kMaxReadBytes, "read_idx");  // errors: "[read_idx] ..."
#include <cstdint>
#include <string>

namespace headroom {

// The largest file read whole into memory by default: 4 GiB (docs/limits.md).
constexpr uint64_t kMaxReadBytes = uint64_t(4) << 30;

// The size of the regular file at `path`.  Throws headroom::Error naming
// `owner`, the path and the reason: missing, not a regular file (naming what
// it is), or larger than `max_bytes`.
uint64_t regular_file_size(const std::string& path, uint64_t max_bytes, const std::string& owner);

// The whole content of the regular file at `path`, with the checks of
// regular_file_size.  The file is opened without blocking, so a FIFO put in
// its place is refused rather than waited on.
std::string read_regular_file(const std::string& path, uint64_t max_bytes, const std::string& owner);

}  // namespace headroom
