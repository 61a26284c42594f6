#pragma once
// The passes of a vec plan small enough for one CTA, each one kernel where cub's device algorithms
// launch several: the exclusive scan of the tiles' (column, span) counts (cub's device scan: an
// init and a scan kernel), and the heaviest-first schedule, a stable descending radix sort of the
// tiles' kept-key counts, as cub::DeviceRadixSort::SortPairsDescending gives it (equal counts keep
// their order). Above its single-tile size the device sort runs a histogram, an exclusive sum and
// a pass per 8-bit digit (0.048 ms for 8192 tiles at 128K, 0.012 ms for 4096, on an H200), where a
// few thousand pairs fit one CTA's registers. Included by vec_device.cu only.

#include <cuda_runtime.h>

#include <cstdint>
#include <cub/block/block_radix_sort.cuh>
#include <cub/block/block_scan.cuh>

#include "methods/vec/vec_select.cuh"

namespace mmsparse::cuda::vec_kernels {

// The pairs' sum, for cub's device scan of plans past one CTA.
struct AddCounts {
  __host__ __device__ RecordCounts operator()(const RecordCounts& a, const RecordCounts& b) const {
    return a + b;
  }
};

constexpr int kOffsetScanThreads = 512;
constexpr int kOffsetScanItems = 17;  // counts per thread
// The most counts (tiles + 1) one CTA scans: 128K at 64-row tiles, 4 heads, has 8193.
constexpr int64_t kBlockOffsetCounts = int64_t{kOffsetScanThreads} * kOffsetScanItems;

// The exclusive sum of `count` <= kBlockOffsetCounts (column, span) pairs into `offsets`: each
// thread sums its kOffsetScanItems consecutive counts, the CTA scans the threads' sums (columns,
// then spans: cub scans 64-bit integers in registers, a pair through local memory), and each thread
// reads its counts again (from cache) to write their offsets; no thread holds all its pairs.
// counts, offsets: [count]
__global__ void __launch_bounds__(kOffsetScanThreads)
    offsets_block_scan_kernel(const RecordCounts* counts, RecordCounts* offsets, int32_t count) {
  using Scan = cub::BlockScan<int64_t, kOffsetScanThreads>;
  __shared__ typename Scan::TempStorage storage;
  const int first = static_cast<int>(threadIdx.x) * kOffsetScanItems;
  RecordCounts sum{0, 0};
#pragma unroll
  for (int i = 0; i < kOffsetScanItems; ++i) {
    if (first + i < count) sum = sum + counts[first + i];
  }
  RecordCounts offset;
  Scan(storage).ExclusiveSum(sum.columns, offset.columns);
  __syncthreads();  // the storage is scanned again
  Scan(storage).ExclusiveSum(sum.spans, offset.spans);
#pragma unroll
  for (int i = 0; i < kOffsetScanItems; ++i) {
    if (first + i < count) {
      offsets[first + i] = offset;
      offset = offset + counts[first + i];
    }
  }
}

constexpr int kScheduleSortThreads = 512;
constexpr int kScheduleSortItems = 16;  // pairs per thread
// The most tiles one CTA sorts.
constexpr int64_t kBlockScheduleTiles = int64_t{kScheduleSortThreads} * kScheduleSortItems;

// Sorts `count` <= kBlockScheduleTiles (key, value) pairs by key bits [0, bits), descending and
// stable, writing the values in that order to `schedule`. Each thread holds kScheduleSortItems
// consecutive pairs; the slots past `count` hold key 0 with the highest positions, so the stable
// descending order puts them after every real pair.
// keys, values, schedule: [count]
__global__ void __launch_bounds__(kScheduleSortThreads)
    schedule_block_sort_kernel(const uint32_t* keys, const int32_t* values, int32_t* schedule,
                               int32_t count, int bits) {
  using Sort = cub::BlockRadixSort<uint32_t, kScheduleSortThreads, kScheduleSortItems, int32_t>;
  __shared__ typename Sort::TempStorage storage;
  uint32_t thread_keys[kScheduleSortItems];
  int32_t thread_values[kScheduleSortItems];
  const int first = static_cast<int>(threadIdx.x) * kScheduleSortItems;
#pragma unroll
  for (int i = 0; i < kScheduleSortItems; ++i) {
    const bool real = first + i < count;
    thread_keys[i] = real ? keys[first + i] : 0u;
    thread_values[i] = real ? values[first + i] : 0;
  }
  Sort(storage).SortDescending(thread_keys, thread_values, 0, bits);
#pragma unroll
  for (int i = 0; i < kScheduleSortItems; ++i) {
    if (first + i < count) schedule[first + i] = thread_values[i];
  }
}

}  // namespace mmsparse::cuda::vec_kernels
