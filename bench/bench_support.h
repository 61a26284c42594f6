#pragma once
// What the GPU benchmarks share: a CUDA call that fails ends the benchmark with its name (a bench
// has nothing to recover), device copies of host tensors that free themselves, and the median of
// timed runs.

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "mmsparse/tensor.h"

namespace mmsparse::bench {

inline void check(cudaError_t result, const char* what) {
  if (result == cudaSuccess) return;
  std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(result));
  std::exit(1);
}

// `bytes` of device memory, or a copy of a host tensor; freed when it goes out of scope.
struct DeviceCopy {
  void* data = nullptr;
  std::size_t bytes = 0;
  explicit DeviceCopy(std::size_t size) : bytes(size) {
    check(cudaMalloc(&data, bytes), "cudaMalloc");
  }
  explicit DeviceCopy(const Tensor& host) : DeviceCopy(host.nbytes()) {
    check(cudaMemcpy(data, host.data(), bytes, cudaMemcpyHostToDevice), "cudaMemcpy");
  }
  ~DeviceCopy() { cudaFree(data); }
  DeviceCopy(const DeviceCopy&) = delete;
  DeviceCopy& operator=(const DeviceCopy&) = delete;
};

// The median of timed runs (the upper one of an even count); `samples` must not be empty.
template <typename T>
T median(std::vector<T> samples) {
  std::nth_element(samples.begin(), samples.begin() + samples.size() / 2, samples.end());
  return samples[samples.size() / 2];
}

}  // namespace mmsparse::bench
