// merge_partials on the GPU: combines (O, LSE) results over disjoint key sets, with the numerics of
// the CPU reference (src/cpu/merge.cpp): weights relative to the largest LSE, parts with LSE = -inf
// contribute nothing whatever their O holds, rows where every part is -inf get O = 0, LSE = -inf.
//
// Two kernels. Where every row of out and of the parts is made of aligned 16-byte vectors (head_dim
// a multiple of kVectorElements, contiguous, aligned), the vector kernel gives each thread
// kVectorElements of one row: the threads of a row weigh the parts themselves (the LSEs are
// broadcast loads), and a block holds consecutive positions of one (batch, head), so that its LSE
// loads and stores are coalesced. It moves the bytes at memory speed; the multi-pass plans (the
// grid mask's two passes at 128K merge 0.9 GB of bf16 per part) wait on it. Otherwise, the generic
// kernel: one warp per output row, lane p reads the LSE of part p, the warp reduces the maximum and
// the sum of weights, then the lanes split head_dim and take each part's weight by shuffle. Part
// descriptors travel in the kernel parameters, kMaxParts per launch; more parts are folded in
// further launches that take `out` as their first part (so with more than kMaxParts parts,
// intermediate results are rounded to out's dtype).

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "cuda/attention/sm80/ptx.cuh"
#include "cuda/common/cuda_check.h"
#include "cuda/runtime/engine.h"
#include "mmsparse/status.h"

namespace mmsparse::cuda {
namespace {

// One part per lane; also keeps the parameter block under the 4 KB every launch may pass.
constexpr int kMaxParts = kWarpSize;
constexpr int kMergeWarps = 8;
constexpr int kMergeThreads = kMergeWarps * kWarpSize;
constexpr int64_t kMergeMaxBlocks = 8192;  // grid-stride beyond this
// The vector kernel: elements per thread (one 16-byte vector of a 2-byte dtype, two of float32).
constexpr int kVectorElements = 8;
constexpr int kVectorAlignment = 16;
constexpr int kVectorThreads = 256;

enum class StorageType : int32_t { kFloat32, kFloat16, kBFloat16 };

struct PartView {
  const void* out;  // [batch, q_len, heads, head_dim]
  int64_t out_strides[4];
  const float* lse;  // [batch, heads, q_len]
  int64_t lse_strides[3];
  StorageType type;
};

struct MergeParams {
  PartView parts[kMaxParts];
  int32_t num_parts;
  int64_t q_len;
  int64_t heads;
  int64_t head_dim;
  int64_t rows;  // batch * q_len * heads
  void* out;     // [batch, q_len, heads, head_dim]
  int64_t out_strides[4];
  StorageType out_type;
  float* lse;  // [batch, heads, q_len]
  int64_t lse_strides[3];
};
static_assert(sizeof(MergeParams) <= 4096, "kernel parameters are limited to 4 KB");

__device__ float load_element(const void* data, int64_t offset, StorageType type) {
  switch (type) {
    case StorageType::kFloat16:
      return __half2float(static_cast<const __half*>(data)[offset]);
    case StorageType::kBFloat16:
      return __bfloat162float(static_cast<const __nv_bfloat16*>(data)[offset]);
    case StorageType::kFloat32:
      break;
  }
  return static_cast<const float*>(data)[offset];
}

__device__ void store_element(void* data, int64_t offset, StorageType type, float value) {
  switch (type) {
    case StorageType::kFloat16:
      static_cast<__half*>(data)[offset] = __float2half_rn(value);
      return;
    case StorageType::kBFloat16:
      static_cast<__nv_bfloat16*>(data)[offset] = __float2bfloat16_rn(value);
      return;
    case StorageType::kFloat32:
      break;
  }
  static_cast<float*>(data)[offset] = value;
}

// Part `part`'s LSE of one row.
__device__ float read_part_lse(const PartView& part, int64_t batch, int64_t head,
                               int64_t position) {
  return part.lse[batch * part.lse_strides[0] + head * part.lse_strides[1] +
                  position * part.lse_strides[2]];
}

__device__ float warp_max(float value) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    value = fmaxf(value, __shfl_xor_sync(kFullWarpMask, value, offset));
  }
  return value;
}

__device__ float warp_sum(float value) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    value += __shfl_xor_sync(kFullWarpMask, value, offset);
  }
  return value;
}

__global__ void __launch_bounds__(kMergeThreads)
    merge_partials_kernel(const __grid_constant__ MergeParams params) {
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  const int64_t first_row =
      (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarpSize;
  const int64_t row_step = static_cast<int64_t>(gridDim.x) * blockDim.x / kWarpSize;
  for (int64_t row = first_row; row < params.rows; row += row_step) {
    const int64_t head = row % params.heads;  // rows are (batch, position, head), head fastest
    const int64_t position = row / params.heads % params.q_len;
    const int64_t batch = row / (params.heads * params.q_len);

    // Lane p weighs part p, relative to the largest LSE so that no exp overflows.
    float part_lse = -INFINITY;
    if (lane < params.num_parts)
      part_lse = read_part_lse(params.parts[lane], batch, head, position);
    const float max_lse = warp_max(part_lse);
    const float weight = max_lse == -INFINITY ? 0.0f : expf(part_lse - max_lse);
    const float sum = warp_sum(weight);
    const float merged_lse = max_lse == -INFINITY ? -INFINITY : max_lse + logf(sum);

    const int64_t out_row = batch * params.out_strides[0] + position * params.out_strides[1] +
                            head * params.out_strides[2];
    // Every lane walks all of head_dim's 32-wide slices, so the shuffles below see the whole warp.
    for (int64_t slice = 0; slice < params.head_dim; slice += kWarpSize) {
      const int64_t d = slice + lane;
      float merged = 0.0f;
      for (int p = 0; p < params.num_parts; ++p) {
        const float part_weight = __shfl_sync(kFullWarpMask, weight, p);
        // A part without keys contributes nothing, whatever its O holds.
        if (part_weight == 0.0f || d >= params.head_dim) continue;
        const PartView& part = params.parts[p];
        const int64_t offset = batch * part.out_strides[0] + position * part.out_strides[1] +
                               head * part.out_strides[2] + d * part.out_strides[3];
        merged += part_weight / sum * load_element(part.out, offset, part.type);
      }
      if (d < params.head_dim)
        store_element(params.out, out_row + d * params.out_strides[3], params.out_type, merged);
    }
    // Every lane has read the LSEs (one of which `lse` may alias) before lane 0 overwrites it.
    __syncwarp();
    if (lane == 0) {
      params.lse[batch * params.lse_strides[0] + head * params.lse_strides[1] +
                 position * params.lse_strides[2]] = merged_lse;
    }
  }
}

int storage_bytes(StorageType type) { return type == StorageType::kFloat32 ? 4 : 2; }

// kVectorElements elements from `data` + offset (elements), aligned to kVectorAlignment.
__device__ void load_vector(const void* data, int64_t offset, StorageType type,
                            float (&values)[kVectorElements]) {
  if (type == StorageType::kFloat32) {
    const auto* vectors = reinterpret_cast<const float4*>(static_cast<const float*>(data) + offset);
    const float4 low = vectors[0];
    const float4 high = vectors[1];
    const float unpacked[kVectorElements] = {low.x,  low.y,  low.z,  low.w,
                                             high.x, high.y, high.z, high.w};
#pragma unroll
    for (int i = 0; i < kVectorElements; ++i) values[i] = unpacked[i];
    return;
  }
  const uint4 raw = *reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(data) + offset);
  const uint32_t words[kVectorElements / 2] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int i = 0; i < kVectorElements / 2; ++i) {
    const auto low = static_cast<unsigned short>(words[i] & 0xffffu);
    const auto high = static_cast<unsigned short>(words[i] >> 16);
    if (type == StorageType::kBFloat16) {
      values[2 * i] = __bfloat162float(__ushort_as_bfloat16(low));
      values[2 * i + 1] = __bfloat162float(__ushort_as_bfloat16(high));
    } else {
      values[2 * i] = __half2float(__ushort_as_half(low));
      values[2 * i + 1] = __half2float(__ushort_as_half(high));
    }
  }
}

__device__ void store_vector(void* data, int64_t offset, StorageType type,
                             const float (&values)[kVectorElements]) {
  if (type == StorageType::kFloat32) {
    auto* vectors = reinterpret_cast<float4*>(static_cast<float*>(data) + offset);
    vectors[0] = make_float4(values[0], values[1], values[2], values[3]);
    vectors[1] = make_float4(values[4], values[5], values[6], values[7]);
    return;
  }
  uint32_t words[kVectorElements / 2];
#pragma unroll
  for (int i = 0; i < kVectorElements / 2; ++i) {
    unsigned short low;
    unsigned short high;
    if (type == StorageType::kBFloat16) {
      low = __bfloat16_as_ushort(__float2bfloat16_rn(values[2 * i]));
      high = __bfloat16_as_ushort(__float2bfloat16_rn(values[2 * i + 1]));
    } else {
      low = __half_as_ushort(__float2half_rn(values[2 * i]));
      high = __half_as_ushort(__float2half_rn(values[2 * i + 1]));
    }
    words[i] = static_cast<uint32_t>(low) | static_cast<uint32_t>(high) << 16;
  }
  *reinterpret_cast<uint4*>(static_cast<uint16_t*>(data) + offset) =
      make_uint4(words[0], words[1], words[2], words[3]);
}

// The vector kernel's geometry: `row_threads` threads per row (head_dim / kVectorElements),
// `block_rows` consecutive positions of one (batch, head) per block, `position_blocks` blocks per
// (batch, head).
struct VectorGeometry {
  int32_t row_threads;
  int32_t block_rows;
  int64_t position_blocks;
};

__global__ void __launch_bounds__(kVectorThreads)
    merge_partials_vector_kernel(const __grid_constant__ MergeParams params,
                                 const VectorGeometry geometry) {
  const auto thread = static_cast<int32_t>(threadIdx.x);
  const int64_t group = blockIdx.x / geometry.position_blocks;  // batch · heads + head
  const int64_t batch = group / params.heads;
  const int64_t head = group % params.heads;
  const int64_t position =
      blockIdx.x % geometry.position_blocks * geometry.block_rows + thread / geometry.row_threads;
  const bool valid = thread < geometry.block_rows * geometry.row_threads && position < params.q_len;
  const int64_t d = static_cast<int64_t>(thread % geometry.row_threads) * kVectorElements;

  // Weights relative to the largest LSE, as the generic kernel's.
  float max_lse = -INFINITY;
  float sum = 0.0f;
  if (valid) {
    for (int p = 0; p < params.num_parts; ++p) {
      max_lse = fmaxf(max_lse, read_part_lse(params.parts[p], batch, head, position));
    }
    if (max_lse != -INFINITY) {
      for (int p = 0; p < params.num_parts; ++p) {
        sum += expf(read_part_lse(params.parts[p], batch, head, position) - max_lse);
      }
    }
  }
  float merged[kVectorElements] = {};
  if (valid && max_lse != -INFINITY) {
    for (int p = 0; p < params.num_parts; ++p) {
      const PartView& part = params.parts[p];
      const float weight = expf(read_part_lse(part, batch, head, position) - max_lse);
      // A part without keys contributes nothing, whatever its O holds.
      if (weight == 0.0f) continue;
      float values[kVectorElements];
      load_vector(part.out,
                  batch * part.out_strides[0] + position * part.out_strides[1] +
                      head * part.out_strides[2] + d,
                  part.type, values);
#pragma unroll
      for (int i = 0; i < kVectorElements; ++i) merged[i] += weight / sum * values[i];
    }
  }
  // out may alias a part: each thread reads its own elements of it before writing them, but a
  // row's LSE is read by all its threads, which may lie in two warps.
  __syncthreads();
  if (!valid) return;
  store_vector(params.out,
               batch * params.out_strides[0] + position * params.out_strides[1] +
                   head * params.out_strides[2] + d,
               params.out_type, merged);
  if (d == 0) {
    params.lse[batch * params.lse_strides[0] + head * params.lse_strides[1] +
               position * params.lse_strides[2]] =
        max_lse == -INFINITY ? -INFINITY : max_lse + logf(sum);
  }
}

// Whether every row of `data` (strides in elements) is made of aligned 16-byte vectors.
bool rows_are_vectors(const void* data, const int64_t (&strides)[4], StorageType type,
                      int64_t head_dim) {
  const auto vector_elements = static_cast<int64_t>(kVectorAlignment / storage_bytes(type));
  if (strides[3] != 1 || head_dim % kVectorElements != 0) return false;
  if (reinterpret_cast<std::uintptr_t>(data) % kVectorAlignment != 0) return false;
  for (int dim = 0; dim < 3; ++dim) {
    if (strides[dim] % vector_elements != 0) return false;
  }
  return true;
}

StorageType storage_type(DType dtype, const std::string& name) {
  switch (dtype) {
    case DType::kFloat32:
      return StorageType::kFloat32;
    case DType::kFloat16:
      return StorageType::kFloat16;
    case DType::kBFloat16:
      return StorageType::kBFloat16;
    default:
      throw_invalid_argument(name + " dtype", "float32, float16 or bfloat16",
                             std::string(dtype_name(dtype)));
  }
}

PartView make_part_view(const MergePart& part, const std::string& name) {
  if (part.out == nullptr || part.lse == nullptr) {
    throw_invalid_argument(name, "device pointers for out and lse", "null");
  }
  PartView view{};
  view.out = part.out;
  std::copy(part.out_strides.begin(), part.out_strides.end(), view.out_strides);
  view.lse = part.lse;
  std::copy(part.lse_strides.begin(), part.lse_strides.end(), view.lse_strides);
  view.type = storage_type(part.dtype, name);
  return view;
}

}  // namespace

std::vector<MergePart> make_merge_parts(std::span<const TensorView> outs,
                                        std::span<const TensorView> lses) {
  std::vector<MergePart> parts;
  for (std::size_t p = 0; p < outs.size() && p < lses.size(); ++p) {
    const TensorView& out = outs[p];
    const TensorView& lse = lses[p];
    parts.push_back({out.dtype,
                     out.data,
                     {out.strides[0], out.strides[1], out.strides[2], out.strides[3]},
                     lse.data_as<const float>(),
                     {lse.strides[0], lse.strides[1], lse.strides[2]}});
  }
  return parts;
}

MergeArgs make_merge_args(std::span<const MergePart> parts, const TensorView& out,
                          const TensorView& lse, void* stream) {
  MergeArgs args;
  args.batch = out.shape[0];
  args.q_len = out.shape[1];
  args.heads = out.shape[2];
  args.head_dim = out.shape[3];
  args.parts = parts;
  args.dtype = out.dtype;
  args.out = out.data;
  args.out_strides = {out.strides[0], out.strides[1], out.strides[2], out.strides[3]};
  args.lse = lse.data_as<float>();
  args.lse_strides = {lse.strides[0], lse.strides[1], lse.strides[2]};
  args.stream = stream;
  return args;
}

void merge_partials(const MergeArgs& args) {
  if (args.parts.empty()) throw_invalid_argument("parts", "at least one part", "0 parts");
  if (args.batch < 0 || args.q_len < 0 || args.heads < 0 || args.head_dim < 0) {
    throw_invalid_argument("merge shape", "non-negative extents", "a negative one");
  }
  const int64_t rows = args.batch * args.q_len * args.heads;
  if (rows == 0) return;
  if (args.out == nullptr || args.lse == nullptr) {
    throw_invalid_argument("out, lse", "device pointers", "null");
  }

  MergeParams params{};
  params.q_len = args.q_len;
  params.heads = args.heads;
  params.head_dim = args.head_dim;
  params.rows = rows;
  params.out = args.out;
  std::copy(args.out_strides.begin(), args.out_strides.end(), params.out_strides);
  params.out_type = storage_type(args.dtype, "out");
  params.lse = args.lse;
  std::copy(args.lse_strides.begin(), args.lse_strides.end(), params.lse_strides);

  // The running result as the first part of every launch after the first.
  MergePart running;
  running.dtype = args.dtype;
  running.out = args.out;
  running.out_strides = args.out_strides;
  running.lse = args.lse;
  running.lse_strides = args.lse_strides;

  const auto stream = static_cast<cudaStream_t>(args.stream);
  const int64_t blocks =
      std::clamp<int64_t>((rows + kMergeWarps - 1) / kMergeWarps, 1, kMergeMaxBlocks);
  // The vector kernel when out and every part hold their rows as aligned vectors, a row fits one
  // block and the blocks fit one grid dimension.
  VectorGeometry geometry{};
  geometry.row_threads = static_cast<int32_t>(args.head_dim / kVectorElements);
  bool vectors = args.head_dim <= static_cast<int64_t>(kVectorThreads) * kVectorElements &&
                 rows_are_vectors(params.out, params.out_strides, params.out_type, args.head_dim);
  int64_t vector_blocks = 0;
  if (vectors) {
    geometry.block_rows = kVectorThreads / geometry.row_threads;
    geometry.position_blocks = (args.q_len + geometry.block_rows - 1) / geometry.block_rows;
    vector_blocks = args.batch * args.heads * geometry.position_blocks;
  }
  std::size_t next = 0;
  while (next < args.parts.size()) {
    int32_t count = 0;
    if (next > 0) params.parts[count++] = make_part_view(running, "out");
    for (; count < kMaxParts && next < args.parts.size(); ++count, ++next) {
      params.parts[count] = make_part_view(args.parts[next], "parts[" + std::to_string(next) + "]");
    }
    params.num_parts = count;
    for (int32_t p = 0; p < count && vectors; ++p) {
      const PartView& part = params.parts[p];
      vectors = rows_are_vectors(part.out, part.out_strides, part.type, args.head_dim);
    }
    if (vectors && vector_blocks <= std::numeric_limits<int32_t>::max()) {
      merge_partials_vector_kernel<<<static_cast<unsigned>(vector_blocks), kVectorThreads, 0,
                                     stream>>>(params, geometry);
      check_launch("merge_partials_vector_kernel");
    } else {
      merge_partials_kernel<<<static_cast<unsigned>(blocks), kMergeThreads, 0, stream>>>(params);
      check_launch("merge_partials_kernel");
    }
  }
}

}  // namespace mmsparse::cuda
