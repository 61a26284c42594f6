#pragma once
// Passes that accumulate (AttentionArgs::accumulate): a row starts from the (O, LSE) that `out` and
// `lse` already hold for it, a result over keys disjoint from the plan's, instead of from nothing.
// The online softmax takes that result as one logit (its LSE) whose value is its O, which is the
// LSE merge done inside the kernel: a plan of several passes needs no merge kernel and no scratch
// results (cuda/attention/passes.cu).
//
// Both kernels hold a warp's accumulators alike (the m16n8 layout that wgmma repeats per warp):
// this thread's rows (lane / 4 and lane / 4 + 8 of the warp's 16) and, per tile of 8
// output columns, columns 2·(lane mod 4) and the next.

#include <cstdint>

#include "cuda/attention/params.cuh"
#include "cuda/attention/sm80/ptx.cuh"
#include "cuda/attention/softmax.cuh"
#include "cuda/runtime/plan_view.cuh"

namespace mmsparse::cuda {

// `warp_rows`: the original positions of the warp's 16 rows (kNoRow past the tile).
template <class Traits>
__device__ void resume_rows(const AttentionParams& params, const TileWork& work,
                            const int32_t* warp_rows, int lane, OnlineSoftmax<Traits>& softmax,
                            float (&output)[Traits::kOutputTiles][4]) {
  using Element = typename Traits::Element;
  constexpr int kTileColumns = 8;
  constexpr int kThreadsPerRow = OnlineSoftmax<Traits>::kThreadsPerRow;
  constexpr int kRowHalf = 8;  // a thread's second row, 8 below its first
  constexpr float kNegativeInfinity = OnlineSoftmax<Traits>::kNegativeInfinity;
  const Element* out = static_cast<const Element*>(params.out.data) +
                       work.batch * params.out.batch_stride + work.head * params.out.head_stride;
  const float* lse =
      params.lse.data + work.batch * params.lse.batch_stride + work.head * params.lse.head_stride;
  const int first_column = lane % kThreadsPerRow * 2;
#pragma unroll
  for (int r = 0; r < OnlineSoftmax<Traits>::kRowsPerThread; ++r) {
    const int32_t position = warp_rows[lane / kThreadsPerRow + r * kRowHalf];
    const float row_lse =
        position == kNoRow ? kNegativeInfinity : lse[position * params.lse.row_stride];
    softmax.resume(r, row_lse, lane % kThreadsPerRow == 0);
    if (position == kNoRow) continue;
    // Read whatever the LSE says, so that both loads are in flight at once; a row without keys
    // (LSE -inf) contributes nothing, whatever its O holds.
    const bool has_keys = row_lse != kNegativeInfinity;
    const Element* row = out + position * params.out.row_stride + first_column;
#pragma unroll
    for (int tile = 0; tile < Traits::kOutputTiles; ++tile) {
      const float2 pair = TensorCore<Element>::unpack(
          *reinterpret_cast<const uint32_t*>(row + tile * kTileColumns));
      output[tile][2 * r] = has_keys ? pair.x : 0.0f;
      output[tile][2 * r + 1] = has_keys ? pair.y : 0.0f;
    }
  }
}

}  // namespace mmsparse::cuda
