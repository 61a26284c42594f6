#pragma once
// K and V in the key-order layout a plan with key orders reads (DevicePlanLayout::key_orders): per
// call, for every batch element and KV head, row r of the copy holds the key the orders map it
// to, zeros for padding. Key-ordered tiles read their spans there (plan_view.cuh's kSpanInPlace).

#include "cuda/attention/params.cuh"
#include "cuda/runtime/engine.h"

namespace mmsparse::cuda {

// The copies of one call, allocated from mmsparse's pool on args.stream by the constructor (so
// that their tensor maps can be encoded before anything runs) and filled by fill(); freed in
// stream order on that stream when destroyed (after the launches that read them are queued).
// Empty (null operands) for plans without key orders.
class KeyOrderCopy {
 public:
  KeyOrderCopy(const DevicePlan& plan, const AttentionArgs& args);
  // Queues the copy kernels on args.stream (nothing for an empty copy).
  void fill(const DevicePlan& plan, const AttentionArgs& args) const;
  int64_t rows() const { return rows_; }  // key_order_rows, 0 when empty
  ~KeyOrderCopy();
  KeyOrderCopy(const KeyOrderCopy&) = delete;
  KeyOrderCopy& operator=(const KeyOrderCopy&) = delete;

  // [batch, key_order_rows, kv_heads, head_dim] contiguous, or null data.
  const InputOperand& keys() const { return keys_; }
  const InputOperand& values() const { return values_; }

 private:
  void* buffer_ = nullptr;  // the keys' copy, then the values'
  void* stream_ = nullptr;  // cudaStream_t
  int64_t rows_ = 0;
  InputOperand keys_{};
  InputOperand values_{};
};

}  // namespace mmsparse::cuda
