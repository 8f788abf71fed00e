// The training binaries' tasks end to end on tiny generated data
// (examples/common/{lm,mt,vit}_task.h): a few steps each, checking what a
// run directory must hold and that the metrics are sane.
#include <filesystem>
#include <set>

#include "headroom/core/image.h"
#include "headroom/examples/common/lm_task.h"
#include "headroom/examples/common/mt_task.h"
#include "headroom/examples/common/vit_task.h"
#include "helpers.h"
#include "transformer_helpers.h"

using namespace headroom;
using namespace headroom::examples;
using headroom::testing::parse_command_line;
using headroom::testing::TempDir;

namespace {

TrainOptions few_steps(const std::string& run_dir) {
  TrainOptions o;
  o.steps = 4, o.warmup = 1, o.eval_every = 2, o.ckpt_every = 2, o.lr = 3e-3, o.ckpt_dir = run_dir, o.quiet = true;
  o.bcd_f = 1, o.bcd_g = 1;
  return o;
}

ModelOptions tiny_model(const std::string& attn, const std::string& options = "") {
  ModelOptions m;
  m.attn = attn, m.attn_opt = options, m.dim = 16, m.heads = 4, m.layers = 1, m.ffn = 32;
  return m;
}

bool exists(const std::string& path) { return std::filesystem::exists(path); }

// 40 numbered lines of text in dir, and train_lm's options to learn them at `context`.
LmOptions numbered_lines(const TempDir& dir, int64_t context) {
  std::string text;
  for (int i = 0; i < 40; ++i) text += "A line of text to train on, number " + std::to_string(i) + "\n";
  LmOptions lm;
  lm.data = dir.write("text.txt", text), lm.context = context, lm.batch = 4, lm.eval_tokens = 256;
  return lm;
}

// 100 pairs "one and two\teins und zwei" in dir, and train_mt's options to learn them.
MtOptions counting_pairs(const TempDir& dir) {
  const char* english[] = {"one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"};
  const char* german[] = {"eins", "zwei", "drei", "vier", "fünf", "sechs", "sieben", "acht", "neun", "zehn"};
  std::string tsv;
  for (int a = 0; a < 10; ++a)
    for (int b = 0; b < 10; ++b)
      tsv += std::string(english[a]) + " and " + english[b] + "\t" + german[a] + " und " + german[b] + "\n";
  MtOptions mt;
  mt.data = dir.write("pairs.tsv", tsv), mt.valid_pairs = 10, mt.test_pairs = 10, mt.bpe_merges = 30, mt.batch = 8;
  mt.eval_pairs = 10, mt.bleu_sentences = 4, mt.max_tokens = 16;
  return mt;
}

// Two class folders of ten plain images each (dark and light, of mixed sizes)
// in dir, and train_vit's options to classify them at 8x8 pixels.
VitOptions two_classes_of_images(const TempDir& dir) {
  for (int c = 0; c < 2; ++c) {
    std::filesystem::create_directories(dir.file("images/class" + std::to_string(c)));
    for (int i = 0; i < 10; ++i) {
      int64_t size = 8 + i % 3 * 4;  // mixed sizes are resized
      Tensor image = Tensor::full({size, size, 3}, c == 0 ? 0.1 + 0.01 * i : 0.9 - 0.01 * i);
      save_png(dir.file("images/class" + std::to_string(c) + "/" + std::to_string(i) + ".png"), image);
    }
  }
  VitOptions vit;
  vit.images = dir.file("images"), vit.image_size = 8, vit.patch = 4, vit.batch = 8;
  return vit;
}

}  // namespace

TEST_CASE("run_lm trains a byte-level LM, samples text and writes the run directory") {
  TempDir dir("task_lm");
  std::string text;
  for (int i = 0; i < 40; ++i)
    text += "The quick brown fox jumps over the lazy dog. Ünïcödé line " + std::to_string(i) + "\n";
  dir.write("text.txt", text);
  LmOptions lm;
  lm.data = dir.file("text.txt"), lm.context = 16, lm.batch = 4, lm.eval_tokens = 256, lm.generate = 8;
  RunSummary s = run_lm(lm, tiny_model("moh", "shared_heads=1,routed_k=2"), few_steps(dir.file("run")));
  CHECK(s.steps == 4);
  CHECK(s.metric("bits_per_byte") == doctest::Approx(s.metric("loss") / std::log(2.0)));
  CHECK(s.metric("loss") < std::log(259.0) + 0.5);  // about uniform over the vocabulary, or better
  CHECK(s.active_heads == doctest::Approx(0.75));
  for (const char* file : {"checkpoint.safetensors", "log.jsonl", "loss.png", "eval.png", "routing.json", "routing.csv",
                           "load.png", "load_heatmap.png", "gates.png", "pmi.md"})
    CHECK_MESSAGE(exists(dir.file(std::string("run/") + file)), file);
  CHECK_THROWS_HEADROOM(run_lm(LmOptions{dir.file("missing.txt")}, tiny_model("mha"), few_steps("")), "missing.txt");
}

// A parsed command line of the model flags, for ModelOptions::given;
// `add_task_flags` declares a binary's task flags too (add_lm_flags, add_mt_flags).
struct ModelCommandLine {
  Flags flags{"test", "model flags"};
  ModelOptions model;
  explicit ModelCommandLine(std::vector<std::string> args, const std::function<void(Flags&)>& add_task_flags = {}) {
    add_model_flags(flags, model, ModelStacks::encoder_decoder);
    if (add_task_flags) add_task_flags(flags);
    parse_command_line(flags, std::move(args));
  }
};

TEST_CASE("run_lm rebuilds the model from the checkpoint for --eval-only and --generate with no model flags") {
  TempDir dir("task_lm_eval_only");
  LmOptions lm = numbered_lines(dir, 16);
  RunSummary trained = run_lm(lm, tiny_model("moh", "shared_heads=1,routed_k=2"), few_steps(dir.file("run")));
  TrainOptions eval_only = few_steps(dir.file("run"));
  eval_only.eval_only = true;
  lm.generate = 8;
  // ModelOptions{} holds other sizes and MHA: none was given, so the checkpoint's are used.
  RunSummary evaluated = run_lm(lm, ModelOptions{}, eval_only);
  CHECK(evaluated.parameters == trained.parameters);
  CHECK(evaluated.attention == "moh");
  CHECK(evaluated.metric("loss") == doctest::Approx(trained.metric("loss")));
  // The training checkpoint rebuilds the model in one call (its optimizer state skipped).
  std::shared_ptr<DecoderLM> loaded = load_model<DecoderLM>(dir.file("run/checkpoint.safetensors"));
  CHECK(loaded->num_parameters() == trained.parameters);
  CHECK(loaded->config.max_len == 16);  // the context it was trained at
  // Evaluation has time and memory, and no training throughput to report.
  CHECK(evaluated.eval_only);
  CHECK(evaluated.items_per_second == 0);
  CHECK(evaluated.peak_bytes > 0);
  // A flag given on the command line that agrees is accepted; one that contradicts is refused.
  CHECK(run_lm(lm, ModelCommandLine({"--dim", "16", "--attn", "moh"}).model, eval_only).steps == 4);
  CHECK_THROWS_HEADROOM(run_lm(lm, ModelCommandLine({"--dim", "32"}).model, eval_only),
                        "--dim 32 contradicts the checkpoint");
  CHECK_THROWS_HEADROOM(run_lm(lm, ModelCommandLine({"--dim", "32"}).model, eval_only),
                        "its model.dim is '16', the flag makes it '32'");
  CHECK_THROWS_HEADROOM(run_lm(lm, ModelCommandLine({"--attn-opt", "routed_k=3"}).model, eval_only),
                        "its attention.option.routed_k is '2', the flag makes it '3'");
  CHECK_THROWS_HEADROOM(run_lm(lm, ModelCommandLine({"--layers", "2"}).model, eval_only),
                        "model.decoder_layers is '1'");
}

TEST_CASE("--eval-only and --resume take the context from the checkpoint; a different one is refused or noted") {
  TempDir dir("task_lm_context");
  const LmOptions trained_at_8 = numbered_lines(dir, 8);
  const RunSummary trained = run_lm(trained_at_8, tiny_model("mha"), few_steps(dir.file("run")));
  TrainOptions eval_only = few_steps(dir.file("run")), resume = few_steps(dir.file("run"));
  eval_only.eval_only = true, resume.resume = true, resume.steps = 6;
  // No --context: the checkpoint's 8 (not the flag's default), and the same loss as training's last evaluation.
  LmOptions lm = trained_at_8;
  lm.context = LmOptions().context;
  ModelCommandLine no_flags({}, [&](Flags& f) { add_lm_flags(f, lm); });
  settle_lm_options(no_flags.flags, lm, eval_only);
  CHECK(lm.context == 8);
  CHECK(run_lm(lm, no_flags.model, eval_only).metric("loss") == doctest::Approx(trained.metric("loss")).epsilon(1e-6));
  // --context 12 for --eval-only: sinusoidal positions take it, with a note; --resume refuses it.
  LmOptions longer = trained_at_8;
  ModelCommandLine given({"--context", "12"}, [&](Flags& f) { add_lm_flags(f, longer); });
  settle_lm_options(given.flags, longer, eval_only);
  CHECK(longer.context == 12);
  CHECK_THROWS_HEADROOM(
      settle_lm_options(given.flags, longer, resume),
      (dir.file("run") + "/checkpoint.safetensors was trained at; a resumed run trains at 8").c_str());
  // A new run keeps the flag's value; a resumed one trains on at 8.
  LmOptions fresh = trained_at_8;
  fresh.context = 12;
  settle_lm_options(given.flags, fresh, few_steps(dir.file("other")));
  CHECK(fresh.context == 12);
  settle_lm_options(no_flags.flags, lm, resume);
  CHECK(run_lm(lm, no_flags.model, resume).steps == 6);
}

TEST_CASE("settle_trained_value: what --eval-only accepts besides the trained value") {
  LmOptions lm;
  TrainOptions eval_only = few_steps("run");
  eval_only.eval_only = true;
  ModelCommandLine given({"--context", "12"}, [&](Flags& f) { add_lm_flags(f, lm); });
  int64_t value = 12;
  CHECK_THROWS_HEADROOM(settle_trained_value(given.flags, eval_only, "context", value, 8, EvalAccepts::smaller),
                        "its model takes at most 8");
  CHECK_THROWS_HEADROOM(settle_trained_value(given.flags, eval_only, "context", value, 16, EvalAccepts::trained_only),
                        "its model takes only 16");
  settle_trained_value(given.flags, eval_only, "context", value, 16, EvalAccepts::smaller);
  CHECK(value == 12);
}

TEST_CASE("run_mt learns BPE, trains an encoder-decoder, scores BLEU and writes test translations") {
  TempDir dir("task_mt");
  MtOptions mt = counting_pairs(dir);
  RunSummary s = run_mt(mt, tiny_model("mae"), few_steps(dir.file("run")));
  CHECK(s.metric("bleu") >= 0);
  CHECK(s.metric("test_bleu") <= 100);
  std::ifstream hypotheses(dir.file("run/test.hyp.txt"));
  int lines = 0;
  for (std::string line; std::getline(hypotheses, line);) ++lines;
  CHECK(lines == 10);
  CHECK(exists(dir.file("run/gates.png")));
  // Resuming rebuilds the model and the tokenizer from the checkpoint: no
  // model flags, and --bpe-merges (which learning would follow) is not used.
  mt.bpe_merges = 0;
  TrainOptions resume = few_steps(dir.file("run"));
  resume.resume = true, resume.steps = 6;
  RunSummary resumed = run_mt(mt, ModelOptions{}, resume);
  CHECK(resumed.steps == 6);
  CHECK(resumed.parameters == s.parameters);
  CHECK(resumed.attention == "mae");
  // A --bpe-merges given on the command line must be the checkpoint tokenizer's.
  resume.steps = 8;
  MtOptions given = mt;
  ModelCommandLine contradicting({"--bpe-merges", "31"}, [&](Flags& f) { add_mt_flags(f, given); });
  const std::string refusal =
      "--bpe-merges 31 contradicts the checkpoint " + dir.file("run/checkpoint.safetensors") + ": its tokenizer has 30";
  CHECK_THROWS_HEADROOM(run_mt(given, contradicting.model, resume), refusal.c_str());
  ModelCommandLine agreeing({"--bpe-merges", "30"}, [&](Flags& f) { add_mt_flags(f, given); });
  CHECK(run_mt(given, agreeing.model, resume).steps == 8);
  // --max-tokens comes from the checkpoint (its max_len - 1) unless given; --resume refuses another.
  MtOptions lengths = mt;
  lengths.max_tokens = MtOptions().max_tokens;
  ModelCommandLine no_flags({}, [&](Flags& f) { add_mt_flags(f, lengths); });
  settle_mt_options(no_flags.flags, lengths, resume);
  CHECK(lengths.max_tokens == 16);
  ModelCommandLine other({"--max-tokens", "12"}, [&](Flags& f) { add_mt_flags(f, lengths); });
  CHECK_THROWS_HEADROOM(settle_mt_options(other.flags, lengths, resume),
                        "--max-tokens 12 differs from the 16 that the checkpoint");
}

TEST_CASE("run_vit trains on a folder of class subfolders and reports accuracy and the confusion matrix") {
  TempDir dir("task_vit");
  VitOptions vit = two_classes_of_images(dir);
  vit.epochs = 2;
  RunSummary s = run_vit(vit, tiny_model("moa", "experts=4,k=2"), few_steps(dir.file("run")));
  CHECK(s.steps == 2 * 2);  // 16 training images, batch 8
  CHECK(s.metric("test_accuracy") >= 0);
  CHECK(s.metric("test_accuracy") <= 1);
  for (const char* file : {"confusion.csv", "confusion.png", "routing_by_class.csv", "load_by_class.png", "loss.png"})
    CHECK_MESSAGE(exists(dir.file(std::string("run/") + file)), file);
  // --image-size comes from the checkpoint unless given; --eval-only refuses another (the patch grid is fixed).
  TrainOptions eval_only = few_steps(dir.file("run"));
  eval_only.eval_only = true;
  VitOptions sized = vit;
  sized.image_size = VitOptions().image_size;
  ModelCommandLine no_flags({}, [&](Flags& f) { add_vit_flags(f, sized); });
  settle_vit_options(no_flags.flags, sized, eval_only);
  CHECK(sized.image_size == 8);
  ModelCommandLine other({"--image-size", "16", "--images", vit.images}, [&](Flags& f) { add_vit_flags(f, sized); });
  CHECK_THROWS_HEADROOM(settle_vit_options(other.flags, sized, eval_only), "its model takes only 8");
}

// The files of docs/training.md's run-folder table, each with the binaries
// that write it and whether only a run with routed attention does.
struct RunFolderFile {
  std::string name;
  std::set<std::string> binaries;
  bool routed_only;
};

const std::vector<RunFolderFile>& run_folder_files() {
  const std::set<std::string> all{"lm", "mt", "vit"};
  static const std::vector<RunFolderFile> files{
      {"checkpoint.safetensors", all, false},
      {"log.jsonl", all, false},
      {"loss.png", all, false},
      {"eval.png", all, false},
      {"load.png", all, true},
      {"load_heatmap.png", all, true},
      {"gates.png", all, true},
      {"routing.json", all, true},
      {"routing.csv", all, true},
      {"pmi.md", {"lm", "mt"}, true},
      {"load_by_class.png", {"vit"}, true},
      {"routing_by_class.csv", {"vit"}, true},
      {"confusion.png", {"vit"}, false},
      {"confusion.csv", {"vit"}, false},
      {"test.hyp.txt", {"mt"}, false},
  };
  return files;
}

TEST_CASE("every binary writes the run-folder files docs/training.md lists for it, and no other, for each method") {
  TempDir dir("task_run_files");
  const LmOptions lm = numbered_lines(dir, 16);
  const MtOptions mt = counting_pairs(dir);
  const VitOptions vit = two_classes_of_images(dir);
  const std::vector<std::pair<std::string, std::string>> methods{
      {"mha", ""}, {"moa", "experts=4,k=2"}, {"moh", ""}, {"mae", ""}};
  for (const std::string binary : {"lm", "mt", "vit"})
    for (const auto& [attn_name, options_text] : methods) {
      const std::string attn = attn_name, run = dir.file(binary + "-" + attn);  // named: CAPTURE before C++20
      CAPTURE(run);
      ModelOptions model = tiny_model(attn, options_text);
      model.layers = 2;
      TrainOptions o = few_steps(run);
      o.steps = 2;
      if (binary == "lm") run_lm(lm, model, o);
      if (binary == "mt") run_mt(mt, model, o);
      if (binary == "vit") run_vit(vit, model, o);
      for (const RunFolderFile& file : run_folder_files()) {
        CAPTURE(file.name);
        CHECK(exists(run + "/" + file.name) == (file.binaries.count(binary) && (attn != "mha" || !file.routed_only)));
      }
    }
}

TEST_CASE("compare's method presets stay within 2% of MHA's parameters at the binaries' defaults") {
  // The decoder-only LM (8 heads) and the encoder-decoder MT model (4 heads),
  // each at its binary's default size.
  auto parameters = [](const ModelOptions& m, bool encoder_decoder) {
    ModelConfig config = m.config(encoder_decoder ? ModelStacks::encoder_decoder : ModelStacks::decoder);
    config.vocab = 256;
    Generator gen(1);
    if (encoder_decoder) return EncoderDecoder(config, gen).num_parameters();
    return DecoderLM(config, gen).num_parameters();
  };
  for (bool encoder_decoder : {false, true}) {
    ModelOptions defaults;
    TrainOptions train;
    if (encoder_decoder) set_mt_defaults(defaults, train);
    else set_lm_defaults(defaults, train);
    const double mha = double(parameters(method_preset("mha", defaults), encoder_decoder));
    for (const char* method : {"moa", "moh75", "moh50", "mae"}) {
      const double ratio = double(parameters(method_preset(method, defaults), encoder_decoder)) / mha;
      INFO(method, (encoder_decoder ? " encoder-decoder: " : " decoder-only: "), ratio);
      CHECK(std::abs(ratio - 1) < 0.02);
    }
  }
  CHECK_THROWS_AS(method_preset("dense", ModelOptions{}), UsageError);
}

// A run shape of `rows` rows of `tokens` positions (an encoder-decoder's
// targets as long as its sources) in training and evaluation.
RunShape shape_of(int64_t rows, int64_t tokens) {
  RunShape shape;
  shape.rows = rows;
  shape.eval_rows = rows;
  shape.tokens = tokens;
  shape.target_tokens = tokens;
  return shape;
}

TEST_CASE("estimate_memory counts every method's parameters, and the largest of training, evaluation and decoding") {
  Generator gen(1);
  const std::vector<std::pair<std::string, std::string>> methods{{"mha", ""},
                                                                 {"mha", "kv_heads=2,head_dim=6"},
                                                                 {"moa", "experts=6,k=2,head_dim=12"},
                                                                 {"moh", "shared_heads=1,routed_k=2"},
                                                                 {"mae", "gate_hidden=8"}};
  for (const auto& [attn_name, options_text] : methods) {
    // Named copies: a lambda (CAPTURE's) may not capture a structured binding before C++20.
    const std::string attn = attn_name, options = options_text;
    CAPTURE(attn);
    CAPTURE(options);
    ModelOptions m = tiny_model(attn, options);
    m.layers = 2;
    ModelConfig lm = m.config(ModelStacks::decoder), mt = m.config(ModelStacks::encoder_decoder);
    ModelConfig vit = m.config(ModelStacks::encoder);
    lm.vocab = mt.vocab = 259, lm.max_len = mt.max_len = 16;
    vit.image_size = 8, vit.patch_size = 4, vit.channels = 3, vit.classes = 5;
    CHECK(double(estimate_memory(lm, shape_of(2, 16)).parameters) ==
          doctest::Approx(double(DecoderLM(lm, gen).num_parameters())).epsilon(0.01));
    CHECK(double(estimate_memory(mt, shape_of(2, 16)).parameters) ==
          doctest::Approx(double(EncoderDecoder(mt, gen).num_parameters())).epsilon(0.01));
    CHECK(double(estimate_memory(vit, shape_of(2, 5)).parameters) ==
          doctest::Approx(double(ViT(vit, gen).num_parameters())).epsilon(0.01));
  }
  ModelConfig c = ModelOptions{}.config(ModelStacks::encoder_decoder);
  c.vocab = 1000;
  RunShape shape = shape_of(4, 32);
  shape.data_bytes = 1e6;
  const MemoryEstimate training = estimate_memory(c, shape);
  CHECK(training.weights == 4 * double(training.parameters));
  CHECK(training.optimizer == 3 * training.weights);  // gradients and AdamW's two moments
  CHECK(training.data == 1e6);
  CHECK(training.total() == training.weights + training.optimizer + training.activations + training.data);
  CHECK(training.activations_of == "a training step");
  // Evaluation batches of many more rows, or a wide beam, hold more than the training step.
  shape.eval_rows = 64;
  const MemoryEstimate evaluation = estimate_memory(c, shape);
  CHECK(evaluation.activations_of == "evaluation");
  CHECK(evaluation.activations > training.activations);
  shape.decode_rows = 64 * 64;  // --batch 64 --beam 64
  const MemoryEstimate decoding = estimate_memory(c, shape);
  CHECK(decoding.activations_of == "decoding");
  CHECK(decoding.activations > evaluation.activations);
}

namespace {

// An IDX file of `count` items of `shape` (u8), each byte `value(i)`.
void write_idx(const TempDir& dir, const std::string& name, int64_t count, const std::vector<int64_t>& shape,
               const std::function<uint8_t(int64_t)>& value) {
  std::string bytes{0, 0, 8, char(1 + shape.size())};  // zeros, u8 items, the number of dimensions
  std::vector<int64_t> dims{count};
  dims.insert(dims.end(), shape.begin(), shape.end());
  for (int64_t size : dims)
    for (int shift : {24, 16, 8, 0}) bytes += char((size >> shift) & 0xff);
  int64_t items = count;
  for (int64_t size : shape) items *= size;
  for (int64_t i = 0; i < items; ++i) bytes += char(value(i));
  dir.write(name, bytes);
}

// Fashion-MNIST's shape: 60,000 training and 10,000 test images of 28x28 grey pixels, 10 classes.
std::string fashion_mnist_shaped(const TempDir& dir) {
  for (const auto& [part, count] : std::vector<std::pair<std::string, int64_t>>{{"train", 60000}, {"t10k", 10000}}) {
    write_idx(dir, "fm/" + part + "-images-idx3-ubyte", count, {28, 28},
              [](int64_t i) { return uint8_t(i * 7 % 251); });
    write_idx(dir, "fm/" + part + "-labels-idx1-ubyte", count, {}, [](int64_t i) { return uint8_t(i % 10); });
  }
  return dir.file("fm");
}

// Pairs of random letters and spaces, 100 to 159 bytes a side: after BPE
// most are near train_mt's --max-tokens, so every batch is about as wide as
// the flags allow.
std::string long_random_pairs(const TempDir& dir) {
  Generator gen(3);
  auto sentence = [&] {
    std::string text;
    for (int64_t n = 100 + gen.next_int(60); int64_t(text.size()) < n;)
      text += gen.next_int(6) == 0 ? ' ' : char('a' + gen.next_int(26));
    return text;
  };
  std::string tsv;
  for (int i = 0; i < 1500; ++i) tsv += sentence() + "\t" + sentence() + "\n";
  return dir.write("pairs.tsv", tsv);
}

// The defaults of a binary: the model set_*_defaults sets, its options' batch, two steps.
TrainOptions two_default_steps(const std::function<void(ModelOptions&, TrainOptions&)>& set_defaults,
                               ModelOptions& model) {
  TrainOptions o;
  set_defaults(model, o);
  o.steps = 2;
  o.warmup = 1;
  o.eval_every = 2;
  o.ckpt_dir = "";
  o.quiet = true;
  return o;
}

}  // namespace

TEST_CASE("the memory estimate lies between 1 and 2 times the measured peak of each binary's default run") {
  // Each binary's default model and batch, on data of the default's shape; evaluations cut short (their
  // batches keep the default shape). The peak is the backend's, over training and evaluation.
  TempDir dir("task_memory");
  std::string text;
  for (int i = 0; i < 2000; ++i) text += "line " + std::to_string(i) + " of a text to estimate the memory of\n";
  const std::string long_text = dir.write("text.txt", text);
  std::vector<std::pair<std::string, RunSummary>> runs;
  for (const std::string attn : {"mha", "moa", "moh", "mae"}) {
    ModelOptions model;
    TrainOptions o = two_default_steps(set_lm_defaults, model);
    model.attn = attn;
    LmOptions lm;
    lm.data = long_text;
    lm.eval_tokens = 2 * lm.batch * lm.context;
    runs.emplace_back("train_lm " + attn, run_lm(lm, model, o));
  }
  {
    ModelOptions model;
    TrainOptions o = two_default_steps(set_mt_defaults, model);
    MtOptions mt;
    mt.data = long_random_pairs(dir);
    mt.valid_pairs = 32;
    mt.test_pairs = 32;
    mt.eval_pairs = 32;
    mt.bleu_sentences = 32;
    runs.emplace_back("train_mt mha", run_mt(mt, model, o));
  }
  {
    ModelOptions model;
    TrainOptions o = two_default_steps(set_vit_defaults, model);
    VitOptions vit;
    vit.data = fashion_mnist_shaped(dir);
    vit.eval_images = 64;
    runs.emplace_back("train_vit mha", run_vit(vit, model, o));
  }
  for (const auto& entry : runs) {  // not a structured binding: INFO captures in a lambda (C++17)
    const std::string& run = entry.first;
    const RunSummary& summary = entry.second;
    const double ratio = summary.estimated_bytes / double(summary.peak_bytes);
    INFO(run, ": estimated ", summary.estimated_bytes / 1048576, " MiB, peak ", summary.peak_bytes / 1048576.0,
         " MiB, ratio ", ratio);
    CHECK(ratio >= 1.0);
    CHECK(ratio <= 2.0);
  }
}

TEST_CASE("the tasks refuse batches whose sizes multiply past the limit before allocating them") {
  // Called directly, past the flags' ranges: std::bad_alloc from train_lm and a
  // division by zero (SIGFPE) in train_vit's steps per epoch before the bounds.
  TempDir dir("task_limits");
  std::string text;
  for (int i = 0; i < 40; ++i) text += "a line of text " + std::to_string(i) + "\n";
  LmOptions lm;
  lm.data = dir.write("text.txt", text), lm.context = 16, lm.batch = INT64_MAX / 4;
  CHECK_THROWS_HEADROOM(run_lm(lm, tiny_model("mha"), few_steps("")), "tokens per batch");
  for (int c = 0; c < 2; ++c) {
    std::filesystem::create_directories(dir.file("images/c" + std::to_string(c)));
    for (int i = 0; i < 10; ++i)
      save_png(dir.file("images/c" + std::to_string(c) + "/" + std::to_string(i) + ".png"),
               Tensor::full({8, 8, 3}, 0.5));
  }
  VitOptions vit;
  vit.images = dir.file("images"), vit.image_size = 8, vit.patch = 4, vit.batch = INT64_MAX, vit.epochs = 1;
  CHECK_THROWS_AS(run_vit(vit, tiny_model("mha"), few_steps("")), UsageError);
}

TEST_CASE("a checkpoint's model config is held to the flags' ranges, and another task's checkpoint is named as such") {
  TempDir dir("task_checkpoint_config");
  const LmOptions lm = numbered_lines(dir, 8);
  run_lm(lm, tiny_model("moh", "shared_heads=1,routed_k=2"), few_steps(dir.file("run")));
  TrainOptions eval_only = few_steps(dir.file("run"));
  eval_only.eval_only = true;
  // An LM's checkpoint given to the ViT and the translation binaries.
  VitOptions vit = two_classes_of_images(dir);
  CHECK_THROWS_HEADROOM(
      run_vit(vit, ModelOptions{}, eval_only),
      "is a language model's checkpoint (train_lm), not an image classifier's checkpoint (train_vit)");
  MtOptions mt;
  ModelCommandLine mt_flags({}, [&](Flags& f) { add_mt_flags(f, mt); });
  CHECK_THROWS_HEADROOM(settle_mt_options(mt_flags.flags, mt, eval_only),
                        "is a language model's checkpoint (train_lm), not a translation model's checkpoint");
  // Values edited into the header (both checksums recomputed) pass the checks of the flags that set them.
  const std::string path = checkpoint_path(dir.file("run"));
  const SafetensorsFile original = load_safetensors(path);
  auto refused = [&](const std::string& key, const std::string& value, const std::string& message) {
    StringMap metadata = original.metadata;
    metadata[key] = value;
    save_safetensors(path, original.tensors, metadata);
    CHECK_THROWS_HEADROOM(run_lm(lm, ModelOptions{}, eval_only), message.c_str());
  };
  refused("model.heads", "0", "model.heads is 0, outside the range [1, 1024] a model accepts");
  refused("model.dim", "18", "model.dim 18 is not divisible by model.heads 4");
  refused("model.max_len", "0", "model.max_len is 0, outside the range");
  refused("model.vocab", "-3", "model.vocab is -3, outside the range");
  refused("model.dropout", "1.5", "model.dropout is 1.5, outside the range [0, 1)");
  refused("attention.option.routed_k", "-7", "its attention settings are not ones a model accepts");
  refused("model.encoder_layers", "1", "is a translation model's checkpoint (train_mt), not a language model's");
}

namespace {
// tiny_llama_config (RMSNorm, SwiGLU of width 12, no biases, RoPE) with the
// stacks of `stacks`' task, vocabulary 259 and images of 2 × 2 patches; its
// LM head, when it has one, with a bias.
ModelConfig llama_task_config(ModelStacks stacks) {
  ModelConfig c = testing::tiny_llama_config(259);
  if (stacks == ModelStacks::decoder) c.encoder_layers = 0;
  if (stacks == ModelStacks::encoder) c.decoder_layers = 0;
  c.head_bias = stacks != ModelStacks::encoder;
  c.image_size = 8;
  c.patch_size = 4;
  c.classes = 5;
  return c;
}
}  // namespace

TEST_CASE("estimate_memory counts a gated MLP, RMSNorm and the bias switches: parameters and saved activations") {
  Generator gen(3);
  const ModelConfig lm = llama_task_config(ModelStacks::decoder);
  const ModelConfig mt = llama_task_config(ModelStacks::encoder_decoder);
  const ModelConfig vit = llama_task_config(ModelStacks::encoder);
  CHECK(estimate_memory(lm, shape_of(2, 16)).parameters == DecoderLM(lm, gen).num_parameters());
  CHECK(estimate_memory(mt, shape_of(2, 16)).parameters == EncoderDecoder(mt, gen).num_parameters());
  CHECK(double(estimate_memory(vit, shape_of(2, 5)).parameters) ==
        doctest::Approx(double(ViT(vit, gen).num_parameters())).epsilon(0.01));
  // Per token and layer, a gated MLP saves 2·ffn floats more than a plain one: the up projection and the product.
  ModelConfig plain = lm;
  plain.mlp = MlpKind::plain;
  const double more =
      estimate_memory(lm, shape_of(2, 16)).activations - estimate_memory(plain, shape_of(2, 16)).activations;
  CHECK(more == 4.0 * (2 * 16) * 2 * (2 * 12));  // bytes: f32, 2 rows of 16 tokens, 2 layers
}

TEST_CASE(
    "a checkpoint's LLaMA-style fields pass its checks; a tied head with a bias and a gated stack too large do not") {
  ModelConfig c = llama_task_config(ModelStacks::decoder);
  CHECK_NOTHROW(check_checkpoint_config(c, ModelStacks::decoder, "run/ckpt"));
  c.tie_embeddings = true;
  CHECK_THROWS_HEADROOM(check_checkpoint_config(c, ModelStacks::decoder, "run/ckpt"),
                        "run/ckpt: model.head_bias is true with model.tie_embeddings true");
  c.tie_embeddings = false;
  // 3 layers of d 4096 and ffn 65536: 4d² + 2d·ffn is under the 2^31 weights of a stack, 4d² + 3d·ffn is not.
  c.dim = 4096;
  c.ffn_hidden = 65536;
  c.decoder_layers = 3;
  CHECK_THROWS_HEADROOM(check_checkpoint_config(c, ModelStacks::decoder, "run/ckpt"), "over the limit of 2147483648");
  c.mlp = MlpKind::plain;
  CHECK_NOTHROW(check_checkpoint_config(c, ModelStacks::decoder, "run/ckpt"));
}
