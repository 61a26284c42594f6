// A per-head config built into one DevicePlan (config_builder.h). The steps, on the caller's
// stream unless said otherwise:
//   host:    group the heads into sections, the global mask table (PlanBuilder's first-use order
//            over head slots), the concatenated layout from the sections' sizes
//   device:  each device section's builder (static: one head; vertical-slash and grid: its heads'
//            estimate), each on a stream of its own forked from the caller's, joined back before
//            the kernels below
//   host:    the host section (PlanBuilder over its heads, masks renumbered to the global table),
//            uploaded
//   kernel:  per section, each of its head slots finds its tiles, spans, columns and runs in the
//            section (binary search on the tile records' head slots: tiles are stored slot by
//            slot, a grid section's empty capacity tiles after them); CUB scans the per-slot
//            counts into the concatenation's offsets, so the real tiles of every section are
//            packed at the front and the concatenation's empty tiles (no rows, no keys) follow
//   kernel:  per section, a warp per tile copies its spans and columns to their rebased place,
//            counts its keys and writes its record (global head slot, global mask); runs and the
//            mask table are copied alongside
//   CUB:     one stable descending radix sort of (keys, position) over every tile: the upload's
//            heaviest-first order, ties position-major then by tile index (device_plan.cu); the
//            empty tiles sort last, in tile order, as a grid plan's do.

#include "cuda/runtime/config_builder.h"

#include <algorithm>
#include <array>
#include <bit>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cuda/common/cub_storage.cuh"
#include "cuda/common/cuda_check.h"
#include "methods/estimate/index_kernels.h"
#include "methods/static/static_device.h"
#include "cuda/runtime/plan_view.cuh"
#include "cuda/common/stream_scratch.h"
#include "mmsparse/status.h"
#include "methods/estimate/modality_boundary.h"

namespace mmsparse::cuda {
namespace {

constexpr int kThreadsPerBlock = 256;
constexpr int kWarpLanes = 32;
constexpr unsigned kAllLanes = 0xffffffffu;
// Query heads of one section, passed to the kernels by value (as the estimate's selection).
constexpr int64_t kMaxSectionHeads = kMaxSelectedHeads;
// Mask records written per launch of write_masks_kernel, passed by value.
constexpr int kMasksPerLaunch = 32;
constexpr char kVerticalSlash[] = "vertical-slash";
constexpr char kGrid[] = "grid";

__host__ __device__ inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

enum class SectionKind { kStatic, kVerticalSlash, kGrid, kHost };

// One builder's heads and, once built, its plan.
struct Section {
  SectionKind kind = SectionKind::kStatic;
  PatternSpec spec;            // resolved; the host section has one per head in `specs`
  std::vector<int32_t> heads;  // ascending query heads
  std::vector<PatternSpec> specs;
  DevicePlan plan;
  int64_t runs = 0;                       // run records (host: the real ones; grid: the capacity)
  int64_t max_slot_tiles = 0;             // the most tiles one head slot has
  std::vector<int32_t> masks;             // device sections: global index of each section mask
  std::vector<double> host_slot_seconds;  // host section: each slot's build on the host clock
};

// Per section, by value: where its records are and how its head slots map to global ones. Section
// slot q is batch element q / heads.size() and query head heads[q % heads.size()]; a replicated
// (static) section holds one head slot that every section slot reads.
struct SectionView {
  const TileRecord* tiles;
  int64_t tiles_count;
  const SpanRecord* spans;
  const int32_t* columns;
  const int64_t* head_run_offsets;
  const RunRecord* runs;
  int64_t slots;  // batch × head_count
  int32_t head_count;
  int32_t total_heads;  // the layer's query heads
  int32_t replicated;
  int32_t mask_count;  // 0: the section's mask indices are already global (the host section)
  int32_t masks[kMaxStaticMasks];
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
    keys += range_keys(span);
  }
  for (int64_t c = lane; c < column_count; c += kWarpLanes) {
    out.columns[column_target + c] = section.columns[tile.column_begin + c];
  }
  for (int offset = kWarpLanes / 2; offset > 0; offset /= 2) {
    keys += __shfl_xor_sync(kAllLanes, keys, offset);
  }
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

// One thread per section slot: its query-order runs at the concatenation's run offsets.
__global__ void copy_runs_kernel(SectionView section, SlotTable table, CopyTargets out) {
  const int64_t q = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (q >= section.slots) return;
  const int64_t slot = section.global_slot(q);
  for (int64_t r = 0; r < table.run_counts[slot]; ++r) {
    out.runs[out.run_offsets[slot] + r] = section.runs[table.source_runs[slot] + r];
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

// Streams of their own for the device sections, forked from the caller's stream and joined back
// into it: the sections' builders are small launches (an estimate over a few heads, a search, a
// conversion), so one after another they leave most of the GPU idle.
class SectionStreams {
 public:
  SectionStreams(std::size_t count, cudaStream_t origin) : origin_(origin) {
    check_cuda(cudaEventCreateWithFlags(&fork_, cudaEventDisableTiming),
               "prepare_pattern config: cudaEventCreate fork");
    check_cuda(cudaEventRecord(fork_, origin), "prepare_pattern config: cudaEventRecord fork");
    for (std::size_t i = 0; i < count; ++i) {
      cudaStream_t stream = nullptr;
      check_cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
                 "prepare_pattern config: cudaStreamCreate");
      streams_.push_back(stream);
      check_cuda(cudaStreamWaitEvent(stream, fork_), "prepare_pattern config: fork");
    }
  }
  ~SectionStreams() {
    // Destructors cannot report errors. Destroying a stream with queued work is allowed: it is
    // released once the work is done.
    for (cudaStream_t stream : streams_) cudaStreamDestroy(stream);
    for (cudaEvent_t event : joins_) cudaEventDestroy(event);
    cudaEventDestroy(fork_);
  }
  SectionStreams(const SectionStreams&) = delete;
  SectionStreams& operator=(const SectionStreams&) = delete;

  cudaStream_t operator[](std::size_t i) const { return streams_[i]; }
  // The caller's stream waits for everything queued on the section streams so far.
  void join() {
    for (cudaStream_t stream : streams_) {
      cudaEvent_t event = nullptr;
      check_cuda(cudaEventCreateWithFlags(&event, cudaEventDisableTiming),
                 "prepare_pattern config: cudaEventCreate join");
      joins_.push_back(event);
      check_cuda(cudaEventRecord(event, stream), "prepare_pattern config: cudaEventRecord join");
      check_cuda(cudaStreamWaitEvent(origin_, event), "prepare_pattern config: join");
    }
  }

 private:
  cudaStream_t origin_;
  cudaEvent_t fork_ = nullptr;
  std::vector<cudaStream_t> streams_;
  std::vector<cudaEvent_t> joins_;
};

}  // namespace

class ConfigBuildTimer {
 public:
  ConfigBuildTimer() = default;
  ~ConfigBuildTimer() {
    // Destructors cannot report errors; a failed destroy leaks an event.
    for (cudaEvent_t event : events_) cudaEventDestroy(event);
  }
  ConfigBuildTimer(const ConfigBuildTimer&) = delete;
  ConfigBuildTimer& operator=(const ConfigBuildTimer&) = delete;

  // Records an event on `stream` and returns its index.
  std::size_t record(cudaStream_t stream) {
    cudaEvent_t event = nullptr;
    check_cuda(cudaEventCreate(&event), "prepare_pattern config: cudaEventCreate");
    events_.push_back(event);
    check_cuda(cudaEventRecord(event, stream), "prepare_pattern config: cudaEventRecord");
    return events_.size() - 1;
  }
  double seconds_between(std::size_t first, std::size_t last) const {
    float milliseconds = 0.0f;
    check_cuda(cudaEventElapsedTime(&milliseconds, events_[first], events_[last]),
               "prepare_pattern config: cudaEventElapsedTime");
    return static_cast<double>(milliseconds) / kMillisecondsPerSecond;
  }
  void wait() const {
    if (!events_.empty()) {
      check_cuda(cudaEventSynchronize(events_.back()),
                 "prepare_pattern config: cudaEventSynchronize");
    }
  }

  // Per global head slot: built on the device, and the event interval or host seconds of its
  // section divided among the section's slots.
  struct SlotSource {
    bool on_device = false;
    std::size_t first_event = 0, last_event = 0;
    int64_t section_slots = 1;
    double host_seconds = 0.0;
  };
  std::vector<SlotSource> slots;
  std::size_t assembly_first = 0, assembly_last = 0;

 private:
  static constexpr double kMillisecondsPerSecond = 1000.0;
  std::vector<cudaEvent_t> events_;
};

PlanBuildTimes config_build_times(const ConfigBuildTimer& timer) {
  timer.wait();
  PlanBuildTimes times;
  for (const ConfigBuildTimer::SlotSource& source : timer.slots) {
    HeadBuildTime head;
    head.on_device = source.on_device;
    head.seconds = source.on_device ? timer.seconds_between(source.first_event, source.last_event) /
                                          static_cast<double>(source.section_slots)
                                    : source.host_seconds;
    times.heads.push_back(head);
  }
  times.assembly_seconds = timer.seconds_between(timer.assembly_first, timer.assembly_last);
  return times;
}

bool builds_head_on_device(const PatternSpec& resolved_spec, const PlanShape& shape,
                           const ModalityLayout* layout, bool device_inputs) {
  return builds_on_device(resolved_spec.name) ||
         (device_inputs && (builds_dynamic_on_device(resolved_spec, shape, layout) ||
                            builds_grid_on_device(resolved_spec, shape, layout)));
}

namespace {

// Heads grouped into sections: static and device vertical-slash and grid heads by spec, the rest
// into one host section (last).
std::vector<Section> group_heads(const std::vector<PatternSpec>& specs, const PlanShape& shape,
                                 const ModalityLayout* layout, bool device_inputs) {
  std::vector<Section> sections;
  std::map<std::string, std::size_t> by_spec;
  Section host;
  host.kind = SectionKind::kHost;
  for (std::size_t h = 0; h < specs.size(); ++h) {
    const PatternSpec& spec = specs[h];
    const auto head = static_cast<int32_t>(h);
    if (!builds_head_on_device(spec, shape, layout, device_inputs)) {
      host.heads.push_back(head);
      host.specs.push_back(spec);
      continue;
    }
    const auto [entry, added] = by_spec.emplace(spec.to_string(), sections.size());
    if (added) {
      Section section;
      section.kind = builds_on_device(spec.name)                  ? SectionKind::kStatic
                     : builds_grid_on_device(spec, shape, layout) ? SectionKind::kGrid
                                                                  : SectionKind::kVerticalSlash;
      section.spec = spec;
      sections.push_back(std::move(section));
    }
    sections[entry->second].heads.push_back(head);
  }
  for (const Section& section : sections) {
    if (static_cast<int64_t>(section.heads.size()) > kMaxSectionHeads) {
      throw Error(ErrorCode::kUnsupported,
                  "prepare_pattern specs: at most " + std::to_string(kMaxSectionHeads) +
                      " query heads share a device-built spec, got " +
                      std::to_string(section.heads.size()) + " with " + section.spec.to_string());
    }
  }
  if (static_cast<int64_t>(host.heads.size()) > kMaxSectionHeads) {
    throw Error(ErrorCode::kUnsupported,
                "prepare_pattern specs: at most " + std::to_string(kMaxSectionHeads) +
                    " query heads are built on the host, got " + std::to_string(host.heads.size()));
  }
  if (!host.heads.empty()) sections.push_back(std::move(host));
  return sections;
}

PlanShape section_shape(const PlanShape& shape, const Section& section) {
  PlanShape result = shape;
  if (section.kind == SectionKind::kStatic) {
    result.batch = 1;  // every head slot of a static spec is the same: built once, replicated
    result.heads = 1;
  } else {
    result.heads = static_cast<int64_t>(section.heads.size());
  }
  return result;
}

// Builds the host section's plan head slot by head slot, timing each (host clock).
Plan build_host_section(Section& section, const PlanShape& shape, const ConfigInputs& inputs) {
  const PlanShape local = section_shape(shape, section);
  PlanBuilder builder(local);
  const auto heads = static_cast<int64_t>(section.heads.size());
  for (int64_t q = 0; q < local.head_slots(); ++q) {
    const std::size_t j = static_cast<std::size_t>(q % heads);
    const PatternSpec& spec = section.specs[j];
    if (is_dynamic(spec) && inputs.host == nullptr) {
      const std::string head = "prepare_pattern specs: head " + std::to_string(section.heads[j]) +
                               " (" + spec.to_string() + ")";
      throw Error(ErrorCode::kUnsupported,
                  builds_dynamic_on_device(spec, shape, inputs.layout) ||
                          builds_grid_on_device(spec, shape, inputs.layout)
                      ? head +
                            " needs inputs: device q and k to estimate it on the GPU, or host "
                            "q and k (host_inputs) to build it on the host"
                      : head +
                            " is not built on the GPU; pass host q and k (host_inputs) to "
                            "build it on the host");
    }
    const auto start = std::chrono::steady_clock::now();
    append_pattern_head(builder, spec, shape, inputs.layout, inputs.host,
                        q / heads * shape.heads + section.heads[j]);
    section.host_slot_seconds.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return builder.finish();
}

// The mask policies each head slot of a section uses, in first-use order.
std::vector<MaskPolicy> slot_masks(const Section& section, const Plan* host_plan, int64_t q,
                                   const PlanShape& shape) {
  if (section.kind == SectionKind::kStatic) {
    return static_plan_masks(section.spec, section_shape(shape, section));
  }
  if (section.kind == SectionKind::kVerticalSlash || section.kind == SectionKind::kGrid) {
    if (shape.q_len == 0) return {};
    return {MaskPolicy{}};  // causal, PlanBuilder's default
  }
  std::vector<MaskPolicy> used;
  for (int64_t t = host_plan->head_tile_offsets[q]; t < host_plan->head_tile_offsets[q + 1]; ++t) {
    const MaskPolicy& policy = host_plan->masks[host_plan->tile_masks[t]];
    if (std::find(used.begin(), used.end(), policy) == used.end()) used.push_back(policy);
  }
  return used;
}

int32_t mask_index(std::vector<MaskPolicy>& table, const MaskPolicy& policy) {
  const auto found = std::find(table.begin(), table.end(), policy);
  if (found != table.end()) return static_cast<int32_t>(found - table.begin());
  table.push_back(policy);
  return static_cast<int32_t>(table.size() - 1);
}

SectionView section_view(const Section& section, const PlanShape& shape) {
  SectionView view{};
  const PlanView plan = make_plan_view(section.plan);
  view.tiles = plan.tiles;
  view.tiles_count = section.plan.num_tiles();
  view.spans = plan.spans;
  view.columns = plan.columns;
  view.head_run_offsets = plan.head_run_offsets;
  view.runs = plan.runs;
  view.head_count = static_cast<int32_t>(section.heads.size());
  view.slots = shape.batch * view.head_count;
  view.total_heads = static_cast<int32_t>(shape.heads);
  view.replicated = section.kind == SectionKind::kStatic ? 1 : 0;
  view.mask_count = static_cast<int32_t>(section.masks.size());
  std::copy(section.masks.begin(), section.masks.end(), view.masks);
  std::copy(section.heads.begin(), section.heads.end(), view.heads);
  return view;
}

// Slots of the layer a section's records fill (a replicated section's head slot, once per slot).
int64_t section_copies(const Section& section, const PlanShape& shape) {
  return section.kind == SectionKind::kStatic
             ? shape.batch * static_cast<int64_t>(section.heads.size())
             : 1;
}

// Elements of a section of the buffer, from its byte extent (the capacity a builder sized).
int64_t capacity(std::size_t begin, std::size_t end, std::size_t element_bytes) {
  return static_cast<int64_t>((end - begin) / element_bytes);
}

}  // namespace

ConfigBuild build_config_plan_on_device(const std::vector<PatternSpec>& resolved_specs,
                                        const PlanShape& shape, const ConfigInputs& inputs,
                                        void* stream) {
  PlanBuilder shape_check(shape);  // throws on a bad shape as the host build does
  check_int32_ranges(shape);
  if (static_cast<int64_t>(resolved_specs.size()) != shape.heads) {
    throw_invalid_argument(
        "prepare_pattern specs",
        "one pattern spec per query head (heads = " + std::to_string(shape.heads) + ")",
        std::to_string(resolved_specs.size()) + " specs");
  }
  const auto cuda_stream = static_cast<cudaStream_t>(stream);
  const int64_t slots = shape.head_slots();
  // Declared before the sections: a section plan that is not released (an error midway) frees its
  // buffer on its stream when destroyed, so the streams must outlive it.
  std::optional<SectionStreams> section_streams;
  std::vector<Section> sections =
      group_heads(resolved_specs, shape, inputs.layout, inputs.device != nullptr);
  ConfigBuild result;
  auto timer = std::make_shared<ConfigBuildTimer>();
  timer->slots.resize(static_cast<std::size_t>(slots));
  auto for_each_slot = [&](const Section& section, auto&& visit) {
    const auto heads = static_cast<int64_t>(section.heads.size());
    for (int64_t q = 0; q < shape.batch * heads; ++q) {
      visit(q, q / heads * shape.heads + section.heads[static_cast<std::size_t>(q % heads)]);
    }
  };

  // The device sections, queued first so that the GPU builds them while the host builds its part,
  // each on a stream of its own (they read only the inputs and write only their own plans).
  const auto device_sections = static_cast<std::size_t>(
      std::count_if(sections.begin(), sections.end(),
                    [](const Section& section) { return section.kind != SectionKind::kHost; }));
  section_streams.emplace(device_sections, cuda_stream);
  std::size_t next_stream = 0;
  Plan host_plan;
  Section* host = nullptr;
  for (Section& section : sections) {
    if (section.kind == SectionKind::kHost) {
      host = &section;
      continue;
    }
    const PlanShape local = section_shape(shape, section);
    const cudaStream_t section_stream = (*section_streams)[next_stream++];
    void* const builder_stream = section_stream;
    const std::size_t first_event = timer->record(section_stream);
    switch (section.kind) {
      case SectionKind::kStatic:
        section.plan = build_static_plan_on_device(section.spec, local, builder_stream);
        section.max_slot_tiles = section.plan.num_tiles();
        break;
      case SectionKind::kVerticalSlash:
        section.plan = build_dynamic_plan_on_device(
            section.spec, local, inputs.layout,
            select_heads(kVerticalSlash, *inputs.device, section.heads), builder_stream);
        section.max_slot_tiles =
            local.head_slots() > 0 ? section.plan.num_tiles() / local.head_slots() : 0;
        // A Q-boundary head's query order (the same runs for every slot).
        section.runs = index::plan_vertical_slash(section.spec, local, inputs.layout).runs();
        result.estimated_on_device = true;
        break;
      case SectionKind::kGrid: {
        section.plan = build_grid_plan_on_device(section.spec, local, inputs.layout,
                                                 select_heads(kGrid, *inputs.device, section.heads),
                                                 builder_stream);
        // The plan's capacities (sized for the worst candidate stride): the real counts live on
        // the device.
        const index::GridBuild capacities = index::plan_grid(section.spec, local, inputs.layout);
        section.max_slot_tiles = capacities.tiles_per_head;
        section.runs = capacities.runs();
        result.estimated_on_device = true;
        break;
      }
      case SectionKind::kHost:
        break;  // handled above
    }
    const std::size_t last_event = timer->record(section_stream);
    const auto shared_by = static_cast<int64_t>(section.heads.size()) * shape.batch;
    for_each_slot(section, [&](int64_t, int64_t slot) {
      timer->slots[static_cast<std::size_t>(slot)] = {true, first_event, last_event, shared_by,
                                                      0.0};
    });
  }
  if (host != nullptr) {
    host_plan = build_host_section(*host, shape, inputs);
    for_each_slot(*host, [&](int64_t q, int64_t slot) {
      timer->slots[static_cast<std::size_t>(slot)].host_seconds =
          host->host_slot_seconds[static_cast<std::size_t>(q)];
    });
    for (int64_t q = 0; q < host_plan.head_slots(); ++q) {
      host->max_slot_tiles = std::max(host->max_slot_tiles, host_plan.head_tile_offsets[q + 1] -
                                                                host_plan.head_tile_offsets[q]);
    }
    for (const QueryRun& run : host_plan.runs) host->runs += run.count > 0 ? 1 : 0;
  }

  // The global mask table in PlanBuilder's first-use order over head slots.
  std::vector<int32_t> slot_section(static_cast<std::size_t>(slots));
  std::vector<int64_t> slot_local(static_cast<std::size_t>(slots));
  for (std::size_t s = 0; s < sections.size(); ++s) {
    for_each_slot(sections[s], [&](int64_t q, int64_t slot) {
      slot_section[static_cast<std::size_t>(slot)] = static_cast<int32_t>(s);
      slot_local[static_cast<std::size_t>(slot)] = q;
    });
  }
  // A device section's slots all use its policies in one order.
  std::vector<std::vector<MaskPolicy>> section_policies;
  for (const Section& section : sections) {
    section_policies.push_back(section.kind == SectionKind::kHost
                                   ? std::vector<MaskPolicy>{}
                                   : slot_masks(section, nullptr, 0, shape));
  }
  std::vector<MaskPolicy> masks;
  for (int64_t slot = 0; slot < slots; ++slot) {
    const auto s = static_cast<std::size_t>(slot_section[slot]);
    const std::vector<MaskPolicy> used =
        sections[s].kind == SectionKind::kHost
            ? slot_masks(sections[s], &host_plan, slot_local[slot], shape)
            : section_policies[s];
    for (const MaskPolicy& policy : used) (void)mask_index(masks, policy);
  }
  for (std::size_t s = 0; s < sections.size(); ++s) {
    for (const MaskPolicy& policy : section_policies[s]) {
      sections[s].masks.push_back(mask_index(masks, policy));
    }
  }
  if (host != nullptr) {
    // Renumbered to the global table before the upload, so its tiles carry global mask indices.
    for (int32_t& mask : host_plan.tile_masks) mask = mask_index(masks, host_plan.masks[mask]);
    host_plan.masks = masks;
    host->plan = DevicePlan(host_plan, cuda_stream);
    if (host->plan.layout().has_token_info) {
      throw Error(ErrorCode::kUnsupported,
                  "prepare_pattern specs: masks with token arrays are not concatenated on the GPU");
    }
  }

  // The upload's section order (device_plan.cu); spans and columns at the sections' capacities.
  int64_t tiles = 0, runs = 0, span_capacity = 0, column_capacity = 0, max_slot_tiles = 0;
  bool covers_every_row = true;
  for (const Section& section : sections) {
    const int64_t copies = section_copies(section, shape);
    const DevicePlanLayout& part = section.plan.layout();
    tiles += copies * section.plan.num_tiles();
    runs += section.runs;
    span_capacity += copies * capacity(part.spans, part.columns, sizeof(SpanRecord));
    column_capacity += copies * capacity(part.columns, part.token_info, sizeof(int32_t));
    max_slot_tiles = std::max(max_slot_tiles, section.max_slot_tiles);
    covers_every_row = covers_every_row && section.plan.covers_every_row();
  }
  if (tiles > std::numeric_limits<int32_t>::max()) {
    throw Error(ErrorCode::kUnsupported, "prepare_pattern specs: " + std::to_string(tiles) +
                                             " tiles; the schedule indexes tiles in int32");
  }
  // The spans and columns at the sections' capacities; zeroed up to the spans: the padding between
  // sections, as the upload has it.
  const DevicePlanLayout layout = plan_layout(
      {slots, runs, tiles, static_cast<int64_t>(masks.size()), span_capacity, column_capacity});

  section_streams->join();
  timer->assembly_first = timer->record(cuda_stream);
  // The column count is an upper bound where a section was estimated.
  result.plan = DevicePlan(shape, layout, tiles, column_capacity, covers_every_row, layout.spans,
                           cuda_stream);
  DevicePlan& plan = result.plan;
  auto* base = static_cast<std::byte*>(plan.buffer_);
  auto* run_offsets = reinterpret_cast<int64_t*>(base + layout.head_run_offsets);

  const auto slot_items = static_cast<int>(slots + 1);
  const auto tile_items = static_cast<int>(tiles);
  const int position_bits =
      std::max(1, static_cast<int>(std::bit_width(static_cast<uint64_t>(max_slot_tiles))));
  const int key_bits =
      std::max(1, static_cast<int>(std::bit_width(static_cast<uint64_t>(shape.kv_len))));
  const std::size_t scan_bytes =
      scan_storage_bytes(slot_items, cuda_stream, "prepare_pattern config: scan storage");
  const std::size_t sort_bytes = sort_storage_bytes<uint64_t>(
      tile_items, position_bits + key_bits, cuda_stream, "prepare_pattern config: sort storage");

  constexpr int kSlotArrays = 11;  // the SlotTable's arrays, first in the scratch
  ScratchLayout scratch_layout;
  std::array<std::size_t, kSlotArrays> slot_arrays_at{};
  for (std::size_t& at : slot_arrays_at) at = scratch_layout.add<int64_t>(slot_items);
  const std::size_t keys_at = scratch_layout.add<uint64_t>(tiles);
  const std::size_t sorted_keys_at = scratch_layout.add<uint64_t>(tiles);
  const std::size_t values_at = scratch_layout.add<int32_t>(tiles);
  const std::size_t temp_at =
      scratch_layout.add<std::byte>(static_cast<int64_t>(std::max(scan_bytes, sort_bytes)));
  const StreamScratch scratch(scratch_layout.bytes(), cuda_stream,
                              "prepare_pattern config: cudaMallocAsync scratch");
  std::byte* scratch_base = scratch.base();
  // The counts' last entries stay 0, so that each exclusive scan ends in its total (the slot
  // arrays lie before the keys).
  check_cuda(cudaMemsetAsync(scratch_base, 0, keys_at, cuda_stream),
             "prepare_pattern config: cudaMemsetAsync slot table");
  auto slot_array = [&](int index) {
    return region<int64_t>(scratch_base, slot_arrays_at[static_cast<std::size_t>(index)]);
  };
  const SlotTable table{slot_array(0), slot_array(1), slot_array(2), slot_array(3),
                        slot_array(4), slot_array(5), slot_array(6), slot_array(7),
                        slot_array(8), slot_array(9), slot_array(10)};
  void* temp = scratch_base + temp_at;

  std::vector<SectionView> views;
  for (const Section& part : sections) views.push_back(section_view(part, shape));
  for (const SectionView& view : views) {
    if (view.slots == 0) continue;
    const auto blocks = static_cast<unsigned>(ceil_div(view.slots, kThreadsPerBlock));
    locate_slots_kernel<<<blocks, kThreadsPerBlock, 0, cuda_stream>>>(view, table);
    check_launch("prepare_pattern config: locate_slots_kernel");
  }
  const std::pair<const int64_t*, int64_t*> scans[] = {{table.tile_counts, table.target_tiles},
                                                       {table.span_counts, table.target_spans},
                                                       {table.column_counts, table.target_columns},
                                                       {table.run_counts, run_offsets}};
  for (const auto& [counts, offsets] : scans) {
    std::size_t temp_bytes = scan_bytes;
    check_cuda(
        cub::DeviceScan::ExclusiveSum(temp, temp_bytes, counts, offsets, slot_items, cuda_stream),
        "prepare_pattern config: slot scan");
  }

  CopyTargets targets{};
  targets.tiles = reinterpret_cast<TileRecord*>(base + layout.tiles);
  targets.spans = reinterpret_cast<SpanRecord*>(base + layout.spans);
  targets.columns = reinterpret_cast<int32_t*>(base + layout.columns);
  targets.runs = reinterpret_cast<RunRecord*>(base + layout.runs);
  targets.run_offsets = run_offsets;
  targets.sort_keys = region<uint64_t>(scratch_base, keys_at);
  targets.sort_values = region<int32_t>(scratch_base, values_at);
  targets.position_bits = position_bits;
  if (tiles > 0) {
    empty_schedule_kernel<<<static_cast<unsigned>(ceil_div(tiles, kThreadsPerBlock)),
                            kThreadsPerBlock, 0, cuda_stream>>>(tiles, targets);
    check_launch("prepare_pattern config: empty_schedule_kernel");
  }
  for (std::size_t s = 0; s < sections.size(); ++s) {
    const SectionView& view = views[s];
    const int64_t items = view.replicated ? view.slots * view.tiles_count : view.tiles_count;
    if (items > 0) {
      const auto blocks = static_cast<unsigned>(ceil_div(items * kWarpLanes, kThreadsPerBlock));
      copy_tiles_kernel<<<blocks, kThreadsPerBlock, 0, cuda_stream>>>(view, table, targets);
      check_launch("prepare_pattern config: copy_tiles_kernel");
    }
    if (sections[s].runs > 0) {
      const auto blocks = static_cast<unsigned>(ceil_div(view.slots, kThreadsPerBlock));
      copy_runs_kernel<<<blocks, kThreadsPerBlock, 0, cuda_stream>>>(view, table, targets);
      check_launch("prepare_pattern config: copy_runs_kernel");
    }
  }
  auto* mask_records = reinterpret_cast<MaskRecord*>(base + layout.masks);
  for (std::size_t first = 0; first < masks.size(); first += kMasksPerLaunch) {
    MaskBatch batch{};
    batch.first = static_cast<int32_t>(first);
    batch.count =
        static_cast<int32_t>(std::min<std::size_t>(kMasksPerLaunch, masks.size() - first));
    for (int32_t m = 0; m < batch.count; ++m) {
      batch.records[m] = make_mask_record(masks[first + static_cast<std::size_t>(m)], shape.kv_len);
    }
    write_masks_kernel<<<1, kMasksPerLaunch, 0, cuda_stream>>>(batch, mask_records);
    check_launch("prepare_pattern config: write_masks_kernel");
  }

  if (tiles > 0) {
    // Stable: equal (keys, position) keep tile order, the upload's last tie-break.
    std::size_t temp_bytes = sort_bytes;
    check_cuda(
        cub::DeviceRadixSort::SortPairsDescending(
            temp, temp_bytes, targets.sort_keys, region<uint64_t>(scratch_base, sorted_keys_at),
            targets.sort_values, reinterpret_cast<int32_t*>(base + layout.schedule), tile_items, 0,
            position_bits + key_bits, cuda_stream),
        "prepare_pattern config: schedule sort");
  }
  timer->assembly_last = timer->record(cuda_stream);
  result.timer = std::move(timer);
  // The sections' buffers are freed in the caller's stream order, after the copies.
  for (Section& part : sections) part.plan.release(cuda_stream);
  return result;
}

}  // namespace mmsparse::cuda
