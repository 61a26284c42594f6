#pragma once
// Epilogue of one consumer warpgroup of the wgmma kernel: normalised O rows leave straight from the
// accumulators, scattered to the rows' original positions (a quad of lanes writes 16 contiguous
// bytes of a row per accumulator tile); LSE is written per row. The query tile is not used: in the
// persistent kernel it already holds the next tile's rows.

#include <cstdint>

#include "cuda/attention_params.cuh"
#include "cuda/attention_traits.cuh"
#include "cuda/ptx_primitives.cuh"
#include "cuda/wgmma_traits.cuh"

namespace mmsparse::cuda {

template <class Traits>
class WarpgroupEpilogue {
 public:
  using Element = typename Traits::Element;
  static constexpr int kRowsPerThread = 2;
  static constexpr int kRowHalf = Traits::kRowsPerWarp / kRowsPerThread;
  static constexpr int kThreadsPerRow = 4;  // lanes sharing one accumulator row

  // `rows`: the warpgroup's kWarpgroupRows original positions (kNoRow past the tile). Every thread
  // of the warpgroup calls this once per tile, after its last wgmma has completed.
  __device__ static void store(const AttentionParams& params, const TileWork& work,
                               const int32_t* rows, int thread,
                               const float (&output)[Traits::kOutputTiles][4],
                               const float (&lse)[kRowsPerThread]) {
    const int warp = thread / kWarpSize;
    const int lane = thread % kWarpSize;
    const int first_row = warp * Traits::kRowsPerWarp + lane / kThreadsPerRow;
    const int first_column = lane % kThreadsPerRow * 2;
    Element* out = static_cast<Element*>(params.out.data) + work.batch * params.out.batch_stride +
                   work.head * params.out.head_stride + first_column;
    float* lse_row =
        params.lse.data + work.batch * params.lse.batch_stride + work.head * params.lse.head_stride;
#pragma unroll
    for (int r = 0; r < kRowsPerThread; ++r) {
      const int32_t position = rows[first_row + r * kRowHalf];
      if (position == kNoRow) continue;
      Element* row = out + position * params.out.row_stride;
#pragma unroll
      for (int t = 0; t < Traits::kOutputTiles; ++t) {
        *reinterpret_cast<uint32_t*>(row + t * Traits::kAccumulatorTileN) =
            TensorCore<Element>::pack(output[t][2 * r], output[t][2 * r + 1]);
      }
      if (lane % kThreadsPerRow == 0) lse_row[position * params.lse.row_stride] = lse[r];
    }
  }
};

}  // namespace mmsparse::cuda
