// The grid head with Q- or 2D-boundary on the GPU (MMInference Alg. 1 within Alg. 2 and 3): the
// host's build_dynamic_head with query_groups and GridPattern (grid.cpp) for query groups that
// hold several runs of rows and, with the 2D boundary, read several key spaces.
//
// Host, from the shape and the layout only (plan_grouped_grid): the groups (one per query
// modality) with their runs of rows and each run's coordinate in the group's own key space, the
// key spaces (2D: one per key modality; Q: all keys), each (group, space) pair's estimate rows and
// candidate strides, and capacities over every candidate. Nothing is read back.
//
// Device, stream-ordered:
//   estimate, search  per pair (methods/estimate/estimate_device.cu, methods/grid/grid_device.cu):
//   each pair's lines, [pairs, slots] arrange           a block per head slot: with the stride s of
//   its group's own-space pair, each
//                     phase's rows, tiles and runs over the group's runs of rows (phase p's run in
//                     range j starts at begin_j + (p - c_j) mod s), scanned over the phases; the
//                     runs in GridPattern::arrange's order, and whether that order is the identity
//                     (the host then stores no runs)
//   runs              copied into the plan unless the slot's order is the identity
//   count, fill       a block per tile of the capacity: its rows (pieces of its phase's runs) and,
//                     in every space of its group, the keys GridPattern::add_tile_keys adds for
//                     their frontiers there, marked in bitmaps and read off as records
//                     (key_bitmaps.cuh); CUB scans between
//   schedule          the upload's heaviest-first order by a stable radix sort, as for boundary
//                     none/K
// The lines are the searches'; for given lines every record is the host's (the bitmaps hold
// exactly TileKeys's sets).

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cub/block/block_scan.cuh>
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>
#include <string>
#include <vector>

#include "cuda/common/cub_storage.cuh"
#include "cuda/common/cuda_check.h"
#include "methods/estimate/dynamic_head.h"
#include "methods/estimate/index_kernels.h"
#include "methods/estimate/key_bitmaps.cuh"
#include "methods/estimate/modality_boundary.h"
#include "methods/grid/grid_geometry.h"
#include "mmsparse/status.h"

namespace mmsparse::cuda::index {
namespace {

using bitmaps::kThreads;
using bitmaps::kWordBits;
using bitmaps::Window;
using grid::ceil_div;
using grid::floor_mod;
using grid::max64;
using grid::min64;

constexpr int kMaxGroups = kNumModalities;
constexpr int kMaxTileRows = static_cast<int>(kMaxGroupedGridTileRows);
static_assert(kMaxTileRows <= kThreads, "a thread per tile row");

// A group as the kernels read it.
struct GroupView {
  int64_t first_range = 0, range_count = 0;
  int64_t order_begin = 0;
  int32_t own_space = 0;
};

// One run of a slot's query order: rows start + i·step (i < count) at order indices
// order_begin + i.
struct OrderRun {
  int64_t order_begin, start, count, step;
};

// The rows of phase p in a group's run of rows `range` under stride s: their first row, and
// how many there are.
__device__ inline int64_t phase_run_rows(const GridRange& range, int64_t phase, int64_t stride,
                                         int64_t& start) {
  start = range.begin + floor_mod(phase - range.coordinate, stride);
  return start < range.end ? (range.end - 1 - start) / stride + 1 : 0;
}

struct PhaseCounts {
  int64_t rows = 0, tiles = 0, runs = 0;
};
struct SumPhaseCounts {
  __device__ PhaseCounts operator()(const PhaseCounts& a, const PhaseCounts& b) const {
    return {a.rows + b.rows, a.tiles + b.tiles, a.runs + b.runs};
  }
};

// What the arrangement writes and the conversion reads, per head slot.
struct Arrangement {
  int64_t slots, groups, spaces, tile_rows;
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
    return lines[(g * spaces + group[g].own_space) * slots + slot].stride;
  }
  __device__ int64_t phase_base(int64_t slot, int64_t g) const {
    return (slot * groups + g) * phase_capacity;
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

// What the conversion reads besides the arrangement.
struct Conversion {
  Arrangement a;
  const int64_t* tile_offsets;  // [slots + 1] real tiles, packed slot by slot
  int64_t tiles;                // capacity
  int64_t causal_offset;
  detail::GridOptions options;
  KeySpaceView space[kMaxKeySpaces];
  int64_t space_keys[kMaxKeySpaces];  // each space's size (all keys: kv_len)
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

// The last index in [low, high) whose value is <= target (values ascending, values[low] <= it).
__device__ inline int64_t last_at_most(const int64_t* values, int64_t low, int64_t high,
                                       int64_t target) {
  while (high - low > 1) {
    const int64_t middle = (low + high) / 2;
    if (values[middle] <= target) {
      low = middle;
    } else {
      high = middle;
    }
  }
  return low;
}

// A phase's line in one space, for the rows of that phase: its last frontier.
struct PhaseLine {
  int64_t phase, frontier;
};

struct TileShared {
  bitmaps::TileStorage records;
  int64_t position[kMaxTileRows];                 // the tile's query positions, in order
  int64_t frontier[kMaxKeySpaces][kMaxTileRows];  // their frontiers in each space
  PhaseLine phases[kMaxKeySpaces][kMaxTileRows];  // each space's phases of the rows
  int phase_count[kMaxKeySpaces];
};

// Sets the bits of the original keys [first, last) in the window, the block's threads taking
// words in turn.
__device__ void mark_range_block(uint32_t* words, int64_t first, int64_t last,
                                 const Window& window) {
  first = max64(first, window.begin);
  last = min64(last, window.begin + bitmaps::kWindowKeys);
  if (first >= last) return;
  const int64_t first_word = (first - window.begin) / kWordBits;
  const int64_t last_word = (last - 1 - window.begin) / kWordBits;
  for (int64_t w = first_word + threadIdx.x; w <= last_word; w += kThreads) {
    const int64_t word_begin = window.begin + w * kWordBits;
    const int low = static_cast<int>(max64(first, word_begin) - word_begin);
    const int high = static_cast<int>(min64(last, word_begin + kWordBits) - word_begin);
    const uint32_t below_high = high == kWordBits ? ~0u : (1u << high) - 1u;
    atomicOr(words + w, below_high & ~((1u << low) - 1u));
  }
}

// The compact keys [begin, end) of `space` as span keys, split at its ranges, block-wide.
__device__ void mark_compact_span_block(const KeySpaceView& space, int64_t begin, int64_t end,
                                        const Window& window) {
  if (space.ranges == 0) {
    mark_range_block(window.bits->spans, begin, end, window);
    return;
  }
  if (begin >= end) return;
  for (int32_t r = space.range_of(begin); begin < end; ++r) {
    const int64_t original = space.begins[r] + begin - space.prefix[r];
    if (window.past(original)) return;
    const int64_t piece_end = min64(end, space.prefix[r + 1]);
    mark_range_block(window.bits->spans, original, original + piece_end - begin, window);
    begin = piece_end;
  }
}

// The compact keys k ≡ phase (mod stride), k < end, of `space` as column keys, block-wide.
__device__ void mark_residue_block(const KeySpaceView& space, int64_t phase, int64_t stride,
                                   int64_t end, const Window& window) {
  if (space.ranges == 0) {
    // Word by word: each word's keys of the residue at once.
    const int64_t last = min64(end, window.begin + bitmaps::kWindowKeys);
    if (last <= window.begin) return;
    const int64_t words = ceil_div(last - window.begin, kWordBits);
    for (int64_t w = threadIdx.x; w < words; w += kThreads) {
      const int64_t word_begin = window.begin + w * kWordBits;
      const int64_t word_end = min64(last, word_begin + kWordBits);
      uint32_t bits = 0;
      for (int64_t key = word_begin + floor_mod(phase - word_begin, stride); key < word_end;
           key += stride) {
        bits |= 1u << (key - word_begin);
      }
      if (bits != 0) atomicOr(window.bits->columns + w, bits);
    }
    return;
  }
  for (int64_t key = phase + threadIdx.x * stride; key < end; key += kThreads * stride) {
    const int64_t original = space.original(key);
    if (window.past(original)) return;  // this thread's keys ascend
    window.mark_column(original);
  }
}

// Tile g of the capacity: where it lies (real tiles only).
struct TileSite {
  bool real = false;
  int64_t slot = 0, position = 0, group = 0;
  int64_t order_begin = 0, rows = 0;
  int64_t first_run = 0, skip = 0;  // its first row: row `skip` of run `first_run`
};

__device__ TileSite locate(const Conversion& c, int64_t g) {
  TileSite site;
  const Arrangement& a = c.a;
  if (g >= c.tile_offsets[a.slots]) return site;
  site.real = true;
  site.slot = last_at_most(c.tile_offsets, 0, a.slots, g);
  site.position = g - c.tile_offsets[site.slot];
  const int64_t* group_tiles = a.group_tiles + site.slot * (a.groups + 1);
  site.group = last_at_most(group_tiles, 0, a.groups, site.position);
  const int64_t local = site.position - group_tiles[site.group];
  const int64_t stride = a.stride(site.group, site.slot);
  const int64_t base = a.phase_base(site.slot, site.group);
  // Phases without tiles repeat their prefix, so the last phase at or below `local` has tiles.
  const int64_t phase = last_at_most(a.phase_tiles + base, 0, stride, local);
  const int64_t first_row = (local - a.phase_tiles[base + phase]) * a.tile_rows;
  const int64_t phase_rows = a.phase_rows[base + phase + 1] - a.phase_rows[base + phase];
  site.rows = min64(a.tile_rows, phase_rows - first_row);
  site.order_begin = a.group[site.group].order_begin + a.phase_rows[base + phase] + first_row;
  // The run holding the tile's first row: runs of the phase hold consecutive order indices.
  const OrderRun* runs = a.runs + site.slot * a.runs_per_head;
  int64_t r = a.group_runs[site.slot * (a.groups + 1) + site.group] + a.phase_runs[base + phase];
  while (runs[r].order_begin + runs[r].count <= site.order_begin) ++r;
  site.first_run = r;
  site.skip = site.order_begin - runs[r].order_begin;
  return site;
}

// The tile's rows' positions into shared memory, a thread per row.
__device__ void load_positions(const Conversion& c, const TileSite& site, TileShared& shared) {
  const int64_t i = threadIdx.x;
  if (i >= site.rows) return;
  const OrderRun* runs = c.a.runs + site.slot * c.a.runs_per_head;
  int64_t r = site.first_run;
  int64_t index = site.skip + i;  // within run r
  while (index >= runs[r].count) {
    index -= runs[r].count;
    ++r;
  }
  shared.position[i] = runs[r].start + index * runs[r].step;
}

// Per space: the rows' frontiers, and each phase's last frontier among them (rows ascend, so
// frontiers do: a row is the last of its phase when no later row shares it). Returns the tile's
// last frontier there.
__device__ int64_t collect_phases(const Conversion& c, const TileSite& site, int64_t space,
                                  const detail::GridLines& lines, TileShared& shared) {
  const int64_t i = threadIdx.x;
  int64_t* frontiers = shared.frontier[space];
  if (i < site.rows) {
    frontiers[i] =
        c.space[space].frontier(shared.position[i] + c.causal_offset, c.space_keys[space]);
  }
  if (i == 0) shared.phase_count[space] = 0;
  __syncthreads();
  if (i < site.rows && frontiers[i] >= 1) {
    const int64_t phase = (frontiers[i] - 1) % lines.stride;
    bool last = true;
    for (int64_t j = i + 1; j < site.rows && last; ++j) {
      last = !(frontiers[j] >= 1 && (frontiers[j] - 1) % lines.stride == phase);
    }
    if (last) {
      const int entry = atomicAdd(&shared.phase_count[space], 1);
      shared.phases[space][entry] = {phase, frontiers[i]};
    }
  }
  return frontiers[site.rows - 1];
}

// One space's keys of the tile in the window (GridPattern::add_tile_keys), block-wide.
__device__ void mark_space(const Conversion& c, const TileSite& site, int64_t space,
                           const detail::GridLines& lines, int64_t last, const TileShared& shared,
                           const Window& window) {
  if (last < 1) return;
  const KeySpaceView& view = c.space[space];
  const detail::GridOptions& options = c.options;
  mark_compact_span_block(view, 0, min64(options.sink, last), window);
  const int64_t local = detail::tile_window(options);
  if (local > 0 && threadIdx.x < site.rows) {
    // Each row's window as a span (windows of consecutive frontiers touch: the host's merged
    // window is their union).
    const int64_t frontier = shared.frontier[space][threadIdx.x];
    if (frontier >= 1) {
      bitmaps::mark_compact_span(view, max64(0, frontier - local), frontier, window);
    }
  }
  for (int e = 0; e < shared.phase_count[space]; ++e) {
    const PhaseLine& line = shared.phases[space][e];
    if (options.hline && line.phase == lines.phase) {
      mark_compact_span_block(view, 0, line.frontier, window);
    }
    if (options.slash) mark_residue_block(view, line.phase, lines.stride, line.frontier, window);
  }
  if (options.vline) mark_residue_block(view, lines.phase, lines.stride, last, window);
}

template <bool kFill>
__global__ void __launch_bounds__(kThreads)
    grouped_grid_tiles_kernel(const Conversion c, const GroupedTargets out) {
  __shared__ TileShared shared;
  const int64_t g = blockIdx.x;
  const TileSite site = locate(c, g);
  const Arrangement& a = c.a;
  if (!site.real) {
    if (threadIdx.x != 0) return;
    if constexpr (kFill) {
      if (g == 0) out.sections.masks[0] = out.mask;
      out.sections.tiles[g] = {0, 0, 0, 0, 0, 0, 0, 0};
      out.sort_keys[g] = 0;
      out.tile_indices[g] = static_cast<int32_t>(g);
    } else {
      out.span_counts[g] = 0;
      out.column_counts[g] = 0;
    }
    return;
  }
  load_positions(c, site, shared);
  __syncthreads();
  detail::GridLines lines[kMaxKeySpaces];
  int64_t last[kMaxKeySpaces];
  int64_t key_end = 0;  // every key read lies below it
  for (int64_t s = 0; s < a.spaces; ++s) {
    lines[s] = a.lines[(site.group * a.spaces + s) * a.slots + site.slot];
    last[s] = collect_phases(c, site, s, lines[s], shared);
    if (last[s] >= 1) key_end = max64(key_end, c.space[s].original(last[s] - 1) + 1);
  }
  __syncthreads();

  SpanRecord* spans = nullptr;
  int32_t* columns = nullptr;
  if constexpr (kFill) {
    spans = out.sections.spans + out.span_offsets[g];
    columns = out.sections.columns + out.column_offsets[g];
  }
  const auto mark = [&](const Window& window) {
    for (int64_t s = 0; s < a.spaces; ++s)
      mark_space(c, site, s, lines[s], last[s], shared, window);
  };
  const bitmaps::RecordCounts total =
      bitmaps::read_tile_records<kFill>(shared.records, key_end, mark, spans, columns);

  if (threadIdx.x != 0) return;
  if constexpr (kFill) {
    if (g == 0) out.sections.masks[0] = out.mask;
    const int64_t span_begin = out.span_offsets[g];
    const int64_t column_begin = out.column_offsets[g];
    out.sections.tiles[g] = {static_cast<int32_t>(site.order_begin),
                             static_cast<int32_t>(site.order_begin + site.rows),
                             static_cast<int32_t>(site.slot),
                             0,
                             span_begin,
                             span_begin + total.starts,
                             column_begin,
                             column_begin + total.columns};
    // The upload's order (device_plan.cu, heaviest_first): more keys, lower positions, lower
    // tile indices (the stable sort keeps those).
    out.sort_keys[g] = grid_sort_key(total.keys, site.position);
    out.tile_indices[g] = static_cast<int32_t>(g);
  } else {
    out.span_counts[g] = total.starts;
    out.column_counts[g] = total.columns;
  }
}

unsigned blocks_for(int64_t threads) { return static_cast<unsigned>(ceil_div(threads, kThreads)); }

template <class T>
void copy_to_device(T* target, const std::vector<T>& values, cudaStream_t stream,
                    const char* what) {
  if (values.empty()) return;
  check_cuda(cudaMemcpyAsync(target, values.data(), values.size() * sizeof(T),
                             cudaMemcpyHostToDevice, stream),
             what);
}

// The candidate strides of a search over `keys` estimate keys (search_grid's).
GridSelection selection_for(const detail::GridOptions& options, int64_t keys) {
  GridSelection selection;
  selection.keys = keys;
  if (options.stride != 0) {
    selection.first_stride = selection.last_stride = options.stride;
  } else {
    selection.first_stride = detail::kMinStride;
    selection.last_stride =
        std::max(detail::kMinStride, std::min(options.max_stride, keys / detail::kMinGridLines));
  }
  return selection;
}

// Tiles of a group of `rows` rows under stride s: each phase's rows cut into tiles, at most
// min(s, rows) phases with rows, so at most (rows + min(s, rows)·(tile_rows − 1)) / tile_rows.
int64_t tile_bound(int64_t rows, int64_t stride, int64_t tile_rows) {
  return std::min(rows, (rows + std::min(stride, rows) * (tile_rows - 1)) / tile_rows);
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
  const bool two_d = mode == detail::BoundaryMode::kTwoD;
  if (two_d && !groups.empty()) build.spaces = groups.front().key_spaces;
  const int64_t offset = shape.causal_offset();
  const detail::GridOptions& options = build.options;
  const int64_t residues = (options.slash ? 1 : 0) + (options.vline ? 1 : 0);
  const int64_t window = detail::tile_window(options);
  int64_t order_begin = 0;
  int64_t columns_per_head = 0;
  build.first_stride = 0;
  build.last_stride = 0;
  for (const detail::QueryGroup& group : groups) {
    GridGroup planned;
    const detail::KeySpace& own = group.key_spaces[group.primary];
    planned.own_space = two_d ? static_cast<int32_t>(group.primary) : 0;
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
    planned.tiles_per_head = tile_bound(planned.rows, arranged.last_stride, shape.tile_rows);
    for (const detail::IndexRange& rows : group.rows) {
      planned.runs_per_head += std::min(arranged.last_stride, rows.end - rows.begin);
    }
    // Columns (docs/index_builders.md, "Grid with a Q/2D boundary"): in the own space a tile reads
    // at most `residues` residue classes below the group's last frontier F, F / s + 1 keys each;
    // in another space at most the keys the group sees there.
    const int64_t own_keys = visible[group.primary];
    int64_t own_columns = 0;
    for (int64_t stride = arranged.first_stride; stride <= arranged.last_stride; ++stride) {
      own_columns =
          std::max(own_columns, tile_bound(planned.rows, stride, shape.tile_rows) *
                                    std::min(own_keys, residues * (own_keys / stride + 1)));
    }
    int64_t other_keys = 0;
    for (std::size_t s = 0; s < visible.size(); ++s) {
      if (s != group.primary) other_keys += visible[s];
    }
    columns_per_head += own_columns + planned.tiles_per_head * other_keys;
    build.tiles_per_head += planned.tiles_per_head;
    build.runs_per_head += planned.runs_per_head;
    build.groups.push_back(std::move(planned));
  }
  // Spans: per space, the sink and hline prefixes give at most one piece per range of the space,
  // and each row's window at most min(window, ranges) pieces.
  int64_t spans_per_tile = 0;
  const std::vector<detail::KeySpace> all_keys = {detail::KeySpace::all_keys(shape.kv_len)};
  for (const detail::KeySpace& space : build.spaces.empty() ? all_keys : build.spaces) {
    const int64_t ranges = std::max<int64_t>(1, static_cast<int64_t>(space.ranges().size()));
    spans_per_tile += ranges + (window > 0 ? shape.tile_rows * std::min(window, ranges) : 0);
  }
  check_grid_positions(resolved_spec.name, shape, build.last_stride);
  build.span_capacity = build.tiles_per_head * spans_per_tile * shape.head_slots();
  build.column_capacity = columns_per_head * shape.head_slots();
}

bool fits_estimate(const GridBuild& build) {
  return std::all_of(build.groups.begin(), build.groups.end(),
                     [](const GridGroup& group) { return fits_estimate(group.estimate_rows); });
}

void build_grouped_grid(const GridBuild& build, const EstimateOperands& operands,
                        const PlanSections& sections, detail::GridLines* chosen,
                        cudaStream_t stream) {
  const int64_t tiles = build.tiles();
  const int64_t slots = build.shape.head_slots();
  const auto groups = static_cast<int64_t>(build.groups.size());
  const int64_t spaces = build.space_count();
  const auto selections = static_cast<int64_t>(build.selections.size());
  const bool two_d = !build.spaces.empty();
  // Every pair's estimate extents first: they throw (naming last_q) for groups whose last rows do
  // not fit the estimate, before anything is queued.
  std::vector<EstimateExtents> extents;
  for (int64_t e = 0; e < selections; ++e) {
    const GridGroup& group = build.groups[static_cast<std::size_t>(e / spaces)];
    const int64_t s = e % spaces;
    extents.push_back(two_d ? estimate_extents(operands, group.estimate_rows,
                                               build.spaces[static_cast<std::size_t>(s)],
                                               group.own_space == s, "grid")
                            : estimate_extents(operands, group.estimate_rows, "grid"));
  }
  const auto item_count = static_cast<int>(tiles);
  const auto slot_items = static_cast<int>(slots + 1);
  const int sort_bits = grid_sort_bits(build.shape.kv_len);
  const std::size_t scan_bytes =
      scan_storage_bytes(item_count, stream, "grouped grid index: scan storage");
  const std::size_t slot_scan_bytes =
      scan_storage_bytes(slot_items, stream, "grouped grid index: slot scan storage");
  const std::size_t sort_bytes = sort_storage_bytes<uint64_t>(item_count, sort_bits, stream,
                                                              "grouped grid index: sort storage");

  std::vector<GridRange> ranges;
  for (const GridGroup& group : build.groups) {
    ranges.insert(ranges.end(), group.ranges.begin(), group.ranges.end());
  }
  std::vector<int64_t> range_begins;
  std::vector<int64_t> range_prefixes;
  for (const detail::KeySpace& space : build.spaces) {
    for (const detail::IndexRange& range : space.ranges()) range_begins.push_back(range.begin);
    range_prefixes.insert(range_prefixes.end(), space.prefix().begin(), space.prefix().end());
  }
  int64_t phase_capacity = 0;
  for (const GridSelection& selection : build.selections) {
    phase_capacity = std::max(phase_capacity, selection.last_stride + 1);
  }

  ScratchLayout layout;
  const std::size_t lines_at = layout.add<detail::GridLines>(selections * slots);
  const std::size_t ranges_at = layout.add<GridRange>(static_cast<int64_t>(ranges.size()));
  const std::size_t begins_at = layout.add<int64_t>(static_cast<int64_t>(range_begins.size()));
  const std::size_t prefixes_at = layout.add<int64_t>(static_cast<int64_t>(range_prefixes.size()));
  const int64_t phase_entries = slots * groups * phase_capacity;
  const std::size_t phase_rows_at = layout.add<int64_t>(phase_entries);
  const std::size_t phase_tiles_at = layout.add<int64_t>(phase_entries);
  const std::size_t phase_runs_at = layout.add<int64_t>(phase_entries);
  const std::size_t order_runs_at = layout.add<OrderRun>(build.runs());
  const std::size_t group_tiles_at = layout.add<int64_t>(slots * (groups + 1));
  const std::size_t group_runs_at = layout.add<int64_t>(slots * (groups + 1));
  const std::size_t run_counts_at = layout.add<int64_t>(slots + 1);
  const std::size_t tile_counts_at = layout.add<int64_t>(slots + 1);
  const std::size_t tile_offsets_at = layout.add<int64_t>(slots + 1);
  const GridTileRegions tiles_at = add_grid_tile_regions(layout, tiles);
  const std::size_t temp_at = layout.add<std::byte>(
      static_cast<int64_t>(std::max({scan_bytes, slot_scan_bytes, sort_bytes})));
  const StreamScratch scratch(layout.bytes(), stream,
                              "grouped grid index: cudaMallocAsync scratch");
  std::byte* base = scratch.base();
  auto* run_counts = region<int64_t>(base, run_counts_at);
  auto* tile_counts = region<int64_t>(base, tile_counts_at);
  // The slot count arrays end in a 0 so that their exclusive sums end in the totals.
  check_cuda(cudaMemsetAsync(run_counts, 0, (slots + 1) * sizeof(int64_t), stream),
             "grouped grid index: cudaMemsetAsync run counts");
  check_cuda(cudaMemsetAsync(tile_counts, 0, (slots + 1) * sizeof(int64_t), stream),
             "grouped grid index: cudaMemsetAsync tile counts");
  auto* device_ranges = region<GridRange>(base, ranges_at);
  copy_to_device(device_ranges, ranges, stream, "grouped grid index: cudaMemcpyAsync ranges");
  auto* begins = region<int64_t>(base, begins_at);
  auto* prefixes = region<int64_t>(base, prefixes_at);
  copy_to_device(begins, range_begins, stream,
                 "grouped grid index: cudaMemcpyAsync key space ranges");
  copy_to_device(prefixes, range_prefixes, stream,
                 "grouped grid index: cudaMemcpyAsync key space prefixes");

  Conversion convert{};
  convert.causal_offset = build.shape.causal_offset();
  convert.options = build.options;
  convert.tiles = tiles;
  convert.space_keys[0] = build.shape.kv_len;  // Q boundary: all keys
  int64_t first_range = 0;
  for (std::size_t s = 0; s < build.spaces.size(); ++s) {
    const detail::KeySpace& space = build.spaces[s];
    const auto space_ranges = static_cast<int64_t>(space.ranges().size());
    convert.space_keys[s] = space.size();
    if (!space.is_identity()) {
      convert.space[s] = {begins + first_range, prefixes + first_range + static_cast<int64_t>(s),
                          static_cast<int32_t>(space_ranges), true};
    }
    first_range += space_ranges;
  }

  // Each pair's estimate and search in scratch of its own, freed in stream order before the next
  // pair's is allocated (the pool reuses it): the softmax rows are the largest arrays.
  auto* lines = region<detail::GridLines>(base, lines_at);
  for (int64_t e = 0; e < selections; ++e) {
    const EstimateExtents& pair = extents[static_cast<std::size_t>(e)];
    const GridSelection& selection = build.selections[static_cast<std::size_t>(e)];
    ScratchLayout pair_layout;
    const EstimateRegions estimate_at = add_estimate_regions(pair_layout, pair, true);
    const GridSearchRegions search_at =
        add_grid_search_regions(pair_layout, slots, pair.scores, selection.strides());
    const StreamScratch pair_scratch(pair_layout.bytes(), stream,
                                     "grouped grid index: cudaMallocAsync estimate scratch");
    const EstimateScratch estimate = estimate_scratch(pair_scratch.base(), estimate_at);
    launch_estimate(operands, pair, estimate, stream,
                    two_d ? convert.space[e % spaces] : KeySpaceView{});
    launch_grid_search({&pair, estimate.probabilities, build.options, selection.first_stride,
                        selection.last_stride, lines + e * slots,
                        chosen != nullptr ? chosen + e * slots : nullptr},
                       pair_scratch.base(), search_at, stream);
  }

  Arrangement& arrange = convert.a;
  arrange.slots = slots;
  arrange.groups = groups;
  arrange.spaces = spaces;
  arrange.tile_rows = build.shape.tile_rows;
  arrange.phase_capacity = phase_capacity;
  arrange.runs_per_head = build.runs_per_head;
  int64_t group_range = 0;
  for (int64_t g = 0; g < groups; ++g) {
    const GridGroup& group = build.groups[static_cast<std::size_t>(g)];
    arrange.group[g] = {group_range, static_cast<int64_t>(group.ranges.size()), group.order_begin,
                        group.own_space};
    group_range += static_cast<int64_t>(group.ranges.size());
  }
  arrange.ranges = device_ranges;
  arrange.lines = lines;
  arrange.phase_rows = region<int64_t>(base, phase_rows_at);
  arrange.phase_tiles = region<int64_t>(base, phase_tiles_at);
  arrange.phase_runs = region<int64_t>(base, phase_runs_at);
  arrange.runs = region<OrderRun>(base, order_runs_at);
  arrange.group_tiles = region<int64_t>(base, group_tiles_at);
  arrange.group_runs = region<int64_t>(base, group_runs_at);
  arrange.run_counts = run_counts;
  arrange.tile_counts = tile_counts;
  grouped_grid_arrange_kernel<<<static_cast<unsigned>(slots), kThreads, 0, stream>>>(arrange);
  check_launch("grouped grid index: grouped_grid_arrange_kernel");

  auto* tile_offsets = region<int64_t>(base, tile_offsets_at);
  void* temp = base + temp_at;
  std::size_t temp_bytes = slot_scan_bytes;
  check_cuda(cub::DeviceScan::ExclusiveSum(temp, temp_bytes, run_counts, sections.head_run_offsets,
                                           slot_items, stream),
             "grouped grid index: run scan");
  temp_bytes = slot_scan_bytes;
  check_cuda(cub::DeviceScan::ExclusiveSum(temp, temp_bytes, tile_counts, tile_offsets, slot_items,
                                           stream),
             "grouped grid index: tile scan");
  if (build.runs() > 0) {
    grouped_grid_runs_kernel<<<blocks_for(build.runs()), kThreads, 0, stream>>>(
        arrange, sections.head_run_offsets, sections.runs);
    check_launch("grouped grid index: grouped_grid_runs_kernel");
  }

  convert.tile_offsets = tile_offsets;
  GroupedTargets targets{sections,
                         make_mask_record(MaskPolicy{}, build.shape.kv_len),
                         region<int64_t>(base, tiles_at.span_offsets),
                         region<int64_t>(base, tiles_at.column_offsets),
                         region<uint64_t>(base, tiles_at.sort_keys),
                         region<int32_t>(base, tiles_at.tile_indices),
                         region<int64_t>(base, tiles_at.span_counts),
                         region<int64_t>(base, tiles_at.column_counts)};
  grouped_grid_tiles_kernel<false>
      <<<static_cast<unsigned>(tiles), kThreads, 0, stream>>>(convert, targets);
  check_launch("grouped grid index: count tiles");
  scan_grid_record_counts(temp, scan_bytes, base, tiles_at, item_count, stream,
                          "grouped grid index");
  grouped_grid_tiles_kernel<true>
      <<<static_cast<unsigned>(tiles), kThreads, 0, stream>>>(convert, targets);
  check_launch("grouped grid index: fill tiles");

  sort_grid_schedule(temp, sort_bytes, base, tiles_at, sections.schedule, item_count, sort_bits,
                     stream, "grouped grid index");
}

}  // namespace mmsparse::cuda::index
