#pragma once
// Text corpora for the byte-level language model: a whole file read as
// UTF-8, and a deterministic train/validation split at a line boundary.
//
//   std::string text = read_text_file("data/fortunes.txt");
//   TextSplit split = split_text(text, 0.1);   // the last ~10% (whole lines) validates
#include <cstddef>
#include <cstdint>
#include <string>

namespace headroom::examples {

// The largest text read_text_file reads: 1 GiB (its ids take four times that).
constexpr uint64_t kMaxTextBytes = uint64_t(1) << 30;

// The offset of the first byte that does not belong to a well-formed UTF-8
// sequence (RFC 3629: no overlong forms, no surrogates, nothing past
// U+10FFFF), or std::string::npos when all of `text` is valid.
size_t invalid_utf8_offset(const std::string& text);

// A whole text file; throws naming the path for a missing or empty file,
// one that is not a regular file (a directory, FIFO or device) or larger
// than kMaxTextBytes, and for invalid UTF-8, naming the byte offset.
std::string read_text_file(const std::string& path);

struct TextSplit {
  std::string train, valid;
};

// train + valid == text: valid is the tail of the text from the start of the
// first line at or after byte (1 - valid_fraction) * size (or, when no line
// starts there, the last line).  Throws for a fraction outside (0, 1) and for
// a text of one line, which has no boundary to cut at.
TextSplit split_text(const std::string& text, double valid_fraction);

}  // namespace headroom::examples
