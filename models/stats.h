#pragma once
// Routing statistics of the conditional attention layers, for analysis and
// plots: MoA's expert load and token–expert PMI (methods.md §2.8), MoH's head
// "density" and gate distributions (methods.md §3.8), MAE's expert choice
// (methods.md §4.7).
//
//   RoutingRecorder recorder;
//   for (each evaluation batch) {
//     ModelOutput out = model.forward(tokens, padding);
//     recorder.add(out.stats, tokens.reshape({-1}), logical_not(padding).reshape({-1}));
//   }
//   recorder.write_csv("load.csv");    // layer,expert,count,density,mean_gate
//   recorder.write_json("stats.json"); // everything, for plotting scripts
//
// Layers are the positions in ModelOutput::stats, so keep one recorder per
// stack (encoder self, decoder self and cross-attention separate, methods.md §2.8) or
// record a whole model's list as it comes.  Dense layers (no routing stats)
// are skipped.
//
// What counts as "selected" (used) for row n (a query token) and head/expert
// e: one rule for every method, the (token, slot) assignments that
// RoutingStats::load counts, taken row by row:
//   e is in indices[n] (a routed top-k choice), or
//   gates[n, e] > 0 and the layer's load gives e more assignments than the
//   add's rows (valid or not) whose indices name e: e is also active outside
//   the indices.
// So MoH's shared heads (not in its indices, active for every token) have
// density 1, as has every head of a MoH layer with K_r = 0 (no indices); MAE's
// soft responsibilities (no indices, load = Σ gates) count where gate > 0;
// MoA's experts and MAE's top-1 or sampled expert count through the indices
// only (their load holds nothing more, though MAE's gates are > 0 elsewhere).
//
// Per layer and head/expert:
//   count      selected (token, e) pairs over the valid rows
//   density    count / valid rows: the share of the layer's query tokens that
//              selected e (a layer's densities sum to k under top-k, h_s + K_r
//              under MoH); routing.csv/json and the report's plots all use it
//   mean_gate  mean gate over the selected pairs (0 when never selected)
//   histogram  gate values of every pair that is selected or has a gate > 0,
//              in fixed bins over [0, max_gate].  max_gate starts at 1 and
//              doubles (merging bins pairwise) whenever a larger gate arrives,
//              so gates of any scale fit without storing them; it is shared
//              by the experts of a layer so their histograms compare.
//   n(w, e)    selected pairs whose row holds token w (adds with tokens only),
//              and PMI(w, e) = log p(w,e) − log p(w) − log p(e) with
//              p(w,e) = n(w,e)/Σn, p(w) = Σ_e n(w,e)/Σn, p(e) = Σ_w n(w,e)/Σn.
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "headroom/models/attention.h"

namespace headroom {

class RoutingRecorder {
 public:
  explicit RoutingRecorder(int64_t histogram_bins = 20);

  // Adds one forward pass: per attention layer l, stats[l] (layers without
  // gates are skipped: dense MHA has none).  Every call must pass the same
  // number of layers, each with the same number of experts as before.
  // stats[l].gates: [N, E] floating, finite and >= 0; indices: i32 [N, k] in [0, E);
  // load: [E] floating, finite and >= 0, required with the gates.
  // tokens: optional i32 [N] token ids of the query rows (N = B*T, same order
  // as the stats rows) for PMI.  valid: optional b8 [N], 1 = count this row
  // (e.g. not padding).  Everything is checked before anything is recorded.
  // The tensors may live on any device: they are copied to the host here.
  void add(const std::vector<RoutingStats>& stats, const Tensor& tokens = Tensor(), const Tensor& valid = Tensor());

  // One row per (layer, expert) of the recorded layers, after a header:
  // layer,expert,count,density,mean_gate
  void write_csv(const std::string& path) const;
  // Everything, one object per recorded layer:
  // {"histogram_bins": B, "layers": [{"layer", "experts", "tokens", "max_gate",
  //   "count": [E], "density": [E], "mean_gate": [E], "histogram": [E][B],
  //   "pmi_min_count", "pmi_top": [E][{"token", "count", "pmi"}] (best first, at most pmi_top)}]}
  void write_json(const std::string& path, int64_t pmi_top = 20, int64_t pmi_min_count = 5) const;

  // The n tokens with the highest PMI for (layer, expert) among those with
  // n(w, e) >= max(min_count, 1), best first (ties: smaller token id first).
  std::vector<std::pair<int32_t, double>> top_pmi(int64_t layer, int64_t expert, int64_t n, int64_t min_count) const;
  double density(int64_t layer, int64_t expert) const;
  double mean_gate(int64_t layer, int64_t expert) const;
  int64_t count(int64_t layer, int64_t expert) const;
  std::vector<int64_t> histogram(int64_t layer, int64_t expert) const;      // [histogram_bins]
  int64_t token_count(int64_t layer, int32_t token, int64_t expert) const;  // n(w, e)
  double max_gate(int64_t layer) const;                                     // upper end of the layer's histogram range
  int64_t tokens(int64_t layer) const;                                      // valid rows recorded
  int64_t experts(int64_t layer) const;                                     // 0 for a layer without routing stats
  int64_t layers() const;  // stats.size() of the adds (0 before the first)

 private:
  struct Layer {
    int64_t experts = 0;  // 0 until routing stats arrive
    int64_t tokens = 0;
    std::vector<int64_t> counts;    // [E]
    std::vector<double> gate_sums;  // [E], over selected pairs
    double max_gate = 1;
    std::vector<int64_t> histograms;                       // [E, bins]
    std::map<int32_t, std::vector<int64_t>> token_counts;  // w -> n(w, ·) [E]

    void widen_histograms(double gate, int64_t bins);
  };

  const Layer& routed_layer(int64_t layer, int64_t expert, const char* what) const;

  int64_t bins_;
  std::vector<Layer> layers_;
};

}  // namespace headroom
