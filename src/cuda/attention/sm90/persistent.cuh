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
// producer also looks up the claimed tile's row positions (from the plan's run records: dependent
// loads the one-tile kernel's consumers wait for at every tile's start) and prefetches those query
// rows into L2, so that the consumers start the next tile with its query copies, from L2; it takes
// 56 registers for it and the consumers 224. The query rows are copied into shared memory by the
// consumers after their previous epilogue: the query tile holds O in the epilogue, and a second
// one does not fit beside three stages.
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

// The claimed items on their way from the producer's thread 0 to every thread of the CTA: slot
// s = k % 2 carries the item after the CTA's k-th tile (from 0). `claimed[s]` completes when
// thread 0 has written it; the producer's threads then look up the row positions of that item's
// tile into `rows` and arrive on `rows_found` (one phase per tile), which the consumers wait for
// at the end of their k-th tile; `released[s]` completes when every thread has read the item (the
// consumers once they have copied their rows), so that thread 0 writes the slot again, and the
// producer writes `rows` again, only then. Placed after WgmmaSharedStorage in the dynamic shared
// memory (one `rows`: two do not fit beside three stages).
//
// Every thread that reads or writes `item` or `rows` arrives on the barrier that publishes or
// releases them itself, and every thread that reads them waits on the barrier its writer arrived
// on: each access is ordered by an mbarrier's own release and acquire. With one arrival per warp
// after __syncwarp, the other lanes' accesses were ordered only through the warp barrier's
// cumulativity, which the PTX memory model grants but racecheck does not follow (it reported the
// lanes' reads of `rows` and `item` against the next tile's writes).
template <int kRows>
struct TileQueueStorage {
  static constexpr int kSlots = 2;
  uint64_t claimed[kSlots];
  uint64_t released[kSlots];
  uint64_t rows_found;
  int32_t item[kSlots];
  int32_t rows[kRows];  // original query position or kNoRow, as WgmmaSharedStorage::row_positions
};

template <class Traits>
using QueueStorage = TileQueueStorage<Traits::kBlockM>;

template <class Traits>
inline constexpr int kPersistentSharedBytes = kWgmmaSharedBytes<Traits> +
                                              static_cast<int>(sizeof(QueueStorage<Traits>));

template <class Traits>
class TileQueue {
 public:
  static constexpr int kSlots = QueueStorage<Traits>::kSlots;

  __device__ TileQueue(QueueStorage<Traits>& storage, uint32_t* counter, int32_t items,
                       int32_t ctas)
      : storage_(storage), counter_(counter), items_(items), ctas_(ctas) {}

  // By one thread, before the CTA's set-up barrier.
  __device__ void initialise() {
#pragma unroll
    for (int slot = 0; slot < kSlots; ++slot) {
      barrier_init(shared_address(&storage_.claimed[slot]), 1);
      barrier_init(shared_address(&storage_.released[slot]), Traits::kThreads);  // each reads it
    }
    barrier_init(shared_address(&storage_.rows_found), Traits::kProducerThreads);
  }

  // The producer's thread 0 after issuing the CTA's `index`-th tile: claims the next item and
  // publishes it. The claim that draws the launch's last value resets the counter for the next
  // launch.
  __device__ void claim(int32_t index) {
    const int slot = index % kSlots;
    // A fresh barrier counts as released in the phase before its first.
    barrier_wait(shared_address(&storage_.released[slot]), slot_phase(index) ^ 1u);
    const auto drawn = static_cast<int32_t>(atomicAdd(counter_, 1u));
    if (drawn == items_ - 1) atomicExch(counter_, 0u);
    storage_.item[slot] = ctas_ + drawn;
    barrier_arrive(shared_address(&storage_.claimed[slot]));  // releases the write
  }

  // Every producer thread after the claim: the item after the `index`-th (at least `items` past
  // the last), whose tile's row positions it looks up for the consumers.
  template <class FindRow>
  __device__ int32_t publish_next(int32_t index, int thread, const FindRow& find_row) {
    const int slot = index % kSlots;
    barrier_wait(shared_address(&storage_.claimed[slot]), slot_phase(index));
    const int32_t item = storage_.item[slot];
    // The consumers have copied the previous item's rows (their release of its slot). Also past
    // the last item: without it, `rows_found` could complete this phase before the consumers
    // waited for the previous one, and a parity wait cannot tell the two apart.
    if (index > 0) {
      barrier_wait(shared_address(&storage_.released[(index - 1) % kSlots]), slot_phase(index - 1));
    }
    if (item < items_) {
      for (int row = thread; row < Traits::kBlockM; row += Traits::kProducerThreads) {
        storage_.rows[row] = find_row(item, row);
      }
    }
    barrier_arrive(shared_address(&storage_.rows_found));  // releases this thread's rows
    barrier_arrive(shared_address(&storage_.released[slot]));
    return item;
  }

  // Every consumer thread after its `index`-th tile: the next item, once its rows are found. The
  // wait for the claim itself has completed by then (the producer's threads waited for it before
  // they found the rows); it orders thread 0's write of the item before this read directly.
  __device__ int32_t next(int32_t index) {
    const int slot = index % kSlots;
    barrier_wait(shared_address(&storage_.claimed[slot]), slot_phase(index));
    barrier_wait(shared_address(&storage_.rows_found), static_cast<uint32_t>(index) & 1u);
    return storage_.item[slot];
  }

  // Every consumer thread before the tile after its `index`-th, once its warpgroup has finished
  // the `index`-th: copies the warpgroup's row positions into `rows` (WgmmaSharedStorage::
  // row_positions) and releases the item's slot.
  __device__ void take_rows(int32_t index, int32_t* rows, int warpgroup, int thread) {
    if (thread < Traits::kWarpgroupRows) {
      rows[thread] = storage_.rows[warpgroup * Traits::kWarpgroupRows + thread];
    }
    barrier_arrive(shared_address(&storage_.released[index % kSlots]));
  }

 private:
  __device__ static uint32_t slot_phase(int32_t index) {
    return static_cast<uint32_t>(index / kSlots) & 1u;
  }
  QueueStorage<Traits>& storage_;
  uint32_t* counter_;
  int32_t items_;
  int32_t ctas_;
};

// Prefetches query row `position` of the work's (batch, head) into L2, so that the consumers'
// copies of it after their current epilogue read L2, not device memory.
template <class Traits>
__device__ __forceinline__ void prefetch_query_row(const AttentionParams& params,
                                                   const TileWork& work, int32_t position) {
  using Element = typename Traits::Element;
  constexpr int kRowBytes = Traits::kHeadDim * static_cast<int>(sizeof(Element));
  constexpr int kLineBytes = 128;  // L2's line
  const auto* row = reinterpret_cast<const unsigned char*>(
      static_cast<const Element*>(params.q.data) + work.batch * params.q.batch_stride +
      work.head * params.q.head_stride + position * params.q.row_stride);
#pragma unroll
  for (int offset = 0; offset < kRowBytes; offset += kLineBytes) {
    asm volatile("prefetch.global.L2 [%0];\n" ::"l"(row + offset));
  }
}

// The registers of a producer and a consumer thread: the producer's row lookups for the next tile
// (warp_query_positions) and query prefetches spill at the one-tile kernel's 40; the consumers'
// loop fits 224 without spilling (cuobjdump -res-usage: no stack). The same pool as the one-tile
// kernel's split.
inline constexpr int kPersistentProducerRegisters = 56;
inline constexpr int kPersistentConsumerRegisters = 224;

// items = num_tiles × batch blocks, at least gridDim.x (every CTA has a first item).
// `queue_counter`: [1], zero at launch (and left zero).
template <class Traits>
__global__ void __launch_bounds__(Traits::kThreads, 1)
    wgmma_persistent_attention_kernel(const __grid_constant__ WgmmaAttentionParams params,
                                      const int32_t num_tiles, const int32_t items,
                                      uint32_t* queue_counter) {
  extern __shared__ unsigned char dynamic_shared[];
  WgmmaSharedStorage<Traits>& storage = aligned_wgmma_storage<Traits>(dynamic_shared);
  auto& queue_storage = *reinterpret_cast<QueueStorage<Traits>*>(
      reinterpret_cast<unsigned char*>(&storage) + sizeof(WgmmaSharedStorage<Traits>));
  TileQueue<Traits> queue(queue_storage, queue_counter, items, static_cast<int32_t>(gridDim.x));
  // Warp-uniform, as in the one-tile kernel.
  const int warpgroup =
      __shfl_sync(kFullWarpMask, static_cast<int>(threadIdx.x) / kWarpgroupThreads, 0);
  const int thread = static_cast<int>(threadIdx.x) % kWarpgroupThreads;

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
      lower_register_limit<kPersistentProducerRegisters>();
    }
    // The next tile's row positions, looked up (and its query rows prefetched into L2) while the
    // consumers finish the current one.
    const auto find_row = [&](int32_t next_item, int row) {
      const AttentionParams& attention = params.attention;
      const TileWork next = persistent_tile_work(attention, num_tiles, next_item);
      const int32_t position =
          tile_row_position(attention.plan, next.tile, next.rows, row, attention.q_len);
      if (position != kNoRow) {
        prefetch_query_row<Traits>(attention, next, position);
      }
      return position;
    };
    // Runs ahead of the consumers by up to the ring's stages, into the next tile.
    for (int32_t index = 0; item < items; ++index) {
      const TileWork work = persistent_tile_work(params.attention, num_tiles, item);
      state = WgmmaMainloop<Traits>::produce_chunks(storage, params, work, thread, state);
      if (thread == 0) queue.claim(index);
      if constexpr (Traits::kGathers) {
        // The warps that skip the copied chunks' stages (produce_chunks) wait for the claim here,
        // blocked without issuing, not on its mbarrier, spinning through the first warp's copies.
        named_barrier_sync(static_cast<int>(WgmmaBarrier::kProducerGather),
                           Traits::kProducerThreads);
      }
      item = queue.publish_next(index, thread, find_row);
    }
  } else {
    if constexpr (Traits::kReallocateRegisters) {
      raise_register_limit<kPersistentConsumerRegisters>();
    }
    const int consumer = warpgroup - 1;
    for (int32_t index = 0; item < items; ++index) {
      if (index > 0) {
        // The previous epilogue's last reads of the warpgroup's row positions and query rows
        // precede the next tile's writes to them.
        named_barrier_sync(static_cast<int>(WgmmaBarrier::kFirstConsumerWarpgroup) + consumer,
                           kWarpgroupThreads);
        queue.take_rows(index - 1, storage.row_positions + consumer * Traits::kWarpgroupRows,
                        consumer, thread);
      }
      const TileWork work = persistent_tile_work(params.attention, num_tiles, item);
      state = consume_tile<Traits>(storage, params.attention, params.lattice_step, work, consumer,
                                   opaque_copy(thread), state, index == 0, false, index > 0);
      item = queue.next(index);
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
  static_assert(
      Traits::kProducerThreads * kPersistentProducerRegisters +
              Traits::kConsumerWarpgroups * kWarpgroupThreads * kPersistentConsumerRegisters ==
          Traits::kProducerThreads * Traits::kProducerRegisters +
              Traits::kConsumerWarpgroups * kWarpgroupThreads * Traits::kConsumerRegisters,
      "the register split must take the one-tile kernel's pool");
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
