#pragma once
// Corpus BLEU as sacreBLEU computes it with its defaults (13a tokenizer,
// n-grams up to 4, 'exp' smoothing, one reference per hypothesis, case kept),
// so train_mt's scores compare with published sacreBLEU numbers.
//
//   BleuScore bleu = corpus_bleu(hypotheses, references);
//   std::printf("%s\n", bleu.to_string().c_str());
//   // BLEU = 27.30 60.0/33.3/21.4/12.5 (BP = 1.000 ratio = 1.050 hyp_len = 21 ref_len = 20)
#include <cstdint>
#include <string>
#include <vector>

namespace headroom::examples {

// The mteval-v13a tokenization sacreBLEU applies before counting n-grams:
// removes "<skipped>" and "-\n", turns newlines into spaces, unescapes
// &quot; &amp; &lt; &gt; (in that order), puts spaces around punctuation and
// symbols, around '.' and ',' unless between digits ("3.14", "1,000" stay
// whole), and after a '-' that follows a digit; then joins the tokens with
// single spaces (splitting at Unicode whitespace, as Python's str.split).
std::string tokenize_13a(const std::string& line);

struct BleuScore {
  double score = 0;                     // 0..100
  double precisions[4] = {0, 0, 0, 0};  // n-gram precisions in percent, smoothed
  int64_t matches[4] = {0, 0, 0, 0};    // clipped n-gram matches, n = 1..4
  int64_t totals[4] = {0, 0, 0, 0};     // hypothesis n-grams, n = 1..4
  double brevity_penalty = 0;
  double ratio = 0;                  // hyp_len / ref_len (0 when ref_len is 0)
  int64_t hyp_len = 0, ref_len = 0;  // tokens, summed over the corpus
  // sacreBLEU's line: "BLEU = 27.30 60.0/33.3/21.4/12.5 (BP = 1.000 ratio = 1.050 hyp_len = 21 ref_len = 20)".
  std::string to_string() const;
};

// BLEU of hypotheses[i] against references[i]: clipped n-gram matches and
// lengths summed over the corpus, precisions with 'exp' smoothing (the k-th
// order with no match counts 1 / (2^k * total) instead of 0), geometric mean
// of the four, times the brevity penalty exp(1 - ref_len / hyp_len) when the
// hypotheses are shorter.  Throws for an empty corpus, different sizes, or an
// empty reference (as sacreBLEU does).
BleuScore corpus_bleu(const std::vector<std::string>& hypotheses, const std::vector<std::string>& references);

}  // namespace headroom::examples
