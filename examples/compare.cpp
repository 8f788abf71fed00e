// compare: trains MHA, MoA, MoH (ρ = 0.75 and 0.5) and MAE on one task with
// the same budget (steps, batch, model size; parameters within a few percent
// of MHA's) over several seeds, and writes a Markdown table of quality,
// active heads, parameters, MACs, throughput and peak memory, plus the
// validation curves of every method in one picture.
//
//   compare --task lm --seeds 2 --steps 1500 --out runs/compare-lm
//   compare --task vit --methods mha,moh50 --epochs 2
//
// The method presets (mha, moa, moh75, moh50, mae) are method_preset() in
// examples/common/model_options.h.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "headroom/core/atomic_file.h"
#include "headroom/core/threading.h"
#include "headroom/examples/common/lm_task.h"
#include "headroom/examples/common/mt_task.h"
#include "headroom/examples/common/plot.h"
#include "headroom/examples/common/progress.h"
#include "headroom/examples/common/vit_task.h"

using namespace headroom;
using namespace headroom::examples;

namespace {

// The quality metric of each task, and whether higher is better.
std::pair<std::string, bool> quality_metric(const std::string& task) {
  if (task == "lm") return {"bits_per_byte", false};
  if (task == "mt") return {"test_bleu", true};
  return {"test_accuracy", true};
}

std::string format(const char* pattern, double value) {
  char text[64];
  std::snprintf(text, sizeof text, pattern, value);
  return text;
}

// "mean ± half-range" over seeds.
std::string mean_spread(const std::vector<double>& values, const char* pattern) {
  double sum = 0, lo = values.front(), hi = values.front();
  for (double v : values) sum += v, lo = std::min(lo, v), hi = std::max(hi, v);
  std::string text = format(pattern, sum / double(values.size()));
  return values.size() > 1 ? text + " ± " + format(pattern, (hi - lo) / 2) : text;
}

double mean_of(const std::vector<RunSummary>& runs, double (*get)(const RunSummary&)) {
  double sum = 0;
  for (const auto& run : runs) sum += get(run);
  return sum / double(runs.size());
}

std::vector<std::string> table_row(const std::string& method, const std::vector<RunSummary>& runs, int64_t mha_params) {
  const auto [metric, higher_better] = quality_metric(runs.front().task);
  std::vector<double> quality, loss;
  for (const auto& run : runs) quality.push_back(run.metric(metric)), loss.push_back(run.metric("loss"));
  const RunSummary& first = runs.front();
  const bool percent = metric == "test_accuracy";
  if (percent)
    for (double& q : quality) q *= 100;
  return {method,
          mean_spread(quality, percent || metric == "test_bleu" ? "%.2f" : "%.3f"),
          mean_spread(loss, "%.3f"),
          format("%.0f%%", 100 * first.active_heads),
          std::to_string(first.parameters) +
              format(" (%+.1f%%)", 100.0 * double(first.parameters - mha_params) / double(mha_params)),
          format("%.3g", first.macs_per_item),
          format("%.0f", mean_of(runs, [](const RunSummary& r) { return r.items_per_second; })),
          format("%.1f", mean_of(runs, [](const RunSummary& r) { return double(r.peak_bytes) / (1 << 20); }))};
}

// The presets of --methods, each known and named once; checked before the
// first run trains, so a typo in the last name costs no training.
std::vector<std::string> checked_methods(const std::string& list, const ModelOptions& model) {
  std::vector<std::string> methods = split_list(list);
  if (methods.empty()) throw UsageError("--methods names no preset");
  for (size_t i = 0; i < methods.size(); ++i) {
    method_preset(methods[i], model);
    if (std::find(methods.begin(), methods.begin() + i, methods[i]) != methods.begin() + i)
      throw UsageError("--methods names '" + methods[i] + "' twice");
  }
  return methods;
}

struct CompareOptions {
  std::string task = "lm", methods = "mha,moa,moh75,moh50,mae", out;
  int64_t seeds = 2;
};

int run(const std::string& task, int argc, char** argv) {
  CompareOptions c;
  c.task = task;
  c.out = "runs/compare-" + task;
  LmOptions lm;
  MtOptions mt;
  VitOptions vit;
  ModelOptions model;
  TrainOptions train_options;
  if (task == "lm") set_lm_defaults(model, train_options);
  if (task == "mt") set_mt_defaults(model, train_options);
  if (task == "vit") set_vit_defaults(model, train_options);
  Flags flags("compare", "trains every attention method on one task with the same budget and tabulates the results");
  flags.add("task", &c.task, "lm | mt | vit (its own flags follow)");
  flags.add("methods", &c.methods, "comma-separated presets: mha, moa, moh75, moh50, mae");
  flags.add("seeds", &c.seeds, "seeds per method", {1, 1000});
  flags.add("out", &c.out, "folder for the runs, table.md and curves.png");
  if (task == "lm") add_lm_flags(flags, lm);
  if (task == "mt") add_mt_flags(flags, mt);
  if (task == "vit") add_vit_flags(flags, vit);
  add_model_flags(flags, model);
  add_train_flags(flags, train_options);
  return run_main(flags, [&] {
    if (!flags.parse(argc, argv)) return 0;
    if (task != "lm" && task != "mt" && task != "vit")
      throw UsageError("--task must be lm, mt or vit, got '" + task + "'");
    // The presets set each run's attention and --out its folder, so these would be ignored.
    for (const std::string flag : {"attn", "attn-opt", "ckpt"})
      if (flags.was_set(flag))
        throw UsageError("--" + flag + " does not apply to compare: --methods sets the attention, --out the folder");
    const std::vector<std::string> methods = checked_methods(c.methods, model);
    if (train_options.threads > 0) set_num_threads(train_options.threads);
    std::printf("%s\n", run_config_table(flags, train_options).c_str());
    std::vector<std::vector<std::string>> rows;
    LineChart curves;
    curves.title = "validation loss (seed " + std::to_string(train_options.seed) + ")";
    curves.x_label = "step", curves.y_label = "loss (nats)";
    int64_t mha_params = 0;
    for (const std::string& method : methods) {
      ModelOptions m = method_preset(method, model);
      std::vector<RunSummary> runs;
      for (int64_t s = 0; s < c.seeds; ++s) {
        TrainOptions o = train_options;
        o.seed = train_options.seed + uint64_t(s);
        o.ckpt_dir = c.out + "/" + method + "-seed" + std::to_string(o.seed);
        o.quiet = true;
        std::printf("== %s, seed %llu -> %s\n", method.c_str(), (unsigned long long)o.seed, o.ckpt_dir.c_str());
        std::fflush(stdout);
        runs.push_back(task == "lm" ? run_lm(lm, m, o) : task == "mt" ? run_mt(mt, m, o) : run_vit(vit, m, o));
        std::printf("%s", describe(runs.back()).c_str());
        if (s == 0) {
          auto evals = read_jsonl_numbers(o.ckpt_dir + "/log.jsonl", "eval");
          LineSeries series{method, {}, {}};
          for (const auto& row : evals)
            for (const auto& [key, value] : row) {
              if (key == "step") series.x.push_back(value);
              if (key == "loss") series.y.push_back(value);
            }
          curves.series.push_back(series);
        }
      }
      if (mha_params == 0) mha_params = runs.front().parameters;
      rows.push_back(table_row(method, runs, mha_params));
    }
    const auto [metric, higher_better] = quality_metric(task);
    std::string table = markdown_table(
        {"method", metric + (higher_better ? " (higher is better)" : " (lower is better)"), "valid loss",
         "active heads", "parameters (vs first)", "MACs/" + std::string(task == "vit" ? "image" : "token"),
         task == "vit" ? "img/s" : "tok/s", "peak MiB"},
        rows);
    std::filesystem::create_directories(c.out);
    write_file_atomically(c.out + "/table.md", table, "compare");
    plot_lines(c.out + "/curves.png", curves);
    std::printf("\n%s\ntable: %s/table.md, curves: %s/curves.png\n", table.c_str(), c.out.c_str(), c.out.c_str());
    return 0;
  });
}

}  // namespace

int main(int argc, char** argv) {
  // The task decides which flags exist, so find it first.
  std::string task = "lm";
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--task" && i + 1 < argc) task = argv[i + 1];
    if (arg.rfind("--task=", 0) == 0) task = arg.substr(7);
  }
  return run(task, argc, argv);
}
