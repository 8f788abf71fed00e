// log.jsonl's clock: every record carries the wall time (ISO 8601, UTC) and
// the seconds since the run started, continued across a resume.
#include <chrono>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#include "headroom/examples/common/progress.h"
#include "helpers.h"

using namespace headroom::examples;
using headroom::testing::TempDir;

namespace {

std::vector<std::string> lines_of(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

double elapsed_of(const std::vector<std::pair<std::string, double>>& row) {
  for (const auto& [key, value] : row)
    if (key == "elapsed_s") return value;
  return -1;
}

}  // namespace

TEST_CASE("log.jsonl: every record ends with its wall time and the elapsed seconds") {
  TempDir dir("run_log_time");
  const std::string path = dir.file("log.jsonl");
  {
    JsonlLog log(path, 0);
    log.write({{"type", std::string("train")}, {"step", int64_t(1)}, {"loss", 2.5}});
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    log.write({{"type", std::string("eval")}, {"step", int64_t(1)}, {"loss", 2.4}});
  }
  const std::regex timed(R"(.*,"time":"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z","elapsed_s":[0-9.e-]+\}$)");
  for (const std::string& line : lines_of(path)) {
    CAPTURE(line);
    CHECK(std::regex_match(line, timed));
  }
  const auto train = read_jsonl_numbers(path, "train"), eval = read_jsonl_numbers(path, "eval");
  REQUIRE(train.size() == 1);
  REQUIRE(eval.size() == 1);
  CHECK(train[0][0].first == "step");  // the fields written come first, as given
  CHECK(elapsed_of(train[0]) >= 0);
  CHECK(elapsed_of(eval[0]) >= elapsed_of(train[0]) + 0.025);
  CHECK(elapsed_of(eval[0]) < 5);
}

TEST_CASE("log.jsonl: a resumed log goes on from the last kept record's elapsed seconds") {
  TempDir dir("run_log_resume");
  const std::string path = dir.file("log.jsonl");
  {
    JsonlLog log(path, 0);
    for (int64_t step = 1; step <= 3; ++step) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      log.write({{"type", std::string("train")}, {"step", step}});
    }
  }
  const double kept_elapsed = elapsed_of(read_jsonl_numbers(path, "train")[1]);  // step 2
  {
    JsonlLog resumed(path, 2);  // drops step 3
    resumed.write({{"type", std::string("train")}, {"step", int64_t(3)}});
  }
  const auto rows = read_jsonl_numbers(path, "train");
  REQUIRE(rows.size() == 3);
  CHECK(kept_elapsed >= 0.035);
  CHECK(elapsed_of(rows[2]) >= kept_elapsed);
  CHECK(elapsed_of(rows[2]) < kept_elapsed + 5);
}
