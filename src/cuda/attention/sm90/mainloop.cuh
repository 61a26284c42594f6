#pragma once
// The wgmma mainloop: a producer warpgroup streams a tile's key chunks (the plan's spans cut into
// chunks of kBlockN keys, any alignment, and its lattices, as tensor copies on transaction
// barriers; then its gathered columns kBlockN at a time, as cp.async row gathers into the same
// swizzled layout) into
// a ring of shared-memory stages; consumer warpgroups gather their query rows once and, per chunk,
// issue S = Q·K^T (both operands in shared memory) and O += P·V (P in registers) as asynchronous
// wgmma groups, which the kernel overlaps with the softmax.
//
// Chunks that start near kv_len copy a full box anyway: the rows past kv_len arrive as zeros, the
// rows past the chunk's end as the next keys, and both are masked out of S like any partial chunk.

#include <cstdint>
#include <cuda/std/limits>

#include "cuda/attention/key_chunks.cuh"
#include "cuda/attention/params.cuh"
#include "cuda/attention/sm80/ptx.cuh"
#include "cuda/attention/sm80/traits.cuh"
#include "cuda/attention/sm90/params.cuh"
#include "cuda/attention/sm90/ptx.cuh"
#include "cuda/attention/sm90/traits.cuh"

namespace mmsparse::cuda {

template <class Traits>
class WgmmaMainloop {
 public:
  using Element = typename Traits::Element;
  using Storage = WgmmaSharedStorage<Traits>;
  using ScoreMma = WgmmaScores<Element, Traits::kBlockN>;
  using OutputMma = WgmmaOutput<Element, Traits::kHeadDim>;
  // Probabilities as wgmma A fragments: per k-step of 16 keys, four packed pairs.
  using Probabilities = uint32_t[Traits::kKeySteps][4];

  // --- Producer (one warpgroup) -----------------------------------------------------------------

  // Copies every chunk of the tile, waiting for each stage to be released before refilling it.
  // Span chunks are tensor copies issued by thread 0; strided and column chunks are gathered row by
  // row by the whole warpgroup. Every loading thread (Traits::kLoadingThreads) arrives once per
  // chunk (thread 0 for all of them at a copied chunk), so the stage completes when both the
  // arrivals and the tensor copies' bytes are in.
  // With gathers, only the first warp waits for every stage: the other warps, which have nothing
  // to do for a copied chunk, pass it without waiting and block at a gathered chunk on a hardware
  // barrier (WgmmaBarrier::kProducerGather, no instructions issued while blocked), which the first
  // warp joins once the stage is free. Spinning on the stages' barriers, they took issue slots
  // from the consumer warps on their schedulers.
  // `state`: the stage ring's position at the tile's first chunk; returns it after the last (a
  // persistent CTA carries it from tile to tile).
  __device__ static PipelineState<Traits::kStages> produce_chunks(
      Storage& storage, const WgmmaAttentionParams& params, const TileWork& work, int thread,
      PipelineState<Traits::kStages> state) {
    // Without gathers thread 0 loads alone; the others would only wait on the stages.
    if (!Traits::kGathers && thread != 0) return state;
    // Broadcast from lane 0, so that ptxas sees it warp-uniform: it then keeps the stages'
    // addresses in uniform registers, and the loop fits the producer's registers without spilling.
    const bool waits_every_stage =
        !Traits::kGathers || __shfl_sync(kFullWarpMask, thread / kWarpSize, 0) == 0;
    KeyChunkCursor<Traits::kBlockN, Traits::kLattices, Traits::kGathers> cursor(
        work.tile, work.first_range, params.attention.plan.spans,
        params.attention.plan.span_shifts);
    // A tile without keys copies nothing, and its maps may be unset.
    if (thread == 0 && work.tile.span_begin < work.tile.span_end) {
      prefetch_tensor_map(&params.keys);
      prefetch_tensor_map(&params.values);
      if (params.attention.plan.span_shifts != nullptr) {
        prefetch_tensor_map(&params.ordered_keys);
        prefetch_tensor_map(&params.ordered_values);
      }
      if constexpr (Traits::kLattices) {
        prefetch_tensor_map(&params.lattice_keys);
        prefetch_tensor_map(&params.lattice_values);
      }
    }
    while (!cursor.done()) {
      const KeyChunk chunk = cursor.next();
      const bool gathered = Traits::kGathers && chunk.gathered();
      // Before the wait, so that the column list's latency overlaps it.
      const int32_t lookup_key = gathered ? lookup_column(params.attention, chunk, thread) : 0;
      // A fresh barrier counts as released in the phase before its first: the first pass over
      // the ring does not wait.
      const uint32_t consumed = shared_address(&storage.chunk_consumed[state.stage]);
      if (waits_every_stage) barrier_wait(consumed, state.phase ^ 1u);
      const uint32_t loaded = shared_address(&storage.chunk_loaded[state.stage]);
      const uint32_t keys = shared_address(storage.keys[state.stage]);
      const uint32_t values = shared_address(storage.values[state.stage]);
      if (gathered) {
        await_gather(consumed, state.phase ^ 1u, waits_every_stage);
        gather_columns(params.attention, work, chunk, lookup_key, keys, values, thread);
        if (stage_key_bounds(storage, state.stage, chunk, lookup_key, thread)) {
          barrier_arrive_releasing_after_async_copies(loaded);
        } else {
          barrier_arrive_after_async_copies(loaded);
        }
      } else if (thread == 0 && chunk.lattice()) {
        copy_lattice_chunk(params, work, chunk, keys, values, loaded);
      } else if (thread == 0) {
        copy_span_chunk(params, work, chunk, keys, values, loaded);
      }
      state.advance();
    }
    return state;
  }

  // Every producer thread at a gathered chunk, the first warp after its wait for the stage
  // (`consumed`, the phase of parity `released` completing): the other warps block on the
  // hardware barrier until the first warp joins, then take the stage's release themselves, which
  // succeeds at once and orders the consumers' reads of the stage before this thread's writes by
  // the mbarrier itself, as for the first warp. The phase they test is the one the first warp
  // saw complete: the next cannot complete before this chunk is loaded, which needs these warps'
  // arrivals. Every producer warp syncs (none only arrives), so no warp reaches the barrier for
  // the next gathered chunk before all have reached it for this one: its generations pair with
  // the gathered chunks.
  __device__ static void await_gather(uint32_t consumed, uint32_t released, bool waited_for_stage) {
    named_barrier_sync(static_cast<int>(WgmmaBarrier::kProducerGather), Traits::kProducerThreads);
    if (!waited_for_stage) barrier_wait(consumed, released);
  }

  // Thread 0's arrival at a copied chunk, announcing the bytes, and (with gathers) the other
  // loading threads' arrivals, which pass the chunk without waiting for its stage.
  __device__ static void arrive_for_copy(uint32_t loaded) {
    barrier_arrive_expect_bytes(loaded, 2 * Traits::kChunkBytes);
    if constexpr (Traits::kLoadingThreads > 1) {
      barrier_arrive_for(loaded, Traits::kLoadingThreads - 1);
    }
  }

  // Thread 0's share of a span chunk: its arrival, announcing the bytes, and the tensor copies
  // (from K and V in key-order layout for a key-ordered span's chunk).
  __device__ static void copy_span_chunk(const WgmmaAttentionParams& params, const TileWork& work,
                                         const KeyChunk& chunk, uint32_t keys, uint32_t values,
                                         uint32_t loaded) {
    arrive_for_copy(loaded);
    const auto row = static_cast<int32_t>(chunk.first);
    const CUtensorMap* key_map = chunk.reads_copy ? &params.ordered_keys : &params.keys;
    const CUtensorMap* value_map = chunk.reads_copy ? &params.ordered_values : &params.values;
#pragma unroll
    for (int block = 0; block < Traits::kColumnBlocks; ++block) {
      const int32_t column = block * Traits::kAtomElements;
      const uint32_t offset = block * Traits::kChunkBlockBytes;
      copy_tensor_4d(keys + offset, key_map, column, work.kv_head, row, work.batch, loaded);
      copy_tensor_4d(values + offset, value_map, column, work.kv_head, row, work.batch, loaded);
    }
  }

  // A lattice chunk as one box per column block of the 5-D views (kBlockN / kLatticeWidth periods
  // of kLatticeWidth keys), whose rows land as a span chunk's would. The box is whole even for a
  // lattice's last, partial chunk: the periods past the lattice land as the next keys, or as zeros
  // past the view's last whole period, and are masked out like any partial chunk's slots.
  __device__ static void copy_lattice_chunk(const WgmmaAttentionParams& params,
                                            const TileWork& work, const KeyChunk& chunk,
                                            uint32_t keys, uint32_t values, uint32_t loaded) {
    arrive_for_copy(loaded);
    const auto first = static_cast<int32_t>(chunk.first);
    const int32_t period = first / chunk.step;
    const int32_t row = first - period * chunk.step;
#pragma unroll
    for (int block = 0; block < Traits::kColumnBlocks; ++block) {
      const int32_t column = block * Traits::kAtomElements;
      const uint32_t offset = block * Traits::kChunkBlockBytes;
      copy_tensor_5d(keys + offset, &params.lattice_keys, column, work.kv_head, row, period,
                     work.batch, loaded);
      copy_tensor_5d(values + offset, &params.lattice_values, column, work.kv_head, row, period,
                     work.batch, loaded);
    }
  }

  // Column gathers look up the column list once per thread, not once per pass: each lane reads
  // the key of one of the rows its warp copies, and every pass takes its rows' keys from the
  // lanes that hold them. Lane l holds the row of pass l / kGatherRowsPerWarp (none past the last
  // pass: at head_dim 256 a chunk's 64 rows take half the lanes).
  __device__ static int gather_slot(int pass, int warp, int row_in_warp) {
    return pass * Traits::kGatherRowsPerPass + warp * Traits::kGatherRowsPerWarp + row_in_warp;
  }

  // The slot whose key this thread looks up (kBlockN or more for none).
  __device__ static int lookup_slot(int thread) {
    const int lane = thread % kWarpSize;
    return gather_slot(lane / Traits::kGatherRowsPerWarp, thread / kWarpSize,
                       lane % Traits::kGatherRowsPerWarp);
  }

  // This thread's key of a gathered chunk (0 past the chunk's keys): read from the column list,
  // or a strided chunk's by arithmetic.
  __device__ static int32_t lookup_column(const AttentionParams& params, const KeyChunk& chunk,
                                          int thread) {
    const int slot = lookup_slot(thread);
    if (slot >= chunk.count) return 0;
    return chunk.from_columns() ? __ldg(params.plan.columns + chunk.first + slot)
                                : static_cast<int32_t>(chunk.first) + slot * chunk.step;
  }

  // The bounds of the keys this thread's warp looked up for a gathered chunk, written into the
  // stage's Storage::chunk_key_lowest / chunk_key_highest by lane 0 once the stage is free (the
  // consumers classify the chunk from them instead of loading its keys). Whole warps; true for
  // the thread that wrote them, whose arrival must then release them.
  __device__ static bool stage_key_bounds(Storage& storage, int stage, const KeyChunk& chunk,
                                          int32_t lookup_key, int thread) {
    constexpr int32_t kMaxInt = ::cuda::std::numeric_limits<int32_t>::max();
    constexpr int32_t kMinInt = ::cuda::std::numeric_limits<int32_t>::min();
    const bool valid = lookup_slot(thread) < chunk.count;
    const int32_t lowest = __reduce_min_sync(kFullWarpMask, valid ? lookup_key : kMaxInt);
    const int32_t highest = __reduce_max_sync(kFullWarpMask, valid ? lookup_key : kMinInt);
    if (thread % kWarpSize != 0) return false;
    storage.chunk_key_lowest[stage][thread / kWarpSize] = lowest;
    storage.chunk_key_highest[stage][thread / kWarpSize] = highest;
    return true;
  }

  // This thread's share of a gathered chunk: in each pass, one key row of its warp's
  // kGatherRowsPerWarp, and in it the thread's 16-byte vector of every column block, of K and of
  // V, written where the tensor copies' 128-byte swizzle would put it. Slots past the chunk's keys
  // are zero-filled (and masked out of S by the consumers).
  __device__ static void gather_columns(const AttentionParams& params, const TileWork& work,
                                        const KeyChunk& chunk, int32_t lookup_key, uint32_t keys,
                                        uint32_t values, int thread) {
    const int lane = thread % kWarpSize;
    const int row_in_warp = lane / Traits::kGatherLanesPerRow;
    const int vector = lane % Traits::kGatherLanesPerRow;  // within each column block
    const int64_t key_offset = work.batch * params.k.batch_stride +
                               work.kv_head * params.k.head_stride +
                               vector * Traits::kVectorElements;
    const int64_t value_offset = work.batch * params.v.batch_stride +
                                 work.kv_head * params.v.head_stride +
                                 vector * Traits::kVectorElements;
    const Element* key_base = static_cast<const Element*>(params.k.data) + key_offset;
    const Element* value_base = static_cast<const Element*>(params.v.data) + value_offset;
    // Passes step by whole swizzle atoms, so the thread's vector keeps its swizzled place.
    const int first_slot = gather_slot(0, thread / kWarpSize, row_in_warp);
    const uint32_t first_offset =
        Traits::swizzled_vector_offset(Traits::kBlockN, first_slot, vector);
    // Rolled: the producer runs on kProducerRegisters when the consumers take the rest.
#pragma unroll 1
    for (int pass = 0; pass < Traits::kGatherPasses; ++pass) {
      const int slot = first_slot + pass * Traits::kGatherRowsPerPass;
      const bool valid = slot < chunk.count;
      const int64_t key =
          __shfl_sync(kFullWarpMask, lookup_key, pass * Traits::kGatherRowsPerWarp + row_in_warp);
      const Element* key_row = key_base + key * params.k.row_stride;
      const Element* value_row = value_base + key * params.v.row_stride;
      const uint32_t offset =
          first_offset + static_cast<uint32_t>(pass * Traits::kGatherRowsPerPass * kSwizzleBytes);
#pragma unroll
      for (int block = 0; block < Traits::kColumnBlocks; ++block) {
        const uint32_t block_offset = offset + block * Traits::kChunkBlockBytes;
        copy_async_16(keys + block_offset, key_row + block * Traits::kAtomElements, valid);
        copy_async_16(values + block_offset, value_row + block * Traits::kAtomElements, valid);
      }
    }
  }

  // --- Consumers (one warpgroup each) -----------------------------------------------------------

  // Starts gathering the warpgroup's 64 query rows (storage.row_positions) into its rows of the
  // query tile, zero-filling rows beyond the tile; complete_query_load() waits for them.
  __device__ static void start_query_load(Storage& storage, const AttentionParams& params,
                                          const TileWork& work, int warpgroup, int thread) {
    const Element* query = static_cast<const Element*>(params.q.data) +
                           work.batch * params.q.batch_stride + work.head * params.q.head_stride;
    const uint32_t tile = shared_address(storage.query);
#pragma unroll
    for (int i = 0; i < Traits::kRowVectorsPerThread; ++i) {
      // The thread's vector is the same in every pass, its rows kRowsPerVectorPass apart.
      const int row = warpgroup * Traits::kWarpgroupRows + thread / Traits::kVectorsPerRow +
                      i * Traits::kRowsPerVectorPass;
      const int vector = thread % Traits::kVectorsPerRow;
      const int32_t position = storage.row_positions[row];
      const bool valid = position != kNoRow;
      const Element* source =
          query + (valid ? position * params.q.row_stride : 0) + vector * Traits::kVectorElements;
      copy_async_16(tile + Traits::swizzled_vector_offset(Traits::kBlockM, row, vector), source,
                    valid);
    }
    commit_async_copies();
  }

  // Waits for this thread's query copies and makes them visible to wgmma. The caller then
  // synchronises the warpgroup.
  __device__ static void complete_query_load() {
    wait_all_async_copies();
    fence_proxy_async();  // the rows were written by the generic proxy; wgmma reads them
  }

  // Issues scores = Q·K^T for the warpgroup's 64 rows and the chunk's kBlockN keys (raw dot
  // products) as one wgmma group. The scores are valid once warpgroup_wait has covered the group
  // and pin_accumulators has ordered their reads after it.
  __device__ static void issue_scores(Storage& storage, int stage, int warpgroup,
                                      float (&scores)[Traits::kScoreTiles][4]) {
    const uint32_t query =
        shared_address(storage.query) + warpgroup * Traits::kWarpgroupRows * kSwizzleBytes;
    const uint32_t keys = shared_address(storage.keys[stage]);
    const uint64_t query_descriptor = matrix_descriptor(query, kCopyBytes, kSwizzleAtomBytes);
    const uint64_t key_descriptor = matrix_descriptor(keys, kCopyBytes, kSwizzleAtomBytes);
    pin_accumulators(scores);
    warpgroup_fence();
#pragma unroll
    for (int step = 0; step < Traits::kHeadDimSteps; ++step) {
      // K-steps inside an atom advance the start address; the hardware applies the swizzle to
      // the resulting addresses, so the atoms must be 1024-byte aligned.
      const int block = step / Traits::kStepsPerAtom;
      const uint32_t within = step % Traits::kStepsPerAtom * Traits::kStepBytes;
      const uint64_t a =
          advance_descriptor(query_descriptor, block * Traits::kQueryBlockBytes + within);
      const uint64_t b =
          advance_descriptor(key_descriptor, block * Traits::kChunkBlockBytes + within);
      ScoreMma::run(scores, a, b, step > 0);
    }
    warpgroup_commit();
  }

  // Issues output += P·V as one wgmma group. V is read MN-major (its rows are keys, its columns
  // the output's): one wgmma per k-step of 16 keys spans every 64-column block of V (2 at head_dim
  // 128, 4 at 256), the descriptor's leading offset stepping from one block to the next, so that
  // P's fragments go to the tensor cores once per k-step. Until a wait covers the group, neither
  // the output nor the probabilities may be touched; pin both after it (the probabilities are read
  // from registers while the group runs).
  __device__ static void issue_output(Storage& storage, int stage, Probabilities& probabilities,
                                      float (&output)[Traits::kOutputTiles][4]) {
    static_assert(Traits::kOutputTiles == OutputMma::kTiles, "one wgmma covers the output row");
    const uint64_t value_descriptor = matrix_descriptor(
        shared_address(storage.values[stage]), Traits::kChunkBlockBytes, kSwizzleAtomBytes);
    pin_accumulators(output);
    pin_fragments(probabilities);
    warpgroup_fence();
#pragma unroll
    for (int step = 0; step < Traits::kKeySteps; ++step) {
      const uint64_t b = advance_descriptor(value_descriptor, step * Traits::kMmaK * kSwizzleBytes);
      OutputMma::run(output, probabilities[step], b);
    }
    warpgroup_commit();
  }

  // Keeps the probabilities in their registers up to this point: after the wait that covers the
  // output group reading them, so that nothing reuses those registers while it runs.
  __device__ static void pin_fragments(Probabilities& probabilities) {
#pragma unroll
    for (int step = 0; step < Traits::kKeySteps; ++step) {
#pragma unroll
      for (int e = 0; e < 4; ++e) asm volatile("" : "+r"(probabilities[step][e])::"memory");
    }
  }

  // The probabilities of a score chunk as A fragments: score tiles 2s and 2s+1 hold exactly the
  // 16 keys of k-step s in the m64k16 A layout.
  __device__ static void pack_probabilities(const float (&scores)[Traits::kScoreTiles][4],
                                            Probabilities& probabilities) {
#pragma unroll
    for (int step = 0; step < Traits::kKeySteps; ++step) {
      probabilities[step][0] = TensorCore<Element>::pack(scores[2 * step][0], scores[2 * step][1]);
      probabilities[step][1] = TensorCore<Element>::pack(scores[2 * step][2], scores[2 * step][3]);
      probabilities[step][2] =
          TensorCore<Element>::pack(scores[2 * step + 1][0], scores[2 * step + 1][1]);
      probabilities[step][3] =
          TensorCore<Element>::pack(scores[2 * step + 1][2], scores[2 * step + 1][3]);
    }
  }
};

}  // namespace mmsparse::cuda
