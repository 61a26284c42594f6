#include "methods/grid/grid_group_bounds.h"

#include <algorithm>

#include "core/engine_chunks.h"

namespace mmsparse::detail {

namespace {

// The most columns one lattice piece lists: its keys past its whole chunks.
constexpr int64_t kPieceColumns = kGatherChunkKeys - 1;

// The most keys of `residues` residues of stride `stride` among a space's first `keys` keys.
int64_t lattice_keys(int64_t keys, int64_t residues, int64_t stride) {
  return std::min(keys, residues * (keys / stride + 1));
}

}  // namespace

int64_t grouped_grid_tile_bound(int64_t rows, int64_t stride, int64_t tile_rows) {
  return std::min(rows, (rows + std::min(stride, rows) * (tile_rows - 1)) / tile_rows);
}

StrideCandidates grid_stride_candidates(const GridOptions& options, int64_t keys) {
  if (options.stride != 0) return {options.stride, options.stride};
  return {kMinStride, std::max(kMinStride, std::min(options.max_stride, keys / kMinGridLines))};
}

// Per candidate stride s of the group's own space (T tiles, U phase runs): a tile's gaps between
// spans are one before each distinct frontier (one in all without windows). In the own space a
// phase tile's consecutive rows of one run of rows lie s apart, so the gap between them holds at
// most one key of each residue; the other gaps are each tile's first and one per phase run
// starting inside a tile: T + U in all. In another space a run of rows has one frontier, so a
// tile's distinct frontiers, and gaps, are at most the phase runs it touches (T + U in all); its
// residues at most its distinct frontiers (slash) and the vline's. A space's range boundaries
// split a tile's gaps at most ranges - 1 times. Each (gap piece, residue) gives at most one strided
// span and kPieceColumns columns; a tile's columns are also at most its residues' keys there: a
// residue of stride s holds at most keys / s + 1 of the space's keys, s at least the pair's first
// candidate. Its strided spans hold kGatherChunkKeys keys or more each and never share a key, so
// they are also at most those keys / kGatherChunkKeys. (Without these two terms a non-primary
// space's bound was every key of the space per tile: 0.6 GB of columns per head slot for the 2D
// boundary on the 128K mixed-interleaved layout.)
LatticeRecordBound grouped_grid_lattice_bound(const QueryGroup& group, const GridOptions& options,
                                              const PlanShape& shape) {
  const int64_t rows = group.row_count();
  const auto runs = static_cast<int64_t>(group.rows.size());
  const int64_t last_aligned = group.rows.back().end - 1 + shape.causal_offset();
  const int64_t slash = options.slash ? 1 : 0;
  const int64_t vline = options.vline ? 1 : 0;
  const int64_t tile_rows = shape.tile_rows;
  const KeySpace& own = group.key_spaces[group.primary];
  const StrideCandidates own_strides = grid_stride_candidates(options, own.frontier(last_aligned));
  LatticeRecordBound bound;
  for (int64_t stride = own_strides.first; stride <= own_strides.last; ++stride) {
    const int64_t tiles = grouped_grid_tile_bound(rows, stride, tile_rows);
    int64_t phase_runs = 0;
    for (const IndexRange& run : group.rows) phase_runs += std::min(stride, run.end - run.begin);
    LatticeRecordBound candidate;
    for (std::size_t s = 0; s < group.key_spaces.size(); ++s) {
      const KeySpace& space = group.key_spaces[s];
      const int64_t keys = space.frontier(last_aligned);
      const auto ranges = std::max<int64_t>(1, static_cast<int64_t>(space.ranges().size()));
      const int64_t pieces = tiles + phase_runs + tiles * (ranges - 1);
      if (s == group.primary) {
        const int64_t residues = slash + vline;
        const int64_t tile_keys = lattice_keys(keys, residues, stride);
        candidate.strided_spans +=
            std::min(residues * pieces, tiles * tile_keys / kGatherChunkKeys);
        candidate.columns +=
            std::min(tiles * tile_keys, residues * (rows + kPieceColumns * pieces));
      } else {
        const StrideCandidates strides = grid_stride_candidates(options, keys);
        const int64_t residues = slash * std::min({tile_rows, runs, strides.last}) + vline;
        const int64_t tile_keys = lattice_keys(keys, residues, strides.first);
        candidate.strided_spans +=
            std::min(residues * pieces, tiles * tile_keys / kGatherChunkKeys);
        candidate.columns += std::min(tiles * tile_keys, kPieceColumns * residues * pieces);
      }
    }
    bound.strided_spans = std::max(bound.strided_spans, candidate.strided_spans);
    bound.columns = std::max(bound.columns, candidate.columns);
  }
  return bound;
}

}  // namespace mmsparse::detail
