#pragma once
// headroom::Error and HEADROOM_CHECK: the library reports every bad input by
// throwing; it never exits or aborts, so programs that embed it can recover.
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace headroom {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

namespace detail {
template <typename... Parts> std::string concat(const Parts&... parts) {
  std::ostringstream os;
  (os << ... << parts);
  return os.str();
}
[[noreturn]] void throw_error(const std::string& message, const char* file, int line);
}  // namespace detail

}  // namespace headroom

// HEADROOM_CHECK(cond, "[op] message ", value, ...): throws headroom::Error with
// the concatenated parts and file:line when cond is false.  The first part names
// the op in brackets, as in "[matmul] ...".
#define HEADROOM_CHECK(cond, ...)                                                                              \
  do {                                                                                                         \
    if (!(cond)) ::headroom::detail::throw_error(::headroom::detail::concat(__VA_ARGS__), __FILE__, __LINE__); \
  } while (0)

#define HEADROOM_FAIL(...) ::headroom::detail::throw_error(::headroom::detail::concat(__VA_ARGS__), __FILE__, __LINE__)
