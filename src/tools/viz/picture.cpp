// The attention picture (include/mmsparse/tools/viz.h): panels, colour scale, captions, legend and the
// PNG writer. The only translation unit that includes stb; its writer is compiled static so that
// libmmsparse exports no stb symbols to clash with an application's own copy (Debian's libstb.a
// defines the same names).

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#define STB_IMAGE_WRITE_STATIC
#define STB_IMAGE_WRITE_IMPLEMENTATION
#include <stb_easy_font.h>
#include <stb_image_write.h>

#include "mmsparse/status.h"
#include "tools/viz/attention_map.h"

namespace mmsparse {
namespace viz {
namespace {

// Matplotlib's viridis sampled at t = 0, 0.1, ..., 1.
constexpr Rgb kViridis[] = {{68, 1, 84},    {72, 36, 117},  {65, 68, 135},  {53, 95, 141},
                            {42, 120, 142}, {33, 145, 140}, {34, 168, 132}, {68, 191, 112},
                            {122, 209, 81}, {189, 223, 38}, {253, 231, 37}};
constexpr int kViridisSteps = static_cast<int>(std::size(kViridis)) - 1;

}  // namespace

Rgb viridis(double t) {
  const double scaled = std::clamp(t, 0.0, 1.0) * kViridisSteps;
  const int index = std::min(static_cast<int>(scaled), kViridisSteps - 1);
  const double fraction = scaled - index;
  auto channel = [&](uint8_t a, uint8_t b) {
    return static_cast<uint8_t>(std::lround(a + (b - a) * fraction));
  };
  const Rgb& low = kViridis[index];
  const Rgb& high = kViridis[index + 1];
  return {channel(low.r, high.r), channel(low.g, high.g), channel(low.b, high.b)};
}

double LogScale::position(double value) const {
  if (value <= 0.0) return 0.0;
  if (high <= low) return 1.0;
  return std::clamp((std::log10(value) - low) / (high - low), 0.0, 1.0);
}

LogScale LogScale::of(const PooledGrid& values, const PooledGrid& causal) {
  std::vector<double> positive;
  for (std::size_t i = 0; i < values.values.size(); ++i) {
    if (values.values[i] > 0.0 && causal.values[i] > 0.0) positive.push_back(values.values[i]);
  }
  LogScale scale;
  if (positive.empty()) return scale;
  const auto quantile = positive.begin() + static_cast<std::ptrdiff_t>(
                                               kLowQuantile * static_cast<double>(positive.size()));
  std::nth_element(positive.begin(), quantile, positive.end());
  scale.high = std::log10(*std::max_element(positive.begin(), positive.end()));
  scale.low = std::max(std::log10(*quantile), scale.high - kMaxDecades);
  return scale;
}

namespace {

// Layout, in pixels (text sizes in stb_easy_font units, scaled by the font scale).
constexpr int64_t kMargin = 16;
constexpr int64_t kPanelGap = 20;
constexpr int64_t kStripWidth = 6;   // modality strip along each axis
constexpr int64_t kStripGap = 2;
constexpr int64_t kTextGap = 6;       // between a text line and what follows
constexpr int64_t kFontLineHeight = 12;  // stb_easy_font's line advance
constexpr int64_t kLargeFontScale = 2;
constexpr int64_t kLegendBarWidth = 160;
constexpr int64_t kLegendSwatch = 12;
constexpr int64_t kLegendItemGap = 18;
constexpr int kFontBytesPerChar = 1024;  // stb_easy_font needs about 270 on average

constexpr Rgb kBackground{255, 255, 255};
constexpr Rgb kText{32, 32, 32};
constexpr Rgb kFrame{160, 160, 160};
constexpr Rgb kAboveDiagonal{205, 205, 205};  // no causal pair in the cell
constexpr Rgb kNotComputed{255, 255, 255};    // mask and kept panels: the plan skips the cell
constexpr Rgb kMaskPartial{66, 146, 198};  // the plan computes a sliver of the cell
constexpr Rgb kMaskFull{8, 48, 107};       // ... every causal pair of it
constexpr Rgb kBoundary{230, 40, 40};
constexpr double kBoundaryOpacity = 0.6;
constexpr int64_t kMaxBoundaryLines = 32;
// Okabe-Ito colours, distinguishable with colour-blindness: text, image, video.
constexpr Rgb kModalityColours[kNumModalities] = {{230, 159, 0}, {86, 180, 233}, {0, 158, 115}};

// stb_easy_font draws ASCII 32..126 only; other bytes become '?'.
std::string printable_ascii(std::string text) {
  for (char& c : text) {
    if (c < ' ' || c > '~') c = '?';
  }
  return text;
}

int64_t text_width(const std::string& line, int64_t font_scale) {
  std::string printable = printable_ascii(line);
  return stb_easy_font_width(printable.data()) * font_scale;
}

// `text` broken after spaces and commas into lines at most `max_width` pixels wide (a piece
// without a break that is wider stays whole, to be clipped).
std::vector<std::string> wrap_text(const std::string& text, int64_t font_scale, int64_t max_width) {
  std::vector<std::string> lines(1);
  std::string piece;
  auto place = [&] {
    if (!lines.back().empty() && text_width(lines.back() + piece, font_scale) > max_width) {
      lines.emplace_back();
    }
    lines.back() += piece;
    piece.clear();
  };
  for (char c : text) {
    piece += c;
    if (c == ' ' || c == ',') place();
  }
  place();
  return lines;
}

Rgb mix(const Rgb& a, const Rgb& b, double t) {
  auto channel = [&](uint8_t x, uint8_t y) {
    return static_cast<uint8_t>(std::lround(x + (y - x) * std::clamp(t, 0.0, 1.0)));
  };
  return {channel(a.r, b.r), channel(a.g, b.g), channel(a.b, b.b)};
}

class Canvas {
 public:
  Canvas(int64_t width, int64_t height) {
    image_.width = width;
    image_.height = height;
    image_.rgb.resize(static_cast<std::size_t>(width * height * 3));
    fill(0, 0, width, height, kBackground);
  }

  void set(int64_t x, int64_t y, const Rgb& colour) {
    if (x < 0 || y < 0 || x >= image_.width || y >= image_.height) return;
    uint8_t* pixel = &image_.rgb[(y * image_.width + x) * 3];
    pixel[0] = colour.r;
    pixel[1] = colour.g;
    pixel[2] = colour.b;
  }

  Rgb get(int64_t x, int64_t y) const {
    const uint8_t* pixel = &image_.rgb[(y * image_.width + x) * 3];
    return {pixel[0], pixel[1], pixel[2]};
  }

  void fill(int64_t x, int64_t y, int64_t width, int64_t height, const Rgb& colour) {
    for (int64_t row = std::max<int64_t>(y, 0); row < std::min(y + height, image_.height); ++row) {
      for (int64_t col = std::max<int64_t>(x, 0); col < std::min(x + width, image_.width); ++col) {
        set(col, row, colour);
      }
    }
  }

  // A one-pixel frame just outside the rectangle, so white cells stay visible on the background.
  void frame(int64_t x, int64_t y, int64_t width, int64_t height, const Rgb& colour) {
    fill(x - 1, y - 1, width + 2, 1, colour);
    fill(x - 1, y + height, width + 2, 1, colour);
    fill(x - 1, y, 1, height, colour);
    fill(x + width, y, 1, height, colour);
  }

  void blend(int64_t x, int64_t y, const Rgb& colour, double opacity) {
    if (x < 0 || y < 0 || x >= image_.width || y >= image_.height) return;
    set(x, y, mix(get(x, y), colour, opacity));
  }

  // Draws `line` with its top-left corner at (x, y) at `font_scale`, or at scale 1 when that is
  // too wide for `max_width` pixels, clipped to them. Returns the width drawn.
  int64_t text(int64_t x, int64_t y, const std::string& line, int64_t font_scale,
               int64_t max_width = std::numeric_limits<int64_t>::max()) {
    std::string printable = printable_ascii(line);
    const int64_t scale = text_width(printable, font_scale) <= max_width ? font_scale : 1;
    std::vector<char> vertices(printable.size() * kFontBytesPerChar + 1);
    const int quads = stb_easy_font_print(0.0f, 0.0f, printable.data(), nullptr, vertices.data(),
                                          static_cast<int>(vertices.size()));
    constexpr int kVertexBytes = 16;  // x, y, z floats and 4 colour bytes
    constexpr int kQuadVertices = 4;
    for (int quad = 0; quad < quads; ++quad) {
      float x0 = std::numeric_limits<float>::max(), y0 = x0;
      float x1 = std::numeric_limits<float>::lowest(), y1 = x1;
      for (int vertex = 0; vertex < kQuadVertices; ++vertex) {
        float xy[2];
        std::memcpy(xy, &vertices[(quad * kQuadVertices + vertex) * kVertexBytes], sizeof(xy));
        x0 = std::min(x0, xy[0]);
        x1 = std::max(x1, xy[0]);
        y0 = std::min(y0, xy[1]);
        y1 = std::max(y1, xy[1]);
      }
      const int64_t left = static_cast<int64_t>(x0) * scale;
      const int64_t width = std::min(static_cast<int64_t>(x1 - x0) * scale, max_width - left);
      if (width <= 0) continue;
      fill(x + left, y + static_cast<int64_t>(y0) * scale, width,
           static_cast<int64_t>(y1 - y0) * scale, kText);
    }
    return std::min(text_width(printable, scale), max_width);
  }

  Image take() { return std::move(image_); }

 private:
  Image image_;
};

enum class PanelKind { kAttention, kMask, kKept };

struct Panel {
  std::string caption;
  const PooledGrid* grid;
  PanelKind kind;
  bool permuted;
};

std::string fixed(double value, int digits) {
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), "%.*f", digits, value);
  return buffer;
}

// Modality of each grid row's query (in the panel's row order) and of each key; empty when there
// is no layout to read.
struct AxisModalities {
  std::vector<uint8_t> rows;
  std::vector<uint8_t> permuted_rows;
  std::vector<uint8_t> keys;
};

AxisModalities axis_modalities(const HeadAttentionMaps& maps, const ModalityLayout* layout) {
  AxisModalities axes;
  if (layout == nullptr || layout->empty()) return axes;
  const int64_t q_len = maps.attention.q_len;
  const int64_t kv_len = maps.attention.kv_len;
  if (layout->length() != kv_len) {
    throw_invalid_argument("layout length", std::to_string(kv_len) + " (kv_len of the maps)",
                           std::to_string(layout->length()));
  }
  axes.keys = layout->token_types();
  const int64_t offset = kv_len - q_len;  // query i is token i + offset
  axes.rows.resize(static_cast<std::size_t>(q_len));
  for (int64_t i = 0; i < q_len; ++i) axes.rows[i] = axes.keys[i + offset];
  if (!maps.query_order.empty()) {
    axes.permuted_rows.resize(axes.rows.size());
    for (int64_t i = 0; i < q_len; ++i) axes.permuted_rows[i] = axes.keys[maps.query_order[i] + offset];
  }
  return axes;
}

Rgb cell_colour(const Panel& panel, double value, double causal_share, const LogScale& scale) {
  if (value == 0.0 && causal_share == 0.0) return kAboveDiagonal;
  switch (panel.kind) {
    case PanelKind::kAttention:
      return viridis(scale.position(value));
    case PanelKind::kKept:
      return value == 0.0 ? kNotComputed : viridis(scale.position(value));
    case PanelKind::kMask:
      if (value == 0.0) return kNotComputed;
      // The square root lifts slivers (a one-key line in a cell of many keys) towards full.
      return mix(kMaskPartial, kMaskFull,
                 causal_share == 0.0 ? 1.0 : std::sqrt(value / causal_share));
  }
  return kAboveDiagonal;
}

// Where the modality changes along an axis drawn `size` pixels long, in pixels from its start;
// none when there are more than kMaxBoundaryLines changes (a grid head's phase order, many small
// images): their lines would cover the panel, and the modality strip shows them anyway.
std::vector<int64_t> boundary_lines(const std::vector<uint8_t>& modality, int64_t size) {
  std::vector<int64_t> lines;
  const int64_t length = static_cast<int64_t>(modality.size());
  for (int64_t i = 1; i < length; ++i) {
    if (modality[i] == modality[i - 1]) continue;
    if (static_cast<int64_t>(lines.size()) == kMaxBoundaryLines) return {};
    lines.push_back(i * size / length);
  }
  return lines;
}

// Draws the panel's cells scaled to size × size pixels at (x, y), then the modality boundary lines.
void draw_panel(Canvas& canvas, const Panel& panel, const PooledGrid& causal, const LogScale& scale,
                const std::vector<uint8_t>& row_modality, const std::vector<uint8_t>& key_modality,
                int64_t x, int64_t y, int64_t size) {
  const PooledGrid& grid = *panel.grid;
  for (int64_t py = 0; py < size; ++py) {
    const int64_t row = py * grid.rows / size;
    for (int64_t px = 0; px < size; ++px) {
      const int64_t col = px * grid.cols / size;
      canvas.set(x + px, y + py, cell_colour(panel, grid.at(row, col), causal.at(row, col), scale));
    }
  }
  for (int64_t line : boundary_lines(row_modality, size)) {
    for (int64_t px = 0; px < size; ++px) canvas.blend(x + px, y + line, kBoundary, kBoundaryOpacity);
  }
  for (int64_t line : boundary_lines(key_modality, size)) {
    for (int64_t py = 0; py < size; ++py) canvas.blend(x + line, y + py, kBoundary, kBoundaryOpacity);
  }
}

// A strip of `length` pixels coloured by the modality at each pixel's position.
void draw_strip(Canvas& canvas, const std::vector<uint8_t>& modality, int64_t x, int64_t y,
                int64_t length, bool horizontal) {
  const int64_t tokens = static_cast<int64_t>(modality.size());
  for (int64_t p = 0; p < length; ++p) {
    const Rgb& colour = kModalityColours[modality[(2 * p + 1) * tokens / (2 * length)]];
    if (horizontal) {
      canvas.fill(x + p, y, 1, kStripWidth, colour);
    } else {
      canvas.fill(x, y + p, kStripWidth, 1, colour);
    }
  }
}

// The picture's panels: attention, the gathered columns when the maps have them, plan mask and
// kept attention, then attention and mask in the plan's query order when it is not the identity.
std::vector<Panel> picture_panels(const HeadAttentionMaps& maps) {
  std::vector<Panel> panels = {
      {"attention (" + std::string(pool_mode_name(maps.pool)) + "-pooled)", &maps.attention,
       PanelKind::kAttention, false},
      {"plan mask, density " + fixed(100.0 * maps.density, 2) + "%", &maps.mask, PanelKind::kMask,
       false},
      {"kept: recall " + fixed(maps.recall_mean, 4) + " (min " + fixed(maps.recall_min, 4) + ")",
       &maps.kept, PanelKind::kKept, false}};
  if (!maps.columns.empty()) {  // beside the map: the keys each query block selected
    panels.insert(panels.begin() + 1, {"selected vectors (gathered key columns)", &maps.columns,
                                       PanelKind::kMask, false});
  }
  if (!maps.query_order.empty()) {
    panels.push_back({"attention, plan query order", &maps.attention_permuted,
                      PanelKind::kAttention, true});
    panels.push_back({"mask, plan query order", &maps.mask_permuted, PanelKind::kMask, true});
  }
  return panels;
}

// A legend item: a swatch or the colour bar, then a label, at (x, line) once wrapped.
struct LegendItem {
  Rgb swatch;
  std::string label;
  bool colour_bar = false;
  int64_t x = 0, line = 0;
};

// The colour bar, the mask's colours and, with modality strips, the modalities' colours.
std::vector<LegendItem> legend_items(const LogScale& scale, bool strips) {
  std::vector<LegendItem> legend = {
      {{}, "log10 p from " + fixed(scale.low, 1) + " to " + fixed(scale.high, 1), true},
      {kMaskFull, "computed (lighter: part of the pixel)"},
      {kNotComputed, "skipped"},
      {kAboveDiagonal, "above the diagonal"}};
  if (strips) {
    for (int m = 0; m < kNumModalities; ++m) {
      legend.push_back({kModalityColours[m], std::string(modality_name(static_cast<Modality>(m)))});
    }
    legend.push_back({kBoundary, "modality boundary"});
  }
  return legend;
}

// Places the items on as many lines as a picture `width` pixels wide needs; returns the lines.
int64_t wrap_legend(std::vector<LegendItem>& legend, int64_t font, int64_t width) {
  int64_t legend_lines = 1;
  for (int64_t x = kMargin; LegendItem& item : legend) {
    const int64_t item_width = (item.colour_bar ? kLegendBarWidth : kLegendSwatch * font) +
                               kTextGap + text_width(item.label, font);
    if (x > kMargin && x + item_width > width - kMargin) {
      x = kMargin;
      ++legend_lines;
    }
    item.x = x;
    item.line = legend_lines - 1;
    x += item_width + kLegendItemGap;
  }
  return legend_lines;
}

// Draws the wrapped legend, its first line at y = legend_y.
void draw_legend(Canvas& canvas, const std::vector<LegendItem>& legend, int64_t legend_y,
                 int64_t font) {
  const int64_t line_height = kFontLineHeight * font;
  const int64_t legend_line_height = line_height + kTextGap;
  for (const LegendItem& item : legend) {
    const int64_t y = legend_y + item.line * legend_line_height;
    int64_t x = item.x;
    if (item.colour_bar) {
      for (int64_t i = 0; i < kLegendBarWidth; ++i) {
        canvas.fill(x + i, y, 1, line_height,
                    viridis(static_cast<double>(i) / static_cast<double>(kLegendBarWidth - 1)));
      }
      x += kLegendBarWidth;
    } else {
      canvas.fill(x, y, kLegendSwatch * font, line_height, item.swatch);
      canvas.frame(x, y, kLegendSwatch * font, line_height, kFrame);
      x += kLegendSwatch * font;
    }
    canvas.text(x + kTextGap, y, item.label, font);
  }
}

}  // namespace
}  // namespace viz

Image render_attention_picture(const HeadAttentionMaps& maps, const PictureOptions& options) {
  using namespace viz;
  if (options.panel_size < 1) {
    throw_invalid_argument("panel_size", ">= 1", std::to_string(options.panel_size));
  }
  if (maps.attention.empty() || maps.mask.empty() || maps.kept.empty()) {
    throw_invalid_argument("maps", "pooled attention, mask and kept grids (pool_attention_maps)",
                           "empty grids");
  }
  const PooledGrid& grid = maps.attention;
  const int64_t cells = std::max(grid.rows, grid.cols);
  const PooledGrid causal = pool_causal_mask(grid.q_len, grid.kv_len, cells, {});
  const bool permuted = !maps.query_order.empty();
  const PooledGrid causal_permuted =
      permuted ? pool_causal_mask(grid.q_len, grid.kv_len, cells, maps.query_order) : PooledGrid{};
  const LogScale scale = LogScale::of(maps.attention, causal);

  const std::vector<Panel> panels = picture_panels(maps);

  const AxisModalities axes = axis_modalities(maps, options.layout);
  const bool strips = !axes.keys.empty();
  const int64_t size = options.panel_size;
  const int64_t strip = strips ? kStripWidth + kStripGap : 0;
  const int64_t block = strip + size;
  // Doubled text when every caption fits above its panel that way; one size for all captions.
  int64_t font = kLargeFontScale;
  for (const Panel& panel : panels) {
    if (text_width(panel.caption, kLargeFontScale) > block) font = 1;
  }
  const int64_t line_height = kFontLineHeight * font;
  const int64_t count = static_cast<int64_t>(panels.size());
  const int64_t width = 2 * kMargin + count * block + (count - 1) * kPanelGap;

  std::vector<LegendItem> legend = legend_items(scale, strips);
  const int64_t legend_lines = wrap_legend(legend, font, width);

  const std::vector<std::string> title = wrap_text(options.title, font, width - 2 * kMargin);
  const int64_t title_y = kMargin;
  const int64_t caption_y = title_y + static_cast<int64_t>(title.size()) * line_height + kTextGap;
  const int64_t panel_y = caption_y + line_height + kTextGap + strip;
  const int64_t legend_y = panel_y + size + kTextGap * 2;
  const int64_t legend_line_height = line_height + kTextGap;
  const int64_t height = legend_y + legend_lines * legend_line_height + kMargin;
  if (width > INT_MAX / 3 || height > INT_MAX) {
    throw_invalid_argument("panel_size", "a picture under 2^31 bytes per row",
                           std::to_string(size));
  }

  Canvas canvas(width, height);
  for (std::size_t i = 0; i < title.size(); ++i) {
    canvas.text(kMargin, title_y + static_cast<int64_t>(i) * line_height, title[i], font,
                width - 2 * kMargin);
  }
  std::vector<ImagePanel> placed;
  for (int64_t p = 0; p < count; ++p) {
    const Panel& panel = panels[p];
    const int64_t x = kMargin + p * (block + kPanelGap) + strip;
    placed.push_back({panel.caption, x, panel_y, size});
    canvas.text(x - strip, caption_y, panel.caption, font, block);
    const std::vector<uint8_t>& rows = panel.permuted ? axes.permuted_rows : axes.rows;
    if (strips) {
      draw_strip(canvas, axes.keys, x, panel_y - strip, size, true);
      draw_strip(canvas, rows, x - strip, panel_y, size, false);
    }
    draw_panel(canvas, panel, panel.permuted ? causal_permuted : causal, scale, rows, axes.keys, x,
               panel_y, size);
    canvas.frame(x, panel_y, size, size, kFrame);
  }
  draw_legend(canvas, legend, legend_y, font);
  Image image = canvas.take();
  image.panels = std::move(placed);
  return image;
}

void write_png(const std::string& path, const Image& image) {
  constexpr int kChannels = 3;
  if (image.width < 1 || image.height < 1 ||
      image.rgb.size() != static_cast<std::size_t>(image.width * image.height * kChannels)) {
    throw_invalid_argument("image", "width, height >= 1 and width * height * 3 bytes",
                           std::to_string(image.width) + " x " + std::to_string(image.height) +
                               ", " + std::to_string(image.rgb.size()) + " bytes");
  }
  const int width = static_cast<int>(image.width);
  if (stbi_write_png(path.c_str(), width, static_cast<int>(image.height), kChannels,
                     image.rgb.data(), width * kChannels) == 0) {
    throw Error(ErrorCode::kIoError, "png: cannot write '" + path + "'");
  }
}

}  // namespace mmsparse
