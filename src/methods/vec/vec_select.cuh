#pragma once
// VecAttention's selection kernels (vec_device.cu's design comment): the pooled queries and
// TilingSelect + minS on tensor cores, as a count pass or a write pass, with the cut of each
// tile's kept keys into spans and columns (vec.h; RunCursor below). Included by vec_device.cu
// only, which launches them.

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
constexpr int kStages = 2;
constexpr int kMaxHeadDim = 128;  // make_estimate_operands admits head_dim <= 128
constexpr int kMaxKSteps = kMaxHeadDim / kMmaK;
// Padding a key row by 16 bytes shifts consecutive rows by four banks: ldmatrix conflict-free.
constexpr int kKeyRowPitch = kMaxHeadDim + 8;
// Keys per split before rounding to whole groups: enough CTAs to fill an H100 at 32K+ tokens,
// few enough that each CTA's pipeline runs long.
constexpr int64_t kSplitKeys = 4096;
constexpr int kPoolThreads = 128;
constexpr int kResolveThreads = 128;

// Per (tile, key split): what the count pass saw of the runs of kept keys (sinks, diagonal and
// selected keys) in the split's window of keys, and what the resolve pass decided for the runs
// that touch the window's edges (they may go on in the neighbouring splits).
struct SplitRuns {
  int32_t lead;         // kept keys from the window's first key on, consecutive
  int32_t trail;        // kept keys up to the window's last, consecutive (both the window's
                        // size when it is kept whole)
  int32_t inner_spans;  // the spans and columns of the runs touching neither edge
  int32_t inner_columns;
  int32_t kept;        // kept keys in the window
  int32_t lead_start;  // resolve: the first key of the run holding the window's first key
  uint32_t flags;      // SplitFlag bits
};
enum SplitFlag : uint32_t {
  kLeadAnchored = 1u,   // the lead run holds a sink or diagonal key (count pass)
  kTrailAnchored = 2u,  // the trail run does
  kLeadSpan = 4u,       // the lead run (whole window: the window's run) is a span (resolve)
  kTrailSpan = 8u,
  kLeadEnds = 16u,   // the lead run ends in this window: its span record is written here
  kTrailEnds = 32u,  // the trail run ends at the window's end
};

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
  int32_t split_keys, splits;  // keys per split (whole groups), splits per block
  int32_t causal;
  float scale, log_alpha;
  HeadList selection;
  void* pooled;            // [slots, blocks, head_dim] of the input dtype
  int64_t* counts;         // [slots * blocks * splits + 1] kept keys per (tile, split); last 0
  const int64_t* offsets;  // [slots * blocks * splits + 1] their exclusive sum (write pass)
  int64_t* span_counts;    // [slots * blocks * splits + 1] span records ending per (tile, split)
  const int64_t* span_offsets;  // [slots * blocks * splits + 1] their exclusive sum
  SplitRuns* runs;              // [slots * blocks * splits]
  uint32_t* tile_keys;          // [slots * blocks] kept keys per tile (the schedule's weight)
  int32_t min_span_keys;        // detail::kVecMinSpanKeys
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

__device__ inline BlockKeys block_keys(const VecKernelParams& p, int32_t block) {
  const int64_t row_begin = static_cast<int64_t>(block) * p.pooling;
  const int64_t row_end = min(static_cast<int64_t>(p.q_len), row_begin + p.pooling);
  BlockKeys keys;
  keys.sink_end = clamp_key(p.pooling, p.kv_len);
  keys.diagonal_begin = clamp_key(row_begin + p.causal_offset, p.kv_len);
  keys.diagonal_end = clamp_key(row_end + p.causal_offset, p.kv_len);
  keys.candidate_end = p.causal != 0 ? keys.diagonal_begin : p.kv_len;
  return keys;
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

// The key rows of one shared-memory stage.
template <class Element>
using KeyStage = Element[kChunkKeys][kKeyRowPitch];

// Queues the copy of keys [chunk_begin, chunk_begin + kChunkKeys) into `stage`; keys past kv_len
// are zero-filled (no row is a candidate there).
template <class Element>
__device__ void load_key_chunk(const VecKernelParams& p, const Element* keys, int32_t chunk_begin,
                               KeyStage<Element>& stage) {
  constexpr int kVector = kCopyBytes / static_cast<int>(sizeof(Element));
  const int vectors_per_key = p.head_dim / kVector;
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

// The keys [window_begin, window_end) of one (pooled block, key split), fed in key order as kept
// or not; it cuts them into maximal runs. The count pass records the runs touching the window's
// edges (lead, trail) for the resolve pass and counts the others' spans and columns; the write
// pass takes the resolve's decisions for the edge runs and writes span records and columns, in
// key order. Every lane of the quad holding the row keeps the same cursor; lane 0 of the quad
// writes spans, the four lanes share a run's columns.
struct RunCursor {
  int32_t window_begin, window_end;
  int32_t position;    // the keys before it have been fed
  int32_t open_begin;  // first key of the run being fed, -1 when none
  bool open_anchored;
  SplitRuns runs;  // count pass: being built; write pass: the resolve's flags and lead_start
  int64_t column;  // write pass: the next column slot and span slot
  int64_t span;
};

template <bool kWrite>
__device__ void close_run(const VecKernelParams& p, RunCursor& c, int32_t end, bool active) {
  const int32_t begin = c.open_begin;
  const bool anchored = c.open_anchored;
  c.open_begin = -1;
  const bool lead = begin == c.window_begin;
  const bool trail = end == c.window_end;
  bool span = anchored || end - begin >= p.min_span_keys;
  bool ends_here = true;
  int32_t start = begin;
  if (lead) {
    if (!kWrite) {
      c.runs.lead = end - begin;
      c.runs.flags |= anchored ? kLeadAnchored : 0u;
      if (trail) c.runs.trail = end - begin;
      if (trail) c.runs.flags |= anchored ? kTrailAnchored : 0u;
      return;
    }
    span = (c.runs.flags & kLeadSpan) != 0;
    start = c.runs.lead_start;
    ends_here = !trail || (c.runs.flags & kLeadEnds) != 0;
  } else if (trail) {
    if (!kWrite) {
      c.runs.trail = end - begin;
      c.runs.flags |= anchored ? kTrailAnchored : 0u;
      return;
    }
    span = (c.runs.flags & kTrailSpan) != 0;
    ends_here = (c.runs.flags & kTrailEnds) != 0;
  } else if (!kWrite) {
    if (span) {
      ++c.runs.inner_spans;
    } else {
      c.runs.inner_columns += end - begin;
    }
    return;
  }
  const int quad_lane = static_cast<int>(threadIdx.x) % kQuadLanes;
  if (span) {
    if (ends_here) {
      if (active && quad_lane == 0) p.spans[c.span] = {start, end, 1, 1};
      ++c.span;
    }
    return;
  }
  if (active) {
    for (int32_t key = begin + quad_lane; key < end; key += kQuadLanes) {
      p.columns[c.column + (key - begin)] = key;
    }
  }
  c.column += end - begin;
}

// Keys [begin, end) kept (anchored: among them a sink or diagonal key), or not kept.
template <bool kWrite>
__device__ void feed_kept(RunCursor& c, int32_t begin, int32_t end, bool anchored) {
  if (c.open_begin < 0) {
    c.open_begin = begin;
    c.open_anchored = anchored;
  } else {
    c.open_anchored = c.open_anchored || anchored;
  }
  c.runs.kept += end - begin;
}
template <bool kWrite>
__device__ void feed_dropped(const VecKernelParams& p, RunCursor& c, int32_t begin, bool active) {
  if (c.open_begin >= 0) close_run<kWrite>(p, c, begin, active);
}

// Keys [begin, end) that the scan does not score: kept where they are sinks or diagonal.
template <bool kWrite>
__device__ void feed_unscored(const VecKernelParams& p, RunCursor& c, const BlockKeys& keys,
                              int32_t begin, int32_t end, bool active) {
  const int32_t ranges[2][2] = {{0, keys.sink_end}, {keys.diagonal_begin, keys.diagonal_end}};
  int32_t at = begin;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int32_t from = max(at, ranges[r][0]);
    const int32_t to = min(end, ranges[r][1]);
    if (from >= to) continue;
    if (from > at) feed_dropped<kWrite>(p, c, at, active);
    feed_kept<kWrite>(c, from, to, true);
    at = to;
  }
  if (at < end) feed_dropped<kWrite>(p, c, at, active);
  c.position = max(c.position, end);
}

// The bits of keys [begin, end) within the `count` keys from tile_begin.
__device__ inline uint32_t range_bits(int32_t begin, int32_t end, int32_t tile_begin, int count) {
  const int32_t from = max(begin, tile_begin) - tile_begin;
  const int32_t to = min(end, tile_begin + count) - tile_begin;
  return from < to ? ((1u << (to - from)) - 1u) << from : 0u;
}

// A scored tile: bit i of `kept` for key tile_begin + i (the window's keys only: count of them);
// sinks and diagonal keys are added here.
template <bool kWrite>
__device__ void feed_tile(const VecKernelParams& p, RunCursor& c, const BlockKeys& keys,
                          uint32_t kept, int32_t tile_begin, bool active) {
  const int count = min(kTileKeys, c.window_end - tile_begin);
  const uint32_t all = (1u << count) - 1u;
  const uint32_t anchors = range_bits(0, keys.sink_end, tile_begin, count) |
                           range_bits(keys.diagonal_begin, keys.diagonal_end, tile_begin, count);
  const uint32_t present = (kept | anchors) & all;
  if (present == all) {
    feed_kept<kWrite>(c, tile_begin, tile_begin + count, anchors != 0);
    c.position = tile_begin + count;
    return;
  }
  int at = 0;
  while (at < count) {
    const uint32_t rest = present >> at;
    if ((rest & 1u) != 0) {
      const int run = min(__ffs(~rest) - 1, count - at);
      feed_kept<kWrite>(c, tile_begin + at, tile_begin + at + run,
                        ((anchors >> at) & ((1u << run) - 1u)) != 0);
      at += run;
    } else {
      feed_dropped<kWrite>(p, c, tile_begin + at, active);
      at += rest == 0 ? count - at : __ffs(rest) - 1;
    }
  }
  c.position = tile_begin + count;
}

// The running state of the two pooled blocks a lane holds a row of (rows lane / 4 and lane / 4 +
// 8 of its warp's 16): their key ranges, running maxima and run cursors.
struct RowState {
  BlockKeys keys[2];
  float running[2];
  RunCursor cursor[2];
  bool active[2];  // a pooled block (rows past the last block only pad the MMA)
};

// Scores one tile of 16 keys (from `tile_begin`, at `row` of the stage) against the warp's pooled
// blocks and filters it: acc[j] holds keys 8 j .. 8 j + 7 (this lane: 2 (lane % 4) and the next)
// for rows lane / 4 (acc[j][0..1]) and lane / 4 + 8 (acc[j][2..3]).
template <class Element, bool kWrite>
__device__ void select_tile(const VecKernelParams& p, const KeyStage<Element>& stage, int row,
                            int32_t tile_begin, const uint32_t (&a)[kMaxKSteps][4],
                            RowState& state) {
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  float acc[2][4] = {};
  // ldmatrix: lanes 0-7 address keys 0-7 at dims 0-7, 8-15 keys 0-7 at dims 8-15, 16-23 keys
  // 8-15 at dims 0-7, 24-31 keys 8-15 at dims 8-15: the B fragments of both key halves.
  const int matrix = lane / 8;
  const Element* address_row = stage[row + (matrix / 2) * kMmaN + lane % 8] + (matrix % 2) * kMmaN;
  const int k_steps = p.head_dim / kMmaK;
#pragma unroll
  for (int s = 0; s < kMaxKSteps; ++s) {
    if (s < k_steps) {
      uint32_t b[4];
      load_matrix_x4(b, shared_address(address_row + s * kMmaK));
      TensorCore<Element>::mma(acc[0], a[s], b[0], b[1]);
      TensorCore<Element>::mma(acc[1], a[s], b[2], b[3]);
    }
  }
  const bool group_starts = (tile_begin / kTileKeys) % p.group_tiles == 0;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float scores[4];
    bool candidate[4];
    float tile_max = -std::numeric_limits<float>::infinity();
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int32_t key = tile_begin + (i / 2) * kMmaN + (lane % kQuadLanes) * 2 + i % 2;
      scores[i] = __fmul_rn(acc[i / 2][2 * h + i % 2], p.scale);
      candidate[i] = state.keys[h].is_candidate(key);
      if (candidate[i]) tile_max = fmaxf(tile_max, scores[i]);
    }
    tile_max = fmaxf(tile_max, __shfl_xor_sync(kFullWarpMask, tile_max, 1));
    tile_max = fmaxf(tile_max, __shfl_xor_sync(kFullWarpMask, tile_max, 2));
    if (group_starts) state.running[h] = -std::numeric_limits<float>::infinity();
    state.running[h] = fmaxf(state.running[h], tile_max);
    unsigned kept = 0;  // bit i: key tile_begin + i
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int bit = (i / 2) * kMmaN + (lane % kQuadLanes) * 2 + i % 2;
      if (candidate[i] && __fsub_rn(scores[i], state.running[h]) >= p.log_alpha) kept |= 1u << bit;
    }
    kept |= __shfl_xor_sync(kFullWarpMask, kept, 1);
    kept |= __shfl_xor_sync(kFullWarpMask, kept, 2);
    feed_tile<kWrite>(p, state.cursor[h], state.keys[h], kept, tile_begin, state.active[h]);
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

// Counts (kWrite false) or writes (true) the kept keys of kCtaRows pooled blocks of slot
// blockIdx.x, from block blockIdx.z * kCtaRows, within key split blockIdx.y. Slots vary fastest in
// launch order, so the query heads of a KV head scan the same keys side by side and share them in
// L2.
template <class Element, bool kWrite>
__global__ void __launch_bounds__(kSelectThreads) select_kernel(const VecKernelParams p) {
  __shared__ alignas(16) KeyStage<Element> stages[kStages];
  const int32_t slot = static_cast<int32_t>(blockIdx.x);
  const int32_t split = static_cast<int32_t>(blockIdx.y);
  const int32_t first_block = static_cast<int32_t>(blockIdx.z) * kCtaRows;
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  const int warp = static_cast<int>(threadIdx.x) / kWarpSize;
  const int32_t warp_row = first_block + warp * kMmaRows;
  const int32_t rows[2] = {warp_row + lane / kQuadLanes, warp_row + lane / kQuadLanes + kMmaN};
  const int32_t split_begin = split * p.split_keys;
  const int32_t window_end = min(p.kv_len, split_begin + p.split_keys);
  RowState state;
  int64_t items[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    state.active[h] = rows[h] < p.blocks;
    state.keys[h] = block_keys(p, min(rows[h], p.blocks - 1));
    if (!state.active[h]) state.keys[h].candidate_end = 0;
    state.running[h] = -std::numeric_limits<float>::infinity();
    items[h] = (static_cast<int64_t>(slot) * p.blocks + rows[h]) * p.splits + split;
    RunCursor& cursor = state.cursor[h];
    cursor = RunCursor{split_begin, window_end, split_begin, -1, false, SplitRuns{}, 0, 0};
    if (kWrite && state.active[h]) {
      cursor.runs = p.runs[items[h]];
      cursor.column = p.offsets[items[h]];
      cursor.span = p.span_offsets[items[h]];
    }
  }
  // The CTA's keys: this split, from the tile holding the first non-sink key, up to its last row's
  // candidates (candidate_end never decreases with the block).
  const int32_t scan_begin = max(split_begin, state.keys[0].sink_end / kTileKeys * kTileKeys);
  const int32_t scan_end =
      min(window_end, block_keys(p, min(first_block + kCtaRows, p.blocks) - 1).candidate_end);
  const int32_t warp_end = min(scan_end, warp_key_end(state));
  if (scan_begin < scan_end) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {  // the sinks below the first scored tile
      feed_unscored<kWrite>(p, state.cursor[h], state.keys[h], split_begin, scan_begin,
                            state.active[h]);
    }
    const int32_t batch = slot / p.heads;
    const int32_t kv_head = query_head(p, slot % p.heads) / p.group;
    const auto* keys =
        static_cast<const Element*>(p.k) + batch * p.k_stride_batch + kv_head * p.k_stride_head;
    uint32_t a[kMaxKSteps][4];
    load_pooled_fragments<Element>(p, slot, warp_row, a);
    const int32_t chunks = static_cast<int32_t>(ceil_div(scan_end - scan_begin, kChunkKeys));
    load_key_chunk(p, keys, scan_begin, stages[0]);
    for (int32_t c = 0; c < chunks; ++c) {
      const int32_t chunk_begin = scan_begin + c * kChunkKeys;
      if (c + 1 < chunks) {
        load_key_chunk(p, keys, chunk_begin + kChunkKeys, stages[(c + 1) % kStages]);
        wait_async_copies<1>();
      } else {
        wait_async_copies<0>();
      }
      __syncthreads();
      for (int t = 0; t < kChunkTiles; ++t) {
        const int32_t tile_begin = chunk_begin + t * kTileKeys;
        if (tile_begin >= warp_end) break;
        select_tile<Element, kWrite>(p, stages[c % kStages], t * kTileKeys, tile_begin, a, state);
      }
      __syncthreads();  // the next iteration's copy overwrites the stage read here
    }
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {  // the window's keys past the scored tiles, then its last run
    RunCursor& cursor = state.cursor[h];
    feed_unscored<kWrite>(p, cursor, state.keys[h], cursor.position, window_end, state.active[h]);
    if (cursor.open_begin >= 0) close_run<kWrite>(p, cursor, window_end, state.active[h]);
    if (!kWrite && state.active[h] && lane % kQuadLanes == 0) p.runs[items[h]] = cursor.runs;
  }
}

// One thread per tile: walks its splits in key order, joins the runs that cross split edges,
// decides them (span when anchored or at least min_span_keys long), and stores each split's
// column count (its keys of column runs) and span count (the span records that end in it), the
// edge decisions for the write pass, and the tile's kept keys.
__global__ void __launch_bounds__(kResolveThreads)
    resolve_kernel(const VecKernelParams p, int64_t tiles) {
  const int64_t tile = static_cast<int64_t>(blockIdx.x) * kResolveThreads + threadIdx.x;
  if (tile >= tiles) return;
  SplitRuns* runs = p.runs + tile * p.splits;
  int64_t* columns = p.counts + tile * p.splits;
  int64_t* spans = p.span_counts + tile * p.splits;
  int64_t kept = 0;
  bool open = false;
  int32_t run_begin = 0, run_keys = 0, first_split = 0;
  bool run_anchored = false, first_is_trail = false;
  // The open run ends in split `last` (its lead part, or the trail part where it began there).
  const auto close = [&](int32_t last) {
    const bool span = run_anchored || run_keys >= p.min_span_keys;
    for (int32_t s = first_split; s <= last; ++s) {
      const bool trail_part = s == first_split && first_is_trail;
      if (span) {
        runs[s].flags |= trail_part ? kTrailSpan : kLeadSpan;
      } else {
        columns[s] += trail_part ? runs[s].trail : runs[s].lead;
      }
      if (s == last) runs[s].flags |= trail_part ? kTrailEnds : kLeadEnds;
    }
    if (span) ++spans[last];
    open = false;
  };
  for (int32_t s = 0; s < p.splits; ++s) {
    const int32_t window_begin = s * p.split_keys;
    const int32_t window_size = min(p.kv_len, window_begin + p.split_keys) - window_begin;
    SplitRuns& split = runs[s];
    kept += split.kept;
    columns[s] = split.inner_columns;
    spans[s] = split.inner_spans;
    if (open && split.lead == 0) close(s - 1);
    if (split.lead > 0) {
      if (!open) {
        open = true;
        run_begin = window_begin;
        run_keys = 0;
        run_anchored = false;
        first_split = s;
        first_is_trail = false;
      }
      run_keys += split.lead;
      run_anchored = run_anchored || (split.flags & kLeadAnchored) != 0;
      split.lead_start = run_begin;
      if (split.lead < window_size) close(s);
    }
    if (split.lead < window_size && split.trail > 0) {
      open = true;
      run_begin = window_begin + window_size - split.trail;
      run_keys = split.trail;
      run_anchored = (split.flags & kTrailAnchored) != 0;
      first_split = s;
      first_is_trail = true;
    }
  }
  if (open) close(p.splits - 1);
  p.tile_keys[tile] = static_cast<uint32_t>(kept);
}

}  // namespace mmsparse::cuda::vec_kernels
