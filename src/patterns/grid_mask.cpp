// The grid-like mask (issue 3) as a static pattern of two passes. On aligned positions, query a
// keeps key k <= a when
//     k < sink,  or  a - k < local,  or  (a - k) mod period < band.
// No one tile geometry serves both parts: rows of one period share the window but not the bands,
// rows of one phase (a mod period) share the bands but not the window. So:
//
//  * pass 0, identity order: the sink and the window, as A-shape writes them (two spans per tile,
//    window `local` with the sink exempt);
//  * pass 1, the bands beyond the window: rows grouped `phases` consecutive phases at a time over
//    tile_rows / phases periods (period-major inside a tile, so that each warpgroup of the wgmma
//    kernel holds whole periods and skips the key periods its rows do not reach). Every earlier
//    period i gives the tile one key range [i·period + first phase - band + 1, i·period + last
//    phase], which all its rows' bands fall in; the mask policy (min_distance = local, period,
//    band) keeps exactly each row's pairs. Keys below the sink are pass 0's. The ranges are spans
//    (`columns=0`, the default: one per 128-key chunk, so about half the computed pairs are
//    masked out, but span chunks load by tensor copies and mask cheaply) or gathered columns
//    (`columns=1`: they pack the chunks fully, 1.2x the useful pairs, but their masks cost more;
//    on an H100 the spans ran 51 ms and the columns 63 ms at 128K, docs/perf-notes.md, v5).
//
// The passes are disjoint (pass 1 keeps keys >= sink at distance >= local, all of which pass 0's
// window and sink leave out) and their union is the mask.

#include <algorithm>
#include <span>
#include <vector>

#include "mmsparse/patterns.h"
#include "mmsparse/status.h"
#include "patterns/pattern_registry.h"

namespace mmsparse::detail {

namespace {

// Issue 3's mask.
constexpr int64_t kDefaultSink = 128;
constexpr int64_t kDefaultLocal = 1024;
constexpr int64_t kDefaultPeriod = 1024;
constexpr int64_t kDefaultBand = 64;
// 8 phases × 16 periods per 128-row tile: the key range per period is 8 + 64 - 1 = 71 keys, 90%
// of them in each row's band (docs/perf-notes.md, v5).
constexpr int64_t kDefaultPhases = 8;
constexpr int64_t kDefaultColumns = 0;
constexpr int kPasses = 2;

int64_t floor_div(int64_t a, int64_t b) { return a / b - ((a % b != 0) && (a < 0)); }

struct GridMask {
  int64_t sink, local, period, band, phases;
  bool columns;
};

GridMask read_params(const PatternSpec& spec, const PlanShape& shape) {
  GridMask grid{checked_param(spec, "sink", 0),   checked_param(spec, "local", 1),
                checked_param(spec, "period", 1), checked_param(spec, "band", 1),
                checked_param(spec, "phases", 1), checked_flag(spec, "columns")};
  if (grid.band > grid.period) {
    throw_invalid_argument(spec.name + " parameter band",
                           "<= period = " + std::to_string(grid.period), std::to_string(grid.band));
  }
  if (grid.phases > std::min(grid.period, shape.tile_rows)) {
    throw_invalid_argument(spec.name + " parameter phases",
                           "<= period = " + std::to_string(grid.period) +
                               " and <= tile_rows = " + std::to_string(shape.tile_rows),
                           std::to_string(grid.phases));
  }
  return grid;
}

void build_window_pass(PlanBuilder& builder, const GridMask& grid, const PlanShape& shape) {
  const int64_t offset = shape.causal_offset();
  const MaskPolicy mask{.causal = true, .window = grid.local, .window_sink = grid.sink};
  builder.begin_head();
  for (int64_t begin = 0; begin < shape.q_len; begin += shape.tile_rows) {
    const int64_t end = std::min(shape.q_len, begin + shape.tile_rows);
    const int64_t keys_end = std::clamp<int64_t>(end - 1 + offset + 1, 0, shape.kv_len);
    builder.begin_tile(begin, end, mask);
    builder.add_span(0, std::min(grid.sink, keys_end));
    builder.add_span(std::clamp<int64_t>(begin + offset - grid.local + 1, grid.sink, keys_end),
                     keys_end);
  }
}

void build_bands_pass(PlanBuilder& builder, const GridMask& grid, const PlanShape& shape) {
  const int64_t offset = shape.causal_offset();
  const int64_t periods_per_tile = std::max<int64_t>(1, shape.tile_rows / grid.phases);
  // Periods holding aligned positions of queries: [first_period, last_period].
  const int64_t first_period = floor_div(offset, grid.period);
  const int64_t last_period = floor_div(shape.q_len - 1 + offset, grid.period);
  const MaskPolicy mask{
      .causal = true, .min_distance = grid.local, .period = grid.period, .band = grid.band};

  struct Tile {
    int64_t begin, end;  // order indices
    int64_t first_phase, last_phase, highest_aligned;
  };
  std::vector<QueryRun> order;
  std::vector<Tile> tiles;
  int64_t order_size = 0;
  for (int64_t block = first_period; block <= last_period; block += periods_per_tile) {
    for (int64_t first_phase = 0; first_phase < grid.period; first_phase += grid.phases) {
      const int64_t last_phase = std::min(grid.period, first_phase + grid.phases) - 1;
      Tile tile{order_size, order_size, first_phase, last_phase, 0};
      for (int64_t m = block; m < std::min(last_period + 1, block + periods_per_tile); ++m) {
        const int64_t lowest = std::max(m * grid.period + first_phase, offset);
        const int64_t highest = std::min(m * grid.period + last_phase, shape.q_len - 1 + offset);
        if (lowest > highest) continue;
        order.push_back({lowest - offset, highest - lowest + 1, 1});
        tile.end += highest - lowest + 1;
        tile.highest_aligned = highest;
      }
      if (tile.end > tile.begin) tiles.push_back(tile);
      order_size = tile.end;
    }
  }

  builder.begin_head(order);
  for (const Tile& tile : tiles) {
    builder.begin_tile(tile.begin, tile.end, mask);
    const int64_t keys_end = std::min(shape.kv_len, tile.highest_aligned - grid.local + 1);
    int64_t previous_end = grid.sink;  // ranges of neighbouring periods may touch
    for (int64_t i = 0; i * grid.period + tile.first_phase - grid.band + 1 < keys_end; ++i) {
      const int64_t begin =
          std::max(previous_end, i * grid.period + tile.first_phase - grid.band + 1);
      const int64_t end = std::min(keys_end, i * grid.period + tile.last_phase + 1);
      if (begin >= end) continue;
      previous_end = end;
      if (!grid.columns) {
        builder.add_span(begin, end);
        continue;
      }
      for (int64_t key = begin; key < end; ++key) builder.add_column(key);
    }
  }
}

void build_grid_mask(std::span<PlanBuilder> passes, const PatternSpec& spec,
                     const HeadContext& context) {
  const GridMask grid = read_params(spec, context.shape);
  build_window_pass(passes[0], grid, context.shape);
  build_bands_pass(passes[1], grid, context.shape);
}

Params grid_mask_params(int64_t) {
  return {{"sink", kDefaultSink}, {"local", kDefaultLocal},   {"period", kDefaultPeriod},
          {"band", kDefaultBand}, {"phases", kDefaultPhases}, {"columns", kDefaultColumns}};
}

}  // namespace

PatternEntry grid_mask_entry() {
  PatternEntry entry{
      {"grid-mask",
       "keys k < sink, a - k < local or (a - k) mod period < band (issue 3's grid-like mask); two "
       "passes merged by LSE: sink + window, then the bands with `phases` phases per tile, as "
       "spans or gathered columns (columns=1); exact",
       "grid-mask:sink=128,local=1024,period=1024,band=64"},
      nullptr,
      grid_mask_params};
  entry.passes = kPasses;
  entry.build_passes = build_grid_mask;
  return entry;
}

}  // namespace mmsparse::detail
