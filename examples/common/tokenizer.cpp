#include "headroom/examples/common/tokenizer.h"

#include <algorithm>
#include <climits>
#include <mutex>
#include <optional>
#include <queue>
#include <sstream>

#include "headroom/core/error.h"
#include "headroom/examples/common/cli.h"

namespace headroom::examples {

// Ids of pieces already encoded; shared by copies of a tokenizer, whose merges
// never change after construction.
struct Tokenizer::PieceCache {
  static constexpr size_t kMaxPieces = size_t{1} << 20;  // stop growing past this
  std::mutex mutex;
  std::unordered_map<std::string, std::vector<int32_t>> ids;
};

namespace {

uint64_t pair_key(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}
int32_t key_left(uint64_t key) { return static_cast<int32_t>(key >> 32); }
int32_t key_right(uint64_t key) { return static_cast<int32_t>(key & 0xffffffffu); }

// ---- Pre-splitting text into pieces ----

enum class ByteClass { space, letter, digit, other };

ByteClass byte_class(char byte) {
  unsigned char c = static_cast<unsigned char>(byte);
  if (c == ' ' || (c >= '\t' && c <= '\r')) return ByteClass::space;
  if (c >= '0' && c <= '9') return ByteClass::digit;
  if (c >= 0x80 || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return ByteClass::letter;
  return ByteClass::other;
}

// Calls visit(begin, length) for each piece of `text`, in order (the pieces
// tile the text): " word", "word", " 123", "...", or a whitespace run.
template <typename Visit> void for_each_piece(const std::string& text, Visit visit) {
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    const size_t begin = i;
    ByteClass run = byte_class(text[i]);
    bool space_before_word = text[i] == ' ' && i + 1 < n && byte_class(text[i + 1]) != ByteClass::space;
    if (space_before_word) {
      run = byte_class(text[++i]);  // the space leads the word that follows
    } else if (run == ByteClass::space) {
      while (i < n && byte_class(text[i]) == ByteClass::space) ++i;
      // Leave a final space to lead the word after the run.
      if (i < n && text[i - 1] == ' ' && i - 1 > begin) --i;
      visit(begin, i - begin);
      continue;
    }
    while (i < n && byte_class(text[i]) == run) ++i;
    visit(begin, i - begin);
  }
}

std::vector<int32_t> byte_ids(const std::string& bytes) {
  std::vector<int32_t> ids(bytes.size());
  for (size_t i = 0; i < bytes.size(); ++i) ids[i] = Tokenizer::kFirstByte + static_cast<unsigned char>(bytes[i]);
  return ids;
}

// Replaces each (left, right) in `ids`, scanning left to right without
// overlaps, by `merged`.  Learning and encoding both merge this way, so
// encoding reproduces the segmentation learned on the training text.
void merge_pair(std::vector<int32_t>& ids, int32_t left, int32_t right, int32_t merged) {
  size_t out = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i + 1 < ids.size() && ids[i] == left && ids[i + 1] == right) {
      ids[out++] = merged;
      ++i;
    } else {
      ids[out++] = ids[i];
    }
  }
  ids.resize(out);
}

bool contains_pair(const std::vector<int32_t>& ids, int32_t left, int32_t right) {
  for (size_t i = 0; i + 1 < ids.size(); ++i)
    if (ids[i] == left && ids[i + 1] == right) return true;
  return false;
}

// ---- Learning merges ----

// The BPE learner keeps the count of every adjacent pair (weighted by how
// often each distinct piece occurs) and an index pair -> pieces holding it,
// so a merge only revisits the pieces that contain the merged pair.  A
// max-heap with lazy deletion finds the most frequent pair.
class BpeLearner {
 public:
  explicit BpeLearner(const std::unordered_map<std::string, int64_t>& piece_counts) {
    for (const auto& [piece, count] : piece_counts) words_.push_back({byte_ids(piece), count});
    for (size_t w = 0; w < words_.size(); ++w) {
      count_pairs(words_[w], +1);
      index_pairs(static_cast<int32_t>(w), -1);
    }
  }

  // The most frequent pair (ties: the smallest key, i.e. smallest (left,
  // right)); false when no pair occurs at least twice.
  bool best_pair(uint64_t* key) {
    apply_changes();
    while (!heap_.empty()) {
      HeapEntry top = heap_.top();
      auto it = pair_counts_.find(top.key);
      if (it != pair_counts_.end() && it->second == top.count) break;
      heap_.pop();  // stale: the pair's count changed since this entry was pushed
    }
    if (heap_.empty() || heap_.top().count < 2) return false;
    *key = heap_.top().key;
    return true;
  }

  void merge(uint64_t key, int32_t merged) {
    auto it = pair_words_.find(key);
    std::vector<int32_t> candidates = std::move(it->second);
    pair_words_.erase(it);
    const int32_t left = key_left(key), right = key_right(key);
    for (int32_t w : candidates) {
      Word& word = words_[w];
      if (!contains_pair(word.ids, left, right)) continue;  // listed twice, already merged
      count_pairs(word, -1);
      merge_pair(word.ids, left, right, merged);
      count_pairs(word, +1);
      index_pairs(w, merged);
    }
  }

 private:
  struct Word {
    std::vector<int32_t> ids;
    int64_t count;  // occurrences of this piece in the texts
  };
  struct HeapEntry {
    int64_t count;
    uint64_t key;
    bool operator<(const HeapEntry& other) const {  // top = highest count, then smallest key
      return count != other.count ? count < other.count : key > other.key;
    }
  };

  // Records the word's pairs as added (sign = +1) or removed (-1); the counts
  // change in apply_changes, once per merge, so pairs of a merged word that
  // the merge left alone (removed, then added again) cost no heap entry.
  void count_pairs(const Word& word, int64_t sign) {
    for (size_t i = 0; i + 1 < word.ids.size(); ++i)
      changes_.emplace_back(pair_key(word.ids[i], word.ids[i + 1]), sign * word.count);
  }

  // Lists word w under its pairs; only those holding `with_id` (-1: all),
  // since after a merge the word's other pairs are listed already.
  void index_pairs(int32_t w, int32_t with_id) {
    const std::vector<int32_t>& ids = words_[w].ids;
    for (size_t i = 0; i + 1 < ids.size(); ++i)
      if (with_id < 0 || ids[i] == with_id || ids[i + 1] == with_id)
        pair_words_[pair_key(ids[i], ids[i + 1])].push_back(w);
  }

  // Adds the recorded changes to the pair counts and pushes the new count of
  // each pair that changed.
  void apply_changes() {
    std::sort(changes_.begin(), changes_.end());
    for (size_t i = 0; i < changes_.size();) {
      const uint64_t key = changes_[i].first;
      int64_t change = 0;
      for (; i < changes_.size() && changes_[i].first == key; ++i) change += changes_[i].second;
      if (change == 0) continue;
      int64_t& count = pair_counts_[key];
      count += change;
      if (count > 0) heap_.push({count, key});
      else pair_counts_.erase(key);
    }
    changes_.clear();
  }

  std::vector<Word> words_;
  std::unordered_map<uint64_t, int64_t> pair_counts_;
  std::unordered_map<uint64_t, std::vector<int32_t>> pair_words_;  // may list a word twice
  std::priority_queue<HeapEntry> heap_;
  std::vector<std::pair<uint64_t, int64_t>> changes_;  // (pair, count change) not yet applied
};

// ---- Text form ----

constexpr const char* kTextHeader = "headroom-bpe v1 ";

// A decimal integer in [min, max] filling all of `field`; `what` names it in the error.
int64_t parse_field(const std::string& field, size_t line_number, int64_t min, int64_t max, const char* what) {
  std::optional<int64_t> value = parse_int64(field);
  HEADROOM_CHECK(value && *value >= min && *value <= max, "[Tokenizer::from_text] line ", line_number, ": expected ",
                 what, " in [", min, ", ", max, "], got '", field.substr(0, 40), "'");
  return *value;
}

std::vector<std::string> split(const std::string& text, char separator) {
  std::vector<std::string> parts;
  size_t begin = 0;
  for (size_t end; (end = text.find(separator, begin)) != std::string::npos; begin = end + 1)
    parts.push_back(text.substr(begin, end - begin));
  parts.push_back(text.substr(begin));
  return parts;
}

// ---- describe_token ----

// Length of the valid UTF-8 sequence starting at bytes[i], 0 when none does.
size_t utf8_length(const std::string& bytes, size_t i) {
  auto at = [&](size_t k) { return static_cast<unsigned char>(bytes[k]); };
  unsigned char lead = at(i);
  if (lead < 0x80) return 1;
  size_t length = lead >= 0xC2 && lead <= 0xDF   ? 2
                  : lead >= 0xE0 && lead <= 0xEF ? 3
                  : lead >= 0xF0 && lead <= 0xF4 ? 4
                                                 : 0;
  if (length == 0 || i + length > bytes.size()) return 0;
  // The second byte's range rules out overlong forms, surrogates and > U+10FFFF.
  unsigned char low = lead == 0xE0 ? 0xA0 : lead == 0xF0 ? 0x90 : 0x80;
  unsigned char high = lead == 0xED ? 0x9F : lead == 0xF4 ? 0x8F : 0xBF;
  if (at(i + 1) < low || at(i + 1) > high) return 0;
  for (size_t k = 2; k < length; ++k)
    if (at(i + k) < 0x80 || at(i + k) > 0xBF) return 0;
  return length;
}

std::string escape_bytes(const std::string& bytes) {
  std::string out = "\"";
  for (size_t i = 0; i < bytes.size();) {
    unsigned char c = static_cast<unsigned char>(bytes[i]);
    size_t length = utf8_length(bytes, i);
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\\' || c == '"') {
      out += '\\', out += static_cast<char>(c);
    } else if (c < 0x20 || c == 0x7F || length == 0) {
      static const char* digits = "0123456789abcdef";
      out += "\\x", out += digits[c >> 4], out += digits[c & 15];
    } else {
      out += bytes.substr(i, length);
      i += length;
      continue;
    }
    ++i;
  }
  return out + "\"";
}

}  // namespace

Tokenizer::Tokenizer() : token_bytes_(kFirstByte), cache_(std::make_shared<PieceCache>()) {
  for (int byte = 0; byte < 256; ++byte) token_bytes_.push_back(std::string(1, static_cast<char>(byte)));
}

void Tokenizer::add_merge(int32_t left, int32_t right) {
  merge_rank_.emplace(pair_key(left, right), static_cast<int32_t>(merges_.size()));
  merges_.emplace_back(left, right);
  token_bytes_.push_back(token_bytes_[left] + token_bytes_[right]);
}

Tokenizer Tokenizer::learn(const std::vector<std::string>& texts, int64_t merges) {
  HEADROOM_CHECK(merges >= 0 && merges <= INT32_MAX - kFirstMerge, "[Tokenizer::learn] merges must be in [0, ",
                 INT32_MAX - kFirstMerge, "], got ", merges);
  std::unordered_map<std::string, int64_t> piece_counts;
  for (const std::string& text : texts)
    for_each_piece(text, [&](size_t begin, size_t length) { ++piece_counts[text.substr(begin, length)]; });
  BpeLearner learner(piece_counts);
  Tokenizer tokenizer;
  uint64_t key;
  while (tokenizer.merge_count() < merges && learner.best_pair(&key)) {
    learner.merge(key, static_cast<int32_t>(tokenizer.vocab_size()));
    tokenizer.add_merge(key_left(key), key_right(key));
  }
  return tokenizer;
}

std::vector<int32_t> Tokenizer::encode_piece(const std::string& piece) const {
  std::vector<int32_t> ids = byte_ids(piece);
  while (ids.size() >= 2) {
    // Apply the earliest-learned merge among the piece's pairs.
    int32_t best_rank = INT32_MAX;
    for (size_t i = 0; i + 1 < ids.size(); ++i) {
      auto it = merge_rank_.find(pair_key(ids[i], ids[i + 1]));
      if (it != merge_rank_.end() && it->second < best_rank) best_rank = it->second;
    }
    if (best_rank == INT32_MAX) break;
    const auto& [left, right] = merges_[best_rank];
    merge_pair(ids, left, right, kFirstMerge + best_rank);
  }
  return ids;
}

std::vector<int32_t> Tokenizer::encode(const std::string& text) const {
  if (merges_.empty()) return byte_ids(text);
  std::vector<int32_t> ids;
  ids.reserve(text.size());
  for_each_piece(text, [&](size_t begin, size_t length) {
    std::string piece = text.substr(begin, length);
    {
      std::lock_guard<std::mutex> lock(cache_->mutex);
      auto it = cache_->ids.find(piece);
      if (it != cache_->ids.end()) {
        ids.insert(ids.end(), it->second.begin(), it->second.end());
        return;
      }
    }
    std::vector<int32_t> piece_ids = encode_piece(piece);
    ids.insert(ids.end(), piece_ids.begin(), piece_ids.end());
    std::lock_guard<std::mutex> lock(cache_->mutex);
    if (cache_->ids.size() < PieceCache::kMaxPieces) cache_->ids.emplace(std::move(piece), std::move(piece_ids));
  });
  return ids;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string text;
  for (int32_t id : ids) {
    HEADROOM_CHECK(id >= 0 && id < vocab_size(), "[Tokenizer::decode] id ", id, " is outside the vocabulary [0, ",
                   vocab_size(), ")");
    text += token_bytes_[id];  // empty for <pad>, <bos>, <eos>
  }
  return text;
}

std::string Tokenizer::to_text() const {
  std::ostringstream out;
  out << kTextHeader << merges_.size() << "\n";
  for (const auto& [left, right] : merges_) out << left << " " << right << "\n";
  return out.str();
}

Tokenizer Tokenizer::from_text(const std::string& text) {
  std::vector<std::string> lines = split(text, '\n');
  if (lines.size() > 1 && lines.back().empty()) lines.pop_back();  // the final newline
  const std::string header = kTextHeader;
  HEADROOM_CHECK(lines[0].compare(0, header.size(), header) == 0, "[Tokenizer::from_text] line 1: expected '", header,
                 "<merges>', got '", lines[0].substr(0, 40), "'");
  int64_t merges = parse_field(lines[0].substr(header.size()), 1, 0, INT32_MAX - kFirstMerge, "a merge count");
  HEADROOM_CHECK(static_cast<int64_t>(lines.size()) - 1 == merges, "[Tokenizer::from_text] the header announces ",
                 merges, " merges but ", lines.size() - 1, " lines follow");
  Tokenizer tokenizer;
  for (size_t k = 1; k < lines.size(); ++k) {
    std::vector<std::string> fields = split(lines[k], ' ');
    HEADROOM_CHECK(fields.size() == 2, "[Tokenizer::from_text] line ", k + 1,
                   ": expected two ids '<left> <right>', got '", lines[k], "'");
    // A merge joins bytes or earlier merges, never the special ids.
    const int64_t last_id = tokenizer.vocab_size() - 1;
    int64_t left = parse_field(fields[0], k + 1, kFirstByte, last_id, "an id");
    int64_t right = parse_field(fields[1], k + 1, kFirstByte, last_id, "an id");
    HEADROOM_CHECK(!tokenizer.merge_rank_.count(pair_key(left, right)), "[Tokenizer::from_text] line ", k + 1,
                   ": the pair ", left, " ", right, " is merged twice");
    tokenizer.add_merge(static_cast<int32_t>(left), static_cast<int32_t>(right));
  }
  return tokenizer;
}

std::string Tokenizer::describe_token(int32_t id) const {
  HEADROOM_CHECK(id >= 0 && id < vocab_size(), "[Tokenizer::describe_token] id ", id, " is outside the vocabulary [0, ",
                 vocab_size(), ")");
  if (id == kPad) return "<pad>";
  if (id == kBos) return "<bos>";
  if (id == kEos) return "<eos>";
  return escape_bytes(token_bytes_[id]);
}

}  // namespace headroom::examples
