#pragma once
// Atomic file writes: data goes to a temporary file beside the target, which
// is flushed (fsync) and renamed over the target only on commit().  Readers
// never see a partial file, and a failed or abandoned write (an exception
// before commit) leaves the old file untouched and removes the temporary.
// After the rename the directory is synced, so the new name survives a power
// cut; a new AtomicFile removes the temporaries of writers that were killed
// (whose process is gone), so interrupted runs do not leave copies behind.
//
//   AtomicFile file(path, "safetensors");   // the owner names errors: "[safetensors] ..."
//   file.write(bytes, n);
//   file.commit();
#include <cstddef>
#include <string>

namespace headroom {

class AtomicFile {
 public:
  AtomicFile(const std::string& path, const std::string& owner);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, size_t bytes);
  void commit();

 private:
  std::string path_, owner_, temp_;
  int fd_ = -1;
  bool committed_ = false;
};

// Writes `text` to `path` atomically.
void write_file_atomically(const std::string& path, const std::string& text, const std::string& owner);

}  // namespace headroom
