#pragma once
// Charts as PNG files, drawn without Python: line charts (loss curves), grouped
// bars (head load per layer), overlaid histograms (gate values) and heat maps
// (routing load, layer x head), plus Markdown tables for the README.
//
//   LineChart chart;
//   chart.title = "train loss";  chart.x_label = "step";  chart.y_label = "loss";
//   chart.series.push_back({"mha", steps, losses});
//   plot_lines("loss.png", chart);
//
// Series i gets palette_color(i) unless it names its own colour; compare gives
// each attention method its method_color, so a method has one colour in every
// chart whatever the order of --methods.  Titles too wide for the picture are
// drawn smaller, and cut with "..." only when even the smallest font overflows.  Text is stb_easy_font's ASCII bitmap
// font (other bytes print as '?').  Bad inputs throw headroom::Error naming the chart and the problem; files are
// written atomically (save_png), never half.
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "headroom/core/tensor.h"

namespace headroom::examples {

struct Color {
  uint8_t r = 0, g = 0, b = 0;
  bool operator==(const Color& o) const { return r == o.r && g == o.g && b == o.b; }
  bool operator!=(const Color& o) const { return !(*this == o); }
};

// The qualitative palette (matplotlib's tab10), cycling after 10 colours.
Color palette_color(size_t index);

// The fixed colour of each method of compare: mha blue, moa orange, moh75
// (and plain "moh") green, moh50 light green, mae red, mae-equal-updates light
// red; nullopt for any other name.
std::optional<Color> method_color(const std::string& method);

// The heat-map colour map (viridis-like): t = 0 is dark purple, t = 1 yellow;
// t is clamped to [0, 1].
Color colormap(double t);

// A pixel box: x in [left, right), y in [top, bottom); y grows downwards.
struct Rect {
  int left = 0, top = 0, right = 0, bottom = 0;
  int width() const { return right - left; }
  int height() const { return bottom - top; }
};

// An RGB picture with a white background.  Drawing outside it is clipped.
class Canvas {
 public:
  Canvas(int width, int height);
  int width() const { return width_; }
  int height() const { return height_; }
  Color pixel(int x, int y) const;

  void fill_rect(const Rect& box, Color color);
  // Mixes `color` into the box with weight alpha in [0, 1] (translucent fills).
  void blend_rect(const Rect& box, Color color, double alpha);
  // A straight line `thickness` pixels wide between two points (pixel centres).
  void line(double x0, double y0, double x1, double y1, Color color, int thickness = 1);
  // Text with its top-left corner at (x, y), each font pixel drawn as a
  // scale x scale square.  vertical = true reads bottom to top, with (x, y)
  // the top-left corner of the rotated text's box.
  void text(int x, int y, const std::string& s, Color color, int scale = 1, bool vertical = false);
  // The box text(s, scale) covers, horizontal: width along the text, height of one line.
  static int text_width(const std::string& s, int scale = 1);
  static int text_height(int scale = 1);

  // f32 [H, W, 3] in [0, 1], the layout save_png takes.
  Tensor to_image() const;
  void save(const std::string& path) const;

 private:
  int width_, height_;
  std::vector<uint8_t> rgb_;  // [H, W, 3]
};

// Curves y(x), e.g. the train and valid loss of each attention type.  NaN or
// infinite points (and points <= 0 when log_y) are skipped; the line breaks there.
struct LineSeries {
  std::string name;
  std::vector<double> x, y;
  std::optional<Color> color = std::nullopt;  // unset: palette_color(index of the series)
};
struct LineChart {
  std::string title, x_label, y_label;
  bool log_y = false;
  std::vector<LineSeries> series;
  int width = 900, height = 560;
};

// Grouped bars: for each category (e.g. head 0..7) one bar per group (e.g. per
// layer), side by side, rising from 0.  NaN values draw no bar.
struct BarGroup {
  std::string name;
  std::vector<double> values;  // one per category
};
struct BarChart {
  std::string title, x_label, y_label;
  std::string note;  // optional: a line in small type under the title, e.g. what sets the axis' scale
  std::vector<std::string> categories;
  std::vector<BarGroup> groups;
  int width = 900, height = 560;
};

// Overlaid histograms (translucent fill, outlined) over one set of equal bins,
// e.g. the gate values of shared and routed heads.  Samples outside the range
// and non-finite samples are not counted.  With normalize, each series shows
// the fraction of its own samples per bin, so series of different sizes compare.
struct HistogramSeries {
  std::string name;
  std::vector<double> samples;
};
struct HistogramChart {
  std::string title, x_label;
  int bins = 20;
  double range_lo = NAN, range_hi = NAN;  // NaN: the finite samples' min and max
  bool normalize = false;
  std::vector<HistogramSeries> series;
  int width = 900, height = 560;
};

// values[r][c] as coloured cells (colormap from the smallest to the largest
// finite value), with a colour bar; cells show their number when the grid is
// at most 16 x 16 and the number fits.  NaN cells are grey.
struct Heatmap {
  std::string title, row_label, col_label;
  std::vector<std::string> rows, cols;
  std::vector<std::vector<double>> values;  // [rows][cols]
  int width = 900, height = 560;
};

// Each writes a PNG of chart.width x chart.height and returns the plot area:
// the pixel box that the data axes span (the heat map's grid of cells).
Rect plot_lines(const std::string& path, const LineChart& chart);
Rect plot_bars(const std::string& path, const BarChart& chart);
Rect plot_histograms(const std::string& path, const HistogramChart& chart);
Rect plot_heatmap(const std::string& path, const Heatmap& chart);

// A Markdown table with the pipes of every column aligned; '|' in cells is
// escaped.  Every row must have as many cells as the header.
//   | attn | loss |
//   | ---- | ---- |
//   | mha  | 2.31 |
std::string markdown_table(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows);

}  // namespace headroom::examples
