#pragma once
// The wgmma mainloop: a producer thread streams a tile's key chunks (the plan's spans cut into
// chunks of kBlockN keys, any alignment) into a ring of shared-memory stages with tensor copies on
// transaction barriers; consumer warpgroups gather their query rows once and, per chunk, issue
// S = Q·K^T (both operands in shared memory) and O += P·V (P in registers) as asynchronous wgmma
// groups, which the kernel overlaps with the softmax.
//
// Chunks that start near kv_len copy a full box anyway: the rows past kv_len arrive as zeros, the
// rows past the chunk's end as the next keys, and both are masked out of S like any partial chunk.

#include <cstdint>

#include "cuda/attention_params.cuh"
#include "cuda/attention_traits.cuh"
#include "cuda/key_chunks.cuh"
#include "cuda/ptx_primitives.cuh"
#include "cuda/wgmma_params.cuh"
#include "cuda/wgmma_primitives.cuh"
#include "cuda/wgmma_traits.cuh"

namespace mmsparse::cuda {

template <class Traits>
class WgmmaMainloop {
 public:
  using Element = typename Traits::Element;
  using Storage = WgmmaSharedStorage<Traits>;
  using Mma = WarpgroupMma<Element>;
  // Probabilities as wgmma A fragments: per k-step of 16 keys, four packed pairs.
  using Probabilities = uint32_t[Traits::kKeySteps][4];

  // --- Producer (one thread) --------------------------------------------------------------------

  // Copies every chunk of the tile, waiting for each stage to be released before refilling it.
  __device__ static void produce_chunks(Storage& storage, const WgmmaAttentionParams& params,
                                        const TileWork& work) {
    KeyChunkCursor<Traits::kBlockN> cursor(work.tile, params.attention.plan.spans);
    if (!cursor.done()) {  // a tile without keys copies nothing, and its maps may be unset
      prefetch_tensor_map(&params.keys);
      prefetch_tensor_map(&params.values);
    }
    PipelineState<Traits::kStages> state;
    while (!cursor.done()) {
      const KeyChunk chunk = cursor.next();
      // A fresh barrier counts as released in the phase before its first: the first pass over
      // the ring does not wait.
      barrier_wait(shared_address(&storage.chunk_consumed[state.stage]), state.phase ^ 1u);
      const uint32_t loaded = shared_address(&storage.chunk_loaded[state.stage]);
      barrier_arrive_expect_bytes(loaded, 2 * Traits::kChunkBytes);
      const uint32_t keys = shared_address(storage.keys[state.stage]);
      const uint32_t values = shared_address(storage.values[state.stage]);
      const auto row = static_cast<int32_t>(chunk.first);
#pragma unroll
      for (int block = 0; block < Traits::kColumnBlocks; ++block) {
        const int32_t column = block * Traits::kAtomElements;
        const uint32_t offset = block * Traits::kChunkBlockBytes;
        copy_tensor_4d(keys + offset, &params.keys, column, work.kv_head, row, work.batch, loaded);
        copy_tensor_4d(values + offset, &params.values, column, work.kv_head, row, work.batch,
                       loaded);
      }
      state.advance();
    }
  }

  // --- Consumers (one warpgroup each) -----------------------------------------------------------

  // Gathers the warpgroup's 64 query rows (storage.row_positions) into its rows of the query tile,
  // zero-filling rows beyond the tile, and makes them visible to wgmma. The caller then
  // synchronises the warpgroup.
  __device__ static void load_query(Storage& storage, const AttentionParams& params,
                                    const TileWork& work, int warpgroup, int thread) {
    const Element* query = static_cast<const Element*>(params.q.data) +
                           work.batch * params.q.batch_stride + work.head * params.q.head_stride;
    const uint32_t tile = shared_address(storage.query);
#pragma unroll
    for (int i = 0; i < Traits::kRowVectorsPerThread; ++i) {
      const int index = thread + i * kWarpgroupThreads;
      const int row = warpgroup * Traits::kWarpgroupRows + index / Traits::kVectorsPerRow;
      const int vector = index % Traits::kVectorsPerRow;
      const int32_t position = storage.row_positions[row];
      const bool valid = position != kNoRow;
      const Element* source =
          query + (valid ? position * params.q.row_stride : 0) + vector * Traits::kVectorElements;
      copy_async_16(tile + Traits::swizzled_vector_offset(Traits::kBlockM, row, vector), source,
                    valid);
    }
    commit_async_copies();
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
    pin_accumulators(scores);
    warpgroup_fence();
#pragma unroll
    for (int step = 0; step < Traits::kHeadDimSteps; ++step) {
      // K-steps inside an atom advance the start address; the hardware applies the swizzle to
      // the resulting addresses, so the atoms must be 1024-byte aligned.
      const int block = step / Traits::kStepsPerAtom;
      const uint32_t within = step % Traits::kStepsPerAtom * Traits::kStepBytes;
      const uint64_t a = matrix_descriptor(query + block * Traits::kQueryBlockBytes + within,
                                           kCopyBytes, kSwizzleAtomBytes);
      const uint64_t b = matrix_descriptor(keys + block * Traits::kChunkBlockBytes + within,
                                           kCopyBytes, kSwizzleAtomBytes);
      Mma::scores(scores, a, b, step > 0);
    }
    warpgroup_commit();
  }

  // Issues output += P·V as one wgmma group. V is read MN-major (its rows are keys, its columns
  // the output's): one wgmma per 64-column block and k-step of 16 keys. Until a wait covers the
  // group, neither the output nor the probabilities may be touched; pin both after it (the
  // probabilities are read from registers while the group runs).
  __device__ static void issue_output(Storage& storage, int stage, Probabilities& probabilities,
                                      float (&output)[Traits::kOutputTiles][4]) {
    const uint32_t values = shared_address(storage.values[stage]);
    pin_accumulators(output);
    pin_fragments(probabilities);
    warpgroup_fence();
#pragma unroll
    for (int step = 0; step < Traits::kKeySteps; ++step) {
#pragma unroll
      for (int block = 0; block < Traits::kColumnBlocks; ++block) {
        // One 64-column block per wgmma: only the 8-key-group stride matters, and both offset
        // fields carry it.
        const uint64_t b = matrix_descriptor(
            values + block * Traits::kChunkBlockBytes + step * Traits::kMmaK * kSwizzleBytes,
            kSwizzleAtomBytes, kSwizzleAtomBytes);
        Mma::output(&output[block * Traits::kOutputMmaTiles], probabilities[step], b);
      }
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
