#include "headroom/examples/common/cli.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <sstream>

namespace headroom::examples {

namespace {

// strtoll/strtod that must consume the whole text.
int64_t parse_integer(const std::string& flag, const std::string& text) {
  errno = 0;
  char* end = nullptr;
  long long value = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno != 0)
    throw UsageError("--" + flag + " expects an integer, got '" + text + "'");
  return value;
}

double parse_real(const std::string& flag, const std::string& text) {
  errno = 0;
  char* end = nullptr;
  double value = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || errno != 0)
    throw UsageError("--" + flag + " expects a number, got '" + text + "'");
  return value;
}

std::string format_real(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", value);
  return text;
}

}  // namespace

Flags::Flags(std::string program, std::string summary) : program_(std::move(program)), summary_(std::move(summary)) {}

void Flags::add_flag(Flag flag) {
  HEADROOM_CHECK(find(flag.name) == nullptr, "[Flags] flag --", flag.name, " is declared twice");
  flag.default_text = flag.show();
  flags_.push_back(std::move(flag));
}

void Flags::add(const std::string& name, std::string* value, const std::string& help) {
  add_flag(
      {name, help, "", false, false, [value](const std::string& text) { *value = text; }, [value] { return *value; }});
}

void Flags::add(const std::string& name, int64_t* value, const std::string& help) {
  add_flag({name, help, "", false, false,
            [name, value](const std::string& text) { *value = parse_integer(name, text); },
            [value] { return std::to_string(*value); }});
}

void Flags::add(const std::string& name, int* value, const std::string& help) {
  add_flag({name, help, "", false, false,
            [name, value](const std::string& text) { *value = static_cast<int>(parse_integer(name, text)); },
            [value] { return std::to_string(*value); }});
}

void Flags::add(const std::string& name, uint64_t* value, const std::string& help) {
  add_flag({name, help, "", false, false,
            [name, value](const std::string& text) {
              int64_t parsed = parse_integer(name, text);
              if (parsed < 0) throw UsageError("--" + name + " expects a non-negative integer, got '" + text + "'");
              *value = static_cast<uint64_t>(parsed);
            },
            [value] { return std::to_string(*value); }});
}

void Flags::add(const std::string& name, double* value, const std::string& help) {
  add_flag({name, help, "", false, false, [name, value](const std::string& text) { *value = parse_real(name, text); },
            [value] { return format_real(*value); }});
}

void Flags::add(const std::string& name, bool* value, const std::string& help) {
  add_flag({name, help, "", true, false, [value](const std::string&) { *value = true; },
            [value] { return std::string(*value ? "true" : "false"); }});
}

Flags::Flag* Flags::find(const std::string& name) {
  for (auto& flag : flags_)
    if (flag.name == name) return &flag;
  return nullptr;
}

bool Flags::parse(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::fputs(usage().c_str(), stdout);
      return false;
    }
    if (arg.rfind("--", 0) != 0) throw UsageError("unexpected argument '" + arg + "' (flags start with --)");
    std::string name = arg.substr(2), value;
    size_t equals = name.find('=');
    bool inline_value = equals != std::string::npos;
    if (inline_value) value = name.substr(equals + 1), name = name.substr(0, equals);
    Flag* flag = find(name);
    if (flag == nullptr) throw UsageError("unknown flag --" + name);
    if (!flag->is_switch && !inline_value) {
      if (i + 1 >= argc) throw UsageError("flag --" + name + " needs a value");
      value = argv[++i];
    }
    if (flag->is_switch && inline_value) throw UsageError("flag --" + name + " takes no value");
    flag->assign(value);
    flag->set = true;
  }
  return true;
}

bool Flags::was_set(const std::string& name) const {
  for (const auto& flag : flags_)
    if (flag.name == name) return flag.set;
  HEADROOM_FAIL("[Flags] no flag --", name, " was declared");
}

std::string Flags::usage() const {
  std::ostringstream out;
  out << program_ << ": " << summary_ << "\n\nusage: " << program_ << " [flags]\n";
  for (const auto& flag : flags_) {
    std::string left = "  --" + flag.name + (flag.is_switch ? "" : " X");
    out << left << std::string(left.size() < 24 ? 24 - left.size() : 1, ' ') << flag.help;
    if (!flag.is_switch) out << " (default: " << (flag.default_text.empty() ? "none" : flag.default_text) << ")";
    out << "\n";
  }
  out << "  --help                print this and exit\n";
  return out.str();
}

std::vector<std::pair<std::string, std::string>> Flags::values() const {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& flag : flags_) out.emplace_back(flag.name, flag.show());
  return out;
}

int run_main(const Flags& flags, const std::function<int()>& body) {
  try {
    return body();
  } catch (const UsageError& e) {
    std::fprintf(stderr, "error: %s\n\n%s", e.what(), flags.usage().c_str());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}

}  // namespace headroom::examples
