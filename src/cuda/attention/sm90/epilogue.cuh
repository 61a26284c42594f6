#pragma once
// Epilogue of one consumer warpgroup of the wgmma kernel: normalised O rows go through the
// warpgroup's rows of the query tile (swizzled, so the fragment stores are conflict-free) and leave
// as whole 16-byte vectors, scattered to the rows' original positions; LSE is written per row.

#include <cstdint>

#include "cuda/attention/params.cuh"
#include "cuda/attention/sm80/ptx.cuh"
#include "cuda/attention/sm80/traits.cuh"
#include "cuda/attention/sm90/ptx.cuh"
#include "cuda/attention/sm90/traits.cuh"

namespace mmsparse::cuda {

template <class Traits>
class WarpgroupEpilogue {
 public:
  using Element = typename Traits::Element;
  using Storage = WgmmaSharedStorage<Traits>;
  static constexpr int kRowsPerThread = 2;
  static constexpr int kRowHalf = Traits::kRowsPerWarp / kRowsPerThread;
  static constexpr int kThreadsPerRow = 4;  // lanes sharing one accumulator row

  // Every thread of the warpgroup calls this once, after its last wgmma has completed (so the
  // query rows it overwrites are no longer read).
  __device__ static void store(Storage& storage, const AttentionParams& params,
                               const TileWork& work, int warpgroup, int thread,
                               const float (&output)[Traits::kOutputTiles][4],
                               const float (&lse)[kRowsPerThread]) {
    const int warp = thread / kWarpSize;
    const int lane = thread % kWarpSize;
    const int first_row =
        warpgroup * Traits::kWarpgroupRows + warp * Traits::kRowsPerWarp + lane / kThreadsPerRow;
    const int first_column = lane % kThreadsPerRow * 2;
    auto* tile = reinterpret_cast<unsigned char*>(storage.query);
    // wgmma read these rows through the async proxy; order that before the generic stores.
    fence_proxy_async();
#pragma unroll
    for (int t = 0; t < Traits::kOutputTiles; ++t) {
#pragma unroll
      for (int r = 0; r < kRowsPerThread; ++r) {
        const int row = first_row + r * kRowHalf;
        const int column = t * Traits::kAccumulatorTileN + first_column;
        const uint32_t offset =
            Traits::swizzled_vector_offset(Traits::kBlockM, row, column / Traits::kVectorElements) +
            column % Traits::kVectorElements * static_cast<int>(sizeof(Element));
        *reinterpret_cast<uint32_t*>(tile + offset) =
            TensorCore<Element>::pack(output[t][2 * r], output[t][2 * r + 1]);
      }
    }
    float* lse_row =
        params.lse.data + work.batch * params.lse.batch_stride + work.head * params.lse.head_stride;
    if (lane % kThreadsPerRow == 0) {
#pragma unroll
      for (int r = 0; r < kRowsPerThread; ++r) {
        const int32_t position = storage.row_positions[first_row + r * kRowHalf];
        if (position != kNoRow) lse_row[position * params.lse.row_stride] = lse[r];
      }
    }
    // Rows leave through other warps than the ones that computed them.
    named_barrier_sync(static_cast<int>(WgmmaBarrier::kFirstConsumerWarpgroup) + warpgroup,
                       kWarpgroupThreads);

    Element* out = static_cast<Element*>(params.out.data) + work.batch * params.out.batch_stride +
                   work.head * params.out.head_stride;
#pragma unroll
    for (int i = 0; i < Traits::kRowVectorsPerThread; ++i) {
      // A pass of the warpgroup covers whole rows, so the thread's vector is the same in every
      // pass and its rows are kRowsPerVectorPass apart: their positions' addresses are offsets
      // from one register, not one register each held from the query loads (at head_dim 256 the
      // 16 of those spilled).
      const int row = warpgroup * Traits::kWarpgroupRows + thread / Traits::kVectorsPerRow +
                      i * Traits::kRowsPerVectorPass;
      const int vector = thread % Traits::kVectorsPerRow;
      const int32_t position = storage.row_positions[row];
      if (position == kNoRow) continue;
      const uint4 value = *reinterpret_cast<const uint4*>(
          tile + Traits::swizzled_vector_offset(Traits::kBlockM, row, vector));
      *reinterpret_cast<uint4*>(out + position * params.out.row_stride +
                                vector * Traits::kVectorElements) = value;
    }
  }
};

}  // namespace mmsparse::cuda
