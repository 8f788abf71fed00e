// Bounded reads of regular files (core/read_file.h) and the leftovers of
// atomic writes (core/atomic_file.h): what a wrong path or a killed run gets.
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "headroom/core/atomic_file.h"
#include "headroom/core/read_file.h"
#include "helpers.h"

using namespace headroom;
using headroom::testing::TempDir;

TEST_CASE("read_file: a regular file is read whole, within its limit") {
  TempDir dir("read_ok");
  std::string path = dir.write("a.txt", std::string("ab\0cd", 5));
  CHECK(read_regular_file(path, 5, "test") == std::string("ab\0cd", 5));
  CHECK(regular_file_size(path, 5, "test") == 5);
  CHECK(read_regular_file(dir.write("empty", ""), 0, "test").empty());
  CHECK_THROWS_HEADROOM(read_regular_file(path, 4, "test"),
                        ("[test] " + path + " is 5 bytes, over the limit of 4 bytes").c_str());
  CHECK_THROWS_HEADROOM(regular_file_size(path, 4, "test"), "is 5 bytes, over the limit of 4 bytes");
}

TEST_CASE("read_file: folders, FIFOs, devices and missing files are refused before reading") {
  TempDir dir("read_kinds");
  std::string fifo = dir.file("fifo");
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  // A FIFO with no writer would block a plain open() forever.
  CHECK_THROWS_HEADROOM(read_regular_file(fifo, kMaxReadBytes, "read_idx"),
                        ("[read_idx] " + fifo + " is a FIFO, expected a regular file").c_str());
  CHECK_THROWS_HEADROOM(regular_file_size(fifo, kMaxReadBytes, "x"), "is a FIFO");
  CHECK_THROWS_HEADROOM(read_regular_file(dir.path.string(), kMaxReadBytes, "x"),
                        "is a directory, expected a regular file");
  CHECK_THROWS_HEADROOM(read_regular_file("/dev/zero", kMaxReadBytes, "x"),
                        "/dev/zero is a character device, expected a regular file");
  CHECK_THROWS_HEADROOM(read_regular_file(dir.file("absent"), kMaxReadBytes, "x"), "cannot open");
  CHECK_THROWS_HEADROOM(regular_file_size(dir.file("absent"), kMaxReadBytes, "x"), "No such file or directory");
}

namespace {

// The pid of a process that has exited (and been reaped), so no process has it for now.
pid_t dead_pid() {
  pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ::waitpid(child, nullptr, 0);
  return child;
}

}  // namespace

TEST_CASE("atomic_file: a new write removes the temporaries of killed writers and keeps live ones") {
  TempDir dir("atomic_stale");
  std::string path = dir.file("checkpoint.safetensors");
  std::string stale = dir.write("checkpoint.safetensors.tmp." + std::to_string(dead_pid()) + ".0", "half a checkpoint");
  std::string live = dir.write("checkpoint.safetensors.tmp.1.0", "pid 1 is alive");  // init
  std::string other = dir.write("other.safetensors.tmp." + std::to_string(dead_pid()) + ".0", "another file's");
  write_file_atomically(path, "new", "test");
  CHECK_FALSE(std::filesystem::exists(stale));
  CHECK(std::filesystem::exists(live));
  CHECK(std::filesystem::exists(other));  // only the temporaries of this path
  CHECK(read_regular_file(path, 3, "test") == "new");
}
