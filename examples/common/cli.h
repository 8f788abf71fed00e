#pragma once
// Command-line flags for the training binaries: each flag is bound to a
// variable that holds its default, so `--help` prints the defaults and the
// start-of-run config table prints the values in use.
//
//   int64_t steps = 1000;  std::string attn = "mha";
//   Flags flags("train_lm", "A byte-level language model.");
//   flags.add("steps", &steps, "optimizer steps");
//   flags.add("attn", &attn, "attention: mha|moa|moh|mae");
//   if (!flags.parse(argc, argv)) return 0;   // --help was printed
//
// A bad flag throws UsageError; main prints its message and the usage and
// exits with status 2.
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>
#include "headroom/core/error.h"

namespace headroom::examples {

class UsageError : public Error {
 public:
  using Error::Error;
};

class Flags {
 public:
  Flags(std::string program, std::string summary);
  void add(const std::string& name, std::string* value, const std::string& help);
  void add(const std::string& name, int64_t* value, const std::string& help);
  void add(const std::string& name, int* value, const std::string& help);
  void add(const std::string& name, uint64_t* value, const std::string& help);
  void add(const std::string& name, double* value, const std::string& help);
  // A switch: `--name` sets it to true (it takes no value).
  void add(const std::string& name, bool* value, const std::string& help);
  // Returns false after printing the usage for --help; throws UsageError for
  // unknown flags, missing or malformed values.
  bool parse(int argc, char** argv);
  // True when `--name` appeared on the command line (not just its default).
  bool was_set(const std::string& name) const;
  std::string usage() const;
  // (name, current value) of every flag, in the order they were added.
  std::vector<std::pair<std::string, std::string>> values() const;

 private:
  struct Flag {
    std::string name, help, default_text;
    bool is_switch = false, set = false;
    std::function<void(const std::string&)> assign;  // parses and stores a value
    std::function<std::string()> show;               // the current value as text
  };
  void add_flag(Flag flag);
  Flag* find(const std::string& name);
  std::string program_, summary_;
  std::vector<Flag> flags_;
};

// Runs `body` with the error handling every binary shares: a UsageError
// prints the message and the usage (exit 2), any other headroom::Error or
// std::exception prints "error: ..." (exit 1).
int run_main(const Flags& flags, const std::function<int()>& body);

}  // namespace headroom::examples
