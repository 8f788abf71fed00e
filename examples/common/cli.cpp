#include "headroom/examples/common/cli.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <charconv>
#include <cstdio>
#include <filesystem>
#include <new>
#include <sstream>
#include <type_traits>

namespace headroom::examples {

namespace {

// `text` as a T when it is an integer in the range.
template <typename T> std::optional<T> integer_in(const std::string& text, Range<T> range) {
  auto parsed = [&] {
    if constexpr (std::is_unsigned_v<T>) return parse_uint64(text);
    else return parse_int64(text);
  }();
  if (!parsed || *parsed < range.min || *parsed > range.max) return std::nullopt;
  return static_cast<T>(*parsed);
}

template <typename T> std::string range_text(Range<T> range) {
  return "[" + std::to_string(range.min) + ", " + std::to_string(range.max) + "]";
}

std::string format_real(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", value);
  return text;
}

std::string range_text(const RealRange& range) {
  return (range.min_end == End::open ? "(" : "[") + format_real(range.min) + ", " + format_real(range.max) +
         (range.max_end == End::open ? ")" : "]");
}

// False for NaN, which no comparison holds for.
bool in_range(double value, const RealRange& range) {
  const bool above = range.min_end == End::open ? value > range.min : value >= range.min;
  const bool below = range.max_end == End::open ? value < range.max : value <= range.max;
  return above && below;
}

// The whole text as a decimal real (std::from_chars: an optional '-',
// digits, a fraction and an exponent; no spaces, '+', hexadecimal or locale),
// or nothing when it is not one or is out of the double's range.
std::optional<double> parse_real(const std::string& text) {
  double value = 0;
  const char* end = text.data() + text.size();
  auto [stop, error] = std::from_chars(text.data(), end, value, std::chars_format::general);
  if (error != std::errc() || stop != end) return std::nullopt;
  return value;
}

bool ends_with(const std::string& text, const std::string& tail) {
  return text.size() >= tail.size() && text.compare(text.size() - tail.size(), tail.size(), tail) == 0;
}

// Levenshtein distance: insertions, deletions and substitutions of one byte.
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] != b[j - 1])});
      diagonal = above;
    }
  }
  return row[b.size()];
}
}  // namespace

namespace {

// The whole text as a decimal T (std::from_chars: digits and, for a signed T,
// a leading '-'; no spaces, '+' or locale), or nothing when it is not one or
// does not fit.
template <typename T> std::optional<T> whole_integer(const std::string& text) {
  T value{};
  const char* end = text.data() + text.size();
  auto [stop, error] = std::from_chars(text.data(), end, value);
  if (error != std::errc() || stop != end) return std::nullopt;
  return value;
}

}  // namespace

std::optional<int64_t> parse_int64(const std::string& text) { return whole_integer<int64_t>(text); }

std::optional<uint64_t> parse_uint64(const std::string& text) { return whole_integer<uint64_t>(text); }

std::optional<uint64_t> parse_byte_size(const std::string& text) {
  const char* const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};  // B and bytes alike
  const size_t split = text.find_first_not_of("0123456789.");
  const std::string unit = split == std::string::npos ? "" : text.substr(split);
  const std::optional<double> number = parse_real(text.substr(0, split));
  const auto found = std::find(std::begin(units), std::end(units), unit);
  if (!number || (!unit.empty() && found == std::end(units))) return std::nullopt;
  const int power = unit.empty() ? 0 : int(found - std::begin(units));
  const double bytes = std::ldexp(*number, 10 * power);
  if (!(bytes >= 1 && bytes <= std::ldexp(1.0, 60))) return std::nullopt;
  return uint64_t(bytes);
}

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> items;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) items.push_back(item);
  return items;
}

std::vector<int64_t> parse_int_list(const std::string& flag, const std::string& text, int64_t lo, int64_t hi) {
  std::vector<int64_t> values;
  for (const std::string& item : split_list(text)) {
    std::optional<int64_t> value = parse_int64(item);
    if (!value || *value < lo || *value > hi)
      throw UsageError("--" + flag + " expects comma-separated integers in [" + std::to_string(lo) + ", " +
                       std::to_string(hi) + "], got '" + text + "'");
    values.push_back(*value);
  }
  if (values.empty()) throw UsageError("--" + flag + " names no value");
  return values;
}

Flags::Flags(std::string program, std::string summary) : program_(std::move(program)), summary_(std::move(summary)) {}

void Flags::add_flag(Flag flag) {
  HEADROOM_CHECK(find(flag.name) == nullptr, "[Flags] flag --", flag.name, " is declared twice");
  flag.default_text = flag.show();
  flags_.push_back(std::move(flag));
}

void Flags::add(const std::string& name, std::string* value, const std::string& help) {
  add_flag({name, help, "", "", false, false, [value](const std::string& text) { *value = text; },
            [value] { return *value; }});
}

template <typename T>
void Flags::add_integer(const std::string& name, T* value, const std::string& help, Range<T> range) {
  const std::string accepted = range_text(range);
  HEADROOM_CHECK(range.min <= *value && *value <= range.max, "[Flags] the default ", *value, " of --", name,
                 " is outside its range ", accepted);
  add_flag({name, help, accepted, "", false, false,
            [name, value, range, accepted](const std::string& text) {
              std::optional<T> parsed = integer_in(text, range);
              if (!parsed)
                throw UsageError("--" + name + " expects an integer in " + accepted + ", got '" + text + "'");
              *value = *parsed;
            },
            [value] { return std::to_string(*value); }});
}

void Flags::add(const std::string& name, int64_t* value, const std::string& help, Range<int64_t> range) {
  add_integer(name, value, help, range);
}

void Flags::add(const std::string& name, int* value, const std::string& help, Range<int> range) {
  add_integer(name, value, help, range);
}

void Flags::add(const std::string& name, uint64_t* value, const std::string& help, Range<uint64_t> range) {
  add_integer(name, value, help, range);
}

void Flags::add(const std::string& name, double* value, const std::string& help, RealRange range) {
  const std::string accepted = range_text(range);
  HEADROOM_CHECK(in_range(*value, range), "[Flags] the default ", *value, " of --", name, " is outside its range ",
                 accepted);
  add_flag({name, help, accepted, "", false, false,
            [name, value, range, accepted](const std::string& text) {
              std::optional<double> parsed = parse_real(text);
              if (!parsed || !in_range(*parsed, range))
                throw UsageError("--" + name + " expects a number in " + accepted + ", got '" + text + "'");
              *value = *parsed;
            },
            [value] { return format_real(*value); }});
}

void Flags::add(const std::string& name, bool* value, const std::string& help) {
  add_flag({name, help, "", "", true, false, [value](const std::string&) { *value = true; },
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
    if (flag == nullptr) throw UsageError("unknown flag --" + name + typo_hint(name));
    if (!flag->is_switch && !inline_value) {
      if (i + 1 >= argc) throw UsageError("flag --" + name + " needs a value");
      value = argv[++i];
    }
    if (flag->is_switch && inline_value) throw UsageError("flag --" + name + " takes no value");
    if (flag->set)
      throw UsageError("flag --" + name + " is given twice" +
                       (flag->is_switch ? "" : " (" + flag->show() + ", then " + value + ")") + "; give it once");
    flag->assign(value);
    flag->set = true;
  }
  return true;
}

// " (did you mean --attn?)" for a likely typo of a declared flag, else "".
std::string Flags::typo_hint(const std::string& name) const {
  std::vector<std::string> names{"help"};
  for (const auto& flag : flags_) names.push_back(flag.name);
  const std::string nearest = nearest_name(name, names);
  return nearest.empty() ? "" : " (did you mean --" + nearest + "?)";
}

const Flags::Flag& Flags::declared(const std::string& name) const {
  for (const auto& flag : flags_)
    if (flag.name == name) return flag;
  HEADROOM_FAIL("[Flags] no flag --", name, " was declared");
}

bool Flags::declares(const std::string& name) const {
  return std::any_of(flags_.begin(), flags_.end(), [&](const Flag& flag) { return flag.name == name; });
}

bool Flags::was_set(const std::string& name) const { return declared(name).set; }

bool Flags::is_settled(const std::string& name) const { return declared(name).set || declared(name).restored; }

void Flags::remove(const std::string& name) {
  declared(name);  // throws for a flag never added
  flags_.erase(std::remove_if(flags_.begin(), flags_.end(), [&](const Flag& flag) { return flag.name == name; }),
               flags_.end());
}

void Flags::describe_default(const std::string& name, const std::string& text) {
  Flag* flag = find(name);
  HEADROOM_CHECK(flag != nullptr, "[Flags] no flag --", name, " was declared");
  flag->default_text = text;
}

void Flags::restore(const std::string& name, const std::string& text) {
  Flag* flag = find(name);
  HEADROOM_CHECK(flag != nullptr, "[Flags] no flag --", name, " was declared");
  if (flag->is_switch && text != "true" && text != "false")
    throw UsageError("--" + name + " is a switch, true or false, got '" + text + "'");
  if (!flag->is_switch || text == "true") flag->assign(text);
  flag->restored = true;
}

std::string Flags::value(const std::string& name) const { return declared(name).show(); }

std::string Flags::usage() const {
  std::ostringstream out;
  out << program_ << ": " << summary_ << "\n\nusage: " << program_ << " [flags]\n";
  for (const auto& flag : flags_) {
    std::string left = "  --" + flag.name + (flag.is_switch ? "" : " X");
    out << left << std::string(left.size() < 24 ? 24 - left.size() : 1, ' ') << flag.help;
    if (!flag.is_switch) out << " (default: " << (flag.default_text.empty() ? "none" : flag.default_text);
    if (!flag.range_text.empty()) out << ", range " << flag.range_text;
    if (!flag.is_switch) out << ")";
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

void check_product(const std::string& a_name, int64_t a, const std::string& b_name, int64_t b, int64_t limit,
                   const std::string& what) {
  HEADROOM_CHECK(a > 0 && b > 0, "[check_product] expected positive factors, got ", a, " and ", b);
  if (a > limit / b)
    throw UsageError(a_name + " (" + std::to_string(a) + ") times " + b_name + " (" + std::to_string(b) +
                     ") is over the limit of " + std::to_string(limit) + " " + what + "; lower one of them");
}

std::string format_count(int64_t count) {
  std::string digits = std::to_string(count < 0 ? -count : count), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return (count < 0 ? "-" : "") + out;
}

std::string format_si(double value) {
  const char* const suffixes[] = {"", "k", "M", "G", "T"};
  size_t power = 0;
  while (std::fabs(value) >= 999.5 && power + 1 < std::size(suffixes)) value /= 1000, ++power;
  char text[32];
  std::snprintf(text, sizeof text, "%.3g%s", value, suffixes[power]);
  return text;
}

std::string format_mib(double bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f MiB", bytes / double(1 << 20));
  return text;
}

std::string format_seconds(double seconds) {
  char text[32];
  // Two decimals below a second, so that short runs do not all read "0.0 s".
  std::snprintf(text, sizeof text, std::fabs(seconds) < 1 ? "%.2f s" : "%.1f s", seconds);
  return text;
}

std::string format_percent(double fraction) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f%%", 100 * fraction);
  return text;
}

std::string format_metric(const std::string& name, double value) {
  if (ends_with(name, "accuracy")) return format_percent(value);
  char text[32];
  if (ends_with(name, "bleu")) std::snprintf(text, sizeof text, "%.2f", 100 * value);
  else std::snprintf(text, sizeof text, "%#.4g", value);
  return text;
}

std::string nearest_name(const std::string& got, const std::vector<std::string>& known) {
  const size_t allowed = std::max<size_t>(1, got.size() / 3);
  std::string nearest;
  size_t best = allowed + 1;
  for (const std::string& name : known) {
    const size_t distance = edit_distance(got, name);
    if (distance < best) best = distance, nearest = name;
  }
  return nearest;
}

std::string known_names_hint(const std::string& got, const std::vector<std::string>& known) {
  std::string list;
  for (const std::string& name : known) list += (list.empty() ? "" : ", ") + name;
  const std::string nearest = nearest_name(got, known);
  return " (" + (nearest.empty() ? "" : "did you mean '" + nearest + "'? ") + "known: " + list + ")";
}

void check_data_exists(const std::string& flag, const std::string& path, const std::string& fetch_part) {
  std::error_code ignored;
  HEADROOM_CHECK(std::filesystem::exists(path, ignored), "[data] ", flag, " ", path,
                 " does not exist; scripts/fetch-data ", fetch_part, " fetches the default data, or pass ", flag,
                 " with your own");
}

int run_main(const Flags& flags, const std::function<int()>& body) {
  try {
    return body();
  } catch (const UsageError& e) {
    std::fprintf(stderr, "error: %s\nrun '%s --help' for the flags\n", e.what(), flags.program().c_str());
    return 2;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "error: out of memory; smaller sizes (batch, model, data) need less\n");
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}

}  // namespace headroom::examples
