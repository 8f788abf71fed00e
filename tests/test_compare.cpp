// compare on tiny data, through the built binary: its outer progress, the
// equal-time columns and plot, mae-equal-updates' longer run, table.md's
// numbers as the console prints them, and an unknown method refused before
// anything trains.
#ifdef HEADROOM_EXAMPLES_BIN_DIR

#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <vector>

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

// `text` without its leading and trailing spaces.
std::string trimmed(const std::string& text) {
  const size_t begin = text.find_first_not_of(' ');
  return begin == std::string::npos ? "" : text.substr(begin, text.find_last_not_of(' ') + 1 - begin);
}

// The trimmed cells of the Markdown table row whose first cell is `first`.
std::vector<std::string> table_cells(const std::string& table, const std::string& first) {
  std::istringstream lines(table);
  for (std::string line; std::getline(lines, line);) {
    if (line.empty() || line[0] != '|') continue;  // the text around the table
    std::vector<std::string> cells;
    std::istringstream parts(line.substr(1));
    for (std::string cell; std::getline(parts, cell, '|');) cells.push_back(trimmed(cell));
    if (!cells.empty() && cells[0] == first) return cells;
  }
  return {};
}

// Every match of `pattern` in `text`, each as its groups.
std::vector<std::smatch> matches(const std::string& text, const std::string& pattern) {
  const std::regex re(pattern);
  return {std::sregex_iterator(text.begin(), text.end(), re), std::sregex_iterator()};
}

struct Finished {
  int status;
  std::string out, err;
};

// compare run in `dir` on a 200-line text with a tiny model, plus `context` and `args`.
Finished run_compare(const TempDir& dir, const std::string& args, const std::string& context = "--context 16") {
  std::string text;
  for (int i = 0; i < 200; ++i) text += "line " + std::to_string(i) + " of a small text to train on\n";
  dir.write("text.txt", text);
  const std::string command = "cd '" + dir.path.string() +
                              "' && timeout 120 '" HEADROOM_EXAMPLES_BIN_DIR
                              "/compare' --data text.txt --dim 16 --heads 4 --layers 1 --ffn 32 --batch 2 "
                              "--eval-tokens 64 --threads 1 --out out " +
                              context + " " + args + " > stdout.txt 2> stderr.txt";
  const int raw = std::system(command.c_str());
  return {WIFEXITED(raw) ? WEXITSTATUS(raw) : -1, file_text(dir.file("stdout.txt")), file_text(dir.file("stderr.txt"))};
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
  CAPTURE(table);
  CHECK(table.find("| valid loss at ") != std::string::npos);
  CHECK(table.find("| time to mha's valid loss ") != std::string::npos);
  // Two seeds: the wall-clock columns are means with their spread, not marked as one run.
  CHECK(table.find("one run") == std::string::npos);
  CHECK(matches(table_cells(table, "mha")[9], R"(^\S+ ± \S+$)").size() == 1);  // tokens per second
  CHECK(table.find("| steps ") != std::string::npos);
  CHECK(table.find("| mae-equal-updates ") != std::string::npos);
  CHECK(std::filesystem::is_regular_file(dir.file("out/curves.png")));
  CHECK(std::filesystem::is_regular_file(dir.file("out/curves_time.png")));
}

TEST_CASE("compare: table.md shows each number as the console lines of its run do") {
  TempDir dir("compare_formats");
  const Finished run = run_compare(dir, "--methods mha,moh50 --seeds 1 --steps 3");
  CAPTURE(run.out);
  REQUIRE(run.status == 0);
  const auto models = matches(run.out, R"(parameters (\S+) \| MACs/token (\S+) \| active heads (\S+))");
  const auto finals = matches(run.out, R"(\): loss (\S+) bits_per_byte (\S+))");
  const auto speeds = matches(run.out, R"(\| (\S+) tok/s \| peak memory (.+ MiB))");
  REQUIRE(models.size() == 2);
  REQUIRE(finals.size() == 2);
  REQUIRE(speeds.size() == 2);
  const std::string table = file_text(dir.file("out/table.md"));
  CAPTURE(table);
  const char* const methods[] = {"mha", "moh50"};
  for (size_t m = 0; m < 2; ++m) {
    const std::vector<std::string> cells = table_cells(table, methods[m]);
    REQUIRE(cells.size() == 11);
    CHECK(cells[1] == finals[m][2]);   // bits per byte
    CHECK(cells[2] == finals[m][1]);   // validation loss
    CHECK(cells[6] == models[m][3]);   // active heads
    CHECK(cells[8] == models[m][2]);   // MACs per token
    CHECK(cells[9] == speeds[m][1]);   // tokens per second
    CHECK(cells[10] == speeds[m][2]);  // peak memory
  }
  // The reference row leaves its comparisons with itself empty: the time to its own loss, its parameters' change.
  CHECK(table_cells(table, "mha")[4].empty());
  CHECK(table_cells(table, "mha")[7] == models[0][1].str());
  CHECK(table_cells(table, "moh50")[4] != "");
  CHECK(table_cells(table, "moh50")[7].rfind(models[1][1].str() + " (", 0) == 0);  // parameters, then the change
}

TEST_CASE(
    "compare: table.md names the machine and the load, each column's better direction, one-run timings and "
    "what active heads count per method") {
  TempDir dir("compare_notes");
  const Finished run = run_compare(dir, "--methods mha,moa,moh50 --seeds 1 --steps 3");
  CAPTURE(run.out);
  REQUIRE(run.status == 0);
  const std::string table = file_text(dir.file("out/table.md"));
  CAPTURE(table);
  CHECK(run.out.find(table) != std::string::npos);  // the console prints the same
  const auto machine = matches(table, R"(Measured on (.+) \((\d+) CPUs\) with 1 thread; load average \(1, 5, 15 )"
                                      R"(minutes, /proc/loadavg\) ([\d.]+ [\d.]+ [\d.]+) at the start and )"
                                      R"(([\d.]+ [\d.]+ [\d.]+) at the end\.)");
  REQUIRE(machine.size() == 1);
  CHECK(!machine[0][1].str().empty());
  const std::vector<std::string> header = table_cells(table, "method");
  REQUIRE(header.size() == 11);
  for (size_t column : {1, 2, 3, 4}) CHECK(header[column].find("(lower is better") != std::string::npos);
  for (size_t column : {6, 7, 8, 10}) CHECK(header[column].find("lower is cheaper)") != std::string::npos);
  CHECK(header[9] == "tok/s (higher is better; one run)");
  for (size_t column : {3, 4, 9}) CHECK(header[column].find("; one run)") != std::string::npos);
  for (size_t column : {1, 2, 6, 7, 8, 10}) CHECK(header[column].find("one run") == std::string::npos);
  CHECK(header[5] == "steps");
  for (const char* note : {"- mha: every head runs for every token",
                           "- moa: k d_h / d, the k experts a token chooses of width d_h against MHA's d: k / h",
                           "- moh50: (h_s + K_r) / h, the shared heads and the K_r routed heads each token chooses"})
    CHECK(table.find(note) != std::string::npos);
  CHECK(table.find("- mae:") == std::string::npos);  // only the methods compared
  CHECK(table_cells(table, "moa")[6] == "50.00%");   // k = 2 of h = 4
}

TEST_CASE("compare: --eval-only and --resume take each run's trained context from its own checkpoint") {
  TempDir dir("compare_trained_context");
  const Finished trained = run_compare(dir, "--methods mha,moh75 --seeds 1 --steps 4", "--context 8");
  REQUIRE(trained.status == 0);
  const std::string trained_table = file_text(dir.file("out/table.md"));
  // No --context: each run evaluates at its checkpoint's 8, so its loss is the one its training ended with.
  const Finished evaluated = run_compare(dir, "--methods mha,moh75 --seeds 1 --eval-only", "");
  CAPTURE(evaluated.out);
  CAPTURE(evaluated.err);
  REQUIRE(evaluated.status == 0);
  CHECK(evaluated.out.find("| context | 8 |") != std::string::npos);
  const std::string evaluated_table = file_text(dir.file("out/table.md"));
  for (const char* method : {"mha", "moh75"}) {
    CAPTURE(method);
    REQUIRE(table_cells(evaluated_table, method).size() == 11);
    CHECK(table_cells(evaluated_table, method)[2] == table_cells(trained_table, method)[2]);  // validation loss
  }
  // --resume refuses another context, before any run trains, and continues at 8 without one.
  const Finished refused = run_compare(dir, "--methods mha,moh75 --seeds 1 --steps 6 --resume", "--context 16");
  CHECK(refused.status == 2);
  CHECK(refused.err.find("--context 16 differs from the 8 that the checkpoint out/mha-seed1/checkpoint.safetensors "
                         "was trained at; a resumed run trains at 8") != std::string::npos);
  const Finished resumed = run_compare(dir, "--methods mha,moh75 --seeds 1 --steps 6 --resume", "");
  CAPTURE(resumed.err);
  REQUIRE(resumed.status == 0);
  CHECK(resumed.out.find("== run 2 of 2: moh75, seed 1, 6 steps") != std::string::npos);
  CHECK(occurrences(file_text(dir.file("out/moh75-seed1/log.jsonl")), "\"type\":\"train\"") == 6);
}

TEST_CASE("compare: an unknown method is refused at once, naming the known ones, before any run starts") {
  TempDir dir("compare_unknown");
  const Finished run = run_compare(dir, "--methods mha,moh75,dense");
  CAPTURE(run.err);
  CHECK(run.status == 2);
  CHECK(run.err.find("unknown method 'dense' in --methods (known: mha, moa, moh75, moh50, mae, mae-equal-updates)") !=
        std::string::npos);
  CHECK(run.out.find("== run") == std::string::npos);
  CHECK(!std::filesystem::exists(dir.file("out")));  // before any run: no folder, no "== run" line
}

#endif  // HEADROOM_EXAMPLES_BIN_DIR
