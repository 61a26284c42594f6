#pragma once
// Streams of their own forked from a caller's stream and joined back into it, for independent
// chains of small launches that one after another would leave most of the GPU idle (a config's
// device sections; a grouped grid build's (group, space) estimates and searches).

#include <cuda_runtime.h>

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "cuda/common/cuda_check.h"

namespace mmsparse::cuda {

class ForkedStreams {
 public:
  // `count` streams that start after the work queued on `origin` so far; `what` prefixes errors.
  ForkedStreams(std::size_t count, cudaStream_t origin, std::string what)
      : origin_(origin), what_(std::move(what)) {
    check_cuda(cudaEventCreateWithFlags(&fork_, cudaEventDisableTiming), what_.c_str(),
               "cudaEventCreate fork");
    check_cuda(cudaEventRecord(fork_, origin), what_.c_str(), "cudaEventRecord fork");
    for (std::size_t i = 0; i < count; ++i) {
      cudaStream_t stream = nullptr;
      check_cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), what_.c_str(),
                 "cudaStreamCreate");
      streams_.push_back(stream);
      check_cuda(cudaStreamWaitEvent(stream, fork_), what_.c_str(), "fork");
    }
  }
  ~ForkedStreams() {
    // Destructors cannot report errors. Unless joined (an error midway), the origin still waits
    // for the forked work, so that memory freed in its order after this is not freed under it.
    // Destroying a stream with queued work is allowed: it is released once the work is done.
    if (!joined_) {
      for (cudaStream_t stream : streams_) {
        cudaEvent_t event = nullptr;
        if (cudaEventCreateWithFlags(&event, cudaEventDisableTiming) != cudaSuccess) continue;
        if (cudaEventRecord(event, stream) == cudaSuccess) cudaStreamWaitEvent(origin_, event);
        cudaEventDestroy(event);
      }
    }
    for (cudaStream_t stream : streams_) cudaStreamDestroy(stream);
    for (cudaEvent_t event : joins_) cudaEventDestroy(event);
    cudaEventDestroy(fork_);
  }
  ForkedStreams(const ForkedStreams&) = delete;
  ForkedStreams& operator=(const ForkedStreams&) = delete;

  cudaStream_t operator[](std::size_t i) const { return streams_[i]; }
  std::size_t size() const { return streams_.size(); }
  // The origin stream waits for everything queued on the forked streams so far.
  void join() {
    for (cudaStream_t stream : streams_) {
      cudaEvent_t event = nullptr;
      check_cuda(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), what_.c_str(),
                 "cudaEventCreate join");
      joins_.push_back(event);
      check_cuda(cudaEventRecord(event, stream), what_.c_str(), "cudaEventRecord join");
      check_cuda(cudaStreamWaitEvent(origin_, event), what_.c_str(), "join");
    }
    joined_ = true;
  }

 private:
  cudaStream_t origin_;
  std::string what_;
  cudaEvent_t fork_ = nullptr;
  std::vector<cudaStream_t> streams_;
  std::vector<cudaEvent_t> joins_;
  bool joined_ = false;
};

}  // namespace mmsparse::cuda
