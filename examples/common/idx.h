#pragma once
// Image datasets held in memory: the IDX files of MNIST and Fashion-MNIST,
// and a seeded split into train and validation parts that serves every
// ImageDataset (image_folder.h builds them too).
//
//   ImageDataset train = load_idx_dataset("data/fashion-mnist/train-images-idx3-ubyte",
//                                         "data/fashion-mnist/train-labels-idx1-ubyte",
//                                         fashion_mnist_classes());
//   ImageDataset valid = split_off(train, 0.1, 1234);   // train keeps the other 90%
//
// IDX (yann.lecun.com/exdb/mnist): a big-endian header of two zero bytes, a
// type byte, the number of dimensions and one u32 size per dimension, then the
// elements in row-major order.  Only unsigned bytes (type 0x08) are read, and
// only uncompressed files (scripts/fetch-data gunzips them).
#include <cstdint>
#include <string>
#include <vector>

#include "headroom/core/tensor.h"

namespace headroom::examples {

// The largest IDX file read_idx reads: 1 GiB (its pixels take four times
// that as f32).
constexpr uint64_t kMaxIdxBytes = uint64_t(1) << 30;

struct IdxArray {
  std::vector<int64_t> shape;  // 1 to 4 dimensions
  std::vector<uint8_t> data;   // row-major, product(shape) bytes
};

// Throws naming the path for a file that is missing, not a regular file or
// larger than kMaxIdxBytes, a bad magic, an unsupported type, a header that
// does not fit, and a file shorter or longer than its header says.
IdxArray read_idx(const std::string& path);

// The shape of the IDX file at `path` from its header alone (the elements
// are not read), with read_idx's checks of the file and the header.
std::vector<int64_t> read_idx_shape(const std::string& path);

struct ImageDataset {
  Tensor images;  // f32 [N, C, H, W] in [0, 1]
  Tensor labels;  // i32 [N], each in [0, class_names.size())
  std::vector<std::string> class_names;
};

// Images: u8 [N, H, W] (one channel) or [N, H, W, C], every size positive;
// labels: u8 [N], each below class_names.size().  Throws when the counts
// disagree, a size is 0 or a label is out of range.
ImageDataset load_idx_dataset(const std::string& images_path, const std::string& labels_path,
                              std::vector<std::string> class_names);

// The ten Fashion-MNIST classes, in label order.
std::vector<std::string> fashion_mnist_classes();

// Moves round(fraction * N) examples, chosen by a permutation seeded with
// `seed`, out of `data` and returns them; `data` keeps the rest, in their
// original order.  Both parts keep the class names.  0 < fraction < 1, and
// both parts must be non-empty.
ImageDataset split_off(ImageDataset& data, double fraction, uint64_t seed);

}  // namespace headroom::examples
