// compare: trains MHA, MoA, MoH (ρ = 0.75 and 0.5) and MAE on one task with
// the same budget (steps, batch, model size; parameters within a few percent
// of MHA's) over several seeds, and writes a Markdown table of quality at
// equal steps and at equal wall-clock time, the time each method takes to
// reach the first method's final validation loss, active heads, parameters,
// MACs, throughput and peak memory, plus the validation curves of every
// method against steps and against elapsed seconds.  The table names the
// machine and its load at the start and the end, the better direction of
// every column, and what "active heads" counts for each method.
//
//   compare --task lm --seeds 2 --steps 1500 --out runs/compare-lm
//   compare --task vit --methods mha,moh50 --epochs 2
//
// The method presets (mha, moa, moh75, moh50, mae) are method_preset() in
// examples/common/model_options.h; mae-equal-updates is MAE's preset trained
// for as many steps as its BCD needs to give the experts as many updates as
// MHA's --steps (G blocks freeze the experts, so plain mae gets about half).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <limits>
#include <memory>
#include <thread>

#include "headroom/core/atomic_file.h"
#include "headroom/core/safetensors.h"
#include "headroom/core/threading.h"
#include "headroom/examples/common/lm_task.h"
#include "headroom/examples/common/mt_task.h"
#include "headroom/examples/common/plot.h"
#include "headroom/examples/common/progress.h"
#include "headroom/examples/common/vit_task.h"

using namespace headroom;
using namespace headroom::examples;

namespace {

const char* const kEqualUpdates = "mae-equal-updates";
const std::vector<std::string> kMethods = {"mha", "moa", "moh75", "moh50", "mae", kEqualUpdates};

std::string known_methods() {
  std::string names;
  for (const std::string& method : kMethods) names += (names.empty() ? "" : ", ") + method;
  return names;
}

// The quality metric of each task, and whether higher is better.
std::pair<std::string, bool> quality_metric(const std::string& task) {
  if (task == "lm") return {"bits_per_byte", false};
  if (task == "mt") return {"test_bleu", true};
  return {"test_accuracy", true};
}

// A number as the console shows it: one of cli.h's formats.
using Format = std::function<std::string(double)>;

// "mean ± half-range" over seeds.
std::string mean_spread(const std::vector<double>& values, const Format& format) {
  double sum = 0, lo = values.front(), hi = values.front();
  for (double v : values) sum += v, lo = std::min(lo, v), hi = std::max(hi, v);
  std::string text = format(sum / double(values.size()));
  return values.size() > 1 ? text + " ± " + format((hi - lo) / 2) : text;
}

double mean(const std::vector<double>& values) {
  double sum = 0;
  for (double v : values) sum += v;
  return sum / double(values.size());
}

// ---- the methods ------------------------------------------------------------

// The model a method trains: mae-equal-updates is MAE's preset.
ModelOptions method_model(const std::string& method, const ModelOptions& base) {
  return method_preset(method == kEqualUpdates ? "mae" : method, base);
}

// Expert (θ) updates in MAE's first `steps` steps: every warm-start and F
// step; G steps update only the gate (joint training updates both).
int64_t expert_updates(int64_t steps, const TrainOptions& o) {
  if (o.mae_joint) return steps;
  const int64_t warm = std::min(steps, o.bcd_warm), rest = steps - warm, block = o.bcd_f + o.bcd_g;
  return warm + rest / block * o.bcd_f + std::min(rest % block, o.bcd_f);
}

// The fewest MAE steps with at least `updates` expert updates (the inverse of expert_updates).
int64_t steps_for_expert_updates(int64_t updates, const TrainOptions& o) {
  if (o.mae_joint || updates <= o.bcd_warm) return updates;
  const int64_t rest = updates - o.bcd_warm, full_blocks = (rest - 1) / o.bcd_f;
  return o.bcd_warm + full_blocks * (o.bcd_f + o.bcd_g) + (rest - full_blocks * o.bcd_f);
}

// The presets of --methods, each known and named once; checked before the
// first run trains, so a typo in the last name costs no training.
std::vector<std::string> checked_methods(const std::string& list, const ModelOptions& model) {
  std::vector<std::string> methods = split_list(list);
  if (methods.empty()) throw UsageError("--methods names no preset");
  for (size_t i = 0; i < methods.size(); ++i) {
    if (std::find(kMethods.begin(), kMethods.end(), methods[i]) == kMethods.end())
      throw UsageError("unknown method '" + methods[i] + "' in --methods (known: " + known_methods() + ")");
    method_model(methods[i], model);
    if (std::find(methods.begin(), methods.begin() + i, methods[i]) != methods.begin() + i)
      throw UsageError("--methods names '" + methods[i] + "' twice");
  }
  return methods;
}

// ---- the runs ---------------------------------------------------------------

struct PlannedRun {
  std::string method;
  ModelOptions model;
  TrainOptions options;
  LmOptions lm;  // the task's options, settled for this run (settle_task_options)
  MtOptions mt;
  VitOptions vit;
  // Flags bound to this run's options (not parsed): what its checkpoint
  // stores as the run's settings, and what --resume takes back from it.
  std::unique_ptr<Flags> settings;
};

// Every run, in order: each method over the seeds.  --eval-every and
// --log-every left at their defaults give about 20 evaluations and 10
// progress lines per run, so every curve has points to compare.
std::vector<PlannedRun> plan_runs(const std::vector<std::string>& methods, const ModelOptions& model,
                                  const TrainOptions& base, int64_t seeds, const std::string& out, const Flags& flags) {
  std::vector<PlannedRun> runs;
  for (const std::string& method : methods)
    for (int64_t s = 0; s < seeds; ++s) {
      TrainOptions o = base;
      o.seed = base.seed + uint64_t(s);
      if (method == kEqualUpdates) o.steps = steps_for_expert_updates(base.steps, base);
      if (!flags.was_set("eval-every")) o.eval_every = std::max<int64_t>(base.steps / 20, 1);
      if (!flags.was_set("log-every")) o.log_every = std::max<int64_t>(o.steps / 10, 1);
      o.ckpt_dir = out + "/" + method + "-seed" + std::to_string(o.seed);
      runs.push_back({method, method_model(method, model), o});
    }
  return runs;
}

// The outer progress line: which run, how long so far, and the ETA from the
// seconds per step of the runs done.
void print_outer_progress(const std::vector<PlannedRun>& runs, size_t index, double elapsed) {
  int64_t steps_done = 0, steps_left = 0;
  for (size_t i = 0; i < runs.size(); ++i) (i < index ? steps_done : steps_left) += runs[i].options.steps;
  const std::string eta =
      steps_done > 0 ? format_duration(elapsed / double(steps_done) * double(steps_left)) : "after the first run";
  const PlannedRun& run = runs[index];
  std::printf("\n== run %zu of %zu: %s, seed %llu, %lld steps | elapsed %s | ETA %s | -> %s\n", index + 1, runs.size(),
              run.method.c_str(), (unsigned long long)run.options.seed, (long long)run.options.steps,
              format_duration(elapsed).c_str(), eta.c_str(), run.options.ckpt_dir.c_str());
  std::fflush(stdout);
}

// A finished run: its summary and its validation loss per evaluation.
struct FinishedRun {
  RunSummary summary;
  std::vector<double> steps, seconds, valid_loss;  // one entry per evaluation
};

FinishedRun finished_run(RunSummary summary, const std::string& run_dir) {
  FinishedRun run{std::move(summary), {}, {}, {}};
  for (const auto& row : read_jsonl_numbers(run_dir + "/log.jsonl", "eval")) {
    double step = NAN, seconds = NAN, loss = NAN;
    for (const auto& [key, value] : row) {
      if (key == "step") step = value;
      if (key == "elapsed_s") seconds = value;
      if (key == "loss") loss = value;
    }
    run.steps.push_back(step), run.seconds.push_back(seconds), run.valid_loss.push_back(loss);
  }
  return run;
}

// ---- the table --------------------------------------------------------------

// Seconds until the run's validation loss first reaches `target`; NaN when it never does.
double seconds_to_reach(const FinishedRun& run, double target) {
  for (size_t i = 0; i < run.valid_loss.size(); ++i)
    if (run.valid_loss[i] <= target) return run.seconds[i];
  return NAN;
}

// The validation loss of the last evaluation at or before `seconds`; NaN when none was that early.
double loss_at_seconds(const FinishedRun& run, double seconds) {
  double loss = NAN;
  for (size_t i = 0; i < run.valid_loss.size() && run.seconds[i] <= seconds; ++i) loss = run.valid_loss[i];
  return loss;
}

// The mean of the finite values over seeds, with how many seeds had one when not all.
std::string mean_over_seeds(const std::vector<double>& values, const Format& format, const char* none) {
  std::vector<double> finite;
  for (double v : values)
    if (std::isfinite(v)) finite.push_back(v);
  if (finite.empty()) return none;
  std::string text = mean_spread(finite, format);
  if (finite.size() < values.size())
    text += " (" + std::to_string(finite.size()) + " of " + std::to_string(values.size()) + " seeds)";
  return text;
}

// What the comparison of quality against time is measured by: the first
// method's final validation loss (mean over seeds), and the wall-clock
// budget every method had (the shortest run's last evaluation).
struct TimeReference {
  double target_loss = NAN, budget_seconds = INFINITY;
};

TimeReference time_reference(const std::vector<std::vector<FinishedRun>>& by_method) {
  TimeReference ref;
  std::vector<double> first_losses;
  for (const FinishedRun& run : by_method.front()) first_losses.push_back(run.valid_loss.back());
  ref.target_loss = mean(first_losses);
  for (const auto& runs : by_method)
    for (const FinishedRun& run : runs) ref.budget_seconds = std::min(ref.budget_seconds, run.seconds.back());
  return ref;
}

// format_metric for the metric `name`.
Format metric_format(const std::string& name) {
  return [name](double value) { return format_metric(name, value); };
}

// The cells of one method, each number in the format its console line uses
// (model_summary, describe), so that the table and the console read alike.
// The reference (first) method's row leaves its comparisons with itself
// empty: the time to its own loss, its parameters' change.
std::vector<std::string> table_row(const std::string& method, const std::vector<FinishedRun>& runs,
                                   int64_t first_params, const TimeReference& ref, bool reference) {
  const RunSummary& first = runs.front().summary;
  const std::string metric = quality_metric(first.task).first;
  std::vector<double> quality, loss, to_target, at_budget, speed, memory;
  for (const FinishedRun& run : runs) {
    quality.push_back(run.summary.metric(metric));
    loss.push_back(run.summary.metric("loss"));
    to_target.push_back(seconds_to_reach(run, ref.target_loss));
    at_budget.push_back(loss_at_seconds(run, ref.budget_seconds));
    speed.push_back(run.summary.items_per_second);
    memory.push_back(double(run.summary.peak_bytes));
  }
  char change[32];
  std::snprintf(change, sizeof change, " (%+.1f%%)",
                100.0 * double(first.parameters - first_params) / double(first_params));
  return {method,
          mean_spread(quality, metric_format(metric)),
          mean_spread(loss, metric_format("loss")),
          mean_over_seeds(at_budget, metric_format("loss"), "no evaluation yet"),
          reference ? "" : mean_over_seeds(to_target, format_seconds, "not reached"),
          format_count(first.steps),
          format_percent(first.active_heads),
          format_count(first.parameters) + (reference ? "" : change),
          format_si(first.macs_per_item),
          mean_spread(speed, format_si),
          format_mib(std::round(mean(memory)))};
}

// The header: each metric column says which way is better (for the costs:
// cheaper), and the wall-clock columns say when each method ran once (no
// spread to read).
std::vector<std::string> table_header(const std::string& task, const std::string& reference, const TimeReference& ref,
                                      bool one_run) {
  const auto [metric, higher_better] = quality_metric(task);
  const std::string lower = " (lower is better)", higher = " (higher is better)", cheaper = " (lower is cheaper)";
  const std::string timed_lower = one_run ? " (lower is better; one run)" : lower;
  const std::string timed_higher = one_run ? " (higher is better; one run)" : higher;
  return {"method",
          metric + (higher_better ? higher : lower),
          "valid loss" + lower,
          "valid loss at " + format_seconds(ref.budget_seconds) + timed_lower,
          "time to " + reference + "'s valid loss " + format_metric("loss", ref.target_loss) + timed_lower,
          "steps",
          "active heads" + cheaper,
          "parameters (vs " + reference + "; lower is cheaper)",
          "MACs/" + std::string(task == "vit" ? "image" : "token") + cheaper,
          (task == "vit" ? "img/s" : "tok/s") + timed_higher,
          "peak memory" + cheaper};
}

// What "active heads" counts for each method of the table.
std::string active_heads_notes(const std::vector<std::string>& methods) {
  const std::vector<std::pair<std::string, std::string>> meanings{
      {"mha", "every head runs for every token"},
      {"moa",
       "k d_h / d, the k experts a token chooses of width d_h against MHA's d: k / h at the preset's "
       "d_h = d / h"},
      {"moh75", "(h_s + K_r) / h, the shared heads and the K_r routed heads each token chooses"},
      {"moh50", "(h_s + K_r) / h, the shared heads and the K_r routed heads each token chooses"},
      {"mae", "every head: its mixture runs all h experts of h - 1 heads for every token"},
      {kEqualUpdates, "every head, as mae"}};
  std::string notes = "Active heads, the share of heads that run per token:\n";
  for (const auto& [method, meaning] : meanings)
    if (std::find(methods.begin(), methods.end(), method) != methods.end())
      notes += "- " + method + ": " + meaning + "\n";
  return notes;
}

// ---- the machine ------------------------------------------------------------

// The first "model name" of /proc/cpuinfo, or "an unknown CPU".
std::string cpu_model() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    if (line.rfind("model name", 0) != 0 || line.find(':') == std::string::npos) continue;
    const size_t value = line.find_first_not_of(" \t", line.find(':') + 1);
    if (value != std::string::npos) return line.substr(value);
  }
  return "an unknown CPU";
}

// The 1-, 5- and 15-minute load averages of /proc/loadavg, or "unknown".
std::string load_average() {
  std::ifstream loadavg("/proc/loadavg");
  std::string one, five, fifteen;
  if (!(loadavg >> one >> five >> fifteen)) return "unknown";
  return one + " " + five + " " + fifteen;
}

// Where the wall-clock columns were measured, and how busy the machine was.
struct Machine {
  std::string cpu = cpu_model(), load_at_start = load_average(), load_at_end;
  int threads = 0;
};

std::string machine_line(const Machine& m) {
  const std::string threads = std::to_string(m.threads) + (m.threads == 1 ? " thread" : " threads");
  return "Measured on " + m.cpu + " (" + std::to_string(std::thread::hardware_concurrency()) + " CPUs) with " +
         threads + "; load average (1, 5, 15 minutes, /proc/loadavg) " + m.load_at_start + " at the start and " +
         m.load_at_end + " at the end.\n";
}

// table.md: the machine, the table, and what "active heads" means.
std::string results_table(const std::string& task, const std::vector<std::string>& methods,
                          const std::vector<std::vector<FinishedRun>>& by_method, const Machine& machine) {
  const TimeReference ref = time_reference(by_method);
  const int64_t first_params = by_method.front().front().summary.parameters;
  std::vector<std::vector<std::string>> rows;
  for (size_t m = 0; m < methods.size(); ++m)
    rows.push_back(table_row(methods[m], by_method[m], first_params, ref, m == 0));
  const bool one_run = by_method.front().size() == 1;
  return machine_line(machine) + "\n" + markdown_table(table_header(task, methods.front(), ref, one_run), rows) + "\n" +
         active_heads_notes(methods);
}

// The first seed's validation loss of every method against `x` (steps or seconds).
void plot_curves(const std::string& path, const std::vector<std::string>& methods,
                 const std::vector<std::vector<FinishedRun>>& by_method, bool against_time, const std::string& task) {
  LineChart chart;
  chart.title = "compare " + task + ": validation loss (seed " + std::to_string(by_method[0][0].summary.seed) + ")";
  chart.x_label = against_time ? "elapsed seconds" : "step", chart.y_label = "loss (nats)";
  for (size_t m = 0; m < methods.size(); ++m) {
    const FinishedRun& run = by_method[m].front();
    chart.series.push_back(
        {methods[m], against_time ? run.seconds : run.steps, run.valid_loss, method_color(methods[m])});
  }
  plot_lines(path, chart);
}

struct CompareOptions {
  std::string task = "lm", methods = "mha,moa,moh75,moh50,mae", out;
  int64_t seeds = 2;
};

// The task flags a run's checkpoint fixes, for --resume and --eval-only: the
// lengths it was trained at (settle_trained_value), each from the run's own
// folder.
void settle_task_options(const Flags& flags, const std::string& task, PlannedRun& run) {
  if (task == "lm") settle_lm_options(flags, run.lm, run.options);
  if (task == "mt") settle_mt_options(flags, run.mt, run.options);
  if (task == "vit") settle_vit_options(flags, run.vit, run.options);
}

// ---- compare's own settings --------------------------------------------------
// OUT/compare.safetensors holds, as metadata alone (checksummed like a
// checkpoint), the command line of the compare that wrote OUT, so that a
// plain --resume or --eval-only plans the same runs (methods, seeds, model,
// steps) even for runs that never saved a checkpoint.  The flags of one
// invocation are not kept.
const std::set<std::string> kInvocationFlags{"resume", "eval-only", "overwrite", "out", "device", "tf32", "max-memory"};

std::string settings_path(const std::string& out) { return out + "/compare.safetensors"; }

void save_compare_settings(const Flags& flags, const std::string& out, const std::string& task) {
  StringMap settings{{"task", task}};
  for (const auto& [name, value] : flags.values())
    if (!kInvocationFlags.count(name) && name != "task") settings["flag." + name] = value;
  std::filesystem::create_directories(out);
  save_safetensors(settings_path(out), {}, settings);
}

// --resume and --eval-only: each kept setting not given becomes the flag's
// value, with the flag's checks.
void restore_compare_settings(Flags& flags, const TrainOptions& o, const std::string& out, const std::string& task) {
  if (!o.resume && !o.eval_only) return;
  const std::string path = settings_path(out);
  std::error_code ignored;
  if (!std::filesystem::exists(path, ignored)) {
    std::printf("note: %s is missing; the runs are planned from the command line alone\n", path.c_str());
    return;
  }
  const SafetensorsFile kept = load_safetensors_header(path);
  HEADROOM_CHECK(kept.checksummed, "[compare] ", path, " has lost its checksums; it is refused");
  const std::string& kept_task = metadata_entry(kept.metadata, "task", path);
  HEADROOM_CHECK(kept_task == task, "[compare] ", out, " holds a compare of --task ", kept_task, ", not ", task,
                 "; pass --task ", kept_task);
  for (const auto& [key, value] : kept.metadata) {
    if (key.rfind("flag.", 0) != 0) continue;
    const std::string name = key.substr(5);
    // A flag given wins: the runs' own checks judge it against their checkpoints.
    if (!flags.declares(name) || kInvocationFlags.count(name) || flags.was_set(name)) continue;
    restore_setting(flags, name, value, "[compare] " + path + ": its setting " + name);
  }
}

// --resume needs a compare that saved a checkpoint: with none, the runs would all start from step 0.
void check_something_to_resume(const std::vector<PlannedRun>& runs, const TrainOptions& o, const std::string& out) {
  if (!o.resume) return;
  std::error_code ignored;
  for (const PlannedRun& run : runs)
    if (std::filesystem::exists(checkpoint_path(run.options.ckpt_dir), ignored)) return;
  HEADROOM_FAIL("[compare] --resume: no run under ", out, " has a checkpoint (",
                checkpoint_path(runs.front().options.ckpt_dir),
                " is the first), so there is nothing to resume; start the comparison without --resume");
}

// --resume of a compare stopped before this run saved a checkpoint (or
// began): nothing to resume, so the run starts from step 0, replacing
// what a stopped start left in its folder.
void start_unsaved_run_afresh(TrainOptions& o) {
  std::error_code ignored;
  if (!o.resume || std::filesystem::exists(checkpoint_path(o.ckpt_dir), ignored)) return;
  std::printf("note: %s holds no checkpoint yet; --resume starts this run from step 0\n", o.ckpt_dir.c_str());
  o.resume = false;
  o.overwrite = true;
}

// The train and task flags bound to `run`'s own options (the run's settings).
std::unique_ptr<Flags> run_settings(const std::string& task, PlannedRun& run) {
  auto settings = std::make_unique<Flags>("compare", "the settings of run " + run.options.ckpt_dir);
  if (task == "lm") add_lm_flags(*settings, run.lm);
  if (task == "mt") add_mt_flags(*settings, run.mt);
  if (task == "vit") add_vit_flags(*settings, run.vit);
  add_train_flags(*settings, run.options);
  return settings;
}

RunSummary run_task(const std::string& task, const PlannedRun& run, const TrainOptions& options) {
  if (task == "lm") return run_lm(run.lm, run.model, options);
  if (task == "mt") return run_mt(run.mt, run.model, options);
  return run_vit(run.vit, run.model, options);
}

// A run that --resume finds finished: its checkpoint evaluated (--eval-only)
// and what its training measured read back from the summary line its log ends with.
RunSummary finished_run_summary(const std::string& task, const PlannedRun& run) {
  std::printf("finished already: evaluating its checkpoint and reading its training figures from its log\n");
  TrainOptions evaluation = run.options;
  evaluation.resume = false;
  evaluation.eval_only = true;
  RunSummary summary = run_task(task, run, evaluation);
  const LogRows rows = read_jsonl_numbers(run.options.ckpt_dir + "/log.jsonl", "summary");
  HEADROOM_CHECK(!rows.empty(), "[compare] ", run.options.ckpt_dir,
                 "/log.jsonl has no summary line: the run's training figures are lost; rerun it with --overwrite");
  for (const auto& [key, value] : rows.back()) {
    if (key == "items_per_second") summary.items_per_second = value;
    if (key == "training_seconds") summary.seconds = value;
    if (key == "peak_bytes") summary.peak_bytes = size_t(value);
  }
  summary.eval_only = false;
  return summary;
}

// Trains (or with --resume continues) one run; a plain --resume of a finished one reads it back.
RunSummary train_one(const std::string& task, const PlannedRun& run) {
  if (run.options.resume) {
    const std::string path = checkpoint_path(run.options.ckpt_dir);
    const int64_t step = metadata_int(read_checkpoint_metadata(run.options.ckpt_dir), "train.step", path, 0,
                                      std::numeric_limits<int64_t>::max());
    if (step >= run.options.steps) return finished_run_summary(task, run);
  }
  return run_task(task, run, run.options);
}

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
  flags.add("methods", &c.methods, "comma-separated presets: " + known_methods());
  flags.add("seeds", &c.seeds, "seeds per method", {1, 1000});
  flags.add("out", &c.out, "folder for the runs, table.md, curves.png and curves_time.png");
  if (task == "lm") add_lm_flags(flags, lm);
  if (task == "mt") add_mt_flags(flags, mt);
  if (task == "vit") add_vit_flags(flags, vit);
  add_model_flags(flags, model,
                  task == "lm"   ? ModelStacks::decoder
                  : task == "mt" ? ModelStacks::encoder_decoder
                                 : ModelStacks::encoder);
  add_train_flags(flags, train_options);
  // The presets set each run's attention, --out its folder, and each run evaluates and logs at its own cadence.
  for (const char* preset : {"attn", "attn-opt", "ckpt"}) flags.remove(preset);
  flags.describe_default("eval-every",
                         std::to_string(std::max<int64_t>(train_options.steps / 20, 1)) + ": a twentieth of --steps");
  flags.describe_default("log-every",
                         std::to_string(std::max<int64_t>(train_options.steps / 10, 1)) + ": a tenth of --steps");
  return run_main(flags, [&] {
    if (!flags.parse(argc, argv)) return 0;
    if (task != "lm" && task != "mt" && task != "vit")
      throw UsageError("--task must be lm, mt or vit, got '" + task + "'");
    check_flags_apply(flags);
    restore_compare_settings(flags, train_options, c.out, task);
    settle_train_options(flags, train_options);
    const std::vector<std::string> methods = checked_methods(c.methods, model);
    std::vector<PlannedRun> runs = plan_runs(methods, model, train_options, c.seeds, c.out, flags);
    check_something_to_resume(runs, train_options, c.out);
    for (PlannedRun& run : runs) {  // before the first run trains; `runs` keeps its size, so the bindings hold
      start_unsaved_run_afresh(run.options);
      check_run_directory(run.options);
      run.lm = lm, run.mt = mt, run.vit = vit;
      run.settings = run_settings(task, run);
      settle_resumed_settings(flags, *run.settings, run.options);
      settle_task_options(flags, task, run);
      run.options.settings = run.settings.get();
    }
    if (!train_options.resume && !train_options.eval_only) save_compare_settings(flags, c.out, task);
    // What the config table shows: the first run's settings (with --resume, its checkpoint's).
    lm = runs.front().lm, mt = runs.front().mt, vit = runs.front().vit;
    train_options = runs.front().options;
    if (train_options.threads > 0) set_num_threads(train_options.threads);
    std::printf("%s\n", run_config_table(flags, train_options).c_str());
    std::vector<std::vector<FinishedRun>> by_method(methods.size());
    Machine machine;  // its load average at the start
    const auto start = std::chrono::steady_clock::now();
    for (size_t i = 0; i < runs.size(); ++i) {
      print_outer_progress(runs, i, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      RunSummary summary = train_one(task, runs[i]);
      std::printf("%s", describe(summary).c_str());
      if (summary.interrupted) {
        std::printf("compare stopped after run %zu of %zu; no table written\n", i + 1, runs.size());
        return 130;
      }
      const size_t m = std::find(methods.begin(), methods.end(), runs[i].method) - methods.begin();
      by_method[m].push_back(finished_run(std::move(summary), runs[i].options.ckpt_dir));
    }
    machine.threads = num_threads();
    machine.load_at_end = load_average();
    const std::string table = results_table(task, methods, by_method, machine);
    std::filesystem::create_directories(c.out);
    write_file_atomically(c.out + "/table.md", table, "compare");
    plot_curves(c.out + "/curves.png", methods, by_method, false, task);
    plot_curves(c.out + "/curves_time.png", methods, by_method, true, task);
    std::printf("\n%s\ntable: %s/table.md, curves: %s/curves.png (by step), %s/curves_time.png (by time)\n",
                table.c_str(), c.out.c_str(), c.out.c_str(), c.out.c_str());
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
