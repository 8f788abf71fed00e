#include "headroom/examples/common/image_folder.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <vector>

#include "headroom/core/error.h"
#include "headroom/core/image.h"

namespace headroom::examples {

namespace fs = std::filesystem;

namespace {

bool is_image_file(const fs::path& path) {
  std::string ext = path.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
  return ext == ".png" || ext == ".jpg" || ext == ".jpeg" || ext == ".bmp";
}

// Entries of the folder that are neither class folders nor images.
struct Skipped {
  int64_t count = 0;
  fs::path example;  // the first in path order
  void add(const fs::path& path, int64_t n = 1) {
    if (count == 0 || path < example) example = path;
    count += n;
  }
  std::string text() const {
    return count == 1 ? "1 other entry, " + example.string()
                      : std::to_string(count) + " other entries, e.g. " + example.string();
  }
};

// The sorted entries of `dir` that satisfy `keep`; the others go to `skipped`.
template <typename Keep> std::vector<fs::path> sorted_entries(const fs::path& dir, Keep keep, Skipped& skipped) {
  std::vector<fs::path> entries;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir))
    if (keep(entry)) entries.push_back(entry.path());
    else skipped.add(entry.path());
  std::sort(entries.begin(), entries.end());
  return entries;
}

// A regular file (so a FIFO named a.png is never opened) with an image's extension.
bool is_image_entry(const fs::directory_entry& entry) {
  std::error_code ignored;  // a broken link is no image
  return entry.is_regular_file(ignored) && is_image_file(entry.path());
}

}  // namespace

int64_t count_image_files(const std::string& dir) {
  std::error_code error;  // a folder that cannot be listed counts none: load_image_folder says why
  int64_t count = 0;
  for (const fs::directory_entry& class_dir : fs::directory_iterator(dir, error)) {
    if (!class_dir.is_directory(error)) continue;
    for (const fs::directory_entry& entry : fs::directory_iterator(class_dir.path(), error))
      count += is_image_entry(entry) ? 1 : 0;
  }
  return count;
}

ImageDataset load_image_folder(const std::string& dir, int64_t size, int channels) {
  HEADROOM_CHECK(size > 0, "[load_image_folder] size must be positive, got ", size);
  HEADROOM_CHECK(channels >= 1 && channels <= 4, "[load_image_folder] channels must be 1..4, got ", channels);
  HEADROOM_CHECK(fs::is_directory(dir), "[load_image_folder] ", dir, ": no such folder");
  Skipped skipped;
  std::vector<fs::path> class_dirs = sorted_entries(
      dir,
      [](const fs::directory_entry& e) {
        std::error_code ignored;
        return e.is_directory(ignored);
      },
      skipped);
  HEADROOM_CHECK(!class_dirs.empty(), "[load_image_folder] ", dir,
                 ": no class subfolders, expected one subfolder of images per class");

  ImageDataset data;
  std::vector<fs::path> files;
  std::vector<int32_t> labels;
  for (const fs::path& class_dir : class_dirs) {
    Skipped here;
    std::vector<fs::path> images = sorted_entries(class_dir, is_image_entry, here);
    HEADROOM_CHECK(!images.empty(), "[load_image_folder] ", class_dir.string(),
                   ": class folder without images (regular .png, .jpg, .jpeg or .bmp files)",
                   here.count > 0 ? ", only " + here.text() : "");
    if (here.count > 0) skipped.add(here.example, here.count);
    data.class_names.push_back(class_dir.filename().string());
    files.insert(files.end(), images.begin(), images.end());
    labels.insert(labels.end(), images.size(), static_cast<int32_t>(data.class_names.size() - 1));
  }
  // One line, so that a folder of many stray files does not flood the output.
  if (skipped.count > 0)
    std::printf("note: %s: skipped %s (neither class folders nor regular .png, .jpg, .jpeg or .bmp files in one)\n",
                dir.c_str(), skipped.text().c_str());

  auto n = static_cast<int64_t>(files.size());
  data.images = Tensor::empty({n, channels, size, size});  // [N, C, S, S]
  int64_t image_numel = channels * size * size;
  for (int64_t i = 0; i < n; ++i) {
    // load_image's errors name the file and stb's reason.
    Tensor hwc = resize_image(load_image(files[i].string(), channels), size, size);  // [S, S, C]
    Tensor chw = hwc.permute({2, 0, 1}).contiguous();                                // [C, S, S]
    std::memcpy(data.images.data<float>() + i * image_numel, chw.data<float>(), image_numel * sizeof(float));
  }
  data.labels = Tensor::from_vector(labels);
  return data;
}

}  // namespace headroom::examples
