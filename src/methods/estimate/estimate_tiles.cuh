#pragma once
// The tile steps of the GPU estimate (estimate_device.cu, which describes the passes): the kernels'
// parameters and shared memory, a warp's query fragments and scores of a key chunk, and what the
// passes make of them (row stats, probabilities, column sums, diagonal partials).

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>

#include "cuda/attention/sm80/ptx.cuh"
#include "cuda/common/math.h"
#include "methods/estimate/index_kernels.h"

namespace mmsparse::cuda::index::estimate_tiles {

constexpr int kChunk = static_cast<int>(kEstimateChunkKeys);
// Key chunks per block: their keys are loaded once and read by every head and row tile, so the
// query tiles are loaded once per kBlockChunks chunks; two keep four blocks resident per SM.
constexpr int kBlockChunks = 2;
constexpr int kBlockKeys = kBlockChunks * kChunk;
constexpr int kTileRows = 64;  // estimate rows per MMA tile
constexpr int kWarpRows = 16;  // the MMA's m extent: each warp scores 16 rows
constexpr int kWarps = kTileRows / kWarpRows;
constexpr int kThreads = kWarps * kWarpSize;
constexpr int kMinBlocksPerSm = 4;
constexpr int kMmaKeys = 8;  // the MMA's n extent
constexpr int kKeyTiles = kChunk / kMmaKeys;
constexpr int kMmaDepth = static_cast<int>(kEstimateHeadDimStep);
constexpr int kMaxDepthSteps = static_cast<int>(kMaxEstimateHeadDim) / kMmaDepth;
constexpr int kVectorElements = static_cast<int>(kEstimateVectorElements);
constexpr int kFragmentHalfRows = 8;   // a fragment's second row group is 8 rows below the first
constexpr int kFragmentHalfDepth = 8;  // and its second k group 8 columns right
constexpr int kFragmentElements = 4;   // accumulator elements per lane and key tile
constexpr int kRowHalves = 2;          // a lane holds two rows of its warp's 16
constexpr int kQuadLanes = 4;          // the lanes holding one row: lane / 4 names the row
// Shared rows are padded by 8 elements (16 bytes) so that the 8 row groups of a fragment load fall
// on distinct banks.
constexpr int kRowPitch = static_cast<int>(kMaxEstimateHeadDim) + 8;
constexpr int kScorePitch = kChunk + 1;
constexpr int kMaxSegments = static_cast<int>(kMaxEstimateSegments);
constexpr int kGatherThreads = 256;
constexpr int kCombineWarpsPerBlock = 8;
constexpr int kColumnAccumulators = 4;  // independent float sums down a column
static_assert(kChunk % kMmaKeys == 0 && kThreads >= 2 * kChunk - 1 && kThreads >= kTileRows);
static_assert(kWarpRows == kRowHalves * kFragmentHalfRows && kTileRows % kColumnAccumulators == 0);

enum class EstimatePass : int32_t { kStats, kSums };

// The query heads estimated when a plan serves only some (EstimateOperands::heads), by value.
// count == 0 means every head: slot = batch element × q_heads + query head. Otherwise the heads'
// local indices [kv_first[i], kv_first[i + 1]) are the selected members of the i-th KV head that
// has any, so blocks go only to KV heads some selected query head reads.
struct HeadSelection {
  int32_t count;
  int32_t kv_count;
  int32_t heads[kMaxSelectedHeads];         // query head of each local index, ascending
  int32_t kv_first[kMaxSelectedHeads + 1];  // first local index of each used KV head
};

// An EstimateSegment with where its rows and diagonal partials start.
struct SegmentView {
  int64_t position;   // query row of its first estimate row
  int64_t frontier;   // keys its first row sees
  int32_t first_row;  // among the estimate rows
  int32_t rows;
  int32_t first_entry;  // among a chunk's diagonal partials
  int32_t step;         // frontier advance per row: 0 or 1
  __host__ __device__ int64_t diagonal_entries() const {
    return static_cast<int64_t>(rows - 1) * step + kChunk;
  }
};

// Rows load as 16-byte vectors: the operands' last dimension is contiguous and their rows 16-byte
// aligned (make_estimate_operands checks).
struct EstimateParams {
  const uint16_t* q;  // [batch, q_len, q_heads, head_dim] raw 16-bit elements
  int64_t q_stride_batch, q_stride_row, q_stride_head;
  const uint16_t* k;  // [batch, kv_len, kv_heads, head_dim]
  int64_t k_stride_batch, k_stride_row, k_stride_head;
  int32_t q_heads, kv_heads, group, head_dim;
  KeySpaceView keys;  // compact key c is original key keys.original(c)
  float scale;
  int64_t rows, chunks, scores;
  int32_t segment_count;
  int32_t diagonal_entries;  // per chunk
  SegmentView segments[kMaxSegments];
  int32_t slots_per_batch;  // estimated heads per batch element
  HeadSelection selection;
  EstimateScratch scratch;

  // The segment holding estimate row `row`.
  __device__ const SegmentView& segment_of(int64_t row) const {
    int s = 0;
    while (s + 1 < segment_count && segments[s + 1].first_row <= row) ++s;
    return segments[s];
  }
  // Keys estimate row `row` sees: [0, frontier).
  __device__ int64_t frontier(int64_t row) const {
    const SegmentView& segment = segment_of(row);
    return segment.frontier + (row - segment.first_row) * segment.step;
  }
  __device__ int64_t position(int64_t row) const {
    const SegmentView& segment = segment_of(row);
    return segment.position + (row - segment.first_row);
  }
};

// Dynamic shared memory of an estimate block (above the 48 KB of static shared memory).
struct EstimateShared {
  alignas(16) uint16_t keys[kBlockKeys * kRowPitch];
  union {
    alignas(16) uint16_t queries[kTileRows * kRowPitch];  // staged, then held in registers
    float values[kTileRows * kScorePitch];                // sums pass: one chunk's probabilities
  } tile;
  double columns[kBlockKeys];  // sums pass: the head's column sums of the block's keys
};

__device__ inline uint32_t load_pair(const uint16_t* shared, int index) {
  return *reinterpret_cast<const uint32_t*>(shared + index);
}

// Where a lane works: its warp's 16 rows of the tile, its fragment row and key pair.
struct Lane {
  int warp, group_row, pair;
  __device__ Lane()
      : warp(static_cast<int>(threadIdx.x) / kWarpSize),
        group_row(static_cast<int>(threadIdx.x) % kWarpSize / kQuadLanes),
        pair(static_cast<int>(threadIdx.x) % kQuadLanes * 2) {}
  // Tile row of the lane's half h (fragment ownership, see TensorCore in sm80/ptx.cuh).
  __device__ int tile_row(int half) const {
    return warp * kWarpRows + group_row + half * kFragmentHalfRows;
  }
  // Key within the chunk of accumulator element `element` of key tile `key_tile`.
  __device__ int key(int key_tile, int element) const {
    return key_tile * kMmaKeys + pair + element % 2;
  }
};

// A warp's 16 query rows as MMA A fragments, one per 16 dimensions.
struct QueryFragments {
  uint32_t a[kMaxDepthSteps][4];
};

__device__ inline void load_query_fragments(const uint16_t* staged, const Lane& lane, int steps,
                                            QueryFragments& fragments) {
  const int warp_row = lane.tile_row(0);
#pragma unroll
  for (int step = 0; step < kMaxDepthSteps; ++step) {
    if (step >= steps) break;
    const int column = step * kMmaDepth + lane.pair;
    const int low = warp_row * kRowPitch + column;
    const int high = (warp_row + kFragmentHalfRows) * kRowPitch + column;
    fragments.a[step][0] = load_pair(staged, low);
    fragments.a[step][1] = load_pair(staged, high);
    fragments.a[step][2] = load_pair(staged, low + kFragmentHalfDepth);
    fragments.a[step][3] = load_pair(staged, high + kFragmentHalfDepth);
  }
}

// The warp's 16 rows × the chunk's 64 keys (shared rows from `keys`), unscaled, in accumulator
// fragments.
template <class Element>
__device__ inline void score_chunk(const QueryFragments& fragments, const uint16_t* keys,
                                   const Lane& lane, int steps,
                                   float (&scores)[kKeyTiles][kFragmentElements]) {
#pragma unroll
  for (int key_tile = 0; key_tile < kKeyTiles; ++key_tile) {
#pragma unroll
    for (int element = 0; element < kFragmentElements; ++element) scores[key_tile][element] = 0.0f;
  }
#pragma unroll
  for (int step = 0; step < kMaxDepthSteps; ++step) {
    if (step >= steps) break;
    const int column = step * kMmaDepth + lane.pair;
#pragma unroll
    for (int key_tile = 0; key_tile < kKeyTiles; ++key_tile) {
      const int key_row = (key_tile * kMmaKeys + lane.group_row) * kRowPitch + column;
      TensorCore<Element>::mma(scores[key_tile], fragments.a[step], load_pair(keys, key_row),
                               load_pair(keys, key_row + kFragmentHalfDepth));
    }
  }
}

// A lane's two tile rows: the keys each sees (0 beyond the tile) and, in the sums pass, its
// softmax maximum and the reciprocal of its sum.
struct LaneRows {
  int64_t frontier[kRowHalves];
  float maximum[kRowHalves];
  float inverse_sum[kRowHalves];
};

template <EstimatePass kPass>
__device__ inline LaneRows lane_rows(const EstimateParams& params, const Lane& lane, int64_t slot,
                                     int64_t row_begin, int tile_rows) {
  LaneRows rows{};
  for (int half = 0; half < kRowHalves; ++half) {
    const int row = lane.tile_row(half);
    if (row >= tile_rows) continue;
    rows.frontier[half] = params.frontier(row_begin + row);
    if (kPass == EstimatePass::kSums) {
      const int64_t at = slot * params.rows + row_begin + row;
      rows.maximum[half] = params.scratch.row_max[at];
      rows.inverse_sum[half] = static_cast<float>(1.0 / params.scratch.row_sum[at]);
    }
  }
  return rows;
}

// Stats pass, a chunk no row of the tile sees: maximum -inf and sum 0 for each row.
__device__ inline void write_unseen_chunk_stats(const EstimateParams& params, int64_t slot,
                                                int64_t row_begin, int tile_rows, int64_t chunk) {
  const int x = static_cast<int>(threadIdx.x);
  if (x >= tile_rows) return;
  const int64_t at = (slot * params.rows + row_begin + x) * params.chunks + chunk;
  params.scratch.partial_max[at] = -INFINITY;
  params.scratch.partial_sum[at] = 0.0;
}

// Stats pass: each of the lane's rows' maximum over the chunk's keys it sees and the sum of
// exp(score - maximum), reduced over the row's four lanes; the first of them writes.
__device__ inline void write_chunk_stats(const EstimateParams& params, const Lane& lane,
                                         const LaneRows& rows,
                                         float (&scores)[kKeyTiles][kFragmentElements],
                                         int64_t slot, int64_t row_begin, int tile_rows,
                                         int64_t chunk) {
  const int64_t chunk_begin = chunk * kChunk;
  float maximum[kRowHalves] = {-INFINITY, -INFINITY};
#pragma unroll
  for (int key_tile = 0; key_tile < kKeyTiles; ++key_tile) {
#pragma unroll
    for (int element = 0; element < kFragmentElements; ++element) {
      const int half = element / 2;
      const bool seen = chunk_begin + lane.key(key_tile, element) < rows.frontier[half];
      const float score = seen ? scores[key_tile][element] * params.scale : -INFINITY;
      scores[key_tile][element] = score;
      maximum[half] = fmaxf(maximum[half], score);
    }
  }
  float sum[kRowHalves] = {0.0f, 0.0f};
  for (int half = 0; half < kRowHalves; ++half) {
    for (int offset = 1; offset < kQuadLanes; offset *= 2) {
      maximum[half] = fmaxf(maximum[half], __shfl_xor_sync(kFullWarpMask, maximum[half], offset));
    }
  }
#pragma unroll
  for (int key_tile = 0; key_tile < kKeyTiles; ++key_tile) {
#pragma unroll
    for (int element = 0; element < kFragmentElements; ++element) {
      const int half = element / 2;
      if (scores[key_tile][element] != -INFINITY) {
        sum[half] += expf(scores[key_tile][element] - maximum[half]);
      }
    }
  }
  for (int half = 0; half < kRowHalves; ++half) {
    for (int offset = 1; offset < kQuadLanes; offset *= 2) {
      sum[half] += __shfl_xor_sync(kFullWarpMask, sum[half], offset);
    }
    const int row = lane.tile_row(half);
    if (lane.pair != 0 || row >= tile_rows) continue;
    const int64_t at = (slot * params.rows + row_begin + row) * params.chunks + chunk;
    params.scratch.partial_max[at] = maximum[half];
    params.scratch.partial_sum[at] = sum[half];
  }
}

// Sums pass: the lane's probabilities of the chunk (0 where a row does not see the key) into the
// shared tile of values.
__device__ inline void store_chunk_probabilities(
    const EstimateParams& params, const Lane& lane, const LaneRows& rows,
    const float (&scores)[kKeyTiles][kFragmentElements], int64_t chunk_begin, float* values) {
#pragma unroll
  for (int key_tile = 0; key_tile < kKeyTiles; ++key_tile) {
#pragma unroll
    for (int element = 0; element < kFragmentElements; ++element) {
      const int half = element / 2;
      const int key = lane.key(key_tile, element);
      const bool seen = chunk_begin + key < rows.frontier[half];
      const float score = scores[key_tile][element] * params.scale;
      values[lane.tile_row(half) * kScorePitch + key] =
          seen ? expf(score - rows.maximum[half]) * rows.inverse_sum[half] : 0.0f;
    }
  }
}

// Sums pass, for the grid search: the tile's rows of the chunk into the softmax rows (every key
// below the scores, 0 where the row does not see it).
__device__ inline void copy_chunk_probabilities(const EstimateParams& params, const float* values,
                                                int64_t slot, int64_t row_begin, int tile_rows,
                                                int64_t chunk_begin) {
  for (int i = static_cast<int>(threadIdx.x); i < tile_rows * kChunk; i += kThreads) {
    const int row = i / kChunk;
    const int key = i % kChunk;
    if (chunk_begin + key < params.scores) {
      params.scratch.probabilities[(slot * params.rows + row_begin + row) * params.scores +
                                   chunk_begin + key] = values[row * kScorePitch + key];
    }
  }
}

// Sums pass: the tile's rows of each key of the chunk added to its column sum (a thread per key).
__device__ inline void add_chunk_columns(const float* values, int tile_rows, double* columns) {
  const int x = static_cast<int>(threadIdx.x);
  if (x >= kChunk) return;
  float sums[kColumnAccumulators] = {};
  for (int row = 0; row < tile_rows; ++row) {
    sums[row % kColumnAccumulators] += values[row * kScorePitch + x];
  }
  float sum = 0.0f;
  for (int i = 0; i < kColumnAccumulators; ++i) sum += sums[i];
  columns[x] += static_cast<double>(sum);
}

// Sums pass: each segment's rows of the tile, [first, last), added to the chunk's diagonal
// partials (a thread per diagonal u = (row - first) * step - key + kChunk - 1, rows ascending).
__device__ inline void add_chunk_diagonals(const EstimateParams& params, const float* values,
                                           int64_t row_begin, int tile_rows, double* partials) {
  const int x = static_cast<int>(threadIdx.x);
  for (int s = 0; s < params.segment_count; ++s) {
    const SegmentView& segment = params.segments[s];
    const int64_t first = max(static_cast<int64_t>(segment.first_row), row_begin);
    const int64_t last =
        min(static_cast<int64_t>(segment.first_row) + segment.rows, row_begin + tile_rows);
    if (first >= last) continue;
    const int tile_first = static_cast<int>(first - row_begin);
    const int count = static_cast<int>(last - first);
    float sum = 0.0f;
    if (segment.step == 0) {  // one frontier: u = kChunk - 1 - key for every row
      if (x >= kChunk) continue;
      for (int row = 0; row < count; ++row) {
        sum += values[(tile_first + row) * kScorePitch + kChunk - 1 - x];
      }
      partials[segment.first_entry + x] += static_cast<double>(sum);
      continue;
    }
    if (x >= count + kChunk - 1) continue;
    for (int row = max(0, x - (kChunk - 1)); row <= min(count - 1, x); ++row) {
      sum += values[(tile_first + row) * kScorePitch + row + kChunk - 1 - x];
    }
    partials[segment.first_entry + (first - segment.first_row) + x] += static_cast<double>(sum);
  }
}

}  // namespace mmsparse::cuda::index::estimate_tiles
