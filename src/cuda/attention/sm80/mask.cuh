#pragma once
// A tile's MaskPolicy as seen by one warp: which chunks it can skip, which need no element mask at
// all, and the element mask for the rest. The element mask is the rule of core/mask_rule.h, which
// the CPU reference applies too: the query is taken at its aligned position (query + kv_len -
// q_len), where the causal diagonal and the token arrays are indexed.

#include <cstdint>
#include <cuda/std/limits>

#include "core/mask_rule.h"
#include "cuda/attention/key_chunks.cuh"
#include "cuda/attention/params.cuh"
#include "cuda/attention/sm80/traits.cuh"

namespace mmsparse::cuda {

enum class ChunkCoverage {
  kNone,     // the mask removes every pair of the warp's rows: skip the chunk
  kPartial,  // some pairs are removed (or the chunk is not full): apply the element mask
  kFull,     // every pair is kept: no element mask
};

// How `policy` treats a chunk whose keys lie in [key_lowest, key_highest] for rows whose aligned
// positions lie in [row_lowest, row_highest]; `element_mask_needed` when something besides the
// bounds removes pairs (a short chunk's empty slots, token masks). `skippable` false (a policy
// whose media_bidirectional lift may keep pairs that the positional terms remove) turns kNone
// into kPartial. Conservative: kPartial may be returned for a chunk that needs no mask, never
// kFull or kNone wrongly. Both kernels use it.
__device__ inline ChunkCoverage classify_chunk(const MaskRecord& policy, int32_t row_lowest,
                                               int32_t row_highest, int32_t key_lowest,
                                               int32_t key_highest, bool element_mask_needed,
                                               bool skippable = true) {
  // Every term is evaluated and the verdicts combined without branches: this runs once per chunk
  // on the path to the warpgroup's next wgmma, where a chain of dependent branches costs more than
  // the few comparisons it would skip.
  const bool causal = policy.causal != 0;
  const bool windowed = policy.window > 0;
  const bool banded = policy.period > 0;
  const bool min_distanced = policy.min_distance > 0;
  // The chunk's pairs have distances (aligned - key) in [nearest, farthest].
  const int32_t nearest = row_lowest - key_highest;
  const int32_t farthest = row_highest - key_lowest;
  // Periodic masks are causal, so negative distances are the causal test's; the band sees the
  // distances from max(nearest, 0) on, which start at `phase` within their period.
  const int32_t band_nearest = max(nearest, 0);
  const int32_t phase = banded ? band_nearest % policy.period : 0;
  // The lift folded into `none` (not applied to the verdict afterwards) keeps the skip test one
  // early branch in the mma.sync kernel, with the partial terms computed after it.
  const bool none =
      skippable &
      ((causal & (farthest < 0)) |
       (windowed & (key_lowest >= policy.window_sink) & (nearest >= policy.window)) |
       (min_distanced & (farthest < policy.min_distance)) |
       // every distance falls in the gap between two bands
       (banded & (phase >= policy.band) & (phase + (farthest - band_nearest) < policy.period)));
  const bool partial =
      element_mask_needed | (causal & (nearest < 0)) |
      (windowed & (key_highest >= policy.window_sink) & (farthest >= policy.window)) |
      (min_distanced & (nearest < policy.min_distance)) |
      (banded & ((nearest < 0) | (phase + (farthest - nearest) >= policy.band)));
  return none ? ChunkCoverage::kNone : (partial ? ChunkCoverage::kPartial : ChunkCoverage::kFull);
}

// classify_chunk's verdict for a policy whose media_bidirectional lift may keep pairs that the
// positional terms remove: such a chunk is masked element by element, never skipped.
__device__ inline ChunkCoverage lift_skips(const MaskRecord& policy, ChunkCoverage coverage) {
  return policy.media_bidirectional && coverage == ChunkCoverage::kNone ? ChunkCoverage::kPartial
                                                                        : coverage;
}

template <class Traits>
class TileMask {
 public:
  // Rows of the warp held by this thread, in the MMA accumulator layout: lane / 4 and lane / 4 + 8.
  static constexpr int kRowsPerThread = 2;
  static constexpr int kRowHalf = Traits::kMmaM / kRowsPerThread;
  static constexpr int kThreadsPerRow = 4;  // lanes sharing one accumulator row

  __device__ TileMask(const TileWork& work, const AttentionParams& params,
                      const int32_t* row_positions /* [kBlockM] shared */, int warp, int lane)
      : policy_(work.mask) {
    constexpr int32_t kMaxInt = ::cuda::std::numeric_limits<int32_t>::max();
    constexpr int32_t kMinInt = ::cuda::std::numeric_limits<int32_t>::min();
    int32_t lowest = kMaxInt;
    int32_t highest = kMinInt;
#pragma unroll
    for (int r = 0; r < kRowsPerThread; ++r) {
      const int32_t position =
          row_positions[warp * Traits::kMmaM + lane / kThreadsPerRow + r * kRowHalf];
      const bool valid = position != kNoRow;
      aligned_[r] = position + work.causal_offset;
      query_tokens_[r] = kNoToken;
      if (valid && policy_.needs_tokens && aligned_[r] >= 0 && aligned_[r] < params.kv_len) {
        query_tokens_[r] = params.plan.token_info[aligned_[r]];
      }
      if (valid) {
        lowest = min(lowest, aligned_[r]);
        highest = max(highest, aligned_[r]);
      }
    }
    // Bounds over the warp's valid rows; a warp with none gets lowest > highest.
    row_lowest_ = __reduce_min_sync(kFullWarpMask, lowest);
    row_highest_ = __reduce_max_sync(kFullWarpMask, highest);
  }

  __device__ bool has_rows() const { return row_lowest_ <= row_highest_; }

  // Warp-uniform: how the policy treats the chunk for the warp's rows. Conservative: kPartial may
  // be returned for a chunk that needs no mask, never kFull or kNone wrongly.
  __device__ ChunkCoverage classify(const KeyChunk& chunk,
                                    const int32_t* key_positions /* [kBlockN] */, int lane) const {
    int32_t key_lowest = chunk.first_position();
    int32_t key_highest = chunk.last_position();
    if (chunk.from_columns()) key_bounds(chunk, key_positions, lane, key_lowest, key_highest);
    return classify_chunk(policy_, row_lowest_, row_highest_, key_lowest, key_highest,
                          chunk.count < Traits::kBlockN || policy_.needs_tokens,
                          /*skippable=*/!policy_.media_bidirectional);
  }

  // Sets the scores of removed pairs and of empty chunk slots to -inf.
  __device__ void apply(float (&scores)[Traits::kScoreTiles][4], const KeyChunk& chunk,
                        const int32_t* key_positions /* [kBlockN] */,
                        const int32_t* key_tokens /* [kBlockN] */, int lane) const {
    constexpr float kRemoved = -::cuda::std::numeric_limits<float>::infinity();
#pragma unroll
    for (int tile = 0; tile < Traits::kScoreTiles; ++tile) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int slot = tile * Traits::kMmaN + lane % kThreadsPerRow * 2 + e % 2;
        const int row = e / 2;
        // One condition, not an early `continue` for empty slots: with the continue, ptxas
        // keeps more of the unrolled mask live and spends more registers and instructions on
        // the whole kernel, the unmasked chunks' path included.
        if (slot >= chunk.count ||
            !allows(row, key_positions[slot], policy_.needs_tokens ? key_tokens[slot] : kNoToken)) {
          scores[tile][e] = kRemoved;
        }
      }
    }
  }

 private:
  // Lowest and highest key of a column chunk, reduced over the warp.
  __device__ static void key_bounds(const KeyChunk& chunk, const int32_t* key_positions, int lane,
                                    int32_t& lowest, int32_t& highest) {
    constexpr int32_t kMaxInt = ::cuda::std::numeric_limits<int32_t>::max();
    constexpr int32_t kMinInt = ::cuda::std::numeric_limits<int32_t>::min();
    int32_t low = kMaxInt;
    int32_t high = kMinInt;
#pragma unroll
    for (int i = 0; i < Traits::kBlockN / kWarpSize; ++i) {
      const int slot = lane + i * kWarpSize;
      if (slot < chunk.count) {
        low = min(low, key_positions[slot]);
        high = max(high, key_positions[slot]);
      }
    }
    lowest = __reduce_min_sync(kFullWarpMask, low);
    highest = __reduce_max_sync(kFullWarpMask, high);
  }

  __device__ bool allows(int row, int32_t key, int32_t key_token) const {
    return mask_rule::keeps(policy_, aligned_[row], key, query_tokens_[row], key_token);
  }

  MaskRecord policy_;
  int32_t aligned_[kRowsPerThread];       // aligned positions of this thread's rows
  int32_t query_tokens_[kRowsPerThread];  // their packed tokens, kNoToken when unreadable
  int32_t row_lowest_;                    // bounds of the warp's valid aligned positions
  int32_t row_highest_;
};

}  // namespace mmsparse::cuda
