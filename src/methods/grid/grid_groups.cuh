#pragma once
// What the grouped grid's (Q/2D boundary) two halves share: the arrangement of each slot's query
// order and tiles (grid_groups_device.cu) writes what the tile conversion
// (grid_group_tiles_device.cu) reads. These are the blocks their kernels take as parameters, and
// the conversion's launcher.

#include <cuda_runtime.h>

#include <cstdint>

#include "methods/estimate/index_kernels.h"
#include "methods/grid/grid_geometry.h"

namespace mmsparse::cuda::index::grouped {

// Q/2D boundary: one group per modality; item boundary: the text rows and one group per media
// item (builds with more items go to the host).
inline constexpr int kMaxGroups = static_cast<int>(kMaxGroupedGridGroups);
static_assert(kMaxGroups >= kNumModalities);

// A group as the kernels read it.
struct GroupView {
  int64_t first_range = 0, range_count = 0;
  int64_t order_begin = 0;
  int32_t own_space = 0;
  int32_t spaces = 0;      // the key spaces it reads
  int64_t first_pair = 0;  // its (group, space) pairs' first: lines [first_pair + s, slots]
};

// One run of a slot's query order: rows start + i·step (i < count) at order indices
// order_begin + i.
struct OrderRun {
  int64_t order_begin, start, count, step;
};

// The rows of phase p in a group's run of rows `range` under stride s: their first row, and
// how many there are. Positions lie below 2^31 (plan records are 32-bit), the coordinate at -1
// or above and the phase in [0, s), so 32-bit arithmetic is exact: the arrangement calls this
// once per (phase, run of rows), and 64-bit divisions made that its main cost.
__device__ inline int64_t phase_run_rows(const GridRange& range, int64_t phase, int64_t stride,
                                         int64_t& start) {
  const auto divisor = static_cast<int32_t>(stride);
  int32_t ahead = static_cast<int32_t>(phase - range.coordinate) % divisor;
  if (ahead < 0) ahead += divisor;
  start = range.begin + ahead;
  return start < range.end
             ? static_cast<uint32_t>(range.end - 1 - start) / static_cast<uint32_t>(divisor) + 1
             : 0;
}

// What the arrangement writes and the conversion reads, per head slot.
struct Arrangement {
  // Group g's (group, space) pairs are group[g].first_pair + s (lines [pairs, slots]).
  int64_t slots, groups, tile_rows;
  int64_t phase_capacity;  // the most phases of a group + 1
  int64_t runs_per_head;
  GroupView group[kMaxGroups];
  const GridRange* ranges;         // every group's runs of rows, group by group
  const detail::GridLines* lines;  // [selections, slots]
  int64_t* phase_rows;             // [slots, groups, phase_capacity] exclusive sums over phases,
  int64_t* phase_tiles;            //   the group's total at index s
  int64_t* phase_runs;
  OrderRun* runs;        // [slots, runs_per_head]
  int64_t* group_tiles;  // [slots, groups + 1] the slot's tiles before each group
  int64_t* group_runs;   // [slots, groups + 1] likewise for runs
  int64_t* run_counts;   // [slots + 1] runs the plan stores (0: identity order)
  int64_t* tile_counts;  // [slots + 1]

  __device__ int64_t stride(int64_t g, int64_t slot) const {
    return lines[(group[g].first_pair + group[g].own_space) * slots + slot].stride;
  }
  __device__ int64_t phase_base(int64_t slot, int64_t g) const {
    return (slot * groups + g) * phase_capacity;
  }
};

// What the conversion reads besides the arrangement.
struct Conversion {
  Arrangement a;
  const int64_t* tile_offsets;  // [slots + 1] real tiles, packed slot by slot
  int64_t tiles;                // capacity
  int64_t causal_offset;
  detail::GridOptions options;
  KeySpaceView space[kMaxKeySpaces];
  int64_t space_keys[kMaxKeySpaces];  // each space's size (all keys: kv_len)
  // Item boundary: each pair's view and size (device memory, [pairs]); null otherwise (group g's
  // space s is space[s]).
  const KeySpaceView* pair_space = nullptr;
  const int64_t* pair_keys = nullptr;
  // Per-item sinks (ascending, device memory): a tile reads those at or before its last row's
  // aligned position as columns.
  const int64_t* sink_keys = nullptr;
  int64_t sink_count = 0;

  __device__ KeySpaceView view(int64_t g, int64_t s) const {
    return pair_space != nullptr ? pair_space[a.group[g].first_pair + s] : space[s];
  }
  __device__ int64_t keys(int64_t g, int64_t s) const {
    return pair_keys != nullptr ? pair_keys[a.group[g].first_pair + s] : space_keys[s];
  }
};

// Where the fill writes.
struct GroupedTargets {
  PlanSections sections;
  MaskRecord mask;                // the one policy: causal
  const int64_t* span_offsets;    // [tiles]
  const int64_t* column_offsets;  // [tiles]
  uint64_t* sort_keys;            // [tiles]
  int32_t* tile_indices;          // [tiles]
  int64_t* span_counts;           // count pass: [tiles]
  int64_t* column_counts;         // count pass: [tiles]
};

// Launches the conversion: a block per tile of the capacity, counting each tile's records
// (fill false; the caller scans the counts) or writing them (fill true).
void launch_grouped_grid_tiles(const Conversion& convert, const GroupedTargets& targets, bool fill,
                               cudaStream_t stream);

}  // namespace mmsparse::cuda::index::grouped
