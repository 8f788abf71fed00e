#include "headroom/examples/common/report.h"

namespace headroom::examples {

void write_routing_report(const std::string& run_dir, const RoutingRecorder& recorder,
                          const std::function<std::string(int32_t)>& token_name) {
  if (recorder.layers() == 0) return;
  recorder.write_json(run_dir + "/routing.json");
  recorder.write_csv(run_dir + "/routing.csv");
}

}  // namespace headroom::examples
