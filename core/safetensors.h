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
  // Both checksums of save_safetensors were there (and matched): a file that
  // claims to be one of this library's (e.g. a training checkpoint) must have
  // them, since one deleted would let edits of what it covered load unseen.
  bool checksummed = false;

  bool contains(const std::string& name) const;
  Tensor get(const std::string& name) const;  // throws naming the file when absent
};

// Reads and validates a whole file.  Throws headroom::Error naming the file
// (and the tensor, where one is at fault) for: a file shorter than 8 bytes, a
// header length over 100 MB or over the file size, malformed JSON, an unknown
// dtype, a shape whose byte size differs from its offset range, offsets past
// the end of the data, overlapping ranges or gaps, duplicate names, a path
// that is not a regular file (a FIFO, device or folder) or is over 1 TiB, and
// a header or tensor data whose CRC-32 differs from the one recorded in the
// metadata.  The checksum entries ("headroom.data_crc32" and
// "headroom.header_crc32", written by save_safetensors) are checked where
// present, since files from other tools have none, and removed from
// `metadata`; `checksummed` says whether both were there.
SafetensorsFile load_safetensors(const std::string& path);

// The header alone, with load_safetensors's checks of it (the header's
// CRC-32 where recorded): the metadata, no tensors, and `checksummed` when
// both checksums are recorded and the header's matched.  The data is not
// read, so its CRC-32 is checked by load_safetensors only: for reading a
// checkpoint's settings without reading its tensors.
SafetensorsFile load_safetensors_header(const std::string& path);

// CRC-32 of `bytes` bytes at `data` (zlib's polynomial, as Python's
// zlib.crc32), continued from `crc` (0 to start): the checksum of the data
// section above, and of a model's parameters across data-parallel ranks.
uint32_t crc32_update(uint32_t crc, const void* data, size_t bytes);

// Writes tensors (any device, any strides: CUDA tensors are copied to the
// host first) in name order, contiguous, after a header
// padded with spaces to a multiple of 8 bytes, with two CRC-32s in the
// metadata, so that a flipped bit or an edit is found on load (both keys are
// reserved): "headroom.data_crc32" of the data section, and
// "headroom.header_crc32" of the header as written (metadata, the data's
// checksum included, then the tensors' entries) without that entry and the
// padding, which a same-length edit of any entry changes.  The write is atomic: a
// temporary file in the same folder is written, flushed to disk and renamed,
// so a failed save leaves any existing file untouched.
void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata = {});

}  // namespace headroom
