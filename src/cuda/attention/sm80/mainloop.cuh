#pragma once
// The mma.sync mainloop: loads (query rows gathered through the plan's order, K/V chunks from spans
// or gathered columns, all with cp.async into swizzled shared tiles) and the two products of one
// chunk, S = Q·K^T and O += P·V, on m16n8k16 tensor cores. Each warp owns 16 query rows.
//
// This is the piece a wgmma/TMA mainloop replaces; the kernel only relies on load_query,
// load_chunk, load_query_fragments, compute_scores and accumulate_output.

#include <cstdint>

#include "cuda/attention/key_chunks.cuh"
#include "cuda/attention/params.cuh"
#include "cuda/attention/sm80/ptx.cuh"
#include "cuda/attention/sm80/traits.cuh"

namespace mmsparse::cuda {

template <class Traits>
class MmaSyncMainloop {
 public:
  using Element = typename Traits::Element;
  using Storage = SharedStorage<Traits>;
  static constexpr int kMatrixRows = 8;  // rows (and 16-byte columns) of one ldmatrix 8×8 matrix
  // 16-byte vectors spanned by one MMA k-step (16 dims).
  static constexpr int kVectorsPerStep = Traits::kMmaK / Traits::kVectorElements;
  static constexpr int kRowsPerPair = 2 * Traits::kMmaN;  // keys of two adjacent 8-key tiles

  // Binds the CTA's head pointers. `token_info` is null unless the tile's mask reads tokens.
  __device__ MmaSyncMainloop(Storage& storage, const AttentionParams& params, const TileWork& work)
      : storage_(storage),
        query_(head_rows(params.q, work.batch, work.head)),
        query_row_stride_(params.q.row_stride),
        keys_(head_rows(params.k, work.batch, work.kv_head)),
        key_row_stride_(params.k.row_stride),
        values_(head_rows(params.v, work.batch, work.kv_head)),
        value_row_stride_(params.v.row_stride),
        ordered_keys_(head_rows(params.k_ordered, work.batch, work.kv_head)),
        ordered_values_(head_rows(params.v_ordered, work.batch, work.kv_head)),
        ordered_row_stride_(params.k_ordered.row_stride),
        columns_(params.plan.columns),
        token_info_(work.mask.needs_tokens ? params.plan.token_info : nullptr) {}

  // Gathers the tile's query rows (storage.row_positions) into storage.query; rows beyond the tile
  // are zero-filled. Issues cp.async only; the caller commits.
  __device__ void load_query() {
    const int first_row = static_cast<int>(threadIdx.x) / Traits::kVectorsPerRow;
    const int vector = static_cast<int>(threadIdx.x) % Traits::kVectorsPerRow;
    const uint32_t destination =
        shared_address(storage_.query) + Traits::swizzled_byte_offset(first_row, vector);
#pragma unroll
    for (int pass = 0; pass < Traits::kQueryLoadIterations; ++pass) {
      const int row = first_row + pass * Traits::kRowsPerPass;
      const int32_t position = storage_.row_positions[row];
      const bool valid = position != kNoRow;
      const Element* source =
          query_ + (valid ? position * query_row_stride_ : 0) + vector * Traits::kVectorElements;
      copy_async_16(destination + pass * Traits::kRowsPerPass * Traits::kRowBytes, source, valid);
    }
  }

  // Issues the loads of one key chunk into `stage`: K and V rows (zero-filled past chunk.count so
  // that masked slots multiply finite values), the key positions, and the keys' tokens when the
  // mask reads them. A key-ordered span's chunk reads the rows of the key-order copy and
  // positions them by its shift (KeyChunk::position_shift). The caller commits.
  __device__ void load_chunk(int stage, const KeyChunk& chunk) {
    const Element* keys = chunk.reads_copy ? ordered_keys_ : keys_;
    const Element* values = chunk.reads_copy ? ordered_values_ : values_;
    const int64_t key_row_stride = chunk.reads_copy ? ordered_row_stride_ : key_row_stride_;
    const int64_t value_row_stride = chunk.reads_copy ? ordered_row_stride_ : value_row_stride_;
    const int first_slot = static_cast<int>(threadIdx.x) / Traits::kVectorsPerRow;
    const int vector = static_cast<int>(threadIdx.x) % Traits::kVectorsPerRow;
    const uint32_t offset = Traits::swizzled_byte_offset(first_slot, vector);
    const uint32_t key_destination = shared_address(storage_.keys[stage]) + offset;
    const uint32_t value_destination = shared_address(storage_.values[stage]) + offset;
    const int column = vector * Traits::kVectorElements;
#pragma unroll
    for (int pass = 0; pass < Traits::kChunkLoadIterations; ++pass) {
      const int slot = first_slot + pass * Traits::kRowsPerPass;
      const bool valid = slot < chunk.count;
      const int64_t key = valid ? chunk.key(columns_, slot) : 0;
      const uint32_t pass_offset = pass * Traits::kRowsPerPass * Traits::kRowBytes;
      copy_async_16(key_destination + pass_offset, keys + key * key_row_stride + column, valid);
      copy_async_16(value_destination + pass_offset, values + key * value_row_stride + column,
                    valid);
    }
    const int slot = static_cast<int>(threadIdx.x);
    if (slot < Traits::kBlockN) {
      const bool valid = slot < chunk.count;
      const int32_t key = valid ? chunk.key(columns_, slot) + chunk.position_shift : 0;
      storage_.key_positions[stage][slot] = key;
      if (token_info_ != nullptr) {
        copy_async_4(shared_address(&storage_.key_tokens[stage][slot]), token_info_ + key, valid);
      }
    }
  }

  // Moves the warp's 16 query rows from shared memory into A fragments, once per tile. Matrices of
  // one ldmatrix.x4: (rows 0-7, dims 0-7), (rows 8-15, dims 0-7), (rows 0-7, dims 8-15), (rows
  // 8-15, dims 8-15), i.e. a0..a3.
  __device__ void load_query_fragments(int warp, int lane) {
    const int row = warp * Traits::kMmaM + lane % Traits::kMmaM;
    const uint32_t address =
        shared_address(storage_.query) + Traits::swizzled_byte_offset(row, lane / Traits::kMmaM);
#pragma unroll
    for (int step = 0; step < Traits::kHeadDimSteps; ++step) {
      load_matrix_x4(query_fragments_[step], Traits::move_vectors(address, step * kVectorsPerStep));
    }
  }

  // scores = Q·K^T for the warp's 16 rows and the chunk's kBlockN keys (raw dot products).
  __device__ void compute_scores(int stage, int lane,
                                 float (&scores)[Traits::kScoreTiles][4]) const {
#pragma unroll
    for (int tile = 0; tile < Traits::kScoreTiles; ++tile) {
#pragma unroll
      for (int e = 0; e < 4; ++e) scores[tile][e] = 0.0f;
    }
    // Matrices of one ldmatrix.x4: (keys 0-7, dims 0-7), (keys 0-7, dims 8-15), (keys 8-15, dims
    // 0-7), (keys 8-15, dims 8-15): the B fragments of two adjacent 8-key tiles.
    const int key = lane % kMatrixRows + lane / (2 * kMatrixRows) * kMatrixRows;
    const uint32_t address = shared_address(storage_.keys[stage]) +
                             Traits::swizzled_byte_offset(key, lane / kMatrixRows % 2);
#pragma unroll
    for (int step = 0; step < Traits::kHeadDimSteps; ++step) {
      const uint32_t step_address = Traits::move_vectors(address, step * kVectorsPerStep);
#pragma unroll
      for (int pair = 0; pair < Traits::kScoreTiles / 2; ++pair) {
        uint32_t fragment[4];
        load_matrix_x4(fragment, step_address + pair * kRowsPerPair * Traits::kRowBytes);
        TensorCore<Element>::mma(scores[2 * pair], query_fragments_[step], fragment[0],
                                 fragment[1]);
        TensorCore<Element>::mma(scores[2 * pair + 1], query_fragments_[step], fragment[2],
                                 fragment[3]);
      }
    }
  }

  // output += P·V, with P the warp's probabilities in the accumulator layout of compute_scores.
  __device__ void accumulate_output(int stage, int lane,
                                    const float (&probabilities)[Traits::kScoreTiles][4],
                                    float (&output)[Traits::kOutputTiles][4]) const {
    // Transposed matrices of one ldmatrix.x4: (keys 0-7, dims 0-7), (keys 8-15, dims 0-7),
    // (keys 0-7, dims 8-15), (keys 8-15, dims 8-15): the B fragments of two adjacent 8-dim tiles.
    const int key = lane % kMatrixRows + lane / kMatrixRows % 2 * kMatrixRows;
    const uint32_t address = shared_address(storage_.values[stage]) +
                             Traits::swizzled_byte_offset(key, lane / (2 * kMatrixRows));
#pragma unroll
    for (int step = 0; step < Traits::kKeySteps; ++step) {
      // The accumulators of score tiles 2·step and 2·step+1 are exactly an A fragment of 16 keys.
      const uint32_t a[4] = {
          TensorCore<Element>::pack(probabilities[2 * step][0], probabilities[2 * step][1]),
          TensorCore<Element>::pack(probabilities[2 * step][2], probabilities[2 * step][3]),
          TensorCore<Element>::pack(probabilities[2 * step + 1][0], probabilities[2 * step + 1][1]),
          TensorCore<Element>::pack(probabilities[2 * step + 1][2],
                                    probabilities[2 * step + 1][3])};
      const uint32_t step_address = address + step * Traits::kMmaK * Traits::kRowBytes;
#pragma unroll
      for (int pair = 0; pair < Traits::kOutputTiles / 2; ++pair) {
        uint32_t fragment[4];
        load_matrix_x4_transposed(fragment,
                                  Traits::move_vectors(step_address, pair * kVectorsPerStep));
        TensorCore<Element>::mma(output[2 * pair], a, fragment[0], fragment[1]);
        TensorCore<Element>::mma(output[2 * pair + 1], a, fragment[2], fragment[3]);
      }
    }
  }

 private:
  __device__ static const Element* head_rows(const InputOperand& operand, int32_t batch,
                                             int32_t head) {
    return static_cast<const Element*>(operand.data) + batch * operand.batch_stride +
           head * operand.head_stride;
  }

  Storage& storage_;
  const Element* query_;  // row 0 of [seq, head_dim] rows of the query head, row stride below
  int64_t query_row_stride_;
  const Element* keys_;  // row 0 of the KV head's keys
  int64_t key_row_stride_;
  const Element* values_;  // row 0 of the KV head's values
  int64_t value_row_stride_;
  // Row 0 of the KV head's K and V in key-order layout (key_order_copy.h), one row stride for
  // both; meaningless (never read) for plans without key orders.
  const Element* ordered_keys_;
  const Element* ordered_values_;
  int64_t ordered_row_stride_;
  const int32_t* columns_;     // [columns] of the plan
  const int32_t* token_info_;  // [kv_len] packed tokens, or null
  uint32_t query_fragments_[Traits::kHeadDimSteps][4];
};

}  // namespace mmsparse::cuda
