// The records of vertical-slash tiles (tile_records.cuh) from the selected lines. With one key
// space a warp per tile ranks the merged spans and the kept verticals (tile_keys); the 2D
// boundary's tiles take key_spaces_device.cu's block per tile. Counting and writing share that
// code (as the static builders do): count, scan, write, then the upload's heaviest-first schedule
// by a stable radix sort.

#include <cstddef>
#include <cstdint>
#include <cub/device/device_radix_sort.cuh>

#include "cuda/common/cub_storage.cuh"
#include "cuda/common/cuda_check.h"
#include "cuda/common/math.h"
#include "cuda/common/warp.cuh"
#include "methods/estimate/index_kernels.h"
#include "methods/vertical_slash/lines_device.cuh"
#include "methods/vertical_slash/tile_records.cuh"

namespace mmsparse::cuda::index {
namespace {

constexpr int kThreadsPerBlock = 256;

struct TileCounts {
  int64_t spans = 0;
  int64_t columns = 0;
  int64_t keys = 0;  // keys the tile reads (the schedule's sort key)
};

// A tile's merged spans and columns, computed by one warp, exactly as TileKeys::write hands them to
// PlanBuilder; written when `spans` and `columns` are not null. In ascending begin order, band j is
// diagonal slashes[below - 1 - j]; begins and ends both ascend with j, so band j opens a new span
// exactly when it starts after the previous band's end, and span k ends where the band before span
// k + 1's first band ends. A vertical v is inside a span when some band holds it, i.e. some
// selected diagonal d has lo - 1 - v <= d < hi - v: a binary search. The warp takes 32 bands or
// verticals at a time and ranks them with ballots.
__device__ TileCounts tile_keys(const VerticalSlashTile& rows, const Lines& lines,
                                SpanRecord* spans, int32_t* columns) {
  const int lane = static_cast<int>(threadIdx.x) % kWarpLanes;
  TileCounts counts;
  if (rows.high < 1) return counts;
  const int32_t below = lower_bound(lines.slashes, lines.slash_count, rows.high);
  int64_t lane_keys = 0;
  for (int32_t first = 0; first < below; first += kWarpLanes) {
    const int32_t band = first + lane;
    bool opens = false;
    int64_t begin = 0;
    int64_t previous_end = 0;
    if (band < below) {
      const int64_t diagonal = lines.slashes[below - 1 - band];
      begin = rows.low - 1 - diagonal > 0 ? rows.low - 1 - diagonal : 0;
      previous_end = band > 0 ? rows.high - lines.slashes[below - band] : 0;
      opens = band == 0 || begin > previous_end;
    }
    const unsigned openers = __ballot_sync(kAllLanes, opens);
    if (opens) {
      const int64_t span = counts.spans + __popc(openers & lanes_below(lane));
      // Length = end - begin, summed over spans: this span's -begin, the previous span's +end.
      lane_keys += (band > 0 ? previous_end : 0) - begin;
      if (spans != nullptr) {
        spans[span].begin = static_cast<int32_t>(begin);
        spans[span].step = 1;
        spans[span].width = 1;
        if (band > 0) spans[span - 1].end = static_cast<int32_t>(previous_end);
      }
    }
    counts.spans += __popc(openers);
  }
  if (below > 0 && lane == 0) {
    const int64_t last_end = rows.high - lines.slashes[0];
    lane_keys += last_end;
    if (spans != nullptr) spans[counts.spans - 1].end = static_cast<int32_t>(last_end);
  }

  const int32_t visible = lower_bound(lines.verticals, lines.vertical_count, rows.high);
  for (int32_t first = 0; first < visible; first += kWarpLanes) {
    const int32_t index = first + lane;
    bool kept = false;
    int32_t vertical = 0;
    if (index < visible) {
      vertical = lines.verticals[index];
      const int32_t holder =
          lower_bound(lines.slashes, below, rows.low - 1 - static_cast<int64_t>(vertical));
      kept = holder == below || lines.slashes[holder] >= rows.high - vertical;
    }
    const unsigned keepers = __ballot_sync(kAllLanes, kept);
    if (kept && columns != nullptr) {
      columns[counts.columns + __popc(keepers & lanes_below(lane))] = vertical;
    }
    counts.columns += __popc(keepers);
  }
  counts.keys = warp_sum(lane_keys) + counts.columns;
  return counts;
}

// One warp per tile of every head slot, head slot major (the host builder's order).
__global__ void count_tiles_kernel(TileGeometry geometry, SelectedLines selected, int64_t tiles,
                                   int64_t* span_counts, int64_t* column_counts) {
  const int64_t index = warp_index();
  if (index >= tiles) return;
  const VerticalSlashTile tile = geometry.tile(index % geometry.tiles_per_head);
  const TileCounts counts =
      tile_keys(tile, selected.of(tile.group, index / geometry.tiles_per_head), nullptr, nullptr);
  if (threadIdx.x % kWarpLanes == 0) {
    span_counts[index] = counts.spans;
    column_counts[index] = counts.columns;
  }
}

__global__ void fill_tiles_kernel(TileGeometry geometry, SelectedLines selected, int64_t tiles,
                                  FillTargets out) {
  const int64_t index = warp_index();
  if (index >= tiles) return;
  const int64_t slot = index / geometry.tiles_per_head;
  const VerticalSlashTile rows = geometry.tile(index % geometry.tiles_per_head);
  const int64_t span_begin = out.span_offsets[index];
  const int64_t column_begin = out.column_offsets[index];
  const TileCounts counts =
      tile_keys(rows, selected.of(rows.group, slot), out.sections.spans + span_begin,
                out.sections.columns + column_begin);
  if (threadIdx.x % kWarpLanes != 0) return;
  out.write_tile(index, slot, index % geometry.tiles_per_head, geometry.tiles_per_head, tiles, rows,
                 counts.spans, counts.columns, counts.keys);
}

}  // namespace

void write_tile_records(const VerticalSlashBuild& build, const PlanSections& sections,
                        const KeySpaceTiles& space_tiles, const SelectedLines& selected,
                        const VerticalSlashTile* listed_tiles, const TileRecordScratch& scratch,
                        cudaStream_t stream) {
  const int64_t tiles = build.tiles();
  const bool two_d = !build.spaces.empty();
  const auto item_count = static_cast<int>(tiles);
  TileGeometry geometry = tile_geometry(build.shape);
  if (!build.head_tiles.empty()) {
    geometry.listed = listed_tiles;
    geometry.tiles_per_head = build.tiles_per_head;
  }
  const auto blocks =
      static_cast<unsigned>(ceil_div(tiles * kWarpLanes, kThreadsPerBlock));  // a warp per tile
  if (two_d) {
    launch_count_key_space_tiles(space_tiles, selected, tiles, scratch.span_counts,
                                 scratch.column_counts, stream);
  } else {
    count_tiles_kernel<<<blocks, kThreadsPerBlock, 0, stream>>>(
        geometry, selected, tiles, scratch.span_counts, scratch.column_counts);
    check_launch("vertical-slash index: count_tiles_kernel");
  }
  scan_record_counts(scratch.temp, scratch.scan_bytes, scratch.span_counts, scratch.span_offsets,
                     scratch.column_counts, scratch.column_offsets, item_count, stream,
                     "vertical-slash index");

  FillTargets targets{sections,
                      make_mask_record(MaskPolicy{}, build.shape.kv_len),
                      scratch.span_offsets,
                      scratch.column_offsets,
                      scratch.keys,
                      scratch.indices};
  if (two_d) {
    launch_fill_key_space_tiles(space_tiles, selected, tiles, targets, stream);
  } else {
    fill_tiles_kernel<<<blocks, kThreadsPerBlock, 0, stream>>>(geometry, selected, tiles, targets);
    check_launch("vertical-slash index: fill_tiles_kernel");
  }

  // Radix sort is stable, so equal key counts keep tile order: the upload's std::stable_sort.
  std::size_t temp_bytes = scratch.sort_bytes;
  check_cuda(cub::DeviceRadixSort::SortPairsDescending(
                 scratch.temp, temp_bytes, targets.tile_keys, scratch.sorted_keys,
                 targets.tile_indices, sections.schedule, item_count, 0, scratch.sort_bits, stream),
             "vertical-slash index: schedule sort");
}

}  // namespace mmsparse::cuda::index
