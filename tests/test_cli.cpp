// Flags of the training binaries (examples/common/cli.h) and the attention
// option lists of model_options.h.
#include "headroom/examples/common/cli.h"

#include <unistd.h>

#include <cstdio>
#include <functional>
#include <new>
#include <vector>

#include "headroom/examples/common/model_options.h"

#include "helpers.h"

using namespace headroom;
using namespace headroom::examples;
using headroom::testing::parse_command_line;

namespace {

struct Parsed {
  std::string attn = "mha";
  int64_t steps = 100;
  double lr = 3e-4, dropout = 0;
  int threads = 0;
  uint64_t seed = 1;
  bool resume = false;
  Flags flags{"prog", "test program"};
  Parsed() {
    flags.add("attn", &attn, "attention type");
    flags.add("steps", &steps, "steps", {1, 1000});
    flags.add("lr", &lr, "learning rate", {0, 10, End::open, End::closed});
    flags.add("dropout", &dropout, "dropout", {0, 1, End::closed, End::open});
    flags.add("threads", &threads, "threads", {0, 1024});
    flags.add("seed", &seed, "seed", {0, UINT64_MAX});
    flags.add("resume", &resume, "resume");
  }
  bool parse(std::vector<std::string> args) { return parse_command_line(flags, std::move(args)); }
};

// What `fn` writes to stderr.
std::string captured_stderr(const std::function<void()>& fn) {
  std::FILE* file = std::tmpfile();
  std::fflush(stderr);
  const int saved = dup(STDERR_FILENO);
  dup2(fileno(file), STDERR_FILENO);
  fn();
  std::fflush(stderr);
  dup2(saved, STDERR_FILENO);
  close(saved);
  std::string text;
  std::rewind(file);
  for (int c; (c = std::fgetc(file)) != EOF;) text += static_cast<char>(c);
  std::fclose(file);
  return text;
}

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
  CHECK(p.parse({"--seed", "18446744073709551615", "--threads", "1024", "--lr", "10", "--dropout", "0"}));
  CHECK(p.seed == UINT64_MAX);
  CHECK(p.threads == 1024);
}

TEST_CASE("Flags usage lists every flag with its default") {
  Parsed p;
  std::string usage = p.flags.usage();
  CHECK(usage.find("--steps X") != std::string::npos);
  CHECK(usage.find("(default: 100, range [1, 1000])") != std::string::npos);
  CHECK(usage.find("(default: 0.0003, range (0, 10])") != std::string::npos);
  CHECK(usage.find("(default: 0, range [0, 1))") != std::string::npos);
  CHECK(usage.find("(default: mha)") != std::string::npos);
  CHECK_FALSE(p.parse({"--help"}));
}

TEST_CASE("Flags reject unknown flags, missing and malformed values") {
  CHECK_THROWS_HEADROOM(Parsed().parse({"--stepz", "3"}), "unknown flag --stepz (did you mean --steps?)");
  CHECK_THROWS_HEADROOM(Parsed().parse({"--steps"}), "--steps needs a value");
  CHECK_THROWS_HEADROOM(Parsed().parse({"--steps", "3x"}), "--steps expects an integer in [1, 1000], got '3x'");
  CHECK_THROWS_HEADROOM(Parsed().parse({"--lr", "fast"}), "--lr expects a number in (0, 10], got 'fast'");
  CHECK_THROWS_HEADROOM(Parsed().parse({"--resume=yes"}), "--resume takes no value");
  CHECK_THROWS_HEADROOM(Parsed().parse({"extra"}), "unexpected argument 'extra'");
}

TEST_CASE("Flags refuse a flag given twice instead of keeping the last") {
  CHECK_THROWS_HEADROOM(Parsed().parse({"--steps", "5", "--steps", "7"}),
                        "flag --steps is given twice (5, then 7); give it once");
  CHECK_THROWS_HEADROOM(Parsed().parse({"--resume", "--resume"}), "flag --resume is given twice; give it once");
}

TEST_CASE("Flags restore a stored value with the flag's checks, describe a derived default, and drop a flag") {
  Parsed p;
  p.flags.restore("steps", "40");
  CHECK(p.steps == 40);
  CHECK(p.flags.is_settled("steps"));
  CHECK_FALSE(p.flags.was_set("steps"));
  CHECK_THROWS_HEADROOM(p.flags.restore("steps", "4000"), "--steps expects an integer in [1, 1000], got '4000'");
  p.flags.restore("resume", "true");
  CHECK(p.resume);
  CHECK_THROWS_HEADROOM(p.flags.restore("resume", "yes"), "--resume is a switch, true or false, got 'yes'");
  p.flags.describe_default("lr", "a tenth of something");
  CHECK(p.flags.usage().find("(default: a tenth of something, range (0, 10])") != std::string::npos);
  p.flags.remove("attn");
  CHECK_FALSE(p.flags.declares("attn"));
  CHECK_THROWS_HEADROOM(p.parse({"--attn", "moh"}), "unknown flag --attn");
}

TEST_CASE("Flags name the nearest flag of a misspelt one, and only a likely typo") {
  auto message_of = [](std::vector<std::string> args) {
    try {
      Parsed().parse(std::move(args));
    } catch (const UsageError& e) { return std::string(e.what()); }
    return std::string("no error");
  };
  CHECK(message_of({"--atn", "moh"}) == "unknown flag --atn (did you mean --attn?)");
  CHECK(message_of({"--sed=3"}) == "unknown flag --sed (did you mean --seed?)");
  CHECK(message_of({"--hlp"}) == "unknown flag --hlp (did you mean --help?)");
  CHECK(message_of({"--temperature", "1"}) == "unknown flag --temperature");
}

TEST_CASE("run_main maps usage errors to status 2 and other errors to 1") {
  Parsed p;
  CHECK(run_main(p.flags, [] { return 0; }) == 0);
  CHECK(run_main(p.flags, []() -> int { throw UsageError("bad flag"); }) == 2);
  CHECK(run_main(p.flags, []() -> int { HEADROOM_FAIL("[x] broken"); }) == 1);
}

TEST_CASE("run_main prints a usage error alone with where the flags are, not the whole usage") {
  Parsed p;
  int status = 0;
  const std::string message = captured_stderr([&] {
    status = run_main(p.flags, [&] { return p.parse({"--atn", "moh"}) ? 0 : 3; });
  });
  CHECK(status == 2);
  CHECK(message == "error: unknown flag --atn (did you mean --attn?)\nrun 'prog --help' for the flags\n");
}

TEST_CASE("Flags refuse values outside the declared range, including ones that do not fit the type") {
  struct Bad {
    std::string flag, value;
  };
  const Bad bad[] = {
      {"steps", "0"},                     // below the range
      {"steps", "1001"},                  // above it
      {"steps", "-1"},                    // negative
      {"steps", "99999999999999999999"},  // past int64
      {"steps", " 5"},                    // spaces are not digits
      {"steps", "+5"},                    // nor is a sign other than '-'
      {"steps", "5.0"},                   // a real is not an integer
      {"threads", "4294967297"},          // 2^32 + 1: would truncate to 1 as an int
      {"threads", "2147483647"},          // fits an int, not the range
      {"seed", "-1"},                     // strtoull would wrap it to 2^64 - 1
      {"seed", "18446744073709551616"},   // 2^64
      {"lr", "0"},                        // the open end
      {"lr", "nan"},                      // NaN compares false with every bound
      {"lr", "inf"},                      // past the finite end
      {"lr", "1e-400"},                   // underflows
      {"lr", "0x1p-3"},                   // hexadecimal: reals are decimal
      {"lr", " 0.1"},                     // spaces
      {"lr", "+0.1"},                     // a '+'
      {"dropout", "1"},                   // the open end
      {"dropout", "-0.1"},                // negative
  };
  for (const Bad& b : bad) {
    CAPTURE(b.flag);
    CAPTURE(b.value);
    Parsed p;
    CHECK_THROWS_HEADROOM(p.parse({"--" + b.flag, b.value}), ("--" + b.flag + " expects ").c_str());
    CHECK_THROWS_AS(p.parse({"--" + b.flag, b.value}), UsageError);
  }
  Parsed p;
  CHECK_THROWS_HEADROOM(p.parse({"--threads", "4294967297"}),
                        "--threads expects an integer in [0, 1024], got '4294967297'");
  CHECK(p.threads == 0);  // a refused value leaves the variable alone
}

TEST_CASE("Flags refuse a default outside the declared range when the flag is declared") {
  int64_t steps = 0;
  double rate = 0;
  Flags flags("prog", "test program");
  CHECK_THROWS_HEADROOM(flags.add("steps", &steps, "steps", {1, 10}),
                        "default 0 of --steps is outside its range [1, 10]");
  CHECK_THROWS_HEADROOM(flags.add("rate", &rate, "rate", {0, 1, End::open, End::closed}), "outside its range (0, 1]");
}

TEST_CASE("parse_int64 and parse_uint64 take whole decimal integers within the type only") {
  CHECK(parse_int64("-42") == -42);
  CHECK(parse_int64("9223372036854775807") == INT64_MAX);
  CHECK(parse_int64("-9223372036854775808") == INT64_MIN);
  for (const char* bad : {"", "-", "9223372036854775808", "12 ", " 12", "+12", "0x10", "1e3", "--1"}) {
    CAPTURE(bad);
    CHECK_FALSE(parse_int64(bad).has_value());
  }
  CHECK(parse_uint64("18446744073709551615") == UINT64_MAX);
  CHECK_FALSE(parse_uint64("-1").has_value());
  CHECK_FALSE(parse_uint64("18446744073709551616").has_value());
}

TEST_CASE("split_list keeps the non-empty items of a comma-separated list") {
  CHECK(split_list("a,,b,") == std::vector<std::string>{"a", "b"});
  CHECK(split_list("").empty());
}

TEST_CASE("check_product refuses products over the limit without overflowing") {
  CHECK_NOTHROW(check_product("--batch", 4096, "--context", 4096, int64_t(1) << 24, "tokens per batch"));
  CHECK_THROWS_HEADROOM(check_product("--batch", 4097, "--context", 4096, int64_t(1) << 24, "tokens per batch"),
                        "--batch (4097) times --context (4096) is over the limit of 16777216 tokens per batch");
  // INT64_MAX × INT64_MAX would overflow if it were multiplied.
  CHECK_THROWS_AS(check_product("--a", INT64_MAX, "--b", INT64_MAX, INT64_MAX, "things"), UsageError);
}

TEST_CASE("run_main reports an allocation failure without the standard library's text") {
  Parsed p;
  int status = 0;
  std::string message = captured_stderr([&] { status = run_main(p.flags, []() -> int { throw std::bad_alloc(); }); });
  CHECK(status == 1);
  CHECK(message.find("error: out of memory") == 0);
  CHECK(message.find("std::") == std::string::npos);
}

TEST_CASE("parse_options refuses a key given twice instead of keeping the last") {
  CHECK(parse_options("a=1,b=2") == StringMap{{"a", "1"}, {"b", "2"}});
  CHECK_THROWS_HEADROOM(parse_options("k=1,k=2", "--attn-opt"), "--attn-opt gives the key 'k' twice");
  CHECK_THROWS_AS(parse_options("layer.0.type=mha,layer.0.type=moh", "--attn-set"), UsageError);
  CHECK_THROWS_HEADROOM(parse_options("=1"), "entries are key=value");
}

TEST_CASE("ModelOptions refuse sizes whose weights exceed the limit before anything is allocated") {
  ModelOptions m;
  m.dim = kMaxDim, m.ffn = kMaxFfn, m.layers = kMaxLayers;
  CHECK_THROWS_HEADROOM(m.config(ModelStacks::encoder_decoder), "weights per stack, over the limit of 2147483648");
  m.dim = 1 << 20;  // past the flag's range: refused before the product can overflow
  CHECK_THROWS_HEADROOM(m.config(ModelStacks::encoder_decoder), "must be at most 16384");
}

TEST_CASE("ModelOptions refuse a misspelt method or option, naming the nearest and the known ones") {
  ModelOptions m;
  m.attn = "mhaa";
  CHECK_THROWS_HEADROOM(m.config(ModelStacks::encoder_decoder),
                        "unknown attention type 'mhaa' (did you mean 'mha'? known: mha, moa, moh, mae)");
  m.attn = "moh", m.attn_opt = "shared_head=2";
  CHECK_THROWS_HEADROOM(m.config(ModelStacks::encoder_decoder),
                        "moh attention has no option 'shared_head' (did you mean 'shared_heads'?");
  m.attn_opt = "", m.attn_set = "layer.1.option.routed_kk=2";
  CHECK_THROWS_HEADROOM(m.config(ModelStacks::encoder_decoder),
                        "--attn-set layer.1.option.routed_kk=2: moh attention has no option 'routed_kk'");
  m.attn_set = "layer.0.type=mha,layer.0.option.kv_heads=2";  // an MHA option on the layer that is MHA
  CHECK(m.config(ModelStacks::encoder_decoder).attention.resolve(0, AttentionRole::decoder_self).type == "mha");
}

TEST_CASE("ModelOptions refuse --attn-set keys that name a layer or role the model lacks, or no value") {
  struct Bad {
    ModelStacks stacks;
    std::string set, expected;
  };
  const std::string lm = "; the model has decoder_self attention in layers 0 to 1";
  const Bad bad[] = {
      {ModelStacks::decoder, "layer.7.type=mha", "--attn-set layer.7.type=mha: layer 7 is past the last layer" + lm},
      {ModelStacks::decoder, "cross.type=mha", "--attn-set cross.type=mha: this model has no cross attention" + lm},
      {ModelStacks::decoder, "cross.option.no_such=1", "this model has no cross attention"},
      {ModelStacks::decoder, "encoder_self.option.kv_heads=2", "this model has no encoder_self attention"},
      {ModelStacks::encoder, "decoder_self.layer.0.type=mha",
       "this model has no decoder_self attention; the model has encoder_self attention in layers 0 to 1"},
      {ModelStacks::encoder_decoder, "layer.-1.type=mha", "a layer index is written 0, 1, 2, ..., got '-1'"},
      {ModelStacks::encoder_decoder, "layer.01.type=mha", "got '01'"},
      {ModelStacks::encoder_decoder, "layer..type=mha", "got ''"},
      {ModelStacks::encoder_decoder, "cross.layer.2.type=mha",
       "layer 2 is past the last layer; the model has encoder_self attention in layers 0 to 1, decoder_self "
       "attention in layers 0 to 1, cross attention in layers 0 to 1"},
      {ModelStacks::encoder_decoder, "layer.0.type=", "--attn-set gives the key 'layer.0.type' no value"},
      {ModelStacks::encoder_decoder, "layer.0.kind=mha", "expected a key [<role>.][layer.<i>.]type or"},
      {ModelStacks::encoder_decoder, "encoder_self.cross.type=mha", "expected a key"},
  };
  for (const Bad& b : bad) {
    CAPTURE(b.set);
    ModelOptions m;
    m.layers = 2, m.attn_set = b.set;
    CHECK_THROWS_HEADROOM(m.config(b.stacks), b.expected.c_str());
    CHECK_THROWS_AS(m.config(b.stacks), UsageError);
  }
  ModelOptions m;
  m.layers = 2, m.attn_set = "cross.type=mha,encoder_self.layer.1.option.kv_heads=2,layer.1.type=moh";
  const ModelConfig c = m.config(ModelStacks::encoder_decoder);
  CHECK(c.attention.resolve(1, AttentionRole::decoder_self).type == "moh");
  CHECK(c.encoder_layers == 2);
  m.attn_set = "decoder_self.layer.1.type=moh";
  CHECK(m.config(ModelStacks::decoder).encoder_layers == 0);
  CHECK_THROWS_HEADROOM(parse_options("kv_heads="), "--attn-opt gives the key 'kv_heads' no value");
}

TEST_CASE("parse_byte_size reads a decimal number of bytes, KiB, MiB, GiB or TiB") {
  CHECK(parse_byte_size("4GiB") == uint64_t(4) << 30);
  CHECK(parse_byte_size("1.5GiB") == uint64_t(3) << 29);
  CHECK(parse_byte_size("512MiB") == uint64_t(512) << 20);
  CHECK(parse_byte_size("1000000") == 1000000u);
  CHECK(parse_byte_size("64B") == 64u);
  for (const char* bad :
       {"", "GiB", "4XB", "4GB", "4 GiB", " 4GiB", "0", "0.1B", "-1GiB", "0x10", "1e3KiB", "2000000TiB"})
    CHECK_MESSAGE(!parse_byte_size(bad), std::string(bad));
}

TEST_CASE("ModelOptions refuse a size option past its limit, naming the flag that set it") {
  ModelOptions m;
  m.attn_opt = "head_dim=10000000";
  CHECK_THROWS_HEADROOM(m.config(ModelStacks::decoder),
                        "--attn-opt head_dim=10000000: head_dim expects an integer in [0, 16384]");
  m.attn = "moa", m.attn_opt = "experts=1000000";
  CHECK_THROWS_HEADROOM(m.config(ModelStacks::decoder), "experts expects an integer in [1, 1024]");
  m.attn_opt = "k=x";
  CHECK_THROWS_HEADROOM(m.config(ModelStacks::decoder), "k expects an integer in [1, 1024]");
  m.attn = "mha", m.attn_opt = "", m.attn_set = "layer.1.option.kv_heads=2000";
  CHECK_THROWS_HEADROOM(m.config(ModelStacks::decoder),
                        "--attn-set kv_heads=2000: kv_heads expects an integer in [0, 1024]");
  m.attn_set = "layer.1.type=moh,layer.1.option.shared_heads=-1";  // -1: the method's default
  CHECK_NOTHROW(m.config(ModelStacks::decoder));
}

TEST_CASE("nearest_name offers a known name only when it is a likely typo") {
  const std::vector<std::string> known{"shared_heads", "routed_k", "kv_heads"};
  CHECK(nearest_name("shared_head", known) == "shared_heads");
  CHECK(nearest_name("routd_k", known) == "routed_k");
  CHECK(nearest_name("temperature", known).empty());
  CHECK(known_names_hint("xyz", {"a", "b"}) == " (known: a, b)");
}

TEST_CASE("the output formats: one per kind of value") {
  CHECK(format_count(0) == "0");
  CHECK(format_count(999) == "999");
  CHECK(format_count(1234567) == "1,234,567");
  CHECK(format_count(-1000) == "-1,000");
  CHECK(format_si(843) == "843");
  CHECK(format_si(12345) == "12.3k");
  CHECK(format_si(4006020) == "4.01M");
  CHECK(format_si(999.7) == "1k");
  CHECK(format_mib(46093312) == "44.0 MiB");
  CHECK(format_seconds(83.27) == "83.3 s");
  CHECK(format_seconds(0.0432) == "0.04 s");
  CHECK(format_percent(0.5) == "50.00%");
  CHECK(format_metric("loss", 2.61234) == "2.612");
  CHECK(format_metric("loss", 5) == "5.000");
  CHECK(format_metric("accuracy", 0.6848) == "68.48%");
  CHECK(format_metric("test_bleu", 0.0580082) == "5.80");
}

TEST_CASE("settle_train_options derives --warmup and --eval-every from --steps and refuses bad combinations") {
  int64_t epochs = 0;  // train_vit's --epochs, declared in the second form
  auto settled = [&](std::vector<std::string> args, bool with_epochs = false) {
    Flags flags("test", "train flags");
    TrainOptions o;
    add_train_flags(flags, o);
    if (with_epochs) flags.add("epochs", &epochs, "epochs", {0, 1000});
    parse_command_line(flags, std::move(args));
    settle_train_options(flags, o);
    return o;
  };
  TrainOptions o = settled({"--steps", "200"});
  CHECK(o.warmup == 20);      // a tenth of the steps, below the default 100
  CHECK(o.eval_every == 40);  // five evaluations, not one at 250
  o = settled({"--steps", "5000"});
  CHECK(o.warmup == 100);
  CHECK(o.eval_every == 250);
  CHECK(settled({"--steps", "200", "--warmup", "150"}).warmup == 150);  // given: kept
  CHECK_THROWS_HEADROOM(settled({"--steps", "5", "--warmup", "10"}), "--warmup 10 must be below --steps 5");
  CHECK_THROWS_HEADROOM(settled({"--steps", "10", "--eval-every", "20"}), "--eval-every 20 is past --steps 10");
  CHECK_THROWS_HEADROOM(settled({"--resume", "--eval-only"}), "exclude each other");
  CHECK_THROWS_HEADROOM(settled({"--eval-only", "--ckpt", ""}), "need --ckpt DIR");
  // --epochs sets the steps after the data is read: the schedule is not settled against --steps yet.
  o = settled({"--epochs", "5", "--eval-every", "2000"}, true);
  CHECK(o.eval_every == 2000);
  CHECK(o.warmup == 100);
  CHECK(settled({"--epochs", "0", "--steps", "200"}, true).warmup == 20);
  CHECK_THROWS_HEADROOM(settled({"--epochs", "5", "--steps", "100"}, true),
                        "--epochs 5 sets the number of steps; drop --steps 100");
  o.steps = 4300;  // what run_vit sets: 5 epochs of 860 steps
  settle_schedule(nullptr, o);
  CHECK(o.eval_every == 2000);
  o.steps = 1000;
  CHECK_THROWS_HEADROOM(settle_schedule(nullptr, o), "--eval-every 2000 is past --steps 1000");
}
