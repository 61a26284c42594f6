#pragma once
// Temporary device memory ordered on one stream: allocated with cudaMallocAsync and freed with
// cudaFreeAsync on the same stream when it goes out of scope, whatever happens after it is made
// (kernels queued before the free still read it). Used by the index and config builders and by
// the scratch of multi-pass attention.

#include <cuda_runtime.h>

#include <cstddef>
#include <utility>

#include "cuda/cuda_check.h"

namespace mmsparse::cuda {

class StreamScratch {
 public:
  StreamScratch(std::size_t bytes, cudaStream_t stream, const char* what) : stream_(stream) {
    check_cuda(cudaMallocAsync(&data_, bytes, stream), what);
  }
  ~StreamScratch() {
    // Destructors cannot report errors; a failed free leaves the memory to the pool.
    if (data_ != nullptr) cudaFreeAsync(data_, stream_);
  }
  StreamScratch(StreamScratch&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), stream_(other.stream_) {}
  StreamScratch(const StreamScratch&) = delete;
  StreamScratch& operator=(const StreamScratch&) = delete;
  StreamScratch& operator=(StreamScratch&&) = delete;
  std::byte* base() const { return static_cast<std::byte*>(data_); }

 private:
  void* data_ = nullptr;
  cudaStream_t stream_;
};

}  // namespace mmsparse::cuda
