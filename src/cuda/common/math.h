#pragma once
// Index arithmetic and warp constants that the CUDA backend's kernels, their host code and the
// methods' device builders share. Plain C++ usable on the device and on the host (the CPU tests
// include headers built on it).

#include <cstdint>

#ifndef MMSPARSE_HOST_DEVICE
#ifdef __CUDACC__
#define MMSPARSE_HOST_DEVICE __host__ __device__
#else
#define MMSPARSE_HOST_DEVICE
#endif
#endif

namespace mmsparse::cuda {

inline constexpr int kWarpLanes = 32;
inline constexpr unsigned kAllLanes = 0xffffffffu;  // every lane of a warp in a shuffle or vote

// ceil(a / b) for a >= 0 and b > 0.
MMSPARSE_HOST_DEVICE constexpr int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace mmsparse::cuda
