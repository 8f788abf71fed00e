#pragma once
// Sentence pairs for translation (source English, target German): read from
// GNU gettext catalogs (.mo, the compiled translations Debian packages ship
// under usr/share/locale/de/LC_MESSAGES) or from a TSV file, cleaned, and
// split into train / valid / test by a hash of the source sentence.
//
//   SentencePairs pairs = clean_pairs(read_mo_dir("data/mt-mo"), 200);
//   ParallelSplit split = split_pairs(pairs, 1000, 1000);
//   write_tsv("data/mt-train.tsv", split.train);
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace headroom::examples {

using SentencePairs = std::vector<std::pair<std::string, std::string>>;  // (source, target)

// The largest .mo catalog and TSV file the readers read (catalogs are a few
// hundred KiB; a TSV corpus may be large).
constexpr uint64_t kMaxMoBytes = uint64_t(256) << 20, kMaxTsvBytes = uint64_t(1) << 30;

// The (msgid, msgstr) pairs of a .mo catalog, in file order, without the
// header entry (empty msgid).  Plural entries give their singular msgid and
// first msgstr form; a message context (msgctxt, the text before '\x04' in
// the msgid) is dropped.  The catalog's charset (header Content-Type) must be
// UTF-8 or ASCII.  Either byte order is read.  Throws naming the path for a
// file that is missing, not a regular file or over kMaxMoBytes, a bad magic,
// an unknown major revision, a table or string that runs past the end of the
// file, and another charset.
SentencePairs read_mo(const std::string& path);

// Every *.mo file below `dir` (recursively), read in sorted path order so the
// result does not depend on the file system; throws when there is none.
SentencePairs read_mo_dir(const std::string& dir);

// One "source<TAB>target" pair per line; empty lines are skipped, a trailing
// '\r' is dropped.  Throws naming the path for a file that is missing, not a
// regular file or over kMaxTsvBytes, and naming the line for invalid UTF-8,
// a line without exactly one tab, one with an empty side and one holding a
// NUL byte.
SentencePairs read_tsv(const std::string& path);

// Writes the pairs as read_tsv reads them, atomically; throws for a sentence
// that holds a tab or a newline.
void write_tsv(const std::string& path, const SentencePairs& pairs);

// Keeps the pairs that make useful training examples, in order: drops pairs
// with an empty side, untranslated ones (target == source), ones with a side
// longer than max_bytes, and ones holding a tab, newline or carriage return
// (multi-line help texts: dropped rather than joined, since their line
// breaks carry layout); then drops exact repeats of an earlier pair.
// Keyboard accelerators ('_' or '&' before a letter) are left as they are:
// the command-line catalogs used here have few, and removing them would also
// change names such as LC_ALL or "&&".
SentencePairs clean_pairs(const SentencePairs& pairs, size_t max_bytes);

struct ParallelSplit {
  SentencePairs train, valid, test;
};

// Orders the distinct source sentences by a hash of their bytes and deals
// them out: a source's pairs go to test while they fit in `test` pairs, else
// to valid while they fit in `valid`, else to train.  So the split depends
// only on the set of pairs (not their order), one source never lands in two
// parts, and test / valid hold exactly `test` / `valid` pairs unless a
// source with several targets does not fit (then slightly fewer).  Each part
// keeps the input order.  Throws when valid + test exceeds the pairs.
ParallelSplit split_pairs(const SentencePairs& pairs, size_t valid, size_t test);

}  // namespace headroom::examples
