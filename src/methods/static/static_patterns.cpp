// Static patterns as plan builders. Each one writes a head slot as uniform query tiles (split where
// the pattern changes, so masks stay exact) with key spans and columns. The mask policy does the
// element-wise work inside partially covered tiles: causal always, a window for A-shape.

#include "methods/static/static_patterns.h"

#include <algorithm>
#include <array>
#include <cstddef>
#include <utility>

#include "methods/registry.h"
#include "mmsparse/patterns.h"

namespace mmsparse::detail {

namespace {

// MMInference Table 2 defaults.
constexpr int64_t kDefaultSink = 128;
constexpr int64_t kDefaultLocal = 4096;
constexpr int64_t kDefaultBottom = 128;
// Windows scaled to shorter sequences never shrink below one engine key chunk's worth of
// neighbours.
constexpr int64_t kMinScaledWindow = 64;

int64_t floor_div(int64_t a, int64_t b) { return a / b - ((a % b != 0) && ((a < 0) != (b < 0))); }

// Key positions of query rows: aligned to the end of the keys, clipped to [0, kv_len].
struct KeyGeometry {
  const PlanShape& shape;
  int64_t aligned(int64_t row) const { return row + shape.causal_offset(); }
  int64_t clip(int64_t key) const { return std::clamp<int64_t>(key, 0, shape.kv_len); }
  // One past the last key any row of [begin, end) may see causally.
  int64_t causal_end(int64_t end) const { return clip(aligned(end - 1) + 1); }
};

// Calls tile(begin, end) for consecutive tiles of at most tile_rows rows over [first, last).
template <class Tile>
void for_each_tile(const PlanShape& shape, int64_t first, int64_t last, Tile&& tile) {
  for (int64_t row = first; row < last; row += shape.tile_rows) {
    tile(row, std::min(last, row + shape.tile_rows));
  }
}

// --- Tile writers ----------------------------------------------------------------------------

// Causal attention: one span per tile up to its last row's diagonal.
void append_dense_tiles(PlanBuilder& builder, const PlanShape& shape, int64_t first, int64_t last) {
  const KeyGeometry keys{shape};
  for_each_tile(shape, first, last, [&](int64_t begin, int64_t end) {
    builder.begin_tile(begin, end);
    builder.add_span(0, keys.causal_end(end));
  });
}

// Sink keys [0, sink) plus a causal window of `local` keys; the window mask makes it exact.
void append_a_shape_tiles(PlanBuilder& builder, const PlanShape& shape, int64_t first, int64_t last,
                          int64_t sink, int64_t local) {
  const KeyGeometry keys{shape};
  const MaskPolicy mask{.causal = true, .window = local, .window_sink = sink};
  for_each_tile(shape, first, last, [&](int64_t begin, int64_t end) {
    const int64_t keys_end = keys.causal_end(end);
    builder.begin_tile(begin, end, mask);
    builder.add_span(0, std::min(sink, keys_end));
    builder.add_span(std::max(sink, keys.aligned(begin) - local + 1), keys_end);
  });
}

// --- Patterns --------------------------------------------------------------------------------

void build_dense(PlanBuilder& builder, const PatternSpec&, const HeadContext& context) {
  builder.begin_head();
  append_dense_tiles(builder, context.shape, 0, context.shape.q_len);
}

// Non-causal dense attention (a video DiT's full attention): every query tile sees every key,
// under a mask policy with nothing masked.
void build_full(PlanBuilder& builder, const PatternSpec&, const HeadContext& context) {
  const PlanShape& shape = context.shape;
  const MaskPolicy unmasked{.causal = false};
  builder.begin_head();
  for_each_tile(shape, 0, shape.q_len, [&](int64_t begin, int64_t end) {
    builder.begin_tile(begin, end, unmasked);
    builder.add_span(0, shape.kv_len);
  });
}

void build_a_shape(PlanBuilder& builder, const PatternSpec& spec, const HeadContext& context) {
  const PlanShape& shape = context.shape;
  const int64_t sink = checked_param(spec, "sink", 0);
  const int64_t local = checked_param(spec, "local", 1);
  builder.begin_head();
  append_a_shape_tiles(builder, shape, 0, shape.q_len, sink, local);
}

// A-shape, except the last `bottom` query rows attend causally to everything; they get their own
// tiles so the split is exact.
void build_tri_shape(PlanBuilder& builder, const PatternSpec& spec, const HeadContext& context) {
  const PlanShape& shape = context.shape;
  const int64_t sink = checked_param(spec, "sink", 0);
  const int64_t local = checked_param(spec, "local", 1);
  const int64_t bottom = checked_param(spec, "bottom", 0);
  const int64_t boundary = std::max<int64_t>(0, shape.q_len - bottom);
  builder.begin_head();
  append_a_shape_tiles(builder, shape, 0, boundary, sink, local);
  append_dense_tiles(builder, shape, boundary, shape.q_len);
}

// Sparse Transformer "fixed": the keys of the query's own segment (causal) plus the vertical
// columns key % vline_stride == 0. Tiles split at segment boundaries, so one span per tile is
// exact.
void build_sf_fixed(PlanBuilder& builder, const PatternSpec& spec, const HeadContext& context) {
  const PlanShape& shape = context.shape;
  const int64_t segment = checked_param(spec, "segment", 1);
  const int64_t vline_stride = checked_param(spec, "vline_stride", 1);
  const KeyGeometry keys{shape};
  builder.begin_head();
  for (int64_t row = 0; row < shape.q_len;) {
    const int64_t segment_start =
        floor_div(keys.aligned(row), segment) * segment;  // a key position
    const int64_t rows_end = std::min(shape.q_len, segment_start + segment - shape.causal_offset());
    for_each_tile(shape, row, rows_end, [&](int64_t begin, int64_t end) {
      const int64_t span_begin = keys.clip(segment_start);
      builder.begin_tile(begin, end);
      // Columns before the segment are left of every row's diagonal: no causal cut.
      for (int64_t key = 0; key < span_begin; key += vline_stride) builder.add_column(key);
      builder.add_span(span_begin, keys.causal_end(end));
    });
    row = rows_end;
  }
}

// Sparse Transformer "strided": a local window plus the diagonals query - key = m * stride. Slash
// lines become spans the way MInference converts them: per tile, a band one tile wide around each
// diagonal, so each band is a superset of its exact diagonal (as is the local band of the window).
void build_sf_strided(PlanBuilder& builder, const PatternSpec& spec, const HeadContext& context) {
  const PlanShape& shape = context.shape;
  const int64_t local = checked_param(spec, "local", 1);
  const int64_t stride = checked_param(spec, "stride", 1);
  const KeyGeometry keys{shape};
  builder.begin_head();
  std::vector<std::pair<int64_t, int64_t>> bands;
  for_each_tile(shape, 0, shape.q_len, [&](int64_t begin, int64_t end) {
    const int64_t first = keys.aligned(begin);
    const int64_t last = keys.aligned(end - 1);
    const int64_t local_begin = keys.clip(first - local + 1);
    builder.begin_tile(begin, end);
    bands.clear();
    if (last >= stride) {
      const int64_t farthest = last / stride * stride;  // largest diagonal distance with a key
      if (end - begin >= stride) {
        // Bands one tile wide at most `stride` apart touch: their union is one range.
        bands.emplace_back(std::max<int64_t>(0, first - farthest), last - stride + 1);
      } else {
        for (int64_t distance = farthest; distance >= stride; distance -= stride) {
          bands.emplace_back(std::max<int64_t>(0, first - distance), last - distance + 1);
        }
      }
    }
    // Ascending and clipped against the local band; merge what overlaps.
    int64_t open_begin = -1;
    int64_t open_end = -1;
    for (const auto& [band_begin, band_end_unclipped] : bands) {
      const int64_t band_end = std::min(band_end_unclipped, local_begin);
      if (band_begin >= band_end) continue;
      if (band_begin <= open_end) {
        open_end = std::max(open_end, band_end);
        continue;
      }
      builder.add_span(open_begin, open_end);
      open_begin = band_begin;
      open_end = band_end;
    }
    builder.add_span(open_begin, open_end);
    builder.add_span(local_begin, keys.causal_end(end));
  });
}

Params no_params(int64_t) { return {}; }
Params a_shape_params(int64_t) { return {{"sink", kDefaultSink}, {"local", kDefaultLocal}}; }
Params tri_shape_params(int64_t) {
  return {{"sink", kDefaultSink}, {"local", kDefaultLocal}, {"bottom", kDefaultBottom}};
}
Params sf_fixed_params(int64_t frame) { return {{"segment", frame}, {"vline_stride", frame}}; }
Params sf_strided_params(int64_t frame) { return {{"local", frame}, {"stride", frame}}; }

}  // namespace

PatternEntry& static_pattern_entry(StaticPattern pattern) {
  // Indexed by StaticPattern.
  static std::array<PatternEntry, kStaticPatterns.size()> entries = {{
      {{"dense", "causal attention over every key", "dense"}, build_dense, no_params},
      {{"a-shape",
        "sink keys plus a local window (StreamingLLM); exact",
        "a-shape:sink=128,local=4096",
        false,
        {{"local", kMinScaledWindow}}},
       build_a_shape,
       a_shape_params},
      {{"tri-shape",
        "a-shape, with the last `bottom` queries attending densely (causal); exact",
        "tri-shape:sink=128,local=4096,bottom=128",
        false,
        {{"local", kMinScaledWindow}}},
       build_tri_shape,
       tri_shape_params},
      {{"sf-fixed",
        "Sparse Transformer fixed: own segment plus every vline_stride-th key; both default to "
        "tokens per frame (256 without video); exact",
        "sf-fixed"},
       build_sf_fixed,
       sf_fixed_params},
      {{"sf-strided",
        "Sparse Transformer strided: local window plus every stride-th diagonal, as tile-wide "
        "bands (a superset of the lines); both default to tokens per frame (256 without video)",
        "sf-strided"},
       build_sf_strided,
       sf_strided_params},
  }};
  return entries[static_cast<std::size_t>(pattern)];
}

PatternEntry& full_attention_entry() {
  static PatternEntry entry{
      {"full", "non-causal dense attention: every query sees every key (video DiTs)", "full"},
      build_full,
      no_params};
  return entry;
}

}  // namespace mmsparse::detail
