// VecAttention's plan on the GPU (vec_device.h): pooling, TilingSelect + minS in a count pass and
// a write pass, the records, and the heaviest-first schedule.
//
// Exactness. The host's selection (vec.h) fixes its arithmetic; the kernels repeat it with
// intrinsics that are never contracted or approximated (__fadd_rn, __fdiv_rn, __fmaf_rn,
// __fmul_rn, __fsub_rn), each score a sequential chain over head_dim. A maximum is exact in any
// order. So every score, running maximum and comparison is bit for bit the host's, and the kept
// sets are equal, ties included. The price is fp32 FMA chains instead of tensor-core products
// (docs/vec.md, "Cost").
//
// Work. One block serves kRows consecutive pooled blocks of one head slot, and walks their keys in
// chunks of kThreads keys (kTilesPerChunk tiles of kVecKeyTileKeys): each thread scores one key
// against the kRows pooled queries, half-warps reduce tile maxima, one thread per row carries the
// running maximum across tiles (reset where a group starts), then every thread filters its key.
// The count pass adds kept keys per row; the write pass places them with warp ballots and
// per-warp prefix counts, in key order, at the row's offset.

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>

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

constexpr int kThreads = 256;
constexpr int kWarpSize = 32;
constexpr int kWarps = kThreads / kWarpSize;
constexpr int kRows = 16;  // pooled blocks per selection block
constexpr int kTileKeys = static_cast<int>(detail::kVecKeyTileKeys);
constexpr int kTilesPerChunk = kThreads / kTileKeys;
constexpr int kMaxHeadDim = 128;  // make_estimate_operands admits head_dim <= 128
constexpr int kPoolThreads = 128;
constexpr int kRecordThreads = 256;
constexpr unsigned kFullMask = 0xffffffffu;
constexpr int64_t kMaxGridY = 65535;

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
  int32_t causal;
  float scale, log_alpha;
  HeadList selection;
  float* pooled;           // [slots, blocks, head_dim]
  int64_t* counts;         // [slots * blocks + 1] kept keys per tile; the last stays 0
  const int64_t* offsets;  // [slots * blocks + 1] their exclusive sum (write pass)
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

// Block (blockIdx.x, slot blockIdx.y): the fp32 sum of its rows in row order over the row count.
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
  for (int d = static_cast<int>(threadIdx.x); d < p.head_dim; d += kPoolThreads) {
    float sum = 0.0f;
    for (int64_t row = row_begin; row < row_end; ++row) {
      sum = __fadd_rn(sum, to_float(q[row * p.q_stride_row + d]));
    }
    p.pooled[(static_cast<int64_t>(slot) * p.blocks + block) * p.head_dim + d] =
        __fdiv_rn(sum, static_cast<float>(row_end - row_begin));
  }
}

struct alignas(16) SelectShared {
  float pooled[kRows][kMaxHeadDim];       // rows 16-byte aligned for float4 loads
  float tile_max[kRows][kTilesPerChunk];  // then the running maximum at each tile
  float running[kRows];
  BlockKeys keys[kRows];
  int32_t warp_kept[kRows][kWarps];
  int64_t kept[kRows];  // so far: the count, or the write cursor
};

// Scores of key `key` against the block's pooled queries: the host's vec_score. The key's row is
// read 16 bytes at a time (make_estimate_operands checks rows are 16-byte aligned and head_dim a
// multiple of 16); the FMA chain still runs over head_dim in order.
template <class Element>
__device__ void score_key(const VecKernelParams& p, const SelectShared& s, const Element* keys,
                          int32_t key, float (&scores)[kRows]) {
  constexpr int kVector = static_cast<int>(sizeof(uint4) / sizeof(Element));
#pragma unroll
  for (int r = 0; r < kRows; ++r) scores[r] = 0.0f;
  const Element* row = keys + key * p.k_stride_row;
  for (int d0 = 0; d0 < p.head_dim; d0 += kVector) {
    const uint4 bits = *reinterpret_cast<const uint4*>(row + d0);
    const auto* elements = reinterpret_cast<const Element*>(&bits);
    float values[kVector];
#pragma unroll
    for (int j = 0; j < kVector; ++j) values[j] = to_float(elements[j]);
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      // The pooled values as 16-byte broadcasts (one shared load per four FMAs).
#pragma unroll
      for (int j4 = 0; j4 < kVector; j4 += 4) {
        const float4 pooled = *reinterpret_cast<const float4*>(&s.pooled[r][d0 + j4]);
        scores[r] = __fmaf_rn(pooled.x, values[j4], scores[r]);
        scores[r] = __fmaf_rn(pooled.y, values[j4 + 1], scores[r]);
        scores[r] = __fmaf_rn(pooled.z, values[j4 + 2], scores[r]);
        scores[r] = __fmaf_rn(pooled.w, values[j4 + 3], scores[r]);
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kRows; ++r) scores[r] = __fmul_rn(scores[r], p.scale);
}

// Loads the pooled queries and key ranges of blocks [first_block, first_block + kRows); rows past
// the last block get no candidates. kept starts at 0 (count pass) or the row's offset (write).
template <bool kWrite>
__device__ void load_rows(const VecKernelParams& p, SelectShared& s, int32_t slot,
                          int32_t first_block) {
  for (int i = static_cast<int>(threadIdx.x); i < kRows * p.head_dim; i += kThreads) {
    const int r = i / p.head_dim;
    const int d = i % p.head_dim;
    const int32_t block = first_block + r;
    s.pooled[r][d] =
        block < p.blocks
            ? p.pooled[(static_cast<int64_t>(slot) * p.blocks + block) * p.head_dim + d]
            : 0.0f;
  }
  if (threadIdx.x < kRows) {
    const int r = static_cast<int>(threadIdx.x);
    const int32_t block = first_block + r;
    BlockKeys keys = block_keys(p, min(block, p.blocks - 1));
    if (block >= p.blocks) keys.candidate_end = 0;
    s.keys[r] = keys;
    s.running[r] = -std::numeric_limits<float>::infinity();
    const int64_t tile = static_cast<int64_t>(slot) * p.blocks + block;
    s.kept[r] = kWrite && block < p.blocks ? p.offsets[tile] : 0;
  }
}

// Each row's running maximum at each tile of the chunk from `chunk_begin` (s.tile_max holds the
// tiles' maxima over candidates): one thread per row, tiles in order, reset where a group starts.
__device__ void scan_running_max(const VecKernelParams& p, SelectShared& s, int32_t chunk_begin) {
  if (threadIdx.x >= kRows) return;
  const int r = static_cast<int>(threadIdx.x);
  float running = s.running[r];
  for (int t = 0; t < kTilesPerChunk; ++t) {
    const int32_t tile = chunk_begin / kTileKeys + t;
    if (tile % p.group_tiles == 0) running = -std::numeric_limits<float>::infinity();
    running = fmaxf(running, s.tile_max[r][t]);
    s.tile_max[r][t] = running;
  }
  s.running[r] = running;
}

// Counts (kWrite false) or writes (true) the kept keys of kRows blocks of slot blockIdx.x, from
// block blockIdx.y * kRows. Slots vary fastest in launch order, so the query heads of a KV head
// scan the same keys side by side and share them in L2.
template <class Element, bool kWrite>
__global__ void __launch_bounds__(kThreads) select_kernel(const VecKernelParams p) {
  __shared__ SelectShared s;
  const int32_t slot = static_cast<int32_t>(blockIdx.x);
  const int32_t first_block = static_cast<int32_t>(blockIdx.y) * kRows;
  const int32_t batch = slot / p.heads;
  const int32_t kv_head = query_head(p, slot % p.heads) / p.group;
  const auto* keys =
      static_cast<const Element*>(p.k) + batch * p.k_stride_batch + kv_head * p.k_stride_head;
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  const int warp = static_cast<int>(threadIdx.x) / kWarpSize;
  const int tile_in_chunk = static_cast<int>(threadIdx.x) / kTileKeys;
  load_rows<kWrite>(p, s, slot, first_block);
  __syncthreads();
  const int32_t sink_end = s.keys[0].sink_end;
  int32_t key_end = 0;  // past every row's last candidate
  for (int r = 0; r < kRows; ++r) key_end = max(key_end, s.keys[r].candidate_end);
  for (int32_t chunk = sink_end / kThreads * kThreads; chunk < key_end; chunk += kThreads) {
    const int32_t key = chunk + static_cast<int32_t>(threadIdx.x);
    float scores[kRows] = {};
    bool candidate[kRows];
    bool any = false;
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      candidate[r] = key < p.kv_len && s.keys[r].is_candidate(key);
      any = any || candidate[r];
    }
    if (any) score_key(p, s, keys, key, scores);
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      float tile_max = candidate[r] ? scores[r] : -std::numeric_limits<float>::infinity();
      for (int offset = kTileKeys / 2; offset > 0; offset /= 2) {
        tile_max = fmaxf(tile_max, __shfl_xor_sync(kFullMask, tile_max, offset));
      }
      if (threadIdx.x % kTileKeys == 0) s.tile_max[r][tile_in_chunk] = tile_max;
    }
    __syncthreads();
    scan_running_max(p, s, chunk);
    __syncthreads();
    unsigned ballots[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const bool kept =
          candidate[r] && __fsub_rn(scores[r], s.tile_max[r][tile_in_chunk]) >= p.log_alpha;
      ballots[r] = __ballot_sync(kFullMask, kept);
      if (lane == 0) s.warp_kept[r][warp] = __popc(ballots[r]);
    }
    __syncthreads();
    if (kWrite) {
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        if ((ballots[r] >> lane & 1u) == 0) continue;
        int64_t position = s.kept[r] + __popc(ballots[r] & ((1u << lane) - 1u));
        for (int w = 0; w < warp; ++w) position += s.warp_kept[r][w];
        p.columns[position] = key;
      }
    }
    __syncthreads();
    if (threadIdx.x < kRows) {
      for (int w = 0; w < kWarps; ++w) s.kept[threadIdx.x] += s.warp_kept[threadIdx.x][w];
    }
    // The next chunk's first barrier orders this update before its readers.
  }
  if (!kWrite && threadIdx.x < kRows &&
      first_block + static_cast<int32_t>(threadIdx.x) < p.blocks) {
    p.counts[static_cast<int64_t>(slot) * p.blocks + first_block + threadIdx.x] =
        s.kept[threadIdx.x];
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
  record.column_begin = p.offsets[tile];
  record.column_end = p.offsets[tile + 1];
  tiles[tile] = record;
  const int64_t item = static_cast<int64_t>(block) * slots + slot;
  sort_keys[item] = static_cast<uint32_t>(span_keys + record.column_end - record.column_begin);
  sort_values[item] = static_cast<int32_t>(tile);
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
  const int64_t blocks = ceil_div(shape.q_len, detail::vec_params(resolved_spec).pooling);
  if (ceil_div(blocks, kRows) > kMaxGridY) {
    throw Error(ErrorCode::kUnsupported, "build_vec_plan_on_device: at most " +
                                             std::to_string(kMaxGridY * kRows) +
                                             " pooled blocks, got " + std::to_string(blocks));
  }
  if (shape.head_slots() > kMaxGridY) {
    throw Error(ErrorCode::kUnsupported, "build_vec_plan_on_device: at most " +
                                             std::to_string(kMaxGridY) + " head slots, got " +
                                             std::to_string(shape.head_slots()));
  }
}

template <class Element>
void launch_selection(const VecKernelParams& p, int32_t slots, bool write, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(slots), static_cast<unsigned>(ceil_div(p.blocks, kRows)));
  if (write) {
    select_kernel<Element, true><<<grid, kThreads, 0, stream>>>(p);
    check_launch("vec index: write pass");
  } else {
    pool_kernel<Element><<<dim3(static_cast<unsigned>(p.blocks), static_cast<unsigned>(slots)),
                           kPoolThreads, 0, stream>>>(p);
    check_launch("vec index: pooled queries");
    select_kernel<Element, false><<<grid, kThreads, 0, stream>>>(p);
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
  const std::size_t scan_bytes = scan_storage_bytes(items + 1, stream, "vec index: scan storage");
  const std::size_t sort_bytes =
      sort_storage_bytes<uint32_t>(items, sort_bits, stream, "vec index: sort storage");
  ScratchLayout at;
  const std::size_t pooled_at = at.add<float>(tiles * operands.head_dim);
  const std::size_t counts_at = at.add<int64_t>(tiles + 1);
  const std::size_t offsets_at = at.add<int64_t>(tiles + 1);
  const std::size_t keys_at = at.add<uint32_t>(tiles);
  const std::size_t sorted_at = at.add<uint32_t>(tiles);
  const std::size_t values_at = at.add<int32_t>(tiles);
  const std::size_t temp_at =
      at.add<std::byte>(static_cast<int64_t>(std::max(scan_bytes, sort_bytes)));
  const StreamScratch scratch(at.bytes(), stream, "vec index: scratch");
  std::byte* base = scratch.base();
  p.pooled = region<float>(base, pooled_at);
  p.counts = region<int64_t>(base, counts_at);
  p.offsets = region<int64_t>(base, offsets_at);
  check_cuda(cudaMemsetAsync(p.counts + tiles, 0, sizeof(int64_t), stream), "vec index: counts");
  run_selection(operands, p, slots, false, stream);
  std::size_t temp_bytes = scan_bytes;
  check_cuda(cub::DeviceScan::ExclusiveSum(region<std::byte>(base, temp_at), temp_bytes, p.counts,
                                           region<int64_t>(base, offsets_at), items + 1, stream),
             "vec index: column offsets");
  int64_t columns = 0;
  check_cuda(
      cudaMemcpyAsync(&columns, p.offsets + tiles, sizeof(int64_t), cudaMemcpyDeviceToHost, stream),
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
