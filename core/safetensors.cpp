#include "headroom/core/safetensors.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <numeric>

#include "headroom/core/atomic_file.h"
#include "headroom/core/json.h"
#include "headroom/core/read_file.h"

namespace headroom {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "safetensors data is little-endian; this reader copies bytes as they are");

namespace {

// Headers above this are refused before any allocation (MLX's kMaxJsonHeaderLength idea).
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
// The largest file loaded (docs/limits.md); tensors are also bounded by the file's size.
constexpr uint64_t kMaxFileBytes = uint64_t(1) << 40;
// The metadata entries that hold the CRC-32 (zlib's polynomial, as Python's
// zlib.crc32) of the data section, and of the header as save_safetensors
// writes it without its own entry and padding (header_text).
constexpr const char* kChecksumKey = "headroom.data_crc32";
constexpr const char* kHeaderChecksumKey = "headroom.header_crc32";

std::string hex32(uint32_t value) {
  char text[9];
  std::snprintf(text, sizeof text, "%08x", value);
  return text;
}

// The dtype strings of the format and how each is held in memory.  I64 is
// read only: PyTorch writes int64 indices, headroom keeps indices in i32.
struct FileDType {
  const char* name;
  DType dtype;
  size_t file_bytes;  // bytes per element in the file
};
constexpr FileDType kFileDTypes[] = {
    {"F32", DType::f32, 4}, {"F64", DType::f64, 8}, {"I32", DType::i32, 4},
    {"BOOL", DType::b8, 1}, {"I64", DType::i32, 8},
};

const char* file_dtype_name(DType dtype) {
  for (const FileDType& d : kFileDTypes)
    if (d.dtype == dtype && d.file_bytes == dtype_size(dtype)) return d.name;
  HEADROOM_FAIL("[safetensors] no file dtype for ", dtype);
}

// One header entry, validated on its own.
struct Entry {
  std::string name;
  FileDType dtype;
  Shape shape;
  uint64_t begin = 0, end = 0;  // byte range inside the data section
};

json::Value integer_array(const std::vector<int64_t>& values) {
  std::vector<json::Value> items(values.begin(), values.end());
  return json::Value::array(std::move(items));
}

json::Value entry_json(const std::string& dtype, const Shape& shape, uint64_t begin, uint64_t end) {
  return json::Value::object({{"dtype", dtype},
                              {"shape", integer_array(shape)},
                              {"data_offsets", integer_array({int64_t(begin), int64_t(end)})}});
}

// The header as save_safetensors writes it, unpadded: the metadata first,
// then the tensors' entries (`tensors`, in name order).
std::string header_text(json::Members tensors, const std::map<std::string, std::string>& metadata) {
  json::Members items(metadata.begin(), metadata.end());
  tensors.emplace(tensors.begin(), "__metadata__", json::Value::object(std::move(items)));
  return json::dump(json::Value::object(std::move(tensors)));
}

// The CRC-32 the header checksum covers: of header_text without its own entry.
uint32_t header_crc(const json::Members& tensors, std::map<std::string, std::string> metadata) {
  metadata.erase(kHeaderChecksumKey);
  const std::string text = header_text(tensors, metadata);
  return crc32_update(0, text.data(), text.size());
}

// ---- reading ---------------------------------------------------------------------

const json::Value& field(const json::Value& entry, const char* key, json::Value::Kind kind, const std::string& name,
                         const std::string& path) {
  const json::Value* v = entry.find(key);
  HEADROOM_CHECK(v != nullptr, "[safetensors] tensor '", name, "' has no \"", key, "\" field: ", path);
  HEADROOM_CHECK(v->kind() == kind, "[safetensors] field \"", key, "\" of tensor '", name, "' is ",
                 json::kind_name(v->kind()), ", expected ", json::kind_name(kind), ": ", path);
  return *v;
}

// The items of an array field, each a non-negative integer.
std::vector<uint64_t> unsigned_list(const json::Value& entry, const char* key, const std::string& name,
                                    const std::string& path) {
  std::vector<uint64_t> out;
  for (const json::Value& item : field(entry, key, json::Value::Kind::array, name, path).as_array()) {
    HEADROOM_CHECK(item.kind() == json::Value::Kind::integer && item.as_integer() >= 0, "[safetensors] field \"", key,
                   "\" of tensor '", name, "' must hold non-negative integers: ", path);
    out.push_back(static_cast<uint64_t>(item.as_integer()));
  }
  return out;
}

Entry parse_entry(const std::string& name, const json::Value& value, const std::string& path) {
  HEADROOM_CHECK(value.kind() == json::Value::Kind::object, "[safetensors] entry of tensor '", name, "' is ",
                 json::kind_name(value.kind()), ", expected an object: ", path);
  Entry e;
  e.name = name;
  const std::string& dtype = field(value, "dtype", json::Value::Kind::string, name, path).as_string();
  auto known =
      std::find_if(std::begin(kFileDTypes), std::end(kFileDTypes), [&](const FileDType& d) { return dtype == d.name; });
  HEADROOM_CHECK(known != std::end(kFileDTypes), "[safetensors] tensor '", name, "' has unsupported dtype '", dtype,
                 "' (supported: F32, F64, I32, I64, BOOL): ", path);
  e.dtype = *known;

  // The byte size of the shape, guarding every product against overflow.
  uint64_t bytes = e.dtype.file_bytes;
  for (uint64_t d : unsigned_list(value, "shape", name, path)) {
    HEADROOM_CHECK(d <= uint64_t(std::numeric_limits<int64_t>::max()) &&
                       (d == 0 || bytes <= std::numeric_limits<uint64_t>::max() / d),
                   "[safetensors] shape of tensor '", name, "' is too large: ", path);
    bytes *= d;
    e.shape.push_back(static_cast<int64_t>(d));
  }
  std::vector<uint64_t> offsets = unsigned_list(value, "data_offsets", name, path);
  HEADROOM_CHECK(offsets.size() == 2, "[safetensors] data_offsets of tensor '", name, "' must hold 2 integers, got ",
                 offsets.size(), ": ", path);
  e.begin = offsets[0];
  e.end = offsets[1];
  HEADROOM_CHECK(e.begin <= e.end, "[safetensors] data_offsets [", e.begin, ", ", e.end, "] of tensor '", name,
                 "' are reversed: ", path);
  HEADROOM_CHECK(e.end - e.begin == bytes, "[safetensors] tensor '", name, "' of shape ", shape_str(e.shape),
                 " and dtype ", dtype, " needs ", bytes, " bytes but its data_offsets [", e.begin, ", ", e.end,
                 "] span ", e.end - e.begin, ": ", path);
  return e;
}

std::map<std::string, std::string> parse_metadata(const json::Value& value, const std::string& path) {
  HEADROOM_CHECK(value.kind() == json::Value::Kind::object, "[safetensors] __metadata__ is ",
                 json::kind_name(value.kind()), ", expected an object of strings: ", path);
  std::map<std::string, std::string> out;
  for (const auto& [key, item] : value.as_object()) {
    HEADROOM_CHECK(item.kind() == json::Value::Kind::string, "[safetensors] __metadata__ value of \"", key, "\" is ",
                   json::kind_name(item.kind()), ", expected a string: ", path);
    out[key] = item.as_string();
  }
  return out;
}

// The data section must be covered exactly: ranges inside it, in order once
// sorted, with no overlap, no gap and nothing left over.  Returns the entries'
// indices in file order.
std::vector<size_t> check_layout(const std::vector<Entry>& entries, uint64_t data_bytes, const std::string& path) {
  std::vector<size_t> order(entries.size());
  std::iota(order.begin(), order.end(), size_t(0));
  std::vector<const Entry*> by_offset;
  for (const Entry& e : entries) by_offset.push_back(&e);
  for (const Entry* e : by_offset)
    HEADROOM_CHECK(e->end <= data_bytes, "[safetensors] data_offsets [", e->begin, ", ", e->end, "] of tensor '",
                   e->name, "' run past the end of the data section (", data_bytes, " bytes): ", path);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return entries[a].begin != entries[b].begin ? entries[a].begin < entries[b].begin : entries[a].end < entries[b].end;
  });
  for (size_t i = 0; i < order.size(); ++i) by_offset[i] = &entries[order[i]];
  uint64_t covered = 0;
  const Entry* previous = nullptr;
  for (const Entry* e : by_offset) {
    HEADROOM_CHECK(e->begin >= covered, "[safetensors] tensor '", e->name, "' (bytes ", e->begin, "..", e->end,
                   ") overlaps tensor '", previous ? previous->name : "", "' (bytes up to ", covered, "): ", path);
    HEADROOM_CHECK(e->begin == covered, "[safetensors] bytes ", covered, "..", e->begin,
                   " of the data section belong to no tensor (gap before tensor '", e->name, "'): ", path);
    covered = e->end;
    previous = e;
  }
  HEADROOM_CHECK(covered == data_bytes, "[safetensors] the data section has ", data_bytes - covered,
                 " bytes after the last tensor: ", path);
  return order;
}

// Checks the CRC-32 that the metadata records under `key` (files written by
// other tools have none) against `crc`; returns whether there was one.
bool verify_checksum(const std::map<std::string, std::string>& metadata, const char* key, uint32_t crc,
                     const char* what, const std::string& path) {
  auto recorded = metadata.find(key);
  if (recorded == metadata.end()) return false;
  HEADROOM_CHECK(recorded->second == hex32(crc), "[safetensors] the ", what, " is corrupt: its CRC-32 is ", hex32(crc),
                 " but the metadata records ", recorded->second, " (", key, "): ", path);
  return true;
}

uint64_t read_u64_le(const unsigned char* bytes) {
  uint64_t value = 0;
  for (int i = 7; i >= 0; --i) value = (value << 8) | bytes[i];
  return value;
}

// Reads one validated entry's bytes, converting I64 to i32 and checking BOOLs;
// `crc` continues over the bytes as stored.
Tensor read_tensor(std::ifstream& in, uint64_t data_start, const Entry& e, const std::string& path, uint32_t& crc) {
  Tensor t = Tensor::empty(e.shape, e.dtype.dtype);
  const size_t bytes = e.end - e.begin;
  if (bytes == 0) return t;
  in.seekg(static_cast<std::streamoff>(data_start + e.begin));
  std::vector<int64_t> wide;
  char* dst = static_cast<char*>(t.raw_data());
  if (e.dtype.file_bytes != dtype_size(t.dtype())) {  // I64 into i32
    wide.resize(bytes / 8);
    dst = reinterpret_cast<char*>(wide.data());
  }
  in.read(dst, static_cast<std::streamsize>(bytes));
  HEADROOM_CHECK(in.good(), "[safetensors] reading tensor '", e.name, "' failed: ", path);
  crc = crc32_update(crc, dst, bytes);

  if (!wide.empty()) {
    int32_t* out = t.data<int32_t>();
    for (size_t i = 0; i < wide.size(); ++i) {
      HEADROOM_CHECK(wide[i] >= std::numeric_limits<int32_t>::min() && wide[i] <= std::numeric_limits<int32_t>::max(),
                     "[safetensors] I64 tensor '", e.name, "' holds ", wide[i], " at element ", i,
                     ", outside the i32 range it is converted to: ", path);
      out[i] = static_cast<int32_t>(wide[i]);
    }
  }
  if (t.dtype() == DType::b8) {
    const uint8_t* flags = t.data<uint8_t>();
    for (size_t i = 0; i < bytes; ++i)
      HEADROOM_CHECK(flags[i] <= 1, "[safetensors] BOOL tensor '", e.name, "' holds byte ", int(flags[i]),
                     " at element ", i, " (expected 0 or 1): ", path);
  }
  return t;
}

}  // namespace

// CRC-32 (reflected polynomial 0xEDB88320), continued from `crc`.
uint32_t crc32_update(uint32_t crc, const void* data, size_t bytes) {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  const auto* p = static_cast<const unsigned char*>(data);
  crc = ~crc;
  for (size_t i = 0; i < bytes; ++i) crc = table[(crc ^ p[i]) & 0xFF] ^ (crc >> 8);
  return ~crc;
}

namespace {

// A file's header, parsed and checked (the layout, the header's checksum
// where recorded), with the stream placed after it.
struct Header {
  SafetensorsFile file;  // the path and metadata, the checksum entries still in; no tensors yet
  std::vector<Entry> entries;
  std::vector<size_t> file_order;  // entries in the order of their data
  uint64_t data_start = 0;
  bool header_checked = false;  // its checksum was recorded (and matched)
};

Header read_header(std::ifstream& in, const std::string& path) {
  const uint64_t file_bytes = regular_file_size(path, kMaxFileBytes, "safetensors");  // no FIFO, device or folder
  in.open(path, std::ios::binary);
  HEADROOM_CHECK(in.is_open(), "[safetensors] cannot open ", path, ": ", std::strerror(errno));
  HEADROOM_CHECK(file_bytes >= 8, "[safetensors] file is ", file_bytes,
                 " bytes, too short for the 8-byte header length: ", path);
  unsigned char length_bytes[8];
  in.read(reinterpret_cast<char*>(length_bytes), 8);
  const uint64_t header_bytes = read_u64_le(length_bytes);
  HEADROOM_CHECK(header_bytes <= file_bytes - 8, "[safetensors] header length ", header_bytes,
                 " exceeds the file size ", file_bytes, " bytes: ", path);
  HEADROOM_CHECK(header_bytes <= kMaxHeaderBytes, "[safetensors] header length ", header_bytes,
                 " exceeds the limit of ", kMaxHeaderBytes, " bytes: ", path);
  std::string header(header_bytes, '\0');
  in.read(header.data(), static_cast<std::streamsize>(header_bytes));
  HEADROOM_CHECK(in.good(), "[safetensors] reading the header failed: ", path);

  json::Value root = json::parse(header, "the safetensors header of " + path);
  HEADROOM_CHECK(root.kind() == json::Value::Kind::object, "[safetensors] header is ", json::kind_name(root.kind()),
                 ", expected an object: ", path);
  Header h;
  h.file.path = path;
  for (const auto& [name, value] : root.as_object()) {  // duplicate names were refused by the JSON parser
    if (name == "__metadata__") h.file.metadata = parse_metadata(value, path);
    else h.entries.push_back(parse_entry(name, value, path));
  }
  h.data_start = 8 + header_bytes;
  h.file_order = check_layout(h.entries, file_bytes - h.data_start, path);

  json::Members by_name;
  for (const Entry& e : h.entries) by_name.emplace_back(e.name, entry_json(e.dtype.name, e.shape, e.begin, e.end));
  std::sort(by_name.begin(), by_name.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  h.header_checked =
      verify_checksum(h.file.metadata, kHeaderChecksumKey, header_crc(by_name, h.file.metadata), "header", path);
  return h;
}

// The metadata without the checksum entries, which the loaders hand on checked.
void drop_checksum_entries(SafetensorsFile& file) {
  file.metadata.erase(kChecksumKey);
  file.metadata.erase(kHeaderChecksumKey);
}

}  // namespace

SafetensorsFile load_safetensors(const std::string& path) {
  std::ifstream in;
  Header h = read_header(in, path);
  std::vector<Tensor> tensors(h.entries.size());
  uint32_t crc = 0;
  for (size_t i : h.file_order) tensors[i] = read_tensor(in, h.data_start, h.entries[i], path, crc);
  h.file.checksummed = verify_checksum(h.file.metadata, kChecksumKey, crc, "tensor data", path) && h.header_checked;
  drop_checksum_entries(h.file);
  for (size_t i = 0; i < h.entries.size(); ++i) h.file.tensors.emplace_back(h.entries[i].name, tensors[i]);
  return std::move(h.file);
}

SafetensorsFile load_safetensors_header(const std::string& path) {
  std::ifstream in;
  Header h = read_header(in, path);
  h.file.checksummed = h.header_checked && h.file.metadata.count(kChecksumKey) > 0;
  drop_checksum_entries(h.file);
  return std::move(h.file);
}

bool SafetensorsFile::contains(const std::string& name) const {
  for (const auto& entry : tensors)
    if (entry.first == name) return true;
  return false;
}

Tensor SafetensorsFile::get(const std::string& name) const {
  for (const auto& [key, tensor] : tensors)
    if (key == name) return tensor;
  HEADROOM_FAIL("[safetensors] no tensor '", name, "' in ", path.empty() ? "this file" : path, " (it holds ",
                tensors.size(), " tensors)");
}

// ---- writing ---------------------------------------------------------------------

void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata) {
  // Validate everything before touching the disk.
  std::vector<const std::pair<std::string, Tensor>*> by_name;
  for (const auto& entry : tensors) {
    HEADROOM_CHECK(entry.first != "__metadata__", "[safetensors] the name __metadata__ is reserved: ", path);
    HEADROOM_CHECK(entry.second.defined(), "[safetensors] tensor '", entry.first, "' is undefined: ", path);
    by_name.push_back(&entry);
  }
  std::sort(by_name.begin(), by_name.end(), [](auto* a, auto* b) { return a->first < b->first; });
  for (size_t i = 1; i < by_name.size(); ++i)
    HEADROOM_CHECK(by_name[i]->first != by_name[i - 1]->first, "[safetensors] duplicate tensor name '",
                   by_name[i]->first, "': ", path);

  for (const char* key : {kChecksumKey, kHeaderChecksumKey})
    HEADROOM_CHECK(metadata.count(key) == 0, "[safetensors] the metadata key ", key,
                   " is reserved for the checksums save_safetensors writes: ", path);

  std::vector<Tensor> contiguous;
  json::Members header;
  int64_t offset = 0;
  uint32_t crc = 0;
  for (const auto* entry : by_name) {
    Tensor t = entry->second.to(Device::cpu()).contiguous();  // CUDA tensors come to the host first
    const int64_t bytes = t.numel() * static_cast<int64_t>(dtype_size(t.dtype()));
    header.emplace_back(entry->first,
                        entry_json(file_dtype_name(t.dtype()), t.shape(), uint64_t(offset), uint64_t(offset + bytes)));
    offset += bytes;
    crc = crc32_update(crc, t.raw_data(), size_t(bytes));
    contiguous.push_back(t);
  }
  std::map<std::string, std::string> with_checksums = metadata;
  with_checksums[kChecksumKey] = hex32(crc);
  with_checksums[kHeaderChecksumKey] = hex32(header_crc(header, with_checksums));
  std::string text = header_text(std::move(header), with_checksums);
  text.append((8 - text.size() % 8) % 8, ' ');  // so the data starts 8-byte aligned

  unsigned char length_bytes[8];
  for (int i = 0; i < 8; ++i) length_bytes[i] = static_cast<unsigned char>(uint64_t(text.size()) >> (8 * i));
  AtomicFile file(path, "safetensors");
  file.write(length_bytes, 8);
  file.write(text.data(), text.size());
  for (const Tensor& t : contiguous) file.write(t.raw_data(), t.numel() * dtype_size(t.dtype()));
  file.commit();
}

}  // namespace headroom
