// VecAttention's plan on the GPU (vec_device.h): pooling, TilingSelect + minS on tensor cores in a
// count pass and a write pass, the records, and the heaviest-first schedule.
//
// Arithmetic. The pooled query is the host's (vec.h): the fp32 sum of the block's rows in row
// order over the row count, rounded to the input dtype, so it equals the host's bit for bit. The
// scores are m16n8k16 MMAs of the pooled queries against the keys with fp32 accumulation: the
// products are exact, but the tensor cores sum them in their own order, so a score may differ
// from the host's FMA chain by a few fp32 roundings of the sum of |products|. Maxima and the test
// (score - m >= log alpha) are the host's operations on those scores. The kept sets therefore
// equal the host's except for keys whose margin lies within that rounding of log(alpha)
// (tests/gpu/vec_selection_check.h states and checks the bound).
//
// Work. The score pass: a CTA of kSelectWarps warps serves kCtaRows consecutive pooled blocks of
// one head slot (16 per warp: the MMA's rows) over one key split: whole groups of the running
// maximum, which restarts at each group, so splits are independent (about kSplitKeys keys, or
// fewer where shorter CTAs fill the device's last round better: split_key_count). Keys stream
// through shared memory in chunks of kChunkKeys (cp.async, kStages stages, one barrier per chunk:
// later chunks' copies land while this one is scored); each warp scores a chunk's four tiles of 16
// keys in two halves of head_dim / 16 steps of four independent MMAs, each half's MMAs issued
// while the half before it is filtered: per tile each row's maximum over its candidates within
// the lane quad that holds the row, the running maximum raised (reset where a group starts), the
// keep test; then the row's 16-bit keep masks are stored. Chunks wholly inside every row's
// candidate range (all but those at the sinks and the diagonal) skip the per-key range test. Every
// score is computed once, and the pass's output is one bit per (block, key). The run pass
// (vec_runs.cuh), one CTA per plan tile (one pooled block, or with union_tiles the blocks of a
// plan-height tile, their masks ORed) and a warp per segment of its steps, turns the masks plus
// the sinks and diagonal into runs with bit operations and warp scans, counts the spans and column
// keys per tile, and after the exclusive sums writes them at the tile's offsets (columns staged in
// shared memory, stored coalesced), ascending, without atomics.

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "cuda/common/cub_storage.cuh"
#include "cuda/common/cuda_check.h"
#include "cuda/common/math.h"
#include "cuda/common/stream_scratch.h"
#include "cuda/runtime/device_query.h"
#include "cuda/runtime/plan_view.cuh"
#include "methods/vec/vec.h"
#include "methods/vec/vec_device.h"
#include "methods/vec/vec_pool.cuh"
#include "methods/vec/vec_runs.cuh"
#include "methods/vec/vec_select.cuh"
#include "methods/vec/vec_select_wgmma.cuh"
#include "methods/vec/vec_small_plans.cuh"
#include "mmsparse/status.h"

namespace mmsparse::cuda {
namespace {

using vec_kernels::AddCounts;
using vec_kernels::block_keys;
using vec_kernels::BlockKeys;
using vec_kernels::count_runs_kernel;
using vec_kernels::kCtaRows;
using vec_kernels::kMaxHeadDim;
using vec_kernels::kPoolThreads;
using vec_kernels::kRunThreads;
using vec_kernels::kSelectThreads;
using vec_kernels::kSplitKeys;
using vec_kernels::kTileKeys;
using vec_kernels::pool_kernel;
using vec_kernels::RecordCounts;
using vec_kernels::RunSegment;
using vec_kernels::select_kernel;
using vec_kernels::VecKernelParams;
using vec_kernels::wgmma_select_kernel;
using vec_kernels::write_runs_kernel;

constexpr int kRecordThreads = 256;
constexpr int kWgmmaComputeMajor = 9;  // wgmma_select_kernel is compiled for sm_90a
constexpr int64_t kMaxGridYZ = 65535;

// Per plan tile (slot-major): its record (tile_blocks pooled blocks' rows), and its schedule sort
// key (its kept keys) and value in position-major order (ties of the heaviest-first order go
// position-major, then slot); tile 0's thread writes the mask record. The run pass writes the
// spans and columns themselves.
__global__ void __launch_bounds__(kRecordThreads)
    records_kernel(const VecKernelParams p, const MaskRecord mask, TileRecord* tiles,
                   MaskRecord* masks, uint32_t* sort_keys, int32_t* sort_values, int32_t slots) {
  const int64_t tile = static_cast<int64_t>(blockIdx.x) * kRecordThreads + threadIdx.x;
  if (tile >= static_cast<int64_t>(slots) * p.tiles) return;
  if (tile == 0) masks[0] = mask;
  const auto slot = static_cast<int32_t>(tile / p.tiles);
  const auto position = static_cast<int32_t>(tile % p.tiles);
  const int64_t tile_rows = static_cast<int64_t>(p.tile_blocks) * p.pooling;
  TileRecord record;
  record.begin = static_cast<int32_t>(position * tile_rows);
  record.end = static_cast<int32_t>(min(static_cast<int64_t>(p.q_len), (position + 1) * tile_rows));
  record.head_slot = slot;
  record.mask = 0;
  const RecordCounts begin = p.offsets[tile];
  const RecordCounts end = p.offsets[tile + 1];
  record.span_begin = begin.spans;
  record.span_end = end.spans;
  record.column_begin = begin.columns;
  record.column_end = end.columns;
  tiles[tile] = record;
  const int64_t item = static_cast<int64_t>(position) * slots + slot;
  sort_keys[item] = p.tile_keys[tile];
  sort_values[item] = static_cast<int32_t>(tile);
}

// Keys per split: whole groups of the running maximum, about kSplitKeys of them; every key in one
// split when a group spans the keys. The longest split the score pass takes.
int64_t longest_split_keys(const detail::VecParams& vec, int64_t kv_len) {
  const int64_t group_keys = std::min(vec.group_tiles, kv_len + 1) * kTileKeys;
  if (group_keys >= kv_len) return std::max<int64_t>(kv_len, 1);
  return group_keys * std::max<int64_t>(1, kSplitKeys / group_keys);
}

// The score pass's CTAs per head slot that scan keys with splits of `split_keys` (the others exit
// at once): as select_kernel bounds a CTA's keys, from the tile of the first non-sink key up to
// the candidate end of its last block.
int64_t scanning_ctas_per_slot(const VecKernelParams& p, int64_t split_keys) {
  const int64_t sink_end = std::min<int64_t>(p.pooling, p.kv_len);
  const int64_t scan_floor = sink_end / kTileKeys * kTileKeys;
  int64_t ctas = 0;
  for (int64_t first = 0; first < p.blocks; first += kCtaRows) {
    const int64_t last = std::min<int64_t>(first + kCtaRows, p.blocks) - 1;
    const int64_t diagonal = std::clamp<int64_t>(last * p.pooling + p.causal_offset, 0, p.kv_len);
    const int64_t candidate_end = p.causal != 0 ? diagonal : p.kv_len;
    if (candidate_end > scan_floor) {
      ctas += ceil_div(candidate_end, split_keys) - scan_floor / split_keys;
    }
  }
  return ctas;
}

// Keys per split for this launch (splits are independent, so the choice changes no score): the
// longest split, or its groups halved up to kSplitHalvings times, whichever takes the
// fewest chunk-times when the scanning CTAs run `resident_ctas` at a time, each its split's chunks
// plus kCtaStartChunks (the longer on ties). At 128K, 4 heads on 1 KV head and two CTAs per SM on
// 132 SMs, 4096-key splits are 1088 CTAs: 4.1 rounds of 264, so a fifth round runs 32 CTAs; 2048
// keys make 8.2 rounds of half the length.
int64_t split_key_count(const VecKernelParams& p, const detail::VecParams& vec, int64_t slots,
                        int64_t resident_ctas) {
  const int64_t longest = longest_split_keys(vec, p.kv_len);
  const int64_t group_keys = int64_t{p.group_tiles} * kTileKeys;
  if (group_keys >= p.kv_len) return longest;  // one split holds every key
  int64_t best = longest;
  int64_t best_cost = std::numeric_limits<int64_t>::max();
  for (int halving = 0; halving <= vec_kernels::kSplitHalvings; ++halving) {
    const int64_t groups = longest / group_keys >> halving;
    if (groups < 1) break;
    const int64_t split_keys = groups * group_keys;
    if (ceil_div(p.kv_len, split_keys) > kMaxGridYZ) break;
    const int64_t rounds = ceil_div(slots * scanning_ctas_per_slot(p, split_keys),
                                    std::max<int64_t>(resident_ctas, 1));
    const int64_t cost =
        rounds * (ceil_div(split_keys, vec_kernels::kChunkKeys) + vec_kernels::kCtaStartChunks);
    if (cost < best_cost) {
      best = split_keys;
      best_cost = cost;
    }
  }
  return best;
}

VecKernelParams kernel_params(const std::vector<PatternSpec>& head_specs, const PlanShape& shape,
                              const EstimateOperands& operands) {
  const detail::VecParams vec = detail::vec_params(head_specs.front());
  VecKernelParams p{};
  p.q = operands.q;
  p.q_stride_batch = operands.q_strides[0];
  p.q_stride_row = operands.q_strides[1];
  p.q_stride_head = operands.q_strides[2];
  p.k = operands.k;
  p.k_stride_batch = operands.k_strides[0];
  p.k_stride_row = operands.k_strides[1];
  p.k_stride_head = operands.k_strides[2];
  p.heads = static_cast<int32_t>(shape.heads);
  p.group = static_cast<int32_t>(operands.q_heads / operands.kv_heads);
  p.head_dim = static_cast<int32_t>(operands.head_dim);
  p.q_len = static_cast<int32_t>(shape.q_len);
  p.kv_len = static_cast<int32_t>(shape.kv_len);
  p.causal_offset = static_cast<int32_t>(shape.causal_offset());
  p.pooling = static_cast<int32_t>(std::min(vec.pooling, shape.kv_len + shape.q_len + 1));
  p.blocks = static_cast<int32_t>(detail::vec_block_count(shape, vec));
  p.tile_blocks = static_cast<int32_t>(detail::vec_tile_blocks(shape, vec));
  p.tiles = static_cast<int32_t>(detail::vec_tile_count(shape, vec));
  p.group_tiles = static_cast<int32_t>(std::min<int64_t>(vec.group_tiles, shape.kv_len + 1));
  p.group_chunk_step = vec_kernels::kChunkTiles % p.group_tiles;
  p.causal = vec.causal ? 1 : 0;
  p.scale = operands.scale;
  p.alpha_heads = static_cast<int32_t>(head_specs.size());
  for (std::size_t head = 0; head < head_specs.size(); ++head) {
    p.log_alphas[head] = detail::vec_params(head_specs[head]).log_alpha();
  }
  p.mask_pitch = static_cast<int32_t>(2 * ceil_div(shape.kv_len, 2 * kTileKeys));
  p.selection.count = static_cast<int32_t>(operands.heads.size());
  std::copy(operands.heads.begin(), operands.heads.end(), p.selection.heads);
  return p;
}

void check_shape(const PatternSpec& resolved_spec, const PlanShape& shape,
                 const EstimateOperands& operands) {
  PlanBuilder shape_check(shape);  // throws on a bad shape as the host build does
  check_int32_ranges(shape);
  if (!builds_vec_on_device(resolved_spec, shape)) {
    throw Error(ErrorCode::kUnsupported,
                "build_vec_plan_on_device: a vec spec with pooling <= shape.tile_rows = " +
                    std::to_string(shape.tile_rows) + " and keys (kv_len >= 1), got " +
                    resolved_spec.to_string() + " over " + std::to_string(shape.kv_len) + " keys");
  }
  if (operands.estimated_heads() != shape.heads) {
    throw_invalid_argument(
        "build_vec_plan_on_device shape.heads",
        std::to_string(operands.estimated_heads()) + " (the query heads the operands estimate)",
        std::to_string(shape.heads));
  }
  if (operands.head_dim > kMaxHeadDim) {
    throw Error(ErrorCode::kUnsupported, "build_vec_plan_on_device head_dim: at most " +
                                             std::to_string(kMaxHeadDim) + ", got " +
                                             std::to_string(operands.head_dim));
  }
  const detail::VecParams vec = detail::vec_params(resolved_spec);
  const int64_t blocks = ceil_div(shape.q_len, vec.pooling);
  if (ceil_div(blocks, kCtaRows) > kMaxGridYZ) {
    throw Error(ErrorCode::kUnsupported, "build_vec_plan_on_device: at most " +
                                             std::to_string(kMaxGridYZ * kCtaRows) +
                                             " pooled blocks, got " + std::to_string(blocks));
  }
  const int64_t splits = ceil_div(shape.kv_len, longest_split_keys(vec, shape.kv_len));
  if (splits > kMaxGridYZ) {
    throw Error(ErrorCode::kUnsupported, "build_vec_plan_on_device: at most " +
                                             std::to_string(kMaxGridYZ) + " key splits, got " +
                                             std::to_string(splits));
  }
  if (shape.head_slots() > kMaxGridYZ) {
    throw Error(ErrorCode::kUnsupported, "build_vec_plan_on_device: at most " +
                                             std::to_string(kMaxGridYZ) + " head slots, got " +
                                             std::to_string(shape.head_slots()));
  }
}

// Head specs: one for every head, or one per head (shape.heads of them, at most
// kMaxSelectedHeads: the kernels take their alphas by value) that differ only in alpha_ppm.
void check_head_specs(const std::vector<PatternSpec>& resolved_specs, const PlanShape& shape) {
  const std::string argument = "build_vec_plan_on_device resolved_specs";
  const auto count = static_cast<int64_t>(resolved_specs.size());
  if (count != 1 && count != shape.heads) {
    throw_invalid_argument(argument,
                           "one spec, or one per query head (" + std::to_string(shape.heads) + ")",
                           std::to_string(count) + " specs");
  }
  if (count > kMaxSelectedHeads) {
    throw Error(ErrorCode::kUnsupported,
                argument + ": at most " + std::to_string(kMaxSelectedHeads) +
                    " heads with specs of their own, got " + std::to_string(count));
  }
  const detail::VecParams first = detail::vec_params(resolved_specs.front());
  for (const PatternSpec& spec : resolved_specs) {
    if (!detail::is_spec_of(spec, detail::vec_entry())) {
      throw_invalid_argument(argument, "vec specs", spec.to_string());
    }
    const detail::VecParams params = detail::vec_params(spec);
    if (params.pooling != first.pooling || params.group_tiles != first.group_tiles ||
        params.causal != first.causal || params.union_tiles != first.union_tiles) {
      throw_invalid_argument(
          argument,
          "vec specs that differ only in alpha_ppm (" + resolved_specs.front().to_string() + ")",
          spec.to_string());
    }
  }
}

// Events between the build's phases when a caller asks for their times (VecBuildTimes).
class PhaseEvents {
 public:
  enum Phase {
    kStart,
    kScratch,
    kPool,
    kScore,
    kCount,
    kOffsets,
    kHost,
    kRecords,
    kWrite,
    kSchedule,
    kEnd
  };
  PhaseEvents(VecBuildTimes* times, cudaStream_t stream) : times_(times), stream_(stream) {
    if (times_ == nullptr) return;
    for (cudaEvent_t& event : events_) check_cuda(cudaEventCreate(&event), "vec index: events");
  }
  ~PhaseEvents() {
    if (times_ == nullptr) return;
    for (cudaEvent_t event : events_) cudaEventDestroy(event);
  }
  PhaseEvents(const PhaseEvents&) = delete;
  PhaseEvents& operator=(const PhaseEvents&) = delete;
  // The stream reached the end of the phase before `phase` (kStart: the build's start).
  void record(Phase phase) {
    if (times_ != nullptr) check_cuda(cudaEventRecord(events_[phase], stream_), "vec index: event");
  }
  // Waits for the last event and fills the times.
  void read() {
    if (times_ == nullptr) return;
    check_cuda(cudaEventSynchronize(events_[kSchedule]), "vec index: phase times");
    float* fields[] = {&times_->scratch, &times_->pool,    &times_->score,
                       &times_->count,   &times_->offsets, &times_->host,
                       &times_->records, &times_->write,   &times_->schedule};
    for (int phase = kScratch; phase <= kSchedule; ++phase) {
      check_cuda(cudaEventElapsedTime(fields[phase - 1], events_[phase - 1], events_[phase]),
                 "vec index: phase time");
    }
    check_cuda(cudaEventElapsedTime(&times_->total, events_[kStart], events_[kSchedule]),
               "vec index: build time");
  }

 private:
  VecBuildTimes* times_;
  cudaStream_t stream_;
  cudaEvent_t events_[kEnd] = {};
};

// The score pass's CTAs resident on the current device at once.
int64_t resident_select_ctas(const void* kernel, int shared_bytes) {
  int per_multiprocessor = 0;
  check_cuda(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_multiprocessor, kernel,
                                                           kSelectThreads, shared_bytes),
             "vec index: score pass occupancy");
  return static_cast<int64_t>(current_multiprocessors()) * per_multiprocessor;
}

// The score pass's kernel and its dynamic shared memory: the wgmma one, or mma.sync's (head_dim 128
// fixes its head_dim steps at compile time; other widths read them from p).
template <class Element>
std::pair<void (*)(VecKernelParams), int> score_kernel(VecScorePass pass, int32_t head_dim) {
  if (pass == VecScorePass::kWgmma) {
    return {wgmma_select_kernel<Element>, vec_kernels::wgmma_select_shared_bytes<Element>()};
  }
  return {head_dim == kMaxHeadDim ? select_kernel<Element, vec_kernels::kMaxKSteps>
                                  : select_kernel<Element, 0>,
          vec_kernels::select_shared_bytes<Element>()};
}

// Pools, then scores with splits of split_key_count's length (p's split fields set here).
template <class Element>
void launch_scores(VecKernelParams p, const detail::VecParams& vec, int32_t slots,
                   VecScorePass pass, cudaStream_t stream, PhaseEvents& events) {
  const int64_t pool_items =
      int64_t{p.blocks} * (p.head_dim / vec_kernels::kPoolVectorElements<Element>);
  pool_kernel<Element><<<dim3(static_cast<unsigned>(ceil_div(pool_items, kPoolThreads)),
                              static_cast<unsigned>(slots)),
                         kPoolThreads, 0, stream>>>(p);
  check_launch("vec index: pooled queries");
  events.record(PhaseEvents::kPool);
  const auto [kernel, shared_bytes] = score_kernel<Element>(pass, p.head_dim);
  check_cuda(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, shared_bytes),
      "vec index: score pass shared memory");
  const int64_t split_keys = split_key_count(
      p, vec, slots, resident_select_ctas(reinterpret_cast<const void*>(kernel), shared_bytes));
  p.split_keys = static_cast<int32_t>(split_keys);
  p.splits = static_cast<int32_t>(ceil_div(p.kv_len, split_keys));
  const dim3 grid(static_cast<unsigned>(slots), static_cast<unsigned>(p.splits),
                  static_cast<unsigned>(ceil_div(p.blocks, kCtaRows)));
  kernel<<<grid, kSelectThreads, shared_bytes, stream>>>(p);
  check_launch("vec index: score pass");
  events.record(PhaseEvents::kScore);
}

void run_scores(const EstimateOperands& operands, const VecKernelParams& p,
                const detail::VecParams& vec, int32_t slots, VecScorePass pass, cudaStream_t stream,
                PhaseEvents& events) {
  if (operands.dtype == DType::kBFloat16) {
    launch_scores<__nv_bfloat16>(p, vec, slots, pass, stream, events);
  } else {
    launch_scores<__half>(p, vec, slots, pass, stream, events);
  }
}

// Whether the wgmma score pass is compiled for this head_dim on the current device.
bool wgmma_scores_fit(int64_t head_dim) {
  if (head_dim != vec_kernels::kWgmmaHeadDim) return false;
  int device = 0;
  int major = 0;
  check_cuda(cudaGetDevice(&device), "vec index: device");
  check_cuda(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device),
             "vec index: compute capability");
  return major == kWgmmaComputeMajor;
}

// One CTA per plan tile; `segments` ([tiles, kRunSegments]) carries the count pass's segment
// starts and offsets to the write pass.
void run_runs(const VecKernelParams& p, RunSegment* segments, int64_t tiles, bool write,
              cudaStream_t stream) {
  const auto grid = static_cast<unsigned>(tiles);
  if (write) {
    write_runs_kernel<<<grid, kRunThreads, 0, stream>>>(p, segments, tiles);
    check_launch("vec index: spans and columns");
  } else {
    count_runs_kernel<<<grid, kRunThreads, 0, stream>>>(p, segments, tiles);
    check_launch("vec index: span and column counts");
  }
}

int key_bits(int64_t kv_len) {
  int bits = 1;
  while ((int64_t{1} << bits) <= kv_len) ++bits;
  return bits;
}

// Temporary bytes of the (column, span) counts' exclusive scan over `items` tiles.
std::size_t count_scan_bytes(int items, cudaStream_t stream) {
  std::size_t bytes = 0;
  check_cuda(cub::DeviceScan::ExclusiveScan(nullptr, bytes, static_cast<RecordCounts*>(nullptr),
                                            static_cast<RecordCounts*>(nullptr), AddCounts{},
                                            RecordCounts{0, 0}, items, stream),
             "vec index: scan storage");
  return bytes;
}

// The build's device scratch: the pooled queries, the keep masks, per-tile counts and offsets, the
// schedule's sort keys and values, and cub's temporary storage (the scans' or the sort's).
class BuildScratch {
 public:
  // block_rows: head slots x pooled blocks (pooled queries, masks); tiles: head slots x plan tiles.
  BuildScratch(VecKernelParams& p, int64_t block_rows, int64_t tiles, int64_t head_dim,
               int sort_bits, cudaStream_t stream)
      : tiles_(tiles),
        scan_bytes_(count_scan_bytes(static_cast<int>(tiles + 1), stream)),
        sort_bytes_(sort_storage_bytes<uint32_t>(static_cast<int>(tiles), sort_bits, stream,
                                                 "vec index: sort storage")),
        pooled_at_(layout_.add<uint16_t>(block_rows * head_dim)),  // bf16 or fp16
        masks_at_(layout_.add<uint16_t>(block_rows * p.mask_pitch)),
        // Per tile, then one more: the totals after the exclusive sum.
        counts_at_(layout_.add<RecordCounts>(tiles + 1)),
        offsets_at_(layout_.add<RecordCounts>(tiles + 1)),
        tile_keys_at_(layout_.add<uint32_t>(tiles)),
        segments_at_(layout_.add<RunSegment>(tiles * vec_kernels::kRunSegments)),
        keys_at_(layout_.add<uint32_t>(tiles)),
        sorted_at_(layout_.add<uint32_t>(tiles)),
        values_at_(layout_.add<int32_t>(tiles)),
        temp_at_(layout_.add<std::byte>(static_cast<int64_t>(std::max(scan_bytes_, sort_bytes_)))),
        scratch_(layout_.bytes(), stream, "vec index: scratch") {
    p.pooled = at<uint16_t>(pooled_at_);
    p.masks = at<uint16_t>(masks_at_);
    p.counts = at<RecordCounts>(counts_at_);
    p.offsets = at<RecordCounts>(offsets_at_);
    p.tile_keys = at<uint32_t>(tile_keys_at_);
  }

  // Queues the exclusive sum of the (column, span) counts (each tile's first column and span, the
  // last entry the totals; one CTA scans few tiles) and the totals' copy to `totals`.
  void queue_offsets(RecordCounts& totals, cudaStream_t stream) const {
    RecordCounts* offsets = at<RecordCounts>(offsets_at_);
    if (tiles_ + 1 <= vec_kernels::kBlockOffsetCounts) {
      vec_kernels::offsets_block_scan_kernel<<<1, vec_kernels::kOffsetScanThreads, 0, stream>>>(
          at<RecordCounts>(counts_at_), offsets, static_cast<int32_t>(tiles_ + 1));
      check_launch("vec index: offsets");
    } else {
      std::size_t temp_bytes = scan_bytes_;
      check_cuda(cub::DeviceScan::ExclusiveScan(
                     at<std::byte>(temp_at_), temp_bytes, at<RecordCounts>(counts_at_), offsets,
                     AddCounts{}, RecordCounts{0, 0}, static_cast<int>(tiles_ + 1), stream),
                 "vec index: offsets");
    }
    check_cuda(cudaMemcpyAsync(&totals, offsets + tiles_, sizeof(RecordCounts),
                               cudaMemcpyDeviceToHost, stream),
               "vec index: totals");
  }

  RunSegment* run_segments() const { return at<RunSegment>(segments_at_); }
  uint32_t* sort_keys() const { return at<uint32_t>(keys_at_); }
  int32_t* sort_values() const { return at<int32_t>(values_at_); }

  // The heaviest-first schedule into `schedule`: radix sort is stable, so equal key counts keep the
  // position-major order, as the upload sorts. One CTA sorts plans of few tiles.
  void queue_schedule(int32_t* schedule, int sort_bits, cudaStream_t stream) const {
    if (tiles_ <= vec_kernels::kBlockScheduleTiles) {
      vec_kernels::schedule_block_sort_kernel<<<1, vec_kernels::kScheduleSortThreads, 0, stream>>>(
          sort_keys(), sort_values(), schedule, static_cast<int32_t>(tiles_), sort_bits);
      check_launch("vec index: schedule sort");
      return;
    }
    std::size_t temp_bytes = sort_bytes_;
    check_cuda(cub::DeviceRadixSort::SortPairsDescending(
                   at<std::byte>(temp_at_), temp_bytes, sort_keys(), at<uint32_t>(sorted_at_),
                   sort_values(), schedule, static_cast<int>(tiles_), 0, sort_bits, stream),
               "vec index: schedule sort");
  }

 private:
  template <class T>
  T* at(std::size_t offset) const {
    return region<T>(scratch_.base(), offset);
  }

  int64_t tiles_;
  std::size_t scan_bytes_, sort_bytes_;
  ScratchLayout layout_;
  std::size_t pooled_at_, masks_at_, counts_at_, offsets_at_, tile_keys_at_, segments_at_, keys_at_,
      sorted_at_, values_at_, temp_at_;
  StreamScratch scratch_;
};

}  // namespace

VecScorePass vec_score_pass(int64_t head_dim) {
  const char* chosen = std::getenv(kVecScorePassVariable);
  const std::string name = chosen == nullptr ? "" : chosen;
  if (name.empty()) return wgmma_scores_fit(head_dim) ? VecScorePass::kWgmma : VecScorePass::kMma;
  if (name == vec_score_pass_name(VecScorePass::kMma)) return VecScorePass::kMma;
  if (name != vec_score_pass_name(VecScorePass::kWgmma)) {
    throw_invalid_argument(kVecScorePassVariable, "mma, wgmma or unset", "'" + name + "'");
  }
  if (!wgmma_scores_fit(head_dim)) {
    throw Error(ErrorCode::kUnsupported, std::string(kVecScorePassVariable) + "=wgmma: head_dim " +
                                             std::to_string(vec_kernels::kWgmmaHeadDim) +
                                             " on an sm_90 device, got head_dim " +
                                             std::to_string(head_dim));
  }
  return VecScorePass::kWgmma;
}

const char* vec_score_pass_name(VecScorePass pass) {
  return pass == VecScorePass::kWgmma ? "wgmma" : "mma";
}

bool builds_vec_on_device(const PatternSpec& resolved_spec, const PlanShape& shape) {
  if (!detail::is_spec_of(resolved_spec, detail::vec_entry())) return false;
  const detail::VecParams params = detail::vec_params(resolved_spec);
  return shape.tile_rows >= params.pooling && shape.kv_len >= 1;
}

DevicePlan build_vec_plan_on_device(const PatternSpec& resolved_spec, const PlanShape& shape,
                                    const EstimateOperands& operands, void* stream,
                                    VecBuildTimes* times) {
  return build_vec_plan_on_device(std::vector<PatternSpec>{resolved_spec}, shape, operands, stream,
                                  times);
}

DevicePlan build_vec_plan_on_device(const std::vector<PatternSpec>& resolved_specs,
                                    const PlanShape& shape, const EstimateOperands& operands,
                                    void* stream_handle, VecBuildTimes* times) {
  const auto stream = static_cast<cudaStream_t>(stream_handle);
  if (resolved_specs.empty()) {
    throw_invalid_argument("build_vec_plan_on_device resolved_specs", "at least one spec", "none");
  }
  const PatternSpec& resolved_spec = resolved_specs.front();
  check_shape(resolved_spec, shape, operands);
  check_head_specs(resolved_specs, shape);
  const VecScorePass pass = vec_score_pass(operands.head_dim);
  if (times != nullptr) times->score_pass = pass;
  const detail::VecParams vec = detail::vec_params(resolved_spec);
  const auto slots = static_cast<int32_t>(shape.head_slots());
  const int64_t blocks = detail::vec_block_count(shape, vec);
  const int64_t tiles = slots * detail::vec_tile_count(shape, vec);
  if (tiles >= std::numeric_limits<int32_t>::max()) {  // the scans count tiles + 1 in int32
    throw Error(ErrorCode::kUnsupported, "build_vec_plan_on_device: " + std::to_string(tiles) +
                                             " tiles; the schedule indexes tiles in int32");
  }
  if (tiles == 0) {
    const DevicePlanLayout layout = plan_layout({slots, 0, 0, 0, 0, 0});
    return DevicePlan::for_builder(shape, layout, 0, 0, true, layout.spans, stream);
  }
  PhaseEvents events(times, stream);
  events.record(PhaseEvents::kStart);  // the stream is idle while the host allocates
  VecKernelParams p = kernel_params(resolved_specs, shape, operands);
  const int sort_bits = key_bits(shape.kv_len);
  const BuildScratch scratch(p, slots * blocks, tiles, operands.head_dim, sort_bits, stream);
  events.record(PhaseEvents::kScratch);
  check_cuda(cudaMemsetAsync(p.counts + tiles, 0, sizeof(RecordCounts), stream),
             "vec index: counts");
  run_scores(operands, p, vec, slots, pass, stream, events);
  run_runs(p, scratch.run_segments(), tiles, false, stream);
  events.record(PhaseEvents::kCount);
  RecordCounts totals{};
  scratch.queue_offsets(totals, stream);
  events.record(PhaseEvents::kOffsets);
  check_cuda(cudaStreamSynchronize(stream), "vec index: column and span counts");
  const int64_t columns = totals.columns;

  DevicePlanLayout layout = plan_layout({slots, 0, tiles, 1, totals.spans, columns});
  layout.gathers = columns > 0;  // known exactly here: without columns the lean kernel runs
  DevicePlan plan =
      DevicePlan::for_builder(shape, layout, tiles, columns, true, layout.spans, stream);
  events.record(PhaseEvents::kHost);
  auto* plan_base = static_cast<std::byte*>(plan.builder_data());
  records_kernel<<<static_cast<unsigned>(ceil_div(tiles, kRecordThreads)), kRecordThreads, 0,
                   stream>>>(p, make_mask_record(detail::vec_mask(vec), shape.kv_len),
                             region<TileRecord>(plan_base, layout.tiles),
                             region<MaskRecord>(plan_base, layout.masks), scratch.sort_keys(),
                             scratch.sort_values(), slots);
  check_launch("vec index: records");
  events.record(PhaseEvents::kRecords);
  p.columns = region<int32_t>(plan_base, layout.columns);
  p.spans = region<SpanRecord>(plan_base, layout.spans);
  run_runs(p, scratch.run_segments(), tiles, true, stream);
  events.record(PhaseEvents::kWrite);
  scratch.queue_schedule(region<int32_t>(plan_base, layout.schedule), sort_bits, stream);
  events.record(PhaseEvents::kSchedule);
  events.read();
  return plan;
}

}  // namespace mmsparse::cuda
