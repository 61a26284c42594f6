#pragma once
// The wgmma attention kernel with persistent CTAs: one CTA per SM (at most), each running a static
// sequence of the launch order's (tile, batch element) items with the producer and consumer
// warpgroups of the one-tile kernel (cuda/attention/sm90/kernel.cuh). Where tiles read few key
// chunks (BlindSight's image tiles at 36K tokens: 17-32, median), a CTA's fixed cost (launch,
// barrier set-up, the K/V pipeline's fill) is a large share of its work; here the CTA pays launch
// and set-up once, and the producer fills the stages with the next tile's first chunks while the
// consumers finish the current one (drain, epilogue, the next tile's query load), since the stage
// ring and its barrier phases run on from tile to tile. The consumers' ping-pong carries on across
// tiles too (IssueTurns).
//
// The sequence is the launch order (heaviest first) dealt in snake order: round r of G items (G
// CTAs) goes to CTAs 0, 1, ..., G-1 when r is even and G-1, ..., 0 when odd, so that the CTA that
// took a round's heaviest item takes the next round's lightest. With the launch order descending
// that evens the CTAs' sums: in the work model (tools/plan_model) the makespan lies 2-3% above the
// mean on the multi-image preset at 36K tokens, against 10% for the plain stride c, c + G, ...
// and 0.3% for a dynamic queue. No counter in device memory: a plan may run on several streams at
// once, and a counter would need resetting per launch.

#include <cstdint>

#include "cuda/attention/launch.h"
#include "cuda/attention/sm90/kernel.cuh"
#include "cuda/attention/sm90/traits.cuh"
#include "cuda/common/cuda_check.h"

namespace mmsparse::cuda {

// Item of round `round` of CTA `cta` of `ctas` in snake order. Increasing in `round`, so a CTA's
// sequence ends at its first item past the last.
__device__ __forceinline__ int64_t snake_item(int32_t round, int32_t cta, int32_t ctas) {
  const int32_t column = round % 2 == 0 ? cta : ctas - 1 - cta;
  return static_cast<int64_t>(round) * ctas + column;
}

// A copy of `value` that the compiler cannot see through (a volatile move). A consumer's per-thread
// offsets (its query vectors' and output vectors' places in the swizzle) derive from its thread
// index; from a plain index the compiler hoists them out of the tile loop, where they do not fit
// the consumers' registers beside the tile's and spill (a stack frame of 192-232 bytes, reloaded
// per tile through an L1 that shared memory leaves small). Derived from this copy, they are
// recomputed per tile from the index, as the one-tile kernel computes them; 40-56 bytes remain
// (eight values held from a tile's start to its epilogue: 8 stores and 8 loads a thread per tile,
// none in the chunk loop).
__device__ __forceinline__ int opaque_copy(int value) {
  int copy;
  asm volatile("mov.b32 %0, %1;\n" : "=r"(copy) : "r"(value));
  return copy;
}

// The work of launch-order item `item` of `num_tiles` tiles per batch block (grid.x fastest, as
// the one-tile kernel's grid is dispatched).
__device__ __forceinline__ TileWork persistent_tile_work(const AttentionParams& params,
                                                         int32_t num_tiles, int64_t item) {
  return resolve_tile_work(params, static_cast<int32_t>(item % num_tiles),
                           static_cast<int32_t>(item / num_tiles));
}

// items = num_tiles × batch blocks, at least gridDim.x (every CTA has a first item).
template <class Traits>
__global__ void __launch_bounds__(Traits::kThreads, 1)
    wgmma_persistent_attention_kernel(const __grid_constant__ WgmmaAttentionParams params,
                                      const int32_t num_tiles, const int64_t items) {
  extern __shared__ unsigned char dynamic_shared[];
  WgmmaSharedStorage<Traits>& storage = aligned_wgmma_storage<Traits>(dynamic_shared);
  // Warp-uniform, as in the one-tile kernel.
  const int warpgroup =
      __shfl_sync(kFullWarpMask, static_cast<int>(threadIdx.x) / kWarpgroupThreads, 0);
  const int thread = static_cast<int>(threadIdx.x) % kWarpgroupThreads;
  const auto cta = static_cast<int32_t>(blockIdx.x);
  const auto ctas = static_cast<int32_t>(gridDim.x);

  if (threadIdx.x == 0) {
#pragma unroll
    for (int stage = 0; stage < Traits::kStages; ++stage) {
      barrier_init(shared_address(&storage.chunk_loaded[stage]), Traits::kLoadingThreads);
      barrier_init(shared_address(&storage.chunk_consumed[stage]), Traits::kConsumerWarps);
    }
    fence_barrier_init();
  }
  __syncthreads();  // barriers are initialised before anyone waits on or copies into them

  PipelineState<Traits::kStages> state;
  if (warpgroup == 0) {
    if constexpr (Traits::kReallocateRegisters) {
      lower_register_limit<Traits::kProducerRegisters>();
    }
    // Runs ahead of the consumers by up to the ring's stages, into the next tile.
    for (int32_t round = 0; snake_item(round, cta, ctas) < items; ++round) {
      const TileWork work =
          persistent_tile_work(params.attention, num_tiles, snake_item(round, cta, ctas));
      state = WgmmaMainloop<Traits>::produce_chunks(storage, params, work, thread, state);
    }
  } else {
    if constexpr (Traits::kReallocateRegisters) {
      raise_register_limit<Traits::kConsumerRegisters>();
    }
    const int consumer = warpgroup - 1;
    for (int32_t round = 0; snake_item(round, cta, ctas) < items; ++round) {
      if (round > 0) {
        // The previous epilogue's last reads of the warpgroup's row positions and query rows
        // precede the next tile's writes to them.
        named_barrier_sync(static_cast<int>(WgmmaBarrier::kFirstConsumerWarpgroup) + consumer,
                           kWarpgroupThreads);
      }
      const TileWork work =
          persistent_tile_work(params.attention, num_tiles, snake_item(round, cta, ctas));
      state = consume_tile<Traits>(storage, params.attention, params.lattice_step, work, consumer,
                                   opaque_copy(thread), state, round == 0,
                                   snake_item(round + 1, cta, ctas) >= items);
    }
  }
}

template <class Element, int kHeadDim, int kConsumerWarpgroups, ChunkSources kSources,
          MaskTerms kMaskTerms>
void launch_wgmma_persistent_attention(const WgmmaAttentionParams& params, int32_t num_tiles,
                                       int32_t batch_blocks, int32_t ctas, cudaStream_t stream) {
  using Traits = WgmmaTraits<Element, kHeadDim, kConsumerWarpgroups, kSources, kMaskTerms>;
  static_assert(kWgmmaSharedBytes<Traits> <= kMaxSharedBytesPerBlock,
                "the stages, the query tile and the barriers must fit one block's shared memory");
  const auto kernel = wgmma_persistent_attention_kernel<Traits>;
  check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  kWgmmaSharedBytes<Traits>),
             "wgmma_persistent_attention_kernel: cudaFuncSetAttribute");
  const int64_t items = static_cast<int64_t>(num_tiles) * batch_blocks;
  kernel<<<static_cast<unsigned>(ctas), Traits::kThreads, kWgmmaSharedBytes<Traits>, stream>>>(
      params, num_tiles, items);
  check_launch("wgmma_persistent_attention_kernel");
}

}  // namespace mmsparse::cuda
