#pragma once
// Epilogue: normalised O rows go through shared memory (the Q tile, no longer needed) so that each
// row leaves as whole 16-byte vectors, scattered back to the rows' original positions; LSE is
// written per row. Rows beyond the tile are not touched.

#include <cstdint>

#include "cuda/attention/params.cuh"
#include "cuda/attention/sm80/ptx.cuh"
#include "cuda/attention/sm80/traits.cuh"

namespace mmsparse::cuda {

template <class Traits>
class Epilogue {
 public:
  using Element = typename Traits::Element;
  static constexpr int kRowsPerThread = 2;
  static constexpr int kRowHalf = Traits::kMmaM / kRowsPerThread;
  static constexpr int kThreadsPerRow = 4;  // lanes sharing one accumulator row

  __device__ Epilogue(SharedStorage<Traits>& storage, const AttentionParams& params,
                      const TileWork& work)
      : storage_(storage),
        out_(static_cast<Element*>(params.out.data) + work.batch * params.out.batch_stride +
             work.head * params.out.head_stride),
        out_row_stride_(params.out.row_stride),
        lse_(params.lse.data + work.batch * params.lse.batch_stride +
             work.head * params.lse.head_stride),
        lse_row_stride_(params.lse.row_stride) {}

  // Every thread of the CTA calls this once, after the mainloop.
  __device__ void store(const float (&output)[Traits::kOutputTiles][4],
                        const float (&lse)[kRowsPerThread], int warp, int lane) {
    // The warp overwrites only its own Q rows, which only it has read; the loop's last barrier (or
    // none at all when the tile had no keys and no copies were issued) has already passed.
    const int row0 = warp * Traits::kMmaM + lane / kThreadsPerRow;
    const int column0 = lane % kThreadsPerRow * 2;
#pragma unroll
    for (int tile = 0; tile < Traits::kOutputTiles; ++tile) {
#pragma unroll
      for (int r = 0; r < kRowsPerThread; ++r) {
        const int row = row0 + r * kRowHalf;
        const int column = tile * Traits::kMmaN + column0;
        const uint32_t pair =
            TensorCore<Element>::pack(output[tile][2 * r], output[tile][2 * r + 1]);
        *reinterpret_cast<uint32_t*>(&storage_.query[Traits::swizzled_offset(row, column)]) = pair;
      }
    }
    if (lane % kThreadsPerRow == 0) {
#pragma unroll
      for (int r = 0; r < kRowsPerThread; ++r) {
        const int32_t position = storage_.row_positions[row0 + r * kRowHalf];
        if (position != kNoRow) lse_[position * lse_row_stride_] = lse[r];
      }
    }
    __syncthreads();  // rows are stored by other warps than the ones that computed them

#pragma unroll
    for (int i = 0; i < Traits::kQueryLoadIterations; ++i) {
      const int index = static_cast<int>(threadIdx.x) + i * Traits::kThreads;
      const int row = index / Traits::kVectorsPerRow;
      const int column = index % Traits::kVectorsPerRow * Traits::kVectorElements;
      const int32_t position = storage_.row_positions[row];
      if (position == kNoRow) continue;
      const uint4 vector =
          *reinterpret_cast<const uint4*>(&storage_.query[Traits::swizzled_offset(row, column)]);
      *reinterpret_cast<uint4*>(out_ + position * out_row_stride_ + column) = vector;
    }
  }

 private:
  SharedStorage<Traits>& storage_;
  Element* out_;  // row 0 of the [q_len, head_dim] rows of this batch element and head
  int64_t out_row_stride_;
  float* lse_;  // entry 0 of the [q_len] LSE row of this batch element and head
  int64_t lse_row_stride_;
};

}  // namespace mmsparse::cuda
