#include "headroom/examples/common/report.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "headroom/core/atomic_file.h"
#include "headroom/examples/common/model_options.h"
#include "headroom/examples/common/plot.h"
#include "headroom/examples/common/progress.h"
#include "headroom/models/moh.h"

namespace headroom::examples {

namespace {

// "title: label", with the run folder's name when no label is given.
std::string titled(const std::string& title, const std::string& run_dir, const std::string& label) {
  if (!label.empty()) return title + ": " + label;
  std::filesystem::path dir(run_dir);
  if (dir.filename().empty()) dir = dir.parent_path();  // "runs/lm/" names "lm"
  return title + ": " + dir.filename().string();
}

// "layer 3", or "encoder self layer 3" in an encoder-decoder.
std::string layer_name(const std::string& stack, int64_t layer) {
  return (stack.empty() ? "" : stack + " ") + "layer " + std::to_string(layer);
}

double field(const std::vector<std::pair<std::string, double>>& row, const std::string& name) {
  for (const auto& [key, value] : row)
    if (key == name) return value;
  return NAN;
}

// (x, y) of `name` over the log rows that have it.
LineSeries series_of(const std::string& label, const LogRows& rows, const std::string& name) {
  LineSeries s{label, {}, {}};
  for (const auto& row : rows) {
    double value = field(row, name);
    if (std::isfinite(value)) s.x.push_back(field(row, "step")), s.y.push_back(value);
  }
  return s;
}

// The mean of the last `window` points, from the first point that has that
// many: a shorter mean at the start would not be what the label says.
LineSeries trailing_mean(const LineSeries& raw, size_t window) {
  LineSeries smooth{raw.name + ", mean of the last " + std::to_string(window) + " steps", {}, {}};
  double sum = 0;
  for (size_t i = 0; i < raw.y.size(); ++i) {
    sum += raw.y[i] - (i >= window ? raw.y[i - window] : 0.0);
    if (i + 1 >= window) smooth.x.push_back(raw.x[i]), smooth.y.push_back(sum / double(window));
  }
  return smooth;
}

std::vector<int64_t> routed_layers(const RoutingRecorder& recorder) {
  std::vector<int64_t> layers;
  for (int64_t l = 0; l < recorder.layers(); ++l)
    if (recorder.experts(l) > 0) layers.push_back(l);
  return layers;
}

std::vector<std::string> expert_names(int64_t experts) {
  std::vector<std::string> names;
  for (int64_t e = 0; e < experts; ++e) names.push_back(std::to_string(e));
  return names;
}

void plot_load(const std::string& run_dir, const RoutingRecorder& recorder, const std::string& label,
               const std::string& stack) {
  std::vector<int64_t> layers = routed_layers(recorder);
  const int64_t experts = recorder.experts(layers.front());
  BarChart bars;
  bars.title = titled("head / expert density per layer", run_dir, label);
  bars.x_label = "head / expert", bars.y_label = "density (share of tokens that use it)";
  bars.categories = expert_names(experts);
  Heatmap heat;
  heat.title = titled("density, layer x head / expert", run_dir, label);
  heat.row_label = stack.empty() ? "layer" : stack + " layer", heat.col_label = "head / expert";
  heat.cols = bars.categories;
  for (int64_t l : layers) {
    BarGroup group{layer_name(stack, l), {}};
    for (int64_t e = 0; e < experts; ++e) group.values.push_back(recorder.density(l, e));
    heat.rows.push_back(std::to_string(l));
    heat.values.push_back(group.values);
    bars.groups.push_back(std::move(group));
  }
  plot_bars(run_dir + "/load.png", bars);
  plot_heatmap(run_dir + "/load_heatmap.png", heat);
}

// Gate histograms summed over layers: shared vs routed heads (MoH), or all;
// the note under the title says what sets the gates' scale.
void plot_gates(const std::string& run_dir, const RoutingRecorder& recorder, const Module& model,
                const std::string& label) {
  const int64_t shared_heads = shared_head_count(model);
  std::vector<int64_t> layers = routed_layers(recorder);
  const size_t bins = recorder.histogram(layers.front(), 0).size();
  std::vector<double> shared(bins, 0), routed(bins, 0);
  double max_gate = 0;
  for (int64_t l : layers) {
    max_gate = std::max(max_gate, recorder.max_gate(l));
    for (int64_t e = 0; e < recorder.experts(l); ++e) {
      std::vector<int64_t> h = recorder.histogram(l, e);
      for (size_t b = 0; b < bins; ++b) (e < shared_heads ? shared : routed)[b] += double(h[b]);
    }
  }
  BarChart chart;
  chart.title = titled("gate values, all layers", run_dir, label);
  chart.x_label = "gate value (bin lower edge)", chart.y_label = "fraction of gates";
  chart.note = gate_scale_note(model);
  for (size_t b = 0; b < bins; ++b) {
    char edge[16];
    std::snprintf(edge, sizeof edge, "%.2g", max_gate * double(b) / double(bins));
    chart.categories.push_back(edge);
  }
  auto fractions = [](std::vector<double> counts) {
    double total = 0;
    for (double c : counts) total += c;
    for (double& c : counts) c = total > 0 ? c / total : 0;
    return counts;
  };
  if (shared_heads > 0) chart.groups.push_back({"shared heads", fractions(shared)});
  chart.groups.push_back({shared_heads > 0 ? "routed heads" : "heads / experts", fractions(routed)});
  plot_bars(run_dir + "/gates.png", chart);
}

// pmi.md: every routed (layer, expert) with its assignments and what its top
// tokens by PMI say (top_tokens_text).
void write_pmi_table(const std::string& run_dir, const RoutingRecorder& recorder,
                     const std::function<std::string(int32_t)>& token_name, const std::string& stack) {
  std::vector<std::vector<std::string>> rows;
  for (int64_t l : routed_layers(recorder))
    for (int64_t e = 0; e < recorder.experts(l); ++e) {
      const int64_t assignments = recorder.count(l, e);
      const auto top = recorder.top_pmi(l, e, kPmiTopTokens, kPmiMinCount);
      rows.push_back({layer_name(stack, l), std::to_string(e), std::to_string(assignments),
                      top_tokens_text(top, assignments, token_name)});
    }
  const std::string table =
      "Each head's / expert's top tokens by PMI, log p(token, expert) - log p(token) - log p(expert), among the "
      "tokens it was chosen for at least " +
      std::to_string(kPmiMinCount) + " times (models/stats.h).\n\n" +
      markdown_table({"layer", "expert", "assignments", "top tokens by PMI"}, rows);
  write_file_atomically(run_dir + "/pmi.md", table, "report");
}

}  // namespace

std::string top_tokens_text(const std::vector<std::pair<int32_t, double>>& top, int64_t assignments,
                            const std::function<std::string(int32_t)>& token_name) {
  if (assignments == 0) return "never chosen";
  if (top.empty()) return "no token chosen " + std::to_string(kPmiMinCount) + " times";
  char score[32];
  if (top.size() >= 2 && top.front().second - top.back().second <= 1e-6) {
    std::snprintf(score, sizeof score, "%.2f", top.front().second);
    return "no token stands out: PMI " + std::string(score) + " for each";
  }
  std::string tokens;
  for (const auto& [token, pmi] : top) {
    std::snprintf(score, sizeof score, " (%.2f)", pmi);
    tokens += (tokens.empty() ? "" : ", ") + token_name(token) + score;
  }
  return tokens;
}

std::vector<LineSeries> loss_series(const LogRows& train_rows, const LogRows& eval_rows) {
  LineSeries train = series_of("train", train_rows, "loss");
  std::vector<LineSeries> all{train, trailing_mean(train, kLossWindow), series_of("validation", eval_rows, "loss")};
  std::vector<LineSeries> drawn;
  for (size_t i = 0; i < all.size(); ++i) {
    all[i].color = palette_color(i);  // the same colours whether the mean is drawn or not
    if (!all[i].x.empty()) drawn.push_back(std::move(all[i]));
  }
  return drawn;
}

void write_curve_plots(const std::string& run_dir, const std::string& metric, const std::string& label) {
  const std::string log = run_dir + "/log.jsonl";
  if (!std::filesystem::exists(log)) return;
  auto train_rows = read_jsonl_numbers(log, "train"), eval_rows = read_jsonl_numbers(log, "eval");
  if (train_rows.empty()) return;
  LineChart loss;
  loss.title = titled("loss", run_dir, label), loss.x_label = "step", loss.y_label = "loss (nats)";
  loss.series = loss_series(train_rows, eval_rows);
  plot_lines(run_dir + "/loss.png", loss);
  LineSeries quality = series_of(metric, eval_rows, metric);
  if (quality.x.empty()) return;
  LineChart chart;
  chart.title = titled("validation " + metric, run_dir, label), chart.x_label = "step", chart.y_label = metric;
  chart.series = {quality};
  plot_lines(run_dir + "/eval.png", chart);
}

std::string gate_scale_note(const Module& model) {
  int64_t largest = 0;  // of K_r and h_s over the MoH layers whose gates the code's factors scale
  for (const auto& moh : collect_modules<MoHAttention>(model)) {
    const MoHConfig& c = moh->moh_config;
    if (c.scaling == MoHConfig::GateScaling::code && c.router == MoHConfig::Router::learned)
      largest = std::max({largest, c.routed_k, c.shared_heads});
  }
  if (largest == 0) return "every gate lies in [0, 1]: router probabilities or 0/1 choices";
  return "gates past 1: MoH's scaling=code, a token's routed gates sum to a2 K_r, shared ones to a1 h_s, a1 + a2 = 2; "
         "each at most 2 max(K_r, h_s) = " +
         std::to_string(2 * largest);
}

void write_routing_report(const std::string& run_dir, const RoutingRecorder& recorder, const Module& model,
                          const std::function<std::string(int32_t)>& token_name, const std::string& label,
                          const std::string& stack) {
  if (routed_layers(recorder).empty()) return;
  recorder.write_json(run_dir + "/routing.json");
  recorder.write_csv(run_dir + "/routing.csv");
  plot_load(run_dir, recorder, label, stack);
  plot_gates(run_dir, recorder, model, label);
  if (token_name) write_pmi_table(run_dir, recorder, token_name, stack);
}

bool has_routed_attention(const Module& model) {
  for (const auto& layer : collect_modules<Attention>(model))
    if (attention_choice(*layer).type != "mha") return true;
  return false;
}

Heatmap class_load_heatmap(const std::vector<RoutingRecorder>& per_class, const std::vector<std::string>& class_names) {
  const std::vector<int64_t> layers = routed_layers(per_class.front());
  Heatmap heat;
  heat.row_label = "true class";
  heat.col_label = "head / expert of each layer (L1 h2: layer 1, head 2)";
  heat.rows = class_names;
  for (int64_t l : layers)
    for (int64_t e = 0; e < per_class.front().experts(l); ++e)
      heat.cols.push_back("L" + std::to_string(l) + " h" + std::to_string(e));
  for (const RoutingRecorder& recorder : per_class) {
    std::vector<double> row;
    for (int64_t l : layers)
      for (int64_t e = 0; e < recorder.experts(l); ++e) row.push_back(recorder.density(l, e));
    heat.values.push_back(std::move(row));
  }
  return heat;
}

void write_class_routing_report(const std::string& run_dir, const std::vector<RoutingRecorder>& per_class,
                                const std::vector<std::string>& class_names, const std::string& label) {
  if (per_class.empty() || routed_layers(per_class.front()).empty()) return;
  std::string csv = "class,layer,expert,density\n";
  for (size_t c = 0; c < per_class.size(); ++c)
    for (int64_t l : routed_layers(per_class[c]))
      for (int64_t e = 0; e < per_class[c].experts(l); ++e)
        csv += class_names[c] + "," + std::to_string(l) + "," + std::to_string(e) + "," +
               std::to_string(per_class[c].density(l, e)) + "\n";
  write_file_atomically(run_dir + "/routing_by_class.csv", csv, "report");
  Heatmap heat = class_load_heatmap(per_class, class_names);
  heat.title = titled("density by class, every layer", run_dir, label);
  plot_heatmap(run_dir + "/load_by_class.png", heat);
}

}  // namespace headroom::examples
