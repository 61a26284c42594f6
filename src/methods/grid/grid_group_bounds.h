#pragma once
// How many lattice records a grouped grid head's tiles (Q/2D/item boundary, or item sinks; each
// query group over its own key spaces) can get, from the shape and the layout only: the GPU
// builder (grid_groups_device.cu) sizes its plan sections with it before any kernel has chosen a
// stride. Plain C++, so the CPU tests check it against host plans.

#include <cstdint>

#include "methods/estimate/modality_boundary.h"
#include "methods/grid/grid.h"
#include "mmsparse/plan.h"

namespace mmsparse::detail {

// Tiles of a group of `rows` rows under stride s: each phase's rows cut into tiles, at most
// min(s, rows) phases with rows, so at most (rows + min(s, rows)·(tile_rows − 1)) / tile_rows.
int64_t grouped_grid_tile_bound(int64_t rows, int64_t stride, int64_t tile_rows);

// The candidate strides of a grid search over `keys` estimate keys (search_grid's): the spec's
// stride, or [kMinStride, max(kMinStride, min(max_stride, keys / kMinGridLines))].
struct StrideCandidates {
  int64_t first = 0, last = 0;
};
StrideCandidates grid_stride_candidates(const GridOptions& options, int64_t keys);

// One head slot's lattice records of a group's tiles, over every candidate stride.
struct LatticeRecordBound {
  int64_t strided_spans = 0;
  int64_t columns = 0;
};

// The most lattice records the tiles of a Q/2D-boundary grid head's query group get when they cut
// their line keys as TileKeys::write does in LatticeKeys::kStridedSpansInRanges: per (gap between
// spans, residue, original range) piece at most one strided span and kGatherChunkKeys - 1 columns
// (the counting: grid_group_bounds.cpp; docs/index_builders.md, "Grid with a Q or 2D boundary").
LatticeRecordBound grouped_grid_lattice_bound(const QueryGroup& group, const GridOptions& options,
                                              const PlanShape& shape);

}  // namespace mmsparse::detail
