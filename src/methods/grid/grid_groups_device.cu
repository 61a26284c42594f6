// The grid head with Q- or 2D-boundary on the GPU (MMInference Alg. 1 within Alg. 2 and 3): the
// host's build_dynamic_head with query_groups and GridPattern (grid.cpp) for query groups that
// hold several runs of rows and, with the 2D boundary, read several key spaces.
//
// Host, from the shape and the layout only (plan_grouped_grid, grid_group_plan_device.cu): the
// groups (one per query modality) with their runs of rows and each run's coordinate in the group's
// own key space, the key spaces (2D: one per key modality; Q: all keys), each (group, space) pair's
// estimate rows and candidate strides, and capacities over every candidate. Nothing is read back.
//
// Device, stream-ordered:
//   estimate, search  per pair (methods/estimate/estimate_device.cu,
//                     methods/grid/grid_search_device.cu): each pair's lines, [pairs, slots]
//   arrange           a block per head slot: with the stride s of its group's own-space pair, each
//                     phase's rows, tiles and runs over the group's runs of rows (phase p's run in
//                     range j starts at begin_j + (p - c_j) mod s), scanned over the phases; the
//                     runs in GridPattern::arrange's order, and whether that order is the identity
//                     (the host then stores no runs)
//   runs              copied into the plan unless the slot's order is the identity
//   count, fill       a block per tile of the capacity (grid_group_tiles_device.cu): its rows
//                     (pieces of its phase's runs) and, in every space of its group, the keys
//                     GridPattern::add_tile_keys adds for their frontiers there: spans and columns
//                     marked in bitmaps and read off as records (key_bitmaps.cuh), the lines'
//                     strided spans cut between the spans range by range; CUB scans between
//   schedule          the upload's heaviest-first order by a stable radix sort, as for boundary
//                     none/K
// The lines are the searches'; for given lines every record is the host's (the bitmaps hold
// exactly TileKeys's span and column sets in LatticeKeys::kStridedSpansInRanges, the strided spans
// are its lattice pieces).

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cub/block/block_scan.cuh>
#include <vector>

#include "cuda/common/cub_storage.cuh"
#include "cuda/common/cuda_check.h"
#include "cuda/common/forked_streams.h"
#include "methods/estimate/dynamic_head.h"
#include "methods/estimate/index_kernels.h"
#include "methods/estimate/item_spaces.h"
#include "methods/estimate/key_bitmaps.cuh"
#include "methods/estimate/modality_boundary.h"
#include "methods/grid/grid_geometry.h"
#include "methods/grid/grid_groups.cuh"

namespace mmsparse::cuda::index {
namespace {

using bitmaps::kThreads;
using grid::ceil_div;
using grouped::Arrangement;
using grouped::Conversion;
using grouped::GroupView;
using grouped::GroupedTargets;
using grouped::OrderRun;
using grouped::phase_run_rows;

struct PhaseCounts {
  int64_t rows = 0, tiles = 0, runs = 0;
};
struct SumPhaseCounts {
  __device__ PhaseCounts operator()(const PhaseCounts& a, const PhaseCounts& b) const {
    return {a.rows + b.rows, a.tiles + b.tiles, a.runs + b.runs};
  }
};

// A block per head slot: each group's phases counted and scanned, then its runs written.
__global__ void __launch_bounds__(kThreads) grouped_grid_arrange_kernel(const Arrangement a) {
  using Scan = cub::BlockScan<PhaseCounts, kThreads>;
  __shared__ typename Scan::TempStorage scan_storage;
  __shared__ int identity;
  const int64_t slot = blockIdx.x;
  const int x = static_cast<int>(threadIdx.x);
  if (x == 0) identity = 1;
  PhaseCounts slot_total;
  for (int64_t g = 0; g < a.groups; ++g) {
    const GroupView& view = a.group[g];
    const GridRange* ranges = a.ranges + view.first_range;
    const int64_t stride = a.stride(g, slot);
    const int64_t base = a.phase_base(slot, g);
    PhaseCounts carry;
    for (int64_t chunk = 0; chunk < stride; chunk += kThreads) {
      const int64_t phase = chunk + x;
      PhaseCounts mine;
      if (phase < stride) {
        for (int64_t j = 0; j < view.range_count; ++j) {
          int64_t start = 0;
          const int64_t rows = phase_run_rows(ranges[j], phase, stride, start);
          mine.rows += rows;
          mine.runs += rows > 0 ? 1 : 0;
        }
        mine.tiles = ceil_div(mine.rows, a.tile_rows);
      }
      PhaseCounts before;
      PhaseCounts chunk_total;
      Scan(scan_storage).ExclusiveScan(mine, before, PhaseCounts{}, SumPhaseCounts{}, chunk_total);
      if (phase < stride) {
        a.phase_rows[base + phase] = carry.rows + before.rows;
        a.phase_tiles[base + phase] = carry.tiles + before.tiles;
        a.phase_runs[base + phase] = carry.runs + before.runs;
      }
      carry = SumPhaseCounts{}(carry, chunk_total);
      __syncthreads();  // the scan storage is read before the next chunk reuses it
    }
    if (x == 0) {
      a.phase_rows[base + stride] = carry.rows;
      a.phase_tiles[base + stride] = carry.tiles;
      a.phase_runs[base + stride] = carry.runs;
      a.group_tiles[slot * (a.groups + 1) + g] = slot_total.tiles;
      a.group_runs[slot * (a.groups + 1) + g] = slot_total.runs;
    }
    __syncthreads();
    // Phase by phase, its runs over the ranges (GridPattern::arrange); the order is the identity
    // exactly when every run is one row at its own order index.
    for (int64_t phase = x; phase < stride; phase += kThreads) {
      int64_t order = view.order_begin + a.phase_rows[base + phase];
      int64_t r = slot_total.runs + a.phase_runs[base + phase];
      for (int64_t j = 0; j < view.range_count; ++j) {
        int64_t start = 0;
        const int64_t rows = phase_run_rows(ranges[j], phase, stride, start);
        if (rows == 0) continue;
        a.runs[slot * a.runs_per_head + r++] = {order, start, rows, stride};
        if (start != order || rows != 1) atomicAnd(&identity, 0);
        order += rows;
      }
    }
    slot_total = SumPhaseCounts{}(slot_total, carry);
  }
  __syncthreads();
  if (x != 0) return;
  a.group_tiles[slot * (a.groups + 1) + a.groups] = slot_total.tiles;
  a.group_runs[slot * (a.groups + 1) + a.groups] = slot_total.runs;
  a.tile_counts[slot] = slot_total.tiles;
  a.run_counts[slot] = identity != 0 ? 0 : slot_total.runs;
}

// A thread per (head slot, run of the capacity): the stored runs at the scanned offsets.
__global__ void grouped_grid_runs_kernel(const Arrangement a, const int64_t* head_run_offsets,
                                         RunRecord* out) {
  const int64_t index = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (index >= a.slots * a.runs_per_head) return;
  const int64_t slot = index / a.runs_per_head;
  const int64_t r = index % a.runs_per_head;
  if (r >= a.run_counts[slot]) return;
  const OrderRun& run = a.runs[index];
  out[head_run_offsets[slot] + r] = {static_cast<int32_t>(run.order_begin),
                                     static_cast<int32_t>(run.start),
                                     static_cast<int32_t>(run.step)};
}

unsigned blocks_for(int64_t threads) { return static_cast<unsigned>(ceil_div(threads, kThreads)); }

// Each pair stream's scratch region starts at a multiple of this (CUDA allocations' alignment).
constexpr std::size_t kLaneAlignment = 256;

std::size_t round_up(std::size_t bytes, std::size_t multiple) {
  return (bytes + multiple - 1) / multiple * multiple;
}

template <class T>
void copy_to_device(T* target, const std::vector<T>& values, cudaStream_t stream,
                    const char* what) {
  if (values.empty()) return;
  check_cuda(cudaMemcpyAsync(target, values.data(), values.size() * sizeof(T),
                             cudaMemcpyHostToDevice, stream),
             what);
}

// Every (group, space) pair's estimate extents, in pair order. They throw (naming last_q) for
// groups whose last rows do not fit the estimate, so they are all taken before anything is queued.
std::vector<EstimateExtents> pair_extents(const GridBuild& build,
                                          const EstimateOperands& operands) {
  std::vector<EstimateExtents> extents;
  for (const GridGroup& group : build.groups) {
    for (int64_t s = 0; s < group.spaces; ++s) {
      const detail::KeySpace* space = build.pair_space(group.first_pair + s);
      extents.push_back(space != nullptr ? estimate_extents(operands, group.estimate_rows, *space,
                                                            group.own_space == s, "grid")
                                         : estimate_extents(operands, group.estimate_rows, "grid"));
    }
  }
  return extents;
}

// What the host hands the kernels: every group's runs of rows (group by group), each key space's
// range begins and prefixes (space by space), and the most phases of any candidate stride + 1.
struct HostArrays {
  std::vector<GridRange> ranges;
  std::vector<int64_t> range_begins;
  std::vector<int64_t> range_prefixes;
  int64_t phase_capacity = 0;
};

HostArrays host_arrays(const GridBuild& build) {
  HostArrays host;
  for (const GridGroup& group : build.groups) {
    host.ranges.insert(host.ranges.end(), group.ranges.begin(), group.ranges.end());
  }
  for (const detail::KeySpace& space : build.spaces) {
    for (const detail::IndexRange& range : space.ranges()) host.range_begins.push_back(range.begin);
    host.range_prefixes.insert(host.range_prefixes.end(), space.prefix().begin(),
                               space.prefix().end());
  }
  for (const GridSelection& selection : build.selections) {
    host.phase_capacity = std::max(host.phase_capacity, selection.last_stride + 1);
  }
  return host;
}

// CUB's temporary storage sizes for the tile scans, the slot scans and the schedule sort.
struct TempBytes {
  std::size_t scan = 0, slot_scan = 0, sort = 0;
};

// The offsets of the build's arrays in its scratch allocation.
struct GroupedRegions {
  std::size_t lines, ranges, begins, prefixes;
  std::size_t pair_views, pair_keys, sink_keys;  // item boundary, item sinks
  std::size_t phase_rows, phase_tiles, phase_runs;
  std::size_t order_runs, group_tiles, group_runs;
  std::size_t run_counts, tile_counts, tile_offsets;
  GridTileRegions tiles;
  std::size_t temp;
};

GroupedRegions add_grouped_regions(ScratchLayout& layout, const GridBuild& build,
                                   const HostArrays& host, const TempBytes& temp) {
  const int64_t slots = build.shape.head_slots();
  const auto groups = static_cast<int64_t>(build.groups.size());
  const auto selections = static_cast<int64_t>(build.selections.size());
  GroupedRegions at{};
  at.lines = layout.add<detail::GridLines>(selections * slots);
  at.ranges = layout.add<GridRange>(static_cast<int64_t>(host.ranges.size()));
  at.begins = layout.add<int64_t>(static_cast<int64_t>(host.range_begins.size()));
  at.prefixes = layout.add<int64_t>(static_cast<int64_t>(host.range_prefixes.size()));
  const int64_t pairs = build.pair_spaces ? static_cast<int64_t>(build.spaces.size()) : 0;
  at.pair_views = layout.add<KeySpaceView>(pairs);
  at.pair_keys = layout.add<int64_t>(pairs);
  at.sink_keys = layout.add<int64_t>(static_cast<int64_t>(build.sink_keys.size()));
  const int64_t phase_entries = slots * groups * host.phase_capacity;
  at.phase_rows = layout.add<int64_t>(phase_entries);
  at.phase_tiles = layout.add<int64_t>(phase_entries);
  at.phase_runs = layout.add<int64_t>(phase_entries);
  at.order_runs = layout.add<OrderRun>(build.runs());
  at.group_tiles = layout.add<int64_t>(slots * (groups + 1));
  at.group_runs = layout.add<int64_t>(slots * (groups + 1));
  at.run_counts = layout.add<int64_t>(slots + 1);
  at.tile_counts = layout.add<int64_t>(slots + 1);
  at.tile_offsets = layout.add<int64_t>(slots + 1);
  at.tiles = add_grid_tile_regions(layout, build.tiles());
  at.temp =
      layout.add<std::byte>(static_cast<int64_t>(std::max({temp.scan, temp.slot_scan, temp.sort})));
  return at;
}

// The conversion's shape and key spaces from `views` (items::space_views of build.spaces): by
// value for the spaces every group shares, else (item boundary) each pair's view and size in the
// scratch at `base`; and the item sinks there. The pairs' arrays are copied in stream order.
Conversion conversion_of(const GridBuild& build, const std::vector<KeySpaceView>& views,
                         std::byte* base, const GroupedRegions& at, cudaStream_t stream) {
  Conversion convert{};
  convert.causal_offset = build.shape.causal_offset();
  convert.options = build.options;
  convert.tiles = build.tiles();
  convert.space_keys[0] = build.shape.kv_len;  // Q boundary: all keys
  if (build.pair_spaces) {
    std::vector<int64_t> sizes;
    for (const detail::KeySpace& space : build.spaces) sizes.push_back(space.size());
    convert.pair_space = region<KeySpaceView>(base, at.pair_views);
    convert.pair_keys = region<int64_t>(base, at.pair_keys);
    copy_to_device(region<KeySpaceView>(base, at.pair_views), views, stream,
                   "grouped grid index: cudaMemcpyAsync item pair views");
    copy_to_device(region<int64_t>(base, at.pair_keys), sizes, stream,
                   "grouped grid index: cudaMemcpyAsync item pair sizes");
  } else {
    for (std::size_t s = 0; s < build.spaces.size(); ++s) {
      convert.space[s] = views[s];
      convert.space_keys[s] = build.spaces[s].size();
    }
  }
  if (!build.sink_keys.empty()) {
    convert.sink_keys = region<int64_t>(base, at.sink_keys);
    convert.sink_count = static_cast<int64_t>(build.sink_keys.size());
    copy_to_device(region<int64_t>(base, at.sink_keys), build.sink_keys, stream,
                   "grouped grid index: cudaMemcpyAsync item sinks");
  }
  return convert;
}

// Each pair's scratch regions for its estimate and search.
struct PairRegions {
  EstimateRegions estimate;
  GridSearchRegions search;
};

// Each pair's estimate and search into lines [pairs, slots] (and `chosen`, when given). A
// pair's chain of launches is small (an estimate over one key space of a few heads, a search), so
// the pairs of each key space run on a stream of their own, forked from `stream` and joined back:
// pairs of one space (one per group) one after another, sharing one scratch region sized for the
// largest of them (the softmax rows are the largest arrays). The spaces partition the keys, so the
// regions together hold about one estimate over all keys, as one region did for pairs in turn.
void search_pairs(const GridBuild& build, const EstimateOperands& operands,
                  const std::vector<EstimateExtents>& extents,
                  const std::vector<KeySpaceView>& views, detail::GridLines* lines,
                  detail::GridLines* chosen, cudaStream_t stream) {
  const int64_t slots = build.shape.head_slots();
  const int64_t spaces = build.space_count();
  const bool two_d = !build.spaces.empty();
  const auto pairs = static_cast<int64_t>(build.selections.size());
  if (pairs == 0) return;
  if (detail::grid_lines_fixed(build.options)) {
    launch_fixed_grid_lines(build.options, pairs * slots, lines, chosen, stream);
    return;
  }
  std::vector<PairRegions> regions;
  std::vector<int64_t> lane_of_pair;  // the pair's index among its group's pairs
  std::vector<std::size_t> lane_bytes;
  for (const GridGroup& group : build.groups) {
    for (int64_t s = 0; s < group.spaces; ++s) {
      const EstimateExtents& pair = extents[static_cast<std::size_t>(group.first_pair + s)];
      ScratchLayout pair_layout;
      PairRegions at;
      at.estimate = add_estimate_regions(pair_layout, pair, true);
      at.search = add_grid_search_regions(
          pair_layout, slots, pair.scores,
          build.selections[static_cast<std::size_t>(group.first_pair + s)].strides());
      regions.push_back(at);
      lane_of_pair.push_back(s);
      if (static_cast<int64_t>(lane_bytes.size()) <= s) lane_bytes.resize(s + 1, 0);
      lane_bytes[s] = std::max(lane_bytes[s], round_up(pair_layout.bytes(), kLaneAlignment));
    }
  }
  std::vector<std::size_t> lane_offsets{0};
  for (std::size_t bytes : lane_bytes) lane_offsets.push_back(lane_offsets.back() + bytes);
  const StreamScratch pair_scratch(lane_offsets.back(), stream,
                                   "grouped grid index: estimate scratch");
  ForkedStreams lanes(lane_bytes.size(), stream, "grouped grid index: pair streams");
  for (int64_t e = 0; e < pairs; ++e) {
    const EstimateExtents& pair = extents[static_cast<std::size_t>(e)];
    const GridSelection& selection = build.selections[static_cast<std::size_t>(e)];
    const PairRegions& at = regions[static_cast<std::size_t>(e)];
    const auto lane = static_cast<std::size_t>(lane_of_pair[static_cast<std::size_t>(e)]);
    std::byte* lane_base = pair_scratch.base() + lane_offsets[lane];
    const EstimateScratch estimate = estimate_scratch(lane_base, at.estimate);
    const int64_t view = build.pair_spaces ? e : e % spaces;
    launch_estimate(operands, pair, estimate, lanes[lane],
                    two_d ? views[static_cast<std::size_t>(view)] : KeySpaceView{});
    launch_grid_search({&pair, estimate.probabilities, build.options, selection.first_stride,
                        selection.last_stride, lines + e * slots,
                        chosen != nullptr ? chosen + e * slots : nullptr},
                       lane_base, at.search, lanes[lane]);
  }
  lanes.join();
}

// The arrangement's sizes, groups and arrays in the scratch at `base`.
Arrangement arrangement_of(const GridBuild& build, int64_t phase_capacity, std::byte* base,
                           const GroupedRegions& at) {
  Arrangement arrange{};
  arrange.slots = build.shape.head_slots();
  arrange.groups = static_cast<int64_t>(build.groups.size());
  arrange.tile_rows = build.shape.tile_rows;
  arrange.phase_capacity = phase_capacity;
  arrange.runs_per_head = build.runs_per_head;
  int64_t group_range = 0;
  for (int64_t g = 0; g < arrange.groups; ++g) {
    const GridGroup& group = build.groups[static_cast<std::size_t>(g)];
    arrange.group[g] = {group_range,
                        static_cast<int64_t>(group.ranges.size()),
                        group.order_begin,
                        group.own_space,
                        static_cast<int32_t>(group.spaces),
                        group.first_pair};
    group_range += static_cast<int64_t>(group.ranges.size());
  }
  arrange.ranges = region<GridRange>(base, at.ranges);
  arrange.lines = region<detail::GridLines>(base, at.lines);
  arrange.phase_rows = region<int64_t>(base, at.phase_rows);
  arrange.phase_tiles = region<int64_t>(base, at.phase_tiles);
  arrange.phase_runs = region<int64_t>(base, at.phase_runs);
  arrange.runs = region<OrderRun>(base, at.order_runs);
  arrange.group_tiles = region<int64_t>(base, at.group_tiles);
  arrange.group_runs = region<int64_t>(base, at.group_runs);
  arrange.run_counts = region<int64_t>(base, at.run_counts);
  arrange.tile_counts = region<int64_t>(base, at.tile_counts);
  return arrange;
}

// CUB storage for the scans and the sort over `item_count` tiles and `slot_items` slot counts.
TempBytes temp_bytes_for(int item_count, int slot_items, int sort_bits, cudaStream_t stream) {
  TempBytes temp_bytes;
  temp_bytes.scan = scan_storage_bytes(item_count, stream, "grouped grid index: scan storage");
  temp_bytes.slot_scan =
      scan_storage_bytes(slot_items, stream, "grouped grid index: slot scan storage");
  temp_bytes.sort = sort_storage_bytes<uint64_t>(item_count, sort_bits, stream,
                                                 "grouped grid index: sort storage");
  return temp_bytes;
}

// Zeroes the `slots` + 1 slot counts and copies the host arrays into their regions.
void upload_host_arrays(const HostArrays& host, int64_t slots, std::byte* base,
                        const GroupedRegions& at, cudaStream_t stream) {
  // The slot count arrays end in a 0 so that their exclusive sums end in the totals.
  const std::size_t count_bytes = (slots + 1) * sizeof(int64_t);
  check_cuda(cudaMemsetAsync(region<int64_t>(base, at.run_counts), 0, count_bytes, stream),
             "grouped grid index: cudaMemsetAsync run counts");
  check_cuda(cudaMemsetAsync(region<int64_t>(base, at.tile_counts), 0, count_bytes, stream),
             "grouped grid index: cudaMemsetAsync tile counts");
  copy_to_device(region<GridRange>(base, at.ranges), host.ranges, stream,
                 "grouped grid index: cudaMemcpyAsync ranges");
  copy_to_device(region<int64_t>(base, at.begins), host.range_begins, stream,
                 "grouped grid index: cudaMemcpyAsync key space ranges");
  copy_to_device(region<int64_t>(base, at.prefixes), host.range_prefixes, stream,
                 "grouped grid index: cudaMemcpyAsync key space prefixes");
}

}  // namespace

void build_grouped_grid(const GridBuild& build, const EstimateOperands& operands,
                        const PlanSections& sections, detail::GridLines* chosen,
                        cudaStream_t stream, StageMarks* marks) {
  const auto mark = [&](const char* stage) {
    if (marks != nullptr) marks->mark(stage, stream);
  };
  const int64_t tiles = build.tiles();
  const int64_t slots = build.shape.head_slots();
  const std::vector<EstimateExtents> extents = pair_extents(build, operands);
  const auto item_count = static_cast<int>(tiles);
  const auto slot_items = static_cast<int>(slots + 1);
  const int sort_bits = grid_sort_bits(build.shape.kv_len);
  const TempBytes temp_bytes = temp_bytes_for(item_count, slot_items, sort_bits, stream);
  const HostArrays host = host_arrays(build);

  ScratchLayout layout;
  const GroupedRegions at = add_grouped_regions(layout, build, host, temp_bytes);
  const StreamScratch scratch(layout.bytes(), stream,
                              "grouped grid index: scratch");
  std::byte* base = scratch.base();
  upload_host_arrays(host, slots, base, at, stream);
  auto* run_counts = region<int64_t>(base, at.run_counts);
  auto* tile_counts = region<int64_t>(base, at.tile_counts);

  const std::vector<KeySpaceView> views = items::space_views(
      build.spaces, region<int64_t>(base, at.begins), region<int64_t>(base, at.prefixes));
  Conversion convert = conversion_of(build, views, base, at, stream);
  mark("scratch and copies");
  search_pairs(build, operands, extents, views, region<detail::GridLines>(base, at.lines), chosen,
               stream);
  mark("estimate and search, all pairs");

  convert.a = arrangement_of(build, host.phase_capacity, base, at);
  grouped_grid_arrange_kernel<<<static_cast<unsigned>(slots), kThreads, 0, stream>>>(convert.a);
  check_launch("grouped grid index: grouped_grid_arrange_kernel");

  auto* tile_offsets = region<int64_t>(base, at.tile_offsets);
  void* temp = base + at.temp;
  scan_grid_slot_counts(temp, temp_bytes.slot_scan, run_counts, sections.head_run_offsets,
                        tile_counts, tile_offsets, slot_items, stream, "grouped grid index");
  if (build.runs() > 0) {
    grouped_grid_runs_kernel<<<blocks_for(build.runs()), kThreads, 0, stream>>>(
        convert.a, sections.head_run_offsets, sections.runs);
    check_launch("grouped grid index: grouped_grid_runs_kernel");
  }

  mark("arrange and runs");
  convert.tile_offsets = tile_offsets;
  const GroupedTargets targets{sections,
                               make_mask_record(MaskPolicy{}, build.shape.kv_len),
                               region<int64_t>(base, at.tiles.span_offsets),
                               region<int64_t>(base, at.tiles.column_offsets),
                               region<uint64_t>(base, at.tiles.sort_keys),
                               region<int32_t>(base, at.tiles.tile_indices),
                               region<int64_t>(base, at.tiles.span_counts),
                               region<int64_t>(base, at.tiles.column_counts)};
  grouped::launch_grouped_grid_tiles(convert, targets, false, stream);
  check_launch("grouped grid index: count tiles");
  scan_grid_record_counts(temp, temp_bytes.scan, base, at.tiles, item_count, stream,
                          "grouped grid index");
  mark("tile count and scan");
  grouped::launch_grouped_grid_tiles(convert, targets, true, stream);
  check_launch("grouped grid index: fill tiles");
  mark("tile fill");

  sort_grid_schedule(temp, temp_bytes.sort, base, at.tiles, sections.schedule, item_count,
                     sort_bits, stream, "grouped grid index");
  mark("schedule");
}

}  // namespace mmsparse::cuda::index
