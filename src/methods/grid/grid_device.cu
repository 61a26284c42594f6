// The grid head's conversion on the GPU (index_kernels.h) for boundary none/K, where one group
// holds every query row and reads all keys, so a row's coordinate is its aligned position
// row + kv_len - q_len: the host builder's conversion (GridPattern, tile_keys.cpp) of the lines
// the search (grid_search_device.cu) chose. Q/2D boundary: methods/grid/grid_groups_device.cu.
//
// Conversion, by index arithmetic on (stride, phase): each slot's run and tile counts, its runs,
// then a warp per tile counts its spans and columns, CUB scans, the warp writes them, and a stable
// radix sort makes the upload's heaviest-first schedule. Sections are sized for every candidate
// stride (GridBuild); the real records are packed at their front as the upload packs them, and
// the tiles beyond them are empty and scheduled last.

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>
#include <limits>
#include <string>

#include "cuda/common/cub_storage.cuh"
#include "cuda/common/cuda_check.h"
#include "cuda/common/math.h"
#include "cuda/common/warp.cuh"
#include "methods/estimate/dynamic_head.h"
#include "methods/estimate/index_kernels.h"
#include "methods/estimate/modality_boundary.h"
#include "methods/grid/grid_geometry.h"
#include "mmsparse/status.h"

namespace mmsparse::cuda::index {
namespace {

// Threads per block of every conversion kernel.
constexpr int kThreads = 256;

using grid::ceil_div;
using grid::GridRows;
using grid::GridRun;

// A thread per head slot: the runs (0 for the identity order) and tiles of its stride.
__global__ void grid_counts_kernel(int64_t q_len, int64_t kv_len, int64_t tile_rows, int64_t slots,
                                   const detail::GridLines* lines, int64_t* run_counts,
                                   int64_t* tile_counts) {
  const int64_t slot = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (slot >= slots) return;
  const GridRows rows(q_len, kv_len, tile_rows, lines[slot].stride);
  run_counts[slot] = rows.identity() ? 0 : rows.runs();
  tile_counts[slot] = rows.tiles();
}

// --- Conversion --------------------------------------------------------------------------------

struct ConvertParams {
  int64_t q_len, kv_len, tile_rows, slots;
  int64_t runs_per_head, tiles;  // run capacity per slot, tile capacity in all
  detail::GridOptions options;
  const detail::GridLines* lines;   // [slots]
  const int64_t* head_run_offsets;  // [slots + 1]
  const int64_t* tile_offsets;      // [slots + 1] real tiles, packed slot by slot
};

// A thread per (head slot, run): the slot's run records, unless its order is the identity.
__global__ void grid_runs_kernel(const ConvertParams params, RunRecord* runs) {
  const int64_t index = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (index >= params.slots * params.runs_per_head) return;
  const int64_t slot = index / params.runs_per_head;
  const int64_t r = index % params.runs_per_head;
  const int64_t first = params.head_run_offsets[slot];
  if (r >= params.head_run_offsets[slot + 1] - first) return;
  const GridRows rows(params.q_len, params.kv_len, params.tile_rows, params.lines[slot].stride);
  const GridRun run = rows.run(r);
  runs[first + r] = {static_cast<int32_t>(run.order_begin), static_cast<int32_t>(run.start),
                     static_cast<int32_t>(run.step)};
}

// Tile g of the plan: its slot, its place in the slot, its rows and keys.
struct PlanTile {
  bool real = false;
  int64_t slot = 0, position = 0;
  grid::TileSite site;
};

__device__ PlanTile plan_tile(const ConvertParams& params, int64_t g) {
  PlanTile tile;
  if (g >= params.tile_offsets[params.slots]) return tile;
  int64_t low = 0;
  int64_t high = params.slots;
  while (high - low > 1) {
    const int64_t middle = (low + high) / 2;
    if (params.tile_offsets[middle] <= g) {
      low = middle;
    } else {
      high = middle;
    }
  }
  tile.real = true;
  tile.slot = low;
  tile.position = g - params.tile_offsets[low];
  const detail::GridLines lines = params.lines[low];
  tile.site =
      grid::locate_tile(grid::GridRows(params.q_len, params.kv_len, params.tile_rows, lines.stride),
                        tile.position, lines, params.options);
  return tile;
}

struct TileCounts {
  int64_t spans = 0;
  int64_t columns = 0;
  int64_t keys = 0;  // keys the tile reads (the schedule's sort key)
};

// One warp: the tile's spans, strided spans and columns, written when `spans` and `columns` are
// not null. The warp takes 32 candidate keys of the residues at a time and ranks the kept ones
// with a ballot.
__device__ TileCounts tile_keys(const grid::GridTile& tile, SpanRecord* spans, int32_t* columns) {
  const int lane = static_cast<int>(threadIdx.x) % kWarpLanes;
  TileCounts counts;
  const int64_t plain_spans = tile.span_count();
  const int64_t strided_spans = tile.strided_count();
  counts.spans = plain_spans + strided_spans;
  int64_t lane_keys = 0;
  for (int64_t j = lane; j < plain_spans; j += kWarpLanes) {
    const grid::KeyRange span = tile.span(j);
    lane_keys += span.end - span.begin;
    if (spans != nullptr)
      spans[j] = {static_cast<int32_t>(span.begin), static_cast<int32_t>(span.end)};
  }
  if (lane < strided_spans) {
    const grid::KeyRange range = tile.strided_span(lane);
    const SpanRecord record{static_cast<int32_t>(range.begin), static_cast<int32_t>(range.end),
                            static_cast<int32_t>(tile.stride)};
    lane_keys += range_keys(record);
    if (spans != nullptr) spans[plain_spans + lane] = record;
  }
  const int64_t column_begin = tile.column_begin();
  const int64_t first = tile.below(column_begin);
  const int64_t end = column_begin < tile.column_end ? tile.below(tile.column_end) : first;
  for (int64_t base = first; base < end; base += kWarpLanes) {
    const int64_t t = base + lane;
    bool kept = false;
    int64_t key = 0;
    if (t < end) {
      key = tile.candidate(t);
      kept = !tile.in_window(key) && tile.is_column(key);
    }
    const unsigned keepers = __ballot_sync(kAllLanes, kept);
    if (kept && columns != nullptr) {
      columns[counts.columns + __popc(keepers & lanes_below(lane))] = static_cast<int32_t>(key);
    }
    counts.columns += __popc(keepers);
  }
  counts.keys = warp_sum(lane_keys) + counts.columns;
  return counts;
}

// A warp per tile of the capacity: the real tiles' span and column counts (0 beyond them).
__global__ void grid_count_kernel(const ConvertParams params, int64_t* span_counts,
                                  int64_t* column_counts) {
  const int64_t g = warp_index();
  if (g >= params.tiles) return;
  const PlanTile tile = plan_tile(params, g);
  TileCounts counts;
  if (tile.site.sees_keys) counts = tile_keys(tile.site.keys, nullptr, nullptr);
  if (threadIdx.x % kWarpLanes == 0) {
    span_counts[g] = counts.spans;
    column_counts[g] = counts.columns;
  }
}

struct FillTargets {
  PlanSections sections;
  MaskRecord mask;                // the one policy: causal
  const int64_t* span_offsets;    // [tiles] exclusive sums of the span counts
  const int64_t* column_offsets;  // [tiles]
  uint64_t* sort_keys;            // [tiles] the schedule's sort keys, by tile
  int32_t* tile_indices;          // [tiles] 0, 1, 2, ... (the sort's values)
};

// A warp per tile of the capacity: its record, spans, columns and sort key. Tiles beyond the real
// ones have no rows and no keys and sort after every real tile.
__global__ void grid_fill_kernel(const ConvertParams params, FillTargets out) {
  const int64_t g = warp_index();
  if (g >= params.tiles) return;
  const PlanTile tile = plan_tile(params, g);
  const int64_t span_begin = out.span_offsets[g];
  const int64_t column_begin = out.column_offsets[g];
  TileCounts counts;
  if (tile.site.sees_keys) {
    counts = tile_keys(tile.site.keys, out.sections.spans + span_begin,
                       out.sections.columns + column_begin);
  }
  if (threadIdx.x % kWarpLanes != 0) return;
  if (g == 0) out.sections.masks[0] = out.mask;
  out.tile_indices[g] = static_cast<int32_t>(g);
  if (!tile.real) {
    out.sections.tiles[g] = {0, 0, 0, 0, 0, 0, 0, 0};
    out.sort_keys[g] = 0;
    return;
  }
  out.sections.tiles[g] = {static_cast<int32_t>(tile.site.begin),
                           static_cast<int32_t>(tile.site.end),
                           static_cast<int32_t>(tile.slot),
                           0,
                           span_begin,
                           span_begin + counts.spans,
                           column_begin,
                           column_begin + counts.columns};
  // The upload's order (device_plan.cu, heaviest_first): more keys first, then lower positions,
  // then lower tile indices (the stable sort keeps those).
  out.sort_keys[g] = grid_sort_key(counts.keys, tile.position);
}

unsigned blocks_for(int64_t threads) { return static_cast<unsigned>(ceil_div(threads, kThreads)); }

}  // namespace

int grid_sort_bits(int64_t kv_len) {
  return kGridPositionBits +
         std::max(1, static_cast<int>(std::bit_width(static_cast<uint64_t>(kv_len + 1))));
}

void check_grid_positions(const std::string& pattern, const PlanShape& shape, int64_t stride) {
  if (shape.q_len + shape.kv_len > std::numeric_limits<int32_t>::max() - stride) {
    throw Error(ErrorCode::kUnsupported,
                pattern +
                    " parameter stride: the GPU builder needs q_len + kv_len + "
                    "stride < 2^31, got stride " +
                    std::to_string(stride));
  }
}

GridBuild plan_grid(const PatternSpec& resolved_spec, const PlanShape& shape,
                    const ModalityLayout* layout) {
  GridBuild build;
  build.shape = shape;
  build.options = detail::grid_options(resolved_spec);
  const detail::BoundaryMode mode = checked_boundary(resolved_spec, detail::BoundaryMode::kItem);
  build.last_q = checked_estimate_queries(resolved_spec, shape);
  // Item sinks add columns, which the closed-form conversion below has no room for: such heads
  // take the grouped conversion (one group of every row without a boundary), whose lattices are
  // columns as the host writes them with item sinks (build_dynamic_head).
  const bool item_sinks = detail::item_sinks_param(resolved_spec, shape, layout) > 0;
  if (mode == detail::BoundaryMode::kQuery || mode == detail::BoundaryMode::kTwoD ||
      mode == detail::BoundaryMode::kItem || (item_sinks && shape.q_len > 0)) {
    plan_grouped_grid(resolved_spec, layout, mode, build);
    return build;
  }
  // The candidates of search_grid: the estimate's keys are all keys (the last query sees them).
  const int64_t keys = shape.q_len > 0 ? shape.kv_len : 0;
  if (build.options.stride != 0) {
    build.first_stride = build.last_stride = build.options.stride;
  } else {
    build.first_stride = detail::kMinStride;
    build.last_stride = std::max(detail::kMinStride,
                                 std::min(build.options.max_stride, keys / detail::kMinGridLines));
  }
  check_grid_positions(resolved_spec.name, shape, build.last_stride);

  // Capacities over the candidates (docs/index_builders.md, "Grid"): each tile has at most one
  // span more than its rows when there are local windows, else one, and a strided span per
  // residue.
  const int64_t residues = (build.options.slash ? 1 : 0) + (build.options.vline ? 1 : 0);
  int64_t rows_seeing_keys = 0;
  int64_t strided_per_head = 0;
  int64_t columns_per_head = 0;
  for (int64_t stride = build.first_stride; stride <= build.last_stride; ++stride) {
    const GridRows rows(shape.q_len, shape.kv_len, shape.tile_rows, stride);
    build.runs_per_head = std::max(build.runs_per_head, rows.runs());
    build.tiles_per_head = std::max(build.tiles_per_head, rows.tiles());
    strided_per_head = std::max(strided_per_head, rows.strided_bound(residues));
    columns_per_head = std::max(columns_per_head, rows.column_bound(residues));
    rows_seeing_keys = rows.rows;
  }
  const int64_t spans_per_head = build.tiles_per_head + strided_per_head +
                                 (detail::tile_window(build.options) > 0 ? rows_seeing_keys : 0);
  build.span_capacity = spans_per_head * shape.head_slots();
  build.column_capacity = columns_per_head * shape.head_slots();
  return build;
}

GridTileRegions add_grid_tile_regions(ScratchLayout& layout, int64_t tiles) {
  GridTileRegions regions;
  regions.span_counts = layout.add<int64_t>(tiles);
  regions.column_counts = layout.add<int64_t>(tiles);
  regions.span_offsets = layout.add<int64_t>(tiles);
  regions.column_offsets = layout.add<int64_t>(tiles);
  regions.sort_keys = layout.add<uint64_t>(tiles);
  regions.sorted_keys = layout.add<uint64_t>(tiles);
  regions.tile_indices = layout.add<int32_t>(tiles);
  return regions;
}

void scan_grid_record_counts(void* temp, std::size_t scan_bytes, std::byte* base,
                             const GridTileRegions& regions, int item_count, cudaStream_t stream,
                             const char* what) {
  scan_record_counts(temp, scan_bytes, region<int64_t>(base, regions.span_counts),
                     region<int64_t>(base, regions.span_offsets),
                     region<int64_t>(base, regions.column_counts),
                     region<int64_t>(base, regions.column_offsets), item_count, stream, what);
}

void scan_grid_slot_counts(void* temp, std::size_t slot_scan_bytes, const int64_t* run_counts,
                           int64_t* head_run_offsets, const int64_t* tile_counts,
                           int64_t* tile_offsets, int slot_items, cudaStream_t stream,
                           const char* what) {
  std::size_t temp_bytes = slot_scan_bytes;
  check_cuda(cub::DeviceScan::ExclusiveSum(temp, temp_bytes, run_counts, head_run_offsets,
                                           slot_items, stream),
             what, "run scan");
  temp_bytes = slot_scan_bytes;
  check_cuda(cub::DeviceScan::ExclusiveSum(temp, temp_bytes, tile_counts, tile_offsets, slot_items,
                                           stream),
             what, "tile scan");
}

void sort_grid_schedule(void* temp, std::size_t sort_bytes, std::byte* base,
                        const GridTileRegions& regions, int32_t* schedule, int item_count,
                        int sort_bits, cudaStream_t stream, const char* what) {
  check_cuda(cub::DeviceRadixSort::SortPairsDescending(temp, sort_bytes,
                                                       region<uint64_t>(base, regions.sort_keys),
                                                       region<uint64_t>(base, regions.sorted_keys),
                                                       region<int32_t>(base, regions.tile_indices),
                                                       schedule, item_count, 0, sort_bits, stream),
             what, "schedule sort");
}

namespace {

// Every tile's spans and columns: counted (a warp per tile), scanned into offsets (scratch at
// `temp` of `scan_bytes`), then written with the tiles' schedule keys.
void write_grid_tiles(const ConvertParams& convert, const PlanSections& sections, std::byte* base,
                      const GridTileRegions& tiles_at, void* temp, std::size_t scan_bytes,
                      cudaStream_t stream) {
  const unsigned tile_blocks = blocks_for(convert.tiles * kWarpLanes);  // a warp per tile
  grid_count_kernel<<<tile_blocks, kThreads, 0, stream>>>(
      convert, region<int64_t>(base, tiles_at.span_counts),
      region<int64_t>(base, tiles_at.column_counts));
  check_launch("grid index: grid_count_kernel");
  scan_grid_record_counts(temp, scan_bytes, base, tiles_at, static_cast<int>(convert.tiles), stream,
                          "grid index");

  const FillTargets targets{sections,
                            make_mask_record(MaskPolicy{}, convert.kv_len),
                            region<int64_t>(base, tiles_at.span_offsets),
                            region<int64_t>(base, tiles_at.column_offsets),
                            region<uint64_t>(base, tiles_at.sort_keys),
                            region<int32_t>(base, tiles_at.tile_indices)};
  grid_fill_kernel<<<tile_blocks, kThreads, 0, stream>>>(convert, targets);
  check_launch("grid index: grid_fill_kernel");
}

}  // namespace

void build_grid(const GridBuild& build, const EstimateOperands& operands,
                const PlanSections& sections, detail::GridLines* chosen, cudaStream_t stream,
                StageMarks* marks) {
  const int64_t tiles = build.tiles();
  if (tiles == 0) return;
  if (build.grouped()) {
    build_grouped_grid(build, operands, sections, chosen, stream, marks);
    return;
  }
  const auto mark = [&](const char* stage) {
    if (marks != nullptr) marks->mark(stage, stream);
  };
  const EstimateExtents extents = estimate_extents(operands, build.last_q);
  const int64_t slots = extents.slots;
  const int64_t kv_len = build.shape.kv_len;
  const auto item_count = static_cast<int>(tiles);
  const auto slot_items = static_cast<int>(slots + 1);
  const int sort_bits = grid_sort_bits(kv_len);

  const std::size_t scan_bytes = scan_storage_bytes(item_count, stream, "grid index: scan storage");
  const std::size_t slot_scan_bytes =
      scan_storage_bytes(slot_items, stream, "grid index: slot scan storage");
  const std::size_t sort_bytes =
      sort_storage_bytes<uint64_t>(item_count, sort_bits, stream, "grid index: sort storage");

  ScratchLayout layout;
  const EstimateRegions estimate_at = add_estimate_regions(layout, extents, true);
  const GridSearchRegions search_at =
      add_grid_search_regions(layout, slots, extents.scores, build.strides());
  const std::size_t lines_at = layout.add<detail::GridLines>(slots);
  const std::size_t run_counts_at = layout.add<int64_t>(slots + 1);
  const std::size_t tile_counts_at = layout.add<int64_t>(slots + 1);
  const std::size_t tile_offsets_at = layout.add<int64_t>(slots + 1);
  const GridTileRegions tiles_at = add_grid_tile_regions(layout, tiles);
  const std::size_t temp_at = layout.add<std::byte>(
      static_cast<int64_t>(std::max({scan_bytes, slot_scan_bytes, sort_bytes})));

  const StreamScratch scratch(layout.bytes(), stream, "grid index: scratch");
  std::byte* base = scratch.base();
  // The slot count arrays end in a 0 so that their exclusive sums end in the totals.
  check_cuda(cudaMemsetAsync(base + run_counts_at, 0, tile_offsets_at - run_counts_at, stream),
             "grid index: cudaMemsetAsync counts");

  mark("scratch");
  // Options that fix the lines need no estimate (grid_lines_fixed).
  const bool fixed = detail::grid_lines_fixed(build.options);
  const EstimateScratch estimate = estimate_scratch(base, estimate_at);
  if (!fixed) launch_estimate(operands, extents, estimate, stream);
  mark("estimate");
  auto* lines = region<detail::GridLines>(base, lines_at);
  if (fixed) {
    launch_fixed_grid_lines(build.options, slots, lines, chosen, stream);
  } else {
    launch_grid_search({&extents, estimate.probabilities, build.options, build.first_stride,
                        build.last_stride, lines, chosen},
                       base, search_at, stream);
  }
  mark("search");

  auto* run_counts = region<int64_t>(base, run_counts_at);
  auto* tile_counts = region<int64_t>(base, tile_counts_at);
  auto* tile_offsets = region<int64_t>(base, tile_offsets_at);
  grid_counts_kernel<<<blocks_for(slots), kThreads, 0, stream>>>(
      build.shape.q_len, kv_len, build.shape.tile_rows, slots, lines, run_counts, tile_counts);
  check_launch("grid index: grid_counts_kernel");
  void* temp = base + temp_at;
  scan_grid_slot_counts(temp, slot_scan_bytes, run_counts, sections.head_run_offsets, tile_counts,
                        tile_offsets, slot_items, stream, "grid index");
  const ConvertParams convert{build.shape.q_len,         kv_len,      build.shape.tile_rows, slots,
                              build.runs_per_head,       tiles,       build.options,         lines,
                              sections.head_run_offsets, tile_offsets};
  if (build.runs() > 0) {
    grid_runs_kernel<<<blocks_for(build.runs()), kThreads, 0, stream>>>(convert, sections.runs);
    check_launch("grid index: grid_runs_kernel");
  }
  mark("runs");
  write_grid_tiles(convert, sections, base, tiles_at, temp, scan_bytes, stream);
  mark("tiles");
  sort_grid_schedule(temp, sort_bytes, base, tiles_at, sections.schedule, item_count, sort_bits,
                     stream, "grid index");
  mark("schedule");
}

}  // namespace mmsparse::cuda::index
