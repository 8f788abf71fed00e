#include "headroom/core/json.h"

#include <cstdio>
#include <limits>
#include <set>

#include "headroom/core/error.h"

namespace headroom::json {

// ---- Value ------------------------------------------------------------------------

Value Value::array(std::vector<Value> items) {
  Value v(int64_t(0));
  v.kind_ = Kind::array;
  v.items_ = std::move(items);
  return v;
}

Value Value::object(Members members) {
  Value v(int64_t(0));
  v.kind_ = Kind::object;
  v.members_ = std::move(members);
  return v;
}

const char* kind_name(Value::Kind kind) {
  switch (kind) {
    case Value::Kind::integer: return "an integer";
    case Value::Kind::string: return "a string";
    case Value::Kind::array: return "an array";
    case Value::Kind::object: return "an object";
  }
  return "?";
}

namespace {
void expect_kind(const Value& v, Value::Kind kind) {
  HEADROOM_CHECK(v.kind() == kind, "[json] expected ", kind_name(kind), ", got ", kind_name(v.kind()));
}
}  // namespace

int64_t Value::as_integer() const {
  expect_kind(*this, Kind::integer);
  return integer_;
}
const std::string& Value::as_string() const {
  expect_kind(*this, Kind::string);
  return string_;
}
const std::vector<Value>& Value::as_array() const {
  expect_kind(*this, Kind::array);
  return items_;
}
const Members& Value::as_object() const {
  expect_kind(*this, Kind::object);
  return members_;
}

const Value* Value::find(const std::string& key) const {
  for (const auto& [name, value] : as_object())
    if (name == key) return &value;
  return nullptr;
}

const Value& Value::at(const std::string& key) const {
  const Value* v = find(key);
  HEADROOM_CHECK(v != nullptr, "[json] object has no member \"", key, "\"");
  return *v;
}

// ---- parser -----------------------------------------------------------------------

namespace {

// The two-character escapes, shared by the reader and the writer.
struct Escape {
  char letter, character;  // "\n" is letter 'n' for character '\n'
};
constexpr Escape kEscapes[] = {{'"', '"'},  {'\\', '\\'}, {'b', '\b'}, {'f', '\f'},
                               {'n', '\n'}, {'r', '\r'},  {'t', '\t'}};

template <typename Pred> const Escape* find_escape(Pred pred) {
  for (const Escape& e : kEscapes)
    if (pred(e)) return &e;
  return nullptr;
}

// Recursive descent over the text; every failure goes through fail(), which
// names the source and the byte offset.
class Parser {
 public:
  Parser(const std::string& text, const std::string& source) : text_(text), source_(source) {}

  Value parse_document() {
    Value v = parse_value(0);
    skip_space();
    if (pos_ != text_.size()) fail("unexpected text after the value");
    return v;
  }

 private:
  static constexpr int kMaxDepth = 64;  // deeper nesting is refused instead of overflowing the stack

  [[noreturn]] void fail(const std::string& what) const {
    HEADROOM_FAIL("[json] invalid JSON in ", source_, " at byte ", pos_, ": ", what);
  }

  void skip_space() {
    while (pos_ < text_.size() &&
           (text_[pos_] == ' ' || text_[pos_] == '\t' || text_[pos_] == '\n' || text_[pos_] == '\r'))
      ++pos_;
  }

  char peek() {
    skip_space();
    if (pos_ == text_.size()) fail("unexpected end of text");
    return text_[pos_];
  }

  void expect(char c) {
    if (peek() != c) fail(std::string("expected '") + c + "', found '" + text_[pos_] + "'");
    ++pos_;
  }

  Value parse_value(int depth) {
    if (depth > kMaxDepth) fail("nesting deeper than " + std::to_string(kMaxDepth) + " levels");
    char c = peek();
    if (c == '{') return parse_object(depth);
    if (c == '[') return parse_array(depth);
    if (c == '"') return Value(parse_string());
    if (c == '-' || (c >= '0' && c <= '9')) return Value(parse_integer());
    fail(std::string("unexpected character '") + c + "' (only objects, arrays, strings and integers are supported)");
  }

  Value parse_object(int depth) {
    expect('{');
    Members members;
    std::set<std::string> seen;
    if (peek() == '}') {
      ++pos_;
      return Value::object(std::move(members));
    }
    while (true) {
      if (peek() != '"') fail("expected a string key");
      size_t key_pos = pos_;
      std::string key = parse_string();
      if (!seen.insert(key).second) {
        pos_ = key_pos;
        fail("duplicate key \"" + key + "\"");
      }
      expect(':');
      members.emplace_back(std::move(key), parse_value(depth + 1));
      if (peek() == '}') break;
      expect(',');
    }
    ++pos_;
    return Value::object(std::move(members));
  }

  Value parse_array(int depth) {
    expect('[');
    std::vector<Value> items;
    if (peek() == ']') {
      ++pos_;
      return Value::array(std::move(items));
    }
    while (true) {
      items.push_back(parse_value(depth + 1));
      if (peek() == ']') break;
      expect(',');
    }
    ++pos_;
    return Value::array(std::move(items));
  }

  int64_t parse_integer() {
    bool negative = text_[pos_] == '-';
    if (negative) ++pos_;
    if (pos_ == text_.size() || text_[pos_] < '0' || text_[pos_] > '9') fail("expected a digit");
    if (text_[pos_] == '0' && pos_ + 1 < text_.size() && text_[pos_ + 1] >= '0' && text_[pos_ + 1] <= '9')
      fail("leading zeros are not allowed");
    // Accumulate as a negative number so that INT64_MIN fits.
    int64_t value = 0;
    const int64_t lowest = std::numeric_limits<int64_t>::min();
    while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') {
      int digit = text_[pos_] - '0';
      if (value < (lowest + digit) / 10) fail("integer out of the 64-bit range");
      value = value * 10 - digit;
      ++pos_;
    }
    if (pos_ < text_.size() && (text_[pos_] == '.' || text_[pos_] == 'e' || text_[pos_] == 'E'))
      fail("only integers are supported, not fractions or exponents");
    if (!negative) {
      if (value == lowest) fail("integer out of the 64-bit range");
      value = -value;
    }
    return value;
  }

  unsigned parse_hex4() {
    if (pos_ + 4 > text_.size()) fail("truncated \\u escape");
    unsigned code = 0;
    for (int i = 0; i < 4; ++i) {
      char h = text_[pos_++];
      code <<= 4;
      if (h >= '0' && h <= '9') code |= h - '0';
      else if (h >= 'a' && h <= 'f') code |= h - 'a' + 10;
      else if (h >= 'A' && h <= 'F') code |= h - 'A' + 10;
      else fail("bad hex digit in \\u escape");
    }
    return code;
  }

  // A \uXXXX escape (after the "\u"), combining UTF-16 surrogate pairs.
  unsigned parse_code_point() {
    unsigned code = parse_hex4();
    if (code >= 0xDC00 && code <= 0xDFFF) fail("unpaired low surrogate in \\u escape");
    if (code < 0xD800 || code > 0xDBFF) return code;
    if (text_.compare(pos_, 2, "\\u") != 0) fail("high surrogate not followed by a \\u low surrogate");
    pos_ += 2;
    unsigned low = parse_hex4();
    if (low < 0xDC00 || low > 0xDFFF) fail("high surrogate not followed by a low surrogate");
    return 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00);
  }

  static void append_utf8(std::string& out, unsigned code) {
    if (code < 0x80) {
      out += char(code);
    } else if (code < 0x800) {
      out += char(0xC0 | (code >> 6));
      out += char(0x80 | (code & 0x3F));
    } else if (code < 0x10000) {
      out += char(0xE0 | (code >> 12));
      out += char(0x80 | ((code >> 6) & 0x3F));
      out += char(0x80 | (code & 0x3F));
    } else {
      out += char(0xF0 | (code >> 18));
      out += char(0x80 | ((code >> 12) & 0x3F));
      out += char(0x80 | ((code >> 6) & 0x3F));
      out += char(0x80 | (code & 0x3F));
    }
  }

  std::string parse_string() {
    ++pos_;  // the opening quote, checked by the caller
    std::string out;
    while (true) {
      if (pos_ >= text_.size()) fail("unterminated string");
      char c = text_[pos_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) fail("control character inside a string");
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos_ >= text_.size()) fail("unterminated escape");
      char e = text_[pos_++];
      if (e == 'u') {
        append_utf8(out, parse_code_point());
      } else if (e == '/') {
        out += '/';  // allowed escaped on input, never written escaped
      } else {
        const Escape* known = find_escape([&](const Escape& x) { return x.letter == e; });
        if (known == nullptr) {
          --pos_;
          fail(std::string("unknown escape '\\") + e + "'");
        }
        out += known->character;
      }
    }
  }

  const std::string& text_;
  const std::string& source_;
  size_t pos_ = 0;
};

// ---- writer -----------------------------------------------------------------------

void dump_string(const std::string& s, std::string& out) {
  out += '"';
  for (char c : s) {
    const Escape* known = find_escape([&](const Escape& x) { return x.character == c; });
    if (known != nullptr) {
      out += '\\';
      out += known->letter;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
      out += buf;
    } else {
      out += c;  // UTF-8 bytes pass through unchanged
    }
  }
  out += '"';
}

void dump_to(const Value& v, std::string& out) {
  switch (v.kind()) {
    case Value::Kind::integer: out += std::to_string(v.as_integer()); break;
    case Value::Kind::string: dump_string(v.as_string(), out); break;
    case Value::Kind::array: {
      out += '[';
      const char* sep = "";
      for (const Value& item : v.as_array()) {
        out += sep;
        dump_to(item, out);
        sep = ",";
      }
      out += ']';
      break;
    }
    case Value::Kind::object: {
      out += '{';
      const char* sep = "";
      for (const auto& [key, item] : v.as_object()) {
        out += sep;
        dump_string(key, out);
        out += ':';
        dump_to(item, out);
        sep = ",";
      }
      out += '}';
      break;
    }
  }
}

}  // namespace

Value parse(const std::string& text, const std::string& source) { return Parser(text, source).parse_document(); }

std::string dump(const Value& value) {
  std::string out;
  dump_to(value, out);
  return out;
}

}  // namespace headroom::json
