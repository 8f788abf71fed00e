#pragma once
// safetensors checkpoints: an 8-byte little-endian header
// length, a JSON header mapping each tensor name to {dtype, shape,
// data_offsets} plus an optional "__metadata__" map of strings, then the raw
// row-major little-endian bytes.  PyTorch's dimension order is kept, so the
// same files serve as checkpoints and as test fixtures written by PyTorch.
//
//   save_safetensors("model.safetensors", {{"w", w}, {"b", b}}, {{"step", "100"}});
//   SafetensorsFile f = load_safetensors("model.safetensors");
//   Tensor w = f.get("w");  f.metadata.at("step");
//
// dtypes: F32, F64, I32 and BOOL (b8) are read and written; I64 (which
// PyTorch writes for indices) is read and converted to i32, with a range check.
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "headroom/core/tensor.h"

namespace headroom {

// Tensors with their names, in order: a checkpoint's entries, a module's
// state_dict, an optimizer's state.
using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

struct SafetensorsFile {
  std::string path;      // where it was loaded from, for error messages
  NamedTensors tensors;  // in header order
  std::map<std::string, std::string> metadata;

  bool contains(const std::string& name) const;
  Tensor get(const std::string& name) const;  // throws naming the file when absent
};

// Reads and validates a whole file.  Throws headroom::Error naming the file
// (and the tensor, where one is at fault) for: a file shorter than 8 bytes, a
// header length over 100 MB or over the file size, malformed JSON, an unknown
// dtype, a shape whose byte size differs from its offset range, offsets past
// the end of the data, overlapping ranges or gaps, duplicate names, a path
// that is not a regular file (a FIFO, device or folder) or is over 1 TiB, and
// tensor data whose CRC-32 differs from the one recorded in the metadata.
// The checksum entry ("headroom.data_crc32", written by save_safetensors;
// files from other tools have none) is removed from `metadata`.
SafetensorsFile load_safetensors(const std::string& path);

// CRC-32 of `bytes` bytes at `data` (zlib's polynomial, as Python's
// zlib.crc32), continued from `crc` (0 to start): the checksum of the data
// section above, and of a model's parameters across data-parallel ranks.
uint32_t crc32_update(uint32_t crc, const void* data, size_t bytes);

// Writes tensors (any device, any strides: CUDA tensors are copied to the
// host first) in name order, contiguous, after a header
// padded with spaces to a multiple of 8 bytes, with the CRC-32 of the data
// section in the metadata (so a flipped bit is found on load; the key is
// reserved).  The write is atomic: a
// temporary file in the same folder is written, flushed to disk and renamed,
// so a failed save leaves any existing file untouched.
void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata = {});

}  // namespace headroom
