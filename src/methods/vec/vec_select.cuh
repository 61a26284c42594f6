#pragma once
// VecAttention's selection kernels (vec_device.cu's design comment): TilingSelect + minS on tensor
// cores in one score pass that stores each pooled block's keep mask per key tile of 16
// (vec_runs.cuh cuts those masks into spans and columns). Included by vec_device.cu only, which
// launches them.

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
// A chunk is scored in two halves, so that one half's MMAs run while the other half's scores are
// filtered (select_kernel's loop): the tensor pipe and the filter's instructions overlap within a
// warp, with the same 32 accumulator registers as one whole chunk.
constexpr int kHalfTiles = kChunkTiles / 2;
// Chunks in shared memory: the one scored and two in flight, so a copy has two chunks' scoring to
// land from L2. Three stages exceed the 48 KB of static shared memory: the launch passes them as
// dynamic shared memory (select_shared_bytes).
constexpr int kStages = 3;
constexpr int kMaxHeadDim = 128;  // make_estimate_operands admits head_dim <= 128
constexpr int kMaxKSteps = kMaxHeadDim / kMmaK;
// Padding a key row by 16 bytes shifts consecutive rows by four banks: ldmatrix conflict-free.
constexpr int kKeyRowPitch = kMaxHeadDim + 8;
// Keys per split before rounding to whole groups: the longest split the launch considers (few
// CTAs, each pipeline running long); vec_device.cu's split_key_count halves it up to
// kSplitHalvings times where more, shorter CTAs fill the device's last round better.
constexpr int64_t kSplitKeys = 4096;
constexpr int kSplitHalvings = 2;
// A CTA's start (its pooled fragments' load, the pipeline's fill) in chunk-times, as the split
// choice models it: about one chunk's copy latency plus the fragments' load from L2.
constexpr int64_t kCtaStartChunks = 2;
// At most ~128 registers per thread: two CTAs of the score pass per SM, latency hidden by 16 warps.
constexpr int kSelectMinBlocks = 2;

// The query heads a plan's head slots read (EstimateOperands::heads), by value.
struct HeadList {
  int32_t heads[kMaxSelectedHeads];
  int32_t count;  // 0: every query head
};

// A plan tile's column keys and span records: the count pass's per-tile counts and, after one
// exclusive scan of these pairs, the tile's first column and span in the plan (one scan and one
// copy of both totals instead of two of each).
struct RecordCounts {
  int64_t columns;
  int64_t spans;
  __host__ __device__ RecordCounts operator+(const RecordCounts& other) const {
    return {columns + other.columns, spans + other.spans};
  }
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
  // kChunkTiles % group_tiles: how far a score-pass chunk moves a tile's position in its group
  // (read from the constant bank, where a per-thread copy cost the wgmma pass a register).
  int32_t group_chunk_step;
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
  int32_t mask_pitch;           // key tiles per row of masks, even (a run-pass word is two tiles)
  RecordCounts* counts;         // [slots * tiles + 1] per plan tile (count pass); the last zero
  const RecordCounts* offsets;  // [slots * tiles + 1] their exclusive sum (write pass, records)
  uint32_t* tile_keys;          // [slots * tiles] keys per plan tile (the schedule's weight)
  int32_t* columns;             // the plan's columns section (write pass)
  SpanRecord* spans;            // the plan's spans section (write pass)
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
// are zero-filled (no row is a candidate there). With head_dim fixed (kKSteps > 0) each thread
// copies one column of every kKeysPerPass-th key: its address advances by a constant, with no
// division or loop test per copy.
template <class Element, int kKSteps>
__device__ void load_key_chunk(const VecKernelParams& p, const Element* keys, int32_t chunk_begin,
                               KeyStage<Element>& stage) {
  constexpr int kVector = kCopyBytes / static_cast<int>(sizeof(Element));
  if constexpr (kKSteps > 0) {
    constexpr int kVectorsPerKey = kKSteps * kMmaK / kVector;
    static_assert(kSelectThreads % kVectorsPerKey == 0, "whole keys per pass of the thread block");
    constexpr int kKeysPerPass = kSelectThreads / kVectorsPerKey;
    static_assert(kChunkKeys % kKeysPerPass == 0, "whole passes per chunk");
    const int row = static_cast<int>(threadIdx.x) / kVectorsPerKey;
    const int column = static_cast<int>(threadIdx.x) % kVectorsPerKey * kVector;
    const Element* source =
        keys + static_cast<int64_t>(chunk_begin + row) * p.k_stride_row + column;
#pragma unroll
    for (int pass = 0; pass < kChunkKeys / kKeysPerPass; ++pass) {
      const bool valid = chunk_begin + row + pass * kKeysPerPass < p.kv_len;
      copy_async_16(shared_address(&stage[row + pass * kKeysPerPass][column]),
                    valid ? source + pass * kKeysPerPass * p.k_stride_row : keys, valid);
    }
  } else {
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
  // The next tile's position in its group of the running maximum (0: the group starts there),
  // the same in every lane: the warp filters its tiles in key order from the scan's first.
  int32_t group_position;
};

// The scores of one half of a chunk (a stage): its tiles kHalfTiles * half + t, against the warp's
// 16 pooled blocks, fp32, unscaled: acc[t][j] holds keys 8 j .. 8 j + 7 of that tile (this lane:
// 2 (lane % 4) and the next) for rows lane / 4 (acc[t][j][0..1]) and lane / 4 + 8
// (acc[t][j][2..3]). Each score sums its head_dim steps in order, as one tile alone would; the
// half's 2 kHalfTiles accumulators are independent, so a warp keeps that many MMAs in flight
// instead of one chain.
template <class Element, int kKSteps>
__device__ void score_half_chunk(const VecKernelParams& p, const KeyStage<Element>& stage, int half,
                                 const uint32_t (&a)[kMaxKSteps][4],
                                 float (&acc)[kHalfTiles][2][4]) {
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  // ldmatrix: lanes 0-7 address keys 0-7 at dims 0-7, 8-15 keys 0-7 at dims 8-15, 16-23 keys
  // 8-15 at dims 0-7, 24-31 keys 8-15 at dims 8-15: the B fragments of both key halves of a tile.
  const int matrix = lane / 8;
  const Element* address_row =
      stage[half * kHalfTiles * kTileKeys + (matrix / 2) * kMmaN + lane % 8] + (matrix % 2) * kMmaN;
#pragma unroll
  for (int t = 0; t < kHalfTiles; ++t) {
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
      uint32_t b[kHalfTiles][4];
#pragma unroll
      for (int t = 0; t < kHalfTiles; ++t) {
        load_matrix_x4(b[t],
                       shared_address(address_row + t * kTileKeys * kKeyRowPitch + s * kMmaK));
      }
#pragma unroll
      for (int t = 0; t < kHalfTiles; ++t) {
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

// Filters one half of a chunk (from `chunk_begin`; score_half_chunk's acc of the same half) for the
// lane's two rows as vec.cpp does per tile: each tile's maximum over the row's candidates (within
// the lane quad that holds the row), the running maximum over the group (restarting where a group
// starts), and the keep test score - m >= log(alpha) on candidates. The halves of a chunk are
// filtered in order, so the running maximum sees the tiles in key order. kAllCandidates: the whole
// chunk lies in the rows' CandidateRanges. kept[h]: row h's keep masks of the half's two tiles, the
// first in the low 16 bits, ORed over the quad (every lane of the quad holds them). The scores
// are scaled in place.
template <bool kAllCandidates>
__device__ void filter_half_chunk(const VecKernelParams& p, float log_alpha, int32_t chunk_begin,
                                  int half, float (&acc)[kHalfTiles][2][4], RowState& state,
                                  uint32_t (&kept)[2]) {
  static_assert(kHalfTiles == 2, "one 32-bit word holds a half's two tile masks");
  const int quad_lane = static_cast<int>(threadIdx.x) % kQuadLanes;
  const int32_t half_begin = chunk_begin + half * kHalfTiles * kTileKeys;
  // Score i of a (tile, row) pair: acc[t][i / 2][2 h + i % 2], key offset key_offset(i) in the
  // tile; its bit in the lane's word before the shift by the lane's key pair: lane_bit(t, i).
  const auto key_offset = [quad_lane](int i) { return (i / 2) * kMmaN + quad_lane * 2 + i % 2; };
  const auto lane_bit = [](int t, int i) { return (i / 2) * kMmaN + i % 2 + kTileKeys * t; };
  float tile_max[kHalfTiles][2];
#pragma unroll
  for (int t = 0; t < kHalfTiles; ++t) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        float& score = acc[t][i / 2][2 * h + i % 2];
        score = __fmul_rn(score, p.scale);
        // With every key a candidate the maximum starts at the first score: fmaxf ignores a NaN
        // as the -infinity start would, so the result is the same.
        if (kAllCandidates && i == 0) {
          tile_max[t][h] = score;
        } else if (i == 0) {
          tile_max[t][h] = -std::numeric_limits<float>::infinity();
        }
        if ((kAllCandidates && i > 0) ||
            (!kAllCandidates &&
             state.keys[h].is_candidate(half_begin + t * kTileKeys + key_offset(i)))) {
          tile_max[t][h] = fmaxf(tile_max[t][h], score);
        }
      }
    }
  }
#pragma unroll
  for (int offset = 1; offset < kQuadLanes; offset *= 2) {
#pragma unroll
    for (int t = 0; t < kHalfTiles; ++t) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        tile_max[t][h] =
            fmaxf(tile_max[t][h], __shfl_xor_sync(kFullWarpMask, tile_max[t][h], offset));
      }
    }
  }
  kept[0] = 0u;
  kept[1] = 0u;
#pragma unroll
  for (int t = 0; t < kHalfTiles; ++t) {
    const bool group_starts = state.group_position == 0;
    state.group_position = state.group_position + 1 == p.group_tiles ? 0 : state.group_position + 1;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      if (group_starts) state.running[h] = -std::numeric_limits<float>::infinity();
      state.running[h] = fmaxf(state.running[h], tile_max[t][h]);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const bool candidate = kAllCandidates || state.keys[h].is_candidate(
                                                     half_begin + t * kTileKeys + key_offset(i));
        if (candidate && __fsub_rn(acc[t][i / 2][2 * h + i % 2], state.running[h]) >= log_alpha) {
          kept[h] |= 1u << lane_bit(t, i);
        }
      }
    }
  }
  // Each lane holds keys 2 (lane % 4) and the next of every 8: its bits move there once, then one
  // shuffle per row and offset ORs both tiles' bits across the quad.
#pragma unroll
  for (int h = 0; h < 2; ++h) kept[h] <<= 2 * quad_lane;
#pragma unroll
  for (int offset = 1; offset < kQuadLanes; offset *= 2) {
#pragma unroll
    for (int h = 0; h < 2; ++h) kept[h] |= __shfl_xor_sync(kFullWarpMask, kept[h], offset);
  }
}

// Scores half `score_half` of `stage` into `scored` and filters half `filter_half` of the chunk at
// `chunk_begin` from `filtered` (scored before): independent work in one basic block, so the
// scheduler issues the filter's instructions while the MMAs run.
template <class Element, int kKSteps, bool kAllCandidates>
__device__ void score_and_filter(const VecKernelParams& p, const KeyStage<Element>& stage,
                                 int score_half, const uint32_t (&a)[kMaxKSteps][4],
                                 float (&scored)[kHalfTiles][2][4], float log_alpha,
                                 int32_t chunk_begin, int filter_half,
                                 float (&filtered)[kHalfTiles][2][4], RowState& state,
                                 uint32_t (&kept)[2]) {
  score_half_chunk<Element, kKSteps>(p, stage, score_half, a, scored);
  filter_half_chunk<kAllCandidates>(p, log_alpha, chunk_begin, filter_half, filtered, state, kept);
}

// The largest candidate_end of a warp's rows (its keys stop there).
__device__ inline int32_t warp_key_end(const RowState& state) {
  int32_t end = max(state.keys[0].candidate_end, state.keys[1].candidate_end);
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    end = max(end, __shfl_xor_sync(kFullWarpMask, end, offset));
  }
  return end;
}

// Where a warp's rows store their keep masks: lane q of a row's quad stores the chunk's tile q.
struct MaskStore {
  uint16_t* rows[2];  // [mask_pitch] each: the masks of the lane's two rows
  bool active[2];     // rows past the last block store nothing
};

// The lane's two rows of its warp's 16 pooled blocks starting at `warp_row` (lane / 4 and
// lane / 4 + 8, the MMA accumulator's rows) in head slot `slot`: their candidate keys, running
// maxima and mask rows. Rows past the last block only pad the MMA: no candidates, no stores.
__device__ __forceinline__ void start_lane_rows(const VecKernelParams& p, int32_t slot,
                                                int32_t warp_row, int lane, RowState& state,
                                                MaskStore& store) {
  const int32_t rows[2] = {warp_row + lane / kQuadLanes, warp_row + lane / kQuadLanes + kMmaN};
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    state.active[h] = rows[h] < p.blocks;
    store.active[h] = state.active[h];
    state.keys[h] = block_keys(p, min(rows[h], p.blocks - 1));
    if (!state.active[h]) state.keys[h].candidate_end = 0;
    state.running[h] = -std::numeric_limits<float>::infinity();
    store.rows[h] = p.masks + (static_cast<int64_t>(slot) * p.blocks + min(rows[h], p.blocks - 1)) *
                                  p.mask_pitch;
  }
}

// The chunks of one CTA's key range through shared memory, scored and filtered into keep masks.
// Chunks stream through kStages stages with one barrier per chunk. Each chunk is scored in two
// halves, one step behind the filter: a warp issues a half's MMAs, then filters the half scored
// before it, so the tensor pipe and the filter overlap within the warp. Across a chunk's barrier
// the next chunk's first half is scored while this chunk's second half is filtered; the barrier
// then also frees this chunk's stage for the copy kStages chunks ahead.
template <class Element, int kKSteps>
__device__ void scan_chunks(const VecKernelParams& p, KeyStage<Element>* stages,
                            const Element* keys, const uint32_t (&a)[kMaxKSteps][4],
                            const CandidateRanges& full, float log_alpha, int32_t scan_begin,
                            int32_t chunks, int32_t warp_end, RowState& state,
                            const MaskStore& store) {
  const int quad_lane = static_cast<int>(threadIdx.x) % kQuadLanes;
  // One copy group per chunk, an empty one past the last, so that "all but kStages - 2 groups
  // landed" always means "the chunk after the one being filtered landed". Chunk c's stage is
  // c % kStages, tracked without a division.
  const auto queue_chunk = [&](int32_t c, int stage) {
    if (c < chunks) {
      load_key_chunk<Element, kKSteps>(p, keys, scan_begin + c * kChunkKeys, stages[stage]);
    } else {
      commit_async_copies();
    }
  };
  const auto following_stage = [](int stage) { return stage + 1 == kStages ? 0 : stage + 1; };
  for (int c = 0; c < kStages - 1; ++c) queue_chunk(c, c);
  state.group_position = scan_begin / kTileKeys % p.group_tiles;
  float acc[2][kHalfTiles][2][4];  // a chunk's halves: one scored while the other is filtered
  wait_async_copies<kStages - 2>();
  __syncthreads();
  queue_chunk(kStages - 1, kStages - 1);
  if (scan_begin < warp_end) score_half_chunk<Element, kKSteps>(p, stages[0], 0, a, acc[0]);
  int stage = 0;  // chunk c's
  for (int32_t c = 0; c < chunks; ++c, stage = following_stage(stage)) {
    const int32_t chunk_begin = scan_begin + c * kChunkKeys;
    // A chunk's tiles past warp_end (scored with the rest of it) are not stored, and raise no
    // maximum a stored tile reads: below the split's end they hold no candidate of the warp's
    // rows, past it they lie in a later group (splits hold whole groups). Warp-uniform.
    const bool scoring = chunk_begin < warp_end;
    const bool all_candidates = full.hold(chunk_begin, chunk_begin + kChunkKeys);
    uint32_t kept[2][2];  // [half][row]: the half's two tile masks of row lane / 4 (+ 8)
    if (scoring) {
      if (all_candidates) {
        score_and_filter<Element, kKSteps, true>(p, stages[stage], 1, a, acc[1], log_alpha,
                                                 chunk_begin, 0, acc[0], state, kept[0]);
      } else {
        score_and_filter<Element, kKSteps, false>(p, stages[stage], 1, a, acc[1], log_alpha,
                                                  chunk_begin, 0, acc[0], state, kept[0]);
      }
    }
    wait_async_copies<kStages - 2>();
    // Chunk c + 1 is in its stage for every warp, and every warp is done with chunk c's stage:
    // chunk c + kStages's copy goes there and lands while the chunks before it are scored.
    __syncthreads();
    queue_chunk(c + kStages, stage);
    if (!scoring) continue;
    // After the last chunk its own stage is scored again and the scores dropped: no branch
    // between the MMAs and the filter.
    const KeyStage<Element>& next = stages[c + 1 < chunks ? following_stage(stage) : stage];
    if (all_candidates) {
      score_and_filter<Element, kKSteps, true>(p, next, 0, a, acc[0], log_alpha, chunk_begin, 1,
                                               acc[1], state, kept[1]);
    } else {
      score_and_filter<Element, kKSteps, false>(p, next, 0, a, acc[0], log_alpha, chunk_begin, 1,
                                                acc[1], state, kept[1]);
    }
    // Tiles below warp_end lie below kv_len: within the row's mask_pitch.
    const int32_t my_tile_begin = chunk_begin + quad_lane * kTileKeys;
    if (my_tile_begin >= warp_end) continue;
    constexpr uint32_t kTileMask = (1u << kTileKeys) - 1u;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const uint32_t half_masks = quad_lane / kHalfTiles == 0 ? kept[0][h] : kept[1][h];
      if (store.active[h]) {
        store.rows[h][my_tile_begin / kTileKeys] = static_cast<uint16_t>(
            (half_masks >> (kTileKeys * (quad_lane % kHalfTiles))) & kTileMask);
      }
    }
  }
}

// The scores of kCtaRows pooled blocks of slot blockIdx.x, from block blockIdx.z * kCtaRows,
// within key split blockIdx.y, filtered into the blocks' keep masks (p.masks): one pass, every
// score computed once (scan_chunks). Each row's chunk is one 8-byte run of masks. Slots vary
// fastest in launch order, so the query heads of a KV head scan the same keys side by side and
// share them in L2.
template <class Element, int kKSteps>
__global__ void __launch_bounds__(kSelectThreads, kSelectMinBlocks)
    select_kernel(const VecKernelParams p) {
  extern __shared__ __align__(16) unsigned char select_shared[];
  auto* stages = reinterpret_cast<KeyStage<Element>*>(select_shared);  // [kStages]
  const int32_t slot = static_cast<int32_t>(blockIdx.x);
  const int32_t split = static_cast<int32_t>(blockIdx.y);
  const int32_t first_block = static_cast<int32_t>(blockIdx.z) * kCtaRows;
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  const int warp = static_cast<int>(threadIdx.x) / kWarpSize;
  const int32_t warp_row = first_block + warp * kMmaRows;
  const int32_t split_begin = split * p.split_keys;
  const int32_t window_end = min(p.kv_len, split_begin + p.split_keys);
  RowState state;
  MaskStore store;
  start_lane_rows(p, slot, warp_row, lane, state, store);
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
  const auto chunks = static_cast<int32_t>(ceil_div(scan_end - scan_begin, kChunkKeys));
  scan_chunks<Element, kKSteps>(p, stages, keys, a, warp_candidate_ranges(p, warp_row), log_alpha,
                                scan_begin, chunks, warp_end, state, store);
}

}  // namespace mmsparse::cuda::vec_kernels
