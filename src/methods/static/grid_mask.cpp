// The grid-like mask (a sink, a local window and a band every period) as a static pattern of passes merged by LSE. On aligned positions,
// query a keeps key k <= a when
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
//    on an H100 the spans ran 51 ms and the columns 63 ms at 128K, docs/history/perf-notes.md), or,
//    the default where the period allows (a multiple of 8 of at least band + phases + 14; spans
//    otherwise), lattices (`lattice=1`): the tile's residues mod period, widened to whole groups
//    of kLatticeSpans, each with its keys in every earlier period as one strided span, a group
//    over one range of whole 16-period chunks (the last one cut at the last whole period of
//    kv_len), which the CUDA upload copies as tensor boxes of 16 periods × 8 keys (plan.h); 1.27x
//    the useful pairs at 128K, most chunks without an element mask (36 ms on an H100 at 128K,
//    docs/history/perf-notes.md). columns=1 overrides lattice.
//  * pass 2, with lattices only: the band keys no lattice reaches (in a group that straddles the
//    sink, its residues past the sink in the first period; past the whole periods of kv_len, keys
//    less than a period from their rows, which the bands keep only where local < band) as
//    gathered columns of the same tiles, so that pass 1 holds lattices alone and runs the kernel
//    without gather paths (docs/history/perf-notes.md). Empty when the sink is a multiple of
//    kLatticeSpans and local >= band, as with the defaults.
//
// The passes are disjoint (passes 1 and 2 keep keys >= sink at distance >= local, all of which
// pass 0's window and sink leave out, and pass 2 only keys pass 1 does not list) and their union
// is the mask.

#include <algorithm>
#include <array>
#include <span>
#include <vector>

#include "core/engine_chunks.h"
#include "methods/estimate/tile_keys.h"
#include "methods/registry.h"
#include "methods/static/static_patterns.h"
#include "mmsparse/patterns.h"
#include "mmsparse/status.h"

namespace mmsparse::detail {

namespace {

// Issue 3's mask.
constexpr int64_t kDefaultSink = 128;
constexpr int64_t kDefaultLocal = 1024;
constexpr int64_t kDefaultPeriod = 1024;
constexpr int64_t kDefaultBand = 64;
// 8 phases × 16 periods per 128-row tile: the key range per period is 8 + 64 - 1 = 71 keys, 90%
// of them in each row's band (docs/history/perf-notes.md).
constexpr int64_t kDefaultPhases = 8;
constexpr int64_t kDefaultColumns = 0;
constexpr int64_t kDefaultLattice = 1;
// A lattice group's residues share each period's tensor box, so they must not straddle a period
// (period a multiple of the group) and a tile's widened residues must fit in one period: at most
// kLatticeSpans - 1 residues of widening on each side.
constexpr int64_t kLatticeSlack = 2 * (kLatticeSpans - 1);
constexpr int kPasses = 3;

int64_t floor_div(int64_t a, int64_t b) { return a / b - ((a % b != 0) && (a < 0)); }
int64_t ceil_div(int64_t a, int64_t b) { return -floor_div(-a, b); }

struct GridMask {
  int64_t sink, local, period, band, phases;
  bool columns, lattice;
};

GridMask read_params(const PatternSpec& spec, const PlanShape& shape) {
  GridMask grid{checked_param(spec, "sink", 0),   checked_param(spec, "local", 1),
                checked_param(spec, "period", 1), checked_param(spec, "band", 1),
                checked_param(spec, "phases", 1), checked_flag(spec, "columns"),
                checked_flag(spec, "lattice")};
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
  // Lattices need groups that never straddle a period and a tile's widened residues inside one
  // period; elsewhere the bands stay spans (the same pairs either way).
  grid.lattice = grid.lattice && !grid.columns && grid.period % kLatticeSpans == 0 &&
                 grid.band + grid.phases + kLatticeSlack <= grid.period;
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

// The keys of a band tile (residues [first_phase - band + 1, last_phase] mod period, keys in
// [sink, keys_end)) as lattices: per group of kLatticeSpans residues, one strided span per residue
// over one period range of whole chunks, cut at the whole periods of kv_len, starting where every
// residue of the group is past the sink; a residue's keys outside that range go to `columns`,
// ascending. Keys the range adds beyond keys_end are left out by the mask's minimum distance.
void add_band_lattices(PlanBuilder& builder, const GridMask& grid, const PlanShape& shape,
                       int64_t first_phase, int64_t last_phase, int64_t keys_end,
                       std::vector<int64_t>& columns) {
  const int64_t whole_periods = shape.kv_len / grid.period;
  columns.clear();
  const int64_t lowest = floor_div(first_phase - grid.band + 1, kLatticeSpans) * kLatticeSpans;
  for (int64_t group = lowest; group <= last_phase; group += kLatticeSpans) {
    const int64_t first_residue = floor_mod(group, grid.period);
    // Periods [begin, end) of each residue's keys in [sink, keys_end).
    std::array<int64_t, kLatticeSpans> begin{};
    std::array<int64_t, kLatticeSpans> end{};
    for (int64_t j = 0; j < kLatticeSpans; ++j) {
      const int64_t residue = first_residue + j;
      begin[j] = ceil_div(std::max<int64_t>(grid.sink - residue, 0), grid.period);
      end[j] = std::max(begin[j], ceil_div(keys_end - residue, grid.period));
    }
    const int64_t lattice_begin = *std::max_element(begin.begin(), begin.end());
    const int64_t needed = *std::max_element(end.begin(), end.end()) - lattice_begin;
    const int64_t room = std::max<int64_t>(0, whole_periods - lattice_begin);
    const int64_t periods =
        needed <= 0
            ? 0
            : std::min(ceil_div(needed, kLatticePeriodsPerChunk) * kLatticePeriodsPerChunk, room);
    const int64_t lattice_end = lattice_begin + periods;
    for (int64_t j = 0; j < kLatticeSpans && periods > 0; ++j) {
      const int64_t residue = first_residue + j;
      builder.add_strided_span(residue + lattice_begin * grid.period,
                               residue + (lattice_end - 1) * grid.period + 1, grid.period);
    }
    // The periods of each residue's keys outside the lattice's range: before it, and after it.
    for (int64_t j = 0; j < kLatticeSpans; ++j) {
      const auto add_periods = [&](int64_t from, int64_t to) {
        for (int64_t i = from; i < to; ++i) columns.push_back(first_residue + j + i * grid.period);
      };
      add_periods(begin[j], std::min(end[j], lattice_begin));
      add_periods(std::max(begin[j], lattice_end), end[j]);
    }
  }
  std::sort(columns.begin(), columns.end());
}

// Passes 1 and 2 (see the top of the file); `rest` gets tiles only with lattices.
void build_bands_passes(PlanBuilder& builder, PlanBuilder& rest, const GridMask& grid,
                        const PlanShape& shape) {
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
  if (grid.lattice) {
    rest.begin_head(order);
  } else {
    rest.begin_head();
  }
  std::vector<int64_t> columns;
  for (const Tile& tile : tiles) {
    builder.begin_tile(tile.begin, tile.end, mask);
    const int64_t keys_end = std::min(shape.kv_len, tile.highest_aligned - grid.local + 1);
    if (grid.lattice) {
      add_band_lattices(builder, grid, shape, tile.first_phase, tile.last_phase, keys_end, columns);
      if (columns.empty()) continue;
      rest.begin_tile(tile.begin, tile.end, mask);
      for (const int64_t key : columns) rest.add_column(key);
      continue;
    }
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
  build_bands_passes(passes[1], passes[2], grid, context.shape);
}

Params grid_mask_params(int64_t) {
  return {{"sink", kDefaultSink},      {"local", kDefaultLocal},   {"period", kDefaultPeriod},
          {"band", kDefaultBand},      {"phases", kDefaultPhases}, {"columns", kDefaultColumns},
          {"lattice", kDefaultLattice}};
}

}  // namespace

PatternEntry& grid_mask_entry() {
  static PatternEntry entry = [] {
    PatternEntry grid_mask{
      {"grid-mask",
       "keys k < sink, a - k < local or (a - k) mod period < band; "
       "passes merged by LSE: sink + window, then the bands with `phases` phases per tile, as "
       "lattices copied in boxes (lattice=1, where period is a multiple of 8 >= band + phases + "
       "14; a third pass gathers the keys no lattice reaches), gathered columns (columns=1) or "
       "spans; exact",
       "grid-mask:sink=128,local=1024,period=1024,band=64"},
        nullptr,
        grid_mask_params};
    grid_mask.passes = kPasses;
    grid_mask.build_passes = build_grid_mask;
    return grid_mask;
  }();
  return entry;
}

}  // namespace mmsparse::detail
