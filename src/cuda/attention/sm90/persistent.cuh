#pragma once
// The wgmma attention kernel with persistent CTAs fed by a dynamic tile queue: one CTA per SM (at
// most), each running the launch order's (tile, batch element) items with the producer and
// consumer warpgroups of the one-tile kernel (cuda/attention/sm90/kernel.cuh). Where tiles read few
// key chunks (BlindSight's image tiles at 36K tokens: 18-33, median), a CTA's fixed cost (launch,
// barrier set-up, the K/V pipeline's fill, drain and epilogue) is a large share of its work; here
// the CTA pays launch and set-up once, and the producer fills the stages with the next tile's
// first chunks while the consumers finish the current one, since the stage ring and its barrier
// phases run on from tile to tile. The consumers' ping-pong carries on across tiles too
// (IssueTurns).
//
// The queue: CTA c's first item is c; every further item is claimed from one counter in device
// memory (atomicAdd), in the launch order (heaviest first), by whichever CTA's producer reaches the
// end of its current tile first, as the hardware hands one-tile CTAs to the SM that frees first. A
// dealt (static) sequence measured slower: the CTAs that drew heavier tiles than the model's costs
// finished last. The producer claims as soon as it has issued its tile's last chunk, two chunks
// (the ring's other stages) before the consumers finish it, and goes on loading its chunks; the
// claimed item reaches the producer's other threads and the consumers through a two-slot ring in
// shared memory guarded by mbarriers (TileQueue), with no block-wide barrier after the set-up. The
// consumers load a tile's query rows themselves, after their previous epilogue: the query tile
// holds O in the epilogue, a second one does not fit beside three stages, and an L2 prefetch of the
// rows by the producer (their positions looked up from the plan) spilled the producer's 40
// registers.
//
// The counter is zero at every launch without a memset: every CTA claims until it draws an item
// past the last, so a launch makes exactly `items` claims (items - CTAs valid ones, one past the
// end per CTA), and the claim that draws items - 1 is the launch's last: its CTA resets the
// counter. Launches on one stream run one after another; launches on different streams take
// different counters (the engine keeps one per stream).

#include <cstdint>

#include "cuda/attention/launch.h"
#include "cuda/attention/sm90/kernel.cuh"
#include "cuda/attention/sm90/traits.cuh"
#include "cuda/common/cuda_check.h"

namespace mmsparse::cuda {

// A copy of `value` that the compiler cannot see through (a volatile move). A consumer's per-thread
// offsets (its query vectors' and output vectors' places in the swizzle) derive from its thread
// index; from a plain index the compiler hoists them out of the tile loop, where they do not fit
// the consumers' registers beside the tile's and spill. Derived from this copy, they are recomputed
// per tile from the index, as the one-tile kernel computes them.
__device__ __forceinline__ int opaque_copy(int value) {
  int copy;
  asm volatile("mov.b32 %0, %1;\n" : "=r"(copy) : "r"(value));
  return copy;
}

// The work of launch-order item `item` of `num_tiles` tiles per batch block (grid.x fastest, as
// the one-tile kernel's grid is dispatched).
__device__ __forceinline__ TileWork persistent_tile_work(const AttentionParams& params,
                                                         int32_t num_tiles, int32_t item) {
  return resolve_tile_work(params, item % num_tiles, item / num_tiles);
}

// The claimed items on their way from the producer's thread 0 to every warp of the CTA: slot
// s = k % 2 carries the item after the CTA's k-th (from 0); `claimed[s]` completes when thread 0
// has written it, `released[s]` when every warp has read it, so that thread 0 writes the slot
// again only then. Placed after WgmmaSharedStorage in the dynamic shared memory.
struct TileQueueStorage {
  static constexpr int kSlots = 2;
  uint64_t claimed[kSlots];
  uint64_t released[kSlots];
  int32_t item[kSlots];
};

template <class Traits>
inline constexpr int kPersistentSharedBytes = kWgmmaSharedBytes<Traits> +
                                              static_cast<int>(sizeof(TileQueueStorage));

template <class Traits>
class TileQueue {
 public:
  static constexpr int kWarps = Traits::kThreads / kWarpSize;  // each reads every item

  __device__ TileQueue(TileQueueStorage& storage, uint32_t* counter, int32_t items, int32_t ctas)
      : storage_(storage), counter_(counter), items_(items), ctas_(ctas) {}

  // By one thread, before the CTA's set-up barrier.
  __device__ void initialise() {
#pragma unroll
    for (int slot = 0; slot < TileQueueStorage::kSlots; ++slot) {
      barrier_init(shared_address(&storage_.claimed[slot]), 1);
      barrier_init(shared_address(&storage_.released[slot]), kWarps);
    }
  }

  // The producer's thread 0: claims the item after the CTA's `index`-th and publishes it. The
  // claim that draws the launch's last value resets the counter for the next launch.
  __device__ void claim(int32_t index) {
    const int slot = index % TileQueueStorage::kSlots;
    // A fresh barrier counts as released in the phase before its first.
    barrier_wait(shared_address(&storage_.released[slot]), phase(index) ^ 1u);
    const auto drawn = static_cast<int32_t>(atomicAdd(counter_, 1u));
    if (drawn == items_ - 1) atomicExch(counter_, 0u);
    storage_.item[slot] = ctas_ + drawn;
    barrier_arrive(shared_address(&storage_.claimed[slot]));  // releases the write
  }

  // Every thread: the item after the CTA's `index`-th (at least `items` past the last).
  __device__ int32_t next(int32_t index, int lane) {
    const int slot = index % TileQueueStorage::kSlots;
    barrier_wait(shared_address(&storage_.claimed[slot]), phase(index));
    const int32_t item = storage_.item[slot];
    __syncwarp();
    if (lane == 0) barrier_arrive(shared_address(&storage_.released[slot]));
    return item;
  }

 private:
  __device__ static uint32_t phase(int32_t index) {
    return static_cast<uint32_t>(index / TileQueueStorage::kSlots) & 1u;
  }
  TileQueueStorage& storage_;
  uint32_t* counter_;
  int32_t items_;
  int32_t ctas_;
};

// items = num_tiles × batch blocks, at least gridDim.x (every CTA has a first item).
// `queue_counter`: [1], zero at launch (and left zero).
template <class Traits>
__global__ void __launch_bounds__(Traits::kThreads, 1)
    wgmma_persistent_attention_kernel(const __grid_constant__ WgmmaAttentionParams params,
                                      const int32_t num_tiles, const int32_t items,
                                      uint32_t* queue_counter) {
  extern __shared__ unsigned char dynamic_shared[];
  WgmmaSharedStorage<Traits>& storage = aligned_wgmma_storage<Traits>(dynamic_shared);
  auto& queue_storage = *reinterpret_cast<TileQueueStorage*>(
      reinterpret_cast<unsigned char*>(&storage) + sizeof(WgmmaSharedStorage<Traits>));
  TileQueue<Traits> queue(queue_storage, queue_counter, items, static_cast<int32_t>(gridDim.x));
  // Warp-uniform, as in the one-tile kernel.
  const int warpgroup =
      __shfl_sync(kFullWarpMask, static_cast<int>(threadIdx.x) / kWarpgroupThreads, 0);
  const int thread = static_cast<int>(threadIdx.x) % kWarpgroupThreads;
  const int lane = thread % kWarpSize;

  if (threadIdx.x == 0) {
#pragma unroll
    for (int stage = 0; stage < Traits::kStages; ++stage) {
      barrier_init(shared_address(&storage.chunk_loaded[stage]), Traits::kLoadingThreads);
      barrier_init(shared_address(&storage.chunk_consumed[stage]), Traits::kConsumerWarps);
    }
    queue.initialise();
    fence_barrier_init();
  }
  __syncthreads();  // barriers are initialised before anyone waits on or copies into them

  PipelineState<Traits::kStages> state;
  auto item = static_cast<int32_t>(blockIdx.x);
  if (warpgroup == 0) {
    if constexpr (Traits::kReallocateRegisters) {
      lower_register_limit<Traits::kProducerRegisters>();
    }
    // Runs ahead of the consumers by up to the ring's stages, into the next tile.
    for (int32_t index = 0; item < items; ++index) {
      const TileWork work = persistent_tile_work(params.attention, num_tiles, item);
      state = WgmmaMainloop<Traits>::produce_chunks(storage, params, work, thread, state);
      if (thread == 0) queue.claim(index);
      item = queue.next(index, lane);
    }
  } else {
    if constexpr (Traits::kReallocateRegisters) {
      raise_register_limit<Traits::kConsumerRegisters>();
    }
    const int consumer = warpgroup - 1;
    for (int32_t index = 0; item < items; ++index) {
      if (index > 0) {
        // The previous epilogue's last reads of the warpgroup's row positions and query rows
        // precede the next tile's writes to them.
        named_barrier_sync(static_cast<int>(WgmmaBarrier::kFirstConsumerWarpgroup) + consumer,
                           kWarpgroupThreads);
      }
      const TileWork work = persistent_tile_work(params.attention, num_tiles, item);
      state = consume_tile<Traits>(storage, params.attention, params.lattice_step, work, consumer,
                                   opaque_copy(thread), state, index == 0, false);
      item = queue.next(index, lane);
    }
    // The first warpgroup takes the turn the second passed at its last tile's end.
    IssueTurns<Traits>(consumer, false).finish();
  }
}

template <class Element, int kHeadDim, int kConsumerWarpgroups, ChunkSources kSources,
          MaskTerms kMaskTerms>
void launch_wgmma_persistent_attention(const WgmmaAttentionParams& params, int32_t num_tiles,
                                       int32_t batch_blocks, int32_t ctas, uint32_t* queue_counter,
                                       cudaStream_t stream) {
  using Traits = WgmmaTraits<Element, kHeadDim, kConsumerWarpgroups, kSources, kMaskTerms>;
  static_assert(kPersistentSharedBytes<Traits> <= kMaxSharedBytesPerBlock,
                "the stages, the query tile, the barriers and the tile queue must fit one block's "
                "shared memory");
  const auto kernel = wgmma_persistent_attention_kernel<Traits>;
  check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  kPersistentSharedBytes<Traits>),
             "wgmma_persistent_attention_kernel: cudaFuncSetAttribute");
  const int32_t items = num_tiles * batch_blocks;  // the engine checks that it fits
  kernel<<<static_cast<unsigned>(ctas), Traits::kThreads, kPersistentSharedBytes<Traits>, stream>>>(
      params, num_tiles, items, queue_counter);
  check_launch("wgmma_persistent_attention_kernel");
}

}  // namespace mmsparse::cuda
