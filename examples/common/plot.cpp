#include "headroom/examples/common/plot.h"

#include <algorithm>
#include <cstdio>
#include <functional>

// Header-only with every function static: no implementation macro to define.
#include <stb/stb_easy_font.h>

#include "headroom/core/error.h"
#include "headroom/core/image.h"

namespace headroom::examples {

namespace {

const Color kInk{40, 40, 40};         // text, axes and ticks
const Color kGrid{228, 228, 228};     // grid lines behind the data
const Color kMissing{190, 190, 190};  // heat-map cells without a value
const Color kWhite{255, 255, 255};

// Font scales (stb_easy_font glyphs are about 6 x 9 font pixels).
constexpr int kTextScale = 2;  // tick labels, legend, axis labels
constexpr int kTitleScale = 3;
constexpr int kMargin = 14;    // around the picture
constexpr int kGap = 10;       // between a label and what it labels
constexpr int kTick = 6;       // tick mark length
constexpr int kLineWidth = 2;  // data lines and outlines

// ---- Canvas helpers ---------------------------------------------------------

// ASCII the font can draw: other bytes (UTF-8, control characters) become '?'.
std::string printable(const std::string& s) {
  std::string out = s;
  for (char& c : out)
    if ((c < 32 || c > 126) && c != '\n') c = '?';
  return out;
}

// Calls draw(x0, y0, x1, y1) with the box, in font pixels, of every quad
// stb_easy_font renders for `s` at the origin.
void for_each_glyph_quad(const std::string& s, const std::function<void(float, float, float, float)>& draw) {
  struct Vertex {  // stb_easy_font's vertex layout
    float x, y, z;
    unsigned char color[4];
  };
  std::string ascii = printable(s);
  // stb truncates silently when the buffer is full: grow it until one quad is left unused.
  std::vector<Vertex> vertices;
  int quads = 0;
  for (size_t capacity = 64 * (ascii.size() + 1); quads * 4 + 4 >= static_cast<int>(vertices.size()); capacity *= 2) {
    vertices.resize(capacity);
    quads = stb_easy_font_print(0, 0, ascii.data(), nullptr, vertices.data(),
                                static_cast<int>(vertices.size() * sizeof(Vertex)));
  }
  for (int q = 0; q < quads; ++q) {
    const Vertex& top_left = vertices[4 * q];
    const Vertex& bottom_right = vertices[4 * q + 2];
    draw(top_left.x, top_left.y, bottom_right.x, bottom_right.y);
  }
}

// ---- Axes -------------------------------------------------------------------

// A data range mapped onto pixels, with its tick values.
struct Axis {
  double lo = 0, hi = 1;
  bool log = false;
  double step = 0;  // spacing of linear ticks (sets their decimals); 0 for log ticks
  std::vector<double> ticks;

  // Where v lies, 0 at lo and 1 at hi.
  double fraction(double v) const {
    if (log) return (std::log10(v) - std::log10(lo)) / (std::log10(hi) - std::log10(lo));
    return (v - lo) / (hi - lo);
  }
  // The pixel where v lands when lo maps to pixel `first` and hi to `last`.
  double pixel(double v, int first, int last) const { return first + fraction(v) * (last - first); }
};

// The 1, 2 or 5 x 10^k spacing that cuts span into at most max_ticks steps.
double nice_step(double span, int max_ticks) {
  double raw = span / max_ticks;
  double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0})
    if (m * magnitude >= raw * (1 - 1e-9)) return m * magnitude;
  return 10 * magnitude;
}

std::vector<double> ticks_every(double step, double lo, double hi) {
  std::vector<double> ticks;
  for (double k = std::ceil(lo / step - 1e-9); k <= std::floor(hi / step + 1e-9); ++k)
    ticks.push_back(k * step + 0.0);  // + 0.0 turns -0 into 0
  return ticks;
}

// A linear axis over [lo, hi] with 1-2-5 ticks; snap widens it to the outer ticks.
Axis linear_axis(double lo, double hi, bool snap) {
  if (!(hi - lo > 1e-12 * std::max(std::abs(lo), std::abs(hi)))) {  // one value: give it room
    double pad = lo != 0 ? std::abs(lo) * 0.1 : 1.0;
    lo -= pad;
    hi += pad;
  }
  Axis axis;
  axis.step = nice_step(hi - lo, 6);
  axis.lo = snap ? std::floor(lo / axis.step + 1e-9) * axis.step : lo;
  axis.hi = snap ? std::ceil(hi / axis.step - 1e-9) * axis.step : hi;
  axis.ticks = ticks_every(axis.step, axis.lo, axis.hi);
  return axis;
}

// A log axis over [lo, hi] (both > 0) with a small margin; ticks at decades,
// or at 1-2-5 or 1..9 x 10^k when the range spans too few decades for 3 ticks.
Axis log_axis(double lo, double hi) {
  if (hi < lo * 1.01) {
    lo /= 1.5;
    hi *= 1.5;
  }
  Axis axis;
  axis.log = true;
  double margin = std::pow(hi / lo, 0.04);
  axis.lo = lo / margin;
  axis.hi = hi * margin;
  const int first = static_cast<int>(std::floor(std::log10(axis.lo)));
  const int last = static_cast<int>(std::ceil(std::log10(axis.hi)));
  const int decade_stride = std::max(1, (last - first) / 8);  // at most ~8 decade ticks
  for (const std::vector<int>& mantissas : {std::vector<int>{1}, {1, 2, 5}, {1, 2, 3, 4, 5, 6, 7, 8, 9}}) {
    axis.ticks.clear();
    for (int e = first; e <= last; e += mantissas.size() == 1 ? decade_stride : 1)
      for (int m : mantissas) {
        double v = m * std::pow(10.0, e);
        if (v >= axis.lo && v <= axis.hi) axis.ticks.push_back(v);
      }
    if (axis.ticks.size() >= 3) return axis;
  }
  Axis linear = linear_axis(axis.lo, axis.hi, false);  // under a decade: plain ticks, log spacing
  axis.ticks = linear.ticks;
  axis.step = linear.step;
  return axis;
}

std::string format(const char* spec, double v) {
  char text[64];
  std::snprintf(text, sizeof text, spec, v);
  return text;
}

// A tick's text: as many decimals as the step needs ("0.5", "20", "1e-05").
std::string tick_label(double v, double step) {
  if (step <= 0 || std::abs(v) >= 1e6 || step < 1e-4) return format("%g", v);
  int decimals = std::max(0, -static_cast<int>(std::floor(std::log10(step) + 1e-9)));
  char text[64];
  std::snprintf(text, sizeof text, "%.*f", decimals, v);
  return text;
}

// Pixel coordinates of a value on a horizontal / vertical axis spanning the area.
double x_pixel(const Axis& axis, const Rect& area, double v) { return axis.pixel(v, area.left, area.right - 1); }
double y_pixel(const Axis& axis, const Rect& area, double v) { return axis.pixel(v, area.bottom - 1, area.top); }

// ---- Layout -----------------------------------------------------------------

// What surrounds the plot area; layout() leaves room for it.
struct Frame {
  std::string title, x_label, y_label;
  std::vector<std::string> y_tick_labels;  // the widest sets the left margin
  int right_reserve = 0;                   // legend or colour bar
  std::string note;                        // a line in small type under the title (BarChart::note)
};

int widest(const std::vector<std::string>& labels, int scale) {
  int w = 0;
  for (const std::string& s : labels) w = std::max(w, Canvas::text_width(s, scale));
  return w;
}

// The title as drawn on a picture `width` wide: the largest font scale at which
// it fits between the margins, cut with "..." when even scale 1 is too wide.
struct FittedTitle {
  std::string text;
  int scale = kTitleScale;
};

FittedTitle fit_title(const std::string& title, int width, int largest_scale = kTitleScale) {
  const int room = width - 2 * kMargin;
  for (int scale = largest_scale; scale >= 1; --scale)
    if (Canvas::text_width(title, scale) <= room) return {title, scale};
  std::string cut = title;
  while (!cut.empty() && Canvas::text_width(cut + "...", 1) > room) cut.pop_back();
  return {cut + "...", 1};
}

Rect layout(const Canvas& canvas, const Frame& frame, const std::string& chart, const std::string& path) {
  const int line = Canvas::text_height(kTextScale);
  Rect area;
  const int title_height = Canvas::text_height(fit_title(frame.title, canvas.width()).scale);
  area.top = kMargin + (frame.title.empty() ? line / 2 : title_height + kGap);
  if (!frame.note.empty()) area.top += Canvas::text_height(1) + kGap;
  area.left =
      kMargin + (frame.y_label.empty() ? 0 : line + kGap) + widest(frame.y_tick_labels, kTextScale) + kTick + kGap / 2;
  area.bottom = canvas.height() - kMargin - (frame.x_label.empty() ? 0 : line + kGap) - line - kTick - kGap / 2;
  area.right = canvas.width() - kMargin - (frame.right_reserve > 0 ? frame.right_reserve + 2 * kGap : 0);
  HEADROOM_CHECK(area.width() >= 40 && area.height() >= 40, "[", chart, "] ", path, ": a ", canvas.width(), "x",
                 canvas.height(), " picture leaves no room for the plot (labels or legend too wide?)");
  return area;
}

// Title centred on top, x label under the tick labels, y label reading upwards on the left.
void draw_labels(Canvas& canvas, const Rect& area, const Frame& frame) {
  const int line = Canvas::text_height(kTextScale);
  const FittedTitle title = fit_title(frame.title, canvas.width());
  canvas.text((canvas.width() - Canvas::text_width(title.text, title.scale)) / 2, kMargin, title.text, kInk,
              title.scale);
  if (!frame.note.empty()) {
    const FittedTitle note = fit_title(frame.note, canvas.width(), 1);
    const int below_title = kMargin + Canvas::text_height(title.scale) + kGap / 2;
    canvas.text((canvas.width() - Canvas::text_width(note.text, 1)) / 2, below_title, note.text, kInk, 1);
  }
  canvas.text(area.left + (area.width() - Canvas::text_width(frame.x_label, kTextScale)) / 2,
              canvas.height() - kMargin - line, frame.x_label, kInk, kTextScale);
  canvas.text(kMargin, area.top + (area.height() - Canvas::text_width(frame.y_label, kTextScale)) / 2, frame.y_label,
              kInk, kTextScale, true);
}

// The frame line just outside the area, so it never covers data.
void draw_box(Canvas& canvas, const Rect& area) {
  canvas.fill_rect({area.left - 1, area.top - 1, area.right + 1, area.top}, kInk);
  canvas.fill_rect({area.left - 1, area.bottom, area.right + 1, area.bottom + 1}, kInk);
  canvas.fill_rect({area.left - 1, area.top - 1, area.left, area.bottom + 1}, kInk);
  canvas.fill_rect({area.right, area.top - 1, area.right + 1, area.bottom + 1}, kInk);
}

std::vector<std::string> tick_labels(const Axis& axis) {
  std::vector<std::string> labels;
  for (double t : axis.ticks) labels.push_back(tick_label(t, axis.step));
  return labels;
}

// Left ticks with labels and grid lines across the area.
void draw_y_axis(Canvas& canvas, const Rect& area, const Axis& axis) {
  const std::vector<std::string> labels = tick_labels(axis);
  for (size_t i = 0; i < axis.ticks.size(); ++i) {
    int y = static_cast<int>(std::lround(y_pixel(axis, area, axis.ticks[i])));
    canvas.fill_rect({area.left, y, area.right, y + 1}, kGrid);
    canvas.fill_rect({area.left - kTick, y, area.left, y + 1}, kInk);
    canvas.text(area.left - kTick - kGap / 2 - Canvas::text_width(labels[i], kTextScale),
                y - Canvas::text_height(kTextScale) / 2, labels[i], kInk, kTextScale);
  }
}

// Labels under the area centred at `centres`, thinned to every k-th when they would overlap.
void draw_x_labels(Canvas& canvas, const Rect& area, const std::vector<double>& centres,
                   const std::vector<std::string>& labels) {
  double spacing = centres.size() > 1 ? std::abs(centres[1] - centres[0]) : area.width();
  int every = std::max(1, static_cast<int>(std::ceil((widest(labels, kTextScale) + kGap) / spacing)));
  for (size_t i = 0; i < labels.size(); i += every) {
    int x = static_cast<int>(std::lround(centres[i]));
    canvas.fill_rect({x, area.bottom, x + 1, area.bottom + kTick}, kInk);
    canvas.text(x - Canvas::text_width(labels[i], kTextScale) / 2, area.bottom + kTick + kGap / 2, labels[i], kInk,
                kTextScale);
  }
}

// Bottom ticks with labels and grid lines.
void draw_x_axis(Canvas& canvas, const Rect& area, const Axis& axis) {
  std::vector<double> centres;
  for (double t : axis.ticks) {
    centres.push_back(x_pixel(axis, area, t));
    int x = static_cast<int>(std::lround(centres.back()));
    canvas.fill_rect({x, area.top, x + 1, area.bottom}, kGrid);
  }
  draw_x_labels(canvas, area, centres, tick_labels(axis));
}

// Row labels left of the area, centred on their rows (row 0 on top), thinned.
void draw_row_labels(Canvas& canvas, const Rect& area, const std::vector<std::string>& labels) {
  const double row_height = double(area.height()) / labels.size();
  const int line = Canvas::text_height(kTextScale);
  int every = std::max(1, static_cast<int>(std::ceil(line / row_height)));
  for (size_t r = 0; r < labels.size(); r += every) {
    int y = area.top + static_cast<int>((r + 0.5) * row_height);
    canvas.text(area.left - kGap / 2 - Canvas::text_width(labels[r], kTextScale), y - line / 2, labels[r], kInk,
                kTextScale);
  }
}

int legend_width(const std::vector<std::string>& names) {
  return Canvas::text_height(kTextScale) + kGap + widest(names, kTextScale);
}

// A colour swatch and a name per series, right of the area, top-aligned;
// series i in colors[i], or palette_color(i) when colors is empty.
void draw_legend(Canvas& canvas, const Rect& area, const std::vector<std::string>& names,
                 const std::vector<Color>& colors) {
  const int line = Canvas::text_height(kTextScale);
  const int x = area.right + 2 * kGap;
  for (size_t i = 0; i < names.size(); ++i) {
    int y = area.top + static_cast<int>(i) * (line + kGap / 2);
    canvas.fill_rect({x, y + 2, x + line - 4, y + line - 2}, colors.empty() ? palette_color(i) : colors[i]);
    canvas.text(x + line + kGap / 2, y, names[i], kInk, kTextScale);
  }
}

// What every chart ends with: the frame over the data, the legend (when there
// are names), the title and axis labels; then the file.  Returns the area.
Rect finish(Canvas& canvas, const Rect& area, const Frame& frame, const std::vector<std::string>& legend,
            const std::string& path, const std::vector<Color>& legend_colors = {}) {
  draw_box(canvas, area);
  if (!legend.empty()) draw_legend(canvas, area, legend, legend_colors);
  draw_labels(canvas, area, frame);
  canvas.save(path);
  return area;
}

// The pixel box [x0, x1) x [y0, y1) spanned by two possibly unordered corners.
Rect span(double x0, double y0, double x1, double y1) {
  return {static_cast<int>(std::lround(std::min(x0, x1))), static_cast<int>(std::lround(std::min(y0, y1))),
          static_cast<int>(std::lround(std::max(x0, x1))) + 1, static_cast<int>(std::lround(std::max(y0, y1))) + 1};
}

// The finite minimum and maximum of `values`; false when none is finite.
bool finite_range(const std::vector<double>& values, double& lo, double& hi) {
  bool any = false;
  for (double v : values)
    if (std::isfinite(v)) {
      lo = any ? std::min(lo, v) : v;
      hi = any ? std::max(hi, v) : v;
      any = true;
    }
  return any;
}

}  // namespace

// ---- Colours ----------------------------------------------------------------

Color palette_color(size_t index) {
  static const Color tab10[10] = {{31, 119, 180}, {255, 127, 14},  {44, 160, 44},   {214, 39, 40},  {148, 103, 189},
                                  {140, 86, 75},  {227, 119, 194}, {127, 127, 127}, {188, 189, 34}, {23, 190, 207}};
  return tab10[index % 10];
}

std::optional<Color> method_color(const std::string& method) {
  // tab10's blue, orange, green and red, and tab20's lighter green and red for the variants.
  static const std::pair<const char*, Color> colors[] = {{"mha", {31, 119, 180}},
                                                         {"moa", {255, 127, 14}},
                                                         {"moh75", {44, 160, 44}},
                                                         {"moh", {44, 160, 44}},
                                                         {"moh50", {152, 223, 138}},
                                                         {"mae", {214, 39, 40}},
                                                         {"mae-equal-updates", {255, 152, 150}}};
  for (const auto& [name, color] : colors)
    if (method == name) return color;
  return std::nullopt;
}

Color colormap(double t) {
  // viridis sampled at t = 0, 1/8, ..., 1, linearly interpolated
  static const Color points[9] = {{68, 1, 84},    {71, 45, 123}, {59, 82, 139},  {44, 114, 142}, {33, 145, 140},
                                  {40, 174, 128}, {94, 201, 98}, {173, 220, 48}, {253, 231, 37}};
  t = std::isnan(t) ? 0.0 : std::clamp(t, 0.0, 1.0) * 8;
  int i = std::min(static_cast<int>(t), 7);
  double w = t - i;
  auto mix = [w](uint8_t a, uint8_t b) { return static_cast<uint8_t>(std::lround(a + (b - a) * w)); };
  return {mix(points[i].r, points[i + 1].r), mix(points[i].g, points[i + 1].g), mix(points[i].b, points[i + 1].b)};
}

// ---- Canvas -----------------------------------------------------------------

Canvas::Canvas(int width, int height) : width_(width), height_(height) {
  HEADROOM_CHECK(width > 0 && height > 0 && width <= 16384 && height <= 16384,
                 "[Canvas] size must be 1..16384 x 1..16384 pixels, got ", width, "x", height);
  rgb_.assign(static_cast<size_t>(width) * height * 3, 255);
}

Color Canvas::pixel(int x, int y) const {
  HEADROOM_CHECK(x >= 0 && x < width_ && y >= 0 && y < height_, "[Canvas] pixel (", x, ", ", y, ") is outside the ",
                 width_, "x", height_, " canvas");
  const uint8_t* p = &rgb_[(static_cast<size_t>(y) * width_ + x) * 3];
  return {p[0], p[1], p[2]};
}

void Canvas::blend_rect(const Rect& box, Color color, double alpha) {
  const int x0 = std::max(box.left, 0), x1 = std::min(box.right, width_);
  const int y0 = std::max(box.top, 0), y1 = std::min(box.bottom, height_);
  auto mix = [alpha](uint8_t old, uint8_t c) { return static_cast<uint8_t>(std::lround(old + (c - old) * alpha)); };
  for (int y = y0; y < y1; ++y)
    for (int x = x0; x < x1; ++x) {
      uint8_t* p = &rgb_[(static_cast<size_t>(y) * width_ + x) * 3];
      p[0] = mix(p[0], color.r);
      p[1] = mix(p[1], color.g);
      p[2] = mix(p[2], color.b);
    }
}

void Canvas::fill_rect(const Rect& box, Color color) { blend_rect(box, color, 1.0); }

void Canvas::line(double x0, double y0, double x1, double y1, Color color, int thickness) {
  // Stamps a thickness x thickness square at every pixel step along the line.
  const int steps = std::max(1, static_cast<int>(std::ceil(std::max(std::abs(x1 - x0), std::abs(y1 - y0)))));
  const int back = (thickness - 1) / 2;
  for (int i = 0; i <= steps; ++i) {
    int x = static_cast<int>(std::lround(x0 + (x1 - x0) * i / steps)) - back;
    int y = static_cast<int>(std::lround(y0 + (y1 - y0) * i / steps)) - back;
    fill_rect({x, y, x + thickness, y + thickness}, color);
  }
}

void Canvas::text(int x, int y, const std::string& s, Color color, int scale, bool vertical) {
  const int w = stb_easy_font_width(printable(s).data());  // font pixels along the text
  for_each_glyph_quad(s, [&](float qx0, float qy0, float qx1, float qy1) {
    auto at = [scale](int origin, float v) { return origin + static_cast<int>(std::lround(v * scale)); };
    if (vertical)  // font (fx, fy) -> picture (x + fy, y + w - fx): turned a quarter anticlockwise
      fill_rect({at(x, qy0), at(y, w - qx1), at(x, qy1), at(y, w - qx0)}, color);
    else fill_rect({at(x, qx0), at(y, qy0), at(x, qx1), at(y, qy1)}, color);
  });
}

int Canvas::text_width(const std::string& s, int scale) { return stb_easy_font_width(printable(s).data()) * scale; }

int Canvas::text_height(int scale) { return 10 * scale; }  // cap height 7, descenders to 10 font pixels

Tensor Canvas::to_image() const {
  Tensor image = Tensor::empty({height_, width_, 3});  // [H, W, 3]
  float* out = image.data<float>();
  for (size_t i = 0; i < rgb_.size(); ++i) out[i] = rgb_[i] / 255.0f;
  return image;
}

void Canvas::save(const std::string& path) const { save_png(path, to_image()); }

// ---- Line chart -------------------------------------------------------------

Rect plot_lines(const std::string& path, const LineChart& chart) {
  HEADROOM_CHECK(!chart.series.empty(), "[plot_lines] ", path, ": no series to plot");
  auto usable = [&](double x, double y) { return std::isfinite(x) && std::isfinite(y) && (!chart.log_y || y > 0); };
  std::vector<double> xs, ys;  // every usable point, for the axis ranges
  for (size_t s = 0; s < chart.series.size(); ++s) {
    const LineSeries& series = chart.series[s];
    HEADROOM_CHECK(series.x.size() == series.y.size(), "[plot_lines] ", path, ": series ", s, " (", series.name,
                   ") has ", series.x.size(), " x values but ", series.y.size(), " y values");
    HEADROOM_CHECK(!series.x.empty(), "[plot_lines] ", path, ": series ", s, " (", series.name, ") is empty");
    for (size_t i = 0; i < series.x.size(); ++i)
      if (usable(series.x[i], series.y[i])) {
        xs.push_back(series.x[i]);
        ys.push_back(series.y[i]);
      }
  }
  HEADROOM_CHECK(!xs.empty(), "[plot_lines] ", path, ": no finite points to plot",
                 chart.log_y ? " (a log y axis needs y > 0)" : "");
  double x_lo = 0, x_hi = 0, y_lo = 0, y_hi = 0;
  finite_range(xs, x_lo, x_hi);
  finite_range(ys, y_lo, y_hi);
  const Axis x_axis = linear_axis(x_lo, x_hi, true);
  const Axis y_axis = chart.log_y ? log_axis(y_lo, y_hi) : linear_axis(y_lo, y_hi, true);

  std::vector<std::string> names;
  std::vector<Color> colors;
  for (size_t s = 0; s < chart.series.size(); ++s) {
    names.push_back(chart.series[s].name);
    colors.push_back(chart.series[s].color.value_or(palette_color(s)));
  }
  Canvas canvas(chart.width, chart.height);
  const Frame frame{chart.title, chart.x_label, chart.y_label, tick_labels(y_axis), legend_width(names)};
  const Rect area = layout(canvas, frame, "plot_lines", path);
  draw_y_axis(canvas, area, y_axis);
  draw_x_axis(canvas, area, x_axis);
  for (size_t s = 0; s < chart.series.size(); ++s) {
    const LineSeries& series = chart.series[s];
    const size_t n = series.x.size();
    const bool markers = n <= 40;  // few points (evaluations): mark each one
    auto point_ok = [&](size_t i) { return i < n && usable(series.x[i], series.y[i]); };
    auto px = [&](size_t i) { return x_pixel(x_axis, area, series.x[i]); };
    auto py = [&](size_t i) { return y_pixel(y_axis, area, series.y[i]); };
    for (size_t i = 0; i < n; ++i) {
      if (!point_ok(i)) continue;
      if (point_ok(i + 1)) canvas.line(px(i), py(i), px(i + 1), py(i + 1), colors[s], kLineWidth);
      bool isolated = !point_ok(i + 1) && (i == 0 || !point_ok(i - 1));
      if (markers || isolated) canvas.line(px(i), py(i), px(i), py(i), colors[s], 3 * kLineWidth);
    }
  }
  return finish(canvas, area, frame, names, path, colors);
}

// ---- Bar chart --------------------------------------------------------------

Rect plot_bars(const std::string& path, const BarChart& chart) {
  HEADROOM_CHECK(!chart.categories.empty(), "[plot_bars] ", path, ": no categories");
  HEADROOM_CHECK(!chart.groups.empty(), "[plot_bars] ", path, ": no groups of bars");
  std::vector<double> all;
  std::vector<std::string> names;
  for (size_t g = 0; g < chart.groups.size(); ++g) {
    const BarGroup& group = chart.groups[g];
    HEADROOM_CHECK(group.values.size() == chart.categories.size(), "[plot_bars] ", path, ": group ", g, " (",
                   group.name, ") has ", group.values.size(), " values for ", chart.categories.size(), " categories");
    all.insert(all.end(), group.values.begin(), group.values.end());
    names.push_back(group.name);
  }
  double lo = 0, hi = 0;
  HEADROOM_CHECK(finite_range(all, lo, hi), "[plot_bars] ", path, ": no finite values to plot");
  const Axis y_axis = linear_axis(std::min(lo, 0.0), std::max(hi, 0.0), true);
  const bool legend = chart.groups.size() > 1 || !chart.groups[0].name.empty();

  Canvas canvas(chart.width, chart.height);
  Frame frame{chart.title, chart.x_label, chart.y_label, tick_labels(y_axis), legend ? legend_width(names) : 0};
  frame.note = chart.note;
  const Rect area = layout(canvas, frame, "plot_bars", path);
  draw_y_axis(canvas, area, y_axis);
  // Each category gets an equal slot; its bars fill the middle 80%, one per group.
  const double slot = double(area.width()) / chart.categories.size();
  const double bar = 0.8 * slot / chart.groups.size();
  const double gap = bar >= 6 ? 1 : 0;  // a pixel between neighbouring bars when they are wide enough
  const double zero = y_pixel(y_axis, area, 0.0);
  std::vector<double> centres;
  for (size_t c = 0; c < chart.categories.size(); ++c) {
    centres.push_back(area.left + (c + 0.5) * slot);
    for (size_t g = 0; g < chart.groups.size(); ++g) {
      double v = chart.groups[g].values[c];
      if (!std::isfinite(v)) continue;
      double x0 = area.left + c * slot + 0.1 * slot + g * bar;
      Rect box = span(x0 + gap, zero, x0 + bar - 1 - gap, y_pixel(y_axis, area, v));
      canvas.fill_rect(box, palette_color(g));
    }
  }
  if (lo < 0) canvas.fill_rect(span(area.left, zero, area.right - 1, zero), kInk);  // the zero line
  draw_x_labels(canvas, area, centres, chart.categories);
  return finish(canvas, area, frame, legend ? names : std::vector<std::string>(), path);
}

// ---- Histograms -------------------------------------------------------------

Rect plot_histograms(const std::string& path, const HistogramChart& chart) {
  HEADROOM_CHECK(chart.bins >= 1 && chart.bins <= 10000, "[plot_histograms] ", path, ": bins must be 1..10000, got ",
                 chart.bins);
  HEADROOM_CHECK(!chart.series.empty(), "[plot_histograms] ", path, ": no series to plot");
  std::vector<double> all;
  std::vector<std::string> names;
  for (const HistogramSeries& series : chart.series) {
    all.insert(all.end(), series.samples.begin(), series.samples.end());
    names.push_back(series.name);
  }
  double lo = 0, hi = 0;
  HEADROOM_CHECK(finite_range(all, lo, hi), "[plot_histograms] ", path, ": no finite samples to count");
  if (!std::isnan(chart.range_lo)) lo = chart.range_lo;
  if (!std::isnan(chart.range_hi)) hi = chart.range_hi;
  const bool auto_range = std::isnan(chart.range_lo) || std::isnan(chart.range_hi);
  HEADROOM_CHECK(std::isfinite(lo) && std::isfinite(hi) && (lo < hi || (auto_range && lo == hi)), "[plot_histograms] ",
                 path, ": the range [", lo, ", ", hi, "] must be finite with lo < hi");
  if (lo == hi) {  // every sample has one value: centre it in a unit-wide range
    lo -= 0.5;
    hi += 0.5;
  }

  // heights[s][b]: samples of series s in bin b (a fraction of its finite samples when normalized)
  std::vector<std::vector<double>> heights(chart.series.size(), std::vector<double>(chart.bins, 0.0));
  double tallest = 0;
  for (size_t s = 0; s < chart.series.size(); ++s) {
    size_t finite = 0;
    for (double v : chart.series[s].samples) {
      if (!std::isfinite(v)) continue;
      ++finite;
      if (v < lo || v > hi) continue;
      int b = std::min(static_cast<int>((v - lo) / (hi - lo) * chart.bins), chart.bins - 1);  // hi is in the last bin
      heights[s][b] += 1;
    }
    for (double& h : heights[s]) {
      if (chart.normalize && finite > 0) h /= finite;
      tallest = std::max(tallest, h);
    }
  }
  const Axis x_axis = linear_axis(lo, hi, false);
  const Axis y_axis = linear_axis(0, tallest > 0 ? tallest : 1, true);

  Canvas canvas(chart.width, chart.height);
  const Frame frame{chart.title, chart.x_label, chart.normalize ? "fraction of samples" : "count", tick_labels(y_axis),
                    legend_width(names)};
  const Rect area = layout(canvas, frame, "plot_histograms", path);
  draw_y_axis(canvas, area, y_axis);
  draw_x_axis(canvas, area, x_axis);
  auto bin_x = [&](int b) { return x_pixel(x_axis, area, lo + (hi - lo) * b / chart.bins); };
  auto bar_y = [&](double h) { return y_pixel(y_axis, area, h); };
  for (size_t s = 0; s < chart.series.size(); ++s)  // translucent fills first, so no outline is covered
    for (int b = 0; b < chart.bins; ++b)
      if (heights[s][b] > 0)
        canvas.blend_rect(span(bin_x(b), bar_y(0), bin_x(b + 1), bar_y(heights[s][b])), palette_color(s), 0.25);
  for (size_t s = 0; s < chart.series.size(); ++s) {
    // The step outline without the baseline: tops of non-empty bins and the risers between bins.
    const Color color = palette_color(s);
    for (int b = 0; b <= chart.bins; ++b) {
      double left = b > 0 ? heights[s][b - 1] : 0, right = b < chart.bins ? heights[s][b] : 0;
      if (left != right) canvas.line(bin_x(b), bar_y(left), bin_x(b), bar_y(right), color, kLineWidth);
      if (right > 0) canvas.line(bin_x(b), bar_y(right), bin_x(b + 1), bar_y(right), color, kLineWidth);
    }
  }
  return finish(canvas, area, frame, names, path);
}

// ---- Heat map ---------------------------------------------------------------

Rect plot_heatmap(const std::string& path, const Heatmap& chart) {
  HEADROOM_CHECK(!chart.rows.empty() && !chart.cols.empty(), "[plot_heatmap] ", path, ": ", chart.rows.size(),
                 " rows x ", chart.cols.size(), " columns: both must be at least 1");
  HEADROOM_CHECK(chart.values.size() == chart.rows.size(), "[plot_heatmap] ", path, ": ", chart.values.size(),
                 " rows of values for ", chart.rows.size(), " row labels");
  std::vector<double> all;
  for (size_t r = 0; r < chart.values.size(); ++r) {
    HEADROOM_CHECK(chart.values[r].size() == chart.cols.size(), "[plot_heatmap] ", path, ": row ", r, " (",
                   chart.rows[r], ") has ", chart.values[r].size(), " values for ", chart.cols.size(), " columns");
    all.insert(all.end(), chart.values[r].begin(), chart.values[r].end());
  }
  double lo = 0, hi = 0;
  HEADROOM_CHECK(finite_range(all, lo, hi), "[plot_heatmap] ", path, ": no finite values to plot");
  auto shade = [&](double v) { return std::isfinite(v) ? colormap(hi > lo ? (v - lo) / (hi - lo) : 0.5) : kMissing; };

  const std::string lo_text = format("%.3g", lo), hi_text = format("%.3g", hi);
  const int bar_width = 20;
  Canvas canvas(chart.width, chart.height);
  const Frame frame{chart.title, chart.col_label, chart.row_label, chart.rows,
                    bar_width + kGap / 2 + widest({lo_text, hi_text}, kTextScale)};
  const Rect area = layout(canvas, frame, "plot_heatmap", path);
  const size_t n_rows = chart.rows.size(), n_cols = chart.cols.size();
  const bool numbers = n_rows <= 16 && n_cols <= 16;
  auto cell_x = [&](size_t c) { return area.left + static_cast<int>(c * area.width() / n_cols); };
  auto cell_y = [&](size_t r) { return area.top + static_cast<int>(r * area.height() / n_rows); };
  std::vector<double> centres;
  for (size_t c = 0; c < n_cols; ++c) centres.push_back((cell_x(c) + cell_x(c + 1) - 1) / 2.0);
  for (size_t r = 0; r < n_rows; ++r)
    for (size_t c = 0; c < n_cols; ++c) {
      const Rect cell{cell_x(c), cell_y(r), cell_x(c + 1), cell_y(r + 1)};
      const double v = chart.values[r][c];
      const Color color = shade(v);
      canvas.fill_rect(cell, color);
      if (!numbers || !std::isfinite(v)) continue;
      const std::string text = format("%.3g", v);
      const bool light = 0.299 * color.r + 0.587 * color.g + 0.114 * color.b > 140;  // dark ink on light cells
      for (int scale : {kTextScale, 1})
        if (Canvas::text_width(text, scale) + 4 <= cell.width() && Canvas::text_height(scale) + 4 <= cell.height()) {
          canvas.text((cell.left + cell.right - Canvas::text_width(text, scale)) / 2,
                      (cell.top + cell.bottom - Canvas::text_height(scale)) / 2, text, light ? kInk : kWhite, scale);
          break;
        }
    }
  draw_row_labels(canvas, area, chart.rows);
  draw_x_labels(canvas, area, centres, chart.cols);

  // The colour bar: the colour map from hi (top) to lo (bottom), labelled at both ends.
  const Rect bar{area.right + 2 * kGap, area.top, area.right + 2 * kGap + bar_width, area.bottom};
  for (int y = bar.top; y < bar.bottom; ++y)
    canvas.fill_rect({bar.left, y, bar.right, y + 1}, colormap(1.0 - double(y - bar.top) / (bar.height() - 1)));
  draw_box(canvas, bar);
  canvas.text(bar.right + kGap / 2, bar.top, hi_text, kInk, kTextScale);
  canvas.text(bar.right + kGap / 2, bar.bottom - Canvas::text_height(kTextScale), lo_text, kInk, kTextScale);
  return finish(canvas, area, frame, {}, path);
}

// ---- Markdown ---------------------------------------------------------------

namespace {

std::string escape_pipes(const std::string& cell) {
  std::string out;
  for (char c : cell) {
    if (c == '|') out += '\\';
    out += c;
  }
  return out;
}

// Characters as a reader counts them: UTF-8 continuation bytes do not add width.
size_t display_width(const std::string& s) {
  return std::count_if(s.begin(), s.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; });
}

}  // namespace

std::string markdown_table(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows) {
  HEADROOM_CHECK(!header.empty(), "[markdown_table] the header has no columns");
  std::vector<std::vector<std::string>> lines{header};
  for (size_t i = 0; i < rows.size(); ++i) {
    HEADROOM_CHECK(rows[i].size() == header.size(), "[markdown_table] row ", i, " has ", rows[i].size(),
                   " cells but the header has ", header.size());
    lines.push_back(rows[i]);
  }
  std::vector<size_t> widths(header.size(), 3);  // "---" is the shortest separator Markdown accepts
  for (auto& line : lines)
    for (size_t c = 0; c < line.size(); ++c) {
      line[c] = escape_pipes(line[c]);
      widths[c] = std::max(widths[c], display_width(line[c]));
    }
  lines.insert(lines.begin() + 1, std::vector<std::string>());
  for (size_t c = 0; c < header.size(); ++c) lines[1].push_back(std::string(widths[c], '-'));
  std::string out;
  for (const auto& line : lines) {
    out += "|";
    for (size_t c = 0; c < line.size(); ++c)
      out += " " + line[c] + std::string(widths[c] - display_width(line[c]), ' ') + " |";
    out += "\n";
  }
  return out;
}

}  // namespace headroom::examples
