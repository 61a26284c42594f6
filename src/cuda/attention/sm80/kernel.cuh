#pragma once
// The plan-driven attention kernel: one CTA per (plan tile, batch element). It gathers the tile's
// query rows, streams the tile's key chunks through a double-buffered pipeline, and for each chunk
// and warp either skips it, computes it without an element mask, or computes it masked.

#include "cuda/attention/key_chunks.cuh"
#include "cuda/attention/params.cuh"
#include "cuda/attention/query_rows.cuh"
#include "cuda/attention/resume.cuh"
#include "cuda/attention/sm80/epilogue.cuh"
#include "cuda/attention/sm80/mainloop.cuh"
#include "cuda/attention/sm80/mask.cuh"
#include "cuda/attention/sm80/traits.cuh"
#include "cuda/attention/softmax.cuh"
#include "cuda/runtime/plan_view.cuh"

namespace mmsparse::cuda {

// Original positions of the tile's rows (kNoRow past its end), one thread per row, whole warps.
template <class Traits>
__device__ void gather_row_positions(const PlanView& plan, const TileWork& work, int32_t q_len,
                                     int32_t* row_positions /* [kBlockM] shared */) {
  static_assert(Traits::kBlockM % kWarpSize == 0, "rows are looked up a warp at a time");
  const int row = static_cast<int>(threadIdx.x);
  if (row >= Traits::kBlockM) return;
  row_positions[row] = tile_row_position(plan, work.tile, work.rows, row, q_len);
}

template <class Traits>
__global__ void __launch_bounds__(Traits::kThreads)
    planned_attention_kernel(const __grid_constant__ AttentionParams params) {
  using Mainloop = MmaSyncMainloop<Traits>;
  extern __shared__ unsigned char dynamic_shared[];
  SharedStorage<Traits>& storage = aligned_shared_storage<Traits>(dynamic_shared);
  const int warp = static_cast<int>(threadIdx.x) / kWarpSize;
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;

  const TileWork work =
      resolve_tile_work(params, static_cast<int32_t>(blockIdx.x), static_cast<int32_t>(blockIdx.y));
  gather_row_positions<Traits>(params.plan, work, params.q_len, storage.row_positions);
  __syncthreads();  // the row positions steer every thread's query loads and masks

  Mainloop mainloop(storage, params, work);
  const TileMask<Traits> mask(work, params, storage.row_positions, warp, lane);
  OnlineSoftmax<Traits> softmax(params.scale_log2);
  float output[Traits::kOutputTiles][4] = {};
  if (params.accumulate) {
    resume_rows<Traits>(params, work, storage.row_positions + warp * Traits::kMmaM, lane, softmax,
                        output);
  }
  KeyChunkCursor<Traits::kBlockN> cursor(work.tile, work.first_range, params.plan.spans,
                                          params.plan.span_shifts);

  if (!cursor.done()) {
    KeyChunk current = cursor.next();
    mainloop.load_query();
    mainloop.load_chunk(0, current);
    commit_async_copies();
    for (int stage = 0, chunk_index = 0;; stage ^= 1, ++chunk_index) {
      const bool has_next = !cursor.done();
      KeyChunk next{};
      if (has_next) {
        next = cursor.next();
        mainloop.load_chunk(stage ^ 1, next);
      }
      // Always commit (possibly an empty group) so that "all but the newest group" is this chunk.
      commit_async_copies();
      wait_async_copies<1>();
      __syncthreads();  // this chunk's copies by every thread are visible

      if (mask.has_rows()) {
        if (chunk_index == 0) mainloop.load_query_fragments(warp, lane);
        const ChunkCoverage coverage = mask.classify(current, storage.key_positions[stage], lane);
        if (coverage != ChunkCoverage::kNone) {
          float scores[Traits::kScoreTiles][4];
          mainloop.compute_scores(stage, lane, scores);
          if (coverage == ChunkCoverage::kPartial) {
            mask.apply(scores, current, storage.key_positions[stage], storage.key_tokens[stage],
                       lane);
          }
          softmax.update(scores, output);
          mainloop.accumulate_output(stage, lane, scores, output);
        }
      }
      __syncthreads();  // every warp is done with `stage` before the next iteration refills it
      if (!has_next) break;
      current = next;
    }
  }

  float lse[OnlineSoftmax<Traits>::kRowsPerThread];
  softmax.finish(output, lse);
  Epilogue<Traits>(storage, params, work).store(output, lse, warp, lane);
}

}  // namespace mmsparse::cuda
