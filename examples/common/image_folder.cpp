#include "headroom/examples/common/image_folder.h"

#include <algorithm>
#include <cctype>
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

// The sorted entries of `dir` that satisfy `keep`.
template <typename Keep> std::vector<fs::path> sorted_entries(const fs::path& dir, Keep keep) {
  std::vector<fs::path> entries;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir))
    if (keep(entry)) entries.push_back(entry.path());
  std::sort(entries.begin(), entries.end());
  return entries;
}

}  // namespace

ImageDataset load_image_folder(const std::string& dir, int64_t size, int channels) {
  HEADROOM_CHECK(size > 0, "[load_image_folder] size must be positive, got ", size);
  HEADROOM_CHECK(channels >= 1 && channels <= 4, "[load_image_folder] channels must be 1..4, got ", channels);
  HEADROOM_CHECK(fs::is_directory(dir), "[load_image_folder] ", dir, ": no such folder");
  std::vector<fs::path> class_dirs = sorted_entries(dir, [](const fs::directory_entry& e) { return e.is_directory(); });
  HEADROOM_CHECK(!class_dirs.empty(), "[load_image_folder] ", dir,
                 ": no class subfolders, expected one subfolder of images per class");

  ImageDataset data;
  std::vector<fs::path> files;
  std::vector<int32_t> labels;
  for (const fs::path& class_dir : class_dirs) {
    std::vector<fs::path> images = sorted_entries(
        class_dir, [](const fs::directory_entry& e) { return e.is_regular_file() && is_image_file(e.path()); });
    HEADROOM_CHECK(!images.empty(), "[load_image_folder] ", class_dir.string(),
                   ": class folder without images (.png, .jpg, .jpeg or .bmp)");
    data.class_names.push_back(class_dir.filename().string());
    files.insert(files.end(), images.begin(), images.end());
    labels.insert(labels.end(), images.size(), static_cast<int32_t>(data.class_names.size() - 1));
  }

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
