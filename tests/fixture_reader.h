#pragma once
// Reads the frozen PyTorch fixtures (tests/fixtures/*.safetensors) for tests.
// A thin wrapper so that test code reads `Fixture f(path); f.get("q")`; the
// file parsing is the library's own safetensors loader once it lands.
#include <cctype>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "headroom/core/tensor.h"

namespace headroom::testing {

class Fixture {
 public:
  explicit Fixture(const std::string& path) : path_(path) {
    std::ifstream in(path, std::ios::binary);
    HEADROOM_CHECK(in.good(), "[fixture] cannot open ", path);
    uint64_t header_len = 0;
    in.read(reinterpret_cast<char*>(&header_len), 8);
    std::string header(header_len, ' ');
    in.read(header.data(), header_len);
    data_.assign(std::istreambuf_iterator<char>(in), {});
    text_ = header;
    parse_top();
  }

  Tensor get(const std::string& name) const {
    auto it = entries_.find(name);
    HEADROOM_CHECK(it != entries_.end(), "[fixture] no tensor '", name, "' in ", path_);
    const Entry& e = it->second;
    DType dtype = e.dtype == "F32" ? DType::f32 : e.dtype == "F64" ? DType::f64
                : e.dtype == "I32" ? DType::i32 : DType::b8;
    HEADROOM_CHECK(e.dtype == "F32" || e.dtype == "F64" || e.dtype == "I32" || e.dtype == "BOOL",
                   "[fixture] unsupported dtype ", e.dtype);
    Tensor t = Tensor::empty(e.shape, dtype);
    HEADROOM_CHECK(e.end - e.begin == t.numel() * int64_t(dtype_size(dtype)) && e.end <= int64_t(data_.size()),
                   "[fixture] bad offsets for ", name);
    std::memcpy(t.raw_data(), data_.data() + e.begin, e.end - e.begin);
    return t;
  }
  std::string metadata(const std::string& key) const {
    auto it = metadata_.find(key);
    return it == metadata_.end() ? "" : it->second;
  }

 private:
  struct Entry {
    std::string dtype;
    Shape shape;
    int64_t begin = 0, end = 0;
  };

  // Minimal parser for the safetensors header: an object of objects whose
  // values are strings or arrays of integers.
  void skip() { while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_; }
  void expect(char c) {
    skip();
    HEADROOM_CHECK(pos_ < text_.size() && text_[pos_] == c, "[fixture] malformed header in ", path_);
    ++pos_;
  }
  bool peek(char c) { skip(); return pos_ < text_.size() && text_[pos_] == c; }
  std::string string() {
    expect('"');
    std::string s;
    while (pos_ < text_.size() && text_[pos_] != '"') s += text_[pos_++];
    expect('"');
    return s;
  }
  std::vector<int64_t> ints() {
    std::vector<int64_t> v;
    expect('[');
    while (!peek(']')) {
      size_t used = 0;
      v.push_back(std::stoll(text_.substr(pos_), &used));
      pos_ += used;
      if (peek(',')) ++pos_;
    }
    expect(']');
    return v;
  }
  void parse_top() {
    expect('{');
    while (!peek('}')) {
      std::string name = string();
      expect(':');
      expect('{');
      Entry e;
      while (!peek('}')) {
        std::string key = string();
        expect(':');
        if (name == "__metadata__") metadata_[key] = string();
        else if (key == "dtype") e.dtype = string();
        else if (key == "shape") e.shape = ints();
        else if (key == "data_offsets") { auto o = ints(); e.begin = o.at(0), e.end = o.at(1); }
        if (peek(',')) ++pos_;
      }
      expect('}');
      if (name != "__metadata__") entries_[name] = e;
      if (peek(',')) ++pos_;
    }
  }

  std::string path_, text_;
  size_t pos_ = 0;
  std::vector<char> data_;
  std::map<std::string, Entry> entries_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace headroom::testing
