#pragma once
// A minimal JSON reader and writer: just enough for safetensors headers.
// Supported values are objects, arrays, strings (with every JSON escape,
// \uXXXX included) and integers.  Floats, true, false and null are rejected
// with a clear error, as is anything malformed; duplicate keys in one object
// are rejected too, because they would make a header ambiguous.
//
//   json::Value v = json::parse(R"({"w": {"shape": [2, 3]}})", "example");
//   v.at("w").at("shape").as_array()[1].as_integer();  // 3
//   json::dump(v);  // {"w":{"shape":[2,3]}}
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace headroom::json {

class Value;
using Members = std::vector<std::pair<std::string, Value>>;  // object members in file order

class Value {
 public:
  enum class Kind { integer, string, array, object };

  Value(int64_t number) : kind_(Kind::integer), integer_(number) {}
  Value(std::string text) : kind_(Kind::string), string_(std::move(text)) {}
  Value(const char* text) : Value(std::string(text)) {}
  static Value array(std::vector<Value> items);
  static Value object(Members members);

  Kind kind() const { return kind_; }
  // Accessors throw "[json] expected an integer, got a string" style errors.
  int64_t as_integer() const;
  const std::string& as_string() const;
  const std::vector<Value>& as_array() const;
  const Members& as_object() const;
  // Object member lookup: find returns nullptr when absent, at throws.
  const Value* find(const std::string& key) const;
  const Value& at(const std::string& key) const;

 private:
  Kind kind_;
  int64_t integer_ = 0;
  std::string string_;
  std::vector<Value> items_;
  Members members_;
};

const char* kind_name(Value::Kind kind);  // "an integer", "a string", ...

// Parses the whole text (surrounding whitespace allowed).  Errors name `source`
// and the byte offset: "[json] invalid JSON in <source> at byte 17: expected ':'".
Value parse(const std::string& text, const std::string& source);

// Compact JSON with no spaces, object members in their stored order.
std::string dump(const Value& value);

}  // namespace headroom::json
