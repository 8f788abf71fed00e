#include "headroom/examples/common/bleu.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <unordered_map>

#include "headroom/core/error.h"

namespace headroom::examples {

namespace {

constexpr int kMaxOrder = 4;

void replace_all(std::string& text, const std::string& from, const std::string& to) {
  std::string out;
  size_t begin = 0;
  for (size_t at; (at = text.find(from, begin)) != std::string::npos; begin = at + from.size())
    out.append(text, begin, at - begin).append(to);
  text = out.append(text, begin, std::string::npos);
}

// Length in bytes of the whitespace character at text[i] (0 if none) for
// Python's str.isspace, which sacreBLEU's split() and rstrip() use: ASCII
// \t..\r, \x1c..\x1f and space, and U+0085, U+00A0, U+1680, U+2000..U+200A,
// U+2028, U+2029, U+202F, U+205F, U+3000 in UTF-8.  Their multi-byte forms
// start with lead bytes, so a byte-by-byte scan never finds one inside
// another character.
size_t space_length(const std::string& text, size_t i) {
  auto at = [&](size_t k) { return k < text.size() ? static_cast<unsigned char>(text[k]) : 0; };
  unsigned char c = at(i);
  if (c == ' ' || (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x1F)) return 1;
  if (c == 0xC2) return at(i + 1) == 0x85 || at(i + 1) == 0xA0 ? 2 : 0;
  if (c == 0xE1) return at(i + 1) == 0x9A && at(i + 2) == 0x80 ? 3 : 0;
  if (c == 0xE3) return at(i + 1) == 0x80 && at(i + 2) == 0x80 ? 3 : 0;
  if (c != 0xE2) return 0;
  unsigned char second = at(i + 1), third = at(i + 2);
  bool space = (second == 0x80 && (third <= 0x8A || third == 0xA8 || third == 0xA9 || third == 0xAF)) ||
               (second == 0x81 && third == 0x9F);
  return space && third >= 0x80 ? 3 : 0;
}

// The words of `text` between runs of whitespace (Python's str.split()).
std::vector<std::string> split_words(const std::string& text) {
  std::vector<std::string> words;
  size_t begin = 0, i = 0;
  while (i <= text.size()) {
    size_t space = i < text.size() ? space_length(text, i) : 1;
    if (space == 0) {
      ++i;
      continue;
    }
    if (i > begin) words.push_back(text.substr(begin, i - begin));
    i += space;
    begin = i;
  }
  return words;
}

// `text` without trailing whitespace (Python's str.rstrip()).
std::string rstrip(const std::string& text) {
  size_t end = 0;
  for (size_t i = 0; i < text.size();) {
    size_t space = space_length(text, i);
    i += space ? space : 1;
    if (!space) end = i;
  }
  return text.substr(0, end);
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_period_or_comma(char c) { return c == '.' || c == ','; }

// re.sub for one of 13a's patterns: scans left to right; at each position
// `rule(text, i, out)` either appends the replacement of a match starting at
// i and returns its length, or returns 0 (the byte is copied).  Working on
// bytes instead of code points gives the same result: the patterns' ASCII
// characters never occur inside a multi-byte UTF-8 character.
template <typename Rule> std::string substitute(const std::string& text, Rule rule) {
  std::string out;
  out.reserve(text.size() * 2);
  for (size_t i = 0; i < text.size();) {
    size_t matched = rule(text, i, out);
    if (matched == 0) out += text[i++];
    i += matched;
  }
  return out;
}

// ([\{-\~\[-\` -\&\(-\+\:-\@\/]) -> " \1 ": ASCII punctuation and symbols
// except ' , - . (and space itself, which the final split absorbs).
bool is_13a_symbol(char c) {
  return (c >= '{' && c <= '~') || (c >= '[' && c <= '`') || (c >= ' ' && c <= '&') || (c >= '(' && c <= '+') ||
         (c >= ':' && c <= '@') || c == '/';
}

std::string tokenize_punctuation(std::string line) {
  line = substitute(line, [](const std::string& s, size_t i, std::string& out) -> size_t {
    if (!is_13a_symbol(s[i])) return 0;
    out.append(" ").append(1, s[i]).append(" ");
    return 1;
  });
  // ([^0-9])([\.,]) -> "\1 \2 ": period and comma unless preceded by a digit.
  line = substitute(line, [](const std::string& s, size_t i, std::string& out) -> size_t {
    if (i + 1 >= s.size() || is_digit(s[i]) || !is_period_or_comma(s[i + 1])) return 0;
    out.append(1, s[i]).append(" ").append(1, s[i + 1]).append(" ");
    return 2;
  });
  // ([\.,])([^0-9]) -> " \1 \2": period and comma unless followed by a digit.
  line = substitute(line, [](const std::string& s, size_t i, std::string& out) -> size_t {
    if (i + 1 >= s.size() || !is_period_or_comma(s[i]) || is_digit(s[i + 1])) return 0;
    out.append(" ").append(1, s[i]).append(" ").append(1, s[i + 1]);
    return 2;
  });
  // ([0-9])(-) -> "\1 \2 ": a dash after a digit.
  return substitute(line, [](const std::string& s, size_t i, std::string& out) -> size_t {
    if (i + 1 >= s.size() || !is_digit(s[i]) || s[i + 1] != '-') return 0;
    out.append(1, s[i]).append(" - ");
    return 2;
  });
}

// Counts of the n-grams (n = 1..4) of one tokenized sentence, keyed by the
// tokens joined with single spaces (tokens hold no spaces).
using NgramCounts = std::array<std::unordered_map<std::string, int64_t>, kMaxOrder>;

NgramCounts count_ngrams(const std::vector<std::string>& tokens) {
  NgramCounts counts;
  for (size_t i = 0; i < tokens.size(); ++i) {
    std::string ngram = tokens[i];
    for (size_t n = 0; n < kMaxOrder && i + n < tokens.size(); ++n) {
      if (n > 0) ngram.append(" ").append(tokens[i + n]);
      ++counts[n][ngram];
    }
  }
  return counts;
}

// sacreBLEU's floored log: log(0) is a very negative number, not -inf.
double floored_log(double x) { return x == 0.0 ? -9999999999.0 : std::log(x); }

// Precisions, brevity penalty and score from the corpus totals.
void finish_score(BleuScore& bleu) {
  if (bleu.hyp_len < bleu.ref_len)
    bleu.brevity_penalty =
        bleu.hyp_len > 0 ? std::exp(1.0 - static_cast<double>(bleu.ref_len) / static_cast<double>(bleu.hyp_len)) : 0.0;
  else bleu.brevity_penalty = 1.0;
  bleu.ratio = bleu.ref_len > 0 ? static_cast<double>(bleu.hyp_len) / static_cast<double>(bleu.ref_len) : 0.0;
  bool any_match = false;
  for (int64_t m : bleu.matches) any_match = any_match || m > 0;
  if (!any_match) return;  // score and precisions stay 0
  double smoothing = 1.0, log_sum = 0.0;
  for (int n = 0; n < kMaxOrder; ++n) {
    if (bleu.totals[n] == 0) break;  // no n-grams this long: this and higher precisions stay 0
    double total = static_cast<double>(bleu.totals[n]);
    if (bleu.matches[n] == 0) {
      smoothing *= 2;  // 'exp' smoothing: 1/2, 1/4, ... of a match for each order without one
      bleu.precisions[n] = 100.0 / (smoothing * total);
    } else {
      bleu.precisions[n] = 100.0 * static_cast<double>(bleu.matches[n]) / total;
    }
  }
  for (double precision : bleu.precisions) log_sum += floored_log(precision);
  bleu.score = bleu.brevity_penalty * std::exp(log_sum / kMaxOrder);
}

}  // namespace

std::string tokenize_13a(const std::string& line) {
  std::string text = line;
  replace_all(text, "<skipped>", "");
  replace_all(text, "-\n", "");
  replace_all(text, "\n", " ");
  replace_all(text, "&quot;", "\"");
  replace_all(text, "&amp;", "&");
  replace_all(text, "&lt;", "<");
  replace_all(text, "&gt;", ">");
  std::string joined;
  for (const std::string& word : split_words(tokenize_punctuation(" " + text + " ")))
    joined.append(joined.empty() ? "" : " ").append(word);
  return joined;
}

std::string BleuScore::to_string() const {
  char text[256];
  std::snprintf(text, sizeof text,
                "BLEU = %.2f %.1f/%.1f/%.1f/%.1f (BP = %.3f ratio = %.3f hyp_len = %lld ref_len = %lld)", score,
                precisions[0], precisions[1], precisions[2], precisions[3], brevity_penalty, ratio,
                static_cast<long long>(hyp_len), static_cast<long long>(ref_len));
  return text;
}

BleuScore corpus_bleu(const std::vector<std::string>& hypotheses, const std::vector<std::string>& references) {
  HEADROOM_CHECK(!hypotheses.empty(), "[corpus_bleu] the corpus is empty (no hypotheses)");
  HEADROOM_CHECK(hypotheses.size() == references.size(), "[corpus_bleu] ", hypotheses.size(), " hypotheses but ",
                 references.size(), " references; expected one reference per hypothesis");
  BleuScore bleu;
  for (size_t s = 0; s < hypotheses.size(); ++s) {
    HEADROOM_CHECK(!references[s].empty(), "[corpus_bleu] reference ", s, " is empty");
    std::vector<std::string> hyp = split_words(tokenize_13a(rstrip(hypotheses[s])));
    std::vector<std::string> ref = split_words(tokenize_13a(rstrip(references[s])));
    bleu.hyp_len += static_cast<int64_t>(hyp.size());
    bleu.ref_len += static_cast<int64_t>(ref.size());
    NgramCounts hyp_counts = count_ngrams(hyp), ref_counts = count_ngrams(ref);
    for (int n = 0; n < kMaxOrder; ++n) {
      for (const auto& [ngram, count] : hyp_counts[n]) {
        bleu.totals[n] += count;
        auto it = ref_counts[n].find(ngram);
        if (it != ref_counts[n].end()) bleu.matches[n] += std::min(count, it->second);  // clipped
      }
    }
  }
  finish_score(bleu);
  return bleu;
}

}  // namespace headroom::examples
