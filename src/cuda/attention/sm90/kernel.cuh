#pragma once
// The plan-driven attention kernel on wgmma (sm_90a), for plans of spans, gathered columns and
// lattices under positional masks, and of spans and gathered columns under masks that read tokens
// (Traits::kTokens): one CTA per (plan tile, batch element), warp-specialised. Warpgroup 0 is the
// producer (one thread issues the tensor copies of span chunks, all of it gathers column chunks;
// most of its registers go to the consumers); warpgroups 1.. are consumers of 64 query rows each,
// which skip, compute unmasked or compute masked each chunk and release its stage.

#include "cuda/attention/key_chunks.cuh"
#include "cuda/attention/params.cuh"
#include "cuda/attention/query_rows.cuh"
#include "cuda/attention/resume.cuh"
#include "cuda/attention/sm80/mask.cuh"
#include "cuda/attention/sm90/epilogue.cuh"
#include "cuda/attention/sm90/mainloop.cuh"
#include "cuda/attention/sm90/mask.cuh"
#include "cuda/attention/sm90/params.cuh"
#include "cuda/attention/sm90/ptx.cuh"
#include "cuda/attention/sm90/traits.cuh"
#include "cuda/attention/softmax.cuh"
#include "cuda/runtime/plan_view.cuh"

namespace mmsparse::cuda {

// Ping-pong between two consumer warpgroups (FlashAttention-3's schedule): a warpgroup issues its
// wgmma groups only in its turn and passes the turn on right after issuing, so that the tensor
// cores run one warpgroup's products while the other computes its softmax. Both warpgroups take
// one turn per chunk of the tile plus one for the final P·V, so the turns pair up exactly. With one
// consumer warpgroup every call is a no-op. A persistent CTA keeps the alternation across its
// tiles: the second warpgroup's last turn of a tile hands the first its first turn of the next, so
// only the first tile starts with the hand-over and only the last one finishes.
template <class Traits>
class IssueTurns {
 public:
  static constexpr bool kEnabled = Traits::kConsumerWarpgroups == 2;
  static constexpr int kThreads = 2 * kWarpgroupThreads;  // both warpgroups meet at each barrier

  __device__ IssueTurns(int warpgroup, bool hand_first_turn) : warpgroup_(warpgroup) {
    // The second warpgroup hands the first its first turn.
    if (kEnabled && hand_first_turn && warpgroup_ == 1) {
      named_barrier_arrive(barrier(0), kThreads);
    }
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

// The software pipeline's state between chunks: chunk j's Q·K^T runs while chunk j-1's P·V is
// issued, and chunk j's softmax runs while that P·V completes, so one chunk's probabilities wait
// for their P·V. A chunk's stage is released once its P·V has completed (every wgmma of this warp
// that read the stage). The corrections, factors that take the output to the newest chunk's
// maxima, are applied as soon as no P·V is in flight, so that the output is always at the pending
// chunk's maxima when its P·V is issued. The probabilities and corrections stay local arrays of
// consume_tile, and the P·V flush and the fold of the scores stay lambdas there: with the arrays
// in this struct, or either lambda a function, nvcc numbers the loop's values differently and
// ptxas allocates other uniform registers (in the dense two-warpgroup kernel it also rebuilds the
// final P·V's descriptors per wgmma); as it is, every wgmma kernel keeps the SASS it was measured
// with.
struct PendingChunk {
  bool pending = false;  // the probabilities hold a chunk whose P·V is not yet issued
  int stage = 0;         // the stage that chunk holds
};

template <class Traits>
__device__ __forceinline__ void release_stage(WgmmaSharedStorage<Traits>& storage, int stage,
                                              int lane) {
  if (lane == 0) barrier_arrive(shared_address(&storage.chunk_consumed[stage]));
}

// Waits for `chunk`'s stage (the current one of `state`, which moves on) and classifies it.
// `flush_pending` issues and completes the pending chunk's P·V.
template <class Traits, class FlushPending>
__device__ __forceinline__ ChunkCoverage await_chunk(WgmmaSharedStorage<Traits>& storage,
                                                     int warpgroup, int lane, const KeyChunk& chunk,
                                                     PipelineState<Traits::kStages>& state,
                                                     WarpgroupMask<Traits>& mask,
                                                     const PendingChunk& pending,
                                                     const FlushPending& flush_pending) {
  const int stage = state.stage;
  // After skipped chunks the ring can come round to the stage the pending chunk still holds; the
  // producer refills it only once it is released. Out of turn, like the wait for the chunk: a
  // warpgroup holding the turn never waits on the other's progress.
  if (pending.pending && stage == pending.stage) flush_pending();
  barrier_wait(shared_address(&storage.chunk_loaded[stage]), state.phase);
  state.advance();
  // Gathered rows were written by cp.async (the generic proxy); wgmma reads them.
  if constexpr (Traits::kGathers) {
    if (chunk.gathered()) fence_proxy_async();
  }
  // Uniform over the warpgroup by construction; broadcasting it lets the compiler see that the
  // branches below do not diverge.
  return static_cast<ChunkCoverage>(__shfl_sync(
      kFullWarpMask, static_cast<int>(mask.classify(storage, warpgroup, stage, chunk, lane)), 0));
}

// After the last chunk: the pending chunk's P·V, issued in the warpgroup's turn.
template <class Traits>
__device__ __forceinline__ void drain_pending(
    WgmmaSharedStorage<Traits>& storage, int lane, const IssueTurns<Traits>& turns,
    const PendingChunk& pending, typename WgmmaMainloop<Traits>::Probabilities& probabilities,
    float (&output)[Traits::kOutputTiles][4]) {
  turns.wait();
  if (pending.pending) {
    WgmmaMainloop<Traits>::issue_output(storage, pending.stage, probabilities, output);
    turns.pass();
    warpgroup_wait<0>();
    pin_accumulators(output);
    WgmmaMainloop<Traits>::pin_fragments(probabilities);
    release_stage(storage, pending.stage, lane);
  } else {
    turns.pass();
  }
}

// The warpgroup's rows before their first chunk: their original positions (one thread per row,
// whole warps; unless `rows_in_place`: a persistent CTA's producer looked them up ahead), then the
// copies of their query rows and, beside them, their resumed state.
template <class Traits>
__device__ __forceinline__ void start_rows(WgmmaSharedStorage<Traits>& storage,
                                           const AttentionParams& params, const TileWork& work,
                                           int warpgroup, int thread, bool rows_in_place,
                                           OnlineSoftmax<Traits>& softmax,
                                           float (&output)[Traits::kOutputTiles][4]) {
  static_assert(Traits::kWarpgroupRows % kWarpSize == 0, "rows are looked up a warp at a time");
  const int lane = thread % kWarpSize;
  const int consumer_warp = warpgroup * kWarpgroupWarps + thread / kWarpSize;
  const int barrier = static_cast<int>(WgmmaBarrier::kFirstConsumerWarpgroup) + warpgroup;
  int32_t* rows = storage.row_positions + warpgroup * Traits::kWarpgroupRows;
  if (!rows_in_place && thread < Traits::kWarpgroupRows) {
    rows[thread] = tile_row_position(params.plan, work.tile, work.rows,
                                     warpgroup * Traits::kWarpgroupRows + thread, params.q_len);
  }
  // Positions steer the loads and masks.
  named_barrier_sync(barrier, kWarpgroupThreads);
  WgmmaMainloop<Traits>::start_query_load(storage, params, work, warpgroup, thread);
  // The resumed rows' loads wait beside the query's copies, not after them.
  if (params.accumulate) {
    resume_rows<Traits>(params, work, rows + consumer_warp % kWarpgroupWarps * Traits::kRowsPerWarp,
                        lane, softmax, output);
  }
}

// One consumer warpgroup's 64 rows of the tile: their query rows, resumed state and mask bounds,
// then every chunk through the pipeline, then the epilogue. `lattice_step`: the step of the plan's
// lattice records (0 without any). `state`: the stage ring's position at the tile's first chunk,
// returned after its last (a persistent CTA carries it from tile to tile); `first_tile` /
// `last_tile`: where the tile lies in the CTA's sequence (IssueTurns), both true for a CTA of one
// tile. `rows_in_place`: the warpgroup's row positions are in storage.row_positions already (a
// persistent CTA's producer looks them up for the next tile), else looked up here. Each wgmma group
// is waited for on the path that issued it: the compiler serialises every wgmma when a group may
// still run where two paths merge. With a chunk pending, ptxas schedules the wait for its P·V
// ahead of the softmax (the softmax then starts once the P·V has completed).
// Keeping it after needs a branch around it, and wgmma.wait_group is .aligned: only a
// warpgroup-wide decision is legal, and its barrier cost more than the overlap gained
// (docs/history/perf-notes.md, v16 to v19).
template <class Traits>
__device__ PipelineState<Traits::kStages> consume_tile(
    WgmmaSharedStorage<Traits>& storage, const AttentionParams& params, int32_t lattice_step,
    const TileWork& work, int warpgroup, int thread, PipelineState<Traits::kStages> state,
    bool first_tile, bool last_tile, bool rows_in_place) {
  using Mainloop = WgmmaMainloop<Traits>;
  using Softmax = OnlineSoftmax<Traits>;
  const int lane = thread % kWarpSize;
  const int consumer_warp = warpgroup * kWarpgroupWarps + thread / kWarpSize;
  const int barrier = static_cast<int>(WgmmaBarrier::kFirstConsumerWarpgroup) + warpgroup;
  int32_t* rows = storage.row_positions + warpgroup * Traits::kWarpgroupRows;

  Softmax softmax(params.scale_log2);
  float output[Traits::kOutputTiles][4] = {};
  start_rows(storage, params, work, warpgroup, thread, rows_in_place, softmax, output);
  // The rows' bounds (shared memory only) are found while the query copies are in flight.
  WarpgroupMask<Traits> mask(work, rows, params.plan.columns, params.plan.token_info, lattice_step,
                             storage, consumer_warp, lane);
  Mainloop::complete_query_load();
  named_barrier_sync(barrier, kWarpgroupThreads);  // query rows and warp bounds are in place
  mask.gather_bounds(storage, warpgroup);

  // The software pipeline over the chunks (PendingChunk says how the products overlap).
  typename Mainloop::Probabilities probabilities;
  float corrections[Softmax::kRowsPerThread] = {};  // to the newest chunk's maxima
  PendingChunk pending;
  const auto flush_pending = [&] {
    Mainloop::issue_output(storage, pending.stage, probabilities, output);
    warpgroup_wait<0>();
    pin_accumulators(output);
    Mainloop::pin_fragments(probabilities);
    release_stage(storage, pending.stage, lane);
    pending.pending = false;
  };
  IssueTurns<Traits> turns(warpgroup, first_tile);
  KeyChunkCursor<Traits::kBlockN, Traits::kLattices, Traits::kGathers> cursor(
      work.tile, work.first_range, params.plan.spans, params.plan.span_shifts);
  while (!cursor.done()) {
    const KeyChunk chunk = cursor.next();
    const int stage = state.stage;
    const ChunkCoverage coverage =
        await_chunk(storage, warpgroup, lane, chunk, state, mask, pending, flush_pending);
    turns.wait();
    if (coverage == ChunkCoverage::kNone) {
      turns.pass();
      release_stage(storage, stage, lane);
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
    if (pending.pending) {  // each wgmma group is waited for on the path that issued it
      Mainloop::issue_output(storage, pending.stage, probabilities, output);
      turns.pass();
      warpgroup_wait<1>();  // the scores, the older group
      fold_scores();
      warpgroup_wait<0>();  // the P·V (ptxas moves it ahead of the softmax: see above)
      pin_accumulators(output);
      if (Softmax::moved(corrections)) Softmax::rescale(output, corrections);
      Mainloop::pin_fragments(probabilities);
      release_stage(storage, pending.stage, lane);
    } else {
      turns.pass();
      warpgroup_wait<0>();
      fold_scores();
      if (Softmax::moved(corrections)) Softmax::rescale(output, corrections);
    }
    Mainloop::pack_probabilities(scores, probabilities);
    pending.pending = true;
    pending.stage = stage;
  }
  drain_pending(storage, lane, turns, pending, probabilities, output);
  if (last_tile) turns.finish();

  float lse[Softmax::kRowsPerThread];
  softmax.finish(output, lse);
  WarpgroupEpilogue<Traits>::store(storage, params, work, warpgroup, thread, output, lse);
  return state;
}

template <class Traits>
__global__ void __launch_bounds__(Traits::kThreads, 1)
    wgmma_attention_kernel(const __grid_constant__ WgmmaAttentionParams params) {
  extern __shared__ unsigned char dynamic_shared[];
  WgmmaSharedStorage<Traits>& storage = aligned_wgmma_storage<Traits>(dynamic_shared);
  // Broadcast from lane 0: ptxas then treats the index as warp-uniform and keeps what derives from
  // it (the query tile's wgmma descriptors) in uniform registers, not moved there per wgmma.
  const int warpgroup =
      __shfl_sync(kFullWarpMask, static_cast<int>(threadIdx.x) / kWarpgroupThreads, 0);
  const int thread = static_cast<int>(threadIdx.x) % kWarpgroupThreads;
  const TileWork work = resolve_tile_work(params.attention, static_cast<int32_t>(blockIdx.x),
                                          static_cast<int32_t>(blockIdx.y));

  if (threadIdx.x == 0) {
#pragma unroll
    for (int stage = 0; stage < Traits::kStages; ++stage) {
      barrier_init(shared_address(&storage.chunk_loaded[stage]), Traits::kLoadingThreads);
      barrier_init(shared_address(&storage.chunk_consumed[stage]), Traits::kConsumerWarps);
    }
    fence_barrier_init();
  }
  __syncthreads();  // barriers are initialised before anyone waits on or copies into them

  if (warpgroup == 0) {
    if constexpr (Traits::kReallocateRegisters) {
      lower_register_limit<Traits::kProducerRegisters>();
    }
    WgmmaMainloop<Traits>::produce_chunks(storage, params, work, thread, {});
  } else {
    if constexpr (Traits::kReallocateRegisters) {
      raise_register_limit<Traits::kConsumerRegisters>();
    }
    consume_tile<Traits>(storage, params.attention, params.lattice_step, work, warpgroup - 1,
                         thread, {}, true, true, false);
  }
}

}  // namespace mmsparse::cuda
