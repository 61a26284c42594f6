#pragma once
// Test helpers for device memory: an owning buffer, host operands with chosen memory layouts and
// their device copies. Any CUDA failure throws, which GoogleTest reports as a test failure.

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>

#include "mmsparse/tensor.h"

namespace mmsparse::test {

inline void expect_cuda(cudaError_t result, const char* what) {
  if (result != cudaSuccess) {
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorName(result) + " (" +
                             cudaGetErrorString(result) + ")");
  }
}

// Waits for the device and surfaces asynchronous kernel faults.
inline void synchronize_device() {
  expect_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  expect_cuda(cudaGetLastError(), "cudaGetLastError");
}

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t bytes) : bytes_(bytes) {
    expect_cuda(cudaMalloc(&data_, bytes_ == 0 ? 1 : bytes_), "cudaMalloc");
  }
  ~DeviceBuffer() {
    if (data_ != nullptr) cudaFree(data_);
  }
  DeviceBuffer(DeviceBuffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), bytes_(other.bytes_) {}
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    std::swap(data_, other.data_);
    std::swap(bytes_, other.bytes_);
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }

  void upload(const void* host) {  // host: bytes() bytes
    expect_cuda(cudaMemcpy(data_, host, bytes_, cudaMemcpyHostToDevice), "cudaMemcpy to device");
  }
  void download(void* host) const {  // host: bytes() bytes
    expect_cuda(cudaMemcpy(host, data_, bytes_, cudaMemcpyDeviceToHost), "cudaMemcpy to host");
  }
  // All bytes 0xFF: NaN in float32, float16 and bfloat16, so an unwritten element never passes.
  void poison() {
    constexpr int kNaNByte = 0xFF;
    expect_cuda(cudaMemset(data_, kNaNByte, bytes_), "cudaMemset");
  }

 private:
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

// How an attention operand [batch, seq, heads, dim] lies in memory.
enum class OperandLayout {
  kContiguous,  // [batch, seq, heads, dim]
  kHeadMajor,   // [batch, heads, seq, dim], the usual transposed framework layout
  kPaddedRows,  // [batch, seq, heads * dim + kRowPadding]: a row stride beyond heads * dim
};
inline constexpr int64_t kRowPadding = 8;  // elements; keeps rows 16-byte aligned for 16-bit types

inline const char* layout_name(OperandLayout layout) {
  switch (layout) {
    case OperandLayout::kContiguous:
      return "contiguous";
    case OperandLayout::kHeadMajor:
      return "head-major";
    case OperandLayout::kPaddedRows:
      return "padded-rows";
  }
  return "?";
}

// A [batch, seq, heads, dim] view over its own host storage. Move-only: the storage's bytes move
// with it, so `view` stays valid.
struct HostOperand {
  HostOperand(DType dtype, int64_t batch, int64_t seq, int64_t heads, int64_t dim,
              OperandLayout layout) {
    switch (layout) {
      case OperandLayout::kContiguous:
        storage = Tensor(dtype, {batch, seq, heads, dim});
        view = storage.view();
        break;
      case OperandLayout::kHeadMajor:
        storage = Tensor(dtype, {batch, heads, seq, dim});
        view = storage.view();
        view.shape = {batch, seq, heads, dim};
        view.strides = {heads * seq * dim, dim, seq * dim, 1};
        break;
      case OperandLayout::kPaddedRows: {
        const int64_t row = heads * dim + kRowPadding;
        storage = Tensor(dtype, {batch, seq, row});
        view = storage.view();
        view.ndim = 4;
        view.shape = {batch, seq, heads, dim};
        view.strides = {seq * row, row, dim, 1};
        break;
      }
    }
  }
  HostOperand(HostOperand&&) = default;
  HostOperand& operator=(HostOperand&&) = default;
  HostOperand(const HostOperand&) = delete;
  HostOperand& operator=(const HostOperand&) = delete;

  Tensor storage;
  TensorView view;
};

// A device copy of a host operand (or an output buffer shaped like one), with a CUDA view.
struct DeviceOperand {
  explicit DeviceOperand(const HostOperand& host) : buffer(host.storage.nbytes()), view(host.view) {
    buffer.upload(host.storage.data());
    view.data = buffer.data();
    view.device = {DeviceType::kCUDA, 0};
  }
  // Copies the device bytes back into `host`, which has the same layout.
  void download(HostOperand& host) const { buffer.download(host.storage.data()); }

  DeviceBuffer buffer;
  TensorView view;
};

}  // namespace mmsparse::test
