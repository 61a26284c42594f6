#pragma once
// Device memory and event timing on the CUDA runtime, for the CUDA backend's side of
// include/mmsparse/device.h (arguments are checked in src/core/device_tensor.cpp). Plain C++.

#include <cstddef>
#include <functional>

#include "mmsparse/tensor.h"

namespace mmsparse::cuda {

// `bytes` of device memory on `device` (nullptr for 0 bytes).
void* allocate_device_memory(std::size_t bytes, Device device);
void free_device_memory(void* data) noexcept;
// `bytes` from host memory `host` to device memory `device_data` of `device`, and back.
void copy_host_to_device(void* device_data, const void* host, std::size_t bytes, Device device);
void copy_device_to_host(void* host, const void* device_data, std::size_t bytes, Device device);
void synchronize_device(Device device);
// Median of `repeats` (>= 1) runs of `work` timed with events on the default stream, after
// `warmup` runs.
double median_event_milliseconds(const std::function<void()>& work, int warmup, int repeats,
                                 Device device);

}  // namespace mmsparse::cuda
