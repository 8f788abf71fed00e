#pragma once
// What a run directory holds besides the checkpoint and log.jsonl:
//   loss.png            train loss (raw and a 50-step moving average) and validation loss per step
//   eval.png            the task's quality metric per evaluation (bits per byte, BLEU, accuracy)
// and for routed attention (MoA, MoH, MAE):
//   routing.json/.csv   RoutingRecorder's statistics (load, density, mean gate, histograms, PMI)
//   load.png            head/expert density per layer (grouped bars, MoH Fig. 3 style)
//   load_heatmap.png    layer × head/expert density
//   gates.png           gate-value distribution of shared vs routed heads (MoH) or of all experts
//   pmi.md              MoA: each expert's top tokens by PMI
//   load_by_class.png   ViT: density per head of the last layer, one bar group per class
// Every density drawn is RoutingRecorder::density, the numbers of
// routing.csv/json (MoH's shared heads: 1, models/stats.h).  shared_heads
// only splits gates.png into shared and routed heads.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "headroom/models/config.h"
#include "headroom/models/stats.h"

namespace headroom::examples {

// The loss and metric curves of a run directory's log.jsonl.  metric: the
// evaluation field plotted in eval.png.
void write_curve_plots(const std::string& run_dir, const std::string& metric);

// token_name: printable form of a token id, for the PMI table.
void write_routing_report(const std::string& run_dir, const RoutingRecorder& recorder, int64_t shared_heads,
                          const std::function<std::string(int32_t)>& token_name);

// One recorder per class (ViT): routing_by_class.csv (class,layer,expert,density)
// and load_by_class.png.
void write_class_routing_report(const std::string& run_dir, const std::vector<RoutingRecorder>& per_class,
                                const std::vector<std::string>& class_names);

}  // namespace headroom::examples
