#pragma once
// Byte-level tokenizer with optional byte-pair-encoding (BPE) merges.
//
// Ids: 0 = <pad>, 1 = <bos>, 2 = <eos>, 3..258 = the 256 byte values, then
// one id per learned merge (259 + merge rank).  Every byte has an id, so any
// string encodes and decode(encode(s)) == s exactly, whatever its bytes.
//
//   Tokenizer bytes;                                   // train_lm: plain bytes
//   Tokenizer bpe = Tokenizer::learn(train_texts, 8000);  // train_mt
//   std::vector<int32_t> ids = bpe.encode("Das Haus ist klein.");
//   std::string text = bpe.decode(ids);                // == the input
//   metadata["tokenizer"] = bpe.to_text();             // and back with from_text
//
// Learning and encoding first split text into pieces, GPT-2 style: a piece is
// an optional leading space followed by a run of letters (ASCII letters and
// all bytes >= 0x80, so UTF-8 letters stay whole), a run of digits, or a run
// of other non-space bytes; whitespace that no piece takes forms pieces of its
// own.  Merges never cross piece boundaries.
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace headroom::examples {

class Tokenizer {
 public:
  static constexpr int32_t kPad = 0, kBos = 1, kEos = 2;
  static constexpr int32_t kFirstByte = 3;     // id of byte 0x00
  static constexpr int32_t kFirstMerge = 259;  // id of the first learned merge

  // The plain byte-level tokenizer (no merges).
  Tokenizer();

  // Learns up to `merges` merges on `texts`: repeatedly merges the most
  // frequent adjacent pair of ids (ties: the smallest pair (left, right)),
  // and stops early when no pair occurs at least twice.
  static Tokenizer learn(const std::vector<std::string>& texts, int64_t merges);

  // Ids of `text`, without <bos>/<eos>.  Thread-safe (a shared, locked cache
  // remembers the ids of pieces already seen).
  std::vector<int32_t> encode(const std::string& text) const;
  // The bytes of `ids`, skipping <pad>/<bos>/<eos>; throws for ids outside
  // [0, vocab_size()).
  std::string decode(const std::vector<int32_t>& ids) const;

  int64_t vocab_size() const { return static_cast<int64_t>(token_bytes_.size()); }
  int64_t merge_count() const { return static_cast<int64_t>(merges_.size()); }
  static constexpr int32_t pad() { return kPad; }
  static constexpr int32_t bos() { return kBos; }
  static constexpr int32_t eos() { return kEos; }

  // Text form for checkpoint metadata: a header "headroom-bpe v1 <merges>",
  // then one merge a line, "<left id> <right id>", in learned order.
  std::string to_text() const;
  // Parses to_text()'s form; throws headroom::Error naming the line at fault.
  static Tokenizer from_text(const std::string& text);

  // Printable form for logs and tables: <pad>/<bos>/<eos>, otherwise the bytes
  // in double quotes with C escapes (\n, \t, \\, \", \xNN for control bytes
  // and bytes that are not part of valid UTF-8), e.g. "\" Haus\"".
  std::string describe_token(int32_t id) const;

 private:
  struct PieceCache;
  void add_merge(int32_t left, int32_t right);
  std::vector<int32_t> encode_piece(const std::string& piece) const;

  std::vector<std::pair<int32_t, int32_t>> merges_;   // merge k makes id kFirstMerge + k
  std::unordered_map<uint64_t, int32_t> merge_rank_;  // pair key -> k
  std::vector<std::string> token_bytes_;              // id -> bytes ("" for specials)
  std::shared_ptr<PieceCache> cache_;                 // shared by copies (same merges)
};

}  // namespace headroom::examples
