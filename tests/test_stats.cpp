// RoutingRecorder: hand-built routing stats with known counts (densities, mean
// gates, histograms, PMI), the CSV and JSON files, errors, a tiny MoA
// DecoderLM recorded end to end and a MoH layer's shared head.
#include <cmath>
#include <fstream>
#include <numeric>
#include <regex>
#include <sstream>

#include "headroom/core/json.h"
#include "headroom/examples/common/report.h"
#include "headroom/models/stats.h"
#include "helpers.h"
#include "transformer_helpers.h"

using namespace headroom;

namespace {

// Hand-built stats.  load: as MoA and MAE report it unless given, the
// assignments of the indices (k > 0) or the gates' column sums (k = 0).
RoutingStats routed(const std::vector<int32_t>& indices, int64_t k, const std::vector<float>& gates, int64_t E,
                    std::vector<float> load = {}) {
  RoutingStats s;
  const int64_t N = int64_t(gates.size()) / E;
  if (k > 0) s.indices = Tensor::from_vector(indices, {N, k});
  s.gates = Tensor::from_vector(gates, {N, E});
  if (load.empty()) {
    load.assign(E, 0);
    if (k > 0) {
      for (int32_t e : indices)
        if (e >= 0 && e < E) load[e] += 1;  // an out-of-range index is the recorder's to reject
    } else {
      for (size_t i = 0; i < gates.size(); ++i) load[i % E] += gates[i];
    }
  }
  s.load = Tensor::from_vector(load);
  return s;
}

// Layer 0 dense (no stats); layer 1: E = 3, k = 2, N = 4.
//   row 0 -> {0, 1} gates .5 .5     row 1 -> {1, 2} gates .75 .25
//   row 2 -> {0, 2} gates .125 .25  row 3 -> {0, 1} gates .125 .25
// counts 3, 3, 2; mean gates .25, .5, .25.
std::vector<RoutingStats> two_layers() {
  return {RoutingStats(),
          routed({0, 1, 1, 2, 0, 2, 0, 1}, 2, {0.5f, 0.5f, 0, 0, 0.75f, 0.25f, 0.125f, 0, 0.25f, 0.125f, 0.25f, 0}, 3)};
}

// value(layer, e) for every expert of the layer, e.g. per_expert(r, 1, &RoutingRecorder::count).
template <typename T>
std::vector<T> per_expert(const RoutingRecorder& r, int64_t layer,
                          T (RoutingRecorder::*value)(int64_t, int64_t) const) {
  std::vector<T> values;
  for (int64_t e = 0; e < r.experts(layer); ++e) values.push_back((r.*value)(layer, e));
  return values;
}

std::string read_text(const std::string& path) {
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

// A JSON file through core/json, which reads integers only: floats come back
// as strings (read them with stod).
json::Value read_json(const std::string& path) {
  const std::string text = std::regex_replace(
      read_text(path), std::regex(R"(-?[0-9]+(\.[0-9]+([eE][-+]?[0-9]+)?|[eE][-+]?[0-9]+))"), "\"$&\"");
  return json::parse(text, path);
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// PMI fixture, one layer, E = 2, k = 1, over two adds; the last row is invalid.
//   token:  7 7 7 7 9 9 5 4 | 5
//   expert: 0 0 0 1 1 1 0 0 | 1
void add_pmi_rows(RoutingRecorder& r) {
  auto one_hot = [](const std::vector<int32_t>& experts) {
    std::vector<float> g;
    for (int32_t e : experts) g.insert(g.end(), {e == 0 ? 1.0f : 0.0f, e == 1 ? 1.0f : 0.0f});
    return g;
  };
  std::vector<int32_t> first = {0, 0, 0, 1}, second = {1, 1, 0, 0, 1};
  r.add({routed(first, 1, one_hot(first), 2)}, Tensor::from_vector(std::vector<int32_t>{7, 7, 7, 7}));
  r.add({routed(second, 1, one_hot(second), 2)}, Tensor::from_vector(std::vector<int32_t>{9, 9, 5, 4, 5}),
        Tensor::from_vector(std::vector<uint8_t>{1, 1, 1, 1, 0}));
}

}  // namespace

TEST_CASE("RoutingRecorder: counts, densities and mean gates from top-k indices") {
  RoutingRecorder r(4);
  r.add(two_layers());
  CHECK(r.layers() == 2);
  CHECK(r.experts(0) == 0);
  CHECK(r.experts(1) == 3);
  CHECK(r.tokens(1) == 4);
  CHECK(per_expert(r, 1, &RoutingRecorder::count) == std::vector<int64_t>{3, 3, 2});
  CHECK(per_expert(r, 1, &RoutingRecorder::density) == std::vector<double>{0.75, 0.75, 0.5});  // sum k = 2
  CHECK(per_expert(r, 1, &RoutingRecorder::mean_gate) == std::vector<double>{0.25, 0.5, 0.25});
  // Bins of width 1/4: e0 .5 .125 .125; e1 .5 .75 .25; e2 .25 .25.
  CHECK(r.histogram(1, 0) == std::vector<int64_t>{2, 0, 1, 0});
  CHECK(r.histogram(1, 1) == std::vector<int64_t>{0, 1, 1, 1});
  CHECK(r.histogram(1, 2) == std::vector<int64_t>{0, 2, 0, 0});
  CHECK(r.max_gate(1) == 1.0);
  // A second add accumulates.
  r.add(two_layers());
  CHECK(r.tokens(1) == 8);
  CHECK(r.count(1, 2) == 4);
  CHECK(r.density(1, 2) == 0.5);
  CHECK(r.histogram(1, 1) == std::vector<int64_t>{0, 2, 2, 2});
}

TEST_CASE("RoutingRecorder: soft gates select where > 0; heads outside the indices count where load has them") {
  RoutingRecorder r(4);
  // Soft (MAE responsibilities / MoH K_r = 0): row 1 gives expert 0 a zero gate.
  r.add({routed({}, 0, {0.25f, 0.75f, 0, 1}, 2)});
  CHECK(per_expert(r, 0, &RoutingRecorder::count) == std::vector<int64_t>{1, 2});
  CHECK(per_expert(r, 0, &RoutingRecorder::density) == std::vector<double>{0.5, 1.0});
  CHECK(r.mean_gate(0, 1) == 0.875);
  CHECK(r.histogram(0, 0) == std::vector<int64_t>{0, 1, 0, 0});  // the zero gate is not recorded
  CHECK(r.histogram(0, 1) == std::vector<int64_t>{0, 0, 0, 2});  // a gate of exactly max_gate: last bin

  // MoH-like: head 0 shared (gate > 0, never in the indices, load 3 of 3 rows),
  // heads 1-2 routed with K_r = 1.
  RoutingRecorder moh(4);
  moh.add({routed({1, 2, 1}, 1, {0.5f, 0.75f, 0, 0.5f, 0, 0.25f, 0.5f, 0.25f, 0}, 3, {3, 2, 1})});
  CHECK(per_expert(moh, 0, &RoutingRecorder::count) == std::vector<int64_t>{3, 2, 1});
  CHECK(moh.density(0, 0) == 1.0);
  CHECK(moh.mean_gate(0, 0) == 0.5);
  CHECK(moh.histogram(0, 0) == std::vector<int64_t>{0, 0, 3, 0});
  CHECK(moh.histogram(0, 1) == std::vector<int64_t>{0, 1, 0, 1});
  CHECK(moh.density(0, 2) == doctest::Approx(1.0 / 3));

  // MAE-like top-1: soft gates everywhere, but load holds the chosen expert only.
  RoutingRecorder top1(4);
  top1.add({routed({1, 1, 0}, 1, {0.25f, 0.75f, 0.5f, 0.5f, 0.75f, 0.25f}, 2)});
  CHECK(per_expert(top1, 0, &RoutingRecorder::count) == std::vector<int64_t>{1, 2});
  CHECK(top1.mean_gate(0, 0) == 0.75);
  CHECK(top1.histogram(0, 0) == std::vector<int64_t>{0, 1, 1, 1});  // gates > 0 still fill the histograms
}

TEST_CASE("RoutingRecorder: the histogram range doubles and merges bins for larger gates") {
  RoutingRecorder r(4);
  auto soft = [](std::vector<float> g) { return std::vector<RoutingStats>{routed({}, 0, g, 1)}; };
  r.add(soft({0.1f, 0.3f, 0.9f, 1.0f}));
  CHECK(r.histogram(0, 0) == std::vector<int64_t>{1, 1, 0, 2});
  r.add(soft({1.5f}));  // [0, 2]: {2, 2, 0, 0} + bin 3
  CHECK(r.max_gate(0) == 2.0);
  CHECK(r.histogram(0, 0) == std::vector<int64_t>{2, 2, 0, 1});
  r.add(soft({5.0f}));  // [0, 4]: {4, 1, 0, 0}; [0, 8]: {5, 0, 0, 0} + bin 2
  CHECK(r.max_gate(0) == 8.0);
  CHECK(r.histogram(0, 0) == std::vector<int64_t>{5, 0, 1, 0});
  // Odd bin counts merge the same way (the last bin pairs with nothing).
  RoutingRecorder odd(3);
  odd.add(soft({0.1f, 0.5f, 0.9f, 1.9f}));  // [0, 1] {1, 1, 1}, then [0, 2] {2, 1, 0} + 1.9 in bin 2
  CHECK(odd.histogram(0, 0) == std::vector<int64_t>{2, 1, 1});
}

TEST_CASE("RoutingRecorder: PMI by hand, top tokens order and the min-count filter") {
  RoutingRecorder r;
  add_pmi_rows(r);
  // The invalid row (token 5 -> expert 1) is excluded everywhere.
  CHECK(r.tokens(0) == 8);
  CHECK(r.count(0, 1) == 3);
  CHECK(r.token_count(0, 5, 1) == 0);
  CHECK(r.token_count(0, 7, 0) == 3);
  // n(7,0) = 3, Σn = 8, n(w=7) = 4, n(e=0) = 5.
  const double pmi_7_0 = std::log(3.0 / 8) - std::log(4.0 / 8) - std::log(5.0 / 8);
  const double pmi_4_0 = std::log(1.0 / 8) - std::log(1.0 / 8) - std::log(5.0 / 8);  // = PMI(5, 0)
  auto top = r.top_pmi(0, 0, 10, 1);
  REQUIRE(top.size() == 3);
  CHECK(top[0].first == 4);  // tie with 5: smaller id first
  CHECK(top[1].first == 5);
  CHECK(top[2].first == 7);
  CHECK(top[0].second == doctest::Approx(pmi_4_0));
  CHECK(top[1].second == doctest::Approx(pmi_4_0));
  CHECK(top[2].second == doctest::Approx(pmi_7_0));
  CHECK(r.top_pmi(0, 0, 2, 1).size() == 2);  // n truncates
  auto frequent = r.top_pmi(0, 0, 10, 2);    // n(w, e) >= 2 keeps token 7 only
  REQUIRE(frequent.size() == 1);
  CHECK(frequent[0].first == 7);
  auto expert1 = r.top_pmi(0, 1, 10, 0);  // min_count 0 still skips n(w, e) = 0
  REQUIRE(expert1.size() == 2);
  CHECK(expert1[0].first == 9);
  CHECK(expert1[0].second == doctest::Approx(std::log(2.0 * 8 / (2 * 3))));
  CHECK(expert1[1].first == 7);
  CHECK(expert1[1].second == doctest::Approx(std::log(1.0 * 8 / (4 * 3))));
}

TEST_CASE("RoutingRecorder: the valid mask excludes rows") {
  RoutingRecorder r(4);
  // Rows 1 and 2 invalid: only rows 0 ({0, 1}) and 3 ({0, 1}) count.
  r.add(two_layers(), Tensor(), Tensor::from_vector(std::vector<uint8_t>{1, 0, 0, 1}));
  CHECK(r.tokens(1) == 2);
  CHECK(per_expert(r, 1, &RoutingRecorder::count) == std::vector<int64_t>{2, 2, 0});
  CHECK(per_expert(r, 1, &RoutingRecorder::density) == std::vector<double>{1.0, 1.0, 0.0});
  CHECK(per_expert(r, 1, &RoutingRecorder::mean_gate) == std::vector<double>{0.3125, 0.375, 0.0});
  CHECK(r.histogram(1, 2) == std::vector<int64_t>{0, 0, 0, 0});
}

TEST_CASE("RoutingRecorder: CSV rows per (layer, expert)") {
  RoutingRecorder r(4);
  r.add(two_layers());
  const std::string path = "test_stats_routing.csv";
  r.write_csv(path);
  CHECK(lines_of(read_text(path)) == std::vector<std::string>{"layer,expert,count,density,mean_gate", "1,0,3,0.75,0.25",
                                                              "1,1,3,0.75,0.5", "1,2,2,0.5,0.25"});
  std::remove(path.c_str());
}

TEST_CASE("RoutingRecorder: JSON holds load, density, histograms and PMI top tokens") {
  RoutingRecorder r(4);
  add_pmi_rows(r);
  const std::string path = "test_stats_routing.json";
  r.write_json(path, 2, 1);
  json::Value doc = read_json(path);
  std::remove(path.c_str());
  CHECK(doc.at("histogram_bins").as_integer() == 4);
  REQUIRE(doc.at("layers").as_array().size() == 1);
  const json::Value& layer = doc.at("layers").as_array()[0];
  CHECK(layer.at("layer").as_integer() == 0);
  CHECK(layer.at("experts").as_integer() == 2);
  CHECK(layer.at("tokens").as_integer() == 8);
  CHECK(std::stod(layer.at("max_gate").as_string()) == 1.0);
  CHECK(layer.at("count").as_array()[0].as_integer() == 5);
  CHECK(layer.at("count").as_array()[1].as_integer() == 3);
  CHECK(std::stod(layer.at("density").as_array()[0].as_string()) == 0.625);
  CHECK(std::stod(layer.at("mean_gate").as_array()[1].as_string()) == 1.0);
  const auto& hist0 = layer.at("histogram").as_array()[0].as_array();
  REQUIRE(hist0.size() == 4);
  CHECK(hist0[3].as_integer() == 5);  // expert 0's selected gates are all 1; its zeros are not recorded
  CHECK(hist0[0].as_integer() == 0);
  CHECK(layer.at("pmi_min_count").as_integer() == 1);
  const auto& top0 = layer.at("pmi_top").as_array()[0].as_array();
  REQUIRE(top0.size() == 2);  // pmi_top = 2
  CHECK(top0[0].at("token").as_integer() == 4);
  CHECK(top0[0].at("count").as_integer() == 1);
  CHECK(std::stod(top0[0].at("pmi").as_string()) == doctest::Approx(r.top_pmi(0, 0, 1, 1)[0].second));
  CHECK(top0[1].at("token").as_integer() == 5);
}

TEST_CASE("RoutingRecorder: errors") {
  RoutingRecorder r;
  CHECK_THROWS_HEADROOM(RoutingRecorder(0), "histogram_bins = 0");
  CHECK_THROWS_HEADROOM(r.add({routed({0, 3}, 1, {1, 0, 0, 1}, 2)}), "index 3 out of range for E = 2");
  CHECK_THROWS_HEADROOM(r.add({routed({}, 0, {1, -0.5f}, 2)}), "gate -0.5");
  RoutingStats no_gates;
  no_gates.indices = Tensor::from_vector(std::vector<int32_t>{0}, {1, 1});
  CHECK_THROWS_HEADROOM(r.add({no_gates}), "has indices but no gates");
  RoutingStats no_load = routed({0}, 1, {1, 0}, 2);
  no_load.load = Tensor();
  CHECK_THROWS_HEADROOM(r.add({no_load}),
                        "[RoutingRecorder] layer 0 has gates but no load: expected load [E] with them");
  CHECK_THROWS_HEADROOM(r.add({routed({0}, 1, {1, 0}, 2, {1, 0, 0})}),
                        "[RoutingRecorder] layer 0: load (3), expected [E] with E = 2 (the gates' columns)");
  CHECK_THROWS_HEADROOM(r.add({routed({0}, 1, {1, 0}, 2, {1, -1})}), "layer 0: load -1, expected finite values >= 0");
  CHECK_THROWS_HEADROOM(r.add({routed({0}, 1, {1, 0}, 2)}, Tensor::from_vector(std::vector<int32_t>{1, 2})),
                        "expected [N, E] with N = 2");
  CHECK_THROWS_HEADROOM(r.add({routed({0}, 1, {1, 0}, 2)}, Tensor::from_vector(std::vector<float>{1})), "tokens");
  CHECK(r.layers() == 0);  // nothing recorded by the failed adds
  r.add(two_layers());
  CHECK_THROWS_HEADROOM(r.add({routed({0}, 1, {1, 0}, 2)}), "got stats of 1 layers, expected 2");
  CHECK_THROWS_HEADROOM(r.add({RoutingStats(), routed({0}, 1, {1, 0}, 2)}), "layer 1 has 2 experts, expected 3");
  CHECK(r.tokens(1) == 4);
  CHECK_THROWS_HEADROOM(r.density(0, 0), "layer 0 has 0 experts");
  CHECK_THROWS_HEADROOM(r.top_pmi(2, 0, 1, 1), "layer 2 out of range");
  CHECK_THROWS_HEADROOM(r.write_csv("/nonexistent_dir/x.csv"), "/nonexistent_dir/x.csv");
  CHECK_THROWS_HEADROOM(r.write_json("/nonexistent_dir/x.json"), "/nonexistent_dir/x.json");
}

TEST_CASE("RoutingRecorder: a tiny MoA DecoderLM, N·k assignments per layer") {
  Generator gen(7);
  ModelConfig c = testing::tiny_model_config(10);
  c.attention.type = "moa";
  c.attention.options = {{"experts", "4"}, {"k", "2"}, {"head_dim", "8"}};
  DecoderLM model(c, gen);
  model.eval();
  Tensor tokens = testing::token_rows({1, 2, 3, 4, 5, 6, 7, 8, 9, 1}, 2);  // B 2, T 5
  ModelOutput out = model.forward(tokens);
  REQUIRE(out.stats.size() == 2);

  RoutingRecorder r;
  r.add(out.stats, tokens.reshape({-1}));
  CHECK(r.layers() == 2);
  for (int64_t l = 0; l < 2; ++l) {
    CHECK(r.experts(l) == 4);
    CHECK(r.tokens(l) == 10);
    const std::vector<int64_t> counts = per_expert(r, l, &RoutingRecorder::count);
    CHECK(counts == out.stats[l].load.to_vector<int64_t>());
    CHECK(std::accumulate(counts.begin(), counts.end(), int64_t(0)) == 10 * 2);
    const std::vector<double> densities = per_expert(r, l, &RoutingRecorder::density);
    CHECK(std::accumulate(densities.begin(), densities.end(), 0.0) == doctest::Approx(2.0));
    // Token 1 appears twice: n(1, ·) sums to 2·k.
    int64_t token1 = 0;
    for (int64_t e = 0; e < 4; ++e) token1 += r.token_count(l, 1, e);
    CHECK(token1 == 4);
  }
  // Padding: the last token of row 1 does not count.
  Tensor padding = Tensor::from_vector(std::vector<uint8_t>{0, 0, 0, 0, 0, 0, 0, 0, 0, 1}, {2, 5});
  ModelOutput padded = model.forward(tokens, padding);
  r.add(padded.stats, tokens.reshape({-1}), logical_not(padding).reshape({-1}));
  for (int64_t l = 0; l < 2; ++l) {
    const std::vector<int64_t> counts = per_expert(r, l, &RoutingRecorder::count);
    CHECK(r.tokens(l) == 19);
    CHECK(std::accumulate(counts.begin(), counts.end(), int64_t(0)) == 19 * 2);
  }
}

// A MoH layer (1 shared head, K_r = 1 of 3 routed) through the recorder, two
// rows invalid: the shared head is used by every valid token, each valid
// token uses one routed head, and the CSV and JSON hold the same numbers.
TEST_CASE("RoutingRecorder: a MoH layer's shared head has density 1; CSV and JSON carry the same densities") {
  Generator gen(17);
  MoHConfig config;
  config.mha.heads = 4;
  config.mha.dim = 8;
  config.shared_heads = 1;
  config.routed_k = 1;
  MoHAttention layer(config, gen);
  layer.eval();
  NoGradGuard no_grad;
  AttentionInput in;
  in.x = Tensor::randn({2, 6, 8}, gen);
  const RoutingStats stats = layer.forward(in).stats;
  const std::vector<uint8_t> valid = {1, 1, 1, 1, 1, 0, 1, 1, 1, 0, 1, 1};  // 10 valid rows of 12
  RoutingRecorder r(4);
  r.add({stats}, Tensor(), Tensor::from_vector(valid));
  REQUIRE(r.experts(0) == 4);
  CHECK(r.tokens(0) == 10);

  // The routed heads' counts by hand from the indices (heads 1-3) over the valid rows.
  const std::vector<int32_t> chosen = stats.indices.to_vector<int32_t>();
  REQUIRE(chosen.size() == 12);
  std::vector<int64_t> expected = {10, 0, 0, 0};
  for (size_t n = 0; n < valid.size(); ++n) {
    REQUIRE(chosen[n] >= 1);
    if (valid[n]) ++expected[size_t(chosen[n])];
  }
  CHECK(per_expert(r, 0, &RoutingRecorder::count) == expected);
  const std::vector<double> density = per_expert(r, 0, &RoutingRecorder::density);
  CHECK(density[0] == 1.0);
  CHECK(density[1] + density[2] + density[3] == doctest::Approx(1.0));  // K_r = 1
  CHECK(r.mean_gate(0, 0) > 0);
  // Over every row the counts are the layer's own load.
  RoutingRecorder all_rows;
  all_rows.add({stats});
  CHECK(per_expert(all_rows, 0, &RoutingRecorder::count) == stats.load.to_vector<int64_t>());

  testing::TempDir dir("stats_moh");
  r.write_csv(dir.file("routing.csv"));
  r.write_json(dir.file("routing.json"));
  const std::vector<std::string> csv = lines_of(read_text(dir.file("routing.csv")));
  REQUIRE(csv.size() == 5);
  for (int64_t e = 0; e < 4; ++e) {
    CAPTURE(e);
    std::vector<std::string> fields;
    std::istringstream row(csv[size_t(e + 1)]);
    for (std::string field; std::getline(row, field, ',');) fields.push_back(field);
    REQUIRE(fields.size() == 5);
    CHECK(fields[0] == "0");
    CHECK(std::stoll(fields[2]) == expected[size_t(e)]);
    CHECK(std::stod(fields[3]) == density[size_t(e)]);
  }
  const json::Value doc = read_json(dir.file("routing.json"));
  const json::Value& layer_json = doc.at("layers").as_array().at(0);
  for (int64_t e = 0; e < 4; ++e) {
    CAPTURE(e);
    CHECK(layer_json.at("count").as_array().at(size_t(e)).as_integer() == expected[size_t(e)]);
    CHECK(std::stod(layer_json.at("density").as_array().at(size_t(e)).as_string()) == density[size_t(e)]);
  }
  // The ViT report's per-class densities are the recorder's too, whatever shared_heads says.
  examples::write_class_routing_report(dir.path.string(), {r}, {"all"});
  const std::vector<std::string> by_class = lines_of(read_text(dir.file("routing_by_class.csv")));
  REQUIRE(by_class.size() == 5);
  CHECK(by_class[0] == "class,layer,expert,density");
  for (int64_t e = 0; e < 4; ++e) {
    CAPTURE(e);
    const std::string prefix = "all,0," + std::to_string(e) + ",";
    REQUIRE(by_class[size_t(e + 1)].rfind(prefix, 0) == 0);
    CHECK(std::stod(by_class[size_t(e + 1)].substr(prefix.size())) ==
          doctest::Approx(density[size_t(e)]).epsilon(1e-6));
  }
}

TEST_CASE("routing report: pmi.md's cell says what each head's top tokens by PMI show, ties and absences included") {
  using headroom::examples::top_tokens_text;
  const std::vector<std::pair<int32_t, double>> tie{{3, 0.0}, {4, 0.0}, {5, 0.0}}, ranked{{3, 1.2}, {4, 0.7}, {5, 0.1}};
  auto name = [](int32_t token) { return std::string(1, char('a' + token)); };
  CHECK(top_tokens_text(ranked, 40, name) == "d (1.20), e (0.70), f (0.10)");
  CHECK(top_tokens_text({{3, 0.5}}, 6, name) == "d (0.50)");                          // one token chosen often enough
  CHECK(top_tokens_text(tie, 40, name) == "no token stands out: PMI 0.00 for each");  // e.g. MoH's shared heads
  CHECK(top_tokens_text({}, 0, name) == "never chosen");                              // a collapsed router's expert
  CHECK(top_tokens_text({}, 3, name) == "no token chosen 5 times");
}

TEST_CASE("routing report: load_by_class.png shows every routed layer, each head named by its layer from 0") {
  // Layer 0 dense; layer 1: E = 3, k = 2 over rows 0-3; layer 2: E = 2, k = 1.
  std::vector<RoutingStats> stats = two_layers();
  stats.push_back(routed({0, 1, 1, 1}, 1, {1, 0, 0, 1, 0, 1, 0, 1}, 2));
  std::vector<RoutingRecorder> per_class(2);
  per_class[0].add(stats, Tensor(), Tensor::from_vector(std::vector<uint8_t>{1, 1, 0, 0}));
  per_class[1].add(stats, Tensor(), Tensor::from_vector(std::vector<uint8_t>{0, 0, 1, 1}));
  const examples::Heatmap heat = examples::class_load_heatmap(per_class, {"cat", "dog"});
  CHECK(heat.rows == std::vector<std::string>{"cat", "dog"});
  CHECK(heat.cols == std::vector<std::string>{"L1 h0", "L1 h1", "L1 h2", "L2 h0", "L2 h1"});
  // Rows 0-1 chose {0, 1}, {1, 2} and 0, 1; rows 2-3 chose {0, 2}, {0, 1} and 1, 1.
  CHECK(heat.values[0] == std::vector<double>{0.5, 1.0, 0.5, 0.5, 0.5});
  CHECK(heat.values[1] == std::vector<double>{1.0, 0.5, 0.5, 0.0, 1.0});
}

TEST_CASE("routing report: gates.png's note names MoH's scaling=code bound on the gates, else [0, 1]") {
  ModelConfig c;
  c.vocab = 16, c.dim = 16, c.heads = 8, c.decoder_layers = 1, c.ffn_hidden = 16;
  c.attention = {"moh", {{"shared_heads", "2"}, {"routed_k", "3"}}};
  CHECK(examples::gate_scale_note(DecoderLM(c)).find("each at most 2 max(K_r, h_s) = 6") != std::string::npos);
  c.attention.options["scaling"] = "paper";
  CHECK(examples::gate_scale_note(DecoderLM(c)) == "every gate lies in [0, 1]: router probabilities or 0/1 choices");
  c.attention = {"moa", {}};
  CHECK(examples::gate_scale_note(DecoderLM(c)) == "every gate lies in [0, 1]: router probabilities or 0/1 choices");
}
