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
// A warp per tile ranks the merged spans and the kept verticals (see tile_keys). Counting and
// writing share that code (as the static builders do): count, scan, write, then the upload's
// heaviest-first schedule by a stable radix sort.

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>
#include <limits>
#include <string>
#include <vector>

#include "cuda/cub_storage.cuh"
#include "cuda/cuda_check.h"
#include "cuda/index_kernels.h"
#include "mmsparse/status.h"
#include "patterns/dynamic_head.h"
#include "patterns/modality_boundary.h"
#include "patterns/vertical_slash.h"

namespace mmsparse::cuda::index {
namespace {

constexpr int kThreadsPerBlock = 256;
constexpr int kWarpLanes = 32;
constexpr unsigned kAllLanes = 0xffffffffu;

__host__ __device__ inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The tiles of a head slot: by arithmetic in the identity order (boundary none/K), or listed
// (boundary Q: device memory, [tiles_per_head]).
struct TileGeometry {
  int64_t q_len, kv_len, tile_rows, offset, tiles_per_head;
  const VerticalSlashTile* listed;

  __host__ __device__ int64_t frontier(int64_t row) const {
    const int64_t aligned_end = row + offset + 1;
    return aligned_end < 0 ? 0 : (aligned_end > kv_len ? kv_len : aligned_end);
  }
  // The tile of consecutive query positions [first, last] at order indices [begin, end).
  __host__ __device__ VerticalSlashTile tile_of(int64_t begin, int64_t end, int64_t first,
                                                int64_t last, int32_t group) const {
    const int64_t low = frontier(first);
    return {begin, end, low > 1 ? low : 1, frontier(last), group};
  }
  __host__ __device__ VerticalSlashTile tile(int64_t t) const {
    if (listed != nullptr) return listed[t];
    const int64_t begin = t * tile_rows;
    const int64_t end = begin + tile_rows < q_len ? begin + tile_rows : q_len;
    return tile_of(begin, end, begin, end - 1, 0);
  }
};

// One head slot's selected lines of one group, ascending.
struct Lines {
  const int32_t* verticals;
  int32_t vertical_count;
  const int32_t* slashes;
  int32_t slash_count;
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

__device__ inline unsigned lanes_below(int lane) { return (1u << lane) - 1u; }

struct TileCounts {
  int64_t spans = 0;
  int64_t columns = 0;
  int64_t keys = 0;  // keys the tile reads (the schedule's sort key)
};

// A tile's merged spans and columns, computed by one warp, exactly as TileKeys::write hands them to
// PlanBuilder; written when `spans` and `columns` are not null. In ascending begin order, band j is
// diagonal slashes[below - 1 - j]; begins and ends both ascend with j, so band j opens a new span
// exactly when it starts after the previous band's end, and span k ends where the band before span
// k + 1's first band ends. A vertical v is inside a span when some band holds it, i.e. some selected
// diagonal d has lo - 1 - v <= d < hi - v: a binary search. The warp takes 32 bands or verticals at
// a time and ranks them with ballots.
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
  for (int offset = kWarpLanes / 2; offset > 0; offset /= 2) {
    lane_keys += __shfl_xor_sync(kAllLanes, lane_keys, offset);
  }
  counts.keys = lane_keys + counts.columns;
  return counts;
}

// The selections of every group and head slot, [groups, slots, capacity] with a count each.
struct SelectedLines {
  int64_t slots;
  const int32_t* verticals;
  int64_t vertical_capacity;
  const int32_t* vertical_counts;
  const int32_t* slashes;
  int64_t slash_capacity;
  const int32_t* slash_counts;

  __device__ Lines of(int32_t group, int64_t slot) const {
    const int64_t at = group * slots + slot;
    return {verticals + at * vertical_capacity, vertical_counts[at], slashes + at * slash_capacity,
            slash_counts[at]};
  }
};

__device__ inline int64_t warp_index() {
  return (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarpLanes;
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

struct FillTargets {
  PlanSections sections;
  MaskRecord mask;                // the one policy: causal
  const int64_t* span_offsets;    // [tiles] exclusive sums of the span counts
  const int64_t* column_offsets;  // [tiles] exclusive sums of the column counts
  uint32_t* tile_keys;            // [tiles] key counts, position-major (the schedule's sort keys)
  int32_t* tile_indices;          // [tiles] their tile indices (sort values)
};

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
  if (index == 0) out.sections.masks[0] = out.mask;
  out.sections.tiles[index] = {static_cast<int32_t>(rows.begin),
                               static_cast<int32_t>(rows.end),
                               static_cast<int32_t>(slot),
                               0,
                               span_begin,
                               span_begin + counts.spans,
                               column_begin,
                               column_begin + counts.columns};
  // The schedule sort's input, position-major: the upload's tie order (device_plan.cu,
  // heaviest_first), which puts a head's t-th tile next to every other head's t-th tile.
  const int64_t head_slots = tiles / geometry.tiles_per_head;
  const int64_t sort_item = (index % geometry.tiles_per_head) * head_slots + slot;
  out.tile_keys[sort_item] = static_cast<uint32_t>(counts.keys);
  out.tile_indices[sort_item] = static_cast<int32_t>(index);
}

// The identity order's tiles, by arithmetic.
TileGeometry tile_geometry(const PlanShape& shape) {
  return {shape.q_len,
          shape.kv_len,
          shape.tile_rows,
          shape.causal_offset(),
          ceil_div(shape.q_len, shape.tile_rows),
          nullptr};
}

// Boundary Q (the host's build_dynamic_head with query_groups): each query modality's runs of rows
// one after another in the query order, each run cut into tiles, and the group's last rows.
void arrange_query_groups(const PatternSpec& resolved_spec, const ModalityLayout* layout,
                          VerticalSlashBuild& build) {
  const PlanShape& shape = build.shape;
  const TileGeometry geometry = tile_geometry(shape);
  detail::RowOrder order;
  const std::vector<detail::QueryGroup> groups = detail::query_groups(resolved_spec, shape, layout);
  for (std::size_t g = 0; g < groups.size(); ++g) {
    for (const detail::IndexRange& rows : groups[g].rows) {
      const auto first_tile = order.tiles.size();
      const auto first = static_cast<int64_t>(order.positions.size());
      order.append_run({rows.begin, rows.end - rows.begin, 1});
      order.tile_from(first, shape.tile_rows);
      for (std::size_t t = first_tile; t < order.tiles.size(); ++t) {
        const detail::IndexRange& tile = order.tiles[t];
        build.head_tiles.push_back(
            geometry.tile_of(tile.begin, tile.end, rows.begin + tile.begin - first,
                             rows.begin + tile.end - 1 - first, static_cast<int32_t>(g)));
      }
    }
    build.group_rows.push_back(groups[g].last_rows(build.last_q));
  }
  if (!order.is_identity()) build.order_runs = order.runs;
  build.tiles_per_head = static_cast<int64_t>(build.head_tiles.size());
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
  const detail::BoundaryMode mode = checked_boundary(resolved_spec, detail::BoundaryMode::kQuery);
  build.last_q = checked_estimate_queries(resolved_spec, shape);
  const TileGeometry geometry = tile_geometry(shape);
  if (mode == detail::BoundaryMode::kQuery) {
    arrange_query_groups(resolved_spec, layout, build);
  } else {
    build.tiles_per_head = geometry.tiles_per_head;
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
  const int64_t groups = build.groups();
  std::vector<EstimateExtents> extents;
  for (int64_t g = 0; g < groups; ++g) {
    extents.push_back(build.group_rows.empty()
                          ? estimate_extents(operands, build.last_q)
                          : estimate_extents(operands,
                                             build.group_rows[static_cast<std::size_t>(g)],
                                             "vertical-slash"));
  }
  const int64_t slots = extents.front().slots;
  int64_t scores = 0;  // the longest score array of the groups
  for (const EstimateExtents& group : extents) scores = std::max(scores, group.scores);
  const int64_t vertical_capacity = std::min(build.vertical, scores);
  const int64_t slash_capacity = std::min(build.slash, scores);
  const int64_t selections = groups * slots;
  const auto item_count = static_cast<int>(tiles);
  const int sort_bits =
      std::max(1, static_cast<int>(std::bit_width(static_cast<uint64_t>(build.shape.kv_len))));

  const std::size_t scan_bytes =
      scan_storage_bytes(item_count, stream, "vertical-slash index: scan storage");
  const std::size_t sort_bytes = sort_storage_bytes<uint32_t>(item_count, sort_bits, stream,
                                                              "vertical-slash index: sort storage");

  ScratchLayout layout;
  std::vector<EstimateRegions> estimate_at;
  for (const EstimateExtents& group : extents) {
    estimate_at.push_back(add_estimate_regions(layout, group, false));
  }
  const std::size_t verticals_at = layout.add<int32_t>(selections * vertical_capacity);
  const std::size_t slashes_at = layout.add<int32_t>(selections * slash_capacity);
  const std::size_t line_counts_at = layout.add<int32_t>(2 * selections);  // verticals, slashes
  const std::size_t listed_tiles_at =
      layout.add<VerticalSlashTile>(static_cast<int64_t>(build.head_tiles.size()));
  const std::size_t span_counts_at = layout.add<int64_t>(tiles);
  const std::size_t column_counts_at = layout.add<int64_t>(tiles);
  const std::size_t span_offsets_at = layout.add<int64_t>(tiles);
  const std::size_t column_offsets_at = layout.add<int64_t>(tiles);
  const std::size_t keys_at = layout.add<uint32_t>(tiles);
  const std::size_t sorted_keys_at = layout.add<uint32_t>(tiles);
  const std::size_t indices_at = layout.add<int32_t>(tiles);
  const std::size_t temp_at = layout.add<std::byte>(
      static_cast<int64_t>(std::max(scan_bytes, sort_bytes)));

  const StreamScratch scratch(layout.bytes(), stream,
                              "vertical-slash index: cudaMallocAsync scratch");
  std::byte* base = scratch.base();
  // A slot selects no line when no estimate row sees a key (the selection then does not run).
  auto* line_counts = region<int32_t>(base, line_counts_at);
  check_cuda(cudaMemsetAsync(line_counts, 0, 2 * selections * sizeof(int32_t), stream),
             "vertical-slash index: cudaMemsetAsync line counts");
  auto* listed_tiles = region<VerticalSlashTile>(base, listed_tiles_at);
  copy_to_device(listed_tiles, build.head_tiles, stream,
                 "vertical-slash index: cudaMemcpyAsync tiles");
  write_runs(build, sections, stream);

  auto* verticals = region<int32_t>(base, verticals_at);
  auto* slashes = region<int32_t>(base, slashes_at);
  int32_t* vertical_counts = line_counts;
  int32_t* slash_counts = line_counts + selections;
  for (int64_t g = 0; g < groups; ++g) {
    const EstimateExtents& group = extents[static_cast<std::size_t>(g)];
    const EstimateScratch estimate =
        estimate_scratch(base, estimate_at[static_cast<std::size_t>(g)]);
    launch_estimate(operands, group, estimate, stream);
    if (group.scores == 0) continue;
    const int64_t first = g * slots;
    launch_select_lines(
        {estimate.column_sums, group.scores, build.vertical, build.sink,
         verticals + first * vertical_capacity, vertical_capacity, vertical_counts + first},
        {estimate.diagonal_sums, group.scores, build.slash, build.local,
         slashes + first * slash_capacity, slash_capacity, slash_counts + first},
        slots, stream);
  }

  TileGeometry geometry = tile_geometry(build.shape);
  if (!build.head_tiles.empty()) {
    geometry.listed = listed_tiles;
    geometry.tiles_per_head = build.tiles_per_head;
  }
  const SelectedLines selected{slots,   verticals,      vertical_capacity, vertical_counts,
                               slashes, slash_capacity, slash_counts};
  auto* span_counts = region<int64_t>(base, span_counts_at);
  auto* column_counts = region<int64_t>(base, column_counts_at);
  auto* span_offsets = region<int64_t>(base, span_offsets_at);
  auto* column_offsets = region<int64_t>(base, column_offsets_at);
  void* temp = base + temp_at;
  const auto blocks =
      static_cast<unsigned>(ceil_div(tiles * kWarpLanes, kThreadsPerBlock));  // a warp per tile
  count_tiles_kernel<<<blocks, kThreadsPerBlock, 0, stream>>>(geometry, selected, tiles,
                                                              span_counts, column_counts);
  check_launch("vertical-slash index: count_tiles_kernel");
  std::size_t temp_bytes = scan_bytes;
  check_cuda(cub::DeviceScan::ExclusiveSum(temp, temp_bytes, span_counts, span_offsets,
                                           item_count, stream),
             "vertical-slash index: span scan");
  temp_bytes = scan_bytes;
  check_cuda(cub::DeviceScan::ExclusiveSum(temp, temp_bytes, column_counts, column_offsets,
                                           item_count, stream),
             "vertical-slash index: column scan");

  FillTargets targets{sections,
                      make_mask_record(MaskPolicy{}, build.shape.kv_len),
                      span_offsets,
                      column_offsets,
                      region<uint32_t>(base, keys_at),
                      region<int32_t>(base, indices_at)};
  fill_tiles_kernel<<<blocks, kThreadsPerBlock, 0, stream>>>(geometry, selected, tiles, targets);
  check_launch("vertical-slash index: fill_tiles_kernel");

  // Radix sort is stable, so equal key counts keep tile order: the upload's std::stable_sort.
  temp_bytes = sort_bytes;
  check_cuda(cub::DeviceRadixSort::SortPairsDescending(
                 temp, temp_bytes, targets.tile_keys,
                 region<uint32_t>(base, sorted_keys_at), targets.tile_indices,
                 sections.schedule, item_count, 0, sort_bits, stream),
             "vertical-slash index: schedule sort");
}

}  // namespace mmsparse::cuda::index
