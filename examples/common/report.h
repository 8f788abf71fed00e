#pragma once
// What a run directory holds besides the checkpoint and log: the routing
// statistics of the conditional attention layers (routing.json, routing.csv)
// and the pictures (PNG): loss curves from log.jsonl, head/expert load per
// layer, gate-value distributions and a layer × head heat map.
#include <cstdint>
#include <functional>
#include <string>

#include "headroom/models/stats.h"

namespace headroom::examples {

// token_name: printable form of a token id, for the PMI table.
void write_routing_report(const std::string& run_dir, const RoutingRecorder& recorder,
                          const std::function<std::string(int32_t)>& token_name);

}  // namespace headroom::examples
