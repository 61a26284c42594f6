#pragma once
// Original query positions of a tile's rows: the plan's query order (its runs, plan_view.cuh)
// looked up a warp at a time by both attention kernels.

#include <cuda/std/limits>

#include <cstdint>

#include "cuda/plan_view.cuh"
#include "cuda/ptx_primitives.cuh"

namespace mmsparse::cuda {

// Original query positions of the order indices first + lane of a head slot (kNoRow at or past
// `end`), for the 32 lanes of a warp, which all call it with the same arguments. The identity
// without runs; otherwise the run of `first` is found by narrowing the head's runs 32-fold per
// step (one load per lane and step: three steps for a grid head's 16,384 runs at 128K, where a
// binary search per row made fourteen dependent loads), then each lane counts the runs that begin
// between `first` and its index among the 32 runs from there. A head's runs begin at strictly
// increasing order indices (the upload drops empty runs).
__device__ inline int32_t warp_query_positions(const PlanView& plan, int32_t head_slot,
                                               int32_t first, int32_t end, int lane) {
  const int32_t index = first + lane;
  int64_t low = plan.head_run_offsets[head_slot];
  const int64_t head_end = plan.head_run_offsets[head_slot + 1];
  if (low == head_end) return index < end ? index : kNoRow;
  // Invariant: runs[low] begins at or before `first`; runs[high], if any, after it.
  int64_t high = head_end;
  while (high - low > 1) {
    const int64_t span = high - low;
    const int64_t probe = low + span * lane / kWarpSize;  // lane 0 probes `low`
    const bool at_or_before = plan.runs[probe].order_begin <= first;
    const uint32_t lanes = __ballot_sync(kFullWarpMask, at_or_before);
    const int last = kWarpSize - 1 - __clz(lanes);
    if (last < kWarpSize - 1) high = low + span * (last + 1) / kWarpSize;
    low += span * last / kWarpSize;
  }
  const int64_t run_index = low + lane;
  const RunRecord run = run_index < head_end
                            ? plan.runs[run_index]
                            : RunRecord{::cuda::std::numeric_limits<int32_t>::max(), 0, 0};
  // Bit o: a run begins at index first + o (o in 1..31).
  const int64_t offset = static_cast<int64_t>(run.order_begin) - first;
  const uint32_t begins = __reduce_or_sync(
      kFullWarpMask, lane > 0 && offset < kWarpSize ? 1u << static_cast<uint32_t>(offset) : 0u);
  const int owner = __popc(begins & ((2u << lane) - 1u));  // 2u << 31 wraps to 0: all 32 bits
  const int32_t begin = __shfl_sync(kFullWarpMask, run.order_begin, owner);
  const int32_t start = __shfl_sync(kFullWarpMask, run.start, owner);
  const int32_t step = __shfl_sync(kFullWarpMask, run.step, owner);
  return index < end ? start + (index - begin) * step : kNoRow;
}

// The original position of row `row` of a tile (kNoRow past its end), called by whole warps for
// the rows 32·w .. 32·w + 31 of the tile.
__device__ inline int32_t tile_row_position(const PlanView& plan, const TileRecord& tile, int row) {
  const int lane = row % kWarpSize;
  return warp_query_positions(plan, tile.head_slot, tile.begin + row - lane, tile.end, lane);
}

}  // namespace mmsparse::cuda
