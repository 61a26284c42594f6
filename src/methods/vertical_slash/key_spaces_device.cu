// 2D-boundary tiles on the GPU (MMInference Alg. 3): a tile's keys from its group's lines in every
// key space, exactly as the host makes them (VerticalSlashPattern::add_tile_keys in each space,
// TileKeys::write across the spaces). In a space with compact frontiers [lo, hi] every selected
// diagonal d < hi is the compact band [max(0, lo - 1 - d), hi - d): read as columns, key by key,
// when the space is compact and the band narrower than kNarrowBandKeys, else as a span split at the
// space's ranges; every selected vertical < hi is a column.
//
// With the item boundary a tile reads its group's own spaces (KeySpaceTiles::view); with per-item
// sinks also the sink keys its rows see, as columns.
//
// A block per tile marks those keys in the bitmaps of key_bitmaps.cuh and reads the records off
// them: the sets are TileKeys's, so the records are the host's, whatever the selected lines.

#include <cstdint>

#include "cuda/common/cuda_check.h"
#include "methods/estimate/index_kernels.h"
#include "methods/estimate/key_bitmaps.cuh"
#include "methods/vertical_slash/lines_device.cuh"
#include "methods/vertical_slash/vertical_slash.h"

namespace mmsparse::cuda::index {
namespace {

using bitmaps::kThreads;
using bitmaps::Window;

// One space's keys of the tile (VerticalSlashPattern::add_tile_keys with one run of frontiers),
// the block's threads taking lines in turn.
__device__ void mark_space(const KeySpaceView& space, const SpaceFrontiers& rows,
                           const Lines& lines, const Window& window) {
  if (rows.high < 1) return;
  const int32_t below = lower_bound(lines.slashes, lines.slash_count, rows.high);
  for (int32_t j = static_cast<int32_t>(threadIdx.x); j < below; j += kThreads) {
    const int64_t diagonal = lines.slashes[j];
    const int64_t begin = rows.low - 1 - diagonal > 0 ? rows.low - 1 - diagonal : 0;
    const int64_t end = rows.high - diagonal;
    if (space.compact && end - begin < detail::kNarrowBandKeys) {
      for (int64_t key = begin; key < end; ++key) window.mark_column(space.original(key));
    } else {
      bitmaps::mark_compact_span(space, begin, end, window);
    }
  }
  const int32_t visible = lower_bound(lines.verticals, lines.vertical_count, rows.high);
  for (int32_t j = static_cast<int32_t>(threadIdx.x); j < visible; j += kThreads) {
    window.mark_column(space.original(lines.verticals[j]));
  }
}

// Where a tile's records go (fill) or its counts (count).
struct TileTargets {
  int64_t* span_counts;    // count: [tiles]
  int64_t* column_counts;  // count: [tiles]
  FillTargets fill;        // fill
};

template <bool kFill>
__global__ void __launch_bounds__(kThreads)
    key_space_tiles_kernel(const KeySpaceTiles geometry, const SelectedLines selected,
                           const TileTargets targets) {
  __shared__ bitmaps::TileStorage storage;
  const int64_t index = blockIdx.x;
  const int64_t slot = index / geometry.tiles_per_head;
  const int64_t position = index % geometry.tiles_per_head;
  const VerticalSlashTile rows = geometry.tiles[position];
  const SpaceFrontiers* frontiers = geometry.frontiers + position * geometry.spaces;

  const int32_t spaces = geometry.group_spaces(rows.group);
  const int32_t sinks = geometry.tile_sinks != nullptr ? geometry.tile_sinks[position] : 0;
  // Keys read lie below key_end: each space's last visible compact key is its largest original
  // one, and the last sink the tile reads.
  int64_t key_end = sinks > 0 ? geometry.sink_keys[sinks - 1] + 1 : 0;
  for (int32_t s = 0; s < spaces; ++s) {
    if (frontiers[s].high < 1) continue;
    const int64_t last = geometry.view(rows.group, s).original(frontiers[s].high - 1) + 1;
    key_end = last > key_end ? last : key_end;
  }

  SpanRecord* spans = nullptr;
  int32_t* columns = nullptr;
  if constexpr (kFill) {
    spans = targets.fill.sections.spans + targets.fill.span_offsets[index];
    columns = targets.fill.sections.columns + targets.fill.column_offsets[index];
  }
  const auto mark = [&](const Window& window) {
    for (int32_t s = 0; s < spaces; ++s) {
      if (frontiers[s].high < 1) continue;
      mark_space(geometry.view(rows.group, s), frontiers[s],
                 selected.of(geometry.pair(rows.group, s), slot), window);
    }
    for (int32_t j = static_cast<int32_t>(threadIdx.x); j < sinks; j += kThreads) {
      window.mark_column(geometry.sink_keys[j]);
    }
  };
  const bitmaps::RecordCounts total =
      bitmaps::read_tile_records<kFill>(storage, key_end, mark, spans, columns);

  if (threadIdx.x != 0) return;
  if constexpr (kFill) {
    targets.fill.write_tile(index, slot, position, geometry.tiles_per_head,
                            static_cast<int64_t>(gridDim.x), rows, total.starts, total.columns,
                            total.keys);
  } else {
    targets.span_counts[index] = total.starts;
    targets.column_counts[index] = total.columns;
  }
}

}  // namespace

void launch_count_key_space_tiles(const KeySpaceTiles& geometry, const SelectedLines& selected,
                                  int64_t tiles, int64_t* span_counts, int64_t* column_counts,
                                  cudaStream_t stream) {
  if (tiles == 0) return;
  key_space_tiles_kernel<false><<<static_cast<unsigned>(tiles), kThreads, 0, stream>>>(
      geometry, selected, {span_counts, column_counts, {}});
  check_launch("2D-boundary index: count tiles");
}

void launch_fill_key_space_tiles(const KeySpaceTiles& geometry, const SelectedLines& selected,
                                 int64_t tiles, const FillTargets& targets, cudaStream_t stream) {
  if (tiles == 0) return;
  key_space_tiles_kernel<true><<<static_cast<unsigned>(tiles), kThreads, 0, stream>>>(
      geometry, selected, {nullptr, nullptr, targets});
  check_launch("2D-boundary index: fill tiles");
}

}  // namespace mmsparse::cuda::index
