// compare on tiny data, through the built binary: its outer progress, the
// equal-time columns and plot, mae-equal-updates' longer run, and an unknown
// method refused before anything trains.
#ifdef HEADROOM_EXAMPLES_BIN_DIR

#include <sys/wait.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "helpers.h"

using headroom::testing::TempDir;

namespace {

std::string file_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

size_t occurrences(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

struct Finished {
  int status;
  std::string out, err;
  double seconds;
};

// compare run in `dir` on a 200-line text with a tiny model, plus `args`.
Finished run_compare(const TempDir& dir, const std::string& args) {
  std::string text;
  for (int i = 0; i < 200; ++i) text += "line " + std::to_string(i) + " of a small text to train on\n";
  dir.write("text.txt", text);
  const std::string command = "cd '" + dir.path.string() +
                              "' && timeout 120 '" HEADROOM_EXAMPLES_BIN_DIR
                              "/compare' --data text.txt --dim 16 --heads 4 --layers 1 --ffn 32 --context 16 "
                              "--batch 2 --eval-tokens 64 --warmup 1 --threads 1 --out out " +
                              args + " > stdout.txt 2> stderr.txt";
  const auto start = std::chrono::steady_clock::now();
  const int raw = std::system(command.c_str());
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return {WIFEXITED(raw) ? WEXITSTATUS(raw) : -1, file_text(dir.file("stdout.txt")), file_text(dir.file("stderr.txt")),
          seconds};
}

}  // namespace

TEST_CASE(
    "compare: outer progress per run, equal-time columns and curves, mae-equal-updates gets as many expert updates as "
    "mha") {
  TempDir dir("compare_tiny");
  const Finished run = run_compare(dir, "--methods mha,mae-equal-updates --seeds 2 --steps 4 --bcd-f 2 --bcd-g 2");
  CAPTURE(run.out);
  CAPTURE(run.err);
  REQUIRE(run.status == 0);
  for (const char* line :
       {"== run 1 of 4: mha, seed 1, 4 steps | elapsed 0s | ETA after the first run",
        "== run 2 of 4: mha, seed 2, 4 steps | elapsed ", "== run 3 of 4: mae-equal-updates, seed 1, 6 steps",
        "== run 4 of 4: mae-equal-updates, seed 2, 6 steps"})
    CHECK(run.out.find(line) != std::string::npos);
  CHECK(occurrences(run.out, "| ETA ") == 4);
  // 4 steps of alternating F and G blocks of 2 give 2 expert updates; 6 steps give MHA's 4.
  const std::string log = file_text(dir.file("out/mae-equal-updates-seed1/log.jsonl"));
  CHECK(occurrences(log, "\"type\":\"train\"") == 6);
  CHECK(occurrences(log, "\"block\":\"F\"") == 4);
  CHECK(occurrences(log, "\"elapsed_s\":") == occurrences(log, "\"type\":"));
  const std::string table = file_text(dir.file("out/table.md"));
  CHECK(table.find("| valid loss at ") != std::string::npos);
  CHECK(table.find("| time to mha's valid loss ") != std::string::npos);
  CHECK(table.find("| steps ") != std::string::npos);
  CHECK(table.find("| mae-equal-updates ") != std::string::npos);
  CHECK(std::filesystem::is_regular_file(dir.file("out/curves.png")));
  CHECK(std::filesystem::is_regular_file(dir.file("out/curves_time.png")));
}

TEST_CASE("compare: an unknown method is refused at once, naming the known ones, before any run starts") {
  TempDir dir("compare_unknown");
  const Finished run = run_compare(dir, "--methods mha,moh75,dense");
  CAPTURE(run.err);
  CHECK(run.status == 2);
  CHECK(run.err.find("unknown method 'dense' in --methods (known: mha, moa, moh75, moh50, mae, mae-equal-updates)") !=
        std::string::npos);
  CHECK(run.out.find("== run") == std::string::npos);
  CHECK(!std::filesystem::exists(dir.file("out")));
  CHECK(run.seconds < 1.0);
}

#endif  // HEADROOM_EXAMPLES_BIN_DIR
