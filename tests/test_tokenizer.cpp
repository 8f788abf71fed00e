// Byte-level tokenizer with BPE merges (examples/common/tokenizer.h).
#include "headroom/examples/common/tokenizer.h"

#include <algorithm>
#include <string>
#include <vector>

#include "helpers.h"

using namespace headroom;
using namespace headroom::examples;

namespace {

std::string all_bytes() {
  std::string bytes;
  for (int b = 0; b < 256; ++b) bytes += static_cast<char>(b);
  return bytes;
}

// Strings a tokenizer must round-trip: ASCII, German UTF-8, every byte value
// (\0 included), invalid UTF-8, whitespace runs, the empty string.
std::vector<std::string> round_trip_cases() {
  return {"Hello, world! 42 times...",
          "Grüße aus Köln: Äpfel, Öl und Übermaß kosten 3,50 €.",
          all_bytes(),
          std::string("nul\0inside", 10),
          "\xc3\x28 \xff\xfe truncated \xe2\x82",
          "  two  spaces\n\n\ttab   \r\n trailing ",
          ""};
}

// A small English/German corpus whose words repeat.
std::vector<std::string> corpus() {
  std::vector<std::string> texts;
  for (int i = 0; i < 20; ++i) {
    texts.push_back("The house is small. The houses are small, and the garden is green.");
    texts.push_back("Das Haus ist klein. Die Häuser sind klein, und der Garten ist grün.");
  }
  return texts;
}

}  // namespace

TEST_CASE("Tokenizer without merges maps byte b to id b + 3 and round-trips any bytes") {
  Tokenizer bytes;
  CHECK(bytes.vocab_size() == 259);
  CHECK(bytes.encode("Az\n") == std::vector<int32_t>{'A' + 3, 'z' + 3, '\n' + 3});
  CHECK(bytes.encode(std::string(1, '\0')) == std::vector<int32_t>{3});
  CHECK(bytes.encode("\xff") == std::vector<int32_t>{258});
  for (const std::string& text : round_trip_cases()) CHECK(bytes.decode(bytes.encode(text)) == text);
  CHECK(Tokenizer::learn(corpus(), 0).to_text() == bytes.to_text());
}

TEST_CASE("Tokenizer::learn round-trips any bytes, including bytes absent from training") {
  Tokenizer bpe = Tokenizer::learn(corpus(), 200);
  CHECK(bpe.merge_count() > 20);
  for (const std::string& text : round_trip_cases()) CHECK(bpe.decode(bpe.encode(text)) == text);
  CHECK(bpe.decode(bpe.encode(corpus()[1])) == corpus()[1]);
  // decode skips the special ids.
  std::vector<int32_t> ids = bpe.encode("Haus");
  ids.insert(ids.begin(), Tokenizer::bos());
  ids.push_back(Tokenizer::eos());
  ids.push_back(Tokenizer::pad());
  CHECK(bpe.decode(ids) == "Haus");
}

TEST_CASE("Tokenizer::learn on 'aaab aab ab' makes the hand-counted merges") {
  // Pieces: "aaab", " aab", " ab" (a = id 100, b = 101, space = 35).
  // Pair counts: (a,a) 2+1 = 3, (a,b) 1+1+1 = 3, (' ',a) 2: the tie goes to
  // the smaller pair (a,a) -> 259.  Then "aaab" = [aa,a,b], " aab" = [' ',aa,b],
  // " ab" = [' ',a,b]: (a,b) occurs twice -> 260; every other pair once, so
  // learning stops there even though 10 merges were allowed.
  Tokenizer bpe = Tokenizer::learn({"aaab aab ab"}, 10);
  CHECK(bpe.to_text() == "headroom-bpe v1 2\n100 100\n100 101\n");
  CHECK(bpe.vocab_size() == 261);
  CHECK(bpe.encode("aaab") == std::vector<int32_t>{259, 260});
  CHECK(bpe.encode(" aab") == std::vector<int32_t>{35, 259, 101});
  CHECK(bpe.encode("aaab aab ab") == std::vector<int32_t>{259, 260, 35, 259, 101, 35, 260});
  // Merges apply by rank, left to right: "aaaa" -> [aa, aa], "aaa" -> [aa, a].
  CHECK(bpe.encode("aaaa") == std::vector<int32_t>{259, 259});
  CHECK(bpe.encode("aaa") == std::vector<int32_t>{259, 100});
  CHECK(bpe.describe_token(260) == "\"ab\"");
}

TEST_CASE("Tokenizer merges stay inside pieces: a space leads a word, punctuation and digits stand apart") {
  Tokenizer bpe = Tokenizer::learn({"ab.ab.ab. ab. ab12 ab12 x  y  z"}, 100);
  for (int64_t id = Tokenizer::kFirstMerge; id < bpe.vocab_size(); ++id) {
    std::string token = bpe.decode({static_cast<int32_t>(id)});
    bool letters = token.find_first_of("abxyz") != std::string::npos;
    CHECK_MESSAGE(!(letters && token.find_first_of(".12") != std::string::npos), token);
    CHECK_MESSAGE(token.find(' ', 1) == std::string::npos, token);  // spaces only lead
  }
  CHECK(bpe.encode(" ab").size() == 1);
}

TEST_CASE("Tokenizer merges reduce the token count of repetitive text") {
  Tokenizer bpe = Tokenizer::learn(corpus(), 100);
  std::string text = corpus()[0] + " " + corpus()[1];
  CHECK(bpe.encode(text).size() * 3 < text.size());
  CHECK(Tokenizer().encode(text).size() == text.size());
}

TEST_CASE("Tokenizer::learn is deterministic and independent of the texts' order") {
  std::vector<std::string> texts = corpus();
  std::string merges = Tokenizer::learn(texts, 150).to_text();
  CHECK(Tokenizer::learn(texts, 150).to_text() == merges);
  std::reverse(texts.begin(), texts.end());
  CHECK(Tokenizer::learn(texts, 150).to_text() == merges);
  // Fewer merges are a prefix of more.
  std::string fewer = Tokenizer::learn(texts, 50).to_text();
  std::string fewer_lines = fewer.substr(fewer.find('\n'));
  CHECK(merges.substr(merges.find('\n'), fewer_lines.size()) == fewer_lines);
}

TEST_CASE("Tokenizer to_text/from_text round trip gives identical encodings") {
  Tokenizer bpe = Tokenizer::learn(corpus(), 120);
  Tokenizer loaded = Tokenizer::from_text(bpe.to_text());
  CHECK(loaded.vocab_size() == bpe.vocab_size());
  CHECK(loaded.to_text() == bpe.to_text());
  for (const std::string& text : round_trip_cases()) CHECK(loaded.encode(text) == bpe.encode(text));
  for (const std::string& text : corpus()) CHECK(loaded.encode(text) == bpe.encode(text));
  CHECK(Tokenizer::from_text("headroom-bpe v1 0\n").vocab_size() == 259);
}

TEST_CASE("Tokenizer rejects bad ids, malformed text and a bad merge count") {
  Tokenizer bpe = Tokenizer::learn({"aaab aab ab"}, 10);
  CHECK_THROWS_HEADROOM(bpe.decode({100, 261}), "id 261 is outside the vocabulary [0, 261)");
  CHECK_THROWS_HEADROOM(bpe.decode({-1}), "id -1 is outside");
  CHECK_THROWS_HEADROOM(bpe.describe_token(999), "id 999 is outside");
  CHECK_THROWS_HEADROOM(Tokenizer::learn({"ab"}, -1), "merges must be in");
  CHECK_THROWS_HEADROOM(Tokenizer::from_text(""), "line 1: expected 'headroom-bpe v1 <merges>'");
  CHECK_THROWS_HEADROOM(Tokenizer::from_text("headroom-bpe v2 0\n"), "line 1: expected");
  CHECK_THROWS_HEADROOM(Tokenizer::from_text("headroom-bpe v1 x\n"),
                        "line 1: expected a merge count in [0, 2147483388], got 'x'");
  CHECK_THROWS_HEADROOM(Tokenizer::from_text("headroom-bpe v1 2\n100 100\n"), "announces 2 merges but 1 lines");
  CHECK_THROWS_HEADROOM(Tokenizer::from_text("headroom-bpe v1 1\n100\n"), "line 2: expected two ids");
  CHECK_THROWS_HEADROOM(Tokenizer::from_text("headroom-bpe v1 1\n100  101\n"), "line 2: expected two ids");
  CHECK_THROWS_HEADROOM(Tokenizer::from_text("headroom-bpe v1 1\n100 -5\n"),
                        "line 2: expected an id in [3, 258], got '-5'");
  CHECK_THROWS_HEADROOM(Tokenizer::from_text("headroom-bpe v1 1\n1 100\n"),
                        "line 2: expected an id in [3, 258], got '1'");
  CHECK_THROWS_HEADROOM(Tokenizer::from_text("headroom-bpe v1 1\n100 259\n"), "expected an id in [3, 258], got '259'");
  CHECK_THROWS_HEADROOM(Tokenizer::from_text("headroom-bpe v1 2\n100 101\n100 101\n"), "line 3: the pair 100 101");
  CHECK_THROWS_HEADROOM(Tokenizer::from_text("headroom-bpe v1 1\n100 101\n\n"), "announces 1 merges but 2 lines");
  // Numbers are whole decimal integers within their range, never wrapped or cut.
  CHECK_THROWS_HEADROOM(Tokenizer::from_text("headroom-bpe v1 2147483389\n"), "expected a merge count in");
  CHECK_THROWS_HEADROOM(Tokenizer::from_text("headroom-bpe v1 99999999999999999999\n"), "expected a merge count");
  CHECK_THROWS_HEADROOM(Tokenizer::from_text("headroom-bpe v1 +1\n100 101\n"), "expected a merge count");
  CHECK_THROWS_HEADROOM(Tokenizer::from_text("headroom-bpe v1 1\n4294967396 101\n"), "got '4294967396'");
}

TEST_CASE("Tokenizer::describe_token prints specials, escapes and UTF-8") {
  Tokenizer bpe = Tokenizer::learn({"über über über"}, 10);
  CHECK(bpe.describe_token(Tokenizer::pad()) == "<pad>");
  CHECK(bpe.describe_token(Tokenizer::bos()) == "<bos>");
  CHECK(bpe.describe_token(Tokenizer::eos()) == "<eos>");
  CHECK(bpe.describe_token('a' + 3) == "\"a\"");
  CHECK(bpe.describe_token('\n' + 3) == "\"\\n\"");
  CHECK(bpe.describe_token('"' + 3) == "\"\\\"\"");
  CHECK(bpe.describe_token(0 + 3) == "\"\\x00\"");
  CHECK(bpe.describe_token(0xc3 + 3) == "\"\\xc3\"");  // half of a UTF-8 character
  std::vector<int32_t> ids = bpe.encode(" über");
  REQUIRE(ids.size() == 1);
  CHECK(bpe.describe_token(ids[0]) == "\" über\"");
}
