// Flags of the training binaries (examples/common/cli.h).
#include "headroom/examples/common/cli.h"

#include <vector>

#include "helpers.h"

using namespace headroom;
using namespace headroom::examples;

namespace {

struct Parsed {
  std::string attn = "mha";
  int64_t steps = 100;
  double lr = 3e-4;
  bool resume = false;
  Flags flags{"prog", "test program"};
  Parsed() {
    flags.add("attn", &attn, "attention type");
    flags.add("steps", &steps, "steps");
    flags.add("lr", &lr, "learning rate");
    flags.add("resume", &resume, "resume");
  }
  bool parse(std::vector<std::string> args) {
    args.insert(args.begin(), "prog");
    std::vector<char*> argv;
    for (auto& arg : args) argv.push_back(arg.data());
    return flags.parse(static_cast<int>(argv.size()), argv.data());
  }
};

}  // namespace

TEST_CASE("Flags parse values, inline values and switches, and keep defaults") {
  Parsed p;
  CHECK(p.parse({"--attn", "moh", "--steps=7", "--resume"}));
  CHECK(p.attn == "moh");
  CHECK(p.steps == 7);
  CHECK(p.lr == doctest::Approx(3e-4));
  CHECK(p.resume);
  CHECK(p.flags.was_set("steps"));
  CHECK_FALSE(p.flags.was_set("lr"));
  CHECK(p.flags.values()[1] == std::make_pair(std::string("steps"), std::string("7")));
}

TEST_CASE("Flags usage lists every flag with its default") {
  Parsed p;
  std::string usage = p.flags.usage();
  CHECK(usage.find("--steps X") != std::string::npos);
  CHECK(usage.find("(default: 100)") != std::string::npos);
  CHECK(usage.find("(default: mha)") != std::string::npos);
  CHECK_FALSE(p.parse({"--help"}));
}

TEST_CASE("Flags reject unknown flags, missing and malformed values") {
  CHECK_THROWS_HEADROOM(Parsed().parse({"--stepz", "3"}), "unknown flag --stepz");
  CHECK_THROWS_HEADROOM(Parsed().parse({"--steps"}), "--steps needs a value");
  CHECK_THROWS_HEADROOM(Parsed().parse({"--steps", "3x"}), "--steps expects an integer, got '3x'");
  CHECK_THROWS_HEADROOM(Parsed().parse({"--lr", "fast"}), "--lr expects a number");
  CHECK_THROWS_HEADROOM(Parsed().parse({"--resume=yes"}), "--resume takes no value");
  CHECK_THROWS_HEADROOM(Parsed().parse({"extra"}), "unexpected argument 'extra'");
}

TEST_CASE("run_main maps usage errors to status 2 and other errors to 1") {
  Parsed p;
  CHECK(run_main(p.flags, [] { return 0; }) == 0);
  CHECK(run_main(p.flags, []() -> int { throw UsageError("bad flag"); }) == 2);
  CHECK(run_main(p.flags, []() -> int { HEADROOM_FAIL("[x] broken"); }) == 1);
}
