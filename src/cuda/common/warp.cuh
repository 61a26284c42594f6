#pragma once
// What the builders' warp-per-tile kernels share: a warp's index in the grid, a lane's rank among
// a ballot's lanes, and a sum over the warp.

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

}  // namespace mmsparse::cuda
