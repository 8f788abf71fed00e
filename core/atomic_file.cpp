#include "headroom/core/atomic_file.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "headroom/core/error.h"

namespace headroom {
namespace {

// "dir/name" -> {"dir", "name"}; "name" -> {".", "name"}.
std::pair<std::string, std::string> split_path(const std::string& path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos) return {".", path};
  return {slash == 0 ? "/" : path.substr(0, slash), path.substr(slash + 1)};
}

// The pid in "<name>.tmp.<pid>.<counter>", or 0 when `entry` is not such a name.
long temp_owner_pid(const std::string& entry, const std::string& name) {
  const std::string prefix = name + ".tmp.";
  if (entry.compare(0, prefix.size(), prefix) != 0) return 0;
  char* end = nullptr;
  long pid = std::strtol(entry.c_str() + prefix.size(), &end, 10);
  return (pid > 0 && *end == '.') ? pid : 0;
}

// Removes the temporary files that killed writers of `path` left behind
// (their process no longer exists), so interrupted runs do not pile up
// full-size copies.
void remove_stale_temporaries(const std::string& path) {
  auto [dir, name] = split_path(path);
  DIR* listing = ::opendir(dir.c_str());
  if (listing == nullptr) return;
  while (const dirent* entry = ::readdir(listing)) {
    long pid = temp_owner_pid(entry->d_name, name);
    if (pid > 0 && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH)
      ::unlink((dir + "/" + entry->d_name).c_str());
  }
  ::closedir(listing);
}

// Makes a rename in `dir` durable: without this a power cut can lose the new name.
void sync_directory(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

}  // namespace

AtomicFile::AtomicFile(const std::string& path, const std::string& owner) : path_(path), owner_(owner) {
  static std::atomic<unsigned> counter{0};
  remove_stale_temporaries(path);
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
  sync_directory(split_path(path_).first);
}

void write_file_atomically(const std::string& path, const std::string& text, const std::string& owner) {
  AtomicFile file(path, owner);
  file.write(text.data(), text.size());
  file.commit();
}

}  // namespace headroom
