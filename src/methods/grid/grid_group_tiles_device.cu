// The grouped grid's (Q/2D/item boundary) tile conversion on the GPU: a block per tile of the
// capacity finds its rows (pieces of its phase's runs, from the arrangement of
// grid_groups_device.cu) and, in every key space of its group, the keys GridPattern::add_tile_keys
// adds for their frontiers there, and the item sinks its rows see (build_dynamic_head), marked in
// bitmaps and read off as records (key_bitmaps.cuh). The count pass sizes each
// tile's records; after the caller's scans the fill pass writes them.

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "cuda/common/cuda_check.h"
#include "methods/estimate/dynamic_head.h"
#include "methods/estimate/index_kernels.h"
#include "methods/estimate/key_bitmaps.cuh"
#include "methods/estimate/modality_boundary.h"
#include "methods/grid/grid_geometry.h"
#include "methods/grid/grid_groups.cuh"
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
using grouped::Arrangement;
using grouped::Conversion;
using grouped::GroupedTargets;
using grouped::OrderRun;

constexpr int kMaxTileRows = static_cast<int>(kMaxGroupedGridTileRows);
static_assert(kMaxTileRows <= kThreads, "a thread per tile row");

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
    frontiers[i] = c.view(site.group, space)
                       .frontier(shared.position[i] + c.causal_offset, c.keys(site.group, space));
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

// How many item sinks lie at or before original position `last_aligned` (none without them).
__device__ int64_t visible_sinks(const Conversion& c, int64_t last_aligned) {
  int64_t low = 0;
  int64_t high = c.sink_count;
  while (low < high) {  // the first sink beyond last_aligned
    const int64_t middle = (low + high) / 2;
    if (c.sink_keys[middle] <= last_aligned) {
      low = middle + 1;
    } else {
      high = middle;
    }
  }
  return low;
}

// One space's keys of the tile in the window (GridPattern::add_tile_keys), block-wide.
__device__ void mark_space(const Conversion& c, const TileSite& site, int64_t space,
                           const detail::GridLines& lines, int64_t last, const TileShared& shared,
                           const Window& window) {
  if (last < 1) return;
  const KeySpaceView view = c.view(site.group, space);
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
  const grouped::GroupView& group = a.group[site.group];
  // The item sinks the tile's last row sees (rows ascend), and every key read lies below key_end.
  const int64_t sinks = visible_sinks(c, shared.position[site.rows - 1] + c.causal_offset);
  int64_t key_end = sinks > 0 ? c.sink_keys[sinks - 1] + 1 : 0;
  for (int64_t s = 0; s < group.spaces; ++s) {
    lines[s] = a.lines[(group.first_pair + s) * a.slots + site.slot];
    last[s] = collect_phases(c, site, s, lines[s], shared);
    if (last[s] >= 1) key_end = max64(key_end, c.view(site.group, s).original(last[s] - 1) + 1);
  }
  __syncthreads();

  SpanRecord* spans = nullptr;
  int32_t* columns = nullptr;
  if constexpr (kFill) {
    spans = out.sections.spans + out.span_offsets[g];
    columns = out.sections.columns + out.column_offsets[g];
  }
  const auto mark = [&](const Window& window) {
    for (int64_t s = 0; s < group.spaces; ++s)
      mark_space(c, site, s, lines[s], last[s], shared, window);
    for (int64_t j = threadIdx.x; j < sinks; j += kThreads) window.mark_column(c.sink_keys[j]);
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

}  // namespace

void grouped::launch_grouped_grid_tiles(const Conversion& convert, const GroupedTargets& targets,
                                        bool fill, cudaStream_t stream) {
  if (fill) {
    grouped_grid_tiles_kernel<true>
        <<<static_cast<unsigned>(convert.tiles), kThreads, 0, stream>>>(convert, targets);
  } else {
    grouped_grid_tiles_kernel<false>
        <<<static_cast<unsigned>(convert.tiles), kThreads, 0, stream>>>(convert, targets);
  }
}

}  // namespace mmsparse::cuda::index
