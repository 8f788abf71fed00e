// The umbrella header alone: a translation unit that includes only
// headroom.h builds a tensor and prints it to a std::ostringstream and to
// std::cout.  It is compiled without the tests' precompiled header
// (tests/CMakeLists.txt), and the printing functions come before doctest's
// header, so only headroom.h can have declared what they use.
#include "headroom/headroom.h"

namespace {

std::string printed(const headroom::Tensor& t) {
  std::ostringstream os;
  os << t;
  return os.str();
}

// What `std::cout << t << std::endl` writes, captured by swapping std::cout's buffer.
std::string printed_to_cout(const headroom::Tensor& t) {
  std::ostringstream captured;
  std::streambuf* previous = std::cout.rdbuf(captured.rdbuf());
  std::cout << t << std::endl;
  std::cout.rdbuf(previous);
  return captured.str();
}

}  // namespace

#include <doctest/doctest.h>

TEST_CASE("headroom.h alone: a tensor prints to a std::ostringstream and to std::cout") {
  const headroom::Tensor t = headroom::Tensor::from_vector<float>({1, 2, 3, 4}, {2, 2});
  CHECK(printed(t) == "tensor([[1, 2],\n        [3, 4]], shape=(2,2), dtype=f32)");
  CHECK(printed(t) == t.str());
  CHECK(printed_to_cout(t) == t.str() + "\n");
}
