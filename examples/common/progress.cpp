#include "headroom/examples/common/progress.h"

#include <unistd.h>

#include <cmath>
#include <ctime>
#include <filesystem>
#include <sstream>

#include "headroom/core/atomic_file.h"
#include "headroom/core/error.h"
#include "headroom/core/read_file.h"
#include "headroom/examples/common/cli.h"

namespace headroom::examples {

namespace {

std::string json_string(const std::string& text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') out += '\\', out += c;
    else if (static_cast<unsigned char>(c) < 0x20) {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\u%04x", c);
      out += escaped;
    } else out += c;
  }
  return out + "\"";
}

std::string json_number(double value) {
  if (!std::isfinite(value)) return json_string(std::isnan(value) ? "nan" : value > 0 ? "inf" : "-inf");
  char text[32];
  std::snprintf(text, sizeof text, "%.9g", value);
  return text;
}

// The value of "key": in one line written by json_object (numbers only).
bool find_number(const std::string& line, size_t at, double& value, size_t& end) {
  const char* start = line.c_str() + at;
  char* stop = nullptr;
  value = std::strtod(start, &stop);
  end = at + static_cast<size_t>(stop - start);
  return stop != start;
}

// Splits a json_object line into its number fields and its "type".
std::pair<std::string, std::vector<std::pair<std::string, double>>> parse_line(const std::string& line) {
  std::string type;
  std::vector<std::pair<std::string, double>> numbers;
  size_t at = 0;
  while ((at = line.find('"', at)) != std::string::npos) {
    size_t key_end = line.find('"', at + 1);
    if (key_end == std::string::npos || key_end + 1 >= line.size() || line[key_end + 1] != ':') break;
    std::string key = line.substr(at + 1, key_end - at - 1);
    size_t value_at = key_end + 2;
    if (line[value_at] == '"') {  // a string value: only "type" is kept
      size_t value_end = line.find('"', value_at + 1);
      if (key == "type") type = line.substr(value_at + 1, value_end - value_at - 1);
      at = value_end + 1;
      continue;
    }
    double value = 0;
    size_t end = value_at;
    if (find_number(line, value_at, value, end)) numbers.emplace_back(key, value);
    at = end;
  }
  return {type, numbers};
}

}  // namespace

std::string json_object(const std::vector<JsonField>& fields) {
  std::string out = "{";
  for (const auto& [key, value] : fields) {
    if (out.size() > 1) out += ',';
    out += json_string(key) + ':';
    if (auto* real = std::get_if<double>(&value)) out += json_number(*real);
    else if (auto* integer = std::get_if<int64_t>(&value)) out += std::to_string(*integer);
    else out += json_string(std::get<std::string>(value));
  }
  return out + "}";
}

std::string iso8601_now() {
  const auto now = std::chrono::system_clock::now();
  const std::time_t seconds = std::chrono::system_clock::to_time_t(now);
  const auto millis = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  char text[40];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%S", &utc);
  char with_millis[48];
  std::snprintf(with_millis, sizeof with_millis, "%s.%03dZ", text, static_cast<int>(millis));
  return with_millis;
}

LogRows read_jsonl_numbers(const std::string& path, const std::string& type) {
  std::istringstream in(read_regular_file(path, kMaxReadBytes, "jsonl"));
  LogRows rows;
  std::string line;
  while (std::getline(in, line)) {
    auto [line_type, numbers] = parse_line(line);
    if (line_type == type) rows.push_back(std::move(numbers));
  }
  return rows;
}

JsonlLog::JsonlLog(const std::string& path, int64_t keep_until_step) : path_(path) {
  if (keep_until_step >= 0) {
    // A log that does not exist yet keeps nothing; anything else at the path must be a readable file.
    std::istringstream in(std::filesystem::exists(path) ? read_regular_file(path, kMaxReadBytes, "jsonl") : "");
    std::string line, kept;
    while (in && std::getline(in, line)) {
      auto numbers = parse_line(line).second;
      bool after = false;
      double elapsed = elapsed_before_;
      for (const auto& [key, value] : numbers) {
        if (key == "step" && value > double(keep_until_step)) after = true;
        if (key == "elapsed_s") elapsed = value;
      }
      if (after) continue;
      kept += line + "\n";
      elapsed_before_ = elapsed;
    }
    write_file_atomically(path, kept, "jsonl");
  }
  file_ = std::fopen(path.c_str(), "a");
  HEADROOM_CHECK(file_ != nullptr, "[jsonl] cannot open ", path, " for appending");
}

JsonlLog::~JsonlLog() {
  if (file_ != nullptr) std::fclose(file_);
}

void JsonlLog::write(const std::vector<JsonField>& fields) {
  if (file_ == nullptr) return;
  std::vector<JsonField> timed = fields;
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - opened_).count();
  timed.emplace_back("time", iso8601_now());
  timed.emplace_back("elapsed_s", elapsed_before_ + elapsed);
  std::string line = json_object(timed) + "\n";
  HEADROOM_CHECK(std::fputs(line.c_str(), file_) >= 0 && std::fflush(file_) == 0, "[jsonl] cannot write ", path_);
}

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  int64_t s = static_cast<int64_t>(seconds + 0.5);
  char text[32];
  if (s >= 3600) std::snprintf(text, sizeof text, "%lldh%02lldm", (long long)(s / 3600), (long long)(s % 3600 / 60));
  else if (s >= 60) std::snprintf(text, sizeof text, "%lldm%02llds", (long long)(s / 60), (long long)(s % 60));
  else std::snprintf(text, sizeof text, "%llds", (long long)s);
  return text;
}

Progress::Progress(int64_t start_step, int64_t total, std::string unit, int64_t every, bool show)
    : start_step_(start_step),
      total_(total),
      every_(every > 0 ? every : 1),
      unit_(std::move(unit)),
      show_(show),
      terminal_(isatty(STDOUT_FILENO) != 0),
      start_(Clock::now()) {}

double Progress::training_seconds() const {
  return std::chrono::duration<double>(Clock::now() - start_).count() - excluded_;
}

double Progress::items_per_second() const {
  double seconds = training_seconds();
  return seconds > 0 ? double(items_) / seconds : 0;
}

void Progress::update(int64_t step, const std::vector<std::pair<std::string, double>>& values, int64_t items) {
  items_ += items;
  if (!show_ || (!terminal_ && step % every_ != 0 && step != total_)) return;
  double per_step = training_seconds() / double(std::max<int64_t>(step - start_step_, 1));
  constexpr int width = 24;
  int filled = static_cast<int>(width * step / std::max<int64_t>(total_, 1));
  std::ostringstream line;
  line << (terminal_ ? "\r[" : "[") << std::string(filled, '#') << std::string(width - filled, '.') << "] " << step
       << "/" << total_ << " ETA " << format_duration(per_step * double(total_ - step));
  for (const auto& [name, value] : values) line << " | " << name << " " << format_metric(name, value);
  line << " | " << format_si(items_per_second()) << " " << unit_ << "/s" << (terminal_ ? "   " : "\n");
  std::fputs(line.str().c_str(), stdout);
  std::fflush(stdout);
}

void Progress::finish() {
  if (show_ && terminal_) std::fputs("\n", stdout);
}

}  // namespace headroom::examples
