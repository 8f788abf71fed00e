#pragma once
// What a training run shows and records while it runs: a progress line with
// ETA, loss, learning rate and throughput, and a JSONL log with one object per
// training step and per evaluation (the source of the loss-curve plots).
//
//   JsonlLog log("run/log.jsonl", resume_step);        // keeps lines up to resume_step
//   log.write({{"type", "train"}, {"step", 10}, {"loss", 2.31}});
//   Progress bar(1000, "tok");
//   bar.update(step, {{"loss", 2.31}, {"lr", 3e-4}}, tokens_this_step);
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace headroom::examples {

// A flat JSON object of numbers and strings, in insertion order.
using JsonField = std::pair<std::string, std::variant<double, int64_t, std::string>>;
std::string json_object(const std::vector<JsonField>& fields);

// Reads the numbers of every line of a JSONL file written by JsonlLog whose
// "type" is `type`: one map from field name to value per line.  Used to plot
// curves after a run; string fields other than "type" are skipped.
using LogRows = std::vector<std::vector<std::pair<std::string, double>>>;
LogRows read_jsonl_numbers(const std::string& path, const std::string& type);

// The current wall time in ISO 8601, UTC, to the millisecond: "2025-01-31T14:05:09.123Z".
std::string iso8601_now();

// Every record ends with "time" (iso8601_now) and "elapsed_s", the seconds
// since the log was opened; a resumed log goes on from the last kept
// record's elapsed_s, so a run's time axis has no gap or restart.
class JsonlLog {
 public:
  JsonlLog() = default;  // disabled: write() does nothing
  // Opens `path` for appending.  keep_until_step >= 0 (a resumed run) first
  // drops the lines whose "step" is larger, so the log reads as one run.
  JsonlLog(const std::string& path, int64_t keep_until_step = -1);
  ~JsonlLog();
  JsonlLog(const JsonlLog&) = delete;
  JsonlLog& operator=(const JsonlLog&) = delete;
  void write(const std::vector<JsonField>& fields);  // one line, flushed
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::FILE* file_ = nullptr;
  std::chrono::steady_clock::time_point opened_ = std::chrono::steady_clock::now();
  double elapsed_before_ = 0;  // elapsed_s of the last record kept on resume
};

class Progress {
 public:
  // total: the last step; unit: what throughput counts ("tok", "img").
  // On a terminal the line redraws in place; otherwise one line is printed
  // every `every` steps (CI logs stay readable).  show = false only counts.
  Progress(int64_t start_step, int64_t total, std::string unit, int64_t every, bool show = true);
  // step: steps done so far (1-based); items: tokens or images of that step.
  void update(int64_t step, const std::vector<std::pair<std::string, double>>& values, int64_t items);
  void finish();  // ends the in-place line
  // Leaves `seconds` (evaluation, checkpoints) out of the throughput and ETA.
  void exclude(double seconds) { excluded_ += seconds; }
  double items_per_second() const;  // over the training time so far

 private:
  using Clock = std::chrono::steady_clock;
  int64_t start_step_, total_, every_;
  std::string unit_;
  bool show_, terminal_;
  Clock::time_point start_;
  double excluded_ = 0;
  double training_seconds() const;
  int64_t items_ = 0;
};

std::string format_duration(double seconds);  // "1h02m", "3m12s", "42s"

}  // namespace headroom::examples
