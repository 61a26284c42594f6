// K and V in key-order layout (key_order_copy.h): one bandwidth-bound kernel, a 16-byte vector per
// thread, rows of one (batch element, KV head) contiguous in the source's row order.

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>

#include "cuda/attention/key_order_copy.h"
#include "cuda/common/cuda_check.h"
#include "cuda/common/device_pool.h"
#include "cuda/common/math.h"
#include "mmsparse/plan.h"
#include "mmsparse/status.h"

namespace mmsparse::cuda {
namespace {

constexpr int kCopyThreads = 256;
constexpr int kVectorBytes = 16;
// The grid-stride loop covers any size; past this many CTAs (hundreds per SM) more would add only
// scheduling work to a bandwidth-bound copy.
constexpr int64_t kMaxCopyBlocks = 65536;

struct CopyGeometry {
  int64_t rows;  // key_order_rows
  int64_t kv_heads;
  int64_t vectors;  // 16-byte vectors per row of one head
  int64_t batch;
};

// copy[b, row, h, :] = source[b, keys[row], h, :], zeros where keys[row] is kPaddingKey.
__global__ void copy_in_key_order(const std::byte* source /* [batch, kv_len, kv_heads, dim] */,
                                  int64_t batch_stride, int64_t row_stride, int64_t head_stride,
                                  const int32_t* keys /* [rows] */, CopyGeometry geometry,
                                  std::byte* copy /* [batch, rows, kv_heads, dim] contiguous */) {
  const int64_t total = geometry.batch * geometry.rows * geometry.kv_heads * geometry.vectors;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t vector = i % geometry.vectors;
    const int64_t head = i / geometry.vectors % geometry.kv_heads;
    const int64_t row = i / (geometry.vectors * geometry.kv_heads) % geometry.rows;
    const int64_t b = i / (geometry.vectors * geometry.kv_heads * geometry.rows);
    const int32_t key = keys[row];
    uint4 value = make_uint4(0, 0, 0, 0);
    if (key != kPaddingKey) {
      value = *reinterpret_cast<const uint4*>(source + b * batch_stride + key * row_stride +
                                              head * head_stride + vector * kVectorBytes);
    }
    reinterpret_cast<uint4*>(copy)[i] = value;
  }
}

}  // namespace

KeyOrderCopy::KeyOrderCopy(const DevicePlan& plan, const AttentionArgs& args) {
  const DevicePlanLayout& layout = plan.layout();
  if (!layout.has_key_orders || args.kv_len == 0) return;
  stream_ = args.stream;
  rows_ = layout.key_order_rows;
  const auto element_bytes = static_cast<int64_t>(dtype_size(args.dtype));
  const int64_t row_elements = args.kv_heads * args.head_dim;
  const int64_t batch_elements = rows_ * row_elements;
  const auto bytes = static_cast<std::size_t>(args.batch * batch_elements * element_bytes);
  buffer_ = allocate_async(2 * bytes, static_cast<cudaStream_t>(args.stream),
                           "attention: K and V in key-order layout");
  auto* copies = static_cast<std::byte*>(buffer_);
  keys_ = {copies, batch_elements, row_elements, args.head_dim};
  values_ = {copies + bytes, batch_elements, row_elements, args.head_dim};
}

void KeyOrderCopy::fill(const DevicePlan& plan, const AttentionArgs& args) const {
  if (buffer_ == nullptr) return;
  const auto element_bytes = static_cast<int64_t>(dtype_size(args.dtype));
  const CopyGeometry geometry{rows_, args.kv_heads, args.head_dim * element_bytes / kVectorBytes,
                              args.batch};
  const auto* keys = reinterpret_cast<const int32_t*>(static_cast<const std::byte*>(plan.data()) +
                                                      plan.layout().key_orders);
  const int64_t vectors = args.batch * geometry.rows * geometry.kv_heads * geometry.vectors;
  const auto blocks =
      static_cast<unsigned>(std::min<int64_t>(kMaxCopyBlocks, ceil_div(vectors, kCopyThreads)));
  const auto stream = static_cast<cudaStream_t>(args.stream);
  const std::pair<const void*, const Strides4*> sources[] = {{args.k, &args.k_strides},
                                                             {args.v, &args.v_strides}};
  const InputOperand* copies[] = {&keys_, &values_};
  for (int which = 0; which < 2; ++which) {
    const Strides4& strides = *sources[which].second;
    copy_in_key_order<<<blocks, kCopyThreads, 0, stream>>>(
        static_cast<const std::byte*>(sources[which].first), strides[0] * element_bytes,
        strides[1] * element_bytes, strides[2] * element_bytes, keys, geometry,
        static_cast<std::byte*>(const_cast<void*>(copies[which]->data)));
    check_launch("copy_in_key_order");
  }
}

KeyOrderCopy::~KeyOrderCopy() {
  if (buffer_ != nullptr) cudaFreeAsync(buffer_, static_cast<cudaStream_t>(stream_));
}

}  // namespace mmsparse::cuda
