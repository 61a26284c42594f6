#pragma once
// The temporary storage of the CUB device-wide operations the builders run (an exclusive sum of
// int64 counts, a descending key-value radix sort with int32 values), from the sizes alone: CUB
// queried with null storage does no work and does not synchronise, so the builders can lay out
// their scratch before any kernel runs. And the scans of a plan's record counts that they share.

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>

#include "cuda/common/cuda_check.h"

namespace mmsparse::cuda {

// Bytes an exclusive sum of `items` int64 values needs; `what` names the query in errors.
inline std::size_t scan_storage_bytes(int items, cudaStream_t stream, const char* what) {
  std::size_t bytes = 0;
  check_cuda(cub::DeviceScan::ExclusiveSum(nullptr, bytes, static_cast<int64_t*>(nullptr),
                                           static_cast<int64_t*>(nullptr), items, stream),
             what);
  return bytes;
}

// Bytes a descending radix sort of `items` (Key, int32) pairs over key bits [0, bits) needs.
template <class Key>
std::size_t sort_storage_bytes(int items, int bits, cudaStream_t stream, const char* what) {
  std::size_t bytes = 0;
  check_cuda(
      cub::DeviceRadixSort::SortPairsDescending(
          nullptr, bytes, static_cast<Key*>(nullptr), static_cast<Key*>(nullptr),
          static_cast<int32_t*>(nullptr), static_cast<int32_t*>(nullptr), items, 0, bits, stream),
      what);
  return bytes;
}

// The exclusive sums of a plan's per-tile span and column counts into the tiles' offsets, through
// `temp` (scan_bytes, scan_storage_bytes of `items`); `what` names the builder in errors.
// span_counts, span_offsets, column_counts, column_offsets: [items]
inline void scan_record_counts(void* temp, std::size_t scan_bytes, int64_t* span_counts,
                               int64_t* span_offsets, int64_t* column_counts,
                               int64_t* column_offsets, int items, cudaStream_t stream,
                               const char* what) {
  std::size_t temp_bytes = scan_bytes;
  check_cuda(
      cub::DeviceScan::ExclusiveSum(temp, temp_bytes, span_counts, span_offsets, items, stream),
      what, "span scan");
  temp_bytes = scan_bytes;
  check_cuda(
      cub::DeviceScan::ExclusiveSum(temp, temp_bytes, column_counts, column_offsets, items, stream),
      what, "column scan");
}

}  // namespace mmsparse::cuda
