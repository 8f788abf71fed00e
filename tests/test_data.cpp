// Data loaders of the training binaries (examples/common): IDX files, image
// folders, text files, gettext catalogs and TSV sentence pairs, each read from
// small files the tests write, whole and corrupted.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "headroom/core/image.h"
#include "headroom/examples/common/idx.h"
#include "headroom/examples/common/image_folder.h"
#include "headroom/examples/common/parallel_data.h"
#include "headroom/examples/common/progress.h"
#include "headroom/examples/common/text_data.h"
#include "helpers.h"

using namespace headroom;
using namespace headroom::examples;
namespace fs = std::filesystem;
using namespace std::string_literals;

using headroom::testing::TempDir;

namespace {

std::string bytes_of(const std::vector<int>& values) { return std::string(values.begin(), values.end()); }

// An IDX header: 00 00 08 ndim, then big-endian u32 sizes.
std::string idx_header(const std::vector<uint32_t>& shape) {
  std::string header = bytes_of({0, 0, 0x08, static_cast<int>(shape.size())});
  for (uint32_t size : shape)
    for (int shift : {24, 16, 8, 0}) header += static_cast<char>((size >> shift) & 0xFF);
  return header;
}

// A GNU .mo catalog holding `entries` (msgid, msgstr) in the given byte order.
std::string make_mo(const SentencePairs& entries, bool big_endian) {
  auto u32 = [&](uint32_t value) {
    std::string out(4, '\0');
    for (int k = 0; k < 4; ++k) out[big_endian ? 3 - k : k] = static_cast<char>((value >> (8 * k)) & 0xFF);
    return out;
  };
  auto n = static_cast<uint32_t>(entries.size());
  uint32_t msgid_table = 28, msgstr_table = msgid_table + 8 * n, strings = msgstr_table + 8 * n;
  std::string ids, strs, text;
  for (const auto& [id, str] : entries) {
    ids += u32(static_cast<uint32_t>(id.size())) + u32(strings + static_cast<uint32_t>(text.size()));
    text += id + '\0';
  }
  for (const auto& [id, str] : entries) {
    strs += u32(static_cast<uint32_t>(str.size())) + u32(strings + static_cast<uint32_t>(text.size()));
    text += str + '\0';
  }
  return u32(0x950412de) + u32(0) + u32(n) + u32(msgid_table) + u32(msgstr_table) + u32(0) + u32(0) + ids + strs + text;
}

const SentencePairs kCatalog = {
    {"", "Content-Type: text/plain; charset=UTF-8\n"},  // header: skipped
    {"File not found", "Datei nicht gefunden"},
    {"%d file\0%d files"s, "%d Datei\0%d Dateien"s},  // plural: singular forms
    {"menu\x04Open",
     "\xc3\x96"
     "ffnen"},  // context stripped; "Öffnen"
};

}  // namespace

// ---- IDX -------------------------------------------------------------------------

TEST_CASE("data: read_idx reads the shape and bytes of a hand-made IDX file") {
  TempDir dir("idx");
  std::string path = dir.write("a.idx", idx_header({2, 3}) + bytes_of({1, 2, 3, 4, 5, 255}));
  IdxArray array = read_idx(path);
  CHECK(array.shape == std::vector<int64_t>{2, 3});
  CHECK(array.data == std::vector<uint8_t>{1, 2, 3, 4, 5, 255});
}

TEST_CASE("data: read_idx rejects bad magic, other types, truncated files and trailing bytes") {
  TempDir dir("idx_bad");
  CHECK_THROWS_HEADROOM(read_idx(dir.write("gz.idx", bytes_of({0x1f, 0x8b, 8, 0, 0, 0}))), "gz.idx: bad magic");
  CHECK_THROWS_HEADROOM(read_idx(dir.write("five.idx", bytes_of({0, 0, 8, 5}))), "bad magic");
  CHECK_THROWS_HEADROOM(read_idx(dir.write("int.idx", bytes_of({0, 0, 0x0C, 1, 0, 0, 0, 0}))),
                        "unsupported element type 0xc, expected 0x08");
  CHECK_THROWS_HEADROOM(read_idx(dir.write("short.idx", bytes_of({0, 0, 8, 2, 0, 0, 0, 2}))),
                        "truncated header, expected 12 bytes");
  CHECK_THROWS_HEADROOM(read_idx(dir.write("trunc.idx", idx_header({2, 3}) + bytes_of({1, 2, 3, 4, 5}))),
                        "trunc.idx: truncated, the header's shape (2,3) needs more than the 5 bytes");
  CHECK_THROWS_HEADROOM(read_idx(dir.write("huge.idx", idx_header({0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 2}))),
                        "truncated");
  CHECK_THROWS_HEADROOM(read_idx(dir.write("long.idx", idx_header({2}) + bytes_of({1, 2, 3}))),
                        "long.idx: 1 trailing bytes after the (2) elements");
  CHECK_THROWS_HEADROOM(read_idx((dir.path / "missing.idx").string()), "cannot open");
}

TEST_CASE("data: load_idx_dataset scales pixels to [0, 1] as [N, 1, H, W] and checks labels") {
  TempDir dir("idx_dataset");
  std::string images = dir.write("images", idx_header({2, 1, 2}) + bytes_of({0, 255, 51, 102}));
  std::string labels = dir.write("labels", idx_header({2}) + bytes_of({1, 0}));
  ImageDataset data = load_idx_dataset(images, labels, {"a", "b"});
  CHECK(data.images.shape() == Shape{2, 1, 1, 2});
  CHECK_CLOSE(data.images.to_vector<double>(), (std::vector<double>{0, 1, 0.2, 0.4}), 1e-6, 0);
  CHECK(data.labels.dtype() == DType::i32);
  CHECK(data.labels.to_vector<int>() == std::vector<int>{1, 0});
  CHECK(data.class_names == std::vector<std::string>{"a", "b"});

  std::string three = dir.write("three", idx_header({3}) + bytes_of({0, 0, 0}));
  CHECK_THROWS_HEADROOM(load_idx_dataset(images, three, {"a", "b"}), "holds 2 images but");
  CHECK_THROWS_HEADROOM(load_idx_dataset(images, labels, {"a"}), "label 1 of example 0 is not below the 1 classes");
  // Empty sets and empty images are refused here, not found later as a division by zero.
  std::string none = dir.write("none", idx_header({0, 28, 28}));
  std::string no_labels = dir.write("no_labels", idx_header({0}));
  CHECK_THROWS_HEADROOM(load_idx_dataset(none, no_labels, {"a"}), "none: shape (0,28,28) holds no images");
  std::string flat = dir.write("flat", idx_header({2, 0, 5}));
  CHECK_THROWS_HEADROOM(load_idx_dataset(flat, labels, {"a", "b"}),
                        "flat: shape (2,0,5) holds no images or empty ones");
  CHECK(fashion_mnist_classes().size() == 10);
  CHECK(fashion_mnist_classes()[9] == "Ankle boot");
}

TEST_CASE("data: split_off moves a seeded, reproducible fraction out and keeps the rest in order") {
  const int n = 20;
  std::vector<int32_t> ids(n);
  for (int i = 0; i < n; ++i) ids[i] = i;
  auto make = [&] {
    Tensor images = Tensor::arange(n).reshape({n, 1, 1, 1});  // image i holds the value i
    return ImageDataset{images, Tensor::from_vector(ids), {"x"}};
  };
  ImageDataset train = make();
  ImageDataset valid = split_off(train, 0.25, 7);
  CHECK(valid.labels.numel() == 5);
  CHECK(train.labels.numel() == 15);
  std::vector<int> held = valid.labels.to_vector<int>(), kept = train.labels.to_vector<int>();
  CHECK(std::is_sorted(held.begin(), held.end()));
  CHECK(std::is_sorted(kept.begin(), kept.end()));
  std::vector<int> all(held);
  all.insert(all.end(), kept.begin(), kept.end());
  std::sort(all.begin(), all.end());
  CHECK(all == std::vector<int>(ids.begin(), ids.end()));      // a partition
  CHECK(train.images.reshape({-1}).to_vector<int>() == kept);  // images follow labels
  ImageDataset again = make();
  CHECK(split_off(again, 0.25, 7).labels.to_vector<int>() == held);  // same seed, same split
  ImageDataset other = make();
  CHECK(split_off(other, 0.25, 8).labels.to_vector<int>() != held);  // another seed differs
  CHECK_THROWS_HEADROOM(split_off(train, 0.01, 1), "leaves an empty part");
  CHECK_THROWS_HEADROOM(split_off(train, 1.0, 1), "fraction must be in (0, 1)");
}

// ---- what every loader refuses ------------------------------------------------------------

TEST_CASE("data: every loader refuses a directory, a FIFO, a device and a missing path, naming it") {
  TempDir dir("not_files");
  const std::string folder = dir.file("folder"), fifo = dir.file("fifo"), missing = dir.file("missing");
  fs::create_directories(folder);
  REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
  struct Loader {
    const char* name;
    std::function<void(const std::string&)> load;
  };
  const Loader loaders[] = {{"read_text_file", [](const std::string& p) { read_text_file(p); }},
                            {"read_idx", [](const std::string& p) { read_idx(p); }},
                            {"read_tsv", [](const std::string& p) { read_tsv(p); }},
                            {"read_mo", [](const std::string& p) { read_mo(p); }},
                            {"jsonl", [](const std::string& p) { read_jsonl_numbers(p, "eval"); }}};
  const std::pair<std::string, std::string> paths[] = {{folder, "is a directory"},
                                                       {fifo, "is a FIFO"},
                                                       {"/dev/zero", "is a character device"},
                                                       {missing, "cannot open"}};
  for (const Loader& loader : loaders)
    for (const auto& path_reason : paths) {
      const std::string& path = path_reason.first;  // named: Clang 14 lambdas cannot capture structured bindings
      const std::string& reason = path_reason.second;
      CAPTURE(loader.name);
      CAPTURE(path);
      CHECK_THROWS_HEADROOM(loader.load(path), (std::string("[") + loader.name + "]").c_str());
      CHECK_THROWS_HEADROOM(loader.load(path), path.c_str());
      CHECK_THROWS_HEADROOM(loader.load(path), reason.c_str());
    }
}

// ---- image folders ---------------------------------------------------------------------

TEST_CASE("data: load_image_folder reads classes in sorted order and resizes mixed sizes") {
  TempDir dir("folder");
  Generator gen(3);
  fs::create_directories(dir.path / "cat");
  fs::create_directories(dir.path / "dog");
  save_png((dir.path / "dog" / "b.png").string(), Tensor::full({4, 6, 3}, 0.6));
  save_png((dir.path / "cat" / "a.PNG").string(), Tensor::full({2, 2, 1}, 1.0));  // grey, upper-case extension
  save_png((dir.path / "cat" / "c.png").string(), Tensor::rand({5, 3, 3}, gen));
  dir.write("cat/notes.txt", "not an image");  // skipped
  ImageDataset data = load_image_folder(dir.path.string(), 4, 3);
  CHECK(data.class_names == std::vector<std::string>{"cat", "dog"});
  CHECK(data.labels.to_vector<int>() == std::vector<int>{0, 0, 1});
  CHECK(data.images.shape() == Shape{3, 3, 4, 4});
  CHECK_CLOSE(data.images.select(0, 0), Tensor::ones({3, 4, 4}), 1e-6);  // grey white expanded to RGB
  CHECK_CLOSE(data.images.select(0, 2), Tensor::full({3, 4, 4}, 153 / 255.0), 1e-6);
  Tensor c = resize_image(load_image((dir.path / "cat" / "c.png").string(), 3), 4, 4).permute({2, 0, 1});
  CHECK_CLOSE(data.images.select(0, 1), c, 1e-6);  // [C, H, W] of the resized image
  CHECK(load_image_folder(dir.path.string(), 2, 1).images.shape() == Shape{3, 1, 2, 2});
}

// What `body` prints on stdout.
std::string stdout_of(const std::function<void()>& body) {
  TempDir dir("stdout");
  const std::string path = dir.file("out.txt");
  std::fflush(stdout);
  const int saved = dup(fileno(stdout));
  REQUIRE(std::freopen(path.c_str(), "w", stdout) != nullptr);
  body();
  std::fflush(stdout);
  dup2(saved, fileno(stdout));
  close(saved);
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST_CASE("data: load_image_folder skips other entries unopened, a FIFO named .png too, and says how many") {
  TempDir dir("folder_skips");
  const std::string root = dir.path.string();
  fs::create_directories(dir.path / "cat");
  save_png((dir.path / "cat" / "a.png").string(), Tensor::zeros({2, 2}));
  REQUIRE(mkfifo((dir.path / "cat" / "fifo.png").c_str(), 0600) == 0);  // opening it would block
  dir.write("cat/notes.txt", "not an image");
  dir.write("README", "beside the class folders");
  ImageDataset data;
  const std::string out = stdout_of([&] { data = load_image_folder(root, 2, 1); });
  CHECK(data.images.size(0) == 1);
  CHECK(count_image_files(root) == 1);  // what the memory estimate counts without opening them
  CHECK(count_image_files(root + "/nope") == 0);
  CHECK(out == "note: " + root + ": skipped 3 other entries, e.g. " + root +
                   "/README (neither class folders nor regular .png, .jpg, .jpeg or .bmp files in one)\n");
  fs::remove(dir.path / "cat" / "a.png");
  CHECK_THROWS_HEADROOM(load_image_folder(root, 2, 1), ("cat: class folder without images (regular .png, .jpg, "
                                                        ".jpeg or .bmp files), only 2 other entries, e.g. " +
                                                        root + "/cat/fifo.png")
                                                           .c_str());
}

TEST_CASE("data: load_image_folder errors name the folder or file") {
  TempDir dir("folder_bad");
  std::string root = dir.path.string();
  CHECK_THROWS_HEADROOM(load_image_folder(root + "/nope", 4, 3), "nope: no such folder");
  CHECK_THROWS_HEADROOM(load_image_folder(root, 4, 3), "no class subfolders");
  fs::create_directories(dir.path / "empty");
  CHECK_THROWS_HEADROOM(load_image_folder(root, 4, 3), "empty: class folder without images");
  save_png((dir.path / "empty" / "ok.png").string(), Tensor::zeros({2, 2}));
  dir.write("empty/broken.png", "not a png at all");
  CHECK_THROWS_HEADROOM(load_image_folder(root, 4, 3), "broken.png");
  CHECK_THROWS_HEADROOM(load_image_folder(root, 4, 5), "channels must be 1..4, got 5");
}

// ---- text --------------------------------------------------------------------------------

TEST_CASE("data: read_text_file accepts UTF-8 and names the offset of invalid bytes") {
  TempDir dir("text");
  std::string good =
      "Gr\xc3\xbc\xc3\x9f"
      "e \xe2\x82\xac \xf0\x9f\x98\x80\n";  // Grüße € 😀
  CHECK(read_text_file(dir.write("good.txt", good)) == good);
  CHECK_THROWS_HEADROOM(read_text_file(dir.write("empty.txt", "")), "empty.txt: the file is empty");
  CHECK_THROWS_HEADROOM(read_text_file((dir.path / "none.txt").string()), "cannot open");
  CHECK_THROWS_HEADROOM(read_text_file(dir.write("latin1.txt",
                                                 "abc\xfc"
                                                 "d")),
                        "invalid UTF-8 at byte offset 3");
  CHECK(invalid_utf8_offset("ab\xc3") == 2);                            // truncated sequence
  CHECK(invalid_utf8_offset("\xc0\xaf") == 0);                          // overlong '/'
  CHECK(invalid_utf8_offset("x\xe0\x80\x80") == 1);                     // overlong 3-byte
  CHECK(invalid_utf8_offset("xy\xed\xa0\x80") == 2);                    // surrogate U+D800
  CHECK(invalid_utf8_offset("\xf4\x90\x80\x80") == 0);                  // past U+10FFFF
  CHECK(invalid_utf8_offset("a\xe2\x82z") == 1);                        // bad continuation
  CHECK(invalid_utf8_offset("\xf4\x8f\xbf\xbf") == std::string::npos);  // U+10FFFF itself
}

TEST_CASE("data: split_text cuts at a line boundary near the fraction") {
  std::string text = "aaaa\nbbbb\ncccc\ndddd\n";  // 20 bytes, lines start at 0, 5, 10, 15
  TextSplit split = split_text(text, 0.5);        // target byte 10 starts a line
  CHECK(split.train == "aaaa\nbbbb\n");
  CHECK(split.valid == "cccc\ndddd\n");
  CHECK(split_text(text, 0.4).valid == "dddd\n");   // target byte 12: next line start 15
  CHECK(split_text(text, 0.01).valid == "dddd\n");  // no line starts after byte 19: the last line
  CHECK(split_text("ab\ncd", 0.9).valid == "cd");   // target byte 0: the first line start after it
  CHECK_THROWS_HEADROOM(split_text("one line\n", 0.5), "has a single line");
  CHECK_THROWS_HEADROOM(split_text(text, 0), "valid_fraction must be in (0, 1)");
}

// ---- sentence pairs ------------------------------------------------------------------------

TEST_CASE("data: read_mo reads both byte orders, skips the header, takes singulars and drops contexts") {
  TempDir dir("mo");
  const SentencePairs expected = {{"File not found", "Datei nicht gefunden"},
                                  {"%d file", "%d Datei"},
                                  {"Open",
                                   "\xc3\x96"
                                   "ffnen"}};
  for (bool big_endian : {false, true}) {
    CAPTURE(big_endian);
    CHECK(read_mo(dir.write("de.mo", make_mo(kCatalog, big_endian))) == expected);
  }
  dir.write("b/pkg/z.mo", make_mo({{"Yes", "Ja"}}, false));
  dir.write("a/x.mo", make_mo({{"No", "Nein"}}, true));
  dir.write("a/readme", "skipped");
  CHECK(read_mo_dir(dir.path.string()) == SentencePairs{{"No", "Nein"},
                                                        {"Yes", "Ja"},
                                                        {"File not found", "Datei nicht gefunden"},
                                                        {"%d file", "%d Datei"},
                                                        {"Open",
                                                         "\xc3\x96"
                                                         "ffnen"}});  // a/x.mo, b/pkg/z.mo, de.mo
  CHECK_THROWS_HEADROOM(read_mo_dir((dir.path / "a" / "readme").string()), "no such folder");
}

TEST_CASE("data: read_mo rejects bad magic, truncated tables and strings past the end") {
  TempDir dir("mo_bad");
  std::string good = make_mo({{"Yes", "Ja"}, {"No", "Nein"}}, false);
  std::string bad_magic = good;
  bad_magic[0] = 'X';
  CHECK_THROWS_HEADROOM(read_mo(dir.write("magic.mo", bad_magic)), "magic.mo: bad magic");
  CHECK_THROWS_HEADROOM(read_mo(dir.write("tiny.mo", good.substr(0, 10))), "truncated header");
  // The tables end at 28 + 2 * 16 = 60 bytes.
  CHECK_THROWS_HEADROOM(read_mo(dir.write("table.mo", good.substr(0, 50))),
                        "table.mo: truncated string table, 2 entries at offset 44");
  CHECK_THROWS_HEADROOM(read_mo(dir.write("string.mo", good.substr(0, good.size() - 4))),
                        "string.mo: msgstr 1 (4 bytes at offset");
  CHECK_THROWS_HEADROOM(read_mo(dir.write("string.mo", good.substr(0, good.size() - 4))), "runs past the end");
  std::string revision = good;
  revision[6] = 2;  // major revision 2
  CHECK_THROWS_HEADROOM(read_mo(dir.write("rev.mo", revision)), "major revision 2");
  CHECK_THROWS_HEADROOM(read_mo(dir.write("latin1.mo", make_mo({{"Yes", "J\xe4"}}, false))),
                        "msgstr 0 is not valid UTF-8 at byte 1");
  CHECK_THROWS_HEADROOM(read_mo_dir(dir.path.string() + "/nothing"), "no such folder");
  fs::create_directories(dir.path / "nothing");
  CHECK_THROWS_HEADROOM(read_mo_dir((dir.path / "nothing").string()), "no .mo files below it");
}

TEST_CASE("data: TSV round trip, line numbers in errors") {
  TempDir dir("tsv");
  SentencePairs pairs = {{"Hello", "Hallo"}, {"a b", "c\xc3\xa4 d"}};
  std::string path = (dir.path / "pairs.tsv").string();
  write_tsv(path, pairs);
  CHECK(read_tsv(path) == pairs);
  CHECK(read_tsv(dir.write("crlf.tsv", "x\ty\r\n\n\nu\tv")) == SentencePairs{{"x", "y"}, {"u", "v"}});
  CHECK_THROWS_HEADROOM(read_tsv(dir.write("notab.tsv", "x\ty\n\nno tab here\n")),
                        "notab.tsv:3: expected source<TAB>target (exactly one tab), got no tab");
  CHECK_THROWS_HEADROOM(read_tsv(dir.write("tabs.tsv", "a\tb\tc\n")), "tabs.tsv:1: expected");
  // An empty side or a NUL byte is refused like any malformed line, not read as a pair.
  CHECK_THROWS_HEADROOM(read_tsv(dir.write("nosource.tsv", "x\ty\n\ty\n")),
                        "nosource.tsv:2: expected source<TAB>target, got an empty source");
  CHECK_THROWS_HEADROOM(read_tsv(dir.write("notarget.tsv", "x\t\r\n")),
                        "notarget.tsv:1: expected source<TAB>target, got an empty target");
  CHECK_THROWS_HEADROOM(read_tsv(dir.write("nul.tsv", std::string("x\ty\0z\n", 6))),
                        "nul.tsv:1: a NUL byte at column 4");
  // As the .mo reader: invalid UTF-8 is refused, naming the line and the offset.
  CHECK_THROWS_HEADROOM(read_tsv(dir.write("latin1.tsv",
                                           "x\ty\nGr\xfc\xdf"
                                           "e\tgreetings\n")),
                        "latin1.tsv:2: invalid UTF-8 at byte offset 6");
  CHECK_THROWS_HEADROOM(write_tsv(path, {{"a\tb", "c"}}), "pair 0 holds a tab or a line break");
  CHECK(read_tsv(path) == pairs);  // the failed write left the file as it was
}

TEST_CASE("data: clean_pairs drops useless pairs and repeats, keeping the first in order") {
  SentencePairs pairs = {
      {"Save", "Speichern"},
      {"", "leer"},
      {"empty", ""},
      {"OK", "OK"},
      {"two\nlines", "zwei\nZeilen"},
      {"a\tb", "c"},
      {"Save", "Speichern"},
      {"Save", "Sichern"},
      {"long enough?", "viel zu lang"},
      {"Quit", "Beenden"},
  };
  CHECK(clean_pairs(pairs, 11) == SentencePairs{{"Save", "Speichern"}, {"Save", "Sichern"}, {"Quit", "Beenden"}});
  CHECK(clean_pairs(pairs, 12).size() == 4);  // "long enough?" (12 bytes) fits
}

TEST_CASE("data: split_pairs is deterministic, order-independent and keeps a source in one part") {
  SentencePairs pairs;
  for (int i = 0; i < 200; ++i) pairs.emplace_back("source " + std::to_string(i), "Quelle " + std::to_string(i));
  pairs.emplace_back("source 7", "zweite Quelle 7");  // a source with two targets
  ParallelSplit split = split_pairs(pairs, 20, 10);
  CHECK(split.test.size() == 10);
  CHECK(split.valid.size() == 20);
  CHECK(split.train.size() + split.valid.size() + split.test.size() == pairs.size());
  std::map<std::string, const SentencePairs*> part_of;
  for (const SentencePairs* part : {&split.train, &split.valid, &split.test})
    for (const auto& pair : *part) {
      auto [it, fresh] = part_of.emplace(pair.first, part);
      CHECK(it->second == part);  // the same source never lands in two parts
    }
  for (const SentencePairs* part : {&split.train, &split.valid, &split.test}) {
    SentencePairs in_input_order;
    for (const auto& pair : pairs)
      if (part_of.at(pair.first) == part) in_input_order.push_back(pair);
    CHECK(*part == in_input_order);
  }
  SentencePairs reversed(pairs.rbegin(), pairs.rend());
  ParallelSplit again = split_pairs(reversed, 20, 10);
  auto sorted = [](SentencePairs p) {
    std::sort(p.begin(), p.end());
    return p;
  };
  CHECK(sorted(again.test) == sorted(split.test));
  CHECK(sorted(again.valid) == sorted(split.valid));
  CHECK_THROWS_HEADROOM(split_pairs(pairs, 200, 2), "exceed the 201 pairs");
}
