#include "headroom/models/stats.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <sstream>

#include "headroom/core/atomic_file.h"
#include "headroom/core/json.h"

namespace headroom {

namespace {

// One layer's routing decisions of an add(), validated and read out.
struct LayerBatch {
  int64_t experts = 0;           // E; 0: a dense layer, nothing to record
  int64_t k = 0;                 // indices per row; 0: no indices
  std::vector<double> gates;     // [N, E]
  std::vector<int32_t> indices;  // [N, k]
  std::vector<char> unindexed;   // [E]: load counts assignments of e beyond the indices'

  // selected[e] = 1 when row n uses expert e (the rule in stats.h).
  void selection(int64_t n, std::vector<char>& selected) const {
    for (int64_t e = 0; e < experts; ++e) selected[e] = unindexed[e] && gates[n * experts + e] > 0;
    for (int64_t j = 0; j < k; ++j) selected[indices[n * k + j]] = 1;
  }
};

// Finite values >= 0 (gates and load).
void check_non_negative(const std::vector<double>& values, int64_t layer, const char* what) {
  for (double v : values)
    HEADROOM_CHECK(std::isfinite(v) && v >= 0, "[RoutingRecorder] layer ", layer, ": ", what, " ", v,
                   ", expected finite values >= 0");
}

// rows: N given by tokens/valid, or -1 when neither is defined (the gates set it).
LayerBatch read_layer(const RoutingStats& stats, int64_t layer, int64_t rows) {
  LayerBatch batch;
  if (!stats.gates.defined()) {
    HEADROOM_CHECK(!stats.indices.defined(), "[RoutingRecorder] layer ", layer,
                   " has indices but no gates: expected gates [N, E] with them");
    return batch;
  }
  const Tensor& g = stats.gates;
  check_floating("RoutingRecorder", g, "gates");
  HEADROOM_CHECK(g.dim() == 2 && (rows < 0 || g.size(0) == rows), "[RoutingRecorder] layer ", layer, ": gates ",
                 shape_str(g.shape()), ", expected [N, E] with N = ", rows, " rows of tokens/valid");
  batch.experts = g.size(1);
  batch.gates = g.to_vector<double>();
  check_non_negative(batch.gates, layer, "gate");
  if (stats.indices.defined()) {
    const Tensor& idx = stats.indices;
    check_dtype("RoutingRecorder", idx, DType::i32, "indices");
    HEADROOM_CHECK(idx.dim() == 2 && idx.size(0) == g.size(0) && idx.size(1) > 0, "[RoutingRecorder] layer ", layer,
                   ": indices ", shape_str(idx.shape()), ", expected [N, k] with N = ", g.size(0),
                   " (the gates' rows) and k > 0");
    batch.k = idx.size(1);
    batch.indices = idx.to_vector<int32_t>();
    for (int32_t e : batch.indices)
      HEADROOM_CHECK(e >= 0 && e < batch.experts, "[RoutingRecorder] layer ", layer, ": index ", e,
                     " out of range for E = ", batch.experts);
  }
  const Tensor& load = stats.load;
  HEADROOM_CHECK(load.defined(), "[RoutingRecorder] layer ", layer,
                 " has gates but no load: expected load [E] with them");
  check_floating("RoutingRecorder", load, "load");
  HEADROOM_CHECK(load.dim() == 1 && load.size(0) == batch.experts, "[RoutingRecorder] layer ", layer, ": load ",
                 shape_str(load.shape()), ", expected [E] with E = ", batch.experts, " (the gates' columns)");
  const std::vector<double> assignments = load.to_vector<double>();
  check_non_negative(assignments, layer, "load");
  std::vector<int64_t> indexed(batch.experts, 0);
  for (int32_t e : batch.indices) ++indexed[e];
  batch.unindexed.resize(batch.experts);
  for (int64_t e = 0; e < batch.experts; ++e) batch.unindexed[e] = assignments[e] > double(indexed[e]);
  return batch;
}

// A 1-D per-row tensor (tokens or valid) of the add(), or an empty vector when undefined.
template <typename T> std::vector<T> read_rows(const Tensor& t, DType dtype, const char* what) {
  if (!t.defined()) return {};
  check_dtype("RoutingRecorder", t, dtype, what);
  HEADROOM_CHECK(t.dim() == 1, "[RoutingRecorder] ", what, " ", shape_str(t.shape()), ", expected [N]");
  return t.to_vector<T>();
}

// ---- output ------------------------------------------------------------------------

// Shortest text that reads back as the same double, always with a '.' or an
// exponent so that readers see a float.
std::string format_double(double value) {
  char text[32];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(text, sizeof text, "%.*g", precision, value);
    if (std::strtod(text, nullptr) == value) break;
  }
  std::string s = text;
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

std::string json_string(const std::string& s) { return json::dump(json::Value(s)); }

// "[f(items[0]),f(items[1]),...]"
template <typename T, typename F> std::string json_list(const std::vector<T>& items, F&& item_text) {
  std::string s = "[";
  for (size_t i = 0; i < items.size(); ++i) s += (i ? "," : "") + item_text(items[i]);
  return s + "]";
}

std::string json_object(const std::vector<std::pair<std::string, std::string>>& members) {
  std::string s = "{";
  for (size_t i = 0; i < members.size(); ++i)
    s += (i ? "," : "") + json_string(members[i].first) + ":" + members[i].second;
  return s + "}";
}

std::string int_text(int64_t v) { return std::to_string(v); }

}  // namespace

RoutingRecorder::RoutingRecorder(int64_t histogram_bins) : bins_(histogram_bins) {
  HEADROOM_CHECK(histogram_bins > 0, "[RoutingRecorder] histogram_bins = ", histogram_bins, ", expected > 0");
}

// Doubles the histogram range until it covers `gate`: bin i of the wider
// range holds old bins 2i and 2i + 1.
void RoutingRecorder::Layer::widen_histograms(double gate, int64_t bins) {
  while (gate > max_gate) {
    max_gate *= 2;
    for (int64_t e = 0; e < experts; ++e) {
      int64_t* h = histograms.data() + e * bins;
      for (int64_t i = 0; i < bins; ++i) {
        const int64_t merged = (2 * i < bins ? h[2 * i] : 0) + (2 * i + 1 < bins ? h[2 * i + 1] : 0);
        h[i] = merged;  // safe in place: reads 2i, 2i+1 >= i, not yet overwritten
      }
    }
  }
}

void RoutingRecorder::add(const std::vector<RoutingStats>& stats, const Tensor& tokens, const Tensor& valid) {
  HEADROOM_CHECK(layers_.empty() || stats.size() == layers_.size(), "[RoutingRecorder] got stats of ", stats.size(),
                 " layers, expected ", layers_.size(), " as in the earlier adds");
  const std::vector<int32_t> token_ids = read_rows<int32_t>(tokens, DType::i32, "tokens");
  const std::vector<uint8_t> valid_rows = read_rows<uint8_t>(valid, DType::b8, "valid");
  HEADROOM_CHECK(!tokens.defined() || !valid.defined() || token_ids.size() == valid_rows.size(),
                 "[RoutingRecorder] tokens [", token_ids.size(), "] and valid [", valid_rows.size(),
                 "] differ in length");
  const int64_t rows = tokens.defined() ? int64_t(token_ids.size()) : valid.defined() ? int64_t(valid_rows.size()) : -1;

  // Validate every layer before recording anything.
  std::vector<LayerBatch> batches;
  for (size_t l = 0; l < stats.size(); ++l) {
    batches.push_back(read_layer(stats[l], int64_t(l), rows));
    const int64_t before = layers_.empty() ? 0 : layers_[l].experts;
    HEADROOM_CHECK(batches.back().experts == 0 || before == 0 || before == batches.back().experts,
                   "[RoutingRecorder] layer ", l, " has ", batches.back().experts, " experts, expected ", before,
                   " as in the earlier adds");
  }
  if (layers_.empty()) layers_.resize(stats.size());

  for (size_t l = 0; l < stats.size(); ++l) {
    const LayerBatch& batch = batches[l];
    const int64_t E = batch.experts;
    if (E == 0) continue;
    Layer& layer = layers_[l];
    if (layer.experts == 0) {
      layer.experts = E;
      layer.counts.assign(E, 0);
      layer.gate_sums.assign(E, 0);
      layer.histograms.assign(E * bins_, 0);
    }
    std::vector<char> selected(E);
    const int64_t n_rows = int64_t(batch.gates.size()) / E;
    for (int64_t n = 0; n < n_rows; ++n) {
      if (!valid_rows.empty() && !valid_rows[n]) continue;
      ++layer.tokens;
      batch.selection(n, selected);
      std::vector<int64_t>* token_counts = nullptr;
      if (!token_ids.empty()) {
        token_counts = &layer.token_counts[token_ids[n]];
        token_counts->resize(E, 0);
      }
      for (int64_t e = 0; e < E; ++e) {
        const double gate = batch.gates[n * E + e];
        if (selected[e]) {
          ++layer.counts[e];
          layer.gate_sums[e] += gate;
          if (token_counts) ++(*token_counts)[e];
        }
        if (!selected[e] && gate == 0) continue;
        layer.widen_histograms(gate, bins_);
        const int64_t bin = std::min(bins_ - 1, int64_t(gate / layer.max_gate * double(bins_)));
        ++layer.histograms[e * bins_ + bin];
      }
    }
  }
}

// ---- queries --------------------------------------------------------------------------

const RoutingRecorder::Layer& RoutingRecorder::routed_layer(int64_t layer, int64_t expert, const char* what) const {
  HEADROOM_CHECK(layer >= 0 && layer < layers(), "[RoutingRecorder::", what, "] layer ", layer,
                 " out of range: ", layers(), " layers recorded");
  const Layer& l = layers_[layer];
  HEADROOM_CHECK(expert >= 0 && expert < l.experts, "[RoutingRecorder::", what, "] expert ", expert,
                 " out of range: layer ", layer, " has ", l.experts, " experts");
  return l;
}

int64_t RoutingRecorder::layers() const { return int64_t(layers_.size()); }

int64_t RoutingRecorder::experts(int64_t layer) const {
  HEADROOM_CHECK(layer >= 0 && layer < layers(), "[RoutingRecorder::experts] layer ", layer,
                 " out of range: ", layers(), " layers recorded");
  return layers_[layer].experts;
}

int64_t RoutingRecorder::tokens(int64_t layer) const {
  experts(layer);  // checks the layer
  return layers_[layer].tokens;
}

double RoutingRecorder::max_gate(int64_t layer) const {
  experts(layer);
  return layers_[layer].max_gate;
}

int64_t RoutingRecorder::count(int64_t layer, int64_t expert) const {
  return routed_layer(layer, expert, "count").counts[expert];
}

double RoutingRecorder::density(int64_t layer, int64_t expert) const {
  const Layer& l = routed_layer(layer, expert, "density");
  return l.tokens > 0 ? double(l.counts[expert]) / double(l.tokens) : 0.0;
}

double RoutingRecorder::mean_gate(int64_t layer, int64_t expert) const {
  const Layer& l = routed_layer(layer, expert, "mean_gate");
  return l.counts[expert] > 0 ? l.gate_sums[expert] / double(l.counts[expert]) : 0.0;
}

std::vector<int64_t> RoutingRecorder::histogram(int64_t layer, int64_t expert) const {
  const Layer& l = routed_layer(layer, expert, "histogram");
  auto first = l.histograms.begin() + expert * bins_;
  return std::vector<int64_t>(first, first + bins_);
}

int64_t RoutingRecorder::token_count(int64_t layer, int32_t token, int64_t expert) const {
  const Layer& l = routed_layer(layer, expert, "token_count");
  auto it = l.token_counts.find(token);
  return it == l.token_counts.end() ? 0 : it->second[expert];
}

std::vector<std::pair<int32_t, double>> RoutingRecorder::top_pmi(int64_t layer, int64_t expert, int64_t n,
                                                                 int64_t min_count) const {
  const Layer& l = routed_layer(layer, expert, "top_pmi");
  HEADROOM_CHECK(n >= 0, "[RoutingRecorder::top_pmi] n = ", n, ", expected >= 0");
  // Σn and n(e) = Σ_w n(w, e); n(w) = Σ_e n(w, e) per token below.
  int64_t total = 0, expert_total = 0;
  for (const auto& entry : l.token_counts) {
    for (int64_t c : entry.second) total += c;
    expert_total += entry.second[expert];
  }
  std::vector<std::pair<int32_t, double>> ranked;
  for (const auto& [token, counts] : l.token_counts) {
    const int64_t joint = counts[expert];
    if (joint < std::max<int64_t>(min_count, 1)) continue;
    int64_t token_total = 0;
    for (int64_t c : counts) token_total += c;
    // log p(w,e) − log p(w) − log p(e) = log n(w,e) + log Σn − log n(w) − log n(e)
    const double pmi = std::log(double(joint)) + std::log(double(total)) - std::log(double(token_total)) -
                       std::log(double(expert_total));
    ranked.emplace_back(token, pmi);
  }
  // Token ids ascend in the map, and a stable sort keeps that order among equal PMIs.
  std::stable_sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  if (int64_t(ranked.size()) > n) ranked.resize(n);
  return ranked;
}

// ---- files ----------------------------------------------------------------------------

void RoutingRecorder::write_csv(const std::string& path) const {
  std::ostringstream csv;
  csv << "layer,expert,count,density,mean_gate\n";
  for (int64_t l = 0; l < layers(); ++l)
    for (int64_t e = 0; e < layers_[l].experts; ++e)
      csv << l << ',' << e << ',' << count(l, e) << ',' << format_double(density(l, e)) << ','
          << format_double(mean_gate(l, e)) << '\n';
  write_file_atomically(path, csv.str(), "RoutingRecorder");
}

void RoutingRecorder::write_json(const std::string& path, int64_t pmi_top, int64_t pmi_min_count) const {
  std::vector<std::string> layer_texts;
  for (int64_t l = 0; l < layers(); ++l) {
    const Layer& layer = layers_[l];
    if (layer.experts == 0) continue;
    std::vector<int64_t> expert_ids(layer.experts);
    for (int64_t e = 0; e < layer.experts; ++e) expert_ids[e] = e;
    auto per_expert = [&](std::function<std::string(int64_t)> text) { return json_list(expert_ids, text); };
    auto top_tokens = [&](int64_t e) {
      return json_list(top_pmi(l, e, pmi_top, pmi_min_count), [&](const std::pair<int32_t, double>& entry) {
        return json_object({{"token", int_text(entry.first)},
                            {"count", int_text(token_count(l, entry.first, e))},
                            {"pmi", format_double(entry.second)}});
      });
    };
    layer_texts.push_back(json_object({
        {"layer", int_text(l)},
        {"experts", int_text(layer.experts)},
        {"tokens", int_text(layer.tokens)},
        {"max_gate", format_double(layer.max_gate)},
        {"count", per_expert([&](int64_t e) { return int_text(count(l, e)); })},
        {"density", per_expert([&](int64_t e) { return format_double(density(l, e)); })},
        {"mean_gate", per_expert([&](int64_t e) { return format_double(mean_gate(l, e)); })},
        {"histogram", per_expert([&](int64_t e) { return json_list(histogram(l, e), int_text); })},
        {"pmi_min_count", int_text(pmi_min_count)},
        {"pmi_top", per_expert(top_tokens)},
    }));
  }
  const std::string text = json_object({{"histogram_bins", int_text(bins_)},
                                        {"layers", json_list(layer_texts, [](const std::string& s) { return s; })}});
  write_file_atomically(path, text + "\n", "RoutingRecorder");
}

}  // namespace headroom
