// The last-q estimate of every head slot on the GPU (index_kernels.h), GQA native: one block per
// (key chunk, batch element, KV head) loads its keys once and scores the estimate rows of every
// query head of the group against them with tensor-core MMAs (fp32 accumulation). Two passes over
// the same scores, because the softmax of a row needs its maximum and sum over all keys first:
//   stats pass    per row and chunk: max and sum of exp(score - max);  combine -> per row
//   sums pass     p = exp(score - max) / sum, as the host computes it; per chunk the column sums
//                 (the block owns its keys) and per-chunk diagonal partials; a gather adds the
//                 partials of each diagonal in chunk order; and, for the grid search, the
//                 probabilities themselves when asked for.
// Every sum runs over rows in ascending order, in double like the host's; the scores themselves
// differ from the host's by summation order in the dot product only (the contract allows that).
// The estimate rows come in segments of consecutive queries (EstimateSegment): the last rows of q,
// or a Q- or 2D-boundary group's last rows, one segment per run of its modality; a segment's rows
// meet a chunk's keys on (rows - 1) * step + kChunk diagonals (step 1: each row's frontier one
// further; step 0: one frontier), so each segment has its own diagonal partials. A 2D-boundary
// pair reads the keys of one modality in compact coordinates (KeySpaceView): a chunk is 64
// consecutive compact keys, loaded from their original rows.

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>

#include "cuda/attention/sm80/ptx.cuh"
#include "cuda/common/cuda_check.h"
#include "cuda/common/math.h"
#include "methods/estimate/dynamic_head.h"
#include "methods/estimate/index_kernels.h"
#include "methods/registry.h"
#include "mmsparse/status.h"

namespace mmsparse::cuda::index {
namespace {

constexpr int kChunk = static_cast<int>(kEstimateChunkKeys);
constexpr int kTileRows = 64;  // estimate rows per MMA tile
constexpr int kWarpRows = 16;  // the MMA's m extent: each warp scores 16 rows
constexpr int kWarps = kTileRows / kWarpRows;
constexpr int kThreads = kWarps * kWarpSize;
constexpr int kMmaKeys = 8;  // the MMA's n extent
constexpr int kKeyTiles = kChunk / kMmaKeys;
constexpr int kMmaDepth = static_cast<int>(kEstimateHeadDimStep);
constexpr int kVectorElements = static_cast<int>(kEstimateVectorElements);
constexpr int kFragmentHalfRows = 8;   // a fragment's second row group is 8 rows below the first
constexpr int kFragmentHalfDepth = 8;  // and its second k group 8 columns right
// Shared rows are padded by 8 elements (16 bytes) so that the 8 row groups of a fragment load fall
// on distinct banks.
constexpr int kRowPitch = static_cast<int>(kMaxEstimateHeadDim) + 8;
constexpr int kScorePitch = kChunk + 1;
constexpr int kTileDiagonals = kTileRows + kChunk - 1;
constexpr int kMaxDiagonals = static_cast<int>(kMaxEstimateDiagonals);
constexpr int kMaxSegments = static_cast<int>(kMaxEstimateSegments);
constexpr int kGatherThreads = 256;
constexpr int kCombineWarpsPerBlock = 8;
static_assert(kChunk % kMmaKeys == 0 && kThreads >= kTileDiagonals && kThreads >= kTileRows);

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

struct EstimateShared {
  alignas(16) uint16_t keys[kChunk * kRowPitch];
  union {
    alignas(16) uint16_t queries[kTileRows * kRowPitch];  // before the MMAs
    float values[kTileRows * kScorePitch];                // after: scores or probabilities
  } tile;
  double columns[kChunk];
  double diagonals[kMaxDiagonals];  // per segment, by u = its row - key in chunk + kChunk - 1
  int64_t row_frontier[kTileRows];
  float row_max[kTileRows];
  double row_sum[kTileRows];
};

__device__ inline uint32_t load_pair(const uint16_t* shared, int index) {
  return *reinterpret_cast<const uint32_t*>(shared + index);
}

// One block: key chunk blockIdx.x of the blockIdx.y-th (batch element, used KV head), every
// estimate row of every estimated query head of its GQA group.
template <class Element>
__global__ void __launch_bounds__(kThreads)
    estimate_kernel(const EstimateParams params, const EstimatePass pass) {
  __shared__ EstimateShared shared;
  const int64_t chunk = blockIdx.x;
  const HeadSelection& selection = params.selection;
  const bool selected = selection.count > 0;
  const int32_t kv_blocks = selected ? selection.kv_count : params.kv_heads;
  const int32_t batch = static_cast<int32_t>(blockIdx.y) / kv_blocks;
  const int32_t kv_block = static_cast<int32_t>(blockIdx.y) % kv_blocks;
  const int32_t member_begin = selected ? selection.kv_first[kv_block] : kv_block * params.group;
  const int32_t member_end =
      selected ? selection.kv_first[kv_block + 1] : member_begin + params.group;
  const int32_t kv_head = selected ? selection.heads[member_begin] / params.group : kv_block;
  const int64_t key_begin = chunk * kChunk;
  const int warp = static_cast<int>(threadIdx.x) / kWarpSize;
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  const int group_row = lane / 4;  // fragment ownership, see TensorCore in cuda/attention/sm80/ptx.cuh
  const int pair = (lane % 4) * 2;
  const int head_dim = params.head_dim;

  const int row_vectors = head_dim / kVectorElements;
  const uint16_t* keys = params.k + batch * params.k_stride_batch + kv_head * params.k_stride_head;
  for (int v = static_cast<int>(threadIdx.x); v < kChunk * row_vectors; v += kThreads) {
    const int key = v / row_vectors;
    const int dim = v % row_vectors * kVectorElements;
    uint4 bits = {};
    if (key_begin + key < params.scores) {  // no row sees a key beyond the scores
      const int64_t original = params.keys.original(key_begin + key);
      bits = *reinterpret_cast<const uint4*>(keys + original * params.k_stride_row + dim);
    }
    *reinterpret_cast<uint4*>(shared.keys + key * kRowPitch + dim) = bits;
  }

  for (int32_t member = member_begin; member < member_end; ++member) {
    const int32_t q_head = selected ? selection.heads[member] : member;
    const int64_t slot = static_cast<int64_t>(batch) * params.slots_per_batch + member;
    if (pass == EstimatePass::kSums) {
      __syncthreads();  // the previous head's sums are stored
      for (int i = static_cast<int>(threadIdx.x); i < kMaxDiagonals; i += kThreads) {
        shared.diagonals[i] = 0.0;
        if (i < kChunk) shared.columns[i] = 0.0;
      }
    }
    for (int64_t row_begin = 0; row_begin < params.rows; row_begin += kTileRows) {
      const int tile_rows =
          static_cast<int>(params.rows - row_begin < kTileRows ? params.rows - row_begin : kTileRows);
      // Frontiers ascend with the rows, so the tile's last row sees the most keys.
      if (params.frontier(row_begin + tile_rows - 1) <= key_begin) {
        // Causality: no row of the tile sees a key of the chunk.
        if (pass == EstimatePass::kStats && static_cast<int>(threadIdx.x) < tile_rows) {
          const int64_t at = (slot * params.rows + row_begin + threadIdx.x) * params.chunks + chunk;
          params.scratch.partial_max[at] = -INFINITY;
          params.scratch.partial_sum[at] = 0.0;
        }
        continue;
      }
      __syncthreads();  // the previous tile's values are consumed
      const uint16_t* queries =
          params.q + batch * params.q_stride_batch + q_head * params.q_stride_head;
      for (int v = static_cast<int>(threadIdx.x); v < kTileRows * row_vectors; v += kThreads) {
        const int row = v / row_vectors;
        const int dim = v % row_vectors * kVectorElements;
        uint4 bits = {};
        if (row < tile_rows) {
          bits = *reinterpret_cast<const uint4*>(
              queries + params.position(row_begin + row) * params.q_stride_row + dim);
        }
        *reinterpret_cast<uint4*>(shared.tile.queries + row * kRowPitch + dim) = bits;
      }
      if (static_cast<int>(threadIdx.x) < tile_rows) {
        shared.row_frontier[threadIdx.x] = params.frontier(row_begin + threadIdx.x);
      }
      if (pass == EstimatePass::kSums && static_cast<int>(threadIdx.x) < tile_rows) {
        const int64_t row = slot * params.rows + row_begin + threadIdx.x;
        shared.row_max[threadIdx.x] = params.scratch.row_max[row];
        shared.row_sum[threadIdx.x] = params.scratch.row_sum[row];
      }
      __syncthreads();

      float scores[kKeyTiles][4] = {};
      const int warp_row = warp * kWarpRows + group_row;
      for (int depth = 0; depth < head_dim; depth += kMmaDepth) {
        const int column = depth + pair;
        const uint32_t a[4] = {
            load_pair(shared.tile.queries, warp_row * kRowPitch + column),
            load_pair(shared.tile.queries, (warp_row + kFragmentHalfRows) * kRowPitch + column),
            load_pair(shared.tile.queries, warp_row * kRowPitch + column + kFragmentHalfDepth),
            load_pair(shared.tile.queries,
                      (warp_row + kFragmentHalfRows) * kRowPitch + column + kFragmentHalfDepth)};
#pragma unroll
        for (int key_tile = 0; key_tile < kKeyTiles; ++key_tile) {
          const int key_row = (key_tile * kMmaKeys + group_row) * kRowPitch + column;
          TensorCore<Element>::mma(scores[key_tile], a, load_pair(shared.keys, key_row),
                                   load_pair(shared.keys, key_row + kFragmentHalfDepth));
        }
      }
      __syncthreads();  // every warp has read its queries; the values overwrite them

#pragma unroll
      for (int key_tile = 0; key_tile < kKeyTiles; ++key_tile) {
#pragma unroll
        for (int element = 0; element < 4; ++element) {
          const int row = warp_row + (element / 2) * kFragmentHalfRows;
          const int key = key_tile * kMmaKeys + pair + element % 2;
          const int64_t position = key_begin + key;
          const bool valid = row < tile_rows && position < shared.row_frontier[row];
          const float score = scores[key_tile][element] * params.scale;
          float value;
          if (pass == EstimatePass::kStats) {
            value = valid ? score : -INFINITY;
          } else {
            // The host: exp in float, the division by the double sum, rounded to float.
            value = valid ? static_cast<float>(static_cast<double>(expf(score - shared.row_max[row])) /
                                               shared.row_sum[row])
                          : 0.0f;
          }
          shared.tile.values[row * kScorePitch + key] = value;
        }
      }
      __syncthreads();

      const int x = static_cast<int>(threadIdx.x);
      if (pass == EstimatePass::kStats) {
        if (x < tile_rows) {
          const float* row = shared.tile.values + x * kScorePitch;
          float maximum = -INFINITY;
          for (int key = 0; key < kChunk; ++key) maximum = fmaxf(maximum, row[key]);
          double sum = 0.0;
          if (maximum != -INFINITY) {
            for (int key = 0; key < kChunk; ++key) {
              if (row[key] != -INFINITY) sum += expf(row[key] - maximum);
            }
          }
          const int64_t at = (slot * params.rows + row_begin + x) * params.chunks + chunk;
          params.scratch.partial_max[at] = maximum;
          params.scratch.partial_sum[at] = sum;
        }
      } else {
        if (params.scratch.probabilities != nullptr) {
          for (int i = x; i < tile_rows * kChunk; i += kThreads) {
            const int row = i / kChunk;
            const int key = i % kChunk;
            if (key_begin + key < params.scores) {
              params.scratch.probabilities[(slot * params.rows + row_begin + row) * params.scores +
                                           key_begin + key] =
                  shared.tile.values[row * kScorePitch + key];
            }
          }
        }
        if (x < kChunk) {
          double sum = 0.0;
          for (int row = 0; row < tile_rows; ++row) sum += shared.tile.values[row * kScorePitch + x];
          shared.columns[x] += sum;
        }
        // Each segment's rows of the tile, [first, last) relative to it: diagonal
        // u = (row - first) * step - key + kChunk - 1 of them, rows ascending.
        for (int s = 0; s < params.segment_count; ++s) {
          const SegmentView& segment = params.segments[s];
          const int64_t first = max(static_cast<int64_t>(segment.first_row), row_begin);
          const int64_t last =
              min(static_cast<int64_t>(segment.first_row) + segment.rows, row_begin + tile_rows);
          const int tile_first = static_cast<int>(first - row_begin);
          const int count = static_cast<int>(last - first);
          double sum = 0.0;
          if (segment.step == 0) {  // one frontier: u = kChunk - 1 - key for every row
            if (first >= last || x >= kChunk) continue;
            for (int row = 0; row < count; ++row) {
              sum += shared.tile.values[(tile_first + row) * kScorePitch + kChunk - 1 - x];
            }
            shared.diagonals[segment.first_entry + x] += sum;
            continue;
          }
          if (first >= last || x >= last - first + kChunk - 1) continue;
          for (int row = max(0, x - (kChunk - 1)); row <= min(count - 1, x); ++row) {
            sum += shared.tile.values[(tile_first + row) * kScorePitch + row + kChunk - 1 - x];
          }
          shared.diagonals[segment.first_entry + (first - segment.first_row) + x] += sum;
        }
      }
    }
    if (pass == EstimatePass::kSums) {
      __syncthreads();
      const int x = static_cast<int>(threadIdx.x);
      if (x < kChunk && key_begin + x < params.scores) {
        params.scratch.column_sums[slot * params.scores + key_begin + x] = shared.columns[x];
      }
      const int64_t entries = params.diagonal_entries;
      double* partials =
          params.scratch.diagonal_partials + (slot * params.chunks + chunk) * entries;
      for (int64_t u = x; u < entries; u += kThreads) partials[u] = shared.diagonals[u];
    }
  }
}

// One warp per (head slot, estimate row): the row's maximum and sum over its chunks.
__global__ void combine_rows_kernel(const EstimateParams params, int64_t total_rows) {
  const int64_t row =
      static_cast<int64_t>(blockIdx.x) * kCombineWarpsPerBlock + threadIdx.x / kWarpSize;
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  if (row >= total_rows) return;
  const float* maxima = params.scratch.partial_max + row * params.chunks;
  const double* sums = params.scratch.partial_sum + row * params.chunks;
  float maximum = -INFINITY;
  for (int64_t c = lane; c < params.chunks; c += kWarpSize) maximum = fmaxf(maximum, maxima[c]);
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    maximum = fmaxf(maximum, __shfl_xor_sync(kFullWarpMask, maximum, offset));
  }
  double sum = 0.0;
  if (maximum != -INFINITY) {
    for (int64_t c = lane; c < params.chunks; c += kWarpSize) {
      if (maxima[c] != -INFINITY) sum += sums[c] * exp(static_cast<double>(maxima[c] - maximum));
    }
  }
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    sum += __shfl_xor_sync(kFullWarpMask, sum, offset);
  }
  if (lane == 0) {
    params.scratch.row_max[row] = maximum;
    params.scratch.row_sum[row] = sum;
  }
}

__device__ inline int64_t floor_div(int64_t a, int64_t b) {
  return a / b - ((a % b != 0) && ((a < 0) != (b < 0)));
}

// One thread per (head slot, diagonal offset d): each segment's chunk partials of d in chunk order,
// segments in order: the host's row order (a later row meets diagonal d at a later key).
__global__ void gather_diagonals_kernel(const EstimateParams params) {
  const int64_t index = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t slot = blockIdx.y;
  if (index >= params.scores) return;
  const int64_t d = index;
  const int64_t entries = params.diagonal_entries;
  const double* partials = params.scratch.diagonal_partials + slot * params.chunks * entries;
  double sum = 0.0;
  for (int s = 0; s < params.segment_count; ++s) {
    const SegmentView& segment = params.segments[s];
    const int64_t span = segment.diagonal_entries();
    // d = (frontier - 1) - key_begin - (kChunk - 1) + u, so u = d - base + chunk * kChunk.
    const int64_t base = segment.frontier - 1 - (kChunk - 1);
    const int64_t lowest = -floor_div(d - base, kChunk);
    const int64_t highest = floor_div(span - 1 - d + base, kChunk);
    const int64_t first_chunk = lowest > 0 ? lowest : 0;
    const int64_t last_chunk = highest < params.chunks - 1 ? highest : params.chunks - 1;
    for (int64_t chunk = first_chunk; chunk <= last_chunk; ++chunk) {
      sum += partials[chunk * entries + segment.first_entry + d - base + chunk * kChunk];
    }
  }
  params.scratch.diagonal_sums[slot * params.scores + d] = sum;
}


EstimateParams make_params(const EstimateOperands& operands, const EstimateExtents& extents,
                           const EstimateScratch& scratch) {
  EstimateParams params{};
  params.q = static_cast<const uint16_t*>(operands.q);
  params.q_stride_batch = operands.q_strides[0];
  params.q_stride_row = operands.q_strides[1];
  params.q_stride_head = operands.q_strides[2];
  params.k = static_cast<const uint16_t*>(operands.k);
  params.k_stride_batch = operands.k_strides[0];
  params.k_stride_row = operands.k_strides[1];
  params.k_stride_head = operands.k_strides[2];
  params.q_heads = static_cast<int32_t>(operands.q_heads);
  params.kv_heads = static_cast<int32_t>(operands.kv_heads);
  params.group = static_cast<int32_t>(operands.q_heads / operands.kv_heads);
  params.head_dim = static_cast<int32_t>(operands.head_dim);
  params.scale = operands.scale;
  params.rows = extents.rows;
  params.chunks = extents.chunks;
  params.scores = extents.scores;
  params.segment_count = static_cast<int32_t>(extents.segment_count);
  params.diagonal_entries = static_cast<int32_t>(extents.diagonal_entries());
  int64_t first_row = 0;
  int64_t first_entry = 0;
  for (int64_t s = 0; s < extents.segment_count; ++s) {
    const EstimateSegment& segment = extents.segments[static_cast<std::size_t>(s)];
    params.segments[s] = {segment.position,
                          segment.frontier,
                          static_cast<int32_t>(first_row),
                          static_cast<int32_t>(segment.rows),
                          static_cast<int32_t>(first_entry),
                          static_cast<int32_t>(segment.step)};
    first_row += segment.rows;
    first_entry += params.segments[s].diagonal_entries();
  }
  params.slots_per_batch = static_cast<int32_t>(operands.estimated_heads());
  HeadSelection& selection = params.selection;
  selection.count = static_cast<int32_t>(operands.heads.size());
  for (int32_t local = 0; local < selection.count; ++local) {
    const int32_t head = operands.heads[static_cast<std::size_t>(local)];
    if (local == 0 || head / params.group != operands.heads[local - 1] / params.group) {
      selection.kv_first[selection.kv_count++] = local;
    }
    selection.heads[local] = head;
  }
  selection.kv_first[selection.kv_count] = selection.count;
  params.scratch = scratch;
  return params;
}

template <class Element>
void launch_passes(const EstimateParams& params, dim3 grid, int64_t total_rows,
                   cudaStream_t stream) {
  estimate_kernel<Element><<<grid, kThreads, 0, stream>>>(params, EstimatePass::kStats);
  check_launch("index estimate: stats pass");
  const auto combine_blocks = static_cast<unsigned>(ceil_div(total_rows, kCombineWarpsPerBlock));
  combine_rows_kernel<<<combine_blocks, kCombineWarpsPerBlock * kWarpSize, 0, stream>>>(params,
                                                                                      total_rows);
  check_launch("index estimate: combine rows");
  estimate_kernel<Element><<<grid, kThreads, 0, stream>>>(params, EstimatePass::kSums);
  check_launch("index estimate: sums pass");
}

}  // namespace

void launch_estimate(const EstimateOperands& operands, const EstimateExtents& extents,
                     const EstimateScratch& scratch, cudaStream_t stream,
                     const KeySpaceView& keys) {
  if (extents.scores == 0 || extents.slots == 0) return;
  EstimateParams params = make_params(operands, extents, scratch);
  params.keys = keys;
  const int64_t kv_blocks =
      params.selection.count > 0 ? params.selection.kv_count : operands.kv_heads;
  const dim3 grid(static_cast<unsigned>(extents.chunks),
                  static_cast<unsigned>(operands.batch * kv_blocks));
  const int64_t total_rows = extents.slots * extents.rows;
  if (operands.dtype == DType::kBFloat16) {
    launch_passes<__nv_bfloat16>(params, grid, total_rows, stream);
  } else {
    launch_passes<__half>(params, grid, total_rows, stream);
  }
  const dim3 gather_grid(static_cast<unsigned>(ceil_div(extents.scores, kGatherThreads)),
                         static_cast<unsigned>(extents.slots));
  gather_diagonals_kernel<<<gather_grid, kGatherThreads, 0, stream>>>(params);
  check_launch("index estimate: gather diagonals");
}

}  // namespace mmsparse::cuda::index
