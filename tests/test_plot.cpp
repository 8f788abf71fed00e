// Charts: each is written to a temporary PNG, read back with load_image, and
// checked for where its colours landed relative to the plot area it reports;
// and the curves that loss.png draws from a run's log.
#include <unistd.h>

#include <cstdio>
#include <limits>

#include "headroom/core/image.h"
#include "headroom/examples/common/plot.h"
#include "headroom/examples/common/report.h"
#include "helpers.h"

using namespace headroom;
using namespace headroom::examples;

namespace {

const double kNaN = std::numeric_limits<double>::quiet_NaN();

// A PNG read back from disk, with pixel queries.
struct Picture {
  Tensor image;  // [H, W, 3]
  Rect area;     // what the chart function returned

  int width() const { return static_cast<int>(image.size(1)); }
  int height() const { return static_cast<int>(image.size(0)); }
  Color at(int x, int y) const {
    const float* p = image.data<float>() + (static_cast<int64_t>(y) * width() + x) * 3;
    auto byte = [](float v) { return static_cast<uint8_t>(std::lround(v * 255)); };
    return {byte(p[0]), byte(p[1]), byte(p[2])};
  }
  // The bounding box of the pixels of `color` inside `box`; empty (width 0) when there are none.
  Rect find(Color color, Rect box) const {
    Rect found{box.right, box.bottom, box.left, box.top};
    for (int y = std::max(box.top, 0); y < std::min(box.bottom, height()); ++y)
      for (int x = std::max(box.left, 0); x < std::min(box.right, width()); ++x)
        if (at(x, y) == color)
          found = {std::min(found.left, x), std::min(found.top, y), std::max(found.right, x + 1),
                   std::max(found.bottom, y + 1)};
    return found.right > found.left ? found : Rect{};
  }
  Rect everywhere() const { return {0, 0, width(), height()}; }
};

// Runs a chart function on a temporary path and reads the PNG back.  Unless
// keep_size, the chart is drawn at 480 x 320 (PNG encoding dominates the time).
template <typename Chart>
Picture draw(Rect (*plot)(const std::string&, const Chart&), Chart chart, bool keep_size = false) {
  const std::string path = "/tmp/headroom_plot_" + std::to_string(getpid()) + ".png";
  if (!keep_size) {
    chart.width = 480;
    chart.height = 320;
  }
  Picture picture;
  picture.area = plot(path, chart);
  picture.image = load_image(path, 3);
  std::remove(path.c_str());
  return picture;
}

Rect grown(Rect r, int by) { return {r.left - by, r.top - by, r.right + by, r.bottom + by}; }

LineChart diagonal_chart() {
  LineChart chart;
  chart.title = "loss";
  chart.x_label = "step";
  chart.y_label = "value";
  LineSeries series{"train", {}, {}};
  for (int i = 0; i <= 100; ++i) {  // (0, 0) .. (10, 10): the axes snap to exactly this range
    series.x.push_back(i / 10.0);
    series.y.push_back(i / 10.0);
  }
  chart.series.push_back(series);
  return chart;
}

}  // namespace

TEST_CASE("plot: colours are fixed per series index and the colour map runs dark to light") {
  CHECK(palette_color(0) == Color{31, 119, 180});
  CHECK(palette_color(1) == Color{255, 127, 14});
  CHECK(palette_color(12) == palette_color(2));
  CHECK(colormap(0) == Color{68, 1, 84});
  CHECK(colormap(1) == Color{253, 231, 37});
  CHECK(colormap(-3) == colormap(0));
  CHECK(colormap(7) == colormap(1));
  Color mid = colormap(0.5);
  CHECK(mid == Color{33, 145, 140});
}

TEST_CASE("plot: canvas text lands in its measured box, turned when vertical") {
  Canvas canvas(200, 200);
  const Color ink{10, 20, 30};
  const int w = Canvas::text_width("Hey 1", 2), h = Canvas::text_height(2);
  canvas.text(20, 30, "Hey 1", ink, 2);
  canvas.text(100, 40, "Hey 1", ink, 2, true);
  int inside_flat = 0, inside_turned = 0, outside = 0;
  for (int y = 0; y < 200; ++y)
    for (int x = 0; x < 200; ++x) {
      if (canvas.pixel(x, y) != ink) continue;
      if (x >= 20 && x < 20 + w && y >= 30 && y < 30 + h) ++inside_flat;
      else if (x >= 100 && x < 100 + h && y >= 40 && y < 40 + w) ++inside_turned;
      else ++outside;
    }
  CHECK(inside_flat > 50);
  CHECK(inside_turned == inside_flat);
  CHECK(outside == 0);
  CHECK(Canvas::text_width("\xc3\x97", 1) == Canvas::text_width("??", 1));  // UTF-8 bytes print as '?'
  CHECK_THROWS_HEADROOM(Canvas(0, 10), "size must be 1..16384");
  CHECK_THROWS_HEADROOM(canvas.pixel(200, 0), "outside the 200x200 canvas");
}

TEST_CASE("plot: a rising line runs from the bottom-left to the top-right corner of the plot area") {
  LineChart chart = diagonal_chart();
  Picture picture = draw(plot_lines, chart, true);
  CHECK(picture.width() == 900);  // the default size
  CHECK(picture.height() == 560);
  const Rect a = picture.area;
  REQUIRE(a.width() > 400);
  const Color blue = palette_color(0);
  CHECK(picture.find(blue, {a.left, a.bottom - 4, a.left + 4, a.bottom}).width() > 0);
  CHECK(picture.find(blue, {a.right - 4, a.top, a.right, a.top + 4}).width() > 0);
  CHECK(picture
            .find(blue, {a.left + a.width() / 2 - 3, a.top + a.height() / 2 - 3, a.left + a.width() / 2 + 3,
                         a.top + a.height() / 2 + 3})
            .width() > 0);
  CHECK(picture.find(blue, {a.right - 4, a.bottom - 4, a.right, a.bottom}).width() == 0);  // not in other corners
  CHECK(picture.find(blue, {a.left, a.top, a.left + 4, a.top + 4}).width() == 0);
  // Outside the area (the line is 2 pixels wide) the colour appears only in the legend, to the right.
  Rect everywhere_left = picture.find(blue, {0, 0, a.right + 2, picture.height()});
  CHECK(everywhere_left.left >= a.left - 1);
  CHECK(everywhere_left.top >= a.top - 1);
  CHECK(everywhere_left.bottom <= a.bottom + 1);
  Rect legend = picture.find(blue, {a.right + 2, 0, picture.width(), picture.height()});
  CHECK(legend.width() > 5);
  CHECK(legend.top < a.top + 30);
}

TEST_CASE("plot: NaN points break a line; several series take palette colours; a log axis spaces decades evenly") {
  LineChart chart;
  chart.log_y = true;
  chart.series.push_back({"valid", {0, 1, 2, 3}, {1, 10, 100, 1000}});
  chart.series.push_back({"gap", {0, 1, 2, 3}, {2, 3, kNaN, 5}});
  Picture picture = draw(plot_lines, chart);
  const Rect a = picture.area;
  auto column = [&](double x) { return a.left + static_cast<int>(std::lround(x / 3 * (a.width() - 1))); };
  // Decades 1..1000 are equally spaced: the markers' centres step by the same pixels.
  std::vector<double> centres;
  for (int i = 0; i < 4; ++i) {
    Rect marker = picture.find(palette_color(0), {column(i) - 1, a.top - 4, column(i) + 2, a.bottom + 4});
    centres.push_back((marker.top + marker.bottom) / 2.0);
  }
  CHECK(centres[0] > centres[1]);
  CHECK(std::abs((centres[0] - centres[1]) - (centres[2] - centres[3])) <= 2);
  CHECK(std::abs((centres[1] - centres[2]) - (centres[2] - centres[3])) <= 2);
  // The second series has no pixels between its points at x = 1 and x = 3, except where it is NaN.
  const Color orange = palette_color(1);
  CHECK(picture.find(orange, {column(0), a.top, column(1), a.bottom}).width() > 0);
  CHECK(picture.find(orange, {column(1) + 5, a.top, column(3) - 5, a.bottom}).width() == 0);
  CHECK(picture.find(orange, {a.right + 2, 0, picture.width(), picture.height()}).width() > 0);  // legend
}

TEST_CASE("plot: a taller bar is taller in pixels, groups sit side by side from the same baseline") {
  BarChart chart;
  chart.title = "head load";
  chart.y_label = "share of tokens";
  chart.categories = {"head 0", "head 1"};
  chart.groups = {{"layer 0", {1, 3}}, {"layer 1", {2, 0.5}}};
  Picture picture = draw(plot_bars, chart);
  const Rect a = picture.area;
  const int mid = a.left + a.width() / 2;
  Rect g0_left = picture.find(palette_color(0), {a.left, a.top, mid, a.bottom});
  Rect g0_right = picture.find(palette_color(0), {mid, a.top, a.right, a.bottom});
  Rect g1_left = picture.find(palette_color(1), {a.left, a.top, mid, a.bottom});
  REQUIRE(g0_left.width() > 0);
  REQUIRE(g0_right.width() > 0);
  REQUIRE(g1_left.width() > 0);
  CHECK(g0_left.bottom == a.bottom);  // every bar rises from 0 at the bottom of the axis
  CHECK(g0_right.bottom == a.bottom);
  CHECK(g0_right.height() == doctest::Approx(3.0 * g0_left.height()).epsilon(0.02));
  CHECK(g1_left.height() == doctest::Approx(2.0 * g0_left.height()).epsilon(0.02));
  CHECK(g0_left.right <= g1_left.left);  // group 0 left of group 1 within a category
  CHECK(picture.find(palette_color(1), {a.right + 2, 0, picture.width(), picture.height()}).width() > 0);
}

TEST_CASE("plot: negative bars hang below the zero line") {
  BarChart chart;
  chart.categories = {"a", "b", "c"};
  chart.groups = {{"", {-2, kNaN, 2}}};
  Picture picture = draw(plot_bars, chart);
  const Rect a = picture.area;
  const int third = a.width() / 3;
  Rect down = picture.find(palette_color(0), {a.left, a.top, a.left + third, a.bottom});
  Rect none = picture.find(palette_color(0), {a.left + third, a.top, a.left + 2 * third, a.bottom});
  Rect up = picture.find(palette_color(0), {a.left + 2 * third, a.top, a.right, a.bottom});
  CHECK(none.width() == 0);  // NaN: no bar
  CHECK(down.bottom == a.bottom);
  CHECK(up.top == a.top);
  CHECK(std::abs(down.top - up.bottom) <= 1);  // both end at the zero line
  CHECK(picture.find(palette_color(0), {a.right + 2, 0, picture.width(), picture.height()}).width() == 0);  // no legend
}

TEST_CASE("plot: histogram counts land in their bins") {
  HistogramChart chart;
  chart.title = "gate values";
  chart.bins = 10;
  chart.range_lo = 0;
  chart.range_hi = 1;
  chart.series = {{"shared", {0.05, 0.05, 0.01}}, {"routed", {0.95, 0.95, 0.95, 1.0, 0.91, 0.99, 7, kNaN}}};
  Picture picture = draw(plot_histograms, chart);
  const Rect a = picture.area;
  const int bin = a.width() / 10;
  Rect shared = picture.find(palette_color(0), grown(a, 1));
  Rect routed = picture.find(palette_color(1), grown(a, 1));
  REQUIRE(shared.width() > 0);
  REQUIRE(routed.width() > 0);
  CHECK(shared.left >= a.left - 1);
  CHECK(shared.right <= a.left + bin + 2);  // only the first bin
  CHECK(routed.left >= a.right - bin - 2);  // only the last bin (1.0 included, 7 and NaN not counted)
  CHECK(routed.right <= a.right + 1);
  // 6 routed and 3 shared samples on an axis from 0 to 6.
  CHECK(routed.top <= a.top + 1);
  CHECK(std::abs((a.bottom - shared.top) - a.height() / 2) <= 2);

  chart.normalize = true;  // fractions of the finite samples: 3/3 shared, 6/7 routed (7 is out of range)
  picture = draw(plot_histograms, chart);
  const Rect n = picture.area;
  CHECK(picture.find(palette_color(0), n).top <= n.top + 1);
  CHECK(std::abs((n.bottom - picture.find(palette_color(1), n).top) - n.height() * 6.0 / 7) <= 2);
}

TEST_CASE("plot: histogram range is automatic when unset, also for a single value") {
  HistogramChart chart;
  chart.series = {{"one value", {0.3, 0.3}}};
  Picture picture = draw(plot_histograms, chart);
  Rect bar = picture.find(palette_color(0), picture.area);
  const int centre = picture.area.left + picture.area.width() / 2;
  CHECK(bar.left <= centre);  // the value sits at the middle of the range
  CHECK(bar.right > centre);
}

TEST_CASE("plot: heat map cells take the colour map, the largest value its top colour") {
  Heatmap chart;
  chart.title = "routing load";
  chart.row_label = "layer";
  chart.col_label = "head";
  chart.rows = {"0", "1"};
  chart.cols = {"0", "1", "2"};
  chart.values = {{0.0, 0.25, kNaN}, {0.5, 0.75, 1.0}};
  Picture picture = draw(plot_heatmap, chart);
  const Rect a = picture.area;
  const int cw = a.width() / 3, ch = a.height() / 2;
  auto corner = [&](int r, int c) { return picture.at(a.left + c * cw + 3, a.top + r * ch + 3); };
  CHECK(corner(1, 2) == colormap(1.0));
  CHECK(corner(0, 0) == colormap(0.0));
  CHECK(corner(1, 0) == colormap(0.5));
  Color missing = corner(0, 2);
  CHECK((missing.r == missing.g && missing.g == missing.b));  // NaN: grey
  // A small grid prints the numbers: the centre of a cell holds text pixels.
  const int x = a.left + 2 * cw, y = a.top + ch;
  CHECK(picture.find(colormap(1.0), {x, y, x + cw, y + ch}).width() > 0);
  int text_pixels = 0;
  for (int dy = ch / 2 - 8; dy < ch / 2 + 8; ++dy)
    for (int dx = cw / 2 - 20; dx < cw / 2 + 20; ++dx) text_pixels += picture.at(x + dx, y + dy) != colormap(1.0);
  CHECK(text_pixels > 20);
  // The colour bar, right of the grid, has the top colour at its top and the bottom colour at its bottom.
  Rect top_of_bar = picture.find(colormap(1.0), {a.right + 2, a.top, picture.width(), a.top + 3});
  Rect bottom_of_bar = picture.find(colormap(0.0), {a.right + 2, a.bottom - 3, picture.width(), a.bottom});
  CHECK(top_of_bar.width() > 10);
  CHECK(bottom_of_bar.width() > 10);
}

TEST_CASE("plot: a heat map larger than 16 x 16 shows no numbers") {
  Heatmap chart;
  for (int c = 0; c < 20; ++c) chart.cols.push_back(std::to_string(c));
  chart.rows = {"layer 0", "layer 1"};
  chart.values = {std::vector<double>(20, 1.0), std::vector<double>(20, 2.0)};
  chart.values[0][0] = 0.0;
  Picture picture = draw(plot_heatmap, chart);
  const Rect a = picture.area;
  // The bottom row is uniformly the top colour.
  Rect row = picture.find(colormap(1.0), {a.left, a.top + a.height() / 2 + 1, a.right, a.bottom});
  CHECK(row.width() == a.width());
  int other = 0;
  for (int y = a.top + a.height() / 2 + 1; y < a.bottom; ++y)
    for (int x = a.left; x < a.right; ++x) other += picture.at(x, y) != colormap(1.0);
  CHECK(other == 0);
}

TEST_CASE("plot: bad chart inputs throw naming the chart and the problem") {
  const std::string path = "/tmp/headroom_plot_never_written.png";
  LineChart lines;
  CHECK_THROWS_HEADROOM(plot_lines(path, lines), "[plot_lines] /tmp/headroom_plot_never_written.png: no series");
  lines.series = {{"train", {1, 2, 3}, {1, 2}}};
  CHECK_THROWS_HEADROOM(plot_lines(path, lines), "series 0 (train) has 3 x values but 2 y values");
  lines.series = {{"train", {}, {}}};
  CHECK_THROWS_HEADROOM(plot_lines(path, lines), "series 0 (train) is empty");
  lines.series = {{"train", {1, 2}, {kNaN, kNaN}}};
  CHECK_THROWS_HEADROOM(plot_lines(path, lines), "no finite points to plot");
  lines.series = {{"train", {1, 2}, {0, -1}}};
  lines.log_y = true;
  CHECK_THROWS_HEADROOM(plot_lines(path, lines), "(a log y axis needs y > 0)");
  lines.log_y = false;
  lines.width = 60;
  CHECK_THROWS_HEADROOM(plot_lines(path, lines), "a 60x560 picture leaves no room for the plot");

  BarChart bars;
  CHECK_THROWS_HEADROOM(plot_bars(path, bars), "[plot_bars] /tmp/headroom_plot_never_written.png: no categories");
  bars.categories = {"a", "b"};
  CHECK_THROWS_HEADROOM(plot_bars(path, bars), "no groups of bars");
  bars.groups = {{"layer 0", {1}}};
  CHECK_THROWS_HEADROOM(plot_bars(path, bars), "group 0 (layer 0) has 1 values for 2 categories");
  bars.groups = {{"layer 0", {kNaN, kNaN}}};
  CHECK_THROWS_HEADROOM(plot_bars(path, bars), "no finite values to plot");

  HistogramChart hist;
  CHECK_THROWS_HEADROOM(plot_histograms(path, hist),
                        "[plot_histograms] /tmp/headroom_plot_never_written.png: no series");
  hist.series = {{"gates", {kNaN}}};
  CHECK_THROWS_HEADROOM(plot_histograms(path, hist), "no finite samples to count");
  hist.series = {{"gates", {0.5}}};
  hist.bins = 0;
  CHECK_THROWS_HEADROOM(plot_histograms(path, hist), "bins must be 1..10000, got 0");
  hist.bins = 10;
  hist.range_lo = 1;
  hist.range_hi = 1;
  CHECK_THROWS_HEADROOM(plot_histograms(path, hist), "the range [1, 1] must be finite with lo < hi");

  Heatmap heat;
  CHECK_THROWS_HEADROOM(plot_heatmap(path, heat), "0 rows x 0 columns: both must be at least 1");
  heat.rows = {"0", "1"};
  heat.cols = {"a", "b"};
  heat.values = {{1, 2}};
  CHECK_THROWS_HEADROOM(plot_heatmap(path, heat), "1 rows of values for 2 row labels");
  heat.values = {{1, 2}, {3}};
  CHECK_THROWS_HEADROOM(plot_heatmap(path, heat), "row 1 (1) has 1 values for 2 columns");
  heat.values = {{kNaN, kNaN}, {kNaN, kNaN}};
  CHECK_THROWS_HEADROOM(plot_heatmap(path, heat),
                        "[plot_heatmap] /tmp/headroom_plot_never_written.png: no finite values");
  CHECK(access(path.c_str(), F_OK) != 0);  // nothing was written
}

TEST_CASE("plot: markdown_table aligns the pipes") {
  std::string table = markdown_table({"attn", "valid loss"}, {{"mha", "2.31"}, {"moh|top2", "2.2"}, {"\xc3\x97", ""}});
  CHECK(table ==
        "| attn      | valid loss |\n"
        "| --------- | ---------- |\n"
        "| mha       | 2.31       |\n"
        "| moh\\|top2 | 2.2        |\n"
        "| \xc3\x97         |            |\n");
  CHECK(markdown_table({"a"}, {}) == "| a   |\n| --- |\n");
  CHECK_THROWS_HEADROOM(markdown_table({}, {}), "[markdown_table] the header has no columns");
  CHECK_THROWS_HEADROOM(markdown_table({"a", "b"}, {{"1", "2"}, {"3"}}), "row 1 has 1 cells but the header has 2");
}

TEST_CASE("plot: a method keeps its colour whatever the order of the series") {
  CHECK(method_color("mha") == palette_color(0));
  CHECK(!method_color("dense").has_value());
  const std::vector<std::string> methods = {"mha", "moa", "moh75", "moh50", "mae", "mae-equal-updates"};
  for (size_t i = 0; i < methods.size(); ++i)
    for (size_t j = 0; j < i; ++j) CHECK(*method_color(methods[i]) != *method_color(methods[j]));
  // mha low and moa high, listed in both orders: mha's line is mha's colour each time.
  for (const bool mha_first : {true, false}) {
    LineChart chart;
    LineSeries mha{"mha", {0, 1}, {1, 1}, method_color("mha")}, moa{"moa", {0, 1}, {2, 2}, method_color("moa")};
    chart.series = mha_first ? std::vector<LineSeries>{mha, moa} : std::vector<LineSeries>{moa, mha};
    Picture picture = draw(plot_lines, chart);
    const Rect a = picture.area;
    CAPTURE(mha_first);
    CHECK(picture.find(*method_color("mha"), {a.left, a.top + a.height() / 2, a.right, a.bottom}).width() > 0);
    CHECK(picture.find(*method_color("moa"), {a.left, a.top + a.height() / 2, a.right, a.bottom}).width() == 0);
    CHECK(picture.find(*method_color("moa"), {a.left, a.top, a.right, a.top + a.height() / 2}).width() > 0);
  }
}

TEST_CASE("plot: a title too wide for its picture is drawn smaller and stays inside it") {
  BarChart chart;
  chart.title = "head / expert density per layer (share of tokens that use it): compare-lm/moh75-seed1";
  chart.categories = {"0", "1"};
  chart.groups = {{"layer 0", {0.5, 1}}};
  Picture picture = draw(plot_bars, chart, true);
  const Color ink{40, 40, 40};
  const int band = picture.area.top - 10;  // the rows above the plot area hold the title
  CHECK(picture.find(ink, {0, 0, picture.width(), band}).width() > 0);
  CHECK(picture.find(ink, {0, 0, 14, band}).width() == 0);  // the margins stay clear
  CHECK(picture.find(ink, {picture.width() - 14, 0, picture.width(), band}).width() == 0);
  chart.title = std::string(400, 'x');  // too wide even at the smallest scale: cut
  picture = draw(plot_bars, chart, true);
  CHECK(picture.find(ink, {0, 0, 14, picture.area.top - 10}).width() == 0);
}

TEST_CASE("plot: loss.png's smoothed train loss is the mean of the last 50 steps, drawn once 50 are logged") {
  auto rows = [](int64_t first, int64_t last, int64_t every) {
    LogRows out;
    for (int64_t step = first; step <= last; step += every)
      out.push_back({{"step", double(step)}, {"loss", 2.0 * double(step)}});
    return out;
  };
  const std::vector<LineSeries> long_run = loss_series(rows(1, 60, 1), rows(20, 60, 20));
  REQUIRE(long_run.size() == 3);
  const LineSeries& mean = long_run[1];
  CHECK(mean.name == "train, mean of the last 50 steps");
  REQUIRE(mean.x.size() == 11);
  CHECK(mean.x.front() == 50);
  CHECK(mean.y.front() == doctest::Approx(51));  // 2 · (1 + ... + 50) / 50
  CHECK(mean.x.back() == 60);
  CHECK(mean.y.back() == doctest::Approx(71));  // 2 · (11 + ... + 60) / 50
  CHECK(long_run[2].name == "validation");
  // A run shorter than the window has no mean to draw; validation keeps its colour.
  const std::vector<LineSeries> short_run = loss_series(rows(1, 30, 1), rows(10, 30, 10));
  REQUIRE(short_run.size() == 2);
  CHECK(short_run[0].name == "train");
  CHECK(short_run[0].x.size() == 30);
  CHECK(short_run[1].name == "validation");
  CHECK(short_run[1].color == long_run[2].color);
  CHECK(short_run[1].color != short_run[0].color);
}
