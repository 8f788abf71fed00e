#include "headroom/examples/common/parallel_data.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>
#include <tuple>

#include "headroom/core/atomic_file.h"
#include "headroom/core/error.h"
#include "headroom/core/read_file.h"
#include "headroom/core/rng.h"
#include "headroom/examples/common/text_data.h"

namespace headroom::examples {

namespace {

// ---- .mo catalogs -------------------------------------------------------------
// Layout (GNU gettext manual, "The Format of GNU MO Files"): u32 magic
// 0x950412de in the writer's byte order, revision, N, offset of the msgid
// table, offset of the msgstr table, hash table size and offset.  Each table
// holds N (length, offset) u32 pairs; string i is `length` bytes at `offset`
// (plus a NUL that we do not need).
constexpr uint32_t kMoMagic = 0x950412de;
constexpr uint32_t kMoMagicSwapped = 0xde120495;

class MoFile {
 public:
  explicit MoFile(std::string path) : path_(std::move(path)), bytes_(read_regular_file(path_, kMaxMoBytes, "read_mo")) {
    uint32_t magic = u32(0, "magic");
    HEADROOM_CHECK(magic == kMoMagic || magic == kMoMagicSwapped, "[read_mo] ", path_, ": bad magic 0x", std::hex,
                   magic, ", expected 0x950412de in either byte order (a GNU .mo file)");
    swapped_ = magic == kMoMagicSwapped;
    uint32_t major = u32(4, "revision") >> 16;
    HEADROOM_CHECK(major <= 1, "[read_mo] ", path_, ": major revision ", major, ", expected 0 or 1");
    count_ = u32(8, "string count");
    msgid_table_ = u32(12, "msgid table offset");
    msgstr_table_ = u32(16, "msgstr table offset");
    for (uint32_t table : {msgid_table_, msgstr_table_})
      HEADROOM_CHECK(table <= bytes_.size() && (bytes_.size() - table) / 8 >= count_, "[read_mo] ", path_,
                     ": truncated string table, ", count_, " entries at offset ", table, " run past the end (",
                     bytes_.size(), " bytes)");
  }

  uint32_t count() const { return count_; }
  std::string msgid(uint32_t i) const { return string_at(msgid_table_, i, "msgid"); }
  std::string msgstr(uint32_t i) const { return string_at(msgstr_table_, i, "msgstr"); }

 private:
  uint32_t u32(size_t at, const char* what) const {
    HEADROOM_CHECK(at + 4 <= bytes_.size(), "[read_mo] ", path_, ": truncated header, the ", what, " at byte ", at,
                   " is past the end (", bytes_.size(), " bytes)");
    uint32_t value = 0;
    for (size_t k = 0; k < 4; ++k) {  // the file's byte order: little-endian unless swapped
      size_t byte = swapped_ ? at + k : at + 3 - k;
      value = (value << 8) | static_cast<unsigned char>(bytes_[byte]);
    }
    return value;
  }

  std::string string_at(uint32_t table, uint32_t i, const char* what) const {
    uint32_t length = u32(table + 8 * size_t{i}, what), offset = u32(table + 8 * size_t{i} + 4, what);
    HEADROOM_CHECK(length <= bytes_.size() && offset <= bytes_.size() - length, "[read_mo] ", path_, ": ", what, " ", i,
                   " (", length, " bytes at offset ", offset, ") runs past the end (", bytes_.size(), " bytes)");
    std::string text = bytes_.substr(offset, length);
    size_t bad = invalid_utf8_offset(text);
    HEADROOM_CHECK(bad == std::string::npos, "[read_mo] ", path_, ": ", what, " ", i, " is not valid UTF-8 at byte ",
                   bad, "; expected a UTF-8 catalog");
    return text;
  }

  std::string path_, bytes_;
  bool swapped_ = false;  // the magic read as 0xde120495: a big-endian file
  uint32_t count_ = 0, msgid_table_ = 0, msgstr_table_ = 0;
};

// Plural entries join their forms with NUL: keep the first (the singular).
std::string first_form(const std::string& text) { return text.substr(0, text.find('\0')); }

// "context\x04message" -> "message".
std::string without_context(const std::string& msgid) {
  size_t separator = msgid.find('\x04');
  return separator == std::string::npos ? msgid : msgid.substr(separator + 1);
}

bool has_line_break_or_tab(const std::string& text) { return text.find_first_of("\t\n\r") != std::string::npos; }

// FNV-1a over the bytes, finished with splitmix64 so nearby strings spread out.
uint64_t hash_text(const std::string& text) {
  uint64_t hash = 0xcbf29ce484222325ULL;
  for (unsigned char c : text) hash = (hash ^ c) * 0x100000001b3ULL;
  return splitmix64(hash);
}

}  // namespace

SentencePairs read_mo(const std::string& path) {
  MoFile mo(path);
  SentencePairs pairs;
  for (uint32_t i = 0; i < mo.count(); ++i) {
    std::string source = without_context(first_form(mo.msgid(i)));
    if (source.empty()) continue;  // the header entry
    pairs.emplace_back(source, first_form(mo.msgstr(i)));
  }
  return pairs;
}

SentencePairs read_mo_dir(const std::string& dir) {
  namespace fs = std::filesystem;
  HEADROOM_CHECK(fs::is_directory(dir), "[read_mo_dir] ", dir, ": no such folder");
  std::vector<fs::path> files;
  for (const fs::directory_entry& entry : fs::recursive_directory_iterator(dir))
    if (entry.is_regular_file() && entry.path().extension() == ".mo") files.push_back(entry.path());
  HEADROOM_CHECK(!files.empty(), "[read_mo_dir] ", dir, ": no .mo files below it");
  std::sort(files.begin(), files.end());
  SentencePairs pairs;
  for (const fs::path& file : files) {
    SentencePairs catalog = read_mo(file.string());
    pairs.insert(pairs.end(), catalog.begin(), catalog.end());
  }
  return pairs;
}

SentencePairs read_tsv(const std::string& path) {
  std::string text = read_regular_file(path, kMaxTsvBytes, "read_tsv");
  size_t bad = invalid_utf8_offset(text);
  HEADROOM_CHECK(bad == std::string::npos, "[read_tsv] ", path, ":",
                 1 + std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(bad), '\n'),
                 ": invalid UTF-8 at byte offset ", bad, "; expected a UTF-8 file");
  SentencePairs pairs;
  size_t line_number = 0;
  for (size_t start = 0; start < text.size();) {
    size_t end = std::min(text.find('\n', start), text.size());
    std::string line = text.substr(start, end - start);
    start = end + 1;
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    size_t tab = line.find('\t');
    HEADROOM_CHECK(tab != std::string::npos && line.find('\t', tab + 1) == std::string::npos, "[read_tsv] ", path, ":",
                   line_number, ": expected source<TAB>target (exactly one tab), got ",
                   tab == std::string::npos ? "no tab" : "several tabs");
    HEADROOM_CHECK(tab > 0 && tab + 1 < line.size(), "[read_tsv] ", path, ":", line_number,
                   ": expected source<TAB>target, got an empty ", tab == 0 ? "source" : "target");
    const size_t nul = line.find('\0');
    HEADROOM_CHECK(nul == std::string::npos, "[read_tsv] ", path, ":", line_number, ": a NUL byte at column ", nul + 1,
                   "; expected text");
    pairs.emplace_back(line.substr(0, tab), line.substr(tab + 1));
  }
  return pairs;
}

void write_tsv(const std::string& path, const SentencePairs& pairs) {
  std::string text;
  for (size_t i = 0; i < pairs.size(); ++i) {
    const auto& [source, target] = pairs[i];
    HEADROOM_CHECK(!has_line_break_or_tab(source) && !has_line_break_or_tab(target), "[write_tsv] ", path, ": pair ", i,
                   " holds a tab or a line break, which TSV cannot store");
    text += source + '\t' + target + '\n';
  }
  write_file_atomically(path, text, "write_tsv");
}

SentencePairs clean_pairs(const SentencePairs& pairs, size_t max_bytes) {
  SentencePairs kept;
  std::set<std::pair<std::string, std::string>> seen;
  for (const auto& pair : pairs) {
    const auto& [source, target] = pair;
    bool useful = !source.empty() && !target.empty() && source != target && source.size() <= max_bytes &&
                  target.size() <= max_bytes && !has_line_break_or_tab(source) && !has_line_break_or_tab(target);
    if (useful && seen.insert(pair).second) kept.push_back(pair);
  }
  return kept;
}

ParallelSplit split_pairs(const SentencePairs& pairs, size_t valid, size_t test) {
  HEADROOM_CHECK(valid + test <= pairs.size(), "[split_pairs] valid ", valid, " + test ", test, " pairs exceed the ",
                 pairs.size(), " pairs");
  // Pairs per source, then the sources in (hash, text) order.
  std::map<std::string, size_t> pairs_per_source;
  for (const auto& pair : pairs) ++pairs_per_source[pair.first];
  std::vector<std::tuple<uint64_t, std::string, size_t>> sources;  // (hash, source, pairs)
  for (const auto& [source, n] : pairs_per_source) sources.emplace_back(hash_text(source), source, n);
  std::sort(sources.begin(), sources.end());

  enum Part { kTrain, kValid, kTest };
  std::map<std::string, Part> part_of;
  size_t in_valid = 0, in_test = 0;
  for (const auto& [hash, source, n] : sources) {
    Part part = kTrain;
    if (in_test + n <= test) part = kTest, in_test += n;
    else if (in_valid + n <= valid) part = kValid, in_valid += n;
    part_of[source] = part;
  }
  ParallelSplit split;
  for (const auto& pair : pairs) {
    Part part = part_of.at(pair.first);
    (part == kTest ? split.test : part == kValid ? split.valid : split.train).push_back(pair);
  }
  return split;
}

}  // namespace headroom::examples
