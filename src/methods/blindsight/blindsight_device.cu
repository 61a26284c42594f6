// BlindSight's templates built on the GPU (blindsight_device.h). Steps, on the caller's stream:
//   host:   the geometry of one head slot (blindsight_geometry.h) -> the plan's layout and buffer;
//           the geometry and the mask records uploaded (one copy each), the token array written
//           where a mask reads it
//   kernel: a thread per tile walks its key runs (for_each_key_run, the walk the host counted
//           with) and writes its span and tile records for every head slot, and a piece record
//           (first key, end, column offset) per run with columns
//   kernel: a warp per piece writes its columns, coalesced, for every head slot
//   kernel: the schedule: the one-slot order heaviest first, each position's tile in slot order
//           (the upload's ties: position-major, then slot)

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "cuda/common/cuda_check.h"
#include "cuda/common/math.h"
#include "cuda/common/stream_scratch.h"
#include "cuda/runtime/plan_view.cuh"
#include "methods/blindsight/blindsight_device.h"
#include "methods/blindsight/blindsight_geometry.h"
#include "mmsparse/status.h"

namespace mmsparse::cuda {
namespace {

constexpr int kThreadsPerBlock = 256;

using detail::BlindSightRun;
using detail::BlindSightTile;

// A run's gathered keys [begin, end), written at `column_at` of each head slot's columns.
struct ColumnPiece {
  int32_t begin;
  int32_t end;
  int64_t column_at;
};

// The geometry on the device, and where every head slot's records go.
struct RecordParams {
  const BlindSightTile* tiles;  // [tile_count]
  int64_t tile_count;
  const BlindSightRun* shared;  // [shared_count]
  int64_t shared_count;
  const int32_t* own_offsets;  // [images + 1]
  const BlindSightRun* own;
  const int32_t* order;  // [tile_count] one head slot's tiles heaviest first
  int64_t slots;
  int64_t slot_spans;  // one head slot's spans and columns
  int64_t slot_columns;
  ColumnPiece* pieces;  // [pieces]
  int64_t piece_count;
  TileRecord* out_tiles;  // the plan's sections
  SpanRecord* out_spans;
  int32_t* out_columns;
  int32_t* out_schedule;
};

__global__ void records_kernel(const RecordParams p) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= p.tile_count) return;
  const BlindSightTile tile = p.tiles[t];
  int64_t span = tile.span_at;
  int64_t column = tile.column_at;
  int64_t piece = tile.piece_at;
  const auto write_span = [&](int32_t begin, int32_t end) {
    for (int64_t slot = 0; slot < p.slots; ++slot) {
      p.out_spans[slot * p.slot_spans + span] = {begin, end, 1, 1};
    }
    ++span;
  };
  if (tile.image < 0) {
    if (tile.keys_end > 0) write_span(0, tile.keys_end);
  } else {
    const int32_t own_begin = p.own_offsets[tile.image];
    detail::for_each_key_run(
        p.shared, p.shared_count, p.own + own_begin, p.own_offsets[tile.image + 1] - own_begin,
        tile, [&](int32_t begin, int32_t end) {
          const int32_t span_end = detail::run_span_end(begin, end, tile.first);
          if (span_end > begin) write_span(begin, span_end);
          if (end > span_end) {
            p.pieces[piece++] = {span_end, end, column};
            column += end - span_end;
          }
        });
  }
  for (int64_t slot = 0; slot < p.slots; ++slot) {
    const int64_t spans_at = slot * p.slot_spans;
    const int64_t columns_at = slot * p.slot_columns;
    p.out_tiles[slot * p.tile_count + t] = {tile.begin,
                                            tile.end,
                                            static_cast<int32_t>(slot),
                                            tile.mask,
                                            spans_at + tile.span_at,
                                            spans_at + span,
                                            columns_at + tile.column_at,
                                            columns_at + column};
  }
}

__global__ void columns_kernel(const RecordParams p) {
  const int64_t piece = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarpLanes;
  const int lane = static_cast<int>(threadIdx.x) % kWarpLanes;
  if (piece >= p.piece_count) return;
  const ColumnPiece record = p.pieces[piece];
  for (int64_t slot = 0; slot < p.slots; ++slot) {
    int32_t* columns = p.out_columns + slot * p.slot_columns + record.column_at;
    for (int32_t key = record.begin + lane; key < record.end; key += kWarpLanes) {
      columns[key - record.begin] = key;
    }
  }
}

__global__ void schedule_kernel(const RecordParams p) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= p.tile_count * p.slots) return;
  const int64_t position = p.order[i / p.slots];
  p.out_schedule[i] = static_cast<int32_t>(i % p.slots * p.tile_count + position);
}

unsigned blocks_for(int64_t threads) {
  return static_cast<unsigned>(ceil_div(threads, kThreadsPerBlock));
}

// The geometry's arrays in one scratch allocation, copied once; the pieces after them.
class GeometryScratch {
 public:
  GeometryScratch(const detail::BlindSightGeometry& geometry, cudaStream_t stream)
      : tiles_at_(layout_.add<BlindSightTile>(static_cast<int64_t>(geometry.tiles.size()))),
        shared_at_(layout_.add<BlindSightRun>(static_cast<int64_t>(geometry.shared.size()))),
        own_offsets_at_(layout_.add<int32_t>(static_cast<int64_t>(geometry.own_offsets.size()))),
        own_at_(layout_.add<BlindSightRun>(static_cast<int64_t>(geometry.own.size()))),
        order_at_(layout_.add<int32_t>(static_cast<int64_t>(geometry.schedule.size()))),
        uploaded_bytes_(layout_.bytes()),
        pieces_at_(layout_.add<ColumnPiece>(geometry.pieces)),
        scratch_(layout_.bytes(), stream, "blindsight plan: geometry") {
    std::vector<std::byte> staging(uploaded_bytes_);
    stage(staging, tiles_at_, geometry.tiles);
    stage(staging, shared_at_, geometry.shared);
    stage(staging, own_offsets_at_, geometry.own_offsets);
    stage(staging, own_at_, geometry.own);
    stage(staging, order_at_, geometry.schedule);
    // From pageable memory the copy returns once `staging` has been read.
    check_cuda(cudaMemcpyAsync(scratch_.base(), staging.data(), uploaded_bytes_,
                               cudaMemcpyHostToDevice, stream),
               "blindsight plan: cudaMemcpyAsync geometry");
  }

  void fill(RecordParams& p) const {
    std::byte* base = scratch_.base();
    p.tiles = region<BlindSightTile>(base, tiles_at_);
    p.shared = region<BlindSightRun>(base, shared_at_);
    p.own_offsets = region<int32_t>(base, own_offsets_at_);
    p.own = region<BlindSightRun>(base, own_at_);
    p.order = region<int32_t>(base, order_at_);
    p.pieces = region<ColumnPiece>(base, pieces_at_);
  }

 private:
  template <class T>
  static void stage(std::vector<std::byte>& staging, std::size_t at, const std::vector<T>& values) {
    if (!values.empty()) std::memcpy(staging.data() + at, values.data(), values.size() * sizeof(T));
  }

  ScratchLayout layout_;
  std::size_t tiles_at_, shared_at_, own_offsets_at_, own_at_, order_at_;
  std::size_t uploaded_bytes_;
  std::size_t pieces_at_;
  StreamScratch scratch_;
};

void write_masks(const std::vector<MaskPolicy>& masks, int64_t kv_len, MaskRecord* out,
                 cudaStream_t stream) {
  std::vector<MaskRecord> records;
  for (const MaskPolicy& mask : masks) records.push_back(make_mask_record(mask, kv_len));
  check_cuda(cudaMemcpyAsync(out, records.data(), records.size() * sizeof(MaskRecord),
                             cudaMemcpyHostToDevice, stream),
             "blindsight plan: cudaMemcpyAsync masks");
}

// Every head slot's query order: the same runs, as the upload writes them (RunRecord, order
// indices counted from 0 per slot), and the run offsets slot by slot. A few records per image: one
// host copy per section.
void write_query_order(const std::vector<QueryRun>& order, int64_t slots, std::byte* base,
                       const DevicePlanLayout& sections, cudaStream_t stream) {
  std::vector<RunRecord> slot_runs;
  int32_t order_begin = 0;
  for (const QueryRun& run : order) {
    slot_runs.push_back(
        {order_begin, static_cast<int32_t>(run.start), static_cast<int32_t>(run.step)});
    order_begin += static_cast<int32_t>(run.count);
  }
  const auto per_slot = static_cast<int64_t>(slot_runs.size());
  std::vector<int64_t> offsets(static_cast<std::size_t>(slots) + 1);
  std::vector<RunRecord> runs;
  runs.reserve(static_cast<std::size_t>(per_slot * slots));
  for (int64_t slot = 0; slot <= slots; ++slot) {
    offsets[static_cast<std::size_t>(slot)] = slot * per_slot;
    if (slot < slots) runs.insert(runs.end(), slot_runs.begin(), slot_runs.end());
  }
  // From pageable memory each copy returns once its vector has been read.
  check_cuda(cudaMemcpyAsync(region<int64_t>(base, sections.head_run_offsets), offsets.data(),
                             offsets.size() * sizeof(int64_t), cudaMemcpyHostToDevice, stream),
             "blindsight plan: cudaMemcpyAsync run offsets");
  check_cuda(cudaMemcpyAsync(region<RunRecord>(base, sections.runs), runs.data(),
                             runs.size() * sizeof(RunRecord), cudaMemcpyHostToDevice, stream),
             "blindsight plan: cudaMemcpyAsync runs");
}

void launch_records(const RecordParams& p, cudaStream_t stream) {
  records_kernel<<<blocks_for(p.tile_count), kThreadsPerBlock, 0, stream>>>(p);
  check_launch("blindsight plan: records_kernel");
  if (p.piece_count > 0) {
    columns_kernel<<<blocks_for(p.piece_count * kWarpLanes), kThreadsPerBlock, 0, stream>>>(p);
    check_launch("blindsight plan: columns_kernel");
  }
  schedule_kernel<<<blocks_for(p.tile_count * p.slots), kThreadsPerBlock, 0, stream>>>(p);
  check_launch("blindsight plan: schedule_kernel");
}

}  // namespace

DevicePlan build_blindsight_plan_on_device(const PatternSpec& resolved_spec, const PlanShape& shape,
                                           const ModalityLayout* layout, void* stream_handle,
                                           int64_t* run_count) {
  const auto stream = static_cast<cudaStream_t>(stream_handle);
  const detail::BlindSightGeometry geometry =
      detail::blindsight_geometry(resolved_spec, shape, layout);
  check_int32_ranges(shape);
  const int64_t slots = shape.head_slots();
  const auto slot_tiles = static_cast<int64_t>(geometry.tiles.size());
  if (slot_tiles * slots > std::numeric_limits<int32_t>::max()) {
    throw Error(ErrorCode::kUnsupported,
                "build_blindsight_plan_on_device: " + std::to_string(slot_tiles * slots) +
                    " tiles; the schedule indexes tiles in int32");
  }
  const int64_t token_info = geometry.token_masks ? shape.kv_len : 0;
  const auto slot_runs = static_cast<int64_t>(geometry.order.size());
  DevicePlanLayout plan_sections = plan_layout(
      {slots, slot_runs * slots, slot_tiles * slots, static_cast<int64_t>(geometry.masks.size()),
       geometry.spans * slots, geometry.columns * slots, token_info});
  plan_sections.gathers = geometry.columns > 0;  // exact, as the upload has it
  // Every head slot has the same order, which the kernels then read without the run offsets.
  if (slot_runs > 0) plan_sections.shared_runs = slot_runs;
  if (run_count != nullptr) *run_count = slot_runs * slots;
  int64_t slot_keys = 0;  // every head slot lists the same keys
  for (const detail::BlindSightTile& tile : geometry.tiles) slot_keys += tile.keys;
  DevicePlan plan = DevicePlan::for_builder(shape, plan_sections, slot_tiles * slots,
                                            geometry.columns * slots, geometry.covers_every_row,
                                            plan_sections.spans, stream, slot_keys * slots);
  if (slots == 0) return plan;
  auto* base = static_cast<std::byte*>(plan.builder_data());
  if (slot_runs > 0) write_query_order(geometry.order, slots, base, plan_sections, stream);
  if (slot_tiles == 0) return plan;
  write_masks(geometry.masks, shape.kv_len, region<MaskRecord>(base, plan_sections.masks), stream);
  if (geometry.token_masks) {
    write_token_info(*layout, region<int32_t>(base, plan_sections.token_info), stream);
  }
  const GeometryScratch scratch(geometry, stream);
  RecordParams p{};
  scratch.fill(p);
  p.tile_count = slot_tiles;
  p.shared_count = static_cast<int64_t>(geometry.shared.size());
  p.slots = slots;
  p.slot_spans = geometry.spans;
  p.slot_columns = geometry.columns;
  p.piece_count = geometry.pieces;
  p.out_tiles = region<TileRecord>(base, plan_sections.tiles);
  p.out_spans = region<SpanRecord>(base, plan_sections.spans);
  p.out_columns = region<int32_t>(base, plan_sections.columns);
  p.out_schedule = region<int32_t>(base, plan_sections.schedule);
  launch_records(p, stream);
  return plan;
}

}  // namespace mmsparse::cuda
