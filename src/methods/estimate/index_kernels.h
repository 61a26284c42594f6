#pragma once
// The kernel steps of the GPU index builders (index_builders.h), launched in stream order by the
// builder:
//   methods/estimate/estimate_extents.cu  which rows an estimate takes and the scratch it needs
//   methods/estimate/estimate_device.cu   last-q estimate -> column sums and diagonal sums of every
//                                         head slot
//   methods/estimate/top_k_device.cu      top-k of each score array with forced lines and the
//                                         host's tie order
//   methods/vertical_slash/vertical_slash_device.cu  the tiles' arrangement, the estimates and
//                                         the line selection (and the driver)
//   methods/vertical_slash/tile_records_device.cu  selected lines -> tiles, spans, columns,
//                                         schedule
//   methods/vertical_slash/key_spaces_device.cu  the same conversion for 2D-boundary tiles, which
//                                         read several key spaces
//   methods/grid/grid_search_device.cu    softmax rows -> stride and phase search
//   methods/grid/grid_device.cu           the lines -> runs, tiles, spans, columns, schedule (and
//                                         the driver)
//   methods/grid/grid_groups_device.cu    the grid's arrangement for Q/2D boundary, whose query
//                                         groups hold several runs of rows and may read several
//                                         key spaces (its driver; grid_group_plan_device.cu plans)
//   methods/grid/grid_group_tiles_device.cu  their tiles' conversion

#include <cuda_runtime.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "methods/estimate/index_builders.h"
#include "cuda/runtime/plan_view.cuh"
#include "cuda/common/stream_scratch.h"
#include "mmsparse/layout.h"
#include "mmsparse/plan.h"
#include "methods/grid/grid.h"
#include "methods/estimate/modality_boundary.h"

namespace mmsparse::cuda::index {

// --- Scratch ---------------------------------------------------------------------------------

// --- Estimate --------------------------------------------------------------------------------

// Keys per estimate block: the block scores the group's estimate rows against them.
inline constexpr int64_t kEstimateChunkKeys = 64;
// Bounds of what one estimate takes: its rows, and the diagonal partials each key chunk gets (one
// per estimate row plus a chunk's).
inline constexpr int64_t kMaxEstimateRows = 1024;
// Diagonal entries a block holds per key chunk: every estimate row's plus a chunk's.
inline constexpr int64_t kMaxEstimateDiagonals = kMaxEstimateRows + kEstimateChunkKeys - 1;
inline constexpr int64_t kMaxEstimateHeadDim = 128;
inline constexpr int64_t kEstimateHeadDimStep = 16;  // the MMA's k extent
// Operand rows load as 16-byte vectors of 16-bit elements.
inline constexpr int64_t kEstimateVectorElements = 8;
inline constexpr std::size_t kEstimateVectorBytes = 16;

// A run of estimate rows at consecutive query positions: its i-th row is query `position + i` and
// sees the keys [0, frontier + i * step) of the estimate's key space (none while that is <= 0).
// The last rows of q are one segment; a Q- or 2D-boundary group's last rows are one per run of its
// modality among them.
struct EstimateSegment {
  int64_t position = 0;
  int64_t frontier = 0;
  int64_t rows = 0;
  // 1 where each row's own token is a key of the space (all keys; a 2D group's own modality), 0 in
  // another modality's space: a run of one modality's rows sees the same keys of the others.
  int64_t step = 1;
};
// The most segments one estimate takes (they travel to the kernels by value).
inline constexpr int64_t kMaxEstimateSegments = 16;

// The keys an estimate or a conversion reads, on the device (detail::KeySpace): compact key c of
// range r is original key begins[r] + c - prefix[r]. No ranges: all keys, compact = original.
inline constexpr int kMaxKeySpaces = kNumModalities;
struct KeySpaceView {
  const int64_t* begins = nullptr;  // [ranges] each range's first original key
  const int64_t* prefix = nullptr;  // [ranges + 1] compact index of each range's first key
  int32_t ranges = 0;
  // Whether compact keys are not original positions (KeySpace::is_identity() is false): the 2D
  // conversion then reads slash bands narrower than half a key chunk as columns.
  bool compact = false;

  __device__ int32_t range_of(int64_t key) const {
    int32_t low = 0;
    int32_t high = ranges - 1;
    while (low < high) {  // the last range whose first compact key is <= key
      const int32_t middle = (low + high + 1) / 2;
      if (prefix[middle] <= key) {
        low = middle;
      } else {
        high = middle - 1;
      }
    }
    return low;
  }
  __device__ int64_t original(int64_t key) const {
    if (ranges == 0) return key;
    const int32_t r = range_of(key);
    return begins[r] + key - prefix[r];
  }
  // Keys of the space at or before original position `aligned` (KeySpace::frontier); `keys` is
  // the space's size when it has no ranges (all keys).
  __device__ int64_t frontier(int64_t aligned, int64_t keys) const {
    if (ranges == 0) return aligned < 0 ? 0 : (aligned + 1 < keys ? aligned + 1 : keys);
    if (aligned < begins[0]) return 0;
    int32_t low = 0;
    int32_t high = ranges - 1;
    while (low < high) {  // the last range that begins at or before `aligned`
      const int32_t middle = (low + high + 1) / 2;
      if (begins[middle] <= aligned) {
        low = middle;
      } else {
        high = middle - 1;
      }
    }
    const int64_t length = prefix[low + 1] - prefix[low];
    const int64_t seen = aligned - begins[low] + 1;
    return prefix[low] + (seen < length ? seen : length);
  }
};

// The estimate's extents, all from the shape, the layout and last_q.
struct EstimateExtents {
  int64_t slots = 0;   // batch * estimated query heads
  int64_t rows = 0;    // estimate rows: the segments' rows, in order
  int64_t chunks = 0;  // ceil(scores / kEstimateChunkKeys)
  int64_t scores = 0;  // score array length: keys some estimate row sees (the last row's frontier)
  int64_t segment_count = 0;
  std::array<EstimateSegment, kMaxEstimateSegments> segments{};
  // Each chunk's diagonal partials: a segment's rows meet rows + kEstimateChunkKeys - 1 diagonals
  // of a chunk's keys, the segments one after another.
  int64_t diagonal_entries() const;
};
// The last min(last_q, q_len) queries of q over all keys (boundary none or K): one segment.
EstimateExtents estimate_extents(const EstimateOperands& operands, int64_t last_q);
// The queries at the ascending `positions` over all keys (a Q-boundary group's last rows), in
// segments of consecutive positions. Throws kUnsupported naming "<pattern> parameter last_q" when
// they take more than kMaxEstimateSegments segments or more diagonal entries than a chunk's block
// holds (kMaxEstimateRows + kEstimateChunkKeys - 1): such heads build on the host.
EstimateExtents estimate_extents(const EstimateOperands& operands,
                                 std::span<const int64_t> positions, const std::string& pattern);
// A 2D-boundary (query group, key space) pair: the group's estimate rows at the ascending
// `positions` over the keys of `space` in its compact coordinates, the frontiers advancing with the
// rows where the space is the group's own modality (`own`). Throws as above.
EstimateExtents estimate_extents(const EstimateOperands& operands,
                                 std::span<const int64_t> positions, const detail::KeySpace& space,
                                 bool own, const std::string& pattern);
// Whether estimate_extents(operands, positions, pattern) takes these positions.
bool fits_estimate(std::span<const int64_t> positions);
// The spec's last_q, checked for the GPU estimate (at most kMaxEstimateRows rows); throws
// kUnsupported naming the parameter otherwise.
int64_t checked_estimate_queries(const PatternSpec& resolved_spec, const PlanShape& shape);
// The spec's boundary mode; throws kUnsupported naming the parameter unless it is at most
// `last_served` (the builder serves the modes 0 ... last_served).
detail::BoundaryMode checked_boundary(const PatternSpec& resolved_spec,
                                      detail::BoundaryMode last_served);

// Device scratch of the estimate, laid out by the driver.
struct EstimateScratch {
  float* partial_max = nullptr;         // [slots, rows, chunks] row maximum per chunk
  double* partial_sum = nullptr;        // [slots, rows, chunks] sum of exp(score - max) per chunk
  float* row_max = nullptr;             // [slots, rows]
  double* row_sum = nullptr;            // [slots, rows]
  double* diagonal_partials = nullptr;  // [slots, chunks, diagonal_entries] per chunk
  double* column_sums = nullptr;        // [slots, scores] vertical scores by key
  double* diagonal_sums = nullptr;      // [slots, scores] slash scores by offset frontier-1-key
  // [slots, rows, scores] the softmax itself, when not null (the grid search reads every row);
  // written where a row sees the key, other entries are left as they are.
  float* probabilities = nullptr;
};

// Where the estimate's arrays lie in a builder's scratch: regions added to `layout` for the
// extents (the softmax rows too when `probabilities`), then the pointers into the allocation.
struct EstimateRegions {
  std::size_t partial_max = 0, partial_sum = 0, row_max = 0, row_sum = 0;
  std::size_t diagonal_partials = 0, column_sums = 0, diagonal_sums = 0;
  std::optional<std::size_t> probabilities;
};
EstimateRegions add_estimate_regions(ScratchLayout& layout, const EstimateExtents& extents,
                                     bool probabilities);
EstimateScratch estimate_scratch(std::byte* base, const EstimateRegions& regions);

// Column and diagonal sums of the softmax of every head slot's estimate rows over the keys of
// `keys` (all keys by default): the host's Estimate::column_sums / diagonal_sums.
void launch_estimate(const EstimateOperands& operands, const EstimateExtents& extents,
                     const EstimateScratch& scratch, cudaStream_t stream,
                     const KeySpaceView& keys = {});

// --- Selection -------------------------------------------------------------------------------

// One score array per head slot and the lines kept of it: top_k(scores, budget, forced) of
// estimation.h, ascending.
struct LineSelection {
  const double* scores = nullptr;  // [slots, size]
  int64_t size = 0;
  int64_t budget = 0;  // >= forced (checked by the caller, as the host does)
  int64_t forced = 0;
  int32_t* lines = nullptr;  // [slots, capacity] selected indices, ascending
  int64_t capacity = 0;      // >= min(budget, size)
  int32_t* counts = nullptr;  // [slots] lines selected
};
// Both selections of every head slot, one block each.
void launch_select_lines(const LineSelection& first, const LineSelection& second, int64_t slots,
                         cudaStream_t stream);

// --- Plans ------------------------------------------------------------------------------------

// The sections of a plan buffer the builders write (the header sections before them are zero).
struct PlanSections {
  int64_t* head_run_offsets = nullptr;  // [head slots + 1]
  RunRecord* runs = nullptr;            // [run capacity]
  TileRecord* tiles = nullptr;   // [tiles]
  int32_t* schedule = nullptr;   // [tiles]
  MaskRecord* masks = nullptr;   // [masks]
  SpanRecord* spans = nullptr;   // [span capacity]
  int32_t* columns = nullptr;    // [column capacity]
};

// One query tile of a vertical-slash head slot: its rows [begin, end) in the head's query order,
// the frontiers [low, high] of those rows (consecutive query positions: one run; keys are read
// below high, none when high < 1) and the query group whose lines it reads.
struct VerticalSlashTile {
  int64_t begin = 0, end = 0;
  int64_t low = 0, high = 0;
  int32_t group = 0;
};

// A tile's rows in one key space of a 2D-boundary head: the compact frontiers [low, high] (one
// run: consecutive in the group's own space, one frontier in the others); none when high < 1.
struct SpaceFrontiers {
  int64_t low = 0, high = 0;
};

// What a vertical-slash plan needs, all from the spec, the shape and the layout: the host sizes
// the buffer from it before any kernel runs.
struct VerticalSlashBuild {
  PlanShape shape;
  int64_t vertical = 0, slash = 0, sink = 0, local = 0;  // budgets and forced lines
  int64_t last_q = 0;
  int64_t tiles_per_head = 0;
  int64_t span_capacity = 0;    // over all head slots: the most spans the tiles can get
  int64_t column_capacity = 0;  // likewise for columns
  // Boundary Q (MMInference Alg. 2): the query order's runs (every head slot's), each tile of a
  // head slot, and each query group's estimate rows (its last query positions, ascending).
  // Boundary none/K: all empty (the identity order, tiles of tile_rows, the last last_q rows).
  std::vector<QueryRun> order_runs;
  std::vector<VerticalSlashTile> head_tiles;
  std::vector<std::vector<int64_t>> group_rows;
  // Boundary 2D (MMInference Alg. 3), the Q-boundary order and tiles with: the key spaces every
  // group reads (one per key modality, ascending), each group's own space, and each tile's
  // frontiers in every space ([tiles_per_head, spaces]). A selection per (group, space) pair.
  std::vector<detail::KeySpace> spaces;
  std::vector<int32_t> own_space;
  std::vector<SpaceFrontiers> tile_frontiers;
  // Item boundary (items::PairTable): `spaces` holds every (group, space) pair's space, group g's
  // from first_pair[g]; tile_frontiers has pair_width entries per tile ({0, 0} past its group's
  // spaces). Empty otherwise.
  std::vector<int32_t> first_pair;
  int64_t pair_width = 0;
  // Per-item sinks (item_sinks > 0): the sink keys, and how many of them each tile reads
  // ([tiles_per_head]). Such heads take the key-space conversion (all keys as one space without a
  // 2D or item boundary).
  std::vector<int64_t> sink_keys;
  std::vector<int32_t> tile_sinks;

  int64_t tiles() const { return shape.head_slots() * tiles_per_head; }
  int64_t runs() const { return shape.head_slots() * static_cast<int64_t>(order_runs.size()); }
  int64_t groups() const {
    return group_rows.empty() ? 1 : static_cast<int64_t>(group_rows.size());
  }
  int64_t space_count() const {
    if (!first_pair.empty()) return pair_width;
    return spaces.empty() ? 1 : static_cast<int64_t>(spaces.size());
  }
  int64_t selections() const {
    return first_pair.empty() ? groups() * space_count() : first_pair.back();
  }
  // The selection of group g's s-th space, and that space.
  int64_t pair(int64_t g, int64_t s) const {
    return first_pair.empty() ? g * space_count() + s : first_pair[static_cast<std::size_t>(g)] + s;
  }
  int64_t group_spaces(int64_t g) const {
    return first_pair.empty() ? space_count() : pair(g + 1, 0) - pair(g, 0);
  }
  const detail::KeySpace& space_of(int64_t g, int64_t s) const {
    return spaces[static_cast<std::size_t>(first_pair.empty() ? s : pair(g, s))];
  }
};
// Checks the spec as the host builder does (budgets, last_q, any boundary mode; a Q- or 2D-boundary
// layout as query_groups requires it) and lays out its query order and tiles.
VerticalSlashBuild plan_vertical_slash(const PatternSpec& resolved_spec, const PlanShape& shape,
                                       const ModalityLayout* layout);
// Whether the GPU estimate takes the build's query groups (fits_estimate for each).
bool fits_estimate(const VerticalSlashBuild& build);
// Estimates, selects and converts into `sections` (runs, tile records, schedule, mask, spans,
// columns).
void build_vertical_slash(const VerticalSlashBuild& build, const EstimateOperands& operands,
                          const PlanSections& sections, cudaStream_t stream);

// A run of a grid query group's rows (consecutive query positions [begin, end)) and the compact
// coordinate of its first row in the group's own key space (its frontier there less one).
struct GridRange {
  int64_t begin = 0, end = 0;
  int64_t coordinate = 0;
};

// A Q- or 2D-boundary grid query group (one query modality), from the shape and the layout.
struct GridGroup {
  std::vector<GridRange> ranges;       // ascending
  std::vector<int64_t> estimate_rows;  // its last last_q rows, ascending
  int32_t own_space = 0;               // the space of its own tokens: its arrangement's pair
  int64_t first_pair = 0;              // its (group, space) pairs: [first_pair, + spaces)
  int64_t spaces = 0;
  int64_t rows = 0;                    // query rows in all
  int64_t order_begin = 0;             // order index of its first row: the rows of earlier groups
  int64_t tiles_per_head = 0;          // capacities over the candidate strides
  int64_t runs_per_head = 0;
};

// One (group, key space) pair's search: the estimate's keys (its last row's frontier in the
// space) and the candidate strides.
struct GridSelection {
  int64_t keys = 0;
  int64_t first_stride = 0, last_stride = 0;
  int64_t strides() const { return last_stride - first_stride + 1; }
};

// What a grid plan needs, all from the spec, the shape and (Q/2D boundary) the layout. The number
// of runs and tiles of a head slot depends on the stride found, so the runs, tiles, spans and
// columns sections are sized for every candidate stride (docs/index_builders.md, "Grid"): the
// real records at the front, the tiles after them empty (no rows, no keys) and scheduled last.
struct GridBuild {
  PlanShape shape;
  detail::GridOptions options;
  int64_t last_q = 0;
  int64_t first_stride = 0;  // the candidate strides [first_stride, last_stride]: one when fixed
  int64_t last_stride = 0;   // (boundary none/K; per selection below for Q/2D)
  int64_t runs_per_head = 0;  // capacities per head slot
  int64_t tiles_per_head = 0;
  int64_t span_capacity = 0;  // over all head slots
  int64_t column_capacity = 0;
  // Boundary Q and 2D (MMInference Alg. 2 and 3): the query groups, the key spaces every group
  // reads (2D: one per key modality; Q: none, meaning all keys) and a selection per (group g,
  // space s) pair at g * space_count() + s. Boundary none/K: all empty.
  std::vector<GridGroup> groups;
  std::vector<detail::KeySpace> spaces;
  std::vector<GridSelection> selections;
  // Item boundary: each group reads spaces of its own, so `spaces` holds every pair's space in
  // pair order (GridGroup::first_pair) instead of the spaces all groups share.
  bool pair_spaces = false;
  // Per-item sinks (item_sinks > 0, Q/2D/item boundary): the sink keys, ascending; every tile
  // reads those up to its last row as columns.
  std::vector<int64_t> sink_keys;

  int64_t strides() const { return last_stride - first_stride + 1; }
  int64_t runs() const { return shape.head_slots() * runs_per_head; }
  int64_t tiles() const { return shape.head_slots() * tiles_per_head; }
  int64_t space_count() const { return spaces.empty() ? 1 : static_cast<int64_t>(spaces.size()); }
  bool grouped() const { return !groups.empty(); }
  // Pair e's space (Q boundary: none, all keys).
  const detail::KeySpace* pair_space(int64_t e) const {
    if (spaces.empty()) return nullptr;
    return &spaces[static_cast<std::size_t>(pair_spaces ? e : e % space_count())];
  }
};
// Checks the spec as the host builder does (parameters, last_q, any boundary mode; a Q- or
// 2D-boundary layout as query_groups requires it) and sizes the plan.
GridBuild plan_grid(const PatternSpec& resolved_spec, const PlanShape& shape,
                    const ModalityLayout* layout);
// Whether the GPU estimate takes the build's query groups (fits_estimate for each).
bool fits_estimate(const GridBuild& build);
// Where a build marks the ends of its stages on its stream, for benchmarks that time them
// (bench/index_bench.cu records an event per mark); builds take none by default.
class StageMarks {
 public:
  virtual ~StageMarks() = default;
  // Called on the host after the stage's work is queued on `stream`.
  virtual void mark(const char* stage, cudaStream_t stream) = 0;
};

// Estimates, searches each head slot's stride and phase (written to `chosen`, device memory
// [selections, head slots], when not null) and converts them into `sections` (head run offsets,
// runs, tiles, schedule, mask, spans, columns); marks its stages in `marks` when not null.
void build_grid(const GridBuild& build, const EstimateOperands& operands,
                const PlanSections& sections, detail::GridLines* chosen, cudaStream_t stream,
                StageMarks* marks = nullptr);

// The stride and phase search of one estimate (methods/grid/grid_search_device.cu): every head
// slot's best lines.
struct GridSearch {
  const EstimateExtents* extents = nullptr;
  const float* probabilities = nullptr;  // the estimate's softmax rows [slots, rows, scores]
  detail::GridOptions options;
  int64_t first_stride = 0, last_stride = 0;
  detail::GridLines* lines = nullptr;   // [slots]
  detail::GridLines* chosen = nullptr;  // [slots], the caller's copy, or null
};
// Its scratch (one search at a time in stream order may reuse it), laid out for the most keys and
// candidate strides of the searches that share it.
struct GridSearchRegions {
  std::size_t column_mass = 0, entry_cost = 0, stride_scores = 0, stride_phases = 0;
};
GridSearchRegions add_grid_search_regions(ScratchLayout& layout, int64_t slots, int64_t keys,
                                          int64_t strides);
void launch_grid_search(const GridSearch& search, std::byte* base, const GridSearchRegions& regions,
                        cudaStream_t stream);
// The search's lines where detail::grid_lines_fixed(options): {options.stride, 0} into
// lines[count] and, when not null, chosen[count].
void launch_fixed_grid_lines(const detail::GridOptions& options, int64_t count,
                             detail::GridLines* lines, detail::GridLines* chosen,
                             cudaStream_t stream);

// The per-tile scratch both grid builds convert into: record counts and their scanned offsets,
// the schedule's sort keys (as filled, then sorted) and tile indices.
struct GridTileRegions {
  std::size_t span_counts = 0, column_counts = 0, span_offsets = 0, column_offsets = 0;
  std::size_t sort_keys = 0, sorted_keys = 0, tile_indices = 0;
};
GridTileRegions add_grid_tile_regions(ScratchLayout& layout, int64_t tiles);
// Exclusive scans of the tiles' span and column counts into their offsets (`what` names the build
// in errors).
void scan_grid_record_counts(void* temp, std::size_t scan_bytes, std::byte* base,
                             const GridTileRegions& regions, int item_count, cudaStream_t stream,
                             const char* what);
// Exclusive scans of the head slots' run and tile counts (`slot_items` = slots + 1, each ending
// in a 0) into the plan's head run offsets and the tile offsets, each sum ending in the total;
// `temp` holds `slot_scan_bytes` for one scan.
void scan_grid_slot_counts(void* temp, std::size_t slot_scan_bytes, const int64_t* run_counts,
                           int64_t* head_run_offsets, const int64_t* tile_counts,
                           int64_t* tile_offsets, int slot_items, cudaStream_t stream,
                           const char* what);
// The schedule: tile indices sorted by their filled sort keys, heaviest first. The radix sort is
// stable, so equal keys (count and position) keep tile order, the upload's last tie.
void sort_grid_schedule(void* temp, std::size_t sort_bytes, std::byte* base,
                        const GridTileRegions& regions, int32_t* schedule, int item_count,
                        int sort_bits, cudaStream_t stream, const char* what);

// Throws kUnsupported naming "<pattern> parameter stride" unless every position and stride fits
// the plan's int32 records (q_len + kv_len + stride < 2^31).
void check_grid_positions(const std::string& pattern, const PlanShape& shape, int64_t stride);

// The Q/2D-boundary grid (methods/grid/grid_groups_device.cu): the groups, spaces, selections and capacities of
// `build` from the layout (plan_grid), and build_grid's work for them. A block converts a tile
// with a thread per row, so tiles hold at most kMaxGroupedGridTileRows rows; taller ones throw
// kUnsupported naming shape.tile_rows (builds_grid_on_device says no to them).
inline constexpr int64_t kMaxGroupedGridTileRows = 128;
// The most query groups a grouped grid takes (they travel to its kernels by value): the item
// boundary's text rows and media items; layouts of more items build on the host.
inline constexpr int64_t kMaxGroupedGridGroups = 32;
void plan_grouped_grid(const PatternSpec& resolved_spec, const ModalityLayout* layout,
                       detail::BoundaryMode mode, GridBuild& build);
void build_grouped_grid(const GridBuild& build, const EstimateOperands& operands,
                        const PlanSections& sections, detail::GridLines* chosen,
                        cudaStream_t stream, StageMarks* marks = nullptr);

// The grid schedules' sort key (a descending stable sort gives the upload's heaviest-first order,
// device_plan.cu): the tile's key count + 1 above its position within its head slot, inverted so
// that lower positions come first; empty capacity tiles get 0 and go last.
inline constexpr int kGridPositionBits = 32;
__host__ __device__ inline uint64_t grid_sort_key(int64_t keys, int64_t position) {
  constexpr uint64_t kPositionMask = (uint64_t{1} << kGridPositionBits) - 1;
  return (static_cast<uint64_t>(keys + 1) << kGridPositionBits) |
         (kPositionMask - static_cast<uint64_t>(position));
}
// Bits of those keys for kv_len keys per tile at most.
int grid_sort_bits(int64_t kv_len);

}  // namespace mmsparse::cuda::index
