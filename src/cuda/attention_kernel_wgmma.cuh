#pragma once
// The plan-driven attention kernel on wgmma (sm_90a), for plans of spans, gathered columns and
// positional masks: persistent CTAs (about one per SM) that take the work items (plan tile, batch
// element) one by one in the plan's heaviest-first order, warp-specialised. Warpgroup 0 is
// the producer (one thread issues the tensor copies of span chunks, all of it gathers column
// chunks; most of its registers go to the consumers); warpgroups 1.. are consumers of 64 query rows
// each, which skip, compute unmasked or compute masked each chunk and release its stage. Both sides
// carry their ring position from tile to tile, so the producer loads the next tile's chunks while
// the consumers finish the current one, and the consumers gather the next tile's query rows during
// the current tile's last P·V and epilogue.

#include "cuda/attention_epilogue_wgmma.cuh"
#include "cuda/attention_mask.cuh"
#include "cuda/attention_mask_wgmma.cuh"
#include "cuda/attention_params.cuh"
#include "cuda/attention_softmax.cuh"
#include "cuda/key_chunks.cuh"
#include "cuda/mainloop_wgmma.cuh"
#include "cuda/plan_view.cuh"
#include "cuda/wgmma_params.cuh"
#include "cuda/wgmma_primitives.cuh"
#include "cuda/wgmma_traits.cuh"

namespace mmsparse::cuda {

// Ping-pong between two consumer warpgroups (FlashAttention-3's schedule): a warpgroup issues its
// wgmma groups only in its turn and passes the turn on right after issuing, so that the tensor
// cores run one warpgroup's products while the other computes its softmax. Both warpgroups take
// one turn per chunk of a tile plus one for its final P·V, tile after tile, so the turns pair up
// exactly across the CTA's whole walk. With one consumer warpgroup every call is a no-op.
template <class Traits>
class IssueTurns {
 public:
  static constexpr bool kEnabled = Traits::kConsumerWarpgroups == 2;
  static constexpr int kThreads = 2 * kWarpgroupThreads;  // both warpgroups meet at each barrier

  explicit __device__ IssueTurns(int warpgroup) : warpgroup_(warpgroup) {
    // The second warpgroup hands the first its first turn.
    if (kEnabled && warpgroup_ == 1) named_barrier_arrive(barrier(0), kThreads);
  }
  __device__ void wait() const {
    if (kEnabled) named_barrier_sync(barrier(warpgroup_), kThreads);
  }
  __device__ void pass() const {
    if (kEnabled) named_barrier_arrive(barrier(1 - warpgroup_), kThreads);
  }
  // The first warpgroup takes the turn the second passed last, which nobody else waits for.
  __device__ void finish() const {
    if (kEnabled && warpgroup_ == 0) wait();
  }

 private:
  __device__ static int barrier(int warpgroup) {
    return static_cast<int>(WgmmaBarrier::kFirstIssueTurn) + warpgroup;
  }
  int warpgroup_;
};

// The CTA's work items. Item i is schedule entry i % num_tiles of batch block i / num_tiles. A
// CTA's first item is its index; after that its producer takes the next untaken item from a counter
// shared by every CTA (zeroed before the launch), like the hardware's block dispatch: the items
// start in the schedule's heaviest-first order, and a CTA that runs slow takes fewer. The producer
// publishes each item in a slot of shared memory one round ahead (as it starts a tile, the next
// one) and fetches the one after (the atomic's latency hides behind a whole tile); every warp of
// the CTA reads each slot once. An item past the last ends the walk.
template <class Traits>
class WorkQueue {
 public:
  using Storage = WgmmaSharedStorage<Traits>;

  __device__ WorkQueue(Storage& storage, unsigned long long* counter, int32_t num_tiles,
                       int32_t batch_blocks)
      : storage_(storage),
        counter_(counter),
        num_tiles_(num_tiles),
        items_(static_cast<int64_t>(num_tiles) * batch_blocks) {}

  // Before any wait on the slots; by one thread, followed by fence_barrier_init and __syncthreads.
  __device__ void init_barriers() {
#pragma unroll
    for (int slot = 0; slot < Storage::kItemSlots; ++slot) {
      barrier_init(shared_address(&storage_.item_published[slot]), 1);  // the producer thread's
      barrier_init(shared_address(&storage_.item_read[slot]), Traits::kThreads / kWarpSize);
    }
  }

  using Position = PipelineState<Storage::kItemSlots>;  // slot and phase of a round

  // Producer thread 0, once per round: publishes `item` as the round's and returns the next one
  // it takes (or `item` itself past the last, which ends the walk).
  __device__ int64_t publish(const Position& round, int64_t item) {
    // Every warp has read the slot's previous item (a fresh barrier counts as read).
    barrier_wait(shared_address(&storage_.item_read[round.stage]), round.phase ^ 1u);
    storage_.items[round.stage] = item;
    barrier_arrive(shared_address(&storage_.item_published[round.stage]));  // releases the write
    if (!has(item)) return item;
    return static_cast<int64_t>(gridDim.x) + static_cast<int64_t>(atomicAdd(counter_, 1ull));
  }

  // The round's item, for every lane of the calling warp; each warp of the CTA takes every round.
  __device__ int64_t take(const Position& round, int lane) {
    barrier_wait(shared_address(&storage_.item_published[round.stage]), round.phase);
    const int64_t item = storage_.items[round.stage];
    __syncwarp();  // every lane has read the slot before the warp releases it
    if (lane == 0) barrier_arrive(shared_address(&storage_.item_read[round.stage]));
    return item;
  }

  __device__ bool has(int64_t item) const { return item < items_; }

  // Requires has(item).
  __device__ TileWork work(const AttentionParams& params, int64_t item) const {
    return resolve_tile_work(params, static_cast<int32_t>(item % num_tiles_),
                             static_cast<int32_t>(item / num_tiles_));
  }

 private:
  Storage& storage_;
  unsigned long long* counter_;
  int32_t num_tiles_;
  int64_t items_;
};

// Original positions of a tile's rows held by one warpgroup, one thread per row (kNoRow past the
// tile's end).
template <class Traits>
__device__ void write_row_positions(const AttentionParams& params, const TileWork& work,
                                    int32_t* rows, int warpgroup, int thread) {
  if (thread < Traits::kWarpgroupRows) {
    const int32_t index = work.tile.begin + warpgroup * Traits::kWarpgroupRows + thread;
    rows[thread] =
        index < work.tile.end ? query_position(params.plan, work.tile.head_slot, index) : kNoRow;
  }
}

// One tile of one consumer warpgroup, from its query rows (gathered by the previous tile's call,
// or before the first) to its epilogue. `look_ahead` is called once every thread of the warpgroup
// has finished the previous tile: it learns the next tile and writes its row positions while the
// first chunks load. `next_rows` is called once every Q·K^T of the tile has completed, before the
// last P·V: it starts the next tile's query gather, which the last P·V and the epilogue overlap.
template <class Traits, class LookAhead, class NextRows>
__device__ void consume_tile(WgmmaSharedStorage<Traits>& storage, const AttentionParams& params,
                             const TileWork& work, const int32_t* rows, IssueTurns<Traits>& turns,
                             PipelineState<Traits::kStages>& state, int warpgroup, int thread,
                             LookAhead look_ahead, NextRows next_rows) {
  using Mainloop = WgmmaMainloop<Traits>;
  const int lane = thread % kWarpSize;
  const int consumer_warp = warpgroup * kWarpgroupWarps + thread / kWarpSize;
  const int barrier = static_cast<int>(WgmmaBarrier::kFirstConsumerWarpgroup) + warpgroup;

  Mainloop::wait_query();
  WarpgroupMask<Traits> mask(work, rows, params.plan.columns, storage, consumer_warp, lane);
  named_barrier_sync(barrier, kWarpgroupThreads);  // query rows and warp bounds are in place
  mask.gather_bounds(storage, warpgroup);
  look_ahead();

  // Software pipeline over the chunks: chunk j's Q·K^T runs while chunk j-1's P·V is issued, and
  // chunk j's softmax runs while that P·V completes. A chunk's stage is released once its P·V has
  // completed (every wgmma of this warp that read the stage).
  using Softmax = OnlineSoftmax<Traits>;
  Softmax softmax(params.scale_log2);
  float output[Traits::kOutputTiles][4] = {};
  typename Mainloop::Probabilities probabilities;
  // Factors that take `output` to the newest chunk's maxima; applied as soon as no P·V is in
  // flight, so that `output` is always at the pending chunk's maxima when its P·V is issued.
  float corrections[Softmax::kRowsPerThread] = {};
  bool pending = false;  // `probabilities` hold a chunk whose P·V is not yet issued
  int pending_stage = 0;
  const auto release = [&](int stage) {
    if (lane == 0) barrier_arrive(shared_address(&storage.chunk_consumed[stage]));
  };
  // The pending chunk's P·V, issued and completed now.
  const auto flush_pending = [&] {
    Mainloop::issue_output(storage, pending_stage, probabilities, output);
    warpgroup_wait<0>();
    pin_accumulators(output);
    Mainloop::pin_fragments(probabilities);
    release(pending_stage);
    pending = false;
  };
  KeyChunkCursor<Traits::kBlockN> cursor(work.tile, params.plan.spans);
  while (!cursor.done()) {
    const KeyChunk chunk = cursor.next();
    const int stage = state.stage;
    // After skipped chunks the ring can come round to the stage the pending chunk still holds; the
    // producer refills it only once it is released. Out of turn, like the wait for the chunk: a
    // warpgroup holding the turn never waits on the other's progress.
    if (pending && stage == pending_stage) flush_pending();
    barrier_wait(shared_address(&storage.chunk_loaded[stage]), state.phase);
    state.advance();
    // Gathered rows were written by cp.async (the generic proxy); wgmma reads them.
    if (chunk.from_columns) fence_proxy_async();
    // Uniform over the warpgroup by construction; broadcasting it lets the compiler see that the
    // branches below do not diverge.
    const auto coverage = static_cast<ChunkCoverage>(
        __shfl_sync(kFullWarpMask, static_cast<int>(mask.classify(chunk, lane)), 0));
    turns.wait();
    if (coverage == ChunkCoverage::kNone) {
      turns.pass();
      release(stage);
      continue;
    }
    float scores[Traits::kScoreTiles][4];
    // Raw scores, masked, folded into the softmax; once the scores' group has completed.
    const auto fold_scores = [&] {
      pin_accumulators(scores);
      if (coverage == ChunkCoverage::kPartial) mask.apply(scores, chunk, lane);
      softmax.fold(scores, corrections);
    };
    Mainloop::issue_scores(storage, stage, warpgroup, scores);
    // Each wgmma group is waited for on the path that issued it: the compiler serialises every
    // wgmma when a group may still run where two paths merge.
    if (pending) {
      Mainloop::issue_output(storage, pending_stage, probabilities, output);
      turns.pass();
      warpgroup_wait<1>();  // the scores, the older group
      fold_scores();
      warpgroup_wait<0>();
      pin_accumulators(output);
      Mainloop::pin_fragments(probabilities);
      release(pending_stage);
    } else {
      turns.pass();
      warpgroup_wait<0>();
      fold_scores();
    }
    // Out of turn, with no product in flight: the other warpgroup's products run meanwhile.
    Softmax::rescale(output, corrections);
    Mainloop::pack_probabilities(scores, probabilities);
    pending = true;
    pending_stage = stage;
  }
  next_rows();  // out of turn: the other warpgroup's products run meanwhile
  turns.wait();
  if (pending) {
    Mainloop::issue_output(storage, pending_stage, probabilities, output);
    turns.pass();
    warpgroup_wait<0>();
    pin_accumulators(output);
    Mainloop::pin_fragments(probabilities);
    release(pending_stage);
  } else {
    turns.pass();
  }

  float lse[OnlineSoftmax<Traits>::kRowsPerThread];
  softmax.finish(output, lse);
  WarpgroupEpilogue<Traits>::store(params, work, rows, thread, output, lse);
}

// Every tile of the CTA's share, for one consumer warpgroup. Row positions alternate between the
// two buffers: the next tile's are written while the current tile's still steer its epilogue.
template <class Traits>
__device__ void consume_tiles(WgmmaSharedStorage<Traits>& storage, const AttentionParams& params,
                              WorkQueue<Traits>& queue, int warpgroup, int thread) {
  using Mainloop = WgmmaMainloop<Traits>;
  const int lane = thread % kWarpSize;
  const int barrier = static_cast<int>(WgmmaBarrier::kFirstConsumerWarpgroup) + warpgroup;
  const auto rows_of = [&](int buffer) {
    return storage.row_positions[buffer] + warpgroup * Traits::kWarpgroupRows;
  };
  IssueTurns<Traits> turns(warpgroup);
  PipelineState<Traits::kStages> state;
  typename WorkQueue<Traits>::Position round;
  int buffer = 0;
  int64_t item = queue.take(round, lane);
  round.advance();
  if (queue.has(item)) {
    const TileWork first = queue.work(params, item);
    write_row_positions<Traits>(params, first, rows_of(buffer), warpgroup, thread);
    named_barrier_sync(barrier, kWarpgroupThreads);  // positions steer the gather
    Mainloop::load_query(storage, params, first, rows_of(buffer), warpgroup, thread);
  }
  while (queue.has(item)) {
    const TileWork work = queue.work(params, item);
    const int next_buffer = (buffer + 1) % WgmmaSharedStorage<Traits>::kPositionBuffers;
    int64_t next_item = 0;
    const auto look_ahead = [&] {
      next_item = queue.take(round, lane);
      round.advance();
      if (queue.has(next_item)) {
        write_row_positions<Traits>(params, queue.work(params, next_item), rows_of(next_buffer),
                                    warpgroup, thread);
      }
    };
    const auto next_rows = [&] {
      // Every warp's Q·K^T has read the query rows (and the positions are in) before any thread
      // overwrites them.
      named_barrier_sync(barrier, kWarpgroupThreads);
      if (queue.has(next_item)) {
        Mainloop::load_query(storage, params, queue.work(params, next_item), rows_of(next_buffer),
                             warpgroup, thread);
      }
    };
    consume_tile<Traits>(storage, params, work, rows_of(buffer), turns, state, warpgroup, thread,
                         look_ahead, next_rows);
    buffer = next_buffer;
    item = next_item;
  }
  turns.finish();
}

template <class Traits>
__global__ void __launch_bounds__(Traits::kThreads, 1)
    wgmma_attention_kernel(const __grid_constant__ WgmmaAttentionParams params, int32_t num_tiles,
                           int32_t batch_blocks, unsigned long long* item_counter) {
  extern __shared__ unsigned char dynamic_shared[];
  WgmmaSharedStorage<Traits>& storage = aligned_wgmma_storage<Traits>(dynamic_shared);
  const int warpgroup = static_cast<int>(threadIdx.x) / kWarpgroupThreads;
  const int thread = static_cast<int>(threadIdx.x) % kWarpgroupThreads;
  WorkQueue<Traits> queue(storage, item_counter, num_tiles, batch_blocks);

  if (threadIdx.x == 0) {
#pragma unroll
    for (int stage = 0; stage < Traits::kStages; ++stage) {
      barrier_init(shared_address(&storage.chunk_loaded[stage]), Traits::kProducerThreads);
      barrier_init(shared_address(&storage.chunk_consumed[stage]), Traits::kConsumerWarps);
    }
    queue.init_barriers();
    fence_barrier_init();
  }
  __syncthreads();  // barriers are initialised before anyone waits on or copies into them

  if (warpgroup == 0) {
    if constexpr (Traits::kReallocateRegisters) {
      lower_register_limit<Traits::kProducerRegisters>();
    }
    PipelineState<Traits::kStages> state;
    typename WorkQueue<Traits>::Position round;
    int64_t next_item = blockIdx.x;  // thread 0's: the item it publishes next
    if (thread == 0) next_item = queue.publish(round, next_item);
    while (true) {
      const int64_t item = queue.take(round, thread % kWarpSize);
      round.advance();
      if (!queue.has(item)) break;
      // One round ahead: the consumers learn the next tile as this one starts.
      if (thread == 0) next_item = queue.publish(round, next_item);
      WgmmaMainloop<Traits>::produce_chunks(storage, params, queue.work(params.attention, item),
                                            thread, state);
    }
  } else {
    if constexpr (Traits::kReallocateRegisters) {
      raise_register_limit<Traits::kConsumerRegisters>();
    }
    consume_tiles<Traits>(storage, params.attention, queue, warpgroup - 1, thread);
  }
}

}  // namespace mmsparse::cuda
