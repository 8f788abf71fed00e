#include "headroom/examples/common/text_data.h"

#include "headroom/core/error.h"
#include "headroom/core/read_file.h"

namespace headroom::examples {

namespace {

// Length of the UTF-8 sequence that starts with `lead`, 0 for a byte that
// cannot start one (continuation bytes, C0/C1 overlong leads, F5..FF).
int sequence_length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) return 2;
  if (lead >= 0xE0 && lead <= 0xEF) return 3;
  if (lead >= 0xF0 && lead <= 0xF4) return 4;
  return 0;
}

// The allowed range of the byte after `lead` (RFC 3629's table), which rules
// out overlong forms (E0, F0), surrogates (ED) and code points past U+10FFFF (F4).
bool second_byte_ok(unsigned char lead, unsigned char second) {
  if (lead == 0xE0) return second >= 0xA0 && second <= 0xBF;
  if (lead == 0xED) return second >= 0x80 && second <= 0x9F;
  if (lead == 0xF0) return second >= 0x90 && second <= 0xBF;
  if (lead == 0xF4) return second >= 0x80 && second <= 0x8F;
  return second >= 0x80 && second <= 0xBF;
}

}  // namespace

size_t invalid_utf8_offset(const std::string& text) {
  size_t i = 0;
  while (i < text.size()) {
    auto lead = static_cast<unsigned char>(text[i]);
    int length = sequence_length(lead);
    if (length == 0 || i + length > text.size()) return i;
    for (int k = 1; k < length; ++k) {
      auto byte = static_cast<unsigned char>(text[i + k]);
      bool ok = k == 1 ? second_byte_ok(lead, byte) : (byte & 0xC0) == 0x80;
      if (!ok) return i;
    }
    i += length;
  }
  return std::string::npos;
}

std::string read_text_file(const std::string& path) {
  std::string text = read_regular_file(path, kMaxTextBytes, "read_text_file");
  HEADROOM_CHECK(!text.empty(), "[read_text_file] ", path, ": the file is empty, expected some text");
  size_t bad = invalid_utf8_offset(text);
  HEADROOM_CHECK(bad == std::string::npos, "[read_text_file] ", path, ": invalid UTF-8 at byte offset ", bad,
                 " (byte 0x", std::hex, static_cast<int>(static_cast<unsigned char>(text[bad])), ")");
  return text;
}

TextSplit split_text(const std::string& text, double valid_fraction) {
  HEADROOM_CHECK(valid_fraction > 0 && valid_fraction < 1, "[split_text] valid_fraction must be in (0, 1), got ",
                 valid_fraction);
  // A line starts at byte 0 < i < size when text[i - 1] is a newline.
  size_t target = static_cast<size_t>((1 - valid_fraction) * static_cast<double>(text.size()));
  size_t newline = text.find('\n', target > 0 ? target - 1 : 0);
  if (newline == std::string::npos || newline + 1 >= text.size())        // no line starts after target:
    newline = text.rfind('\n', text.size() >= 2 ? text.size() - 2 : 0);  // the last line validates
  HEADROOM_CHECK(newline != std::string::npos && newline + 1 < text.size(), "[split_text] the text (", text.size(),
                 " bytes) has a single line; expected several to cut at a line boundary");
  return {text.substr(0, newline + 1), text.substr(newline + 1)};
}

}  // namespace headroom::examples
