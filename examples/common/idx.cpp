#include "headroom/examples/common/idx.h"

#include <algorithm>
#include <fstream>
#include <numeric>
#include <utility>

#include "headroom/core/error.h"
#include "headroom/core/read_file.h"
#include "headroom/core/rng.h"
#include "headroom/ops/routing.h"

namespace headroom::examples {

namespace {

constexpr int kUnsignedByte = 0x08;

uint32_t big_endian_u32(const std::string& bytes, size_t at) {
  uint32_t value = 0;
  for (size_t k = 0; k < 4; ++k) value = (value << 8) | static_cast<unsigned char>(bytes[at + k]);
  return value;
}

// The shape the header at the start of `bytes` (the file, or at least its
// header) gives; the header is 4 + 4 · dimensions bytes.
std::vector<int64_t> header_shape(const std::string& bytes, const std::string& path) {
  HEADROOM_CHECK(bytes.size() >= 4, "[read_idx] ", path, ": ", bytes.size(),
                 " bytes, too short for the 4-byte IDX magic");
  auto byte = [&](size_t i) { return static_cast<int>(static_cast<unsigned char>(bytes[i])); };
  HEADROOM_CHECK(byte(0) == 0 && byte(1) == 0 && byte(3) >= 1 && byte(3) <= 4, "[read_idx] ", path,
                 ": bad magic, expected 00 00 <type> <1..4 dimensions> (an uncompressed IDX file)");
  HEADROOM_CHECK(byte(2) == kUnsignedByte, "[read_idx] ", path, ": unsupported element type 0x", std::hex, byte(2),
                 ", expected 0x08 (unsigned byte)");
  size_t ndim = static_cast<size_t>(byte(3));
  const size_t header = 4 + 4 * ndim;
  HEADROOM_CHECK(bytes.size() >= header, "[read_idx] ", path, ": truncated header, expected ", header, " bytes for ",
                 ndim, " dimensions, got ", bytes.size());
  std::vector<int64_t> shape;
  for (size_t d = 0; d < ndim; ++d) shape.push_back(big_endian_u32(bytes, 4 + 4 * d));
  return shape;
}

}  // namespace

IdxArray read_idx(const std::string& path) {
  std::string bytes = read_regular_file(path, kMaxIdxBytes, "read_idx");
  IdxArray array;
  array.shape = header_shape(bytes, path);
  const size_t header = 4 + 4 * array.shape.size();
  // Elements the shape needs, capped at held + 1 (four u32 sizes can overflow 64 bits).
  uint64_t held = bytes.size() - header, needed = 1;
  for (int64_t dim : array.shape) {
    auto size = static_cast<uint64_t>(dim);
    needed = size == 0 || needed <= (held + 1) / size ? needed * size : held + 1;
  }
  HEADROOM_CHECK(needed <= held, "[read_idx] ", path, ": truncated, the header's shape ", shape_str(array.shape),
                 " needs more than the ", held, " bytes of elements the file holds");
  HEADROOM_CHECK(needed == held, "[read_idx] ", path, ": ", held - needed, " trailing bytes after the ",
                 shape_str(array.shape), " elements the header describes");
  array.data.assign(bytes.begin() + static_cast<std::ptrdiff_t>(header), bytes.end());
  return array;
}

std::vector<int64_t> read_idx_shape(const std::string& path) {
  regular_file_size(path, kMaxIdxBytes, "read_idx");  // a FIFO or device is refused, never opened
  std::ifstream in(path, std::ios::binary);
  std::string bytes(4 + 4 * 4, '\0');  // the longest header: 4 dimensions
  in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  bytes.resize(static_cast<size_t>(in.gcount()));
  return header_shape(bytes, path);
}

ImageDataset load_idx_dataset(const std::string& images_path, const std::string& labels_path,
                              std::vector<std::string> class_names) {
  IdxArray images = read_idx(images_path);
  IdxArray labels = read_idx(labels_path);
  HEADROOM_CHECK(images.shape.size() == 3 || images.shape.size() == 4, "[load_idx_dataset] ", images_path,
                 ": expected images [N, H, W] or [N, H, W, C], got ", images.shape.size(), " dimensions");
  HEADROOM_CHECK(labels.shape.size() == 1, "[load_idx_dataset] ", labels_path, ": expected labels [N], got ",
                 labels.shape.size(), " dimensions");
  HEADROOM_CHECK(images.shape[0] == labels.shape[0], "[load_idx_dataset] ", images_path, " holds ", images.shape[0],
                 " images but ", labels_path, " holds ", labels.shape[0], " labels");
  // An empty set or image would only surface later, as a division by zero.
  for (int64_t size : images.shape)
    HEADROOM_CHECK(size > 0, "[load_idx_dataset] ", images_path, ": shape ", shape_str(images.shape),
                   " holds no images or empty ones, expected every size positive");
  for (size_t i = 0; i < labels.data.size(); ++i)
    HEADROOM_CHECK(labels.data[i] < class_names.size(), "[load_idx_dataset] ", labels_path, ": label ",
                   static_cast<int>(labels.data[i]), " of example ", i, " is not below the ", class_names.size(),
                   " classes");

  int64_t n = images.shape[0], height = images.shape[1], width = images.shape[2];
  int64_t channels = images.shape.size() == 4 ? images.shape[3] : 1;
  std::vector<float> pixels(images.data.size());
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<float>(images.data[i]) / 255.0f;
  // [N, H, W, C] -> [N, C, H, W]
  Tensor nhwc = Tensor::from_vector(pixels, {n, height, width, channels});
  std::vector<int32_t> label_values(labels.data.begin(), labels.data.end());
  return {nhwc.permute({0, 3, 1, 2}).contiguous(), Tensor::from_vector(label_values), std::move(class_names)};
}

std::vector<std::string> fashion_mnist_classes() {
  return {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"};
}

ImageDataset split_off(ImageDataset& data, double fraction, uint64_t seed) {
  int64_t n = data.labels.numel();
  HEADROOM_CHECK(fraction > 0 && fraction < 1, "[split_off] fraction must be in (0, 1), got ", fraction);
  auto held_out = static_cast<int64_t>(fraction * static_cast<double>(n) + 0.5);
  HEADROOM_CHECK(held_out > 0 && held_out < n, "[split_off] a fraction ", fraction, " of ", n,
                 " examples leaves an empty part; expected both parts non-empty");
  // Fisher-Yates with the seeded generator: the first held_out entries of the
  // permutation leave, each part then sorted to keep the original order.
  std::vector<int32_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  Generator gen(seed);
  for (int64_t i = n - 1; i > 0; --i) std::swap(order[i], order[gen.next_int(i + 1)]);
  std::vector<int32_t> out(order.begin(), order.begin() + held_out), kept(order.begin() + held_out, order.end());
  std::sort(out.begin(), out.end());
  std::sort(kept.begin(), kept.end());
  auto take = [&](const std::vector<int32_t>& rows) {
    Tensor index = Tensor::from_vector(rows);
    return ImageDataset{index_select(data.images, 0, index), index_select(data.labels, 0, index), data.class_names};
  };
  ImageDataset split = take(out);
  data = take(kept);
  return split;
}

}  // namespace headroom::examples
