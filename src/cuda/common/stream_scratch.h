#pragma once
// Temporary device memory ordered on one stream: allocated from mmsparse's pool (device_pool.h)
// and freed with cudaFreeAsync on the same stream when it goes out of scope, whatever happens after it is made
// (kernels queued before the free still read it), and the layout of the arrays carved out of it.
// Used by the plan, index and config builders and by the scratch of multi-pass attention.

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <utility>

#include "cuda/common/cuda_check.h"
#include "cuda/common/device_pool.h"
#include "cuda/runtime/plan_view.cuh"

namespace mmsparse::cuda {

// The builders' temporary arrays as regions of one stream-ordered allocation: add() each array to
// the layout (every region starts on a section boundary, so any element type fits), allocate
// layout.bytes() once (StreamScratch), then region<T>(base, offset).
class ScratchLayout {
 public:
  template <class T>
  std::size_t add(int64_t count) {
    const std::size_t offset = align_section(bytes_);
    bytes_ = offset + static_cast<std::size_t>(count) * sizeof(T);
    return offset;
  }
  std::size_t bytes() const { return align_section(bytes_); }

 private:
  std::size_t bytes_ = 0;
};

template <class T>
T* region(std::byte* base, std::size_t offset) {
  return reinterpret_cast<T*>(base + offset);
}

class StreamScratch {
 public:
  StreamScratch(std::size_t bytes, cudaStream_t stream, const char* what)
      : data_(allocate_async(bytes, stream, what)), stream_(stream) {}
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
