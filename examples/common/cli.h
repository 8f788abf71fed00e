#pragma once
// Command-line flags for the training binaries: each flag is bound to a
// variable that holds its default, so `--help` prints the defaults and the
// start-of-run config table prints the values in use.  Every numeric flag
// states the values it accepts, checked when it is parsed.
//
//   int64_t steps = 1000;  double lr = 1e-3;  std::string attn = "mha";
//   Flags flags("train_lm", "A byte-level language model.");
//   flags.add("steps", &steps, "optimizer steps", {1, 1'000'000'000});          // [1, 1e9]
//   flags.add("lr", &lr, "learning rate", {0, 100, End::open, End::closed});    // (0, 100]
//   flags.add("attn", &attn, "attention: mha|moa|moh|mae");
//   if (!flags.parse(argc, argv)) return 0;   // --help was printed
//
// A bad flag throws UsageError; run_main prints its message and where the
// flags are listed, and exits with status 2.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>
#include "headroom/core/error.h"

namespace headroom::examples {

class UsageError : public Error {
 public:
  using Error::Error;
};

// The values an integer flag accepts: min to max, both included.  The range
// lies within the variable's type, so a value is never truncated.
template <typename T> struct Range { T min, max; };

// The values a real flag accepts: from min to max, each end included
// (closed) or not (open).  NaN is never accepted.
enum class End { closed, open };
struct RealRange {
  double min, max;
  End min_end = End::closed, max_end = End::closed;
};

// A decimal integer filling all of `text` (an optional '-', then digits; no
// spaces, no '+'), or nullopt when it is malformed or outside the type.
std::optional<int64_t> parse_int64(const std::string& text);
std::optional<uint64_t> parse_uint64(const std::string& text);  // digits only

// A size in bytes: a decimal number, then B, KiB, MiB, GiB or TiB (or
// nothing: bytes), as "4GiB", "1.5GiB", "512MiB" or "1000000"; nullopt for
// another text, a size below 1 byte or one past 2^60.
std::optional<uint64_t> parse_byte_size(const std::string& text);

// The non-empty items of a comma-separated list: "a,,b" -> {a, b}.
std::vector<std::string> split_list(const std::string& text);

// The integers of --`flag`'s comma-separated `text`, each in [lo, hi], at
// least one; throws UsageError naming the flag otherwise.
std::vector<int64_t> parse_int_list(const std::string& flag, const std::string& text, int64_t lo, int64_t hi);

class Flags {
 public:
  Flags(std::string program, std::string summary);
  void add(const std::string& name, std::string* value, const std::string& help);
  void add(const std::string& name, int64_t* value, const std::string& help, Range<int64_t> range);
  void add(const std::string& name, int* value, const std::string& help, Range<int> range);
  void add(const std::string& name, uint64_t* value, const std::string& help, Range<uint64_t> range);
  void add(const std::string& name, double* value, const std::string& help, RealRange range);
  // A switch: `--name` sets it to true (it takes no value).
  void add(const std::string& name, bool* value, const std::string& help);
  // Returns false after printing the usage for --help; throws UsageError for
  // unknown flags (naming the nearest declared one when it looks like a typo),
  // a flag given twice, missing or malformed values and values out of range.
  bool parse(int argc, char** argv);
  // Drops a declared flag: a program that sets the value itself (compare's
  // presets set --attn) does not offer it.
  void remove(const std::string& name);
  // What --help prints as the default of `--name`, for a default derived
  // from other flags ("30: a tenth of --steps, at most 100").
  void describe_default(const std::string& name, const std::string& text);
  // Sets `--name` from a stored run's `text` (a checkpoint's settings), with
  // the checks of the command line: a value out of the flag's range throws
  // UsageError naming the flag.  The flag then counts as settled, not as given.
  void restore(const std::string& name, const std::string& text);
  // True when `--name` was added (was_set and value throw for one that was not).
  bool declares(const std::string& name) const;
  // True when `--name` appeared on the command line (not just its default).
  bool was_set(const std::string& name) const;
  // True when `--name` was given or restored: its value is not a default to derive.
  bool is_settled(const std::string& name) const;
  // The current value of `--name` as text (as the config table shows it).
  std::string value(const std::string& name) const;
  std::string usage() const;
  const std::string& program() const { return program_; }
  // (name, current value) of every flag, in the order they were added.
  std::vector<std::pair<std::string, std::string>> values() const;

 private:
  struct Flag {
    std::string name, help, range_text, default_text;
    bool is_switch = false, set = false;
    std::function<void(const std::string&)> assign;  // parses, checks and stores a value
    std::function<std::string()> show;               // the current value as text
    bool restored = false;                           // set from a checkpoint (restore)
  };
  template <typename T> void add_integer(const std::string& name, T* value, const std::string& help, Range<T> range);
  void add_flag(Flag flag);
  Flag* find(const std::string& name);
  const Flag& declared(const std::string& name) const;  // throws for a flag never added
  std::string typo_hint(const std::string& name) const;
  std::string program_, summary_;
  std::vector<Flag> flags_;
};

// Throws UsageError when a · b exceeds `limit`: flags that each fit their
// range can still multiply to an absurd allocation.  The names are shown as
// given ("--batch"); `what` is the product's unit ("tokens per batch").
void check_product(const std::string& a_name, int64_t a, const std::string& b_name, int64_t b, int64_t limit,
                   const std::string& what);

// The number formats of the binaries' output, one per kind of value:
//   format_count(1234567) "1,234,567"      counts (parameters, steps, items)
//   format_si(4006020)    "4.01M"          rates and MACs: 3 significant digits, k/M/G/T
//   format_mib(46093312)  "44.0 MiB"       memory, one decimal
//   format_seconds(83.27) "83.3 s"         durations, one decimal (two below a second: "0.04 s")
//   format_percent(0.6848) "68.48%"        shares (active heads, time communicating)
//   format_metric("loss", 2.61234) "2.612"  validation metrics: 4 significant digits (5 as "5.000"),
//   format_metric("accuracy", 0.6848) "68.48%", format_metric("bleu", 0.058) "5.80" (BLEU ×100)
// The training binaries' console lines and compare's table.md use these.
std::string format_count(int64_t count);
std::string format_si(double value);
std::string format_mib(double bytes);  // a double, so an estimate past 2^64 bytes formats too
std::string format_seconds(double seconds);
std::string format_percent(double fraction);
std::string format_metric(const std::string& name, double value);

// The known name nearest to `got` by edit distance, when it is close enough
// to be a typo (at most a third of its letters, at least 1), else "".
std::string nearest_name(const std::string& got, const std::vector<std::string>& known);
// " (did you mean 'x'? known: a, b, c)" or " (known: a, b, c)", for an
// unknown name's message.
std::string known_names_hint(const std::string& got, const std::vector<std::string>& known);

// Throws headroom::Error when `path` (the value of `flag`) does not exist,
// saying which `scripts/fetch-data <part>` command fetches the default data.
void check_data_exists(const std::string& flag, const std::string& path, const std::string& fetch_part);

// Runs `body` with the error handling every binary shares: a UsageError
// prints "error: ..." and "run 'PROGRAM --help' for the flags" (exit 2; the
// usage itself would scroll the error away), any other headroom::Error or
// std::exception prints "error: ..." (exit 1), an allocation failure as
// "error: out of memory".
int run_main(const Flags& flags, const std::function<int()>& body);

}  // namespace headroom::examples
