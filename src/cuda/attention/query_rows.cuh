#pragma once
// Original query positions of a tile's rows: the plan's query order (its runs, plan_view.cuh)
// looked up a warp at a time by both attention kernels.

#include <cuda/std/limits>

#include <cstdint>

#include "cuda/runtime/plan_view.cuh"
#include "cuda/attention/sm80/ptx.cuh"

namespace mmsparse::cuda {

// Run `r` of a head whose runs end at `head_end`, or past it one that begins after every index.
__device__ inline RunRecord run_or_past_end(const PlanView& plan, int64_t r, int64_t head_end) {
  return r < head_end ? plan.runs[r] : RunRecord{::cuda::std::numeric_limits<int32_t>::max(), 0, 0};
}

// Lane `lane` of the warp gets value[offset + lane] of the 64 values that `near` (0..31) and `far`
// (32..63) hold across the warp, offset in [0, 32).
__device__ inline int32_t shift_down_pair(int32_t near, int32_t far, int offset, int lane) {
  const int source = offset + lane;
  const int32_t from_near = __shfl_sync(kFullWarpMask, near, source % kWarpSize);
  const int32_t from_far = __shfl_sync(kFullWarpMask, far, source % kWarpSize);
  return source < kWarpSize ? from_near : from_far;
}

// Original query positions of the order indices first + lane of a head slot (kNoRow at or past
// `end`), for the 32 lanes of a warp, which all call it with the same arguments. The identity
// without runs. Otherwise the warp takes the run of `first` and the 31 after it, and each lane
// counts the runs that begin between `first` and its index. A head's runs begin at strictly
// increasing order indices (the upload drops empty runs) and visit its q_len positions, so where
// they are about equally long (a grid head's, 8 rows each) `first`'s share of q_len names the run
// of `first`: the 64 runs from a little before it, loaded at once, hold it and the 31 after it.
// Where they do not, the run is found by narrowing the head's runs 32-fold per step (one load per
// lane and step: three for 16,384 runs), and its 32 runs are loaded then.
__device__ inline int32_t warp_query_positions(const PlanView& plan, int32_t head_slot,
                                               int32_t first, int32_t end, int32_t q_len,
                                               int lane) {
  // How many runs before the estimate the window starts: room for runs of uneven length.
  constexpr int64_t kWindowLead = kWarpSize / 4;
  const int32_t index = first + lane;
  int64_t low = 0;
  int64_t head_end = plan.shared_runs;
  if (plan.shared_runs == kPerHeadRuns) {
    low = plan.head_run_offsets[head_slot];
    head_end = plan.head_run_offsets[head_slot + 1];
  }
  if (low == head_end) return index < end ? index : kNoRow;

  const int64_t estimate = low + static_cast<int64_t>(first) * (head_end - low) / max(q_len, 1);
  const int64_t window = max(low, min(estimate - kWindowLead, head_end - 1));
  const RunRecord near = run_or_past_end(plan, window + lane, head_end);
  const RunRecord far = run_or_past_end(plan, window + kWarpSize + lane, head_end);
  // The lanes whose run begins at or before `first`: a prefix of each half, as the runs ascend.
  const uint32_t near_before = __ballot_sync(kFullWarpMask, near.order_begin <= first);
  const uint32_t far_before = __ballot_sync(kFullWarpMask, far.order_begin <= first);
  RunRecord run;
  if ((near_before & 1u) != 0 && (near_before != kFullWarpMask || (far_before & 1u) == 0)) {
    // The run of `first` is window + offset with offset < 32, so its 32 runs are in the window.
    const int offset = __popc(near_before) - 1;
    run.order_begin = shift_down_pair(near.order_begin, far.order_begin, offset, lane);
    run.start = shift_down_pair(near.start, far.start, offset, lane);
    run.step = shift_down_pair(near.step, far.step, offset, lane);
  } else {
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
    run = run_or_past_end(plan, low + lane, head_end);
  }
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
// the rows 32·w .. 32·w + 31 of the tile: by arithmetic where the tile's rows have a RowLattice
// (no load), else from the plan's order.
__device__ inline int32_t tile_row_position(const PlanView& plan, const TileRecord& tile,
                                            const RowLattice& rows, int row, int32_t q_len) {
  if (rows.width > 0) {
    return row < tile.end - tile.begin ? rows.start + row / rows.width * rows.outer_step +
                                             row % rows.width * rows.inner_step
                                       : kNoRow;
  }
  const int lane = row % kWarpSize;
  return warp_query_positions(plan, tile.head_slot, tile.begin + row - lane, tile.end, q_len, lane);
}

}  // namespace mmsparse::cuda
