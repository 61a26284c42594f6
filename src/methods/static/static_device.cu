// Static patterns built into a DevicePlan by kernels (see methods/static/static_device.h).
//
// Every head slot of a static pattern is the same, and its tiles follow from the shape in closed
// form (TileGeometry::tile). Per tile, the key lists are the host builder's (static_patterns.cpp),
// rewritten as __host__ __device__ code over a key sink, so the host counts sizes and the device
// writes records with one definition. The steps, all asynchronous on one stream:
//   host:   count spans and columns per tile of one head -> section sizes -> layout -> allocation
//   kernel: per tile of one head, its span and column counts; CUB scans them into head offsets
//   kernel: per tile of every head slot (one thread each), the tile record, spans, columns and key
//           count, plus the mask table
//   CUB:    a stable descending radix sort of tile indices by key count -> the launch schedule,
//           which is the host upload's heaviest-first stable sort.

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "cuda/common/cub_storage.cuh"
#include "cuda/common/cuda_check.h"
#include "cuda/common/math.h"
#include "cuda/common/stream_scratch.h"
#include "cuda/runtime/plan_view.cuh"
#include "methods/device_builder.h"
#include "methods/registry.h"
#include "methods/static/static_device.h"
#include "methods/static/static_patterns.h"
#include "mmsparse/status.h"

namespace mmsparse::cuda {
namespace {

constexpr int kThreadsPerBlock = 256;

using detail::StaticPattern;

__host__ __device__ inline int64_t floor_div(int64_t a, int64_t b) {
  return a / b - ((a % b != 0) && ((a < 0) != (b < 0)));
}
__host__ __device__ inline int64_t clamp64(int64_t value, int64_t low, int64_t high) {
  return value < low ? low : (value > high ? high : value);
}

// One query tile of a head: rows [begin, end) and which of the pattern's masks it uses.
struct TileRows {
  int64_t begin;
  int64_t end;
  int32_t mask;  // index into the plan's mask table
  bool dense;    // tri-shape's bottom rows: causal keys only
};

// The pattern's parameters and the tiling of one head, all from the shape. Passed to kernels by
// value.
struct TileGeometry {
  StaticPattern pattern;
  int64_t q_len;
  int64_t kv_len;
  int64_t tile_rows;
  int64_t offset;  // kv_len - q_len: query i aligns with key i + offset
  int64_t sink = 0, local = 1, segment = 1, vline_stride = 1, stride = 1;
  int64_t boundary = 0;  // tri-shape: rows [boundary, q_len) attend densely

  // Tiles per head and, for sf-fixed, the split into segment groups (first, full middles, last).
  int64_t tiles = 0;
  int64_t first_group = 0;    // sf-fixed: segment index of row 0
  int64_t first_tiles = 0;    // tiles of the first group (tri-shape: of the A-shape rows)
  int64_t middle_tiles = 0;   // sf-fixed: tiles of every full middle group
  int64_t middle_groups = 0;  // sf-fixed: full groups between the first and the last
  int32_t bottom_mask = 0;    // tri-shape: mask index of the dense rows

  __host__ __device__ int64_t aligned(int64_t row) const { return row + offset; }
  __host__ __device__ int64_t clip(int64_t key) const { return clamp64(key, 0, kv_len); }
  __host__ __device__ int64_t causal_end(int64_t end) const { return clip(aligned(end - 1) + 1); }

  // Rows [group_begin, group_end) of sf-fixed segment group `group`.
  __host__ __device__ int64_t group_begin(int64_t group) const {
    return group * segment - offset > 0 ? group * segment - offset : 0;
  }
  __host__ __device__ int64_t group_end(int64_t group) const {
    return (group + 1) * segment - offset < q_len ? (group + 1) * segment - offset : q_len;
  }

  // Local tile `t` of a head, in the host builder's order.
  __host__ __device__ TileRows tile(int64_t t) const {
    switch (pattern) {
      case StaticPattern::kTriShape:
        if (t >= first_tiles) {
          const int64_t begin = boundary + (t - first_tiles) * tile_rows;
          return {begin, begin + tile_rows < q_len ? begin + tile_rows : q_len, bottom_mask, true};
        } else {
          const int64_t begin = t * tile_rows;
          return {begin, begin + tile_rows < boundary ? begin + tile_rows : boundary, 0, false};
        }
      case StaticPattern::kSfFixed: {
        int64_t group = first_group;
        int64_t index = t;
        if (t >= first_tiles) {
          const int64_t rest = t - first_tiles;
          if (rest < middle_groups * middle_tiles) {
            group = first_group + 1 + rest / middle_tiles;
            index = rest % middle_tiles;
          } else {
            group = first_group + 1 + middle_groups;
            index = rest - middle_groups * middle_tiles;
          }
        }
        const int64_t begin = group_begin(group) + index * tile_rows;
        const int64_t end =
            begin + tile_rows < group_end(group) ? begin + tile_rows : group_end(group);
        return {begin, end, 0, false};
      }
      default: {
        const int64_t begin = t * tile_rows;
        return {begin, begin + tile_rows < q_len ? begin + tile_rows : q_len, 0, false};
      }
    }
  }

  // Feeds the tile's key lists to `out` (add_span / add_column), exactly as the host builder
  // calls PlanBuilder.
  template <class KeySink>
  __host__ __device__ void add_keys(const TileRows& rows, KeySink& out) const {
    const int64_t keys_end = causal_end(rows.end);
    if (pattern == StaticPattern::kDense || rows.dense) {
      out.add_span(0, keys_end);
    } else if (pattern == StaticPattern::kAShape || pattern == StaticPattern::kTriShape) {
      out.add_span(0, sink < keys_end ? sink : keys_end);
      const int64_t window_begin = aligned(rows.begin) - local + 1;
      out.add_span(window_begin > sink ? window_begin : sink, keys_end);
    } else if (pattern == StaticPattern::kSfFixed) {
      const int64_t span_begin = clip(floor_div(aligned(rows.begin), segment) * segment);
      // Columns before the segment are left of every row's diagonal: no causal cut.
      for (int64_t key = 0; key < span_begin; key += vline_stride) out.add_column(key);
      out.add_span(span_begin, keys_end);
    } else {
      add_strided_keys(rows, out);
    }
  }

  // sf-strided: the local window plus one tile-wide band per stride-th diagonal, ascending, clipped
  // against the window and merged where they overlap.
  template <class KeySink>
  __host__ __device__ void add_strided_keys(const TileRows& rows, KeySink& out) const {
    const int64_t first = aligned(rows.begin);
    const int64_t last = aligned(rows.end - 1);
    const int64_t local_begin = clip(first - local + 1);
    int64_t open_begin = -1;
    int64_t open_end = -1;
    auto add_band = [&](int64_t band_begin, int64_t band_end_unclipped) {
      const int64_t band_end = band_end_unclipped < local_begin ? band_end_unclipped : local_begin;
      if (band_begin >= band_end) return;
      if (band_begin <= open_end) {
        open_end = open_end > band_end ? open_end : band_end;
        return;
      }
      out.add_span(open_begin, open_end);
      open_begin = band_begin;
      open_end = band_end;
    };
    if (last >= stride) {
      const int64_t farthest = last / stride * stride;  // largest diagonal distance with a key
      if (rows.end - rows.begin >= stride) {
        // Bands one tile wide at most `stride` apart touch: their union is one range.
        add_band(first - farthest > 0 ? first - farthest : 0, last - stride + 1);
      } else {
        for (int64_t distance = farthest; distance >= stride; distance -= stride) {
          add_band(first - distance > 0 ? first - distance : 0, last - distance + 1);
        }
      }
    }
    out.add_span(open_begin, open_end);
    out.add_span(local_begin, causal_end(rows.end));
  }
};

// PlanBuilder::add_span's rules (empty spans dropped, a span touching the previous one of the tile
// extends it), shared by the counting and the writing sink: a span is final once the next one
// does not touch it, or at finish().
template <class Emit>
struct SpanMerger {
  Emit emit;
  int64_t open_begin = 0;
  int64_t open_end = 0;
  bool open = false;

  __host__ __device__ void add_span(int64_t begin, int64_t end) {
    if (begin >= end) return;
    if (open && open_end == begin) {
      open_end = end;
      return;
    }
    if (open) emit.span(open_begin, open_end);
    open_begin = begin;
    open_end = end;
    open = true;
  }
  __host__ __device__ void add_column(int64_t key) { emit.column(key); }
  __host__ __device__ void finish() {
    if (open) emit.span(open_begin, open_end);
  }
};

// Counts a tile's spans, columns and keys (the schedule's sort key).
struct CountEmit {
  int64_t spans = 0;
  int64_t columns = 0;
  int64_t keys = 0;
  __host__ __device__ void span(int64_t begin, int64_t end) {
    ++spans;
    keys += end - begin;
  }
  __host__ __device__ void column(int64_t) {
    ++columns;
    ++keys;
  }
};

// Writes a tile's spans and columns at its offsets in the buffer.
struct WriteEmit {
  SpanRecord* spans;  // the tile's first span
  int32_t* columns;   // the tile's first column
  int64_t keys = 0;
  __device__ void span(int64_t begin, int64_t end) {
    *spans++ = {static_cast<int32_t>(begin), static_cast<int32_t>(end)};
    keys += end - begin;
  }
  __device__ void column(int64_t key) {
    *columns++ = static_cast<int32_t>(key);
    ++keys;
  }
};

__host__ __device__ inline CountEmit count_tile(const TileGeometry& geometry, int64_t t) {
  SpanMerger<CountEmit> merger{};
  geometry.add_keys(geometry.tile(t), merger);
  merger.finish();
  return merger.emit;
}

// span_counts, column_counts: [geometry.tiles], the key lists of each tile of one head.
__global__ void count_tiles_kernel(TileGeometry geometry, int64_t* span_counts,
                                   int64_t* column_counts) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= geometry.tiles) return;
  const CountEmit counts = count_tile(geometry, t);
  span_counts[t] = counts.spans;
  column_counts[t] = counts.columns;
}

struct MaskTable {
  MaskRecord records[kMaxStaticMasks];
  int32_t count;
};

// Where the fill kernel writes: the buffer's sections and the scratch the schedule sort reads.
struct FillTargets {
  TileRecord* tiles;              // [head_slots * tiles]
  MaskRecord* masks;              // [mask_table.count]
  SpanRecord* spans;              // [head_slots * spans_per_head]
  int32_t* columns;               // [head_slots * columns_per_head]
  uint32_t* tile_keys;            // [tiles * head_slots] key counts, position-major (sort keys)
  int32_t* tile_indices;          // [tiles * head_slots] their tile indices (sort values)
  const int64_t* span_offsets;    // [tiles] exclusive sums of one head's span counts
  const int64_t* column_offsets;  // [tiles] exclusive sums of one head's column counts
  int64_t spans_per_head;
  int64_t columns_per_head;
  int64_t head_slots;
};

// One thread per tile of every head slot, head slot major (the host builder's order).
__global__ void fill_tiles_kernel(TileGeometry geometry, MaskTable mask_table, FillTargets out) {
  const int64_t index = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (index < mask_table.count) out.masks[index] = mask_table.records[index];
  if (index >= out.head_slots * geometry.tiles) return;
  const int64_t slot = index / geometry.tiles;
  const int64_t t = index % geometry.tiles;
  const TileRows rows = geometry.tile(t);
  const int64_t span_begin = slot * out.spans_per_head + out.span_offsets[t];
  const int64_t column_begin = slot * out.columns_per_head + out.column_offsets[t];

  SpanMerger<WriteEmit> merger{{out.spans + span_begin, out.columns + column_begin}};
  geometry.add_keys(rows, merger);
  merger.finish();
  const WriteEmit& written = merger.emit;

  out.tiles[index] = {static_cast<int32_t>(rows.begin),
                      static_cast<int32_t>(rows.end),
                      static_cast<int32_t>(slot),
                      rows.mask,
                      span_begin,
                      static_cast<int64_t>(written.spans - out.spans),
                      column_begin,
                      static_cast<int64_t>(written.columns - out.columns)};
  // The schedule sort's input, position-major (the upload's tie order: see heaviest_first).
  const int64_t sort_item = t * out.head_slots + slot;
  out.tile_keys[sort_item] = static_cast<uint32_t>(written.keys);
  out.tile_indices[sort_item] = static_cast<int32_t>(index);
}

// The static pattern whose registry entry `spec` names.
StaticPattern static_pattern(const PatternSpec& spec) {
  std::string names;
  for (std::size_t p = 0; p < detail::kStaticPatterns.size(); ++p) {
    const detail::PatternEntry& entry = detail::static_pattern_entry(detail::kStaticPatterns[p]);
    if (detail::is_spec_of(spec, entry)) return detail::kStaticPatterns[p];
    const bool last = p + 1 == detail::kStaticPatterns.size();
    names += (p == 0 ? "" : (last ? " or " : ", ")) + entry.info.name;
  }
  throw_invalid_argument("build_static_plan_on_device pattern", names, "\"" + spec.name + "\"");
}

// The pattern's parameters (checked as the host builder checks them), tiling and mask table.
TileGeometry make_geometry(const PatternSpec& spec, const PlanShape& shape,
                           std::vector<MaskPolicy>& masks) {
  TileGeometry geometry{static_pattern(spec), shape.q_len, shape.kv_len, shape.tile_rows,
                        shape.causal_offset()};
  const int64_t q_len = shape.q_len;
  const int64_t rows = shape.tile_rows;
  masks.clear();
  switch (geometry.pattern) {
    case StaticPattern::kDense:
      geometry.tiles = ceil_div(q_len, rows);
      masks.push_back({});
      break;
    case StaticPattern::kAShape:
    case StaticPattern::kTriShape: {
      geometry.sink = detail::checked_param(spec, "sink", 0);
      geometry.local = detail::checked_param(spec, "local", 1);
      const MaskPolicy window_mask{
          .causal = true, .window = geometry.local, .window_sink = geometry.sink};
      if (geometry.pattern == StaticPattern::kAShape) {
        geometry.tiles = ceil_div(q_len, rows);
        masks.push_back(window_mask);
        break;
      }
      const int64_t bottom = detail::checked_param(spec, "bottom", 0);
      geometry.boundary = std::max<int64_t>(0, q_len - bottom);
      geometry.first_tiles = ceil_div(geometry.boundary, rows);
      geometry.tiles = geometry.first_tiles + ceil_div(q_len - geometry.boundary, rows);
      // PlanBuilder numbers masks in order of first use.
      if (geometry.first_tiles > 0) masks.push_back(window_mask);
      geometry.bottom_mask = static_cast<int32_t>(masks.size());
      if (geometry.tiles > geometry.first_tiles) masks.push_back({});
      break;
    }
    case StaticPattern::kSfFixed: {
      geometry.segment = detail::checked_param(spec, "segment", 1);
      geometry.vline_stride = detail::checked_param(spec, "vline_stride", 1);
      masks.push_back({});
      if (q_len == 0) break;
      geometry.first_group = floor_div(geometry.aligned(0), geometry.segment);
      const int64_t last_group = floor_div(geometry.aligned(q_len - 1), geometry.segment);
      geometry.first_tiles = ceil_div(geometry.group_end(geometry.first_group), rows);
      geometry.tiles = geometry.first_tiles;
      if (last_group > geometry.first_group) {
        geometry.middle_groups = last_group - geometry.first_group - 1;
        geometry.middle_tiles = ceil_div(geometry.segment, rows);
        geometry.tiles += geometry.middle_groups * geometry.middle_tiles +
                          ceil_div(q_len - geometry.group_begin(last_group), rows);
      }
      break;
    }
    case StaticPattern::kSfStrided:
      geometry.local = detail::checked_param(spec, "local", 1);
      geometry.stride = detail::checked_param(spec, "stride", 1);
      geometry.tiles = ceil_div(q_len, rows);
      masks.push_back({});
      break;
  }
  if (geometry.tiles == 0) masks.clear();  // no tile ever refers to a mask
  return geometry;
}

}  // namespace

std::vector<MaskPolicy> static_plan_masks(const PatternSpec& resolved_spec,
                                          const PlanShape& shape) {
  std::vector<MaskPolicy> policies;
  (void)make_geometry(resolved_spec, shape, policies);
  return policies;
}

namespace {

MaskTable make_mask_table(const std::vector<MaskPolicy>& policies, int64_t kv_len) {
  MaskTable table{};
  table.count = static_cast<int32_t>(policies.size());
  for (std::size_t m = 0; m < policies.size(); ++m) {
    table.records[m] = make_mask_record(policies[m], kv_len);
  }
  return table;
}

// Spans and columns of one head; every head slot repeats them.
struct HeadRecordCounts {
  int64_t spans = 0;
  int64_t columns = 0;
};

HeadRecordCounts count_head_records(const TileGeometry& geometry) {
  HeadRecordCounts counts;
  for (int64_t t = 0; t < geometry.tiles; ++t) {
    const CountEmit tile = count_tile(geometry, t);
    counts.spans += tile.spans;
    counts.columns += tile.columns;
  }
  return counts;
}

// Writes every record of the plan buffer at `base` (laid out as `layout`) by kernels: the tiles'
// counts scanned into offsets, the tiles, masks, spans and columns filled, and the schedule sorted
// heaviest first. `tiles` > 0.
void fill_static_plan(std::byte* base, const DevicePlanLayout& layout, const TileGeometry& geometry,
                      const MaskTable& mask_table, const HeadRecordCounts& per_head,
                      const PlanShape& shape, int64_t tiles, cudaStream_t cuda_stream) {
  const auto item_count = static_cast<int>(tiles);
  const auto head_tiles = static_cast<int>(geometry.tiles);
  // Sort on the key bits that can be set: a tile covers at most kv_len keys.
  const int sort_bits =
      std::max(1, static_cast<int>(std::bit_width(static_cast<uint64_t>(shape.kv_len))));

  const std::size_t scan_bytes =
      scan_storage_bytes(head_tiles, cuda_stream, "build_static_plan_on_device: scan storage");
  const std::size_t sort_bytes = sort_storage_bytes<uint32_t>(
      item_count, sort_bits, cuda_stream, "build_static_plan_on_device: sort storage");

  ScratchLayout scratch_layout;
  const std::size_t span_counts_at = scratch_layout.add<int64_t>(geometry.tiles);
  const std::size_t column_counts_at = scratch_layout.add<int64_t>(geometry.tiles);
  const std::size_t span_offsets_at = scratch_layout.add<int64_t>(geometry.tiles);
  const std::size_t column_offsets_at = scratch_layout.add<int64_t>(geometry.tiles);
  const std::size_t keys_at = scratch_layout.add<uint32_t>(tiles);
  const std::size_t sorted_keys_at = scratch_layout.add<uint32_t>(tiles);
  const std::size_t indices_at = scratch_layout.add<int32_t>(tiles);
  const std::size_t temp_at =
      scratch_layout.add<std::byte>(static_cast<int64_t>(std::max(scan_bytes, sort_bytes)));
  // Freed in stream order whatever happens below.
  const StreamScratch scratch(scratch_layout.bytes(), cuda_stream,
                              "build_static_plan_on_device: scratch");
  std::byte* scratch_base = scratch.base();
  auto* span_counts = region<int64_t>(scratch_base, span_counts_at);
  auto* column_counts = region<int64_t>(scratch_base, column_counts_at);
  auto* span_offsets = region<int64_t>(scratch_base, span_offsets_at);
  auto* column_offsets = region<int64_t>(scratch_base, column_offsets_at);
  auto* tile_keys = region<uint32_t>(scratch_base, keys_at);
  auto* tile_indices = region<int32_t>(scratch_base, indices_at);
  void* temp = scratch_base + temp_at;

  const auto head_blocks = static_cast<unsigned>(ceil_div(geometry.tiles, kThreadsPerBlock));
  count_tiles_kernel<<<head_blocks, kThreadsPerBlock, 0, cuda_stream>>>(geometry, span_counts,
                                                                        column_counts);
  check_launch("build_static_plan_on_device: count_tiles_kernel");
  scan_record_counts(temp, scan_bytes, span_counts, span_offsets, column_counts, column_offsets,
                     head_tiles, cuda_stream, "build_static_plan_on_device");

  FillTargets targets{};
  targets.tiles = reinterpret_cast<TileRecord*>(base + layout.tiles);
  targets.masks = reinterpret_cast<MaskRecord*>(base + layout.masks);
  targets.spans = reinterpret_cast<SpanRecord*>(base + layout.spans);
  targets.columns = reinterpret_cast<int32_t*>(base + layout.columns);
  targets.tile_keys = tile_keys;
  targets.tile_indices = tile_indices;
  targets.span_offsets = span_offsets;
  targets.column_offsets = column_offsets;
  targets.spans_per_head = per_head.spans;
  targets.columns_per_head = per_head.columns;
  targets.head_slots = shape.head_slots();
  const auto fill_blocks = static_cast<unsigned>(ceil_div(tiles, kThreadsPerBlock));
  fill_tiles_kernel<<<fill_blocks, kThreadsPerBlock, 0, cuda_stream>>>(geometry, mask_table,
                                                                       targets);
  check_launch("build_static_plan_on_device: fill_tiles_kernel");

  // Radix sort is stable, so equal key counts keep the input's position-major order: the
  // upload's heaviest_first.
  std::size_t temp_bytes = sort_bytes;
  check_cuda(cub::DeviceRadixSort::SortPairsDescending(
                 temp, temp_bytes, tile_keys, region<uint32_t>(scratch_base, sorted_keys_at),
                 tile_indices, reinterpret_cast<int32_t*>(base + layout.schedule), item_count, 0,
                 sort_bits, cuda_stream),
             "build_static_plan_on_device: schedule sort");
}

}  // namespace

DevicePlan build_static_plan_on_device(const PatternSpec& resolved_spec, const PlanShape& shape,
                                       void* stream) {
  PlanBuilder shape_check(shape);  // throws on a bad shape as the host build does
  check_int32_ranges(shape);
  std::vector<MaskPolicy> policies;
  const TileGeometry geometry = make_geometry(resolved_spec, shape, policies);
  const MaskTable mask_table = make_mask_table(policies, shape.kv_len);
  const HeadRecordCounts per_head = count_head_records(geometry);
  const int64_t slots = shape.head_slots();
  const int64_t tiles = slots * geometry.tiles;
  if (tiles > std::numeric_limits<int32_t>::max()) {
    throw Error(ErrorCode::kUnsupported, "build_static_plan_on_device: " + std::to_string(tiles) +
                                             " tiles; the schedule indexes tiles in int32");
  }

  // The upload's layout (device_plan.cu): sections in the same order, empty ones included; static
  // patterns keep the identity order (no runs) and every pattern tiles every row. All of it
  // zeroed: the identity order's run offsets, and the padding between sections as the upload has
  // it.
  DevicePlanLayout layout = plan_layout({slots, 0, tiles, static_cast<int64_t>(policies.size()),
                                         slots * per_head.spans, slots * per_head.columns});
  layout.gathers = per_head.columns > 0;  // static patterns write no strided spans
  DevicePlan plan = DevicePlan::for_builder(shape, layout, tiles, slots * per_head.columns, true,
                                            layout.bytes, stream);
  if (tiles == 0) return plan;
  fill_static_plan(static_cast<std::byte*>(plan.builder_data()), layout, geometry, mask_table,
                   per_head, shape, tiles, static_cast<cudaStream_t>(stream));
  return plan;
}

}  // namespace mmsparse::cuda
