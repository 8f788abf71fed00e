// Corpus BLEU with sacreBLEU's defaults (examples/common/bleu.h).  Expected
// values are counted by hand from sacreBLEU's definitions (its 13a tokenizer
// regexes and BLEU.compute_bleu); no sacreBLEU package was at hand to compare.
#include "headroom/examples/common/bleu.h"

#include <cmath>
#include <string>
#include <vector>

#include "helpers.h"

using namespace headroom;
using namespace headroom::examples;

TEST_CASE("tokenize_13a splits punctuation and symbols") {
  CHECK(tokenize_13a("Hello, world!") == "Hello , world !");
  CHECK(tokenize_13a("(a) [b] {c} \"d\" $5 50% a/b a+b x@y #1") ==
        "( a ) [ b ] { c } \" d \" $ 5 50 % a / b a + b x @ y # 1");
  CHECK(tokenize_13a("don't stop") == "don't stop");  // ' is not split
  CHECK(tokenize_13a("  many   spaces\there  ") == "many spaces here");
  CHECK(tokenize_13a("") == "");
}

TEST_CASE("tokenize_13a keeps numbers whole and splits dashes after digits") {
  CHECK(tokenize_13a("It costs 3.14 dollars.") == "It costs 3.14 dollars .");
  CHECK(tokenize_13a("1,000 people, 2.5%") == "1,000 people , 2.5 %");
  CHECK(tokenize_13a("Chapter 3.") == "Chapter 3 .");  // '.' before a non-digit (the padding space)
  // " .5 ": ([^0-9])([\.,]) matches " ." first, so the '.' leaves the '5'.
  CHECK(tokenize_13a(".5") == ". 5");
  CHECK(tokenize_13a("e.g. a.b") == "e . g . a . b");
  CHECK(tokenize_13a("pages 10-20") == "pages 10 - 20");
  CHECK(tokenize_13a("well-known x-1") == "well-known x-1");  // dash after a letter stays
}

TEST_CASE("tokenize_13a unescapes entities and handles <skipped>, line breaks and Unicode") {
  CHECK(tokenize_13a("&quot;Hi&quot; &amp; &lt;b&gt;") == "\" Hi \" & < b >");
  CHECK(tokenize_13a("&amp;lt;") == "<");  // &amp; is unescaped before &lt;
  CHECK(tokenize_13a("a<skipped>b") == "ab");
  CHECK(tokenize_13a("line-\nbreak two\nlines") == "linebreak two lines");
  CHECK(tokenize_13a("Grüße aus der Straße.") == "Grüße aus der Straße .");
  // U+00A0 (no-break space) and U+3000 (ideographic space) separate words as in Python's split().
  CHECK(tokenize_13a("a\xc2\xa0"
                     "b\xe3\x80\x80"
                     "c") == "a b c");
  CHECK(tokenize_13a("\xc3\x85.") == "\xc3\x85 .");  // Å: its second byte 0x85 is not U+0085
}

TEST_CASE("corpus_bleu of identical and disjoint corpora") {
  std::vector<std::string> refs = {"The cat sat on the mat.", "Das ist ein kleines Haus, nicht wahr?"};
  BleuScore same = corpus_bleu(refs, refs);
  CHECK(same.score == doctest::Approx(100.0).epsilon(1e-12));
  CHECK(same.brevity_penalty == 1.0);
  CHECK(same.hyp_len == 16);
  CHECK(same.to_string() ==
        "BLEU = 100.00 100.0/100.0/100.0/100.0 (BP = 1.000 ratio = 1.000 hyp_len = 16 ref_len = 16)");

  // No match of any order: sacreBLEU returns 0 with all precisions 0 (no smoothing).
  BleuScore disjoint = corpus_bleu({"w x y z"}, {"a b c d"});
  CHECK(disjoint.score == 0.0);
  CHECK(disjoint.precisions[0] == 0.0);
  CHECK(disjoint.precisions[3] == 0.0);
  CHECK(disjoint.totals[0] == 4);
}

TEST_CASE("corpus_bleu on a hand-counted two-sentence corpus") {
  // Sentence 1: hyp "the cat sat on the mat" / ref "the cat is on the mat" (6 / 6 tokens)
  //   1-grams: the x2, cat, on, mat match; sat not        -> 5 of 6
  //   2-grams: "the cat", "on the", "the mat" match        -> 3 of 5
  //   3-grams: "on the mat" matches                        -> 1 of 4
  //   4-grams: none of "the cat sat on", "cat sat on the", "sat on the mat" -> 0 of 3
  // Sentence 2: hyp "a dog ran ." / ref "the dog ran away ." (4 / 5 tokens after 13a)
  //   1-grams: dog, ran, . -> 3 of 4;  2-grams: "dog ran" -> 1 of 3;
  //   3-grams: 0 of 2;  4-grams: 0 of 1
  // Corpus: matches 8/10, 4/8, 1/6, 0/4; hyp_len 10, ref_len 11.
  // Precisions: 80, 50, 100/6 = 16.67, and (exp smoothing, first order
  // without a match) 100 / (2 * 4) = 12.5.
  // BP = exp(1 - 11/10) = 0.904837...
  // BLEU = BP * (80 * 50 * 16.667 * 12.5)^(1/4) = 0.904837 * 30.2138 = 27.3385
  BleuScore bleu =
      corpus_bleu({"the cat sat on the mat", "a dog ran."}, {"the cat is on the mat", "the dog ran away."});
  CHECK(bleu.matches[0] == 8);
  CHECK(bleu.matches[3] == 0);
  CHECK(bleu.totals[1] == 8);
  CHECK(bleu.precisions[2] == doctest::Approx(100.0 / 6).epsilon(1e-12));
  CHECK(bleu.precisions[3] == 12.5);
  CHECK(bleu.brevity_penalty == doctest::Approx(std::exp(-0.1)).epsilon(1e-12));
  double expected = std::exp(-0.1) * std::pow(80.0 * 50.0 * (100.0 / 6) * 12.5, 0.25);
  CHECK(std::abs(bleu.score - expected) < 1e-9);
  CHECK(std::abs(bleu.score - 27.338535134616688) < 1e-9);
  CHECK(bleu.to_string() == "BLEU = 27.34 80.0/50.0/16.7/12.5 (BP = 0.905 ratio = 0.909 hyp_len = 10 ref_len = 11)");
}

TEST_CASE("corpus_bleu smoothing halves again for each further order without a match") {
  // hyp "a b c d e" / ref "a x b y c": 1-grams a, b, c match (3 of 5); no
  // 2-, 3- or 4-gram matches, so precisions 100/(2*4), 100/(4*3), 100/(8*2).
  BleuScore bleu = corpus_bleu({"a b c d e"}, {"a x b y c"});
  CHECK(bleu.precisions[0] == 60.0);
  CHECK(bleu.precisions[1] == 12.5);
  CHECK(bleu.precisions[2] == doctest::Approx(100.0 / 12).epsilon(1e-12));
  CHECK(bleu.precisions[3] == 6.25);
  double expected = std::pow(60.0 * 12.5 * (100.0 / 12) * 6.25, 0.25);  // BP = 1
  CHECK(std::abs(bleu.score - expected) < 1e-9);
}

TEST_CASE("corpus_bleu brevity penalty, clipping and too-short hypotheses") {
  // 5 of the reference's 6 tokens, all n-grams match: BLEU = 100 * exp(1 - 6/5).
  BleuScore short_hyp = corpus_bleu({"the cat sat on the"}, {"the cat sat on the mat"});
  CHECK(short_hyp.precisions[3] == 100.0);
  CHECK(std::abs(short_hyp.score - 100 * std::exp(-0.2)) < 1e-9);
  CHECK(short_hyp.ratio == doctest::Approx(5.0 / 6));
  // Longer than the reference: no penalty.
  CHECK(corpus_bleu({"the cat sat on the mat"}, {"the cat sat on the"}).brevity_penalty == 1.0);
  // A repeated word matches only as often as the reference has it.
  CHECK(corpus_bleu({"the the the the"}, {"the cat"}).precisions[0] == 25.0);
  // No hypothesis has 3-grams: sacreBLEU stops at that order, leaving the
  // precision 0, so BLEU is 0 even for an exact match.
  BleuScore tiny = corpus_bleu({"the cat"}, {"the cat"});
  CHECK(tiny.precisions[1] == 100.0);
  CHECK(tiny.score == 0.0);
  // An empty hypothesis: BP 0, score 0.
  CHECK(corpus_bleu({""}, {"a b"}).score == 0.0);
}

TEST_CASE("corpus_bleu rejects an empty corpus, size mismatches and empty references") {
  CHECK_THROWS_HEADROOM(corpus_bleu({}, {}), "the corpus is empty");
  CHECK_THROWS_HEADROOM(corpus_bleu({"a", "b"}, {"a"}), "2 hypotheses but 1 references");
  CHECK_THROWS_HEADROOM(corpus_bleu({"a", "b"}, {"a", ""}), "reference 1 is empty");
}
