// The JSON reader/writer and safetensors: round trips, the exact byte layout,
// and every kind of corrupt file rejected with a message naming the problem.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "headroom/core/json.h"
#include "headroom/core/safetensors.h"
#include "helpers.h"

using namespace headroom;
using headroom::testing::TempDir;
namespace fs = std::filesystem;

namespace {

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::string u64_le(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>(v >> (8 * i));
  return s;
}

template <typename T> std::string raw(const std::vector<T>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T));
}

// A hand-built file: header length (the header's own unless overridden), header, data.
std::string write_raw(const TempDir& dir, const std::string& header, const std::string& data,
                      uint64_t header_length = UINT64_MAX) {
  std::string path = dir.file("hand.safetensors");
  std::ofstream out(path, std::ios::binary);
  out << u64_le(header_length == UINT64_MAX ? header.size() : header_length) << header << data;
  return path;
}

}  // namespace

// ---- JSON --------------------------------------------------------------------------

TEST_CASE("json: parses objects, arrays, strings with escapes and integers") {
  json::Value v = json::parse(R"( {"a": [1, -2, 0], "s": "q\"\\\/\b\f\n\r\t\u00e9\ud83d\ude00", "o": {}} )", "test");
  CHECK(v.as_object().size() == 3);
  const auto& a = v.at("a").as_array();
  REQUIRE(a.size() == 3);
  CHECK(a[0].as_integer() == 1);
  CHECK(a[1].as_integer() == -2);
  CHECK(a[2].as_integer() == 0);
  CHECK(v.at("s").as_string() == "q\"\\/\b\f\n\r\t\xC3\xA9\xF0\x9F\x98\x80");
  CHECK(v.at("o").as_object().empty());
  CHECK(v.find("missing") == nullptr);
  CHECK(json::parse("-9223372036854775808", "t").as_integer() == INT64_MIN);
  CHECK(json::parse("9223372036854775807", "t").as_integer() == INT64_MAX);
  CHECK_THROWS_HEADROOM(v.at("a").as_string(), "expected a string, got an array");
  CHECK_THROWS_HEADROOM(v.at("zzz"), "no member \"zzz\"");
}

TEST_CASE("json: dump writes compact JSON that parses back to the same value") {
  json::Value v = json::Value::object(
      {{"name", "tab\there \"quoted\" \x01"}, {"list", json::Value::array({int64_t(1), int64_t(-20), "x"})}});
  std::string text = json::dump(v);
  CHECK(text == R"({"name":"tab\there \"quoted\" \u0001","list":[1,-20,"x"]})");
  CHECK(json::dump(json::parse(text, "t")) == text);
}

TEST_CASE("json: malformed text is rejected with the source and byte offset") {
  CHECK_THROWS_HEADROOM(json::parse(R"({"a":1,})", "src"), "invalid JSON in src at byte 7: expected a string key");
  CHECK_THROWS_HEADROOM(json::parse(R"({"a" 1})", "src"), "expected ':'");
  CHECK_THROWS_HEADROOM(json::parse(R"(["abc)", "src"), "unterminated string");
  CHECK_THROWS_HEADROOM(json::parse("[01]", "src"), "leading zeros");
  CHECK_THROWS_HEADROOM(json::parse("[1.5]", "src"), "only integers are supported");
  CHECK_THROWS_HEADROOM(json::parse("[1e3]", "src"), "only integers are supported");
  CHECK_THROWS_HEADROOM(json::parse("[true]", "src"), "unexpected character 't'");
  CHECK_THROWS_HEADROOM(json::parse("9223372036854775808", "src"), "out of the 64-bit range");
  CHECK_THROWS_HEADROOM(json::parse("{} x", "src"), "unexpected text after the value");
  CHECK_THROWS_HEADROOM(json::parse(R"("\q")", "src"), "unknown escape '\\q'");
  CHECK_THROWS_HEADROOM(json::parse(R"("\ud83d")", "src"), "high surrogate");
  CHECK_THROWS_HEADROOM(json::parse("\"a\nb\"", "src"), "control character");
  CHECK_THROWS_HEADROOM(json::parse(R"({"k":1,"k":2})", "src"), "duplicate key \"k\"");
  CHECK_THROWS_HEADROOM(json::parse(std::string(100, '['), "src"), "nesting deeper than 64");
  CHECK_THROWS_HEADROOM(json::parse("", "src"), "unexpected end of text");
}

// ---- round trips -------------------------------------------------------------------

TEST_CASE("safetensors: every dtype round trips, with metadata, in name order") {
  TempDir dir("st_roundtrip");
  Generator gen(3);
  Tensor f32 = Tensor::randn({2, 3}, gen);
  Tensor f64 = Tensor::randn({4}, gen, DType::f64);
  Tensor i32 = Tensor::from_vector<int32_t>({-5, 0, 2147483647, -2147483647 - 1}, {2, 2});
  Tensor b8 = Tensor::from_vector<uint8_t>({1, 0, 0, 1, 1}, {5});
  Tensor scalar = Tensor::scalar(2.5);
  Tensor empty = Tensor::zeros({0, 3});
  std::map<std::string, std::string> metadata{{"step", "100"}, {"config", "{\"d\": 64}\nline two"}};
  std::string path = dir.file("all.safetensors");
  save_safetensors(path, {{"z.f32", f32}, {"f64", f64}, {"i32", i32}, {"b8", b8}, {"scalar", scalar}, {"empty", empty}},
                   metadata);

  SafetensorsFile file = load_safetensors(path);
  CHECK(file.metadata == metadata);
  std::vector<std::string> names;
  for (const auto& entry : file.tensors) names.push_back(entry.first);
  CHECK(names == std::vector<std::string>{"b8", "empty", "f64", "i32", "scalar", "z.f32"});
  for (const auto& name_original : std::vector<std::pair<std::string, Tensor>>{
           {"z.f32", f32}, {"f64", f64}, {"i32", i32}, {"b8", b8}, {"scalar", scalar}, {"empty", empty}}) {
    const auto& name = name_original.first;  // named: Clang 14 lambdas cannot capture structured bindings
    const auto& original = name_original.second;
    CAPTURE(name);
    Tensor loaded = file.get(name);
    CHECK(loaded.dtype() == original.dtype());
    CHECK(loaded.shape() == original.shape());
    CHECK(loaded.to_vector<double>() == original.to_vector<double>());  // bit-exact
  }
  CHECK(file.contains("i32"));
  CHECK_FALSE(file.contains("nope"));
  const std::string message = "no tensor 'nope' in " + path;
  CHECK_THROWS_HEADROOM(file.get("nope"), message.c_str());
}

TEST_CASE("safetensors: non-contiguous tensors are saved in logical order") {
  TempDir dir("st_strided");
  Tensor base = Tensor::arange(12).reshape({3, 4});
  Tensor transposed = base.t();                                     // [4, 3]
  Tensor sliced = base.slice(1, 1, 4, 2);                           // [3, 2]
  Tensor expanded = Tensor::arange(3).unsqueeze(0).expand({2, 3});  // stride 0
  std::string path = dir.file("views.safetensors");
  save_safetensors(path, {{"t", transposed}, {"s", sliced}, {"e", expanded}});
  SafetensorsFile file = load_safetensors(path);
  CHECK(file.get("t").shape() == Shape{4, 3});
  CHECK(file.get("t").to_vector<float>() == transposed.to_vector<float>());
  CHECK(file.get("s").to_vector<float>() == std::vector<float>{1, 3, 5, 7, 9, 11});
  CHECK(file.get("e").to_vector<float>() == std::vector<float>{0, 1, 2, 0, 1, 2});
}

TEST_CASE("safetensors: the written bytes follow the format exactly") {
  TempDir dir("st_bytes");
  std::string path = dir.file("exact.safetensors");
  save_safetensors(path, {{"b", Tensor::from_vector<float>({1.5f, -2})}, {"a", Tensor::from_vector<int32_t>({7})}},
                   {{"k", "v"}});
  // Metadata first, with the data's CRC-32 (zlib.crc32 of the 12 data bytes,
  // computed in Python) and the header's (zlib.crc32 of this header without
  // its own entry and the padding), then tensors by name; offsets count from
  // the data start.
  std::string header = R"({"__metadata__":{"headroom.data_crc32":"a6b0dcb3","headroom.header_crc32":"b47b6a8e",)"
                       R"("k":"v"},"a":{"dtype":"I32","shape":[1],"data_offsets":[0,4]},)"
                       R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})";
  header.append((8 - header.size() % 8) % 8, ' ');  // spaces up to a multiple of 8
  std::string expected =
      u64_le(header.size()) + header + raw(std::vector<int32_t>{7}) + raw(std::vector<float>{1.5f, -2});
  CHECK(read_bytes(path) == expected);
  CHECK(header.size() % 8 == 0);
  CHECK(load_safetensors(path).metadata == std::map<std::string, std::string>{{"k", "v"}});  // checksum entries removed
  CHECK(load_safetensors(path).checksummed);
}

// `bytes` with `from` (which must occur once) replaced by `to`, padded with
// spaces (JSON whitespace after a token) to the same length.
std::string edited(const std::string& bytes, const std::string& from, std::string to) {
  const size_t at = bytes.find(from);
  REQUIRE(at != std::string::npos);
  REQUIRE(bytes.find(from, at + 1) == std::string::npos);
  REQUIRE(to.size() <= from.size());
  to.append(from.size() - to.size(), ' ');
  return bytes.substr(0, at) + to + bytes.substr(at + from.size());
}

TEST_CASE("safetensors: a same-length edit of the header, or a deleted data checksum, is found by its checksum") {
  TempDir dir("st_header_crc");
  const std::string path = dir.file("model.safetensors");
  save_safetensors(path, {{"w", Tensor::arange(4)}, {"b", Tensor::ones({2})}},
                   {{"train.step", "4"}, {"model.positions", "sinusoidal"}});
  const std::string bytes = read_bytes(path);
  auto written = [&](const std::string& text) { std::ofstream(path, std::ios::binary | std::ios::trunc) << text; };
  const size_t data_key = bytes.find(R"("headroom.data_crc32":")");
  REQUIRE(data_key != std::string::npos);
  const std::string data_entry = bytes.substr(data_key, std::strlen(R"("headroom.data_crc32":"00000000",)"));
  const size_t header_key = bytes.find(R"("headroom.header_crc32":")");
  REQUIRE(header_key != std::string::npos);
  const std::string header_entry = bytes.substr(header_key, std::strlen(R"("headroom.header_crc32":"00000000",)"));
  for (const auto& edit : std::vector<std::pair<std::string, std::string>>{
           {R"("train.step":"4")", R"("train.step":"5")"},
           {R"("model.positions":"sinusoidal")", R"("model.positions":"learned")"},
           {R"("w":{)", R"("v":{)"},
           {data_entry, ""}}) {
    CAPTURE(edit.first);
    written(edited(bytes, edit.first, edit.second));
    CHECK_THROWS_HEADROOM(load_safetensors(path), "the header is corrupt: its CRC-32 is ");
  }
  // Without the header's checksum the file loads, as one from another tool does, but says so.
  written(edited(bytes, header_entry, ""));
  SafetensorsFile unchecked = load_safetensors(path);
  CHECK_FALSE(unchecked.checksummed);
  CHECK(unchecked.metadata ==
        std::map<std::string, std::string>{{"model.positions", "sinusoidal"}, {"train.step", "4"}});
  CHECK_THROWS_HEADROOM(save_safetensors(path, {}, {{"headroom.header_crc32", "0"}}),
                        "the metadata key headroom.header_crc32 is reserved");
}

TEST_CASE("safetensors: load_safetensors_header reads the metadata alone, with the header's checks") {
  TempDir dir("st_header_only");
  const std::string path = dir.file("model.safetensors");
  save_safetensors(path, {{"w", Tensor::arange(64)}}, {{"train.step", "4"}});
  const SafetensorsFile header = load_safetensors_header(path);
  CHECK(header.metadata == std::map<std::string, std::string>{{"train.step", "4"}});
  CHECK(header.checksummed);
  CHECK(header.tensors.empty());
  const std::string bytes = read_bytes(path);
  auto written = [&](const std::string& text) { std::ofstream(path, std::ios::binary | std::ios::trunc) << text; };
  written(edited(bytes, R"("train.step":"4")", R"("train.step":"5")"));
  CHECK_THROWS_HEADROOM(load_safetensors_header(path), "the header is corrupt: its CRC-32 is ");
  // A flipped bit in the data is past what it reads: load_safetensors finds it.
  std::string flipped = bytes;
  flipped.back() = char(flipped.back() ^ 1);
  written(flipped);
  CHECK(load_safetensors_header(path).checksummed);
  CHECK_THROWS_HEADROOM(load_safetensors(path), "the tensor data is corrupt");
}

TEST_CASE("safetensors: a flipped bit in the tensor data is found by the checksum") {
  TempDir dir("st_crc");
  std::string path = dir.file("model.safetensors");
  save_safetensors(path, {{"w", Tensor::arange(64)}, {"b", Tensor::ones({3})}}, {{"step", "7"}});
  std::string bytes = read_bytes(path);
  const size_t data_start = bytes.size() - (64 + 3) * sizeof(float);  // the data section is the file's tail
  for (size_t offset : {data_start + 5, bytes.size() - 1}) {
    std::string flipped = bytes;
    flipped[offset] = static_cast<char>(flipped[offset] ^ 0x10);
    std::ofstream(path, std::ios::binary | std::ios::trunc) << flipped;
    CHECK_THROWS_HEADROOM(load_safetensors(path), ("the tensor data is corrupt: its CRC-32 is "));
  }
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  CHECK(load_safetensors(path).get("w").to_vector<float>() == Tensor::arange(64).to_vector<float>());
  CHECK_THROWS_HEADROOM(save_safetensors(path, {{"w", Tensor::ones({1})}}, {{"headroom.data_crc32", "0"}}),
                        "the metadata key headroom.data_crc32 is reserved");
}

TEST_CASE("safetensors: only regular files are read: a FIFO or a folder is refused without blocking") {
  TempDir dir("st_kind");
  std::string fifo = dir.file("checkpoint.safetensors");
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  CHECK_THROWS_HEADROOM(load_safetensors(fifo), (fifo + " is a FIFO, expected a regular file").c_str());
  CHECK_THROWS_HEADROOM(load_safetensors(dir.path.string()), "is a directory, expected a regular file");
  CHECK_THROWS_HEADROOM(load_safetensors("/dev/zero"), "/dev/zero is a character device, expected a regular file");
}

TEST_CASE("safetensors: a hand-built file with I64, BOOL and out-of-order data offsets loads") {
  TempDir dir("st_i64");
  std::string header = R"({"idx":{"dtype":"I64","shape":[3],"data_offsets":[2,26]},)"
                       R"("mask":{"dtype":"BOOL","shape":[2],"data_offsets":[0,2]}})";
  std::string data = raw(std::vector<uint8_t>{1, 0}) + raw(std::vector<int64_t>{5, -3, 2147483647});
  SafetensorsFile file = load_safetensors(write_raw(dir, header, data));
  CHECK(file.tensors[0].first == "idx");  // header order
  CHECK(file.get("idx").dtype() == DType::i32);
  CHECK(file.get("idx").to_vector<int32_t>() == std::vector<int32_t>{5, -3, 2147483647});
  CHECK(file.get("mask").to_vector<int>() == std::vector<int>{1, 0});
  CHECK(file.metadata.empty());
}

// ---- corrupt files -----------------------------------------------------------------

TEST_CASE("safetensors: corrupt files are rejected with a message naming the problem") {
  TempDir dir("st_corrupt");
  const std::string two_floats = raw(std::vector<float>{1, 2});
  auto load_hand = [&](const std::string& header, const std::string& data) {
    return load_safetensors(write_raw(dir, header, data));
  };
  auto entry = [](const std::string& name, const std::string& dtype, const std::string& shape, int begin, int end) {
    return "\"" + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape + ",\"data_offsets\":[" +
           std::to_string(begin) + "," + std::to_string(end) + "]}";
  };

  SUBCASE("truncated file") {
    std::string path = dir.file("short.safetensors");
    std::ofstream(path, std::ios::binary) << "abcde";
    const std::string message = "file is 5 bytes, too short for the 8-byte header length: " + path;
    CHECK_THROWS_HEADROOM(load_safetensors(path), message.c_str());
  }
  SUBCASE("header length beyond the file") {
    std::string path = write_raw(dir, "{}", "", 9000000000000000000ull);
    CHECK_THROWS_HEADROOM(load_safetensors(path), "header length 9000000000000000000 exceeds the file size 10 bytes");
  }
  SUBCASE("header length beyond the cap, in a large (sparse) file") {
    std::string path = write_raw(dir, "{}", "", 150'000'000);
    fs::resize_file(path, 200'000'000);
    CHECK_THROWS_HEADROOM(load_safetensors(path), "header length 150000000 exceeds the limit of 100000000 bytes");
  }
  SUBCASE("missing file") { CHECK_THROWS_HEADROOM(load_safetensors(dir.file("absent.safetensors")), "cannot open"); }
  SUBCASE("a shape whose size overflows, hidden behind a 0") {
    const std::string huge = "[0,4611686018427387904,4611686018427387904]";
    CHECK_THROWS_HEADROOM(load_hand("{" + entry("t", "F32", huge, 0, 0) + "}", ""),
                          "has more elements than an int64 can count");
  }
  SUBCASE("bad JSON") {
    CHECK_THROWS_HEADROOM(load_hand("{\"a\":{\"dtype\":\"F32\",}}", ""), "invalid JSON in the safetensors header of");
  }
  SUBCASE("header that is not an object") {
    CHECK_THROWS_HEADROOM(load_hand("[1]", ""), "header is an array, expected an object");
  }
  SUBCASE("duplicate names") {
    CHECK_THROWS_HEADROOM(
        load_hand("{" + entry("w", "F32", "[1]", 0, 4) + "," + entry("w", "F32", "[1]", 4, 8) + "}", two_floats),
        "duplicate key \"w\"");
  }
  SUBCASE("unknown dtype") {
    CHECK_THROWS_HEADROOM(load_hand("{" + entry("w", "F16", "[4]", 0, 8) + "}", two_floats),
                          "tensor 'w' has unsupported dtype 'F16'");
  }
  SUBCASE("shape and offsets disagree") {
    CHECK_THROWS_HEADROOM(load_hand("{" + entry("w", "F32", "[3]", 0, 8) + "}", two_floats),
                          "tensor 'w' of shape (3) and dtype F32 needs 12 bytes but its data_offsets [0, 8] span 8");
  }
  SUBCASE("offsets past the end of the data") {
    CHECK_THROWS_HEADROOM(load_hand("{" + entry("w", "F32", "[4]", 0, 16) + "}", two_floats),
                          "data_offsets [0, 16] of tensor 'w' run past the end of the data section (8 bytes)");
  }
  SUBCASE("reversed offsets") {
    CHECK_THROWS_HEADROOM(load_hand("{" + entry("w", "F32", "[0]", 8, 0) + "}", two_floats), "are reversed");
  }
  SUBCASE("overlapping ranges") {
    CHECK_THROWS_HEADROOM(
        load_hand("{" + entry("a", "F32", "[2]", 0, 8) + "," + entry("b", "F32", "[1]", 4, 8) + "}", two_floats),
        "tensor 'b' (bytes 4..8) overlaps tensor 'a'");
  }
  SUBCASE("a gap between ranges") {
    CHECK_THROWS_HEADROOM(load_hand("{" + entry("a", "F32", "[1]", 0, 4) + "," + entry("b", "F32", "[1]", 8, 12) + "}",
                                    two_floats + two_floats),
                          "bytes 4..8 of the data section belong to no tensor (gap before tensor 'b')");
  }
  SUBCASE("bytes after the last tensor") {
    CHECK_THROWS_HEADROOM(load_hand("{" + entry("a", "F32", "[1]", 0, 4) + "}", two_floats),
                          "has 4 bytes after the last tensor");
  }
  SUBCASE("fields of the wrong kind or missing") {
    CHECK_THROWS_HEADROOM(load_hand(R"({"w":{"dtype":"F32","data_offsets":[0,8]}})", two_floats),
                          "tensor 'w' has no \"shape\" field");
    CHECK_THROWS_HEADROOM(load_hand(R"({"w":{"dtype":"F32","shape":2,"data_offsets":[0,8]}})", two_floats),
                          "field \"shape\" of tensor 'w' is an integer, expected an array");
    CHECK_THROWS_HEADROOM(load_hand("{" + entry("w", "F32", "[-2]", 0, 8) + "}", two_floats),
                          "must hold non-negative integers");
    CHECK_THROWS_HEADROOM(load_hand(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", two_floats),
                          "must hold 2 integers, got 1");
    CHECK_THROWS_HEADROOM(load_hand(R"({"__metadata__":{"k":3}})", ""), "__metadata__ value of \"k\" is an integer");
    CHECK_THROWS_HEADROOM(load_hand(R"({"w":[1]})", ""), "entry of tensor 'w' is an array, expected an object");
  }
  SUBCASE("shape too large") {
    CHECK_THROWS_HEADROOM(load_hand("{" + entry("w", "F64", "[4294967296,4294967296]", 0, 8) + "}", two_floats),
                          "shape of tensor 'w' is too large");
  }
  SUBCASE("I64 values outside the i32 range and BOOL bytes other than 0/1") {
    CHECK_THROWS_HEADROOM(load_hand("{" + entry("i", "I64", "[1]", 0, 8) + "}", raw(std::vector<int64_t>{1ll << 40})),
                          "I64 tensor 'i' holds 1099511627776 at element 0, outside the i32 range");
    CHECK_THROWS_HEADROOM(load_hand("{" + entry("m", "BOOL", "[2]", 0, 2) + "}", raw(std::vector<uint8_t>{1, 2})),
                          "BOOL tensor 'm' holds byte 2 at element 1");
  }
}

// ---- writing errors and atomicity --------------------------------------------------

TEST_CASE("safetensors: invalid saves are refused before the file is touched") {
  TempDir dir("st_badsave");
  std::string path = dir.file("x.safetensors");
  Tensor t = Tensor::ones({2});
  CHECK_THROWS_HEADROOM(save_safetensors(path, {{"a", t}, {"a", t}}), "duplicate tensor name 'a'");
  CHECK_THROWS_HEADROOM(save_safetensors(path, {{"__metadata__", t}}), "the name __metadata__ is reserved");
  CHECK_THROWS_HEADROOM(save_safetensors(path, {{"u", Tensor()}}), "tensor 'u' is undefined");
  CHECK(dir.count() == 0);
}

TEST_CASE("safetensors: saving is atomic") {
  TempDir dir("st_atomic");
  std::string path = dir.file("model.safetensors");
  save_safetensors(path, {{"w", Tensor::full({3}, 1)}});
  save_safetensors(path, {{"w", Tensor::full({3}, 2)}, {"v", Tensor::zeros({1})}});  // over the old file
  CHECK(load_safetensors(path).get("w").to_vector<float>() == std::vector<float>{2, 2, 2});
  CHECK(dir.count() == 1);  // no temporary file left behind
  const std::string old_bytes = read_bytes(path);

  SUBCASE("a temporary file that cannot be created leaves the old file") {
    // A name so long that the temporary name (name + ".tmp.<pid>.<n>") exceeds
    // the file system's 255-byte limit, while the file itself exists.
    // The old file is copied there, since saving under that name cannot work.
    std::string long_path = dir.file(std::string(250, 'm'));
    fs::copy_file(path, long_path);
    CHECK_THROWS_HEADROOM(save_safetensors(long_path, {{"w", Tensor::full({3}, 5)}}),
                          "cannot create the temporary file");
    CHECK(read_bytes(long_path) == old_bytes);
    CHECK(dir.count() == 2);
  }
  SUBCASE("an unwritable folder leaves the old file") {
    fs::permissions(dir.path, fs::perms::owner_read | fs::perms::owner_exec);
    if (access(dir.path.c_str(), W_OK) == 0) {
      MESSAGE("skipped: folder permissions do not apply to this user (root)");
      return;
    }
    CHECK_THROWS_HEADROOM(save_safetensors(path, {{"w", Tensor::full({3}, 9)}}), "Permission denied");
    CHECK(read_bytes(path) == old_bytes);
    CHECK(dir.count() == 1);
  }
}
