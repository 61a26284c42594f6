// The recall-versus-density plot (include/mmsparse/tools/recall_curve.h): a log10 density axis, a
// linear recall axis, one polyline with point markers per family, the oracles as reference lines.
// Text comes from stb_easy_font (header-only, static functions); the PNG writer is write_png.

#include <stb_easy_font.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "mmsparse/status.h"
#include "mmsparse/tools/recall_curve.h"
#include "tools/viz/attention_map.h"

namespace mmsparse {
namespace {

using viz::Rgb;

constexpr int64_t kMinPlotSide = 200;
constexpr int64_t kLeft = 70;  // room for the recall labels
constexpr int64_t kRight = 20;
constexpr int64_t kTop = 40;     // the title
constexpr int64_t kBottom = 50;  // density labels and the axis name
constexpr int64_t kLegendLine = 16;
constexpr int64_t kLegendSwatch = 20;
constexpr int64_t kMarker = 3;  // half side of a point's square
constexpr int kFontBytesPerChar = 1024;
constexpr double kRecallStep = 0.1;
constexpr double kLowestRecallAxis = 0.0;

constexpr Rgb kWhite{255, 255, 255};
constexpr Rgb kInk{32, 32, 32};
constexpr Rgb kGridLine{225, 225, 225};
constexpr Rgb kTokenOracle{0, 0, 0};
constexpr Rgb kTileOracle{150, 150, 150};
// Okabe-Ito colours (distinguishable with colour-blindness), one per family in order.
constexpr Rgb kFamilyColours[] = {{213, 94, 0},    {0, 114, 178}, {0, 158, 115},
                                  {204, 121, 167}, {230, 159, 0}, {86, 180, 233}};

class Plot {
 public:
  Plot(int64_t width, int64_t height) {
    image_.width = width;
    image_.height = height;
    image_.rgb.assign(static_cast<std::size_t>(width * height * 3), 255);
  }
  void set(int64_t x, int64_t y, const Rgb& colour) {
    if (x < 0 || y < 0 || x >= image_.width || y >= image_.height) return;
    uint8_t* pixel = &image_.rgb[(y * image_.width + x) * 3];
    pixel[0] = colour.r;
    pixel[1] = colour.g;
    pixel[2] = colour.b;
  }
  void fill(int64_t x, int64_t y, int64_t w, int64_t h, const Rgb& colour) {
    for (int64_t row = y; row < y + h; ++row) {
      for (int64_t col = x; col < x + w; ++col) set(col, row, colour);
    }
  }
  // A line two pixels thick; `dash` > 0 leaves gaps of that many steps.
  void line(double x0, double y0, double x1, double y1, const Rgb& colour, int dash = 0) {
    const int steps = static_cast<int>(std::max(std::abs(x1 - x0), std::abs(y1 - y0))) + 1;
    for (int i = 0; i <= steps; ++i) {
      if (dash > 0 && (i / dash) % 2 == 1) continue;
      const double t = static_cast<double>(i) / steps;
      const auto x = static_cast<int64_t>(std::lround(x0 + (x1 - x0) * t));
      const auto y = static_cast<int64_t>(std::lround(y0 + (y1 - y0) * t));
      fill(x, y, 2, 2, colour);
    }
  }
  void text(int64_t x, int64_t y, const std::string& words, const Rgb& colour = kInk) {
    std::string printable = words;
    for (char& c : printable) {
      if (c < ' ' || c > '~') c = '?';
    }
    std::vector<char> vertices(printable.size() * kFontBytesPerChar + 1);
    const int quads = stb_easy_font_print(0.0f, 0.0f, printable.data(), nullptr, vertices.data(),
                                          static_cast<int>(vertices.size()));
    constexpr int kVertexBytes = 16;  // x, y, z floats and 4 colour bytes
    for (int quad = 0; quad < quads; ++quad) {
      float first[2], third[2];  // opposite corners of the quad
      std::memcpy(first, &vertices[(quad * 4) * kVertexBytes], sizeof(first));
      std::memcpy(third, &vertices[(quad * 4 + 2) * kVertexBytes], sizeof(third));
      fill(x + static_cast<int64_t>(std::min(first[0], third[0])),
           y + static_cast<int64_t>(std::min(first[1], third[1])),
           static_cast<int64_t>(std::abs(third[0] - first[0])),
           static_cast<int64_t>(std::abs(third[1] - first[1])), colour);
    }
  }
  static int64_t text_width(const std::string& words) {
    std::string copy = words;
    return stb_easy_font_width(copy.data());
  }
  Image take() { return std::move(image_); }

 private:
  Image image_;
};

// Where values land: density on log10 over [low_decade, 0], recall linear over [recall_low, 1].
struct Axes {
  int64_t x0, y0, width, height;
  double low_decade;
  double recall_low;
  double x(double density) const {
    const double decade = std::log10(std::max(density, std::pow(10.0, low_decade)));
    return static_cast<double>(x0) +
           (decade - low_decade) / -low_decade * static_cast<double>(width);
  }
  double y(double recall) const {
    const double t = (std::clamp(recall, recall_low, 1.0) - recall_low) / (1.0 - recall_low);
    return static_cast<double>(y0 + height) - t * static_cast<double>(height);
  }
};

std::string percent_label(double decade) {
  char buffer[32];
  const double percent = 100.0 * std::pow(10.0, decade);
  std::snprintf(buffer, sizeof(buffer), percent >= 1.0 ? "%.0f%%" : "%.2g%%", percent);
  return buffer;
}

Axes plot_axes(const HeadCurves& curves, const CurvePlotOptions& options) {
  double lowest_density = 1.0, lowest_recall = 1.0;
  const auto visit = [&](const std::vector<CurvePoint>& points) {
    for (const CurvePoint& point : points) {
      if (point.density > 0.0) lowest_density = std::min(lowest_density, point.density);
      lowest_recall = std::min(lowest_recall, point.recall);
    }
  };
  for (const FamilyCurve& family : curves.families) visit(family.points);
  visit(curves.token_oracle);
  visit(curves.tile_oracle);
  Axes axes{kLeft, kTop, options.width - kLeft - kRight, options.height - kTop - kBottom, 0.0, 0.0};
  axes.low_decade = std::min(-1.0, std::floor(std::log10(lowest_density)));
  axes.recall_low =
      std::max(kLowestRecallAxis, std::floor(lowest_recall / kRecallStep) * kRecallStep);
  if (axes.recall_low >= 1.0) axes.recall_low = 1.0 - kRecallStep;
  return axes;
}

void draw_grid(Plot& plot, const Axes& axes) {
  for (double decade = axes.low_decade; decade <= 0.0; decade += 1.0) {
    const double x = axes.x(std::pow(10.0, decade));
    plot.line(x, axes.y0, x, axes.y0 + axes.height, kGridLine);
    const std::string label = percent_label(decade);
    plot.text(static_cast<int64_t>(x) - Plot::text_width(label) / 2, axes.y0 + axes.height + 8,
              label);
  }
  const int steps = static_cast<int>(std::lround((1.0 - axes.recall_low) / kRecallStep));
  for (int i = 0; i <= steps; ++i) {
    const double recall = axes.recall_low + i * kRecallStep;
    const double y = axes.y(recall);
    plot.line(axes.x0, y, axes.x0 + axes.width, y, kGridLine);
    char label[16];
    std::snprintf(label, sizeof(label), "%.1f", recall);
    plot.text(axes.x0 - 8 - Plot::text_width(label), static_cast<int64_t>(y) - 4, label);
  }
  plot.line(axes.x0, axes.y0 + axes.height, axes.x0 + axes.width, axes.y0 + axes.height, kInk);
  plot.line(axes.x0, axes.y0, axes.x0, axes.y0 + axes.height, kInk);
  plot.text(axes.x0 + axes.width / 2 - 120, axes.y0 + axes.height + 28,
            "density (pairs computed / pairs seen, log scale)");
  plot.text(8, axes.y0 - 14, "recall (kept softmax mass, mean over rows)");
}

void draw_curve(Plot& plot, const Axes& axes, const std::vector<CurvePoint>& points,
                const Rgb& colour, int dash, bool markers) {
  for (std::size_t i = 0; i < points.size(); ++i) {
    const double x = axes.x(points[i].density), y = axes.y(points[i].recall);
    if (markers) {
      plot.fill(static_cast<int64_t>(x) - kMarker, static_cast<int64_t>(y) - kMarker,
                2 * kMarker + 1, 2 * kMarker + 1, colour);
    }
    if (i == 0) continue;
    plot.line(axes.x(points[i - 1].density), axes.y(points[i - 1].recall), x, y, colour, dash);
  }
}

// Points ordered by density, so that a family's line runs left to right whatever its spec order.
std::vector<CurvePoint> by_density(std::vector<CurvePoint> points) {
  std::stable_sort(points.begin(), points.end(),
                   [](const CurvePoint& a, const CurvePoint& b) { return a.density < b.density; });
  return points;
}

}  // namespace

Image render_recall_curves(const HeadCurves& curves, const CurvePlotOptions& options) {
  if (options.width < kMinPlotSide || options.height < kMinPlotSide) {
    throw_invalid_argument("CurvePlotOptions width, height", ">= " + std::to_string(kMinPlotSide),
                           std::to_string(options.width) + " x " + std::to_string(options.height));
  }
  const Axes axes = plot_axes(curves, options);
  Plot plot(options.width, options.height);
  plot.text(kLeft, 10, options.title);
  draw_grid(plot, axes);
  struct Entry {
    std::string label;
    Rgb colour;
    int dash;
  };
  std::vector<Entry> legend;
  constexpr int kTileDash = 6;
  if (!curves.tile_oracle.empty()) {
    draw_curve(plot, axes, by_density(curves.tile_oracle), kTileOracle, kTileDash, false);
    legend.push_back({"tile oracle (best block-sparse tiles)", kTileOracle, kTileDash});
  }
  draw_curve(plot, axes, by_density(curves.token_oracle), kTokenOracle, 0, false);
  legend.push_back({"token oracle (top pairs by true mass)", kTokenOracle, 0});
  for (std::size_t f = 0; f < curves.families.size(); ++f) {
    const Rgb colour = kFamilyColours[f % std::size(kFamilyColours)];
    draw_curve(plot, axes, by_density(curves.families[f].points), colour, 0, true);
    legend.push_back({curves.families[f].name, colour, 0});
  }
  // The legend in the lower right corner, where curves that rise with density leave room.
  const int64_t legend_x = axes.x0 + axes.width - 260;
  int64_t legend_y = axes.y0 + axes.height - kLegendLine * static_cast<int64_t>(legend.size()) - 8;
  for (const Entry& entry : legend) {
    plot.line(legend_x, legend_y + 4, legend_x + kLegendSwatch, legend_y + 4, entry.colour,
              entry.dash);
    plot.text(legend_x + kLegendSwatch + 6, legend_y, entry.label);
    legend_y += kLegendLine;
  }
  return plot.take();
}

}  // namespace mmsparse
