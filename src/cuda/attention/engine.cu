// Host side of the attention engine: argument checks, the fill of rows no tile covers, and the
// dispatch to the (element type, head_dim) instantiation.

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <string>
#include <string_view>

#include "cuda/attention/key_order_copy.h"
#include "cuda/attention/launch.h"
#include "cuda/attention/params.cuh"
#include "cuda/attention/sm90/params.cuh"
#include "cuda/attention/tile_queue.h"
#include "cuda/common/cuda_check.h"
#include "cuda/runtime/device_query.h"
#include "cuda/runtime/engine.h"
#include "cuda/runtime/plan_view.cuh"
#include "cuda/runtime/tensor_map.h"
#include "mmsparse/status.h"

namespace mmsparse::cuda {
namespace {

constexpr int64_t kVectorBytes = 16;  // rows move as 16-byte vectors
constexpr int64_t kMaxGridY = 65535;  // CUDA's limit on gridDim.y
constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();
constexpr int kFillThreads = 256;
constexpr int64_t kFillMaxBlocks = 4096;  // grid-stride beyond this
// The wgmma kernel's instantiations (sm90/spans_*.cu and the like) and the shape of its K/V copies,
// which must match WgmmaTraits: chunks of wgmma_chunk_keys(head_dim) keys, boxes one 128-byte
// swizzle span wide.
constexpr int64_t kWarpgroupTileRows = 64;
constexpr int64_t kSwizzleSpanBytes = 128;
constexpr const char* kScheduleVariable = "MMSPARSE_CTA_SCHEDULE";  // CtaSchedule's override
// kAuto runs persistent CTAs where the plan's tiles list at most kPersistentMaxMeanKeyChunks key
// chunks on average (DevicePlan::listed_keys over num_tiles, in wgmma chunks) and its longest tile
// lists at least kPersistentMinLongestToMean times the mean (longest_tile_keys). Measured on an
// H200, bfloat16, head_dim 128 (docs/blindsight.md, "Persistent CTAs"): persistent CTAs took
// 2-3% off BlindSight's templates at 23-35 chunks a tile, the longest 8-12 times that (36K
// tokens), and 0.8% at 49, the longest 21 times (131K, intra); they were neutral at 84-95 (131K,
// sink and intra+sink), cost dense 2.4% at 145 and 4.6% at 513 (longest twice the mean), and cost
// 0-5.5% on the engine bench's uniform short tiles (every tile 8-64 chunks, longest = mean). The
// mean's bound lies between the last gain and the first neutral point, the ratio's between dense's
// 2 and the templates' 8. Only plans that gather keys (DevicePlanLayout::gathers) gain: persistent
// CTAs run the gathered-key instantiation for every plan, and a plan of spans only, as BlindSight's
// key-ordered plans are, loses the tensor-copy-only instantiation it runs under one CTA per tile.
// The same H200 measured the templates in place 1.1-3.7% faster persistent and through key orders
// 4.2-6.3% slower (36K and 131K tokens; docs/blindsight.md, "Key orders").
constexpr int64_t kPersistentMaxMeanKeyChunks = 64;
constexpr int64_t kPersistentMinLongestToMean = 4;

// --- Fill of the rows no tile covers: O = 0, LSE = -inf
// -------------------------------------------

struct FillParams {
  char* out;  // [batch, q_len, heads, head_dim] bytes; strides below in bytes
  int64_t out_batch_stride;
  int64_t out_row_stride;
  int64_t out_head_stride;
  int64_t vectors_per_row;  // head_dim * element size / 16
  float* lse;               // [batch, heads, q_len]
  int64_t lse_batch_stride;
  int64_t lse_head_stride;
  int64_t lse_row_stride;
  int64_t batch;
  int64_t q_len;
  int64_t heads;
};

__global__ void fill_empty_outputs_kernel(const __grid_constant__ FillParams params) {
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t rows = params.batch * params.q_len * params.heads;
  for (int64_t index = first; index < rows * params.vectors_per_row; index += step) {
    const int64_t vector = index % params.vectors_per_row;
    const int64_t row = index / params.vectors_per_row;  // (batch, position, head), head fastest
    const int64_t head = row % params.heads;
    const int64_t position = row / params.heads % params.q_len;
    const int64_t batch = row / (params.heads * params.q_len);
    char* destination = params.out + batch * params.out_batch_stride +
                        position * params.out_row_stride + head * params.out_head_stride +
                        vector * kVectorBytes;
    *reinterpret_cast<uint4*>(destination) = make_uint4(0, 0, 0, 0);
  }
  for (int64_t index = first; index < rows; index += step) {
    const int64_t position = index % params.q_len;  // (batch, head, position), position fastest
    const int64_t head = index / params.q_len % params.heads;
    const int64_t batch = index / (params.q_len * params.heads);
    params.lse[batch * params.lse_batch_stride + head * params.lse_head_stride +
               position * params.lse_row_stride] = -INFINITY;
  }
}

void fill_empty_outputs(const AttentionArgs& args, cudaStream_t stream) {
  const auto element_bytes = static_cast<int64_t>(dtype_size(args.dtype));
  FillParams params{};
  params.out = static_cast<char*>(args.out);
  params.out_batch_stride = args.out_strides[0] * element_bytes;
  params.out_row_stride = args.out_strides[1] * element_bytes;
  params.out_head_stride = args.out_strides[2] * element_bytes;
  params.vectors_per_row = args.head_dim * element_bytes / kVectorBytes;
  params.lse = args.lse;
  params.lse_batch_stride = args.lse_strides[0];
  params.lse_head_stride = args.lse_strides[1];
  params.lse_row_stride = args.lse_strides[2];
  params.batch = args.batch;
  params.q_len = args.q_len;
  params.heads = args.q_heads;
  const int64_t work = args.batch * args.q_len * args.q_heads * params.vectors_per_row;
  const int64_t blocks =
      std::clamp<int64_t>((work + kFillThreads - 1) / kFillThreads, 1, kFillMaxBlocks);
  fill_empty_outputs_kernel<<<static_cast<unsigned>(blocks), kFillThreads, 0, stream>>>(params);
  check_launch("fill_empty_outputs_kernel");
}

// --- Argument checks
// -------------------------------------------------------------------------------

std::string to_text(int64_t value) { return std::to_string(value); }

void check_extent(const char* name, int64_t got, int64_t expected, const char* why) {
  if (got != expected) throw_invalid_argument(name, to_text(expected) + why, to_text(got));
}

// 16-byte vectors: aligned base, contiguous last dimension, other strides whole vectors.
void check_rows(const char* name, const void* data, const Strides4& strides, DType dtype) {
  if (data == nullptr) throw_invalid_argument(name, "a device pointer", "null");
  if (strides[3] != 1) {
    throw Error(ErrorCode::kUnsupported, std::string(name) +
                                             ": the CUDA engine needs a contiguous last dimension "
                                             "(stride 1), got stride " +
                                             to_text(strides[3]));
  }
  const auto vector_elements = kVectorBytes / static_cast<int64_t>(dtype_size(dtype));
  const bool aligned = reinterpret_cast<std::uintptr_t>(data) % kVectorBytes == 0 &&
                       strides[0] % vector_elements == 0 && strides[1] % vector_elements == 0 &&
                       strides[2] % vector_elements == 0;
  if (!aligned) {
    throw Error(ErrorCode::kUnsupported,
                std::string(name) +
                    ": the CUDA engine needs a 16-byte aligned pointer and strides that "
                    "are multiples of " +
                    to_text(vector_elements) + " elements, got strides [" + to_text(strides[0]) +
                    ", " + to_text(strides[1]) + ", " + to_text(strides[2]) + ", " +
                    to_text(strides[3]) + "]");
  }
}

// The mma.sync kernel's head_dims (sm80/kernel_*.cu): 64 and 128.
bool mma_sync_serves(const AttentionArgs& args) {
  return args.head_dim == 64 || args.head_dim == 128;
}

void check_arguments(const DevicePlan& plan, const AttentionArgs& args) {
  if (!supports_attention(args.dtype, args.head_dim)) {
    throw Error(ErrorCode::kUnsupported,
                "attention: the CUDA engine serves float16 and bfloat16 with head_dim 64, 128 or "
                "256, got " +
                    std::string(dtype_name(args.dtype)) + " with head_dim " +
                    to_text(args.head_dim));
  }
  if (plan.data() == nullptr)
    throw_invalid_argument("plan", "an uploaded DevicePlan", "an empty one");
  const PlanShape& shape = plan.shape();
  if (shape.tile_rows > kMaxTileRows) {
    throw Error(ErrorCode::kUnsupported,
                "plan.shape.tile_rows: the CUDA engine runs tiles of at most " +
                    to_text(kMaxTileRows) + " rows, got " + to_text(shape.tile_rows));
  }
  if (args.kernel == AttentionKernel::kMmaSync && shape.tile_rows > kMmaSyncTileRows) {
    throw Error(ErrorCode::kUnsupported,
                "plan.shape.tile_rows: the mma.sync kernel runs tiles of at most " +
                    to_text(kMmaSyncTileRows) + " rows, got " + to_text(shape.tile_rows));
  }
  if (args.kernel == AttentionKernel::kMmaSync && !mma_sync_serves(args)) {
    throw Error(ErrorCode::kUnsupported,
                "head_dim: the mma.sync kernel serves head_dim 64 or 128, got " +
                    to_text(args.head_dim) + " (head_dim " + to_text(kWgmmaWideHeadDim) +
                    " runs on the wgmma kernel: AttentionKernel::kAuto or kWgmma)");
  }
  if (args.kv_heads <= 0 || args.q_heads % args.kv_heads != 0) {
    throw_invalid_argument("q_heads", "a positive multiple of kv_heads = " + to_text(args.kv_heads),
                           to_text(args.q_heads));
  }
  check_extent("plan heads", shape.heads, args.q_heads, " (q_heads)");
  check_extent("plan q_len", shape.q_len, args.q_len, " (q_len)");
  check_extent("plan kv_len", shape.kv_len, args.kv_len, " (kv_len)");
  if (shape.batch != 1 && shape.batch != args.batch) {
    throw_invalid_argument("plan batch", "1 or " + to_text(args.batch) + " (batch)",
                           to_text(shape.batch));
  }
  if (shape.batch == 1 && args.batch > kMaxGridY) {
    throw Error(ErrorCode::kUnsupported,
                "attention: a broadcast plan serves at most " + to_text(kMaxGridY) +
                    " batch elements on the CUDA engine, got " + to_text(args.batch));
  }
  if (plan.num_tiles() > kInt32Max) {
    throw Error(ErrorCode::kUnsupported, "plan: the CUDA engine runs at most 2^31 - 1 tiles, got " +
                                             to_text(plan.num_tiles()));
  }
  if (!std::isfinite(args.scale) || args.scale <= 0.0f) {
    throw_invalid_argument("scale", "a finite, positive softmax scale", std::to_string(args.scale));
  }
  check_rows("q", args.q, args.q_strides, args.dtype);
  if (args.kv_len > 0) {  // without keys nothing reads k or v, and empty tensors may own no memory
    check_rows("k", args.k, args.k_strides, args.dtype);
    check_rows("v", args.v, args.v_strides, args.dtype);
  }
  check_rows("out", args.out, args.out_strides, args.dtype);
  if (args.lse == nullptr) throw_invalid_argument("lse", "a device pointer", "null");
}

AttentionParams make_params(const DevicePlan& plan, const AttentionArgs& args) {
  constexpr float kLog2E = 1.44269504088896340736f;
  AttentionParams params{};
  params.q = {args.q, args.q_strides[0], args.q_strides[1], args.q_strides[2]};
  params.k = {args.k, args.k_strides[0], args.k_strides[1], args.k_strides[2]};
  params.v = {args.v, args.v_strides[0], args.v_strides[1], args.v_strides[2]};
  params.out = {args.out, args.out_strides[0], args.out_strides[1], args.out_strides[2]};
  params.lse = {args.lse, args.lse_strides[0], args.lse_strides[1], args.lse_strides[2]};
  params.q_len = static_cast<int32_t>(args.q_len);
  params.kv_len = static_cast<int32_t>(args.kv_len);
  params.heads = static_cast<int32_t>(args.q_heads);
  params.group_size = static_cast<int32_t>(args.q_heads / args.kv_heads);
  params.broadcast_plan = plan.shape().batch == 1 ? 1 : 0;
  params.scale_log2 = args.scale * kLog2E;
  params.accumulate = args.accumulate ? 1 : 0;
  params.plan = make_plan_view(plan);
  return params;
}

// The tensor maps of K and V for the wgmma kernel, and their lattice views when the plan has
// lattice records; false when the driver refuses any view. Without keys no plan has spans, the
// kernel copies nothing, and the maps stay unset.
bool encode_key_value_maps(const DevicePlan& plan, const AttentionArgs& args,
                           WgmmaAttentionParams& params) {
  if (args.kv_len == 0) return true;
  RowTensorMapRequest request;
  request.dtype = args.dtype;
  request.batch = args.batch;
  request.rows = args.kv_len;
  request.heads = args.kv_heads;
  request.head_dim = args.head_dim;
  request.box_rows = wgmma_chunk_keys(args.head_dim);
  request.box_columns =
      static_cast<int>(kSwizzleSpanBytes / static_cast<int64_t>(dtype_size(args.dtype)));
  LatticeTensorMapRequest lattice;
  lattice.period = plan.layout().lattice_step;
  lattice.periods = lattice.period > 0 ? args.kv_len / lattice.period : 0;
  lattice.box_periods = wgmma_chunk_keys(args.head_dim) / kLatticeWidth;
  const auto encode = [&](const void* data, const Strides4& strides, CUtensorMap& rows,
                          CUtensorMap& lattice_rows) {
    request.data = data;
    request.strides = strides;
    if (!encode_row_tensor_map(request, rows)) return false;
    if (lattice.period == 0) return true;
    lattice.rows = request;
    lattice.rows.box_rows = kLatticeWidth;
    return encode_lattice_tensor_map(lattice, lattice_rows);
  };
  params.lattice_step = lattice.period;
  return encode(args.k, args.k_strides, params.keys, params.lattice_keys) &&
         encode(args.v, args.v_strides, params.values, params.lattice_values);
}

// The tensor maps of K and V in key-order layout (key_order_copy.h), for plans with key orders;
// false when the driver refuses them.
bool encode_key_order_maps(const KeyOrderCopy& copy, const AttentionArgs& args,
                           WgmmaAttentionParams& params) {
  if (copy.rows() == 0) return true;
  RowTensorMapRequest request;
  request.dtype = args.dtype;
  request.batch = args.batch;
  request.rows = copy.rows();
  request.heads = args.kv_heads;
  request.head_dim = args.head_dim;
  request.box_rows = wgmma_chunk_keys(args.head_dim);
  request.box_columns =
      static_cast<int>(kSwizzleSpanBytes / static_cast<int64_t>(dtype_size(args.dtype)));
  const auto encode = [&](const InputOperand& operand, CUtensorMap& map) {
    request.data = operand.data;
    request.strides = {operand.batch_stride, operand.row_stride, operand.head_stride, 1};
    return encode_row_tensor_map(request, map);
  };
  return encode(copy.keys(), params.ordered_keys) && encode(copy.values(), params.ordered_values);
}

// One consumer warpgroup per 64 rows of the plan's tiles at head_dim 128; two at head_dim 256,
// whatever the tiles (kWgmmaWideHeadDim: only two are compiled). `persistent_ctas` > 0: the
// persistent kernel with that many CTAs (persistent_ctas() says where it is compiled).
template <class Element, int kHeadDim, ChunkSources kSources,
          MaskTerms kMaskTerms = MaskTerms::kPositional>
void launch_wgmma_for_rows(const WgmmaAttentionParams& params, const DevicePlan& plan,
                           int32_t num_tiles, int32_t batch_blocks, int32_t persistent_ctas,
                           cudaStream_t stream) {
  if constexpr (kHeadDim == kWgmmaHeadDim) {
    if (plan.shape().tile_rows <= kWarpgroupTileRows) {
      launch_wgmma_attention<Element, kHeadDim, 1, kSources, kMaskTerms>(params, num_tiles,
                                                                         batch_blocks, stream);
      return;
    }
    // Plans of spans only run on the gathered-key instantiation too: its chunk cursor walks them
    // (every chunk a tensor copy, as on the spans-only kernel, and the same arithmetic per chunk),
    // so that persistent CTAs serve them without instantiations of their own.
    if constexpr (kSources == ChunkSources::kSpans || kSources == ChunkSources::kGathers) {
      if (persistent_ctas > 0) {
        launch_wgmma_persistent_attention<Element, kHeadDim, 2, ChunkSources::kGathers, kMaskTerms>(
            params, num_tiles, batch_blocks, persistent_ctas, tile_queue_counter(stream), stream);
        return;
      }
    }
  }
  launch_wgmma_attention<Element, kHeadDim, 2, kSources, kMaskTerms>(params, num_tiles,
                                                                     batch_blocks, stream);
}

// The instantiation for the key chunks the plan has (ChunkSources) and its mask terms (MaskTerms;
// plans with token masks have no lattice records: wgmma_serves).
template <class Element, int kHeadDim>
void launch_wgmma(const WgmmaAttentionParams& params, const DevicePlan& plan, int32_t num_tiles,
                  int32_t batch_blocks, int32_t persistent_ctas, cudaStream_t stream) {
  const DevicePlanLayout& layout = plan.layout();
  const auto launch = [&]<ChunkSources kSources, MaskTerms kMaskTerms = MaskTerms::kPositional>() {
    launch_wgmma_for_rows<Element, kHeadDim, kSources, kMaskTerms>(
        params, plan, num_tiles, batch_blocks, persistent_ctas, stream);
  };
  if (layout.has_token_info && layout.gathers) {
    launch.template operator()<ChunkSources::kGathers, MaskTerms::kTokens>();
  } else if (layout.has_token_info) {
    launch.template operator()<ChunkSources::kSpans, MaskTerms::kTokens>();
  } else if (layout.lattice_step > 0 && layout.gathers) {
    launch.template operator()<ChunkSources::kLatticesAndGathers>();
  } else if (layout.lattice_step > 0) {
    launch.template operator()<ChunkSources::kLattices>();
  } else if (layout.gathers) {
    launch.template operator()<ChunkSources::kGathers>();
  } else {
    launch.template operator()<ChunkSources::kSpans>();
  }
}

template <class Element>
void launch_wgmma_for_head_dim(const WgmmaAttentionParams& params, const DevicePlan& plan,
                               const AttentionArgs& args, int32_t num_tiles, int32_t batch_blocks,
                               int32_t persistent_ctas, cudaStream_t stream) {
  if (args.head_dim == kWgmmaWideHeadDim) {
    launch_wgmma<Element, kWgmmaWideHeadDim>(params, plan, num_tiles, batch_blocks, 0, stream);
  } else {
    launch_wgmma<Element, kWgmmaHeadDim>(params, plan, num_tiles, batch_blocks, persistent_ctas,
                                         stream);
  }
}

// Whether the persistent wgmma kernel is compiled for the plan (CtaSchedule).
bool persistent_compiled(const DevicePlan& plan, const AttentionArgs& args) {
  return args.head_dim == kWgmmaHeadDim && plan.shape().tile_rows > kWarpgroupTileRows &&
         plan.layout().lattice_step == 0;
}

// kAuto's override from the environment (CtaSchedule): kOneTilePerCta for "tile", kPersistent
// for "persistent" (wherever compiled, whatever the waves), kAuto when unset, empty or "auto".
CtaSchedule environment_schedule() {
  const char* value = std::getenv(kScheduleVariable);
  const std::string_view text = value == nullptr ? std::string_view() : std::string_view(value);
  if (text.empty() || text == "auto") return CtaSchedule::kAuto;
  if (text == "tile") return CtaSchedule::kOneTilePerCta;
  if (text == "persistent") return CtaSchedule::kPersistent;
  throw_invalid_argument(kScheduleVariable, "tile, persistent or auto", std::string(text));
}

// kAuto's rule (kPersistentMaxMeanKeyChunks): the tiles are short on average but a few are long
// (a mix, as BlindSight's image and text tiles), and there are more (tile, batch element) items
// than SMs, so that a CTA runs more than one tile, and the plan gathers keys. Plans whose keys a
// device builder did not count keep one CTA per tile.
bool persistent_pays(const DevicePlan& plan, const AttentionArgs& args, int64_t items) {
  const int64_t keys = plan.listed_keys();
  if (keys == DevicePlan::kUnknownKeys || plan.longest_tile_keys() == DevicePlan::kUnknownKeys ||
      plan.num_tiles() == 0 || !plan.layout().gathers) {
    return false;
  }
  const int64_t chunk_keys = wgmma_chunk_keys(args.head_dim);
  const bool short_on_average = keys <= kPersistentMaxMeanKeyChunks * chunk_keys * plan.num_tiles();
  const bool mixed =
      plan.longest_tile_keys() * plan.num_tiles() >= kPersistentMinLongestToMean * keys;
  return short_on_average && mixed && items > current_multiprocessors();
}

// The CTAs of the persistent wgmma kernel for a call of `items` (tile, batch element) items, or 0
// for one CTA per tile (CtaSchedule); throws kUnsupported where persistent CTAs are requested and
// not compiled for the call.
int32_t persistent_ctas(const DevicePlan& plan, const AttentionArgs& args, bool use_wgmma,
                        int64_t items) {
  const CtaSchedule schedule = args.schedule;
  const CtaSchedule override =
      schedule == CtaSchedule::kAuto ? environment_schedule() : CtaSchedule::kAuto;
  if (schedule == CtaSchedule::kOneTilePerCta || override == CtaSchedule::kOneTilePerCta) return 0;
  const bool compiled = use_wgmma && persistent_compiled(plan, args);
  if (schedule == CtaSchedule::kPersistent && !compiled) {
    throw Error(ErrorCode::kUnsupported,
                "schedule: persistent CTAs are compiled for the wgmma kernel at head_dim " +
                    to_text(kWgmmaHeadDim) +
                    " on plans without lattice records and with tiles of more than " +
                    to_text(kWarpgroupTileRows) + " rows; got " +
                    (use_wgmma ? "the wgmma" : "the mma.sync") + " kernel, head_dim " +
                    to_text(args.head_dim) + ", lattice records " +
                    (plan.layout().lattice_step > 0 ? "yes" : "no") + ", tile_rows " +
                    to_text(plan.shape().tile_rows));
  }
  const bool requested = schedule == CtaSchedule::kPersistent ||
                         override == CtaSchedule::kPersistent ||
                         (compiled && persistent_pays(plan, args, items));
  if (!requested || !compiled || items == 0) return 0;
  if (items > kInt32Max) {  // the tile queue counts items in 32 bits
    if (schedule != CtaSchedule::kPersistent) return 0;
    throw Error(ErrorCode::kUnsupported, "schedule: persistent CTAs take at most " +
                                             to_text(kInt32Max) +
                                             " (tile, batch element) items; got " + to_text(items));
  }
  return static_cast<int32_t>(std::min<int64_t>(items, current_multiprocessors()));
}

template <class Element>
void launch_for_head_dim(const AttentionParams& params, const AttentionArgs& args,
                         int32_t num_tiles, int32_t batch_blocks, cudaStream_t stream) {
  if (args.head_dim == 64) {
    launch_planned_attention<Element, 64>(params, num_tiles, batch_blocks, stream);
  } else {
    launch_planned_attention<Element, 128>(params, num_tiles, batch_blocks, stream);
  }
}

}  // namespace

bool wgmma_serves(const DevicePlan& plan, const AttentionArgs& args) {
  // Token masks are compiled for span and gather instantiations only (MaskTerms).
  const bool masks_served = !plan.layout().has_token_info || plan.layout().lattice_step == 0;
  return supports_attention(args.dtype, args.head_dim) &&
         (args.head_dim == kWgmmaHeadDim || args.head_dim == kWgmmaWideHeadDim) &&
         plan.shape().tile_rows <= kMaxTileRows && masks_served;
}

bool supports_attention(DType dtype, int64_t head_dim) {
  return (dtype == DType::kFloat16 || dtype == DType::kBFloat16) &&
         (head_dim == 64 || head_dim == 128 || head_dim == kWgmmaWideHeadDim);
}

AttentionArgs make_attention_args(const AttentionProblem& problem, const TensorView& q,
                                  const TensorView& k, const TensorView& v, const TensorView& out,
                                  const TensorView& lse, void* stream) {
  const auto strides4 = [](const TensorView& view) {
    return Strides4{view.strides[0], view.strides[1], view.strides[2], view.strides[3]};
  };
  AttentionArgs args;
  args.dtype = problem.dtype;
  args.batch = problem.batch;
  args.q_len = problem.q_len;
  args.kv_len = problem.kv_len;
  args.q_heads = problem.q_heads;
  args.kv_heads = problem.kv_heads;
  args.head_dim = problem.head_dim;
  args.scale = problem.scale;
  args.q = q.data;
  args.q_strides = strides4(q);
  args.k = k.data;
  args.k_strides = strides4(k);
  args.v = v.data;
  args.v_strides = strides4(v);
  args.out = out.data;
  args.out_strides = strides4(out);
  args.lse = lse.data_as<float>();
  args.lse_strides = {lse.strides[0], lse.strides[1], lse.strides[2]};
  args.stream = stream;
  return args;
}

void attention_planned(const DevicePlan& plan, const AttentionArgs& args) {
  if (args.batch == 0 || args.q_len == 0) return;
  check_arguments(plan, args);
  // Allocated (not yet filled) first, for its tensor maps; freed in stream order once the launches
  // below are queued.
  const KeyOrderCopy key_order_copy(plan, args);
  // The kernel, chosen before anything runs: every refusal comes before the first launch.
  WgmmaAttentionParams wgmma_params{};
  const bool use_wgmma = args.kernel != AttentionKernel::kMmaSync && wgmma_serves(plan, args) &&
                         encode_key_value_maps(plan, args, wgmma_params) &&
                         encode_key_order_maps(key_order_copy, args, wgmma_params);
  if (!use_wgmma && (args.kernel == AttentionKernel::kWgmma ||
                     plan.shape().tile_rows > kMmaSyncTileRows || !mma_sync_serves(args))) {
    throw Error(ErrorCode::kUnsupported,
                "attention: the wgmma kernel serves head_dim " + to_text(kWgmmaHeadDim) + " and " +
                    to_text(kWgmmaWideHeadDim) +
                    " plans whose K/V views the tensor-map encoder accepts, without lattice "
                    "records (strided spans the upload merges) where masks read tokens, and only "
                    "it runs head_dim " +
                    to_text(kWgmmaWideHeadDim) + " and tiles of more than " +
                    to_text(kMmaSyncTileRows) + " rows; got head_dim " + to_text(args.head_dim) +
                    ", token masks " + (plan.layout().has_token_info ? "yes" : "no") +
                    ", lattice records " + (plan.layout().lattice_step > 0 ? "yes" : "no") +
                    ", tile_rows " + to_text(plan.shape().tile_rows));
  }
  const auto batch_blocks = static_cast<int32_t>(plan.shape().batch == 1 ? args.batch : 1);
  const int32_t ctas = persistent_ctas(plan, args, use_wgmma, plan.num_tiles() * batch_blocks);
  const auto stream = static_cast<cudaStream_t>(args.stream);
  // Rows outside every tile keep the values of the CPU reference, O = 0 and LSE = -inf, or what
  // they hold when the call accumulates.
  if (!args.accumulate && !plan.covers_every_row()) fill_empty_outputs(args, stream);
  if (plan.num_tiles() == 0) return;

  AttentionParams params = make_params(plan, args);
  key_order_copy.fill(plan, args);
  params.k_ordered = key_order_copy.keys();
  params.v_ordered = key_order_copy.values();
  const auto num_tiles = static_cast<int32_t>(plan.num_tiles());
  if (use_wgmma) {
    wgmma_params.attention = params;
    if (args.dtype == DType::kBFloat16) {
      launch_wgmma_for_head_dim<__nv_bfloat16>(wgmma_params, plan, args, num_tiles, batch_blocks,
                                               ctas, stream);
    } else {
      launch_wgmma_for_head_dim<__half>(wgmma_params, plan, args, num_tiles, batch_blocks, ctas,
                                        stream);
    }
    return;
  }
  if (args.dtype == DType::kBFloat16) {
    launch_for_head_dim<__nv_bfloat16>(params, args, num_tiles, batch_blocks, stream);
  } else {
    launch_for_head_dim<__half>(params, args, num_tiles, batch_blocks, stream);
  }
}

CtaSchedule resolved_cta_schedule(const DevicePlan& plan, const AttentionArgs& args) {
  const bool use_wgmma = args.kernel != AttentionKernel::kMmaSync && wgmma_serves(plan, args);
  const int64_t batch_blocks = plan.shape().batch == 1 ? args.batch : 1;
  return persistent_ctas(plan, args, use_wgmma, plan.num_tiles() * batch_blocks) > 0
             ? CtaSchedule::kPersistent
             : CtaSchedule::kOneTilePerCta;
}

void attention_planned(const Plan& plan, const AttentionArgs& args) {
  const std::vector<DevicePlan> passes = upload_passes(plan, args.stream);
  attention_passes(passes, args);
}

}  // namespace mmsparse::cuda
