#pragma once
// A tile's positional MaskPolicy (causal on aligned positions, window with window_sink) as seen by
// one consumer warpgroup of the wgmma kernel, over span chunks. Chunk decisions are uniform over
// the warpgroup (its 64 rows' bounds), because wgmma is issued by all four warps together; element
// masks use each thread's own rows. Policies that read tokens run on the mma.sync kernel instead.
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

  // `rows`: the warpgroup's kWarpgroupRows original positions (kNoRow past the tile). Publishes
  // the warp's bounds in `storage`; gather_bounds() reads them after a warpgroup barrier.
  template <class Storage>
  __device__ WarpgroupMask(const TileWork& work, const int32_t* rows, Storage& storage,
                           int consumer_warp, int lane)
      : policy_(work.mask) {
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

  // Uniform over the warpgroup; conservative like TileMask::classify.
  __device__ ChunkCoverage classify(const KeyChunk& chunk) const {
    if (row_lowest_ > row_highest_) return ChunkCoverage::kNone;
    const auto key_lowest = static_cast<int32_t>(chunk.first);
    const int32_t key_highest = key_lowest + chunk.count - 1;
    const bool windowed = policy_.window > 0;
    if (policy_.causal && key_lowest > row_highest_) return ChunkCoverage::kNone;
    if (windowed && key_lowest >= policy_.window_sink &&
        row_lowest_ - key_highest >= policy_.window) {
      return ChunkCoverage::kNone;
    }
    if (chunk.count < Traits::kBlockN) return ChunkCoverage::kPartial;
    if (policy_.causal && key_highest > row_lowest_) return ChunkCoverage::kPartial;
    if (windowed && key_highest >= policy_.window_sink &&
        row_highest_ - key_lowest >= policy_.window) {
      return ChunkCoverage::kPartial;
    }
    return ChunkCoverage::kFull;
  }

  // Sets the scores of removed pairs and of slots past the chunk's end to -inf.
  __device__ void apply(float (&scores)[Traits::kScoreTiles][4], const KeyChunk& chunk,
                        int lane) const {
    constexpr float kRemoved = -::cuda::std::numeric_limits<float>::infinity();
    const auto first = static_cast<int32_t>(chunk.first);
#pragma unroll
    for (int tile = 0; tile < Traits::kScoreTiles; ++tile) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int slot = tile * Traits::kAccumulatorTileN + lane % kThreadsPerRow * 2 + e % 2;
        const int32_t aligned = aligned_[e / 2];
        const int32_t key = first + slot;
        const bool removed =
            slot >= chunk.count || (policy_.causal && key > aligned) ||
            (policy_.window > 0 && key >= policy_.window_sink && aligned - key >= policy_.window);
        if (removed) scores[tile][e] = kRemoved;
      }
    }
  }

 private:
  MaskRecord policy_;
  int32_t aligned_[kRowsPerThread];  // aligned positions of this thread's rows
  int32_t row_lowest_ = 0;           // bounds of the warpgroup's valid aligned positions
  int32_t row_highest_ = 0;
};

}  // namespace mmsparse::cuda
