#include "headroom/core/read_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "headroom/core/error.h"

namespace headroom {
namespace {

const char* file_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

uint64_t checked_size(const struct stat& info, const std::string& path, uint64_t max_bytes, const std::string& owner) {
  HEADROOM_CHECK(S_ISREG(info.st_mode), "[", owner, "] ", path, " is ", file_kind(info.st_mode),
                 ", expected a regular file");
  const auto bytes = static_cast<uint64_t>(info.st_size);
  HEADROOM_CHECK(bytes <= max_bytes, "[", owner, "] ", path, " is ", bytes, " bytes, over the limit of ", max_bytes,
                 " bytes");
  return bytes;
}

// Closes the descriptor on every path out of read_regular_file.
struct Descriptor {
  int fd;
  ~Descriptor() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

uint64_t regular_file_size(const std::string& path, uint64_t max_bytes, const std::string& owner) {
  struct stat info {};
  HEADROOM_CHECK(::stat(path.c_str(), &info) == 0, "[", owner, "] cannot open ", path, ": ", std::strerror(errno));
  return checked_size(info, path, max_bytes, owner);
}

std::string read_regular_file(const std::string& path, uint64_t max_bytes, const std::string& owner) {
  Descriptor file{::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK)};
  HEADROOM_CHECK(file.fd >= 0, "[", owner, "] cannot open ", path, ": ", std::strerror(errno));
  struct stat info {};
  HEADROOM_CHECK(::fstat(file.fd, &info) == 0, "[", owner, "] cannot stat ", path, ": ", std::strerror(errno));
  std::string bytes(checked_size(info, path, max_bytes, owner), '\0');
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::read(file.fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    HEADROOM_CHECK(n >= 0, "[", owner, "] reading ", path, " failed: ", std::strerror(errno));
    HEADROOM_CHECK(n > 0, "[", owner, "] ", path, " shrank while being read: ", done, " of ", bytes.size(), " bytes");
    done += static_cast<size_t>(n);
  }
  return bytes;
}

}  // namespace headroom
