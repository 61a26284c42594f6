// Vertical-slash on the GPU: estimate -> top-k lines -> tiles, the host builder's conversion
// (vertical_slash.cpp, tile_keys.cpp, dynamic_head.cpp) for boundary none/K, where one group holds
// every query row in the identity order, cut into tiles of tile_rows, and for boundary Q, where
// each query modality is a group estimated from its own last rows, its runs of rows one after
// another in the query order, each run cut into tiles. Every group reads all keys, and a tile's
// rows are consecutive query positions:
//   tile rows [begin, end) have the frontiers [lo, hi] (f(r) = clamp(r + offset + 1, 0, kv_len),
//   lo >= 1; consecutive rows give consecutive or equal frontiers, so one run);
//   every selected diagonal d < hi gives the band [max(0, lo - 1 - d), hi - d), bands merged where
//   they overlap or touch; every selected vertical < hi outside the bands is a column.
// The tiles' records are written from the selected lines by methods/vertical_slash/
// tile_records_device.cu; this file arranges the tiles, sizes the plan, and runs the estimates
// and the line selection.
// Boundary 2D arranges the rows as Q does, but each group reads one key space per key modality in
// compact coordinates, a (group, space) pair per estimate and selection; its tiles are converted
// by methods/vertical_slash/key_spaces_device.cu (a block per tile) between the same scans and
// sort.

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "cuda/common/cub_storage.cuh"
#include "cuda/common/cuda_check.h"
#include "cuda/common/math.h"
#include "methods/estimate/dynamic_head.h"
#include "methods/estimate/index_kernels.h"
#include "methods/estimate/item_spaces.h"
#include "methods/estimate/modality_boundary.h"
#include "methods/vertical_slash/lines_device.cuh"
#include "methods/vertical_slash/tile_records.cuh"
#include "methods/vertical_slash/vertical_slash.h"
#include "mmsparse/status.h"

namespace mmsparse::cuda::index {
namespace {

// A 2D tile's frontiers in `space`: the distinct frontiers >= 1 of its consecutive query positions
// [first, last] (the host's tile_frontiers). They form one run: a tile lies inside one run of its
// modality's rows (every row has its own token, kv_len >= q_len), so in the group's own space each
// row's token is the next key, and in another space no key lies between the rows.
SpaceFrontiers space_frontiers(const detail::KeySpace& space, int64_t first, int64_t last,
                               int64_t offset) {
  return {std::max<int64_t>(space.frontier(first + offset), 1), space.frontier(last + offset)};
}

// Boundary Q and 2D (the host's build_dynamic_head with query_groups): each query modality's runs
// of rows one after another in the query order, each run cut into tiles, and the group's last
// rows; for 2D also the key spaces (the same for every group) and each tile's frontiers in them.
void arrange_query_groups(const PatternSpec& resolved_spec, const ModalityLayout* layout,
                          detail::BoundaryMode mode, VerticalSlashBuild& build) {
  const PlanShape& shape = build.shape;
  const TileGeometry geometry = tile_geometry(shape);
  detail::RowOrder order;
  const std::vector<detail::QueryGroup> groups = detail::query_groups(resolved_spec, shape, layout);
  const bool two_d = mode == detail::BoundaryMode::kTwoD;
  const bool item = mode == detail::BoundaryMode::kItem;
  if (two_d && !groups.empty()) build.spaces = groups.front().key_spaces;
  if (item) {
    items::PairTable table = items::pair_table(groups);
    build.spaces = std::move(table.spaces);
    build.first_pair = std::move(table.first_pair);
    build.pair_width = table.width;
  } else if (!build.sink_keys.empty() && !two_d) {
    // Sinks take the key-space conversion: all keys as the one space of every group.
    build.spaces = {detail::KeySpace::all_keys(shape.kv_len)};
  }
  const auto width = static_cast<std::size_t>(build.space_count());
  for (std::size_t g = 0; g < groups.size(); ++g) {
    if (!build.spaces.empty()) {
      build.own_space.push_back(two_d || item ? static_cast<int32_t>(groups[g].primary) : 0);
    }
    for (const detail::IndexRange& rows : groups[g].rows) {
      const auto first_tile = order.tiles.size();
      const auto first = static_cast<int64_t>(order.positions.size());
      order.append_run({rows.begin, rows.end - rows.begin, 1});
      order.tile_from(first, shape.tile_rows);
      for (std::size_t t = first_tile; t < order.tiles.size(); ++t) {
        const detail::IndexRange& tile = order.tiles[t];
        const int64_t first_row = rows.begin + tile.begin - first;
        const int64_t last_row = rows.begin + tile.end - 1 - first;
        build.head_tiles.push_back(
            geometry.tile_of(tile.begin, tile.end, first_row, last_row, static_cast<int32_t>(g)));
        for (std::size_t s = 0; !build.spaces.empty() && s < width; ++s) {
          const bool reads = s < groups[g].key_spaces.size();
          build.tile_frontiers.push_back(
              reads ? space_frontiers(
                          build.space_of(static_cast<int64_t>(g), static_cast<int64_t>(s)),
                          first_row, last_row, shape.causal_offset())
                    : SpaceFrontiers{});
        }
        if (!build.sink_keys.empty()) {
          build.tile_sinks.push_back(
              items::visible_sinks(build.sink_keys, last_row + shape.causal_offset()));
        }
      }
    }
    build.group_rows.push_back(groups[g].last_rows(build.last_q));
  }
  if (!order.is_identity()) build.order_runs = order.runs;
  build.tiles_per_head = static_cast<int64_t>(build.head_tiles.size());
}

// A 2D head slot's capacities: the sums over its tiles and spaces of what one space's lines can
// give a tile with compact frontiers [lo, hi] (band = hi - lo + 1):
//   spans   the merged bands' bound of one key space (see plan_vertical_slash), each split once
//           at every range boundary below hi;
//   columns at most hi (the keys below it), and at most the verticals plus, in a compact space,
//           the keys of the narrow bands: bands of diagonals below lo - 1 are `band` wide, those
//           from lo - 1 on are hi - d wide (distinct widths 1 ... band), and only widths below
//           kNarrowBandKeys are read as columns.
void two_d_capacities(VerticalSlashBuild& build, int64_t& spans_per_head,
                      int64_t& columns_per_head) {
  const auto space_count = static_cast<std::size_t>(build.space_count());
  for (std::size_t i = 0; i < build.tile_frontiers.size(); ++i) {
    const SpaceFrontiers& rows = build.tile_frontiers[i];
    if (rows.high < 1) continue;
    const auto s = static_cast<int64_t>(i % space_count);
    const detail::KeySpace& space = build.space_of(build.head_tiles[i / space_count].group, s);
    const std::vector<int64_t>& prefix = space.prefix();
    const auto ranges_below = static_cast<int64_t>(
        std::lower_bound(prefix.begin(), prefix.end() - 1, rows.high) - prefix.begin());
    const int64_t band = rows.high - rows.low + 1;
    const int64_t slash_lines = std::min(build.slash, rows.high);
    spans_per_head += std::min(slash_lines, 1 + (rows.high - 1) / (band + 1)) + ranges_below - 1;
    int64_t narrow = 0;
    if (!space.is_identity()) {
      const int64_t widths = std::min(band, detail::kNarrowBandKeys - 1);
      narrow = widths * (widths + 1) / 2;
      if (band < detail::kNarrowBandKeys) narrow += std::min(slash_lines, rows.low - 1) * band;
    }
    columns_per_head += std::min(rows.high, std::min(build.vertical, rows.high) + narrow);
  }
  for (const int32_t sinks : build.tile_sinks) columns_per_head += sinks;
}

// Copies `values` into device memory at `target` in stream order. From pageable memory the copy
// returns once `values` has been read.
template <class T>
void copy_to_device(T* target, const std::vector<T>& values, cudaStream_t stream,
                    const char* what) {
  if (values.empty()) return;
  check_cuda(cudaMemcpyAsync(target, values.data(), values.size() * sizeof(T),
                             cudaMemcpyHostToDevice, stream),
             what);
}

// Every head slot's runs (the same order) and their offsets, as the upload packs them.
void write_runs(const VerticalSlashBuild& build, const PlanSections& sections,
                cudaStream_t stream) {
  if (build.order_runs.empty()) return;  // identity order: the zeroed offsets say no runs
  const int64_t slots = build.shape.head_slots();
  const auto per_slot = static_cast<int64_t>(build.order_runs.size());
  std::vector<int64_t> offsets;
  std::vector<RunRecord> runs;
  for (int64_t slot = 0; slot <= slots; ++slot) offsets.push_back(slot * per_slot);
  for (int64_t slot = 0; slot < slots; ++slot) {
    int32_t order_begin = 0;
    for (const QueryRun& run : build.order_runs) {
      runs.push_back(
          {order_begin, static_cast<int32_t>(run.start), static_cast<int32_t>(run.step)});
      order_begin += static_cast<int32_t>(run.count);
    }
  }
  copy_to_device(sections.head_run_offsets, offsets, stream,
                 "vertical-slash index: cudaMemcpyAsync run offsets");
  copy_to_device(sections.runs, runs, stream, "vertical-slash index: cudaMemcpyAsync runs");
}

// One estimate per selection, (group g, space s) at g * space_count() + s. They throw for groups
// whose rows do not fit the estimate, so they are all taken before anything is queued.
std::vector<EstimateExtents> selection_extents(const VerticalSlashBuild& build,
                                               const EstimateOperands& operands) {
  const bool two_d = !build.spaces.empty();
  std::vector<EstimateExtents> extents;
  for (int64_t g = 0; g < build.groups(); ++g) {
    for (int64_t s = 0; s < build.group_spaces(g); ++s) {
      if (two_d) {
        extents.push_back(estimate_extents(
            operands, build.group_rows[static_cast<std::size_t>(g)], build.space_of(g, s),
            build.own_space[static_cast<std::size_t>(g)] == s, "vertical-slash"));
      } else if (build.group_rows.empty()) {
        extents.push_back(estimate_extents(operands, build.last_q));
      } else {
        extents.push_back(estimate_extents(operands, build.group_rows[static_cast<std::size_t>(g)],
                                           "vertical-slash"));
      }
    }
  }
  return extents;
}

// The 2D key spaces' ranges: every space's range begins, then every space's prefixes.
struct KeySpaceArrays {
  std::vector<int64_t> range_begins;
  std::vector<int64_t> range_prefixes;
};

KeySpaceArrays key_space_arrays(const VerticalSlashBuild& build) {
  KeySpaceArrays arrays;
  for (const detail::KeySpace& space : build.spaces) {
    for (const detail::IndexRange& range : space.ranges()) {
      arrays.range_begins.push_back(range.begin);
    }
    arrays.range_prefixes.insert(arrays.range_prefixes.end(), space.prefix().begin(),
                                 space.prefix().end());
  }
  return arrays;
}

// How many lines of each kind one head slot's selection keeps at most.
struct LineCapacities {
  int64_t vertical = 0, slash = 0;
};

// The offsets of the build's arrays in its scratch allocation.
struct VerticalSlashRegions {
  std::vector<EstimateRegions> estimates;  // one per selection
  std::size_t verticals, slashes, line_counts;
  std::size_t listed_tiles, frontiers, range_begins, range_prefixes;
  std::size_t first_pair, pair_views, sink_keys, tile_sinks;  // item boundary, item sinks
  std::size_t span_counts, column_counts, span_offsets, column_offsets;
  std::size_t keys, sorted_keys, indices, temp;
};

VerticalSlashRegions add_vertical_slash_regions(ScratchLayout& layout,
                                                const VerticalSlashBuild& build,
                                                const std::vector<EstimateExtents>& extents,
                                                const LineCapacities& capacity,
                                                const KeySpaceArrays& arrays,
                                                std::size_t temp_bytes) {
  const int64_t tiles = build.tiles();
  const int64_t selections = build.selections() * extents.front().slots;
  VerticalSlashRegions at;
  for (const EstimateExtents& selection : extents) {
    at.estimates.push_back(add_estimate_regions(layout, selection, false));
  }
  at.verticals = layout.add<int32_t>(selections * capacity.vertical);
  at.slashes = layout.add<int32_t>(selections * capacity.slash);
  at.line_counts = layout.add<int32_t>(2 * selections);  // verticals, slashes
  at.listed_tiles = layout.add<VerticalSlashTile>(static_cast<int64_t>(build.head_tiles.size()));
  at.frontiers = layout.add<SpaceFrontiers>(static_cast<int64_t>(build.tile_frontiers.size()));
  at.range_begins = layout.add<int64_t>(static_cast<int64_t>(arrays.range_begins.size()));
  at.range_prefixes = layout.add<int64_t>(static_cast<int64_t>(arrays.range_prefixes.size()));
  at.first_pair = layout.add<int32_t>(static_cast<int64_t>(build.first_pair.size()));
  at.pair_views = layout.add<KeySpaceView>(
      build.first_pair.empty() ? 0 : static_cast<int64_t>(build.spaces.size()));
  at.sink_keys = layout.add<int64_t>(static_cast<int64_t>(build.sink_keys.size()));
  at.tile_sinks = layout.add<int32_t>(static_cast<int64_t>(build.tile_sinks.size()));
  at.span_counts = layout.add<int64_t>(tiles);
  at.column_counts = layout.add<int64_t>(tiles);
  at.span_offsets = layout.add<int64_t>(tiles);
  at.column_offsets = layout.add<int64_t>(tiles);
  at.keys = layout.add<uint32_t>(tiles);
  at.sorted_keys = layout.add<uint32_t>(tiles);
  at.indices = layout.add<int32_t>(tiles);
  at.temp = layout.add<std::byte>(static_cast<int64_t>(temp_bytes));
  return at;
}

// The key spaces on the device over the listed tiles and their frontiers, from `views` (the
// spaces' views, items::space_views); all keys (no ranges) without a 2D boundary. With the item
// boundary, each group's pairs (`first_pair`, `pair_views`: device copies); with item sinks, the
// sink keys and each tile's count of them (device copies).
KeySpaceTiles key_space_tiles(const VerticalSlashBuild& build,
                              const VerticalSlashTile* listed_tiles,
                              const SpaceFrontiers* frontiers,
                              const std::vector<KeySpaceView>& views, std::byte* base,
                              const VerticalSlashRegions& at) {
  KeySpaceTiles space_tiles{listed_tiles,
                            frontiers,
                            build.tiles_per_head,
                            static_cast<int32_t>(build.spaces.empty() ? 0 : build.space_count()),
                            {}};
  if (build.first_pair.empty()) {
    for (std::size_t s = 0; s < views.size(); ++s) space_tiles.space[s] = views[s];
  } else {
    space_tiles.first_pair = region<int32_t>(base, at.first_pair);
    space_tiles.pair_space = region<KeySpaceView>(base, at.pair_views);
  }
  if (!build.sink_keys.empty()) {
    space_tiles.sink_keys = region<int64_t>(base, at.sink_keys);
    space_tiles.tile_sinks = region<int32_t>(base, at.tile_sinks);
  }
  return space_tiles;
}

// The item boundary's pairs and the item sinks into their regions (none without them).
void copy_item_arrays(const VerticalSlashBuild& build, const std::vector<KeySpaceView>& views,
                      std::byte* base, const VerticalSlashRegions& at, cudaStream_t stream) {
  copy_to_device(region<int32_t>(base, at.first_pair), build.first_pair, stream,
                 "vertical-slash index: cudaMemcpyAsync item pairs");
  if (!build.first_pair.empty()) {
    copy_to_device(region<KeySpaceView>(base, at.pair_views), views, stream,
                   "vertical-slash index: cudaMemcpyAsync item pair views");
  }
  copy_to_device(region<int64_t>(base, at.sink_keys), build.sink_keys, stream,
                 "vertical-slash index: cudaMemcpyAsync item sinks");
  copy_to_device(region<int32_t>(base, at.tile_sinks), build.tile_sinks, stream,
                 "vertical-slash index: cudaMemcpyAsync tile sinks");
}

// Where the selections write their lines: [selections, slots, capacity] line arrays and
// [selections, slots] counts of each kind.
struct LineArrays {
  int32_t* verticals;
  int32_t* slashes;
  int32_t* vertical_counts;
  int32_t* slash_counts;
};

// Each selection's estimate, then its slots' top vertical and slash lines.
void estimate_and_select(const VerticalSlashBuild& build, const EstimateOperands& operands,
                         const std::vector<EstimateExtents>& extents,
                         const VerticalSlashRegions& at, const std::vector<KeySpaceView>& views,
                         std::byte* base, const LineCapacities& capacity, const LineArrays& lines,
                         cudaStream_t stream) {
  const bool two_d = !build.spaces.empty();
  const auto spaces = static_cast<std::size_t>(build.space_count());
  const int64_t slots = extents.front().slots;
  for (std::size_t e = 0; e < extents.size(); ++e) {
    const EstimateExtents& selection = extents[e];
    const EstimateScratch estimate = estimate_scratch(base, at.estimates[e]);
    // Selections are (group, space) pairs in pair order: with the item boundary one view each.
    const std::size_t view = build.first_pair.empty() ? e % spaces : e;
    const KeySpaceView keys = two_d ? views[view] : KeySpaceView{};
    launch_estimate(operands, selection, estimate, stream, keys);
    if (selection.scores == 0) continue;
    const int64_t first = static_cast<int64_t>(e) * slots;
    launch_select_lines(
        {estimate.column_sums, selection.scores, build.vertical, build.sink,
         lines.verticals + first * capacity.vertical, capacity.vertical,
         lines.vertical_counts + first},
        {estimate.diagonal_sums, selection.scores, build.slash, build.local,
         lines.slashes + first * capacity.slash, capacity.slash, lines.slash_counts + first},
        slots, stream);
  }
}

}  // namespace

VerticalSlashBuild plan_vertical_slash(const PatternSpec& resolved_spec, const PlanShape& shape,
                                       const ModalityLayout* layout) {
  VerticalSlashBuild build;
  build.shape = shape;
  const detail::VerticalSlashBudgets budgets = detail::vertical_slash_budgets(resolved_spec);
  build.vertical = budgets.vertical;
  build.slash = budgets.slash;
  build.sink = budgets.sink;
  build.local = budgets.local;
  const detail::BoundaryMode mode = checked_boundary(resolved_spec, detail::BoundaryMode::kItem);
  build.last_q = checked_estimate_queries(resolved_spec, shape);
  build.sink_keys = items::spec_sink_keys(resolved_spec, shape, layout);
  const TileGeometry geometry = tile_geometry(shape);
  if (mode == detail::BoundaryMode::kQuery || mode == detail::BoundaryMode::kTwoD ||
      mode == detail::BoundaryMode::kItem || !build.sink_keys.empty()) {
    arrange_query_groups(resolved_spec, layout, mode, build);
  } else {
    build.tiles_per_head = geometry.tiles_per_head;
  }
  if (!build.spaces.empty()) {
    int64_t spans_per_head = 0;
    int64_t columns_per_head = 0;
    two_d_capacities(build, spans_per_head, columns_per_head);
    build.span_capacity = spans_per_head * shape.head_slots();
    build.column_capacity = columns_per_head * shape.head_slots();
    return build;
  }

  // Capacities: a tile with frontiers [lo, hi] reads keys below hi only, so at most
  // min(vertical lines, hi) columns; its merged spans are disjoint, do not touch, and all but the
  // first (clipped at key 0) are at least one band (hi - lo + 1 keys) long, so at most
  // 1 + (hi - 1) / (hi - lo + 2) of them, and never more than the slash lines.
  const int64_t keys = shape.q_len > 0 ? shape.kv_len : 0;
  const int64_t vertical_lines = std::min(build.vertical, keys);
  const int64_t slash_lines = std::min(build.slash, keys);
  int64_t spans_per_head = 0;
  int64_t columns_per_head = 0;
  for (int64_t t = 0; t < build.tiles_per_head; ++t) {
    const VerticalSlashTile rows =
        build.head_tiles.empty() ? geometry.tile(t) : build.head_tiles[static_cast<std::size_t>(t)];
    if (rows.high < 1) continue;
    const int64_t band = rows.high - rows.low + 1;
    spans_per_head += std::min(slash_lines, 1 + (rows.high - 1) / (band + 1));
    columns_per_head += std::min(vertical_lines, rows.high);
  }
  build.span_capacity = spans_per_head * shape.head_slots();
  build.column_capacity = columns_per_head * shape.head_slots();
  return build;
}

bool fits_estimate(const VerticalSlashBuild& build) {
  return std::all_of(build.group_rows.begin(), build.group_rows.end(),
                     [](const std::vector<int64_t>& rows) { return fits_estimate(rows); });
}

void build_vertical_slash(const VerticalSlashBuild& build, const EstimateOperands& operands,
                          const PlanSections& sections, cudaStream_t stream) {
  const int64_t tiles = build.tiles();
  if (tiles == 0) return;
  const std::vector<EstimateExtents> extents = selection_extents(build, operands);
  const int64_t slots = extents.front().slots;
  int64_t scores = 0;  // the longest score array of the selections
  for (const EstimateExtents& selection : extents) scores = std::max(scores, selection.scores);
  const LineCapacities capacity{std::min(build.vertical, scores), std::min(build.slash, scores)};
  const int64_t selections = build.selections() * slots;
  const auto item_count = static_cast<int>(tiles);
  const int sort_bits =
      std::max(1, static_cast<int>(std::bit_width(static_cast<uint64_t>(build.shape.kv_len))));
  const std::size_t scan_bytes =
      scan_storage_bytes(item_count, stream, "vertical-slash index: scan storage");
  const std::size_t sort_bytes = sort_storage_bytes<uint32_t>(item_count, sort_bits, stream,
                                                              "vertical-slash index: sort storage");
  const KeySpaceArrays arrays = key_space_arrays(build);

  ScratchLayout layout;
  const VerticalSlashRegions at = add_vertical_slash_regions(
      layout, build, extents, capacity, arrays, std::max(scan_bytes, sort_bytes));
  const StreamScratch scratch(layout.bytes(), stream,
                              "vertical-slash index: scratch");
  std::byte* base = scratch.base();
  // A slot selects no line when no estimate row sees a key (the selection then does not run).
  auto* line_counts = region<int32_t>(base, at.line_counts);
  check_cuda(cudaMemsetAsync(line_counts, 0, 2 * selections * sizeof(int32_t), stream),
             "vertical-slash index: cudaMemsetAsync line counts");
  auto* listed_tiles = region<VerticalSlashTile>(base, at.listed_tiles);
  copy_to_device(listed_tiles, build.head_tiles, stream,
                 "vertical-slash index: cudaMemcpyAsync tiles");
  auto* frontiers = region<SpaceFrontiers>(base, at.frontiers);
  copy_to_device(frontiers, build.tile_frontiers, stream,
                 "vertical-slash index: cudaMemcpyAsync tile frontiers");
  auto* begins = region<int64_t>(base, at.range_begins);
  auto* prefixes = region<int64_t>(base, at.range_prefixes);
  copy_to_device(begins, arrays.range_begins, stream,
                 "vertical-slash index: cudaMemcpyAsync ranges");
  copy_to_device(prefixes, arrays.range_prefixes, stream,
                 "vertical-slash index: cudaMemcpyAsync range prefixes");
  write_runs(build, sections, stream);

  const std::vector<KeySpaceView> views = items::space_views(build.spaces, begins, prefixes);
  copy_item_arrays(build, views, base, at, stream);
  const KeySpaceTiles space_tiles =
      key_space_tiles(build, listed_tiles, frontiers, views, base, at);
  const LineArrays lines{region<int32_t>(base, at.verticals), region<int32_t>(base, at.slashes),
                         line_counts, line_counts + selections};
  estimate_and_select(build, operands, extents, at, views, base, capacity, lines, stream);

  const SelectedLines selected{
      slots,         lines.verticals, capacity.vertical, lines.vertical_counts,
      lines.slashes, capacity.slash,  lines.slash_counts};
  const TileRecordScratch tile_scratch{region<int64_t>(base, at.span_counts),
                                       region<int64_t>(base, at.column_counts),
                                       region<int64_t>(base, at.span_offsets),
                                       region<int64_t>(base, at.column_offsets),
                                       region<uint32_t>(base, at.keys),
                                       region<uint32_t>(base, at.sorted_keys),
                                       region<int32_t>(base, at.indices),
                                       base + at.temp,
                                       scan_bytes,
                                       sort_bytes,
                                       sort_bits};
  write_tile_records(build, sections, space_tiles, selected, listed_tiles, tile_scratch, stream);
}

}  // namespace mmsparse::cuda::index
