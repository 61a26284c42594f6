#pragma once
// Device memory and timing for tools, tests and benchmarks, without CUDA headers. In a build
// without the CUDA engine every function here throws Error(kUnsupported).

#include <cstdint>
#include <functional>
#include <vector>

#include "mmsparse/tensor.h"

namespace mmsparse {

// Owning, contiguous device memory.
class DeviceTensor {
 public:
  DeviceTensor(DType dtype, std::vector<int64_t> shape, Device device);
  ~DeviceTensor();
  DeviceTensor(DeviceTensor&& other) noexcept;
  DeviceTensor& operator=(DeviceTensor&& other) noexcept;
  DeviceTensor(const DeviceTensor&) = delete;
  DeviceTensor& operator=(const DeviceTensor&) = delete;

  TensorView view() const;
  // Copies from / to a host view of the same dtype and shape (any strides are packed first).
  void copy_from_host(const TensorView& host);
  void copy_to_host(const TensorView& host) const;
  // Copies from a host view to a new device tensor.
  static DeviceTensor from_host(const TensorView& host, Device device);

 private:
  void* data_ = nullptr;
  DType dtype_ = DType::kFloat32;
  std::vector<int64_t> shape_;
  Device device_{};
};

void synchronize(Device device);

// Median time in milliseconds of `repeats` runs of `work` (which enqueues device work on the
// default stream), after `warmup` runs; each run is timed with device events.
double median_device_milliseconds(const std::function<void()>& work, int warmup, int repeats,
                                  Device device);

}  // namespace mmsparse
