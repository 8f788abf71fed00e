// The bad-input table of each binary: every class of bad flag or input file
// (malformed, out of range, too large for the type, negative, huge batch,
// repeated attention option, /dev/zero, a directory or FIFO as data, missing
// or invalid files, empty or mismatched datasets) run through the built
// binary.  Each must exit with 2 (a usage error, pointing to --help) or 1 (any
// other error), never by a signal or a hang, before training starts, with a
// message that names the problem and holds no standard-library text.
#ifdef HEADROOM_EXAMPLES_BIN_DIR

#include <sys/stat.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "helpers.h"

using headroom::testing::TempDir;

namespace {

struct BadInput {
  std::vector<std::string> args;
  int status;            // 2: usage error, 1: other error
  std::string expected;  // in stderr: the flag, the path or the problem
};

std::string shell_quoted(const std::string& text) {
  std::string out = "'";
  for (char c : text) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string file_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

// Text that says a standard-library exception reached the user.
const char* const kLeaks[] = {"std::",     "stoll",    "stoi",         "stoul",           "basic_string",
                              "bad_alloc", "vector::", "out_of_range", "invalid_argument"};

// `base` then `args`, where a flag of `args` replaces the same flag of `base`
// (a flag given twice is refused).
std::vector<std::string> command_line(std::vector<std::string> base, const std::vector<std::string>& args) {
  for (const std::string& arg : args) {
    auto found = std::find(base.begin(), base.end(), arg);
    if (arg.rfind("--", 0) == 0 && found != base.end()) base.erase(found, found + 2);  // the flag and its value
  }
  base.insert(base.end(), args.begin(), args.end());
  return base;
}

// Runs `binary` (in the run's folder, stdout discarded) on each row and checks
// its exit status and message.  A hang ends after 30 s with status 124.
void check_table(const std::string& binary, const std::vector<BadInput>& table, const TempDir& dir) {
  const std::string program = std::string(HEADROOM_EXAMPLES_BIN_DIR) + "/" + binary;
  REQUIRE(std::filesystem::exists(program));
  for (const BadInput& row : table) {
    std::string command = "cd " + shell_quoted(dir.path.string()) + " && timeout 30 " + shell_quoted(program);
    for (const std::string& arg : row.args) command += " " + shell_quoted(arg);
    command += " > /dev/null 2> stderr.txt";
    const int raw = std::system(command.c_str());
    const std::string message = file_text(dir.file("stderr.txt"));
    CAPTURE(command);
    CAPTURE(message);
    REQUIRE(WIFEXITED(raw));
    const int status = WEXITSTATUS(raw);  // the shell's: 128 + N for a signal, 124 for a timeout
    CHECK(status == row.status);
    CHECK(message.rfind("error: ", 0) == 0);
    CHECK(message.find(row.expected) != std::string::npos);
    if (row.status == 2) CHECK(message.find("\nrun '" + binary + " --help' for the flags\n") != std::string::npos);
    for (const char* leak : kLeaks) CHECK_MESSAGE(message.find(leak) == std::string::npos, leak);
  }
}

// The data every table shares, in one folder: a text, sentence pairs, IDX
// datasets (good, empty, other test image size, a FIFO or a device for the
// training images), a FIFO, a folder and files of invalid UTF-8.
struct BadInputData {
  TempDir dir;
  explicit BadInputData(const std::string& name) : dir(name) {
    std::string text, pairs;
    for (int i = 0; i < 200; ++i) text += "line " + std::to_string(i) + " of a small text to train on\n";
    dir.write("text.txt", text);
    for (int i = 0; i < 60; ++i) pairs += "number " + std::to_string(i) + "\tNummer " + std::to_string(i) + "\n";
    dir.write("pairs.tsv", pairs);
    dir.write("latin1.tsv", pairs +
                                "Gr\xfc\xdf"
                                "e\tGr\xc3\xbc\xc3\x9f"
                                "e\n");
    dir.write("latin1.txt", text + "caf\xe9\n");
    dir.write("notab.tsv", "one\tzwei\nno tab here\n");
    dir.write("empty.tsv", "");
    dir.write("same.tsv", "one\tone\ntwo\tzwei\ntwo\tzwei\n");
    dir.write("nosource.tsv", "one\teins\n\tzwei\n");
    dir.write("notarget.tsv", "one\teins\ntwo\t\n");
    dir.write("nul.tsv", std::string("one\teins\ntw\0o\tzwei\n", 19));
    dir.write("folder/readme", "not a .mo file");
    REQUIRE(mkfifo(dir.file("fifo").c_str(), 0600) == 0);
    write_idx_pair("fm", "train", 24, 8, 8);
    write_idx_pair("fm", "t10k", 8, 8, 8);
    write_idx_pair("fm0", "train", 0, 8, 8);
    write_idx_pair("fm0", "t10k", 0, 8, 8);
    write_idx_pair("fmdims", "train", 24, 8, 8);
    write_idx_pair("fmdims", "t10k", 8, 10, 10);
    write_idx_pair("fmfifo", "t10k", 8, 8, 8);
    write_idx_pair("fmfifo", "train", 24, 8, 8);
    std::filesystem::remove(dir.file("fmfifo/train-images-idx3-ubyte"));
    REQUIRE(mkfifo(dir.file("fmfifo/train-images-idx3-ubyte").c_str(), 0600) == 0);
    write_idx_pair("fmzero", "t10k", 8, 8, 8);
    write_idx_pair("fmzero", "train", 24, 8, 8);
    std::filesystem::remove(dir.file("fmzero/train-images-idx3-ubyte"));
    std::filesystem::create_symlink("/dev/zero", dir.file("fmzero/train-images-idx3-ubyte"));
    std::filesystem::create_directories(dir.file("no-classes"));
    // A class folder whose only "image" is a FIFO, which must be skipped unopened.
    dir.write("fifo-classes/a/notes.txt", "not an image");
    REQUIRE(mkfifo(dir.file("fifo-classes/a/fifo.png").c_str(), 0600) == 0);
    // Run folders that hold a run, in part: a fresh run into one is refused.
    dir.write("held-log/log.jsonl", "{}\n");
    dir.write("held-ckpt/checkpoint.safetensors", "a checkpoint");
    dir.write("held-prev/checkpoint.prev.safetensors", "a checkpoint");
    dir.write("held-compare/mha-seed1/log.jsonl", "{}\n");
  }

  static std::string idx(const std::vector<uint32_t>& shape, const std::string& data) {
    std::string header{0, 0, 8, static_cast<char>(shape.size())};
    for (uint32_t size : shape)
      for (int shift : {24, 16, 8, 0}) header += static_cast<char>((size >> shift) & 0xFF);
    return header + data;
  }

  void write_idx_pair(const std::string& folder, const std::string& part, uint32_t n, uint32_t h, uint32_t w) {
    std::string pixels(size_t(n) * h * w, '\x80'), labels;
    for (uint32_t i = 0; i < n; ++i) labels += static_cast<char>(i % 10);
    dir.write(folder + "/" + part + "-images-idx3-ubyte", idx({n, h, w}, pixels));
    dir.write(folder + "/" + part + "-labels-idx1-ubyte", idx({n}, labels));
  }
};

// Rows every training binary shares: its train and model flags.
std::vector<BadInput> shared_rows(const std::vector<std::string>& data) {
  auto with = [&](std::vector<std::string> args) { return command_line(data, args); };
  return {
      {with({"--steps", "abc"}), 2, "--steps expects an integer"},
      {with({"--steps", "0"}), 2, "--steps"},
      {with({"--steps", "99999999999999999999"}), 2, "--steps"},
      {with({"--warmup", "-1"}), 2, "--warmup"},
      {with({"--threads", "4294967297"}), 2, "--threads expects an integer in [0, 1024]"},
      {with({"--threads", "2147483647"}), 2, "--threads"},
      {with({"--threads", "-1"}), 2, "--threads"},
      {with({"--clip", "-1"}), 2, "--clip"},
      {with({"--lr", "nan"}), 2, "--lr"},
      {with({"--lr", "-0.1"}), 2, "--lr"},
      {with({"--lr", "0x1p-3"}), 2, "--lr expects a number in (0, 1e+06], got '0x1p-3'"},
      {with({"--weight-decay", "1e999"}), 2, "--weight-decay"},
      {with({"--seed", "-1"}), 2, "--seed"},
      {with({"--seed", "18446744073709551616"}), 2, "--seed"},
      {with({"--log-every", "0"}), 2, "--log-every"},
      {with({"--bcd-f", "0"}), 2, "--bcd-f"},
      {with({"--dim", "0"}), 2, "--dim"},
      {with({"--heads", "-4"}), 2, "--heads"},
      {with({"--dropout", "1"}), 2, "--dropout"},
      {with({"--dim", "16384", "--heads", "8", "--ffn", "65536", "--layers", "256"}), 2, "weights per stack"},
      {with({"--attn", "moh", "--attn-opt", "shared_heads=1,shared_heads=2"}), 2, "the key 'shared_heads' twice"},
      {with({"--attn-set", "layer.0.type=mha,layer.0.type=moh"}), 2, "the key 'layer.0.type' twice"},
      {with({"--attn-opt", "=1"}), 2, "--attn-opt entries are key=value"},
      {with({"--attn-opt", "head_dim=10000000"}), 2,
       "--attn-opt head_dim=10000000: head_dim expects an integer in [0, 16384]"},
      {with({"--attn", "moa", "--attn-opt", "experts=1000000"}), 2,
       "experts=1000000: experts expects an integer in [1, 1024]"},
      {with({"--attn", "mae", "--attn-opt", "gate_hidden=1000000"}), 2, "gate_hidden expects an integer in [0, 65536]"},
      {with({"--attn-set", "layer.0.option.kv_heads=99999"}), 2,
       "--attn-set kv_heads=99999: kv_heads expects an integer in [0, 1024]"},
      {with({"--max-memory", "4XB"}), 2, "--max-memory expects a size such as 4GiB, 512MiB or 1000000"},
      {with({"--max-memory", "1MiB"}), 2, "more than the 1.0 MiB of --max-memory 1MiB; lower --batch"},
      {with({"--no-such-flag"}), 2, "unknown flag --no-such-flag"},
      {with({"--steps"}), 2, "--steps needs a value"},
      {with({"--device", "cuda:99999"}), 1, "cuda:99999"},
      {with({"--resume"}), 1, "checkpoint.safetensors"},
  };
}

// Rows of the checks every training binary makes before it reads its data:
// flag combinations, method and option names.  `fifo` is passed as the data,
// so a row that got as far as reading it would fail with "is a FIFO" instead.
std::vector<BadInput> early_rows(const std::vector<std::string>& fifo_data) {
  auto with = [&](std::vector<std::string> args) { return command_line(fifo_data, args); };
  return {
      {with({"--steps", "5", "--warmup", "10"}), 2, "--warmup 10 must be below --steps 5"},
      {with({"--steps", "10", "--eval-every", "20"}), 2, "--eval-every 20 is past --steps 10"},
      {with({"--resume", "--eval-only"}), 2, "--resume and --eval-only exclude each other"},
      {with({"--attn", "mhaa"}), 2, "unknown attention type 'mhaa' (did you mean 'mha'? known: mha, moa, moh, mae)"},
      {with({"--attn", "moh", "--attn-opt", "shared_head=1"}), 2, "(did you mean 'shared_heads'? known: "},
      {with({"--attn-set", "layer.0.option.kv_head=1"}), 2, "mha attention has no option 'kv_head'"},
      // --attn-set keys the model would ignore, and flags that do not apply to the run.
      {with({"--attn-set", "layer.7.type=mha"}), 2, "--attn-set layer.7.type=mha: layer 7 is past the last layer"},
      {with({"--attn-set", "layer.-1.type=mha"}), 2, "a layer index is written 0, 1, 2, ..., got '-1'"},
      {with({"--attn-set", "layer.01.type=mha"}), 2, "a layer index is written 0, 1, 2, ..., got '01'"},
      {with({"--attn-set", "layer.0.type="}), 2, "--attn-set gives the key 'layer.0.type' no value"},
      {with({"--bcd-f", "50"}), 2, "--bcd-f does not apply to train_"},
      {with({"--mae-joint"}), 2, "--mae-joint does not apply to train_"},
      {with({"--gate-lr", "0.1"}), 2, ": it sets MAE's training, and no layer is MAE"},
      {with({"--tf32"}), 2, "--tf32 does not apply to train_"},
      {with({"--overwrite", "--ckpt", "held-log", "--resume"}), 2, "--resume continues the run that it would replace"},
      {with({"--ckpt", "held-log"}), 2,
       "the run folder held-log already holds a run (log.jsonl) that this fresh run would overwrite; pass --resume "
       "to continue it, --overwrite to replace it"},
      {with({"--ckpt", "held-ckpt"}), 2, "the run folder held-ckpt already holds a run (checkpoint.safetensors)"},
      {with({"--ckpt", "held-prev"}), 2, "held-prev already holds a run (checkpoint.prev.safetensors)"},
  };
}

// Runs the early rows of `binary`.  The FIFO data is what shows that no data
// was read; the time bound (a row takes about 0.05 s alone) only catches a
// check that waits for training, with room for a loaded 2-core CI machine.
void check_early_rows(const std::string& binary, const std::vector<std::string>& fifo_data, const TempDir& dir) {
  for (const BadInput& row : early_rows(fifo_data)) {
    const auto start = std::chrono::steady_clock::now();
    check_table(binary, {row}, dir);
    CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() < 5);
  }
}

void append(std::vector<BadInput>& table, const std::vector<BadInput>& rows) {
  table.insert(table.end(), rows.begin(), rows.end());
}

// The rows that do not pass `flag`.
std::vector<BadInput> without_flag(const std::vector<BadInput>& rows, const std::string& flag) {
  std::vector<BadInput> kept;
  for (const BadInput& row : rows)
    if (std::find(row.args.begin(), row.args.end(), flag) == row.args.end()) kept.push_back(row);
  return kept;
}

// Rows of train_lm and compare --task lm: the LM flags and --data files.
std::vector<BadInput> lm_rows(const TempDir& dir) {
  const std::string fifo = dir.file("fifo"), folder = dir.file("folder"), missing = dir.file("missing.txt");
  const std::string text = dir.file("text.txt");
  return {
      {{"--data", text, "--batch", "4611686018427387904"}, 2, "--batch expects an integer in [1, 65536]"},
      {{"--data", text, "--batch", "65536", "--context", "65536"}, 2, "tokens per batch"},
      {{"--data", text, "--batch", "65536", "--context", "256"}, 2, "the run needs about"},
      {{"--data", text, "--context", "0"}, 2, "--context"},
      {{"--data", text, "--eval-tokens", "-1"}, 2, "--eval-tokens"},
      {{"--data", text, "--generate", "-5"}, 2, "--generate"},
      {{"--data", text, "--generate", "5", "--prompt", ""}, 2, "--prompt"},
      {{"--data", text, "--valid-fraction", "1"}, 2, "--valid-fraction"},
      {{"--data", text, "--temperature", "0"}, 2, "--temperature"},
      {{"--data", text, "--top-k", "-1"}, 2, "--top-k"},
      {{"--data", "/dev/zero"}, 1, "/dev/zero is a character device"},
      {{"--data", folder}, 1, folder + " is a directory"},
      {{"--data", fifo}, 1, fifo + " is a FIFO"},
      {{"--data", missing}, 1, missing + " does not exist; scripts/fetch-data lm fetches the default data"},
      {{"--data", dir.file("latin1.txt")}, 1, "invalid UTF-8"},
      {{"--data", text, "--temperature", "0.5"}, 2, "--temperature does not apply to "},
      {{"--data", text, "--top-k", "5"}, 2, "--top-k does not apply to "},
      {{"--data", text, "--prompt", "Q:"}, 2, ": it shapes the sample of --generate N, and --generate is 0"},
      {{"--data", text, "--attn-set", "cross.type=mha"}, 2, "--attn-set cross.type=mha: this model has no cross"},
      {{"--data", text, "--attn-set", "encoder_self.option.kv_heads=2"},
       2,
       "this model has no encoder_self attention; the model has decoder_self attention in layers 0 to 1"},
  };
}

}  // namespace

TEST_CASE("bad inputs: train_lm exits 2 or 1 with a clear message for every bad flag and data file") {
  BadInputData data("bad_lm");
  std::vector<BadInput> table = shared_rows({"--data", data.dir.file("text.txt")});
  append(table, lm_rows(data.dir));
  check_table("train_lm", table, data.dir);
  check_early_rows("train_lm", {"--data", data.dir.file("fifo")}, data.dir);
}

// `bytes` with `from` (which must occur) replaced by `to`, padded with spaces
// (JSON whitespace after a token) to the same length: an edit that keeps every
// offset of a safetensors file.
std::string same_length_edit(const std::string& bytes, const std::string& from, std::string to) {
  const size_t at = bytes.find(from);
  REQUIRE(at != std::string::npos);
  REQUIRE(to.size() <= from.size());
  to.append(from.size() - to.size(), ' ');
  return std::string(bytes).replace(at, from.size(), to);
}

TEST_CASE("bad inputs: train_lm refuses a checkpoint whose header or data was edited, or whose checksum was deleted") {
  BadInputData data("bad_ckpt");
  const std::string program = std::string(HEADROOM_EXAMPLES_BIN_DIR) + "/train_lm";
  const std::vector<std::string> tiny{"--data",        data.dir.file("text.txt"),
                                      "--dim",         "16",
                                      "--heads",       "2",
                                      "--ffn",         "32",
                                      "--layers",      "1",
                                      "--context",     "16",
                                      "--batch",       "2",
                                      "--eval-tokens", "64",
                                      "--threads",     "1"};
  std::string command = "cd " + shell_quoted(data.dir.path.string()) + " && " + shell_quoted(program);
  for (const std::string& arg : tiny) command += " " + shell_quoted(arg);
  REQUIRE(std::system((command + " --steps 2 --ckpt trained > /dev/null").c_str()) == 0);
  const std::string bytes = file_text(data.dir.file("trained/checkpoint.safetensors"));
  const size_t data_key = bytes.find(R"("headroom.data_crc32":")"),
               header_key = bytes.find(R"("headroom.header_crc32":")");
  REQUIRE(data_key != std::string::npos);
  REQUIRE(header_key != std::string::npos);
  const size_t entry = std::string(R"("headroom.data_crc32":"00000000",)").size();  // with its comma
  std::string flipped = bytes;
  flipped.back() = static_cast<char>(flipped.back() ^ 0x10);  // one bit of the last tensor's data
  const std::vector<std::pair<std::string, std::string>> copies{
      {"step", same_length_edit(bytes, R"("train.step":"2")", R"("train.step":"1")")},
      {"seed", same_length_edit(bytes, R"("train.seed":"1")", R"("train.seed":"2")")},
      {"activation", same_length_edit(bytes, R"("model.activation":"gelu")", R"("model.activation":"relu")")},
      {"positions", same_length_edit(bytes, R"("model.positions":"sinusoidal")", R"("model.positions":"learned")")},
      {"no-data-crc", same_length_edit(bytes, bytes.substr(data_key, entry), "")},
      {"no-header-crc", same_length_edit(bytes, bytes.substr(header_key, entry + 2), "")},
      {"flipped", flipped},
  };
  for (const auto& [name, text] : copies) data.dir.write(name + "/checkpoint.safetensors", text);
  auto resume = [&](const std::string& dir) {
    std::vector<std::string> args = tiny;
    args.insert(args.end(), {"--ckpt", dir, "--resume", "--steps", "4"});
    return args;
  };
  const std::string corrupt_header = "the header is corrupt: its CRC-32 is ";
  check_table("train_lm",
              {
                  {resume("step"), 1, corrupt_header},
                  {resume("seed"), 1, corrupt_header},
                  {resume("activation"), 1, corrupt_header},
                  {resume("positions"), 1, corrupt_header},
                  {resume("no-data-crc"), 1, corrupt_header},
                  {resume("no-header-crc"), 1,
                   "no-header-crc/checkpoint.safetensors is a headroom training checkpoint without the checksums "
                   "save_safetensors writes"},
                  {resume("flipped"), 1, "the tensor data is corrupt: its CRC-32 is "},
              },
              data.dir);
}

TEST_CASE("bad inputs: train_mt exits 2 or 1 with a clear message for every bad flag and data file") {
  BadInputData data("bad_mt");
  const std::string pairs = data.dir.file("pairs.tsv"), fifo = data.dir.file("fifo");
  const std::vector<std::string> small{"--data", pairs, "--valid-pairs", "8", "--test-pairs", "8"};
  auto with = [&](std::vector<std::string> args) { return command_line(small, args); };
  std::vector<BadInput> table = shared_rows(small);
  append(table, {
                    {with({"--batch", "0"}), 2, "--batch"},
                    {with({"--batch", "9223372036854775807"}), 2, "--batch"},
                    {with({"--batch", "65536", "--max-tokens", "4096"}), 2, "tokens per batch"},
                    {with({"--batch", "65536", "--max-tokens", "256"}), 2, "the run needs about"},
                    {with({"--max-tokens", "-1"}), 2, "--max-tokens"},
                    {with({"--beam", "0"}), 2, "--beam"},
                    {with({"--label-smoothing", "1"}), 2, "--label-smoothing"},
                    {with({"--test-pairs", "0"}), 2, "--test-pairs"},
                    {with({"--bleu-sentences", "0"}), 2, "--bleu-sentences"},
                    {with({"--eval-pairs", "0"}), 2, "--eval-pairs"},
                    {with({"--bpe-merges", "99999999"}), 2, "--bpe-merges"},
                    {with({"--attn-opt", "kv_heads=1,kv_heads=2"}), 2, "the key 'kv_heads' twice"},
                    {with({"--length-penalty", "0.5"}), 2, "--length-penalty does not apply to train_mt"},
                    {with({"--attn-set", "cross.layer.2.type=mha"}), 2,
                     "layer 2 is past the last layer; the model has encoder_self attention in layers 0 to 1, "
                     "decoder_self attention in layers 0 to 1, cross attention in layers 0 to 1"},
                    {{"--data", "/dev/zero"}, 1, "/dev/zero is a character device"},
                    {{"--data", fifo}, 1, fifo + " is a FIFO"},
                    {{"--data", data.dir.file("missing.tsv")},
                     1,
                     "missing.tsv does not exist; scripts/fetch-data mt fetches the default data"},
                    {{"--data", data.dir.file("folder")}, 1, "no .mo files"},
                    {{"--data", data.dir.file("latin1.tsv")}, 1, "latin1.tsv:61: invalid UTF-8"},
                    {{"--data", data.dir.file("notab.tsv")}, 1, "notab.tsv:2: expected source<TAB>target"},
                    {{"--data", data.dir.file("nosource.tsv")},
                     1,
                     "nosource.tsv:2: expected source<TAB>target, got an empty source"},
                    {{"--data", data.dir.file("notarget.tsv")},
                     1,
                     "notarget.tsv:2: expected source<TAB>target, got an empty target"},
                    {{"--data", data.dir.file("nul.tsv")}, 1, "nul.tsv:2: a NUL byte at column 3"},
                    {{"--data", pairs, "--valid-pairs", "100000"},
                     1,
                     "--valid-pairs 100000 + --test-pairs 1000 need more than 101000 to leave some for training"},
                    {{"--data", data.dir.file("empty.tsv")},
                     1,
                     "empty.tsv holds 0 sentence pairs, and --valid-pairs 500 + --test-pairs 1000 need more than "
                     "1500 to leave some for training; a .tsv file holds one source<TAB>target pair per line"},
                    {{"--data", data.dir.file("same.tsv"), "--valid-pairs", "1", "--test-pairs", "1"},
                     1,
                     "same.tsv holds 3 sentence pairs (1 kept: a pair with an empty side, the same text on both sides"},
                });
  check_table("train_mt", table, data.dir);
  check_early_rows("train_mt", {"--data", fifo}, data.dir);
}

TEST_CASE("bad inputs: train_vit exits 2 or 1 with a clear message for every bad flag and data set") {
  BadInputData data("bad_vit");
  const std::string fm = data.dir.file("fm");
  const std::vector<std::string> small{"--data", fm, "--valid-images", "4", "--batch", "8"};
  auto with = [&](std::vector<std::string> args) { return command_line(small, args); };
  std::vector<BadInput> table = shared_rows(small);
  append(table, {
                    {with({"--batch", "4611686018427387904"}), 2, "--batch expects an integer in [1, 65536]"},
                    {with({"--batch", "0"}), 2, "--batch"},
                    {with({"--batch", "65536", "--patch", "1", "--max-memory", "8GiB"}), 2, "the run needs about"},
                    {with({"--patch", "0"}), 2, "--patch"},
                    {with({"--patch", "3"}), 1, "patch"},
                    {with({"--channels", "5"}), 2, "--channels"},
                    {with({"--image-size", "0"}), 2, "--image-size"},
                    {with({"--epochs", "-1"}), 2, "--epochs"},
                    {with({"--eval-images", "-1"}), 2, "--eval-images"},
                    {with({"--valid-images", "24"}), 1, "--valid-images 24 must be below the 24 images"},
                    {with({"--image-size", "16"}), 2, "--image-size does not apply to train_vit: it sets how --images"},
                    {with({"--channels", "1"}), 2, "--channels does not apply to train_vit"},
                    {{"--images", data.dir.file("no-classes"), "--valid-images", "4"},
                     2,
                     "--valid-images does not apply to train_vit"},
                    {{"--images", data.dir.file("no-classes"), "--data", fm}, 2, "--data does not apply to train_vit"},
                    {with({"--attn-set", "decoder_self.type=mha"}), 2, "this model has no decoder_self attention"},
                    {with({"--attn-set", "cross.type=mha"}), 2, "this model has no cross attention"},
                    {{"--data", data.dir.file("fm0"), "--valid-images", "1"}, 1, "holds no images"},
                    {{"--data", data.dir.file("fmdims")}, 1, "t10k-images-idx3-ubyte holds images of (1,10,10)"},
                    {{"--data", data.dir.file("fmfifo")}, 1, "train-images-idx3-ubyte is a FIFO"},
                    {{"--data", data.dir.file("fmzero")}, 1, "train-images-idx3-ubyte is a character device"},
                    {{"--data", data.dir.file("missing")},
                     1,
                     "missing does not exist; scripts/fetch-data vit fetches the default data"},
                    {{"--images", data.dir.file("missing")}, 1, "missing: no such folder"},
                    {{"--images", data.dir.file("no-classes")}, 1, "no class subfolders"},
                    {{"--images", data.dir.file("fifo-classes")},
                     1,
                     "class folder without images (regular .png, .jpg, .jpeg or .bmp files), only 2 other entries, "
                     "e.g. " +
                         data.dir.file("fifo-classes/a/fifo.png")},
                });
  check_table("train_vit", table, data.dir);
  check_early_rows("train_vit", {"--data", data.dir.file("fmfifo")}, data.dir);
}

TEST_CASE("bad inputs: compare exits 2 or 1 with a clear message for every bad flag and data file") {
  BadInputData data("bad_compare");
  const std::string text = data.dir.file("text.txt");
  // The presets set the attention, so compare has no --attn or --attn-opt (nor --ckpt: --out names the folder).
  std::vector<BadInput> table = without_flag(without_flag(shared_rows({"--data", text}), "--attn"), "--attn-opt");
  append(table, lm_rows(data.dir));
  append(table, {
                    {{"--data", text, "--attn", "moh"}, 2, "unknown flag --attn"},
                    {{"--data", text, "--attn-opt", "shared_heads=1"}, 2, "unknown flag --attn-opt"},
                    {{"--data", text, "--ckpt", "runs/x"}, 2, "unknown flag --ckpt"},
                    {{"--data", text, "--seeds", "0"}, 2, "--seeds"},
                    {{"--data", text, "--seeds", "1000000"}, 2, "--seeds"},
                    {{"--data", text, "--steps", "5", "--warmup", "10"}, 2, "--warmup 10 must be below --steps 5"},
                    {{"--data", text, "--methods", "mha,dense"}, 2, "unknown method 'dense'"},
                    {{"--data", text, "--methods", "mha,mha"}, 2, "'mha' twice"},
                    {{"--data", text, "--methods", ","}, 2, "--methods names no preset"},
                    {{"--data", text, "--methods", "mha", "--seeds", "1", "--out", "held-compare"},
                     2,
                     "the run folder held-compare/mha-seed1 already holds a run (log.jsonl)"},
                    {{"--task", "speech"}, 2, "--task must be lm, mt or vit"},
                    {{"--task=vit", "--data", data.dir.file("fm"), "--batch", "0"}, 2, "--batch"},
                    {{"--task", "mt", "--data", data.dir.file("latin1.tsv")}, 1, "invalid UTF-8"},
                });
  check_table("compare", table, data.dir);
}

TEST_CASE("bad inputs: train_demo exits 2 or 1 with a clear message for every bad flag") {
  BadInputData data("bad_demo");
  check_table("train_demo",
              {
                  {{"--steps", "abc"}, 2, "--steps expects an integer"},
                  {{"--steps", "-5"}, 2, "--steps"},
                  {{"--steps", "99999999999999999999"}, 2, "--steps"},
                  {{"--hidden", "0"}, 2, "--hidden"},
                  {{"--hidden", "4611686018427387904"}, 2, "--hidden"},
                  {{"--threads", "4294967297"}, 2, "--threads"},
                  {{"--lr", "-1"}, 2, "--lr"},
                  {{"--lr", "1x"}, 2, "--lr"},
                  {{"--lr", "0x1p-3"}, 2, "--lr"},
                  {{"--seed", "-1"}, 2, "--seed"},
                  {{"--check-loss", "-1"}, 2, "--check-loss"},
                  {{"--steps"}, 2, "--steps needs a value"},
                  {{"--tf32=yes"}, 2, "--tf32 takes no value"},
                  {{"--no-such-flag"}, 2, "unknown flag --no-such-flag"},
                  {{"--device", "gpu"}, 1, "'gpu'"},
                  {{"--resume", data.dir.file("missing.safetensors")}, 1, "missing.safetensors"},
                  {{"--resume", data.dir.file("fifo")}, 1, "fifo is a FIFO, expected a regular file"},
                  {{"--resume", data.dir.file("folder")}, 1, "folder is a directory, expected a regular file"},
              },
              data.dir);
  // The environment is checked as strictly as the flags: one step of train_demo
  // with `variable` set to `value` exits with `status`, its message holding `expected`.
  const std::string demo = std::string(HEADROOM_EXAMPLES_BIN_DIR) + "/train_demo";
  auto check_env = [&](const std::string& variable, const std::string& value, int status, const std::string& expected) {
    const std::string command =
        variable + "='" + value + "' timeout 30 " + demo + " --steps 1 > /dev/null 2> " + data.dir.file("stderr.txt");
    const int raw = std::system(command.c_str());
    CAPTURE(command);
    REQUIRE(WIFEXITED(raw));
    CHECK(WEXITSTATUS(raw) == status);
    CHECK(file_text(data.dir.file("stderr.txt")).find(expected) != std::string::npos);
  };
  for (const std::string threads : {"4294967297", "abc", "0", "", " 2", "+2", "2 "})
    check_env("HEADROOM_NUM_THREADS", threads, 1,
              "HEADROOM_NUM_THREADS='" + threads + "' must be a whole number from 1 to 1024");
  for (const std::string value : {"garbage", "2", " 1", "1 ", "01", "true", "-0"})
    check_env("HEADROOM_REFERENCE_KERNELS", value, 1,
              "HEADROOM_REFERENCE_KERNELS='" + value + "' must be 1 (the reference kernels) or 0");
  for (const std::string value : {"1", "0", ""}) check_env("HEADROOM_REFERENCE_KERNELS", value, 0, "");
}

TEST_CASE("bad inputs: the benchmarks refuse bad flags with status 2 and time a single iteration") {
  BadInputData data("bad_bench");
  check_table("bench_attention",
              {
                  {{"--iters", "x"}, 2, "--iters expects an integer"},
                  {{"--iters", "0"}, 2, "--iters"},
                  {{"--threads", "4294967297"}, 2, "--threads"},
                  {{"--seq", "16,abc"}, 2, "--seq expects comma-separated integers in [1, 65536]"},
                  {{"--seq", "99999999999"}, 2, "--seq"},
                  {{"--by-host-state", "-1"}, 2, "--by-host-state"},
              },
              data.dir);
  check_table("bench_decode",
              {
                  {{"--batch", "1,x"}, 2, "--batch expects comma-separated integers in [1, 4096]"},
                  {{"--context", ""}, 2, "--context names no value"},
                  {{"--only", "mha,gqa"}, 2, "--only expects mha, moh, moa or mae, got 'gqa'"},
                  {{"--iters", "0"}, 2, "--iters"},
              },
              data.dir);
  check_table("bench_ops",
              {
                  {{"--iters", "x"}, 2, "--iters expects an integer"},
                  {{"--threads", "0x4"}, 2, "--threads"},
                  {{"--only", "everything"}, 2, "--only names no section"},
              },
              data.dir);
  // One timed pair used to leave the training-step table without samples (a crash in median).
  const std::string bench = std::string(HEADROOM_EXAMPLES_BIN_DIR) + "/bench_attention";
  CHECK(std::system((bench + " --iters 1 --seq 16 --batch 1 --threads 1 > /dev/null").c_str()) == 0);
}

#endif  // HEADROOM_EXAMPLES_BIN_DIR
