// The grouped grid's (Q/2D/item boundary, or item sinks) host plan for the GPU build: from the
// shape and the layout only, the query groups (one per query modality, or the text rows and one
// per media item) with their runs of rows and each run's coordinate in the group's own key space,
// the key spaces (2D: one per key modality; item: each pair's own; Q: all keys) and item sinks,
// each (group, space) pair's estimate rows and candidate strides, and capacities over every
// candidate. Apart from the device build (grid_groups_device.cu) because nothing here touches the
// GPU: it sizes what the build's kernels write, before anything is queued.

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "methods/estimate/index_kernels.h"
#include "methods/estimate/item_spaces.h"
#include "methods/estimate/modality_boundary.h"
#include "methods/grid/grid.h"
#include "methods/grid/grid_group_bounds.h"
#include "methods/grid/grid_groups.cuh"
#include "mmsparse/status.h"

namespace mmsparse::cuda::index {
namespace {

// The candidate strides of a search over `keys` estimate keys (search_grid's).
GridSelection selection_for(const detail::GridOptions& options, int64_t keys) {
  const detail::StrideCandidates candidates = detail::grid_stride_candidates(options, keys);
  return {keys, candidates.first, candidates.last};
}

// The key spaces of the groups' pairs (2D: the spaces every group shares; item boundary: each
// pair's own) and the item sinks, into `build`; throws kUnsupported naming the boundary for more
// query groups than the kernels take.
void plan_spaces_and_sinks(const PatternSpec& resolved_spec, const ModalityLayout* layout,
                           detail::BoundaryMode mode, const std::vector<detail::QueryGroup>& groups,
                           GridBuild& build) {
  if (static_cast<int64_t>(groups.size()) > grouped::kMaxGroups) {
    throw Error(ErrorCode::kUnsupported,
                resolved_spec.name + " parameter boundary: the GPU grid builder takes at most " +
                    std::to_string(grouped::kMaxGroups) +
                    " query groups (media items + text), got " + std::to_string(groups.size()));
  }
  if (mode == detail::BoundaryMode::kTwoD && !groups.empty()) {
    build.spaces = groups.front().key_spaces;
  }
  if (mode == detail::BoundaryMode::kItem) {
    build.spaces = items::pair_table(groups).spaces;
    build.pair_spaces = true;
  }
  build.sink_keys = items::spec_sink_keys(resolved_spec, build.shape, layout);
}

}  // namespace

void plan_grouped_grid(const PatternSpec& resolved_spec, const ModalityLayout* layout,
                       detail::BoundaryMode mode, GridBuild& build) {
  const PlanShape& shape = build.shape;
  if (shape.tile_rows > kMaxGroupedGridTileRows) {
    throw Error(ErrorCode::kUnsupported,
                "shape.tile_rows: the GPU grid builder with a Q/2D boundary takes at most " +
                    std::to_string(kMaxGroupedGridTileRows) + " rows per tile, got " +
                    std::to_string(shape.tile_rows));
  }
  const std::vector<detail::QueryGroup> groups = detail::query_groups(resolved_spec, shape, layout);
  // With the 2D and item boundaries a group's primary space is its own tokens' (Q: all keys).
  const bool own_spaces =
      mode == detail::BoundaryMode::kTwoD || mode == detail::BoundaryMode::kItem;
  plan_spaces_and_sinks(resolved_spec, layout, mode, groups, build);
  const int64_t offset = shape.causal_offset();
  const detail::GridOptions& options = build.options;
  const int64_t window = detail::tile_window(options);
  int64_t order_begin = 0;
  detail::LatticeRecordBound lattices_per_head;
  int64_t sink_columns_per_head = 0;
  int64_t spans_per_head = 0;
  build.first_stride = 0;
  build.last_stride = 0;
  for (const detail::QueryGroup& group : groups) {
    GridGroup planned;
    const detail::KeySpace& own = group.key_spaces[group.primary];
    planned.own_space = own_spaces ? static_cast<int32_t>(group.primary) : 0;
    planned.first_pair = static_cast<int64_t>(build.selections.size());
    planned.spaces = static_cast<int64_t>(group.key_spaces.size());
    for (const detail::IndexRange& rows : group.rows) {
      planned.ranges.push_back({rows.begin, rows.end, own.frontier(rows.begin + offset) - 1});
    }
    planned.rows = group.row_count();
    planned.order_begin = order_begin;
    order_begin += planned.rows;
    planned.estimate_rows = group.last_rows(build.last_q);
    const int64_t last_row = group.rows.back().end - 1;
    // Each pair's candidates, from the keys its estimate rows see (the last row's frontier).
    std::vector<int64_t> visible;  // the group's keys in each space
    for (const detail::KeySpace& space : group.key_spaces) {
      visible.push_back(space.frontier(last_row + offset));
      build.selections.push_back(selection_for(options, visible.back()));
      build.last_stride = std::max(build.last_stride, build.selections.back().last_stride);
      build.first_stride = build.first_stride == 0
                               ? build.selections.back().first_stride
                               : std::min(build.first_stride, build.selections.back().first_stride);
    }
    const GridSelection& arranged =
        build.selections[build.selections.size() - group.key_spaces.size() + group.primary];
    planned.tiles_per_head =
        detail::grouped_grid_tile_bound(planned.rows, arranged.last_stride, shape.tile_rows);
    for (const detail::IndexRange& rows : group.rows) {
      planned.runs_per_head += std::min(arranged.last_stride, rows.end - rows.begin);
    }
    // The lines' strided spans and columns in every space of the group, over every candidate
    // stride.
    const detail::LatticeRecordBound lattices =
        detail::grouped_grid_lattice_bound(group, options, shape);
    lattices_per_head.strided_spans += lattices.strided_spans;
    lattices_per_head.columns += lattices.columns;
    // The item sinks the group's last row sees, as columns of each of its tiles.
    sink_columns_per_head +=
        planned.tiles_per_head * items::visible_sinks(build.sink_keys, last_row + offset);
    // Spans: per space, the sink and hline prefixes give at most one piece per range of the
    // space, and each row's window at most min(window, ranges) pieces.
    for (const detail::KeySpace& space : group.key_spaces) {
      const int64_t ranges = std::max<int64_t>(1, static_cast<int64_t>(space.ranges().size()));
      spans_per_head += planned.tiles_per_head *
                        (ranges + (window > 0 ? shape.tile_rows * std::min(window, ranges) : 0));
    }
    build.tiles_per_head += planned.tiles_per_head;
    build.runs_per_head += planned.runs_per_head;
    build.groups.push_back(std::move(planned));
  }
  check_grid_positions(resolved_spec.name, shape, build.last_stride);
  build.span_capacity = (spans_per_head + lattices_per_head.strided_spans) * shape.head_slots();
  build.column_capacity = (lattices_per_head.columns + sink_columns_per_head) * shape.head_slots();
}

bool fits_estimate(const GridBuild& build) {
  return std::all_of(build.groups.begin(), build.groups.end(),
                     [](const GridGroup& group) { return fits_estimate(group.estimate_rows); });
}

}  // namespace mmsparse::cuda::index
