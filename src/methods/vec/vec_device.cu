// VecAttention's plan on the GPU (vec_device.h): pooling, TilingSelect + minS on tensor cores in a
// count pass and a write pass, the records, and the heaviest-first schedule.
//
// Arithmetic. The pooled query is the host's (vec.h): the fp32 sum of the block's rows in row
// order over the row count, rounded to the input dtype, so it equals the host's bit for bit. The
// scores are m16n8k16 MMAs of the pooled queries against the keys with fp32 accumulation: the
// products are exact, but the tensor cores sum them in their own order, so a score may differ
// from the host's FMA chain by a few fp32 roundings of the sum of |products|. Maxima and the test
// (score - m >= log alpha) are the host's operations on those scores. The kept sets therefore
// equal the host's except for keys whose margin lies within that rounding of log(alpha)
// (tests/gpu/vec_selection_check.h states and checks the bound).
//
// Work. A CTA of kSelectWarps warps serves kCtaRows consecutive pooled blocks of one head slot (16
// per warp: the MMA's rows) over one key split: kSplitKeys keys rounded to whole groups of the
// running maximum, which restarts at each group, so splits are independent. Keys stream through
// shared memory in chunks of kChunkKeys (cp.async, two stages); each warp scores a tile of 16 keys
// with head_dim / 16 pairs of MMAs, takes each row's tile maximum over its candidates within the
// lane quad that holds the row, raises the running maximum (reset where a group starts), and
// filters. The count pass stores a count per (tile, split); the write pass places each kept key
// at its (tile, split)'s offset plus its rank in the tile's 16-bit kept mask, so the columns come
// out ascending without atomics.

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>

#include "cuda/attention/sm80/ptx.cuh"
#include "cuda/common/cub_storage.cuh"
#include "cuda/common/cuda_check.h"
#include "cuda/common/math.h"
#include "cuda/common/stream_scratch.h"
#include "cuda/runtime/plan_view.cuh"
#include "methods/vec/vec.h"
#include "methods/vec/vec_device.h"
#include "mmsparse/status.h"

namespace mmsparse::cuda {
namespace {

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
constexpr int kRecordThreads = 256;
constexpr int64_t kMaxGridYZ = 65535;

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
  int32_t* columns;        // the plan's columns section (write pass)
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

__device__ BlockKeys block_keys(const VecKernelParams& p, int32_t block) {
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

// The running state of the two pooled blocks a lane holds a row of (rows lane / 4 and lane / 4 +
// 8 of its warp's 16): their key ranges, running maxima and kept counts (or write cursors).
struct RowState {
  BlockKeys keys[2];
  float running[2];
  int64_t kept[2];
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
    if (kWrite) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int bit = (i / 2) * kMmaN + (lane % kQuadLanes) * 2 + i % 2;
        if ((kept >> bit & 1u) != 0) {
          p.columns[state.kept[h] + __popc(kept & ((1u << bit) - 1u))] = tile_begin + bit;
        }
      }
    }
    state.kept[h] += __popc(kept);
  }
}

// The largest candidate_end of a warp's rows (its keys stop there).
__device__ int32_t warp_key_end(const RowState& state) {
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
  RowState state;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    state.keys[h] = block_keys(p, min(rows[h], p.blocks - 1));
    if (rows[h] >= p.blocks) state.keys[h].candidate_end = 0;
    state.running[h] = -std::numeric_limits<float>::infinity();
    const int64_t item = (static_cast<int64_t>(slot) * p.blocks + rows[h]) * p.splits + split;
    state.kept[h] = kWrite && rows[h] < p.blocks ? p.offsets[item] : 0;
  }
  // The CTA's keys: this split, from the tile holding the first non-sink key, up to its last row's
  // candidates (candidate_end never decreases with the block).
  const int32_t split_begin = split * p.split_keys;
  const int32_t scan_begin = max(split_begin, state.keys[0].sink_end / kTileKeys * kTileKeys);
  const int32_t scan_end =
      min(min(p.kv_len, split_begin + p.split_keys),
          block_keys(p, min(first_block + kCtaRows, p.blocks) - 1).candidate_end);
  const int32_t warp_end = min(scan_end, warp_key_end(state));
  if (scan_begin < scan_end) {
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
  if (!kWrite && lane % kQuadLanes == 0) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      if (rows[h] < p.blocks) {
        p.counts[(static_cast<int64_t>(slot) * p.blocks + rows[h]) * p.splits + split] =
            state.kept[h];
      }
    }
  }
}

// Where each head slot's tiles find their spans: blocks before `first_split` have one span (sinks
// and diagonal touch), the others two; every slot the same.
struct SpanGeometry {
  int32_t first_split;
  int64_t spans_per_head;
};

// Per tile (slot-major): its record, its key ranges, its schedule sort key and value in
// position-major order (ties of the heaviest-first order go position-major, then slot); tile 0's
// thread writes the mask record.
__global__ void __launch_bounds__(kRecordThreads)
    records_kernel(const VecKernelParams p, const SpanGeometry spans_at, const MaskRecord mask,
                   TileRecord* tiles, SpanRecord* spans, MaskRecord* masks, uint32_t* sort_keys,
                   int32_t* sort_values, int32_t slots) {
  const int64_t tile = static_cast<int64_t>(blockIdx.x) * kRecordThreads + threadIdx.x;
  if (tile >= static_cast<int64_t>(slots) * p.blocks) return;
  if (tile == 0) masks[0] = mask;
  const auto slot = static_cast<int32_t>(tile / p.blocks);
  const auto block = static_cast<int32_t>(tile % p.blocks);
  const BlockKeys keys = block_keys(p, block);
  const int64_t head_span = block < spans_at.first_split ? block : 2 * block - spans_at.first_split;
  const int64_t span_begin = slot * spans_at.spans_per_head + head_span;
  int64_t span_keys = 0;
  if (block < spans_at.first_split) {
    const int32_t end = max(keys.sink_end, keys.diagonal_end);
    spans[span_begin] = {0, end, 1, 1};
    span_keys = end;
  } else {
    spans[span_begin] = {0, keys.sink_end, 1, 1};
    spans[span_begin + 1] = {keys.diagonal_begin, keys.diagonal_end, 1, 1};
    span_keys = keys.sink_end + keys.diagonal_end - keys.diagonal_begin;
  }
  const int64_t span_end = span_begin + (block < spans_at.first_split ? 1 : 2);
  TileRecord record;
  record.begin = block * p.pooling;
  record.end = min(p.q_len, (block + 1) * p.pooling);
  record.head_slot = slot;
  record.mask = 0;
  record.span_begin = span_begin;
  record.span_end = span_end;
  // A tile's columns are its splits' in key order.
  record.column_begin = p.offsets[tile * p.splits];
  record.column_end = p.offsets[(tile + 1) * p.splits];
  tiles[tile] = record;
  const int64_t item = static_cast<int64_t>(block) * slots + slot;
  sort_keys[item] = static_cast<uint32_t>(span_keys + record.column_end - record.column_begin);
  sort_values[item] = static_cast<int32_t>(tile);
}

// Keys per split: whole groups of the running maximum, about kSplitKeys of them; every key in one
// split when a group spans the keys.
int64_t split_key_count(const detail::VecParams& vec, int64_t kv_len) {
  const int64_t group_keys = std::min(vec.group_tiles, kv_len + 1) * kTileKeys;
  if (group_keys >= kv_len) return std::max<int64_t>(kv_len, 1);
  return group_keys * std::max<int64_t>(1, kSplitKeys / group_keys);
}

VecKernelParams kernel_params(const detail::VecParams& vec, const PlanShape& shape,
                              const EstimateOperands& operands) {
  VecKernelParams p{};
  p.q = operands.q;
  p.q_stride_batch = operands.q_strides[0];
  p.q_stride_row = operands.q_strides[1];
  p.q_stride_head = operands.q_strides[2];
  p.k = operands.k;
  p.k_stride_batch = operands.k_strides[0];
  p.k_stride_row = operands.k_strides[1];
  p.k_stride_head = operands.k_strides[2];
  p.heads = static_cast<int32_t>(shape.heads);
  p.group = static_cast<int32_t>(operands.q_heads / operands.kv_heads);
  p.head_dim = static_cast<int32_t>(operands.head_dim);
  p.q_len = static_cast<int32_t>(shape.q_len);
  p.kv_len = static_cast<int32_t>(shape.kv_len);
  p.causal_offset = static_cast<int32_t>(shape.causal_offset());
  p.pooling = static_cast<int32_t>(std::min(vec.pooling, shape.kv_len + shape.q_len + 1));
  p.blocks = static_cast<int32_t>(detail::vec_block_count(shape, vec));
  p.group_tiles = static_cast<int32_t>(std::min<int64_t>(vec.group_tiles, shape.kv_len + 1));
  const int64_t split_keys = split_key_count(vec, shape.kv_len);
  p.split_keys = static_cast<int32_t>(split_keys);
  p.splits = static_cast<int32_t>(ceil_div(shape.kv_len, split_keys));
  p.causal = vec.causal ? 1 : 0;
  p.scale = operands.scale;
  p.log_alpha = vec.log_alpha();
  p.selection.count = static_cast<int32_t>(operands.heads.size());
  std::copy(operands.heads.begin(), operands.heads.end(), p.selection.heads);
  return p;
}

SpanGeometry span_geometry(const PlanShape& shape, const detail::VecParams& vec, int64_t blocks) {
  SpanGeometry geometry{static_cast<int32_t>(blocks), 0};
  for (int64_t b = 0; b < blocks; ++b) {
    const detail::VecBlock block = detail::vec_block(shape, vec, b);
    if (block.diagonal_begin > block.sink_end) {
      geometry.first_split = static_cast<int32_t>(b);  // diagonals only move right
      break;
    }
  }
  geometry.spans_per_head = 2 * blocks - geometry.first_split;
  return geometry;
}

void check_shape(const PatternSpec& resolved_spec, const PlanShape& shape,
                 const EstimateOperands& operands) {
  PlanBuilder shape_check(shape);  // throws on a bad shape as the host build does
  check_int32_ranges(shape);
  if (!builds_vec_on_device(resolved_spec, shape)) {
    throw Error(ErrorCode::kUnsupported,
                "build_vec_plan_on_device: a vec spec with pooling <= shape.tile_rows = " +
                    std::to_string(shape.tile_rows) + " and keys (kv_len >= 1), got " +
                    resolved_spec.to_string() + " over " + std::to_string(shape.kv_len) + " keys");
  }
  if (operands.estimated_heads() != shape.heads) {
    throw_invalid_argument(
        "build_vec_plan_on_device shape.heads",
        std::to_string(operands.estimated_heads()) + " (the query heads the operands estimate)",
        std::to_string(shape.heads));
  }
  if (operands.head_dim > kMaxHeadDim) {
    throw Error(ErrorCode::kUnsupported, "build_vec_plan_on_device head_dim: at most " +
                                             std::to_string(kMaxHeadDim) + ", got " +
                                             std::to_string(operands.head_dim));
  }
  const detail::VecParams vec = detail::vec_params(resolved_spec);
  const int64_t blocks = ceil_div(shape.q_len, vec.pooling);
  if (ceil_div(blocks, kCtaRows) > kMaxGridYZ) {
    throw Error(ErrorCode::kUnsupported, "build_vec_plan_on_device: at most " +
                                             std::to_string(kMaxGridYZ * kCtaRows) +
                                             " pooled blocks, got " + std::to_string(blocks));
  }
  const int64_t splits = ceil_div(shape.kv_len, split_key_count(vec, shape.kv_len));
  if (splits > kMaxGridYZ) {
    throw Error(ErrorCode::kUnsupported, "build_vec_plan_on_device: at most " +
                                             std::to_string(kMaxGridYZ) + " key splits, got " +
                                             std::to_string(splits));
  }
  if (shape.head_slots() > kMaxGridYZ) {
    throw Error(ErrorCode::kUnsupported, "build_vec_plan_on_device: at most " +
                                             std::to_string(kMaxGridYZ) + " head slots, got " +
                                             std::to_string(shape.head_slots()));
  }
}

template <class Element>
void launch_selection(const VecKernelParams& p, int32_t slots, bool write, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(slots), static_cast<unsigned>(p.splits),
                  static_cast<unsigned>(ceil_div(p.blocks, kCtaRows)));
  if (write) {
    select_kernel<Element, true><<<grid, kSelectThreads, 0, stream>>>(p);
    check_launch("vec index: write pass");
  } else {
    pool_kernel<Element><<<dim3(static_cast<unsigned>(p.blocks), static_cast<unsigned>(slots)),
                           kPoolThreads, 0, stream>>>(p);
    check_launch("vec index: pooled queries");
    select_kernel<Element, false><<<grid, kSelectThreads, 0, stream>>>(p);
    check_launch("vec index: count pass");
  }
}

void run_selection(const EstimateOperands& operands, const VecKernelParams& p, int32_t slots,
                   bool write, cudaStream_t stream) {
  if (operands.dtype == DType::kBFloat16) {
    launch_selection<__nv_bfloat16>(p, slots, write, stream);
  } else {
    launch_selection<__half>(p, slots, write, stream);
  }
}

int key_bits(int64_t kv_len) {
  int bits = 1;
  while ((int64_t{1} << bits) <= kv_len) ++bits;
  return bits;
}

}  // namespace

bool builds_vec_on_device(const PatternSpec& resolved_spec, const PlanShape& shape) {
  if (!detail::is_spec_of(resolved_spec, detail::vec_entry())) return false;
  const detail::VecParams params = detail::vec_params(resolved_spec);
  return shape.tile_rows >= params.pooling && shape.kv_len >= 1;
}

DevicePlan build_vec_plan_on_device(const PatternSpec& resolved_spec, const PlanShape& shape,
                                    const EstimateOperands& operands, void* stream_handle) {
  const auto stream = static_cast<cudaStream_t>(stream_handle);
  check_shape(resolved_spec, shape, operands);
  const detail::VecParams vec = detail::vec_params(resolved_spec);
  const auto slots = static_cast<int32_t>(shape.head_slots());
  const int64_t blocks = detail::vec_block_count(shape, vec);
  const int64_t tiles = slots * blocks;
  if (tiles > std::numeric_limits<int32_t>::max()) {
    throw Error(ErrorCode::kUnsupported, "build_vec_plan_on_device: " + std::to_string(tiles) +
                                             " tiles; the schedule indexes tiles in int32");
  }
  if (tiles == 0) {
    const DevicePlanLayout layout = plan_layout({slots, 0, 0, 0, 0, 0});
    return DevicePlan::for_builder(shape, layout, 0, 0, true, layout.spans, stream);
  }
  VecKernelParams p = kernel_params(vec, shape, operands);
  const int sort_bits = key_bits(shape.kv_len);
  const auto items = static_cast<int>(tiles);
  // One count per (tile, split), the tiles' splits in key order, then one more for the total.
  const int64_t counts = tiles * p.splits + 1;
  if (counts > std::numeric_limits<int32_t>::max()) {
    throw Error(ErrorCode::kUnsupported, "build_vec_plan_on_device: " + std::to_string(counts) +
                                             " (tile, key split) counts; the scan indexes them "
                                             "in int32");
  }
  const std::size_t scan_bytes =
      scan_storage_bytes(static_cast<int>(counts), stream, "vec index: scan storage");
  const std::size_t sort_bytes =
      sort_storage_bytes<uint32_t>(items, sort_bits, stream, "vec index: sort storage");
  ScratchLayout at;
  const std::size_t pooled_at = at.add<uint16_t>(tiles * operands.head_dim);  // bf16 or fp16
  const std::size_t counts_at = at.add<int64_t>(counts);
  const std::size_t offsets_at = at.add<int64_t>(counts);
  const std::size_t keys_at = at.add<uint32_t>(tiles);
  const std::size_t sorted_at = at.add<uint32_t>(tiles);
  const std::size_t values_at = at.add<int32_t>(tiles);
  const std::size_t temp_at =
      at.add<std::byte>(static_cast<int64_t>(std::max(scan_bytes, sort_bytes)));
  const StreamScratch scratch(at.bytes(), stream, "vec index: scratch");
  std::byte* base = scratch.base();
  p.pooled = region<uint16_t>(base, pooled_at);
  p.counts = region<int64_t>(base, counts_at);
  p.offsets = region<int64_t>(base, offsets_at);
  check_cuda(cudaMemsetAsync(p.counts + counts - 1, 0, sizeof(int64_t), stream),
             "vec index: counts");
  run_selection(operands, p, slots, false, stream);
  std::size_t temp_bytes = scan_bytes;
  check_cuda(cub::DeviceScan::ExclusiveSum(region<std::byte>(base, temp_at), temp_bytes, p.counts,
                                           region<int64_t>(base, offsets_at),
                                           static_cast<int>(counts), stream),
             "vec index: column offsets");
  int64_t columns = 0;
  check_cuda(cudaMemcpyAsync(&columns, p.offsets + counts - 1, sizeof(int64_t),
                             cudaMemcpyDeviceToHost, stream),
             "vec index: column count");
  check_cuda(cudaStreamSynchronize(stream), "vec index: column count");

  const SpanGeometry spans_at = span_geometry(shape, vec, blocks);
  DevicePlanLayout layout =
      plan_layout({slots, 0, tiles, 1, slots * spans_at.spans_per_head, columns});
  layout.gathers = columns > 0;  // known exactly here: without columns the lean kernel runs
  DevicePlan plan =
      DevicePlan::for_builder(shape, layout, tiles, columns, true, layout.spans, stream);
  auto* plan_base = static_cast<std::byte*>(plan.builder_data());
  records_kernel<<<static_cast<unsigned>(ceil_div(tiles, kRecordThreads)), kRecordThreads, 0,
                   stream>>>(
      p, spans_at, make_mask_record(detail::vec_mask(vec), shape.kv_len),
      region<TileRecord>(plan_base, layout.tiles), region<SpanRecord>(plan_base, layout.spans),
      region<MaskRecord>(plan_base, layout.masks), region<uint32_t>(base, keys_at),
      region<int32_t>(base, values_at), slots);
  check_launch("vec index: records");
  p.columns = region<int32_t>(plan_base, layout.columns);
  run_selection(operands, p, slots, true, stream);
  // Radix sort is stable: equal key counts keep the position-major order, as the upload sorts.
  temp_bytes = sort_bytes;
  check_cuda(cub::DeviceRadixSort::SortPairsDescending(
                 region<std::byte>(base, temp_at), temp_bytes, region<uint32_t>(base, keys_at),
                 region<uint32_t>(base, sorted_at), region<int32_t>(base, values_at),
                 region<int32_t>(plan_base, layout.schedule), items, 0, sort_bits, stream),
             "vec index: schedule sort");
  return plan;
}

}  // namespace mmsparse::cuda
