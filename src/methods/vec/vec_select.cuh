#pragma once
// VecAttention's selection kernels (vec_device.cu's design comment): the pooled queries, and
// TilingSelect + minS on tensor cores in one score pass that stores each pooled block's keep mask
// per key tile of 16 (vec_runs.cuh cuts those masks into spans and columns). Included by
// vec_device.cu only, which launches them.

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <limits>

#include "cuda/attention/sm80/ptx.cuh"
#include "cuda/common/math.h"
#include "cuda/runtime/plan_view.cuh"
#include "methods/estimate/index_builders.h"
#include "methods/vec/vec.h"

namespace mmsparse::cuda::vec_kernels {

constexpr int kSelectWarps = 8;
constexpr int kSelectThreads = kSelectWarps * kWarpSize;
constexpr int kMmaRows = 16;   // pooled blocks per warp: the MMA's M
constexpr int kMmaK = 16;      // head_dim per MMA
constexpr int kMmaN = 8;       // keys per MMA
constexpr int kQuadLanes = 4;  // lanes that share an accumulator row
constexpr int kCtaRows = kSelectWarps * kMmaRows;
constexpr int kTileKeys = static_cast<int>(detail::kVecKeyTileKeys);
constexpr int kChunkKeys = 64;  // keys per shared-memory stage
constexpr int kChunkTiles = kChunkKeys / kTileKeys;
static_assert(kChunkTiles == kQuadLanes, "each lane of a row's quad stores one tile of a chunk");
// Chunks in shared memory: the one scored and two in flight, so a copy has two chunks' scoring to
// land from L2. Three stages exceed the 48 KB of static shared memory: the launch passes them as
// dynamic shared memory (select_shared_bytes).
constexpr int kStages = 3;
constexpr int kMaxHeadDim = 128;  // make_estimate_operands admits head_dim <= 128
constexpr int kMaxKSteps = kMaxHeadDim / kMmaK;
// Padding a key row by 16 bytes shifts consecutive rows by four banks: ldmatrix conflict-free.
constexpr int kKeyRowPitch = kMaxHeadDim + 8;
// Keys per split before rounding to whole groups: enough CTAs to fill an H100 at 32K+ tokens,
// few enough that each CTA's pipeline runs long.
constexpr int64_t kSplitKeys = 4096;
// At most ~128 registers per thread: two CTAs of the score pass per SM, latency hidden by 16 warps.
constexpr int kSelectMinBlocks = 2;
constexpr int kPoolThreads = 128;

// The query heads a plan's head slots read (EstimateOperands::heads), by value.
struct HeadList {
  int32_t heads[kMaxSelectedHeads];
  int32_t count;  // 0: every query head
};

struct VecKernelParams {
  const void* q;  // [batch, q_len, q_heads, head_dim], last dimension contiguous
  int64_t q_stride_batch, q_stride_row, q_stride_head;
  const void* k;  // [batch, kv_len, kv_heads, head_dim], last dimension contiguous
  int64_t k_stride_batch, k_stride_row, k_stride_head;
  int32_t heads;  // plan heads (estimated query heads)
  int32_t group;  // query heads per KV head
  int32_t head_dim;
  int32_t q_len, kv_len, causal_offset;
  int32_t pooling, blocks, group_tiles;
  int32_t tile_blocks, tiles;  // pooled blocks per plan tile (vec_tile_blocks), tiles per slot
  int32_t split_keys, splits;  // score pass: keys per split (whole groups), splits per block
  int32_t causal;
  float scale;
  // log(alpha) as the selection compares it (VecParams::log_alpha): one for every head
  // (alpha_heads 1), or one per plan head (alpha_heads = heads: the vec heads of a per-head config,
  // built as one section, may differ in alpha).
  float log_alphas[kMaxSelectedHeads];
  int32_t alpha_heads;
  HeadList selection;
  void* pooled;  // [slots, blocks, head_dim] of the input dtype
  // [slots * blocks, mask_pitch]: bit i of entry t is key 16 t + i, kept by the selection (a
  // candidate at or above the threshold). The score pass writes a block's tiles from its first
  // non-sink tile up to its last candidate's; vec_runs.cuh reads only those.
  uint16_t* masks;
  int32_t mask_pitch;             // key tiles per row of masks, even (a run-pass word is two tiles)
  int64_t* column_counts;         // [slots * tiles + 1] column keys per plan tile; the last 0
  const int64_t* column_offsets;  // [slots * tiles + 1] their exclusive sum (write pass)
  int64_t* span_counts;           // [slots * tiles + 1] span records per plan tile; the last 0
  const int64_t* span_offsets;    // [slots * tiles + 1] their exclusive sum (write pass)
  uint32_t* tile_keys;            // [slots * tiles] keys per plan tile (the schedule's weight)
  int32_t* columns;               // the plan's columns section (write pass)
  SpanRecord* spans;              // the plan's spans section (write pass)
};

// The host's VecBlock (vec.cpp), for the kernels.
struct BlockKeys {
  int32_t sink_end, diagonal_begin, diagonal_end, candidate_end;
  __device__ bool is_candidate(int32_t key) const {
    return key >= sink_end && key < candidate_end && (key < diagonal_begin || key >= diagonal_end);
  }
};

__device__ inline int32_t clamp_key(int64_t key, int32_t kv_len) {
  return static_cast<int32_t>(key < 0 ? 0 : (key > kv_len ? kv_len : key));
}

// Query rows [row_begin, row_end)'s keys (vec.cpp's vec_rows_block): a pooled block's, or a plan
// tile's of whole blocks.
__device__ inline BlockKeys rows_keys(const VecKernelParams& p, int64_t row_begin,
                                      int64_t row_end) {
  BlockKeys keys;
  keys.sink_end = clamp_key(p.pooling, p.kv_len);
  keys.diagonal_begin = clamp_key(row_begin + p.causal_offset, p.kv_len);
  keys.diagonal_end = clamp_key(row_end + p.causal_offset, p.kv_len);
  keys.candidate_end = p.causal != 0 ? keys.diagonal_begin : p.kv_len;
  return keys;
}

__device__ inline BlockKeys block_keys(const VecKernelParams& p, int32_t block) {
  const int64_t row_begin = static_cast<int64_t>(block) * p.pooling;
  return rows_keys(p, row_begin, min(static_cast<int64_t>(p.q_len), row_begin + p.pooling));
}

__device__ inline int32_t query_head(const VecKernelParams& p, int32_t head) {
  return p.selection.count > 0 ? p.selection.heads[head] : head;
}

__device__ inline float to_float(__nv_bfloat16 value) { return __bfloat162float(value); }
__device__ inline float to_float(__half value) { return __half2float(value); }
template <class Element>
__device__ Element from_float(float value);
template <>
__device__ inline __nv_bfloat16 from_float<__nv_bfloat16>(float value) {
  return __float2bfloat16_rn(value);
}
template <>
__device__ inline __half from_float<__half>(float value) {
  return __float2half_rn(value);
}

// Block (blockIdx.x, slot blockIdx.y): the fp32 sum of its rows in row order over the row count,
// rounded to the input dtype (the MMA's operand).
template <class Element>
__global__ void __launch_bounds__(kPoolThreads) pool_kernel(const VecKernelParams p) {
  const int32_t block = static_cast<int32_t>(blockIdx.x);
  const int32_t slot = static_cast<int32_t>(blockIdx.y);
  const int32_t batch = slot / p.heads;
  const int32_t head = query_head(p, slot % p.heads);
  const int64_t row_begin = static_cast<int64_t>(block) * p.pooling;
  const int64_t row_end = min(static_cast<int64_t>(p.q_len), row_begin + p.pooling);
  const auto* q =
      static_cast<const Element*>(p.q) + batch * p.q_stride_batch + head * p.q_stride_head;
  auto* pooled = static_cast<Element*>(p.pooled);
  for (int d = static_cast<int>(threadIdx.x); d < p.head_dim; d += kPoolThreads) {
    float sum = 0.0f;
    for (int64_t row = row_begin; row < row_end; ++row) {
      sum = __fadd_rn(sum, to_float(q[row * p.q_stride_row + d]));
    }
    pooled[(static_cast<int64_t>(slot) * p.blocks + block) * p.head_dim + d] =
        from_float<Element>(__fdiv_rn(sum, static_cast<float>(row_end - row_begin)));
  }
}

// The head_dim steps of kMmaK a kernel runs: kKSteps when a launch fixes them at compile time
// (head_dim 128: no per-step branch, so loads hoist past MMAs), else head_dim / kMmaK (0).
template <int kKSteps>
__device__ inline int head_dim_steps(const VecKernelParams& p) {
  static_assert(kKSteps >= 0 && kKSteps <= kMaxKSteps, "0 (from p.head_dim) up to kMaxKSteps");
  return kKSteps > 0 ? kKSteps : p.head_dim / kMmaK;
}

// The key rows of one shared-memory stage.
template <class Element>
using KeyStage = Element[kChunkKeys][kKeyRowPitch];

template <class Element>
constexpr int select_shared_bytes() {
  return kStages * static_cast<int>(sizeof(KeyStage<Element>));
}

// Queues the copy of keys [chunk_begin, chunk_begin + kChunkKeys) into `stage`; keys past kv_len
// are zero-filled (no row is a candidate there).
template <class Element, int kKSteps>
__device__ void load_key_chunk(const VecKernelParams& p, const Element* keys, int32_t chunk_begin,
                               KeyStage<Element>& stage) {
  constexpr int kVector = kCopyBytes / static_cast<int>(sizeof(Element));
  const int vectors_per_key = head_dim_steps<kKSteps>(p) * kMmaK / kVector;
  for (int i = static_cast<int>(threadIdx.x); i < kChunkKeys * vectors_per_key;
       i += kSelectThreads) {
    const int row = i / vectors_per_key;
    const int column = (i % vectors_per_key) * kVector;
    const int32_t key = chunk_begin + row;
    const bool valid = key < p.kv_len;
    const Element* source =
        keys + (valid ? static_cast<int64_t>(key) * p.k_stride_row : 0) + column;
    copy_async_16(shared_address(&stage[row][column]), source, valid);
  }
  commit_async_copies();
}

// The A fragments of this warp's 16 pooled blocks from `first_row` (rows past the last block are
// zero): a[s] covers head_dim [16 s, 16 s + 16).
template <class Element>
__device__ void load_pooled_fragments(const VecKernelParams& p, int32_t slot, int32_t first_row,
                                      uint32_t (&a)[kMaxKSteps][4]) {
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  const int32_t rows[2] = {first_row + lane / kQuadLanes, first_row + lane / kQuadLanes + kMmaN};
  const auto* pooled = static_cast<const Element*>(p.pooled);
  const int k_steps = p.head_dim / kMmaK;
#pragma unroll
  for (int s = 0; s < kMaxKSteps; ++s) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int32_t row = rows[i % 2];
      const int column = s * kMmaK + (lane % kQuadLanes) * 2 + (i / 2) * kMmaN;
      a[s][i] = 0;
      if (s < k_steps && row < p.blocks) {
        a[s][i] = *reinterpret_cast<const uint32_t*>(
            pooled + (static_cast<int64_t>(slot) * p.blocks + row) * p.head_dim + column);
      }
    }
  }
}

// The running state of the two pooled blocks a lane holds a row of (rows lane / 4 and lane / 4 +
// 8 of its warp's 16): their key ranges and running maxima.
struct RowState {
  BlockKeys keys[2];
  float running[2];
  bool active[2];  // a pooled block (rows past the last block only pad the MMA)
};

// The scores of one chunk of kChunkKeys keys (a stage) against the warp's 16 pooled blocks, fp32,
// unscaled: acc[t][j] holds the chunk's tile t, keys 8 j .. 8 j + 7 of it (this lane: 2 (lane % 4)
// and the next) for rows lane / 4 (acc[t][j][0..1]) and lane / 4 + 8 (acc[t][j][2..3]). Each score
// sums its head_dim steps in order, as one tile alone would; the chunk's 2 kChunkTiles
// accumulators are independent, so a warp keeps that many MMAs in flight instead of one chain.
template <class Element, int kKSteps>
__device__ void score_chunk(const VecKernelParams& p, const KeyStage<Element>& stage,
                            const uint32_t (&a)[kMaxKSteps][4], float (&acc)[kChunkTiles][2][4]) {
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  // ldmatrix: lanes 0-7 address keys 0-7 at dims 0-7, 8-15 keys 0-7 at dims 8-15, 16-23 keys
  // 8-15 at dims 0-7, 24-31 keys 8-15 at dims 8-15: the B fragments of both key halves of a tile.
  const int matrix = lane / 8;
  const Element* address_row = stage[(matrix / 2) * kMmaN + lane % 8] + (matrix % 2) * kMmaN;
#pragma unroll
  for (int t = 0; t < kChunkTiles; ++t) {
#pragma unroll
    for (int j = 0; j < 2; ++j) {
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[t][j][i] = 0.0f;
    }
  }
  const int k_steps = head_dim_steps<kKSteps>(p);
#pragma unroll
  for (int s = 0; s < kMaxKSteps; ++s) {
    if (s < k_steps) {
      uint32_t b[kChunkTiles][4];
#pragma unroll
      for (int t = 0; t < kChunkTiles; ++t) {
        load_matrix_x4(b[t],
                       shared_address(address_row + t * kTileKeys * kKeyRowPitch + s * kMmaK));
      }
#pragma unroll
      for (int t = 0; t < kChunkTiles; ++t) {
        TensorCore<Element>::mma(acc[t][0], a[s], b[t][0], b[t][1]);
        TensorCore<Element>::mma(acc[t][1], a[s], b[t][2], b[t][3]);
      }
    }
  }
}

// Key ranges in which every key is a candidate of each of a warp's pooled blocks: past the sinks,
// below the first block's diagonal, and (not causal) from the last block's diagonal end to
// kv_len. Diagonals never move left as the block grows, so these hold for every block between.
// A chunk inside one skips the per-key range test. The same in every lane of the warp.
struct CandidateRanges {
  int32_t sink_end, below_end, above_begin, above_end;
  __device__ bool hold(int32_t begin, int32_t end) const {
    return begin >= sink_end && (end <= below_end || (begin >= above_begin && end <= above_end));
  }
};

// The ranges of the warp's blocks [first_row, first_row + kMmaRows) that exist.
__device__ inline CandidateRanges warp_candidate_ranges(const VecKernelParams& p,
                                                        int32_t first_row) {
  const BlockKeys first = block_keys(p, first_row);
  const BlockKeys last = block_keys(p, min(first_row + kMmaRows, p.blocks) - 1);
  return {first.sink_end, first.diagonal_begin, last.diagonal_end, p.causal != 0 ? 0 : p.kv_len};
}

// Filters one chunk (from `chunk_begin`, score_chunk's acc) for the lane's two rows as vec.cpp
// does per tile: each tile's maximum over the row's candidates (within the lane quad that holds
// the row), the running maximum over the group (restarting where a group starts), and the keep
// test score - m >= log(alpha) on candidates. kAllCandidates: the whole chunk lies in the rows'
// CandidateRanges. mine[h]: the keep mask of the chunk's tile lane % 4 for row h, bit i for its
// key i.
template <bool kAllCandidates>
__device__ void filter_chunk(const VecKernelParams& p, float log_alpha, int32_t chunk_begin,
                             float (&acc)[kChunkTiles][2][4], RowState& state,
                             uint32_t (&mine)[2]) {
  const int quad_lane = static_cast<int>(threadIdx.x) % kQuadLanes;
  // Score i of a (tile, row) pair: acc[t][i / 2][2 h + i % 2], key offset key_offset(i) in the
  // tile.
  const auto key_offset = [quad_lane](int i) { return (i / 2) * kMmaN + quad_lane * 2 + i % 2; };
  float tile_max[kChunkTiles][2];
#pragma unroll
  for (int t = 0; t < kChunkTiles; ++t) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      tile_max[t][h] = -std::numeric_limits<float>::infinity();
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        float& score = acc[t][i / 2][2 * h + i % 2];
        score = __fmul_rn(score, p.scale);
        if (kAllCandidates ||
            state.keys[h].is_candidate(chunk_begin + t * kTileKeys + key_offset(i))) {
          tile_max[t][h] = fmaxf(tile_max[t][h], score);
        }
      }
    }
  }
#pragma unroll
  for (int offset = 1; offset < kQuadLanes; offset *= 2) {
#pragma unroll
    for (int t = 0; t < kChunkTiles; ++t) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        tile_max[t][h] =
            fmaxf(tile_max[t][h], __shfl_xor_sync(kFullWarpMask, tile_max[t][h], offset));
      }
    }
  }
  // Row h's kept bits of tiles 2 u and 2 u + 1 in the low and high halves of pairs[h][u]: one
  // shuffle ORs two tiles' bits across the quad.
  constexpr int kPairs = kChunkTiles / 2;
  uint32_t pairs[2][kPairs] = {};
  int32_t group_position = (chunk_begin / kTileKeys) % p.group_tiles;
#pragma unroll
  for (int t = 0; t < kChunkTiles; ++t) {
    const bool group_starts = group_position == 0;
    group_position = group_position + 1 == p.group_tiles ? 0 : group_position + 1;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      if (group_starts) state.running[h] = -std::numeric_limits<float>::infinity();
      state.running[h] = fmaxf(state.running[h], tile_max[t][h]);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int bit = key_offset(i);
        const bool candidate =
            kAllCandidates || state.keys[h].is_candidate(chunk_begin + t * kTileKeys + bit);
        if (candidate && __fsub_rn(acc[t][i / 2][2 * h + i % 2], state.running[h]) >= log_alpha) {
          pairs[h][t / 2] |= 1u << (bit + kTileKeys * (t % 2));
        }
      }
    }
  }
#pragma unroll
  for (int offset = 1; offset < kQuadLanes; offset *= 2) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#pragma unroll
      for (int u = 0; u < kPairs; ++u) {
        pairs[h][u] |= __shfl_xor_sync(kFullWarpMask, pairs[h][u], offset);
      }
    }
  }
  static_assert(kPairs == 2, "lane q of a quad takes pair q / 2");
  constexpr uint32_t kTileMask = (1u << kTileKeys) - 1u;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const uint32_t pair = quad_lane / 2 == 0 ? pairs[h][0] : pairs[h][1];
    mine[h] = (pair >> (kTileKeys * (quad_lane % 2))) & kTileMask;
  }
}

// The largest candidate_end of a warp's rows (its keys stop there).
__device__ inline int32_t warp_key_end(const RowState& state) {
  int32_t end = max(state.keys[0].candidate_end, state.keys[1].candidate_end);
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    end = max(end, __shfl_xor_sync(kFullWarpMask, end, offset));
  }
  return end;
}

// The scores of kCtaRows pooled blocks of slot blockIdx.x, from block blockIdx.z * kCtaRows,
// within key split blockIdx.y, filtered into the blocks' keep masks (p.masks): one pass, every
// score computed once. Per chunk of kChunkTiles tiles, lane q of a row's quad keeps the chunk's
// tile q and stores it: each row's chunk is one 8-byte run of masks. Slots vary fastest in launch
// order, so the query heads of a KV head scan the same keys side by side and share them in L2.
template <class Element, int kKSteps>
__global__ void __launch_bounds__(kSelectThreads, kSelectMinBlocks)
    select_kernel(const VecKernelParams p) {
  extern __shared__ __align__(16) unsigned char select_shared[];
  auto* stages = reinterpret_cast<KeyStage<Element>*>(select_shared);  // [kStages]
  const int32_t slot = static_cast<int32_t>(blockIdx.x);
  const int32_t split = static_cast<int32_t>(blockIdx.y);
  const int32_t first_block = static_cast<int32_t>(blockIdx.z) * kCtaRows;
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  const int quad_lane = lane % kQuadLanes;
  const int warp = static_cast<int>(threadIdx.x) / kWarpSize;
  const int32_t warp_row = first_block + warp * kMmaRows;
  const int32_t rows[2] = {warp_row + lane / kQuadLanes, warp_row + lane / kQuadLanes + kMmaN};
  const int32_t split_begin = split * p.split_keys;
  const int32_t window_end = min(p.kv_len, split_begin + p.split_keys);
  RowState state;
  uint16_t* row_masks[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    state.active[h] = rows[h] < p.blocks;
    state.keys[h] = block_keys(p, min(rows[h], p.blocks - 1));
    if (!state.active[h]) state.keys[h].candidate_end = 0;
    state.running[h] = -std::numeric_limits<float>::infinity();
    row_masks[h] = p.masks + (static_cast<int64_t>(slot) * p.blocks + min(rows[h], p.blocks - 1)) *
                                 p.mask_pitch;
  }
  // The CTA's keys: this split, from the tile holding the first non-sink key, up to its last row's
  // candidates (candidate_end never decreases with the block).
  const int32_t scan_begin = max(split_begin, state.keys[0].sink_end / kTileKeys * kTileKeys);
  const int32_t scan_end =
      min(window_end, block_keys(p, min(first_block + kCtaRows, p.blocks) - 1).candidate_end);
  const int32_t warp_end = min(scan_end, warp_key_end(state));
  if (scan_begin >= scan_end) return;
  const int32_t batch = slot / p.heads;
  const int32_t kv_head = query_head(p, slot % p.heads) / p.group;
  const float log_alpha = p.log_alphas[p.alpha_heads == 1 ? 0 : slot % p.heads];
  const auto* keys =
      static_cast<const Element*>(p.k) + batch * p.k_stride_batch + kv_head * p.k_stride_head;
  uint32_t a[kMaxKSteps][4];
  load_pooled_fragments<Element>(p, slot, warp_row, a);
  const CandidateRanges full = warp_candidate_ranges(p, warp_row);
  const int32_t chunks = static_cast<int32_t>(ceil_div(scan_end - scan_begin, kChunkKeys));
  // One copy group per chunk, an empty one past the last, so that "all but kStages - 2 groups
  // landed" always means "chunk c landed".
  for (int32_t c = 0; c < kStages - 1; ++c) {
    if (c < chunks) {
      load_key_chunk<Element, kKSteps>(p, keys, scan_begin + c * kChunkKeys, stages[c]);
    } else {
      commit_async_copies();
    }
  }
  for (int32_t c = 0; c < chunks; ++c) {
    const int32_t chunk_begin = scan_begin + c * kChunkKeys;
    wait_async_copies<kStages - 2>();
    // Chunk c is in its stage for every warp, and every warp is done with chunk c - 1's stage:
    // chunk c + kStages - 1's copy goes there and lands while the chunks before it are scored.
    __syncthreads();
    const int32_t ahead = c + kStages - 1;
    if (ahead < chunks) {
      load_key_chunk<Element, kKSteps>(p, keys, scan_begin + ahead * kChunkKeys,
                                       stages[ahead % kStages]);
    } else {
      commit_async_copies();
    }
    // A chunk's tiles past warp_end (scored with the rest of it) are not stored, and raise no
    // maximum a stored tile reads: below the split's end they hold no candidate of the warp's
    // rows, past it they lie in a later group (splits hold whole groups).
    if (chunk_begin >= warp_end) continue;
    float acc[kChunkTiles][2][4];
    score_chunk<Element, kKSteps>(p, stages[c % kStages], a, acc);
    uint32_t mine[2];  // this lane's tile of the chunk (tile quad_lane)
    if (full.hold(chunk_begin, chunk_begin + kChunkKeys)) {
      filter_chunk<true>(p, log_alpha, chunk_begin, acc, state, mine);
    } else {
      filter_chunk<false>(p, log_alpha, chunk_begin, acc, state, mine);
    }
    // Tiles below warp_end lie below kv_len: within the row's mask_pitch.
    const int32_t my_tile_begin = chunk_begin + quad_lane * kTileKeys;
    if (my_tile_begin < warp_end) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        if (state.active[h]) {
          row_masks[h][my_tile_begin / kTileKeys] = static_cast<uint16_t>(mine[h]);
        }
      }
    }
  }
}

}  // namespace mmsparse::cuda::vec_kernels
