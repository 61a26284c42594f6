// The last-q estimate of every head slot on the GPU (index_kernels.h), GQA native: one block per
// (range of kBlockChunks key chunks, batch element, KV head) loads its keys into shared memory once
// and scores the estimate rows of every query head of the group against them with tensor-core
// MMAs (m16n8k16, fp32 accumulation), a 64-row tile at a time whose query fragments stay in
// registers for all the block's chunks. Two passes over the same scores, because the softmax of a
// row needs its maximum and sum over all keys first:
//   stats pass    per row and chunk: max and sum of exp(score - max), reduced in registers across
//                 the four lanes that hold a row;  combine -> per row
//   sums pass     p = exp(score - max) / sum; per chunk the column sums (the block owns its keys)
//                 and per-chunk diagonal partials; a gather adds the partials of each diagonal in
//                 chunk order; and, for the grid search, the probabilities themselves when asked.
// Precision: the scores differ from the host's by the dot product's summation order; p is
// exp(score - max) times the float reciprocal of the row's sum (within 2 ulp of the host's
// rounded quotient); a chunk's partial sums add a row tile's 64 rows (or a chunk's 64 keys) in
// float, and everything across chunks and row tiles adds in double, rows and chunks in ascending
// order, so a run repeats its results bit for bit. The GPU tests compare with the host estimate
// at a relative tolerance and compare plans only where the top-k cut is clear.
// The estimate rows come in segments of consecutive queries (EstimateSegment): the last rows of q,
// or a Q- or 2D-boundary group's last rows, one segment per run of its modality; a segment's rows
// meet a chunk's keys on (rows - 1) * step + kChunk diagonals (step 1: each row's frontier one
// further; step 0: one frontier), so each segment has its own diagonal partials. A 2D-boundary
// pair reads the keys of one modality in compact coordinates (KeySpaceView): a chunk is 64
// consecutive compact keys, loaded from their original rows. The tile steps are in
// estimate_tiles.cuh; the block's steps, the kernels and their launches here.

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
#include "methods/estimate/estimate_tiles.cuh"
#include "methods/estimate/index_kernels.h"
#include "methods/registry.h"
#include "mmsparse/status.h"

namespace mmsparse::cuda::index {
namespace estimate_tiles {
namespace {

// The block's batch element, KV head and the local indices [member_begin, member_end) of the
// estimated query heads that read it.
struct BlockHeads {
  int32_t batch, kv_head, member_begin, member_end;
};

__device__ BlockHeads block_heads(const EstimateParams& params) {
  const HeadSelection& selection = params.selection;
  const bool selected = selection.count > 0;
  const int32_t kv_blocks = selected ? selection.kv_count : params.kv_heads;
  BlockHeads heads;
  heads.batch = static_cast<int32_t>(blockIdx.y) / kv_blocks;
  const int32_t kv_block = static_cast<int32_t>(blockIdx.y) % kv_blocks;
  heads.member_begin = selected ? selection.kv_first[kv_block] : kv_block * params.group;
  heads.member_end =
      selected ? selection.kv_first[kv_block + 1] : heads.member_begin + params.group;
  heads.kv_head = selected ? selection.heads[heads.member_begin] / params.group : kv_block;
  return heads;
}

// The block's keys [key_begin, key_begin + kBlockKeys) into shared rows; zeros beyond the scores
// (no row sees them).
__device__ void load_key_range(const EstimateParams& params, const BlockHeads& heads,
                               int64_t key_begin, uint16_t* keys) {
  const int row_vectors = params.head_dim / kVectorElements;
  const uint16_t* base =
      params.k + heads.batch * params.k_stride_batch + heads.kv_head * params.k_stride_head;
  for (int v = static_cast<int>(threadIdx.x); v < kBlockKeys * row_vectors; v += kThreads) {
    const int key = v / row_vectors;
    const int dim = v % row_vectors * kVectorElements;
    uint4 bits = {};
    if (key_begin + key < params.scores) {
      const int64_t original = params.keys.original(key_begin + key);
      bits = *reinterpret_cast<const uint4*>(base + original * params.k_stride_row + dim);
    }
    *reinterpret_cast<uint4*>(keys + key * kRowPitch + dim) = bits;
  }
}

// The query rows [row_begin, row_begin + tile_rows) of one head into shared rows; zeros below.
__device__ void stage_query_tile(const EstimateParams& params, const uint16_t* queries,
                                 int64_t row_begin, int tile_rows, uint16_t* staged) {
  const int row_vectors = params.head_dim / kVectorElements;
  for (int v = static_cast<int>(threadIdx.x); v < kTileRows * row_vectors; v += kThreads) {
    const int row = v / row_vectors;
    const int dim = v % row_vectors * kVectorElements;
    uint4 bits = {};
    if (row < tile_rows) {
      bits = *reinterpret_cast<const uint4*>(
          queries + params.position(row_begin + row) * params.q_stride_row + dim);
    }
    *reinterpret_cast<uint4*>(staged + row * kRowPitch + dim) = bits;
  }
}

// What every row tile of a block needs: its first chunk and how many it holds.
struct BlockChunks {
  int64_t first;
  int count;
};

// One row tile of one head against the block's chunks: stage its queries, hold them as fragments,
// then per chunk the stats (kStats) or the probabilities and their sums (kSums).
template <class Element, EstimatePass kPass>
__device__ void estimate_row_tile(const EstimateParams& params, EstimateShared& shared,
                                  const BlockHeads& heads, int32_t q_head, int64_t slot,
                                  const BlockChunks& chunks, int64_t row_begin) {
  const int tile_rows =
      static_cast<int>(min(static_cast<int64_t>(kTileRows), params.rows - row_begin));
  // Frontiers ascend with the rows, so the tile's last row sees the most keys.
  const int64_t seen_keys = params.frontier(row_begin + tile_rows - 1);
  const int seen_chunks =
      static_cast<int>(min(static_cast<int64_t>(chunks.count),
                           max(int64_t{0}, ceil_div(seen_keys, kChunk) - chunks.first)));
  if (kPass == EstimatePass::kStats) {
    for (int c = seen_chunks; c < chunks.count; ++c) {
      write_unseen_chunk_stats(params, slot, row_begin, tile_rows, chunks.first + c);
    }
  }
  if (seen_chunks == 0) return;
  const Lane lane;
  const int steps = params.head_dim / kMmaDepth;
  __syncthreads();  // the previous tile's queries and values are consumed
  stage_query_tile(params,
                   params.q + heads.batch * params.q_stride_batch + q_head * params.q_stride_head,
                   row_begin, tile_rows, shared.tile.queries);
  __syncthreads();
  QueryFragments fragments;
  load_query_fragments(shared.tile.queries, lane, steps, fragments);
  const LaneRows rows = lane_rows<kPass>(params, lane, slot, row_begin, tile_rows);
  for (int c = 0; c < seen_chunks; ++c) {
    const int64_t chunk = chunks.first + c;
    float scores[kKeyTiles][kFragmentElements];
    score_chunk<Element>(fragments, shared.keys + c * kChunk * kRowPitch, lane, steps, scores);
    if (kPass == EstimatePass::kStats) {
      write_chunk_stats(params, lane, rows, scores, slot, row_begin, tile_rows, chunk);
      continue;
    }
    __syncthreads();  // the queries (first chunk) or the previous chunk's values are consumed
    store_chunk_probabilities(params, lane, rows, scores, chunk * kChunk, shared.tile.values);
    __syncthreads();
    if (params.scratch.probabilities != nullptr) {
      copy_chunk_probabilities(params, shared.tile.values, slot, row_begin, tile_rows,
                               chunk * kChunk);
    }
    add_chunk_columns(shared.tile.values, tile_rows, shared.columns + c * kChunk);
    add_chunk_diagonals(params, shared.tile.values, row_begin, tile_rows,
                        params.scratch.diagonal_partials +
                            (slot * params.chunks + chunk) * params.diagonal_entries);
  }
}

// Sums pass, before a head's row tiles: its column sums of the block's keys and its diagonal
// partials of the block's chunks start at zero (the row tiles' barriers order the adds after).
__device__ void begin_head_sums(const EstimateParams& params, EstimateShared& shared, int64_t slot,
                                const BlockChunks& chunks) {
  __syncthreads();  // the previous head's column sums are written out
  const int x = static_cast<int>(threadIdx.x);
  for (int i = x; i < kBlockKeys; i += kThreads) shared.columns[i] = 0.0;
  const int64_t entries = static_cast<int64_t>(chunks.count) * params.diagonal_entries;
  double* partials = params.scratch.diagonal_partials +
                     (slot * params.chunks + chunks.first) * params.diagonal_entries;
  for (int64_t u = x; u < entries; u += kThreads) partials[u] = 0.0;
}

// Sums pass, after a head's row tiles: its column sums of the block's keys.
__device__ void write_head_columns(const EstimateParams& params, const EstimateShared& shared,
                                   int64_t slot, const BlockChunks& chunks) {
  __syncthreads();
  const int64_t key_begin = chunks.first * kChunk;
  for (int x = static_cast<int>(threadIdx.x); x < chunks.count * kChunk; x += kThreads) {
    if (key_begin + x < params.scores) {
      params.scratch.column_sums[slot * params.scores + key_begin + x] = shared.columns[x];
    }
  }
}

// One block: key chunks [blockIdx.x * kBlockChunks, + kBlockChunks) of the blockIdx.y-th (batch
// element, used KV head), every estimate row of every estimated query head of its GQA group.
template <class Element, EstimatePass kPass>
__global__ void __launch_bounds__(kThreads, kMinBlocksPerSm)
    estimate_kernel(const EstimateParams params) {
  extern __shared__ __align__(16) unsigned char shared_memory[];
  EstimateShared& shared = *reinterpret_cast<EstimateShared*>(shared_memory);
  const BlockHeads heads = block_heads(params);
  BlockChunks chunks;
  chunks.first = static_cast<int64_t>(blockIdx.x) * kBlockChunks;
  chunks.count =
      static_cast<int>(min(static_cast<int64_t>(kBlockChunks), params.chunks - chunks.first));
  load_key_range(params, heads, chunks.first * kChunk, shared.keys);  // a tile's barrier follows
  for (int32_t member = heads.member_begin; member < heads.member_end; ++member) {
    const int32_t q_head = params.selection.count > 0 ? params.selection.heads[member] : member;
    const int64_t slot = static_cast<int64_t>(heads.batch) * params.slots_per_batch + member;
    if (kPass == EstimatePass::kSums) begin_head_sums(params, shared, slot, chunks);
    for (int64_t row_begin = 0; row_begin < params.rows; row_begin += kTileRows) {
      estimate_row_tile<Element, kPass>(params, shared, heads, q_head, slot, chunks, row_begin);
    }
    if (kPass == EstimatePass::kSums) write_head_columns(params, shared, slot, chunks);
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

// One pass's kernel, its shared memory above the static 48 KB (set per launch: the attribute is
// per device).
template <class Element, EstimatePass kPass>
void launch_estimate_pass(const EstimateParams& params, dim3 grid, cudaStream_t stream,
                          const char* what) {
  const auto kernel = estimate_kernel<Element, kPass>;
  constexpr int kSharedBytes = static_cast<int>(sizeof(EstimateShared));
  check_cuda(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSharedBytes),
      what);
  kernel<<<grid, kThreads, kSharedBytes, stream>>>(params);
  check_launch(what);
}

template <class Element>
void launch_passes(const EstimateParams& params, dim3 grid, int64_t total_rows,
                   cudaStream_t stream) {
  launch_estimate_pass<Element, EstimatePass::kStats>(params, grid, stream,
                                                      "index estimate: stats pass");
  const auto combine_blocks = static_cast<unsigned>(ceil_div(total_rows, kCombineWarpsPerBlock));
  combine_rows_kernel<<<combine_blocks, kCombineWarpsPerBlock * kWarpSize, 0, stream>>>(params,
                                                                                        total_rows);
  check_launch("index estimate: combine rows");
  launch_estimate_pass<Element, EstimatePass::kSums>(params, grid, stream,
                                                     "index estimate: sums pass");
}

// Every kernel of one estimate, in stream order.
void launch_estimate_kernels(const EstimateOperands& operands, const EstimateExtents& extents,
                             const EstimateScratch& scratch, cudaStream_t stream,
                             const KeySpaceView& keys) {
  if (extents.scores == 0 || extents.slots == 0) return;
  EstimateParams params = make_params(operands, extents, scratch);
  params.keys = keys;
  const int64_t kv_blocks =
      params.selection.count > 0 ? params.selection.kv_count : operands.kv_heads;
  const dim3 grid(static_cast<unsigned>(ceil_div(extents.chunks, kBlockChunks)),
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

}  // namespace
}  // namespace estimate_tiles

void launch_estimate(const EstimateOperands& operands, const EstimateExtents& extents,
                     const EstimateScratch& scratch, cudaStream_t stream,
                     const KeySpaceView& keys) {
  estimate_tiles::launch_estimate_kernels(operands, extents, scratch, stream, keys);
}

}  // namespace mmsparse::cuda::index
