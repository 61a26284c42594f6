// merge_partials on the GPU: combines (O, LSE) results over disjoint key sets, with the numerics of
// the CPU reference (src/cpu/merge.cpp): weights relative to the largest LSE, parts with LSE = -inf
// contribute nothing whatever their O holds, rows where every part is -inf get O = 0, LSE = -inf.
//
// One warp per output row: lane p reads the LSE of part p, the warp reduces the maximum and the sum
// of weights, then the lanes split head_dim and take each part's weight by shuffle. Part
// descriptors travel in the kernel parameters, kMaxParts per launch; more parts are folded in
// further launches that take `out` as their first part (so with more than kMaxParts parts,
// intermediate results are rounded to out's dtype).

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "cuda/cuda_check.h"
#include "cuda/cuda_engine.h"
#include "cuda/ptx_primitives.cuh"
#include "mmsparse/status.h"

namespace mmsparse::cuda {
namespace {

// One part per lane; also keeps the parameter block under the 4 KB every launch may pass.
constexpr int kMaxParts = kWarpSize;
constexpr int kMergeWarps = 8;
constexpr int kMergeThreads = kMergeWarps * kWarpSize;
constexpr int64_t kMergeMaxBlocks = 8192;  // grid-stride beyond this

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
    if (lane < params.num_parts) {
      const PartView& part = params.parts[lane];
      part_lse = part.lse[batch * part.lse_strides[0] + head * part.lse_strides[1] +
                          position * part.lse_strides[2]];
    }
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
  std::size_t next = 0;
  while (next < args.parts.size()) {
    int32_t count = 0;
    if (next > 0) params.parts[count++] = make_part_view(running, "out");
    for (; count < kMaxParts && next < args.parts.size(); ++count, ++next) {
      params.parts[count] = make_part_view(args.parts[next], "parts[" + std::to_string(next) + "]");
    }
    params.num_parts = count;
    merge_partials_kernel<<<static_cast<unsigned>(blocks), kMergeThreads, 0, stream>>>(params);
    check_launch("merge_partials_kernel");
  }
}

}  // namespace mmsparse::cuda
