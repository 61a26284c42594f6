#pragma once
// What the builders' warp-per-tile kernels share: a warp's index in the grid, a lane's rank among
// a ballot's lanes, a sum over the warp, and inclusive scans in lane order.

#include <cstdint>

#include "cuda/common/math.h"

namespace mmsparse::cuda {

// The index in the grid of the calling thread's warp (one-dimensional blocks and grid).
__device__ inline int64_t warp_index() {
  return (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarpLanes;
}

// The lanes below `lane`: masked with a ballot, the count of them ranks `lane` among its voters.
__device__ inline unsigned lanes_below(int lane) { return (1u << lane) - 1u; }

// `value` summed over every lane of the warp (all lanes call it), returned to each of them.
__device__ inline int64_t warp_sum(int64_t value) {
  for (int offset = kWarpLanes / 2; offset > 0; offset /= 2) {
    value += __shfl_xor_sync(kAllLanes, value, offset);
  }
  return value;
}

// `value` combined by `op` (associative) with every lower lane's value, lane 0 first: the warp's
// inclusive scan (all lanes call it).
template <class T, class Op>
__device__ inline T warp_inclusive_scan(T value, Op op) {
  const int lane = static_cast<int>(threadIdx.x % kWarpLanes);
#pragma unroll
  for (int offset = 1; offset < kWarpLanes; offset *= 2) {
    const T other = __shfl_up_sync(kAllLanes, value, offset);
    if (lane >= offset) value = op(value, other);
  }
  return value;
}

struct SumOp {
  template <class T>
  __device__ T operator()(T a, T b) const {
    return a + b;
  }
};

__device__ inline int32_t warp_inclusive_sum(int32_t value) {
  return warp_inclusive_scan(value, SumOp{});
}

}  // namespace mmsparse::cuda
