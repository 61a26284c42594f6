#pragma once
// Turns CUDA runtime failures into mmsparse::Error(kBackendError) naming the call that failed.

#include <cuda_runtime.h>

#include <string>

#include "mmsparse/status.h"

namespace mmsparse::cuda {

inline void check_cuda(cudaError_t result, const char* what) {
  if (result == cudaSuccess) return;
  throw Error(ErrorCode::kBackendError, std::string(what) + ": " + cudaGetErrorName(result) + " (" +
                                            cudaGetErrorString(result) + ")");
}

// The same, for a step of a larger operation: "<what>: <step>" is formed only on failure.
inline void check_cuda(cudaError_t result, const char* what, const char* step) {
  if (result == cudaSuccess) return;
  check_cuda(result, (std::string(what) + ": " + step).c_str());
}

// After a kernel launch: reports launch-configuration errors (asynchronous faults surface later).
inline void check_launch(const char* kernel) { check_cuda(cudaGetLastError(), kernel); }

}  // namespace mmsparse::cuda
