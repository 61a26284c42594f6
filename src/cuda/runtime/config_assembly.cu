// The concatenation of a per-head config's sections (config_sections.h; the kernel and CUB steps
// of config_builder.cu's overview), on the caller's stream:
//   kernel:  per section, each of its head slots finds its tiles, spans, columns and runs in the
//            section (binary search on the tile records' head slots: tiles are stored slot by
//            slot, a section's empty capacity tiles after them); CUB scans the per-slot counts
//            into the concatenation's offsets, so the real tiles of every section are packed at
//            the front and the concatenation's empty tiles (no rows, no keys) follow
//   kernel:  per section, a warp per tile copies its spans and columns to their rebased place,
//            counts its keys and writes its record (global head slot, global mask); runs and the
//            mask table are copied alongside. Where the host section reads keys through key orders
//            (its spans rows of the engine's copy), every span's shift is copied with it
//            (kSpanInPlace for the device sections') and the orders once, as that section's
//            upload packed them
//   CUB:     one stable descending radix sort of (keys, position) over every tile: the upload's
//            heaviest-first order, ties position-major then by tile index (device_plan.cu); the
//            empty tiles sort last, in tile order, as a grid plan's do.

#include <algorithm>
#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>
#include <utility>
#include <vector>

#include "cuda/common/cub_storage.cuh"
#include "cuda/common/cuda_check.h"
#include "cuda/common/math.h"
#include "cuda/common/stream_scratch.h"
#include "cuda/common/warp.cuh"
#include "cuda/runtime/config_sections.h"
#include "cuda/runtime/plan_view.cuh"

namespace mmsparse::cuda {
namespace {

constexpr int kThreadsPerBlock = 256;
// Mask records written per launch of write_masks_kernel, passed by value.
constexpr int kMasksPerLaunch = 32;
// Blocks copying one head slot's runs; the grid-stride loop covers any count.
constexpr int64_t kMaxRunBlocksPerSlot = 16;
// A launch's most blocks along y.
constexpr int64_t kMaxGridRows = 65535;

struct SectionView {
  const TileRecord* tiles;
  int64_t tiles_count;
  const SpanRecord* spans;
  const int32_t* span_shifts;  // [spans] PlanView::span_shifts, or null: every span in place
  const int32_t* columns;
  const int64_t* head_run_offsets;
  const RunRecord* runs;
  int64_t slots;  // batch × head_count
  int32_t head_count;
  int32_t total_heads;  // the layer's query heads
  int32_t replicated;
  int32_t mask_count;  // 0: the section's mask indices are already global (the host section)
  int32_t masks[kMaxSectionMasks];
  int32_t heads[kMaxSectionHeads];

  __device__ int64_t global_slot(int64_t q) const {
    return q / head_count * total_heads + heads[q % head_count];
  }
  __device__ int64_t local_slot(int64_t q) const { return replicated ? 0 : q; }
};

// Per global head slot, [slots + 1] each (the last entry 0, so exclusive scans end in the total).
struct SlotTable {
  int64_t* tile_counts;
  int64_t* span_counts;
  int64_t* column_counts;
  int64_t* run_counts;
  int64_t* source_tiles;    // first tile in the section
  int64_t* source_spans;    // first span in the section
  int64_t* source_columns;  // first column in the section
  int64_t* source_runs;     // first run in the section
  int64_t* target_tiles;    // scans of the counts: first tile in the concatenation
  int64_t* target_spans;
  int64_t* target_columns;
};

// A grid section's capacity tiles beyond its real ones have no rows (a real tile always has some:
// Plan::validate); they belong to no head slot.
__device__ inline bool is_empty_tile(const TileRecord& tile) { return tile.end <= tile.begin; }

// The first tile of `tiles` (sorted by head slot, empty tiles last) whose head slot is >= `slot`.
__device__ inline int64_t first_tile_of(const TileRecord* tiles, int64_t count, int64_t slot) {
  int64_t low = 0;
  int64_t high = count;
  while (low < high) {
    const int64_t middle = low + (high - low) / 2;
    if (!is_empty_tile(tiles[middle]) && tiles[middle].head_slot < slot) {
      low = middle + 1;
    } else {
      high = middle;
    }
  }
  return low;
}

// One thread per section slot: where its records lie in the section, and how many there are.
__global__ void locate_slots_kernel(SectionView section, SlotTable table) {
  const int64_t q = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (q >= section.slots) return;
  const int64_t slot = section.global_slot(q);
  const int64_t local = section.local_slot(q);
  const int64_t first = first_tile_of(section.tiles, section.tiles_count, local);
  const int64_t last = first_tile_of(section.tiles, section.tiles_count, local + 1);
  table.tile_counts[slot] = last - first;
  table.source_tiles[slot] = first;
  const bool any = last > first;
  const int64_t span_begin = any ? section.tiles[first].span_begin : 0;
  const int64_t column_begin = any ? section.tiles[first].column_begin : 0;
  table.source_spans[slot] = span_begin;
  table.span_counts[slot] = any ? section.tiles[last - 1].span_end - span_begin : 0;
  table.source_columns[slot] = column_begin;
  table.column_counts[slot] = any ? section.tiles[last - 1].column_end - column_begin : 0;
  table.source_runs[slot] = section.head_run_offsets[local];
  table.run_counts[slot] = section.head_run_offsets[local + 1] - section.head_run_offsets[local];
}

struct CopyTargets {
  TileRecord* tiles;
  SpanRecord* spans;
  int32_t* span_shifts;  // [spans] or null: the concatenation has no key orders
  int32_t* columns;
  RunRecord* runs;
  const int64_t* run_offsets;  // the concatenation's head_run_offsets
  uint64_t* sort_keys;         // [tiles] (keys << position_bits) | (position_mask - position)
  int32_t* sort_values;        // [tiles] tile indices
  int position_bits;
};

// Every tile of the concatenation empty (a zero record, from the buffer's memset) and scheduled
// last in tile order until a section's copy writes it: the tiles beyond the real ones stay so.
__global__ void empty_schedule_kernel(int64_t tiles, CopyTargets out) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= tiles) return;
  out.sort_keys[t] = 0;
  out.sort_values[t] = static_cast<int32_t>(t);
}

// A warp per tile of the section (per section slot and tile when replicated); empty tiles are
// left out.
__global__ void copy_tiles_kernel(SectionView section, SlotTable table, CopyTargets out) {
  const int64_t item = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarpLanes;
  const int lane = static_cast<int>(threadIdx.x) % kWarpLanes;
  const int64_t items =
      section.replicated ? section.slots * section.tiles_count : section.tiles_count;
  if (item >= items) return;
  const int64_t local_tile = section.replicated ? item % section.tiles_count : item;
  const TileRecord tile = section.tiles[local_tile];
  if (is_empty_tile(tile)) return;  // the whole warp: one item per warp
  const int64_t q = section.replicated ? item / section.tiles_count : tile.head_slot;
  const int64_t slot = section.global_slot(q);
  const int64_t position = local_tile - table.source_tiles[slot];
  const int64_t target = table.target_tiles[slot] + position;
  const int64_t span_target = table.target_spans[slot] + tile.span_begin - table.source_spans[slot];
  const int64_t column_target =
      table.target_columns[slot] + tile.column_begin - table.source_columns[slot];
  const int64_t span_count = tile.span_end - tile.span_begin;
  const int64_t column_count = tile.column_end - tile.column_begin;

  int64_t keys = 0;
  for (int64_t s = lane; s < span_count; s += kWarpLanes) {
    const SpanRecord span = section.spans[tile.span_begin + s];
    out.spans[span_target + s] = span;
    if (out.span_shifts != nullptr) {
      out.span_shifts[span_target + s] =
          section.span_shifts != nullptr ? section.span_shifts[tile.span_begin + s] : kSpanInPlace;
    }
    keys += range_keys(span);
  }
  for (int64_t c = lane; c < column_count; c += kWarpLanes) {
    out.columns[column_target + c] = section.columns[tile.column_begin + c];
  }
  keys = warp_sum(keys);
  if (lane != 0) return;
  keys += column_count;
  const int32_t mask = section.mask_count > 0 ? section.masks[tile.mask] : tile.mask;
  out.tiles[target] = {tile.begin,
                       tile.end,
                       static_cast<int32_t>(slot),
                       mask,
                       span_target,
                       span_target + span_count,
                       column_target,
                       column_target + column_count};
  // position < the most tiles of a slot <= position_mask, so a real tile's key is above the empty
  // tiles' 0 even without keys.
  const uint64_t position_mask = (uint64_t{1} << out.position_bits) - 1;
  out.sort_keys[target] =
      (static_cast<uint64_t>(keys) << out.position_bits) | (position_mask - position);
  out.sort_values[target] = static_cast<int32_t>(target);
}

// Blocks along y take the section's slots, blocks along x a slot's runs (a contiguous range in the
// section and in the concatenation), both grid-stride: a grouped grid slot has tens of thousands
// of runs, which one thread per slot copied serially (milliseconds).
__global__ void copy_runs_kernel(SectionView section, SlotTable table, CopyTargets out) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t q = blockIdx.y; q < section.slots; q += gridDim.y) {
    const int64_t slot = section.global_slot(q);
    const int64_t count = table.run_counts[slot];
    const RunRecord* source = section.runs + table.source_runs[slot];
    RunRecord* target = out.runs + out.run_offsets[slot];
    for (int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; r < count;
         r += stride) {
      target[r] = source[r];
    }
  }
}

struct MaskBatch {
  MaskRecord records[kMasksPerLaunch];
  int32_t first;
  int32_t count;
};

__global__ void write_masks_kernel(MaskBatch batch, MaskRecord* masks) {
  const int index = static_cast<int>(threadIdx.x);
  if (index < batch.count) masks[batch.first + index] = batch.records[index];
}

SectionView section_view(const Section& section, const PlanShape& shape) {
  SectionView view{};
  const PlanView plan = make_plan_view(section.plan);
  view.tiles = plan.tiles;
  view.tiles_count = section.plan.num_tiles();
  view.spans = plan.spans;
  view.span_shifts = plan.span_shifts;
  view.columns = plan.columns;
  view.head_run_offsets = plan.head_run_offsets;
  view.runs = plan.runs;
  view.head_count = static_cast<int32_t>(section.heads.size());
  view.slots = shape.batch * view.head_count;
  view.total_heads = static_cast<int32_t>(shape.heads);
  view.replicated = section.replicated() ? 1 : 0;
  view.mask_count = static_cast<int32_t>(section.masks.size());
  std::copy(section.masks.begin(), section.masks.end(), view.masks);
  std::copy(section.heads.begin(), section.heads.end(), view.heads);
  return view;
}

// The SlotTable's arrays, the sort's keys and values and CUB's temporary storage, in one
// stream-ordered allocation.
class AssemblyScratch {
 public:
  static constexpr int kSlotArrays = 11;  // the SlotTable's arrays, first in the scratch

  AssemblyScratch(int64_t slots, int64_t tiles, int sort_bits, cudaStream_t stream)
      : slot_items_(static_cast<int>(slots + 1)),
        tile_items_(static_cast<int>(tiles)),
        sort_bits_(sort_bits),
        scan_bytes_(
            scan_storage_bytes(slot_items_, stream, "prepare_pattern config: scan storage")),
        sort_bytes_(sort_storage_bytes<uint64_t>(tile_items_, sort_bits, stream,
                                                 "prepare_pattern config: sort storage")),
        scratch_(lay_out(tiles), stream, "prepare_pattern config: scratch") {
    // The counts' last entries stay 0, so that each exclusive scan ends in its total (the slot
    // arrays lie before the keys).
    check_cuda(cudaMemsetAsync(scratch_.base(), 0, keys_at_, stream),
               "prepare_pattern config: cudaMemsetAsync slot table");
  }

  SlotTable table() const {
    return {slot_array(0), slot_array(1), slot_array(2), slot_array(3),
            slot_array(4), slot_array(5), slot_array(6), slot_array(7),
            slot_array(8), slot_array(9), slot_array(10)};
  }
  uint64_t* keys() const { return region<uint64_t>(scratch_.base(), keys_at_); }
  uint64_t* sorted_keys() const { return region<uint64_t>(scratch_.base(), sorted_keys_at_); }
  int32_t* values() const { return region<int32_t>(scratch_.base(), values_at_); }

  // Exclusive sum of the [slots + 1] `counts` into `offsets`.
  void scan(const int64_t* counts, int64_t* offsets, cudaStream_t stream) const {
    std::size_t temp_bytes = scan_bytes_;
    check_cuda(
        cub::DeviceScan::ExclusiveSum(temp(), temp_bytes, counts, offsets, slot_items_, stream),
        "prepare_pattern config: slot scan");
  }
  // Stable: equal (keys, position) keep tile order, the upload's last tie-break.
  void sort_schedule(int32_t* schedule, cudaStream_t stream) const {
    std::size_t temp_bytes = sort_bytes_;
    check_cuda(cub::DeviceRadixSort::SortPairsDescending(temp(), temp_bytes, keys(), sorted_keys(),
                                                         values(), schedule, tile_items_, 0,
                                                         sort_bits_, stream),
               "prepare_pattern config: schedule sort");
  }

 private:
  std::size_t lay_out(int64_t tiles) {
    ScratchLayout layout;
    for (std::size_t& at : slot_arrays_at_) at = layout.add<int64_t>(slot_items_);
    keys_at_ = layout.add<uint64_t>(tiles);
    sorted_keys_at_ = layout.add<uint64_t>(tiles);
    values_at_ = layout.add<int32_t>(tiles);
    temp_at_ = layout.add<std::byte>(static_cast<int64_t>(std::max(scan_bytes_, sort_bytes_)));
    return layout.bytes();
  }
  int64_t* slot_array(int index) const {
    return region<int64_t>(scratch_.base(), slot_arrays_at_[static_cast<std::size_t>(index)]);
  }
  void* temp() const { return scratch_.base() + temp_at_; }

  int slot_items_;
  int tile_items_;
  int sort_bits_;
  std::size_t scan_bytes_;
  std::size_t sort_bytes_;
  std::array<std::size_t, kSlotArrays> slot_arrays_at_{};
  std::size_t keys_at_ = 0, sorted_keys_at_ = 0, values_at_ = 0, temp_at_ = 0;
  StreamScratch scratch_;
};

// Per section, each head slot's place in it; then the scans of the counts into the
// concatenation's offsets.
void locate_slots(const std::vector<SectionView>& views, const AssemblyScratch& scratch,
                  int64_t* run_offsets, cudaStream_t stream) {
  const SlotTable table = scratch.table();
  for (const SectionView& view : views) {
    if (view.slots == 0) continue;
    const auto blocks = static_cast<unsigned>(ceil_div(view.slots, kThreadsPerBlock));
    locate_slots_kernel<<<blocks, kThreadsPerBlock, 0, stream>>>(view, table);
    check_launch("prepare_pattern config: locate_slots_kernel");
  }
  const std::pair<const int64_t*, int64_t*> scans[] = {{table.tile_counts, table.target_tiles},
                                                       {table.span_counts, table.target_spans},
                                                       {table.column_counts, table.target_columns},
                                                       {table.run_counts, run_offsets}};
  for (const auto& [counts, offsets] : scans) scratch.scan(counts, offsets, stream);
}

// Every section's tiles, spans, columns and runs at their rebased places, with the sort's keys.
void copy_sections(const std::vector<Section>& sections, const std::vector<SectionView>& views,
                   const SlotTable& table, const CopyTargets& targets, int64_t tiles,
                   cudaStream_t stream) {
  if (tiles > 0) {
    empty_schedule_kernel<<<static_cast<unsigned>(ceil_div(tiles, kThreadsPerBlock)),
                            kThreadsPerBlock, 0, stream>>>(tiles, targets);
    check_launch("prepare_pattern config: empty_schedule_kernel");
  }
  for (std::size_t s = 0; s < sections.size(); ++s) {
    const SectionView& view = views[s];
    const int64_t items = view.replicated ? view.slots * view.tiles_count : view.tiles_count;
    if (items > 0) {
      const auto blocks = static_cast<unsigned>(ceil_div(items * kWarpLanes, kThreadsPerBlock));
      copy_tiles_kernel<<<blocks, kThreadsPerBlock, 0, stream>>>(view, table, targets);
      check_launch("prepare_pattern config: copy_tiles_kernel");
    }
    if (sections[s].runs > 0 && view.slots > 0) {
      // sections[s].runs bounds one slot's runs (it counts the section plan's slots together).
      const int64_t blocks =
          std::min<int64_t>(ceil_div(sections[s].runs, kThreadsPerBlock), kMaxRunBlocksPerSlot);
      const dim3 grid(static_cast<unsigned>(blocks),
                      static_cast<unsigned>(std::min<int64_t>(view.slots, kMaxGridRows)));
      copy_runs_kernel<<<grid, kThreadsPerBlock, 0, stream>>>(view, table, targets);
      check_launch("prepare_pattern config: copy_runs_kernel");
    }
  }
}

void write_masks(const std::vector<MaskPolicy>& masks, int64_t kv_len, MaskRecord* records,
                 cudaStream_t stream) {
  for (std::size_t first = 0; first < masks.size(); first += kMasksPerLaunch) {
    MaskBatch batch{};
    batch.first = static_cast<int32_t>(first);
    batch.count =
        static_cast<int32_t>(std::min<std::size_t>(kMasksPerLaunch, masks.size() - first));
    for (int32_t m = 0; m < batch.count; ++m) {
      batch.records[m] = make_mask_record(masks[first + static_cast<std::size_t>(m)], kv_len);
    }
    write_masks_kernel<<<1, kMasksPerLaunch, 0, stream>>>(batch, records);
    check_launch("prepare_pattern config: write_masks_kernel");
  }
}

// The host section's key orders, which the concatenation's layout took over (rows and slots).
void copy_key_orders(const std::vector<Section>& sections, const ConfigTarget& target,
                     cudaStream_t stream) {
  if (!target.layout.has_key_orders) return;
  for (const Section& section : sections) {
    const DevicePlanLayout& part = section.plan.layout();
    if (!part.has_key_orders) continue;
    const auto* source = static_cast<const std::byte*>(section.plan.data()) + part.key_orders;
    check_cuda(cudaMemcpyAsync(target.base + target.layout.key_orders, source,
                               static_cast<std::size_t>(part.key_order_rows) * sizeof(int32_t),
                               cudaMemcpyDeviceToDevice, stream),
               "prepare_pattern config: cudaMemcpyAsync key orders");
  }
}

}  // namespace

void assemble_sections(const std::vector<Section>& sections, const PlanShape& shape,
                       const std::vector<MaskPolicy>& masks, const ConfigTarget& target,
                       cudaStream_t stream) {
  std::byte* base = target.base;
  const DevicePlanLayout& layout = target.layout;
  auto* run_offsets = reinterpret_cast<int64_t*>(base + layout.head_run_offsets);
  const int position_bits =
      std::max(1, static_cast<int>(std::bit_width(static_cast<uint64_t>(target.max_slot_tiles))));
  const int key_bits =
      std::max(1, static_cast<int>(std::bit_width(static_cast<uint64_t>(shape.kv_len))));
  const AssemblyScratch scratch(shape.head_slots(), target.tiles, position_bits + key_bits, stream);

  std::vector<SectionView> views;
  for (const Section& section : sections) views.push_back(section_view(section, shape));
  locate_slots(views, scratch, run_offsets, stream);

  CopyTargets targets{};
  targets.tiles = reinterpret_cast<TileRecord*>(base + layout.tiles);
  targets.spans = reinterpret_cast<SpanRecord*>(base + layout.spans);
  targets.span_shifts =
      layout.has_key_orders ? reinterpret_cast<int32_t*>(base + layout.span_shifts) : nullptr;
  targets.columns = reinterpret_cast<int32_t*>(base + layout.columns);
  targets.runs = reinterpret_cast<RunRecord*>(base + layout.runs);
  targets.run_offsets = run_offsets;
  targets.sort_keys = scratch.keys();
  targets.sort_values = scratch.values();
  targets.position_bits = position_bits;
  copy_sections(sections, views, scratch.table(), targets, target.tiles, stream);
  write_masks(masks, shape.kv_len, reinterpret_cast<MaskRecord*>(base + layout.masks), stream);
  copy_key_orders(sections, target, stream);
  if (target.tiles > 0) {
    scratch.sort_schedule(reinterpret_cast<int32_t*>(base + layout.schedule), stream);
  }
}

}  // namespace mmsparse::cuda
