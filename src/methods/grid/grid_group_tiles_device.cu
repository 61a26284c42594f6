// The grouped grid's (Q/2D/item boundary, or item sinks) tile conversion on the GPU: a block per
// tile of the capacity finds its rows (pieces of its phase's runs, from the arrangement of
// grid_groups_device.cu) and, in every key space of its group, the keys GridPattern::add_tile_keys
// adds for their frontiers there, and the item sinks its rows see (build_dynamic_head): spans, line
// keys outside the strided spans and item sinks off them marked in bitmaps and read off as records
// (key_bitmaps.cuh), the lines' strided spans found from the tile's own frontiers (the lattice
// pieces of grid_group_lattices.cuh). The count pass sizes each tile's records; after the caller's
// scans the fill pass writes them.

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "cuda/common/cuda_check.h"
#include "methods/estimate/dynamic_head.h"
#include "methods/estimate/index_kernels.h"
#include "methods/estimate/key_bitmaps.cuh"
#include "methods/estimate/modality_boundary.h"
#include "methods/grid/grid_geometry.h"
#include "methods/grid/grid_group_lattices.cuh"
#include "methods/grid/grid_groups.cuh"
#include "mmsparse/status.h"

namespace mmsparse::cuda::index {
namespace {

using bitmaps::kThreads;
using bitmaps::kWordBits;
using bitmaps::Window;
using grid::ceil_div;
using grid::max64;
using grid::min64;
using grouped::Arrangement;
using grouped::Conversion;
using grouped::for_each_lattice_piece;
using grouped::GroupedTargets;
using grouped::LatticeCut;
using grouped::mark_lattice_columns;
using grouped::on_strided_span;
using grouped::OrderRun;
using grouped::PhaseLine;
using grouped::residue_of;
using grouped::SpaceLattices;

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

struct TileShared {
  bitmaps::TileStorage records;
  int64_t position[kMaxTileRows];                   // the tile's query positions, in order
  int64_t frontier[kMaxKeySpaces][kMaxTileRows];    // their frontiers in each space
  PhaseLine phases[kMaxKeySpaces][kMaxTileRows];    // each space's phases of the rows
  int32_t row_phase[kMaxKeySpaces][kMaxTileRows];   // each row's phase there (-1: no key)
  unsigned long long longest_range[kMaxKeySpaces];  // the longest range of each space
  int phase_count[kMaxKeySpaces];
  int piece_count;                // the tile's strided spans
  unsigned long long piece_keys;  // and the keys they hold
};

// A kernel's static shared memory is at most 48 KB.
constexpr std::size_t kMaxStaticSharedBytes = std::size_t{48} << 10;
static_assert(sizeof(TileShared) <= kMaxStaticSharedBytes, "the tile's shared memory");

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

// The item sinks [0, sinks) of the tile in the window as columns, but those on a strided span of
// one of the group's `spaces`: TileKeys::write drops a column a strided span holds, so the sink
// is not listed twice.
__device__ void mark_item_sinks(const Conversion& c, int64_t sinks, const SpaceLattices* lattices,
                                int64_t spaces, const Window& window) {
  for (int64_t j = threadIdx.x; j < sinks; j += kThreads) {
    const int64_t key = c.sink_keys[j];
    if (key < window.begin || window.past(key)) continue;
    bool strided = false;
    for (int64_t s = 0; s < spaces && !strided; ++s) strided = on_strided_span(lattices[s], key);
    if (!strided) window.mark_column(key);
  }
}

// The space's strided spans, appended at `out` (fill pass; null in the count pass) in the order
// threads claim them, and counted with their keys in `shared`.
__device__ void append_strided_spans(const SpaceLattices& l,
                                     SpanRecord* out,  // [the tile's strided spans]
                                     TileShared& shared) {
  if (!l.strided_spans) return;
  for_each_lattice_piece(l, [&](const LatticeCut& piece) {
    if (piece.strided == 0) return;
    const int index = atomicAdd(&shared.piece_count, 1);
    atomicAdd(&shared.piece_keys, static_cast<unsigned long long>(piece.strided));
    if (out == nullptr) return;
    const int64_t begin = piece.first + piece.offset;
    out[index] = {static_cast<int32_t>(begin),
                  static_cast<int32_t>(begin + (piece.strided - 1) * l.stride + 1),
                  static_cast<int32_t>(l.stride), 1};
  });
}

// Sorts the tile's `count` strided spans by first key (unique: see SpaceLattices), the order
// TileKeys::write gives them, by odd-even transposition in place; block-wide, count uniform.
__device__ void sort_by_begin(SpanRecord* records /* [count] */, int count) {
  for (int round = 0; round < count; ++round) {
    for (int i = 2 * static_cast<int>(threadIdx.x) + (round & 1); i + 1 < count;
         i += 2 * kThreads) {
      if (records[i].begin > records[i + 1].begin) {
        const SpanRecord swapped = records[i];
        records[i] = records[i + 1];
        records[i + 1] = swapped;
      }
    }
    __syncthreads();
  }
}

// Tile g of the capacity: where it lies (real tiles only).
struct TileSite {
  bool real = false;
  int64_t slot = 0, position = 0, group = 0;
  int64_t order_begin = 0, rows = 0;
  int64_t first_run = 0, skip = 0;  // its first row: row `skip` of run `first_run`
  int64_t end_run = 0;              // the end of its phase's runs
};

// The last run in [low, high) that begins at or before order index `target` (runs[low] does; runs
// ascend by order index): a binary search, since a phase of short runs has many.
__device__ inline int64_t last_run_at_most(const OrderRun* runs, int64_t low, int64_t high,
                                           int64_t target) {
  while (high - low > 1) {
    const int64_t middle = (low + high) / 2;
    if (runs[middle].order_begin <= target) {
      low = middle;
    } else {
      high = middle;
    }
  }
  return low;
}

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
  const int64_t group_runs = a.group_runs[site.slot * (a.groups + 1) + site.group];
  site.end_run = group_runs + a.phase_runs[base + phase + 1];
  site.first_run = last_run_at_most(runs, group_runs + a.phase_runs[base + phase], site.end_run,
                                    site.order_begin);
  site.skip = site.order_begin - runs[site.first_run].order_begin;
  return site;
}

// The tile's rows' positions into shared memory, a thread per row.
__device__ void load_positions(const Conversion& c, const TileSite& site, TileShared& shared) {
  const int64_t i = threadIdx.x;
  if (i >= site.rows) return;
  const OrderRun* runs = c.a.runs + site.slot * c.a.runs_per_head;
  // Every run holds a row at least, so row i lies within the i + 1 runs from the first.
  const int64_t order = site.order_begin + i;
  const int64_t r =
      last_run_at_most(runs, site.first_run, min64(site.first_run + i + 1, site.end_run), order);
  shared.position[i] = runs[r].start + (order - runs[r].order_begin) * runs[r].step;
}

// Per space: the rows' frontiers, and each phase's last frontier among them (rows ascend, so
// frontiers do: a row is the last of its phase when no later row shares it). Returns the tile's
// last frontier there.
__device__ int64_t collect_phases(const Conversion& c, const TileSite& site, int64_t space,
                                  const detail::GridLines& lines, TileShared& shared) {
  const int64_t i = threadIdx.x;
  int64_t* frontiers = shared.frontier[space];
  int32_t* row_phases = shared.row_phase[space];
  if (i < site.rows) {
    frontiers[i] = c.view(site.group, space)
                       .frontier(shared.position[i] + c.causal_offset, c.keys(site.group, space));
    row_phases[i] =
        frontiers[i] >= 1 ? static_cast<int32_t>(residue_of(frontiers[i] - 1, lines.stride)) : -1;
  }
  if (i == 0) shared.phase_count[space] = 0;
  __syncthreads();
  if (i < site.rows && row_phases[i] >= 0) {
    const int32_t phase = row_phases[i];
    bool last = true;
    for (int64_t j = i + 1; j < site.rows && last; ++j) last = row_phases[j] != phase;
    if (last) {
      const int entry = atomicAdd(&shared.phase_count[space], 1);
      shared.phases[space][entry] = {phase, static_cast<int32_t>(frontiers[i])};
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

// The longest range of `view` into `longest` (0 before; block-wide, read after a barrier).
__device__ void note_longest_range(const KeySpaceView& view, unsigned long long& longest) {
  for (int32_t r = static_cast<int32_t>(threadIdx.x); r < view.ranges; r += kThreads) {
    atomicMax(&longest, static_cast<unsigned long long>(view.prefix[r + 1] - view.prefix[r]));
  }
}

// The space's lattices of the tile (after collect_phases and note_longest_range).
__device__ SpaceLattices space_lattices(const Conversion& c, const TileSite& site, int64_t space,
                                        const detail::GridLines& lines, int64_t last,
                                        const TileShared& shared) {
  const detail::GridOptions& options = c.options;
  SpaceLattices l;
  l.view = c.view(site.group, space);
  l.stride = lines.stride;
  l.vline_phase = lines.phase;
  l.window = detail::tile_window(options);
  l.last = last;
  l.frontiers = shared.frontier[space];
  l.phases = shared.phases[space];
  l.rows = static_cast<int>(site.rows);
  l.phase_count = last >= 1 ? shared.phase_count[space] : 0;
  l.slash = options.slash;
  l.vline = options.vline && last >= 1;
  l.prefix = min64(options.sink, last);
  bool vline_is_slash = false;
  for (int e = 0; e < l.phase_count; ++e) {
    if (l.phases[e].phase != lines.phase) continue;
    if (options.hline) l.prefix = max64(l.prefix, l.phases[e].frontier);
    vline_is_slash = l.slash;
  }
  l.vline_alone = l.vline && !vline_is_slash;
  // A piece lies within one range and below `last`; kGatherChunkKeys keys of one residue span
  // more than (kGatherChunkKeys - 1) strides.
  const int64_t longest =
      l.view.ranges == 0 ? last : min64(last, static_cast<int64_t>(shared.longest_range[space]));
  l.strided_spans = longest > (kGatherChunkKeys - 1) * l.stride;
  return l;
}

// One space's keys of the tile in the window (GridPattern::add_tile_keys) but its strided spans,
// block-wide.
__device__ void mark_space(const TileSite& site, int64_t space, const SpaceLattices& lattices,
                           const TileShared& shared, const Window& window) {
  const int64_t last = lattices.last;
  if (last < 1) return;
  const KeySpaceView& view = lattices.view;
  // The sink and hline prefix [0, prefix) as one span (the host's spans there merge).
  mark_compact_span_block(view, 0, lattices.prefix, window);
  const int64_t local = lattices.window;
  if (local > 0 && threadIdx.x < site.rows) {
    // Each row's window as a span (windows of consecutive frontiers touch: the host's merged
    // window is their union).
    const int64_t frontier = shared.frontier[space][threadIdx.x];
    if (frontier >= 1) {
      bitmaps::mark_compact_span(view, max64(0, frontier - local), frontier, window);
    }
  }
  mark_lattice_columns(lattices, window);
}

// A capacity tile past the real ones: no rows, no records, sorted last.
template <bool kFill>
__device__ void write_empty_tile(const GroupedTargets& out, int64_t g) {
  if constexpr (kFill) {
    if (g == 0) out.sections.masks[0] = out.mask;
    out.sections.tiles[g] = {0, 0, 0, 0, 0, 0, 0, 0};
    out.sort_keys[g] = 0;
    out.tile_indices[g] = static_cast<int32_t>(g);
  } else {
    out.span_counts[g] = 0;
    out.column_counts[g] = 0;
  }
}

template <bool kFill>
__global__ void __launch_bounds__(kThreads)
    grouped_grid_tiles_kernel(const Conversion c, const GroupedTargets out) {
  __shared__ TileShared shared;
  const int64_t g = blockIdx.x;
  const TileSite site = locate(c, g);
  const Arrangement& a = c.a;
  if (!site.real) {
    if (threadIdx.x == 0) write_empty_tile<kFill>(out, g);
    return;
  }
  load_positions(c, site, shared);
  if (threadIdx.x < kMaxKeySpaces) shared.longest_range[threadIdx.x] = 0;
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
    note_longest_range(c.view(site.group, s), shared.longest_range[s]);
    if (last[s] >= 1) key_end = max64(key_end, c.view(site.group, s).original(last[s] - 1) + 1);
  }
  if (threadIdx.x == 0) {
    shared.piece_count = 0;
    shared.piece_keys = 0;
  }
  __syncthreads();
  SpaceLattices lattices[kMaxKeySpaces];
  for (int64_t s = 0; s < group.spaces; ++s) {
    lattices[s] = space_lattices(c, site, s, lines[s], last[s], shared);
  }

  SpanRecord* spans = nullptr;
  int32_t* columns = nullptr;
  if constexpr (kFill) {
    spans = out.sections.spans + out.span_offsets[g];
    columns = out.sections.columns + out.column_offsets[g];
  }
  const auto mark = [&](const Window& window) {
    for (int64_t s = 0; s < group.spaces; ++s) mark_space(site, s, lattices[s], shared, window);
    mark_item_sinks(c, sinks, lattices, group.spaces, window);
  };
  const bitmaps::RecordCounts total =
      bitmaps::read_tile_records<kFill>(shared.records, key_end, mark, spans, columns);
  // The strided spans after the spans, sorted by first key as TileKeys::write sorts them.
  SpanRecord* strided = kFill ? spans + total.starts : nullptr;
  for (int64_t s = 0; s < group.spaces; ++s) append_strided_spans(lattices[s], strided, shared);
  __syncthreads();
  const int strided_count = shared.piece_count;
  if constexpr (kFill) sort_by_begin(strided, strided_count);
  const int64_t range_count = total.starts + strided_count;
  const int64_t keys = total.keys + static_cast<int64_t>(shared.piece_keys);

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
                             span_begin + range_count,
                             column_begin,
                             column_begin + total.columns};
    // The upload's order (device_plan.cu, heaviest_first): more keys, lower positions, lower
    // tile indices (the stable sort keeps those).
    out.sort_keys[g] = grid_sort_key(keys, site.position);
    out.tile_indices[g] = static_cast<int32_t>(g);
  } else {
    out.span_counts[g] = range_count;
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
