#pragma once
// A tile's positional MaskPolicy (causal on aligned positions, window with window_sink, minimum
// distance, periodic band) as seen by one consumer warpgroup of the wgmma kernel, over span and
// column chunks (gathered keys are masked by their original positions, wherever they lie). Chunk
// decisions are uniform over the warpgroup (its 64 rows' bounds), because wgmma is issued by all
// four warps together; element masks use each thread's own rows. Policies that read tokens run on
// the mma.sync kernel instead.
// Pair semantics: those of the CPU reference, as in attention_mask.cuh.

#include <cstdint>
#include <cuda/std/limits>

#include "cuda/attention_mask.cuh"
#include "cuda/attention_params.cuh"
#include "cuda/key_chunks.cuh"
#include "cuda/wgmma_traits.cuh"

namespace mmsparse::cuda {

template <class Traits>
class WarpgroupMask {
 public:
  // Rows of the warp held by this thread, in the accumulator layout: lane / 4 and lane / 4 + 8.
  static constexpr int kRowsPerThread = 2;
  static constexpr int kRowHalf = Traits::kRowsPerWarp / kRowsPerThread;
  static constexpr int kThreadsPerRow = 4;  // lanes sharing one accumulator row
  // Column chunks: each lane loads the keys of kColumnKeysPerLane slots; a group of 32 slots holds
  // kScoresPerLaneGroup of a thread's scores per row (two per score tile of 8 keys).
  static constexpr int kColumnKeysPerLane = Traits::kBlockN / kWarpSize;
  static constexpr int kScoresPerLaneGroup = kWarpSize / Traits::kAccumulatorTileN * 2;
  static constexpr int kDecisionBits = 32;  // a row's decisions for a chunk, in one word
  static_assert(kColumnKeysPerLane * kScoresPerLaneGroup == kDecisionBits &&
                    Traits::kScoreTiles * 2 == kDecisionBits,
                "bit tile·2 + e%2 of a word holds each of a row's scores");

  // `rows`: the warpgroup's kWarpgroupRows original positions (kNoRow past the tile); `columns`:
  // the plan's. Publishes the warp's bounds in `storage`; gather_bounds() reads them after a
  // warpgroup barrier.
  template <class Storage>
  __device__ WarpgroupMask(const TileWork& work, const int32_t* rows, const int32_t* columns,
                           Storage& storage, int consumer_warp, int lane)
      : policy_(work.mask), columns_(columns) {
    constexpr int32_t kMaxInt = ::cuda::std::numeric_limits<int32_t>::max();
    constexpr int32_t kMinInt = ::cuda::std::numeric_limits<int32_t>::min();
    const int warp_in_group = consumer_warp % kWarpgroupWarps;
    int32_t lowest = kMaxInt;
    int32_t highest = kMinInt;
#pragma unroll
    for (int r = 0; r < kRowsPerThread; ++r) {
      const int32_t position =
          rows[warp_in_group * Traits::kRowsPerWarp + lane / kThreadsPerRow + r * kRowHalf];
      aligned_[r] = position + work.causal_offset;
      row_phases_[r] = policy_.period > 0 ? phase_of(aligned_[r]) : 0;
      if (position != kNoRow) {
        lowest = min(lowest, aligned_[r]);
        highest = max(highest, aligned_[r]);
      }
    }
    lowest = __reduce_min_sync(kFullWarpMask, lowest);
    highest = __reduce_max_sync(kFullWarpMask, highest);
    if (lane == 0) {
      storage.warp_row_lowest[consumer_warp] = lowest;
      storage.warp_row_highest[consumer_warp] = highest;
    }
  }

  // Bounds over the warpgroup's valid rows; a warpgroup without rows gets lowest > highest.
  template <class Storage>
  __device__ void gather_bounds(const Storage& storage, int warpgroup) {
    row_lowest_ = ::cuda::std::numeric_limits<int32_t>::max();
    row_highest_ = ::cuda::std::numeric_limits<int32_t>::min();
#pragma unroll
    for (int w = 0; w < kWarpgroupWarps; ++w) {
      row_lowest_ = min(row_lowest_, storage.warp_row_lowest[warpgroup * kWarpgroupWarps + w]);
      row_highest_ = max(row_highest_, storage.warp_row_highest[warpgroup * kWarpgroupWarps + w]);
    }
  }

  // Uniform over the warpgroup; conservative like TileMask::classify. Every lane of the warp must
  // call it (column chunks reduce their key bounds over the warp).
  __device__ ChunkCoverage classify(const KeyChunk& chunk, int lane) const {
    if (row_lowest_ > row_highest_) return ChunkCoverage::kNone;
    int32_t key_lowest = static_cast<int32_t>(chunk.first);
    int32_t key_highest = key_lowest + chunk.count - 1;
    if (chunk.from_columns) column_bounds(chunk, lane, key_lowest, key_highest);
    // Token masks never reach this kernel (wgmma_serves), so only short chunks need elements.
    return classify_chunk(policy_, row_lowest_, row_highest_, key_lowest, key_highest,
                          chunk.count < Traits::kBlockN);
  }

  // Sets the scores of removed pairs and of slots past the chunk's end to -inf.
  __device__ void apply(float (&scores)[Traits::kScoreTiles][4], const KeyChunk& chunk,
                        int lane) const {
    if (!chunk.from_columns) {
      const auto first = static_cast<int32_t>(chunk.first);
      // The phase of this thread's first key in each score tile, stepped along the tiles.
      const int32_t first_phase =
          policy_.period > 0 ? phase_of(first + lane % kThreadsPerRow * 2) : 0;
      remove_scores(scores, lane, [&](int tile, int e, int slot) {
        const int32_t key_phase =
            policy_.period > 0
                ? reduce_phase(first_phase + tile * Traits::kAccumulatorTileN + e % 2)
                : 0;
        return removes(slot, chunk.count, first + slot, key_phase, e / 2);
      });
      return;
    }
    // Gathered keys: the decisions first, one bit per score of each of this thread's rows (bit
    // tile·2 + e%2), from the keys each lane loads for slots lane + i·32, shared by shuffles. A
    // rolled loop and two words keep this off the registers that S, P and O occupy.
    uint32_t removed_bits[kRowsPerThread] = {};
#pragma unroll
    for (int i = 0; i < kColumnKeysPerLane; ++i) {
      const int own_slot = lane + i * kWarpSize;
      const int32_t own_key = own_slot < chunk.count ? chunk.key(columns_, own_slot) : 0;
      const int32_t own_phase = policy_.period > 0 ? phase_of(own_key) : 0;
#pragma unroll 1
      for (int j = 0; j < kScoresPerLaneGroup; ++j) {
        const int in_group = j / 2 * Traits::kAccumulatorTileN + lane % kThreadsPerRow * 2 + j % 2;
        const int32_t key = __shfl_sync(kFullWarpMask, own_key, in_group);
        const int32_t key_phase =
            policy_.period > 0 ? __shfl_sync(kFullWarpMask, own_phase, in_group) : 0;
        const int slot = i * kWarpSize + in_group;
#pragma unroll
        for (int r = 0; r < kRowsPerThread; ++r) {
          const bool removed = removes(slot, chunk.count, key, key_phase, r);
          removed_bits[r] |= static_cast<uint32_t>(removed) << (i * kScoresPerLaneGroup + j);
        }
      }
    }
    remove_scores(scores, lane, [&](int tile, int e, int) {
      return ((removed_bits[e / 2] >> (tile * 2 + e % 2)) & 1u) != 0;
    });
  }

 private:
  // Whether the pair of `key` (of phase key_phase = key mod period, when the policy has a period)
  // in `slot` and this thread's row `row` is left out: positions_allow, with the band's modulo
  // taken from the phases, which are cheap to step, instead of a division per score.
  __device__ bool removes(int slot, int32_t count, int32_t key, int32_t key_phase, int row) const {
    const int32_t distance = aligned_[row] - key;
    if (slot >= count || (policy_.causal && distance < 0)) return true;
    if (policy_.window > 0 && key >= policy_.window_sink && distance >= policy_.window) return true;
    if (policy_.min_distance > 0 && distance < policy_.min_distance) return true;
    if (policy_.period == 0) return false;
    // Periodic masks are causal, so distance >= 0 here and its phase is the phases' difference.
    int32_t phase = row_phases_[row] - key_phase;
    if (phase < 0) phase += policy_.period;
    return phase >= policy_.band;
  }

  // `position` mod the policy's period, in [0, period) also for negative positions.
  __device__ int32_t phase_of(int32_t position) const {
    const int32_t phase = position % policy_.period;
    return phase < 0 ? phase + policy_.period : phase;
  }
  // A phase plus less than kBlockN, back into [0, period): one step when period >= kBlockN.
  __device__ int32_t reduce_phase(int32_t phase) const {
    while (phase >= policy_.period) phase -= policy_.period;
    return phase;
  }

  // removed(tile, e, slot): whether score e of score tile `tile` (key slot `slot`) is left out.
  template <class Removed>
  __device__ static void remove_scores(float (&scores)[Traits::kScoreTiles][4], int lane,
                                       Removed removed) {
    constexpr float kRemoved = -::cuda::std::numeric_limits<float>::infinity();
#pragma unroll
    for (int tile = 0; tile < Traits::kScoreTiles; ++tile) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int slot = tile * Traits::kAccumulatorTileN + lane % kThreadsPerRow * 2 + e % 2;
        if (removed(tile, e, slot)) scores[tile][e] = kRemoved;
      }
    }
  }

  // Bounds of a column chunk's keys (unordered in the plan): each lane reduces its share.
  __device__ void column_bounds(const KeyChunk& chunk, int lane, int32_t& lowest,
                                int32_t& highest) const {
    lowest = ::cuda::std::numeric_limits<int32_t>::max();
    highest = ::cuda::std::numeric_limits<int32_t>::min();
    for (int slot = lane; slot < chunk.count; slot += kWarpSize) {
      const int32_t key = chunk.key(columns_, slot);
      lowest = min(lowest, key);
      highest = max(highest, key);
    }
    lowest = __reduce_min_sync(kFullWarpMask, lowest);
    highest = __reduce_max_sync(kFullWarpMask, highest);
  }

  MaskRecord policy_;
  const int32_t* columns_;              // the plan's columns, for column chunks
  int32_t aligned_[kRowsPerThread];     // aligned positions of this thread's rows
  int32_t row_phases_[kRowsPerThread];  // their phases mod the policy's period (0 without one)
  int32_t row_lowest_ = 0;              // bounds of the warpgroup's valid aligned positions
  int32_t row_highest_ = 0;
};

}  // namespace mmsparse::cuda
