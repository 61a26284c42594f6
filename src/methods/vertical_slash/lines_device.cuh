#pragma once
// What the vertical-slash conversions share (methods/vertical_slash/tile_records_device.cu for
// one key space, methods/vertical_slash/key_spaces_device.cu for the 2D boundary's several): the
// selected lines of every selection and head slot, and where the fill writes the records and the
// schedule's sort input.

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/runtime/plan_view.cuh"
#include "methods/estimate/index_kernels.h"

namespace mmsparse::cuda::index {

// One head slot's selected lines of one selection (a query group, or a (group, key space) pair),
// ascending.
struct Lines {
  const int32_t* verticals;
  int32_t vertical_count;
  const int32_t* slashes;
  int32_t slash_count;
};

// The selections of every head slot, [selections, slots, capacity] with a count each.
struct SelectedLines {
  int64_t slots;
  const int32_t* verticals;
  int64_t vertical_capacity;
  const int32_t* vertical_counts;
  const int32_t* slashes;
  int64_t slash_capacity;
  const int32_t* slash_counts;

  __device__ Lines of(int64_t selection, int64_t slot) const {
    const int64_t at = selection * slots + slot;
    return {verticals + at * vertical_capacity, vertical_counts[at], slashes + at * slash_capacity,
            slash_counts[at]};
  }
};

// The first index of the ascending `values` that is >= `bound` (count when none is).
__device__ inline int32_t lower_bound(const int32_t* values, int32_t count, int64_t bound) {
  int32_t low = 0;
  int32_t high = count;
  while (low < high) {
    const int32_t middle = (low + high) / 2;
    if (values[middle] < bound) {
      low = middle + 1;
    } else {
      high = middle;
    }
  }
  return low;
}

// Where the fill pass writes: the plan's sections at the scanned offsets, and the schedule sort's
// input in position-major order (the upload's tie order, device_plan.cu's heaviest_first, which
// puts a head's t-th tile next to every other head's t-th tile).
struct FillTargets {
  PlanSections sections;
  MaskRecord mask;                // the one policy: causal
  const int64_t* span_offsets;    // [tiles] exclusive sums of the span counts
  const int64_t* column_offsets;  // [tiles] exclusive sums of the column counts
  uint32_t* tile_keys;            // [tiles] key counts, position-major (the schedule's sort keys)
  int32_t* tile_indices;          // [tiles] their tile indices (sort values)

  // The record of tile `index` (head slot `slot`, its `position`-th tile of `tiles_per_head`),
  // with its spans and columns written at the scanned offsets.
  __device__ void write_tile(int64_t index, int64_t slot, int64_t position, int64_t tiles_per_head,
                             int64_t tiles, const VerticalSlashTile& rows, int64_t spans,
                             int64_t columns, int64_t keys) const {
    if (index == 0) sections.masks[0] = mask;
    const int64_t span_begin = span_offsets[index];
    const int64_t column_begin = column_offsets[index];
    sections.tiles[index] = {static_cast<int32_t>(rows.begin),
                             static_cast<int32_t>(rows.end),
                             static_cast<int32_t>(slot),
                             0,
                             span_begin,
                             span_begin + spans,
                             column_begin,
                             column_begin + columns};
    const int64_t head_slots = tiles / tiles_per_head;
    const int64_t sort_item = position * head_slots + slot;
    tile_keys[sort_item] = static_cast<uint32_t>(keys);
    tile_indices[sort_item] = static_cast<int32_t>(index);
  }
};

// The tiles of a 2D-boundary head slot (methods/vertical_slash/key_spaces_device.cu): rows and
// group of each, its frontiers in every key space, and the spaces. The selection of (group g, space
// s) is g * spaces + s.
struct KeySpaceTiles {
  const VerticalSlashTile* tiles = nullptr;   // [tiles_per_head]
  const SpaceFrontiers* frontiers = nullptr;  // [tiles_per_head, spaces]
  int64_t tiles_per_head = 0;
  int32_t spaces = 0;
  KeySpaceView space[kMaxKeySpaces];
  // Item boundary (items::PairTable): group g reads the pairs [first_pair[g], first_pair[g + 1])
  // in the views pair_space; null otherwise.
  const int32_t* first_pair = nullptr;       // [groups + 1]
  const KeySpaceView* pair_space = nullptr;  // [pairs]
  // Per-item sinks: tile t reads sink_keys[0, tile_sinks[t]) as columns; null without them.
  const int64_t* sink_keys = nullptr;
  const int32_t* tile_sinks = nullptr;  // [tiles_per_head]

  __device__ int32_t group_spaces(int32_t group) const {
    return first_pair != nullptr ? first_pair[group + 1] - first_pair[group] : spaces;
  }
  __device__ int64_t pair(int32_t group, int32_t s) const {
    return first_pair != nullptr ? first_pair[group] + s : static_cast<int64_t>(group) * spaces + s;
  }
  __device__ KeySpaceView view(int32_t group, int32_t s) const {
    return pair_space != nullptr ? pair_space[pair(group, s)] : space[s];
  }
};

// A block per tile of every head slot (head slot major): its span and column counts, as the host's
// VerticalSlashPattern::add_tile_keys in each space and TileKeys::write across them make them.
void launch_count_key_space_tiles(const KeySpaceTiles& geometry, const SelectedLines& selected,
                                  int64_t tiles, int64_t* span_counts, int64_t* column_counts,
                                  cudaStream_t stream);
// The same tiles' records, spans and columns at the scanned offsets, and the schedule's sort input.
void launch_fill_key_space_tiles(const KeySpaceTiles& geometry, const SelectedLines& selected,
                                 int64_t tiles, const FillTargets& targets, cudaStream_t stream);

}  // namespace mmsparse::cuda::index
