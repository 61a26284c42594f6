// Essential-KV selection on the GPU, registered for CUDA tensors (dist/selection.h). The same
// arithmetic as the host selection, in the same order (fp32 sums of the query rows, fp32 fused
// multiply-adds in dimension order), so both pick the same keys bit for bit; CUB's radix sort is
// stable, so equal pooled scores keep position order, as the host's tie rule says. Everything is
// ordered on the caller's stream, with stream-ordered scratch and no host synchronisation.

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <cub/device/device_segmented_radix_sort.cuh>

#include "cuda/common/cuda_check.h"
#include "cuda/common/stream_scratch.h"
#include "dist/selection.h"
#include "mmsparse/status.h"

namespace mmsparse::dist::detail {
namespace {

using cuda::check_cuda;
using cuda::check_launch;

constexpr int kThreads = 256;
constexpr const char* kWhat = "essential-KV selection";

__device__ float load_element(const void* data, int64_t offset, DType dtype) {
  switch (dtype) {
    case DType::kBFloat16:
      return __bfloat162float(static_cast<const __nv_bfloat16*>(data)[offset]);
    case DType::kFloat16:
      return __half2float(static_cast<const __half*>(data)[offset]);
    default:
      return static_cast<const float*>(data)[offset];
  }
}

// Strides of a [1, seq, heads, dim] view, in elements.
struct Rows {
  const void* data;
  int64_t row_stride;
  int64_t head_stride;
  int64_t dim_stride;
};

Rows rows_of(const TensorView& view) {
  return {view.data, view.strides[1], view.strides[2], view.strides[3]};
}

// mean [kv_heads, head_dim]: one thread per (head, dim), rows then group heads in order.
__global__ void mean_query_kernel(Rows query, DType dtype, int64_t query_len, int64_t group,
                                  int64_t kv_heads, int64_t head_dim, float* mean) {
  const int64_t item = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (item >= kv_heads * head_dim) return;
  const int64_t head = item / head_dim;
  const int64_t d = item % head_dim;
  float sum = 0.0f;
  for (int64_t i = 0; i < query_len; ++i) {
    for (int64_t g = 0; g < group; ++g) {
      sum += load_element(
          query.data,
          i * query.row_stride + (head * group + g) * query.head_stride + d * query.dim_stride,
          dtype);
    }
  }
  mean[item] = __fdiv_rn(sum, static_cast<float>(query_len * group));
}

// scores [kv_heads, len]: one thread per key, fused multiply-adds in dimension order.
__global__ void score_kernel(Rows keys, DType dtype, int64_t len, int64_t kv_heads,
                             int64_t head_dim, const float* mean, float* scores) {
  const int64_t item = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (item >= kv_heads * len) return;
  const int64_t head = item / len;
  const int64_t j = item % len;
  float score = 0.0f;
  for (int64_t d = 0; d < head_dim; ++d) {
    const float key = load_element(
        keys.data, j * keys.row_stride + head * keys.head_stride + d * keys.dim_stride, dtype);
    score = __fmaf_rn(key, mean[head * head_dim + d], score);
  }
  scores[item] = score;
}

// pooled [kv_heads, len] = max over the window inside the block; positions [kv_heads, len] = j.
__global__ void pool_kernel(const float* scores, int64_t len, int64_t kv_heads, int64_t reach,
                            float* pooled, int32_t* positions) {
  const int64_t item = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (item >= kv_heads * len) return;
  const int64_t head = item / len;
  const int64_t j = item % len;
  const int64_t first = j - reach < 0 ? 0 : j - reach;
  const int64_t last = j + reach > len - 1 ? len - 1 : j + reach;
  float best = -INFINITY;
  for (int64_t t = first; t <= last; ++t) best = fmaxf(best, scores[head * len + t]);
  pooled[item] = best + 0.0f;  // -0 becomes +0: the radix sort orders them, the host does not
  positions[item] = static_cast<int32_t>(j);
}

// Segment h covers [h * len, h * len + extent).
__global__ void segment_offsets_kernel(int64_t kv_heads, int64_t len, int64_t extent,
                                       int32_t* begins, int32_t* ends) {
  const int64_t head = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (head >= kv_heads) return;
  begins[head] = static_cast<int32_t>(head * len);
  ends[head] = static_cast<int32_t>(head * len + extent);
}

// message [count, kv_heads, 2, head_dim]: K then V of each head's i-th chosen key.
__global__ void pack_kernel(Rows keys, Rows values, DType dtype, const int32_t* chosen, int64_t len,
                            int64_t count, int64_t kv_heads, int64_t head_dim, void* message) {
  const int64_t item = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t row_elements = 2 * head_dim;
  if (item >= count * kv_heads * row_elements) return;
  const int64_t i = item / (kv_heads * row_elements);
  const int64_t head = item / row_elements % kv_heads;
  const int64_t c = item % row_elements;
  const int64_t position = chosen[head * len + i];
  const Rows& source = c < head_dim ? keys : values;
  const int64_t d = c < head_dim ? c : c - head_dim;
  const int64_t offset =
      position * source.row_stride + head * source.head_stride + d * source.dim_stride;
  switch (dtype) {
    case DType::kBFloat16:
      static_cast<__nv_bfloat16*>(message)[item] =
          static_cast<const __nv_bfloat16*>(source.data)[offset];
      break;
    case DType::kFloat16:
      static_cast<__half*>(message)[item] = static_cast<const __half*>(source.data)[offset];
      break;
    default:
      static_cast<float*>(message)[item] = static_cast<const float*>(source.data)[offset];
  }
}

unsigned blocks_for(int64_t items) {
  return static_cast<unsigned>((items + kThreads - 1) / kThreads);
}

void select_and_pack_cuda(const TensorView& query_q, const TensorView& block_k,
                          const TensorView& block_v, int64_t count, int64_t pool_width,
                          void* message, void* stream_handle) {
  const auto stream = static_cast<cudaStream_t>(stream_handle);
  const int64_t len = block_k.shape[1];
  const int64_t kv_heads = block_k.shape[2];
  const int64_t head_dim = block_k.shape[3];
  const int64_t items = kv_heads * len;
  if (items > INT32_MAX) {
    throw Error(ErrorCode::kUnsupported,
                "essential-KV selection: kv_heads x block length must fit in int32, got " +
                    std::to_string(items));
  }
  cuda::ScratchLayout layout;
  const std::size_t mean_at = layout.add<float>(kv_heads * head_dim);
  const std::size_t scores_at = layout.add<float>(items);
  const std::size_t pooled_at = layout.add<float>(items);
  const std::size_t sorted_keys_at = layout.add<float>(items);
  const std::size_t positions_at = layout.add<int32_t>(items);
  const std::size_t ranked_at = layout.add<int32_t>(items);
  const std::size_t chosen_at = layout.add<int32_t>(items);
  const std::size_t begins_at = layout.add<int32_t>(kv_heads);
  const std::size_t ends_at = layout.add<int32_t>(kv_heads);
  std::size_t rank_bytes = 0;
  std::size_t order_bytes = 0;
  check_cuda(
      cub::DeviceSegmentedRadixSort::SortPairsDescending(
          nullptr, rank_bytes, static_cast<const float*>(nullptr), static_cast<float*>(nullptr),
          static_cast<const int32_t*>(nullptr), static_cast<int32_t*>(nullptr),
          static_cast<int>(items), static_cast<int>(kv_heads), static_cast<const int32_t*>(nullptr),
          static_cast<const int32_t*>(nullptr), 0, 32, stream),
      kWhat, "sort size");
  check_cuda(cub::DeviceSegmentedRadixSort::SortKeys(
                 nullptr, order_bytes, static_cast<const int32_t*>(nullptr),
                 static_cast<int32_t*>(nullptr), static_cast<int>(items),
                 static_cast<int>(kv_heads), static_cast<const int32_t*>(nullptr),
                 static_cast<const int32_t*>(nullptr), 0, 32, stream),
             kWhat, "order size");
  const std::size_t storage_at = layout.add<std::byte>(
      static_cast<int64_t>(rank_bytes > order_bytes ? rank_bytes : order_bytes));
  cuda::StreamScratch scratch(layout.bytes(), stream, kWhat);
  std::byte* base = scratch.base();
  auto* mean = cuda::region<float>(base, mean_at);
  auto* scores = cuda::region<float>(base, scores_at);
  auto* pooled = cuda::region<float>(base, pooled_at);
  auto* sorted_keys = cuda::region<float>(base, sorted_keys_at);
  auto* positions = cuda::region<int32_t>(base, positions_at);
  auto* ranked = cuda::region<int32_t>(base, ranked_at);
  auto* chosen = cuda::region<int32_t>(base, chosen_at);
  auto* begins = cuda::region<int32_t>(base, begins_at);
  auto* ends = cuda::region<int32_t>(base, ends_at);
  void* storage = cuda::region<std::byte>(base, storage_at);

  const int64_t group = query_q.shape[2] / kv_heads;
  mean_query_kernel<<<blocks_for(kv_heads * head_dim), kThreads, 0, stream>>>(
      rows_of(query_q), query_q.dtype, query_q.shape[1], group, kv_heads, head_dim, mean);
  check_launch("mean_query_kernel");
  score_kernel<<<blocks_for(items), kThreads, 0, stream>>>(rows_of(block_k), block_k.dtype, len,
                                                           kv_heads, head_dim, mean, scores);
  check_launch("score_kernel");
  pool_kernel<<<blocks_for(items), kThreads, 0, stream>>>(scores, len, kv_heads, pool_width / 2,
                                                          pooled, positions);
  check_launch("pool_kernel");
  segment_offsets_kernel<<<blocks_for(kv_heads), kThreads, 0, stream>>>(kv_heads, len, len, begins,
                                                                        ends);
  check_launch("segment_offsets_kernel");
  // Rank every head's keys by pooled score (stable: ties keep position order) ...
  check_cuda(cub::DeviceSegmentedRadixSort::SortPairsDescending(
                 storage, rank_bytes, pooled, sorted_keys, positions, ranked,
                 static_cast<int>(items), static_cast<int>(kv_heads), begins, ends, 0, 32, stream),
             kWhat, "rank");
  // ... then put each head's first `count` back in position order.
  segment_offsets_kernel<<<blocks_for(kv_heads), kThreads, 0, stream>>>(kv_heads, len, count,
                                                                        begins, ends);
  check_launch("segment_offsets_kernel");
  check_cuda(cub::DeviceSegmentedRadixSort::SortKeys(
                 storage, order_bytes, ranked, chosen, static_cast<int>(items),
                 static_cast<int>(kv_heads), begins, ends, 0, 32, stream),
             kWhat, "order");
  pack_kernel<<<blocks_for(count * kv_heads * 2 * head_dim), kThreads, 0, stream>>>(
      rows_of(block_k), rows_of(block_v), block_k.dtype, chosen, len, count, kv_heads, head_dim,
      message);
  check_launch("pack_kernel");
}

// Registers the device selection with the dispatch at static initialisation (the library is
// linked whole, so this object is always present in a CUDA build).
[[maybe_unused]] const bool kRegistered = [] {
  register_selector(DeviceType::kCUDA, &select_and_pack_cuda);
  return true;
}();

}  // namespace
}  // namespace mmsparse::dist::detail
