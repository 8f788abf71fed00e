#pragma once
// What a run directory holds besides the checkpoint and log.jsonl:
//   loss.png            train loss (each step's, and the mean of the last 50 steps once 50
//                       are logged) and validation loss per step
//   eval.png            the task's quality metric per evaluation (bits per byte, BLEU, accuracy)
// and for routed attention (MoA, MoH, MAE), over the validation windows
// (LM), the validation sources in the encoder (MT) or the test images (ViT):
//   routing.json/.csv   RoutingRecorder's statistics (load, density, mean gate, histograms, PMI)
//   load.png            head/expert density per layer (grouped bars, MoH Fig. 3 style)
//   load_heatmap.png    layer × head/expert density
//   gates.png           gate-value distribution of shared vs routed heads (MoH) or of all
//                       experts, with a note on what sets its scale (gate_scale_note)
//   pmi.md              LM and MT (rows with token ids): each head's / expert's
//                       assignments and top tokens by PMI, or what stands in
//                       their place (top_tokens_text)
//   load_by_class.png   ViT: density per head of every routed layer (columns) for
//                       each true class (rows), a heat map; with routing_by_class.csv
// Every density drawn is RoutingRecorder::density, the numbers of
// routing.csv/json (MoH's shared heads: 1, models/stats.h).  The model's
// first MoH layer's shared heads split gates.png into shared and routed heads.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "headroom/examples/common/plot.h"
#include "headroom/examples/common/progress.h"
#include "headroom/models/config.h"
#include "headroom/models/module.h"
#include "headroom/models/stats.h"

namespace headroom::examples {

// Every plot's title ends with `label`, what the run is (e.g. "runs/lm, moh");
// an empty label names the run directory's folder.

// loss.png's curves: "train" (every step's loss), "train, mean of the last
// kLossWindow steps" (from the step that has that many; none in a shorter
// run) and "validation" (when an evaluation is logged), in palette colours
// 0, 1 and 2 whichever are drawn.
constexpr size_t kLossWindow = 50;
std::vector<LineSeries> loss_series(const LogRows& train_rows, const LogRows& eval_rows);

// The loss and metric curves of a run directory's log.jsonl.  metric: the
// evaluation field plotted in eval.png.
void write_curve_plots(const std::string& run_dir, const std::string& metric, const std::string& label = "");

// token_name: printable form of a token id, for the PMI table; empty when the
// recorder's rows have no token ids (a ViT's patches): no pmi.md.  stack: where
// the recorder's layers are in an encoder-decoder ("encoder self", "decoder
// self", "cross"), shown before each layer number; empty for one stack.
void write_routing_report(const std::string& run_dir, const RoutingRecorder& recorder, const Module& model,
                          const std::function<std::string(int32_t)>& token_name, const std::string& label = "",
                          const std::string& stack = "");

// gates.png's note on the gates' scale: past 1 only under MoH's
// scaling=code with the learned router (the official code's factors, up to
// 2 max(K_r, h_s)), else within [0, 1].
std::string gate_scale_note(const Module& model);

// Whether any attention layer of `model` routes (MoA, MoH, MAE): the runs
// whose folders get the routing report.
bool has_routed_attention(const Module& model);

// One recorder per class (ViT): routing_by_class.csv (class,layer,expert,density)
// and load_by_class.png (class_load_heatmap).
void write_class_routing_report(const std::string& run_dir, const std::vector<RoutingRecorder>& per_class,
                                const std::vector<std::string>& class_names, const std::string& label = "");

// load_by_class.png: the density of every head / expert of every routed
// layer (columns "L1 h2": layer 1, head 2) for each class (rows).
Heatmap class_load_heatmap(const std::vector<RoutingRecorder>& per_class, const std::vector<std::string>& class_names);

// pmi.md lists each head's / expert's kPmiTopTokens best tokens by PMI among
// those it was chosen for at least kPmiMinCount times.
constexpr int64_t kPmiTopTokens = 8, kPmiMinCount = 5;

// The "top tokens by PMI" cell of pmi.md for a head / expert chosen
// `assignments` times, whose best tokens are `top` (RoutingRecorder::top_pmi):
// "never chosen"; "no token chosen 5 times"; "no token stands out: PMI 0.00
// for each" when they tie (MoH's shared heads, a head every token picks);
// else the tokens with their PMI, "e (1.20), t (0.70)".
std::string top_tokens_text(const std::vector<std::pair<int32_t, double>>& top, int64_t assignments,
                            const std::function<std::string(int32_t)>& token_name);

}  // namespace headroom::examples
