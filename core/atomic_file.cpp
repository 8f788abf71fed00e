#include "headroom/core/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "headroom/core/error.h"

namespace headroom {

AtomicFile::AtomicFile(const std::string& path, const std::string& owner) : path_(path), owner_(owner) {
  static std::atomic<unsigned> counter{0};
  temp_ = path + ".tmp." + std::to_string(getpid()) + "." + std::to_string(counter++);
  fd_ = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  HEADROOM_CHECK(fd_ >= 0, "[", owner_, "] cannot create the temporary file ", temp_, " to save ", path, ": ",
                 std::strerror(errno));
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(temp_.c_str());
}

void AtomicFile::write(const void* data, size_t bytes) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    ssize_t n = ::write(fd_, p, bytes);
    if (n < 0 && errno == EINTR) continue;
    HEADROOM_CHECK(n > 0, "[", owner_, "] writing ", temp_, " failed: ", std::strerror(errno));
    p += n;
    bytes -= static_cast<size_t>(n);
  }
}

void AtomicFile::commit() {
  HEADROOM_CHECK(::fsync(fd_) == 0, "[", owner_, "] flushing ", temp_, " failed: ", std::strerror(errno));
  int closed = ::close(fd_);
  fd_ = -1;
  HEADROOM_CHECK(closed == 0, "[", owner_, "] closing ", temp_, " failed: ", std::strerror(errno));
  HEADROOM_CHECK(::rename(temp_.c_str(), path_.c_str()) == 0, "[", owner_, "] renaming ", temp_, " to ", path_,
                 " failed: ", std::strerror(errno));
  committed_ = true;
}

void write_file_atomically(const std::string& path, const std::string& text, const std::string& owner) {
  AtomicFile file(path, owner);
  file.write(text.data(), text.size());
  file.commit();
}

}  // namespace headroom
