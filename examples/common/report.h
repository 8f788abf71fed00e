#pragma once
// What a run directory holds besides the checkpoint and log.jsonl:
//   loss.png            train loss (each step's, and the mean of the last 50 steps once 50
//                       are logged) and validation loss per step
//   eval.png            the task's quality metric per evaluation (bits per byte, BLEU, accuracy)
// and for routed attention (MoA, MoH, MAE):
//   routing.json/.csv   RoutingRecorder's statistics (load, density, mean gate, histograms, PMI)
//   load.png            head/expert density per layer (grouped bars, MoH Fig. 3 style)
//   load_heatmap.png    layer × head/expert density
//   gates.png           gate-value distribution of shared vs routed heads (MoH) or of all experts
//   pmi.md              each expert's top tokens by PMI, only when most experts'
//                       top tokens differ in PMI (MoH's shared heads and heads
//                       every token picks tie at one value and say nothing)
//   load_by_class.png   ViT: density per head of the last layer, one bar group per class
// Every density drawn is RoutingRecorder::density, the numbers of
// routing.csv/json (MoH's shared heads: 1, models/stats.h).  shared_heads
// only splits gates.png into shared and routed heads.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "headroom/examples/common/plot.h"
#include "headroom/examples/common/progress.h"
#include "headroom/models/config.h"
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

// token_name: printable form of a token id, for the PMI table.  stack: where
// the recorder's layers are in an encoder-decoder ("encoder self", "decoder
// self", "cross"), shown before each layer number; empty for one stack.
void write_routing_report(const std::string& run_dir, const RoutingRecorder& recorder, int64_t shared_heads,
                          const std::function<std::string(int32_t)>& token_name, const std::string& label = "",
                          const std::string& stack = "");

// One recorder per class (ViT): routing_by_class.csv (class,layer,expert,density)
// and load_by_class.png.
void write_class_routing_report(const std::string& run_dir, const std::vector<RoutingRecorder>& per_class,
                                const std::vector<std::string>& class_names, const std::string& label = "");

// The PMI top lists worth a table: true when at least half of them rank
// their tokens (their first and last PMI differ), not tie at one value.
bool pmi_tables_inform(const std::vector<std::vector<std::pair<int32_t, double>>>& top_lists);

}  // namespace headroom::examples
