#pragma once
// Essential-KV selection and the passing message, per device. A message holds one host's passing
// rows as [count, kv_heads, 2, head_dim] in the KV dtype: row i of KV head h is the i-th selected
// key of that head (ascending position), K then V, so one all-gather moves both.

#include <cstdint>

#include "mmsparse/tensor.h"

namespace mmsparse::dist::detail {

// Selects `count` essential KVs per KV head of a block (dist.h, select_essential) and writes them
// to `message` [count, kv_heads, 2, head_dim], ordered on `stream` for device tensors.
//   query_q          [1, query_len, q_heads, head_dim]
//   block_k, block_v [1, len, kv_heads, head_dim], count <= len
using SelectAndPack = void (*)(const TensorView& query_q, const TensorView& block_k,
                               const TensorView& block_v, int64_t count, int64_t pool_width,
                               void* message, void* stream);

// Device backends register their selection at static initialisation (the CPU's is built in).
void register_selector(DeviceType device, SelectAndPack selector);
void select_and_pack(const TensorView& query_q, const TensorView& block_k,
                     const TensorView& block_v, int64_t count, int64_t pool_width, void* message,
                     void* stream);

// Views of the K and V halves of `rows` passing rows at `message`.
TensorView passing_keys(void* message, DType dtype, int64_t rows, int64_t kv_heads,
                        int64_t head_dim, Device device);
TensorView passing_values(void* message, DType dtype, int64_t rows, int64_t kv_heads,
                          int64_t head_dim, Device device);

}  // namespace mmsparse::dist::detail
