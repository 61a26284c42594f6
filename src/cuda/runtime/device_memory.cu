// DeviceTensor and event timing (include/mmsparse/device.h) on the CUDA runtime.

#include <algorithm>
#include <cstring>
#include <utility>

#include "cuda/common/cuda_check.h"
#include "mmsparse/device.h"
#include "mmsparse/status.h"

namespace mmsparse {
namespace {

std::size_t byte_size(DType dtype, const std::vector<int64_t>& shape) {
  std::size_t count = 1;
  for (int64_t extent : shape) count *= static_cast<std::size_t>(extent);
  return count * dtype_size(dtype);
}

void select_device(Device device) {
  if (device.type != DeviceType::kCUDA) {
    throw_invalid_argument("device", "a CUDA device", device_name(device));
  }
  cuda::check_cuda(cudaSetDevice(device.index), "cudaSetDevice");
}

// A host view packed into contiguous memory of the same dtype, when it is not contiguous already.
const void* packed_host_data(const TensorView& host, Tensor& scratch) {
  if (host.is_contiguous()) return host.data;
  scratch = to_contiguous(host, host.dtype);
  return scratch.data();
}

void check_host_view(const char* argument, const TensorView& host, DType dtype,
                     const std::vector<int64_t>& shape) {
  if (host.device.type != DeviceType::kCPU) {
    throw_invalid_argument(argument, "a host tensor", device_name(host.device));
  }
  if (host.dtype != dtype) {
    throw_invalid_argument(std::string(argument) + " dtype", std::string(dtype_name(dtype)),
                           std::string(dtype_name(host.dtype)));
  }
  if (host.shape_vector() != shape) {
    throw_invalid_argument(std::string(argument) + " shape",
                           TensorView::contiguous(nullptr, dtype, shape).shape_string(),
                           host.shape_string());
  }
}

}  // namespace

DeviceTensor::DeviceTensor(DType dtype, std::vector<int64_t> shape, Device device)
    : dtype_(dtype), shape_(std::move(shape)), device_(device) {
  if (shape_.size() > static_cast<std::size_t>(kMaxDims)) {
    throw_invalid_argument("DeviceTensor shape", "at most " + std::to_string(kMaxDims) + " dimensions",
                           std::to_string(shape_.size()));
  }
  for (const int64_t extent : shape_) {
    if (extent < 0) {
      throw_invalid_argument("DeviceTensor shape", "non-negative extents", std::to_string(extent));
    }
  }
  select_device(device);
  const std::size_t bytes = byte_size(dtype_, shape_);
  if (bytes > 0) cuda::check_cuda(cudaMalloc(&data_, bytes), "cudaMalloc (DeviceTensor)");
}

DeviceTensor::~DeviceTensor() {
  if (data_ != nullptr) cudaFree(data_);
}

DeviceTensor::DeviceTensor(DeviceTensor&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      dtype_(other.dtype_),
      shape_(std::move(other.shape_)),
      device_(other.device_) {}

DeviceTensor& DeviceTensor::operator=(DeviceTensor&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) cudaFree(data_);
    data_ = std::exchange(other.data_, nullptr);
    dtype_ = other.dtype_;
    shape_ = std::move(other.shape_);
    device_ = other.device_;
  }
  return *this;
}

TensorView DeviceTensor::view() const {
  return TensorView::contiguous(data_, dtype_, shape_, device_);
}

void DeviceTensor::copy_from_host(const TensorView& host) {
  check_host_view("copy_from_host source", host, dtype_, shape_);
  if (byte_size(dtype_, shape_) == 0) return;
  Tensor scratch;
  const void* source = packed_host_data(host, scratch);
  select_device(device_);
  cuda::check_cuda(cudaMemcpy(data_, source, byte_size(dtype_, shape_), cudaMemcpyHostToDevice),
                   "cudaMemcpy (host to device)");
}

void DeviceTensor::copy_to_host(const TensorView& host) const {
  check_host_view("copy_to_host destination", host, dtype_, shape_);
  if (byte_size(dtype_, shape_) == 0) return;
  select_device(device_);
  if (host.is_contiguous()) {
    cuda::check_cuda(
        cudaMemcpy(host.data, data_, byte_size(dtype_, shape_), cudaMemcpyDeviceToHost),
        "cudaMemcpy (device to host)");
    return;
  }
  Tensor packed(dtype_, shape_);
  cuda::check_cuda(
      cudaMemcpy(packed.data(), data_, byte_size(dtype_, shape_), cudaMemcpyDeviceToHost),
      "cudaMemcpy (device to host)");
  copy_tensor(packed.view(), host);
}

DeviceTensor DeviceTensor::from_host(const TensorView& host, Device device) {
  DeviceTensor tensor(host.dtype, host.shape_vector(), device);
  tensor.copy_from_host(host);
  return tensor;
}

void synchronize(Device device) {
  select_device(device);
  cuda::check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
}

double median_device_milliseconds(const std::function<void()>& work, int warmup, int repeats,
                                  Device device) {
  if (repeats < 1) throw_invalid_argument("repeats", ">= 1", std::to_string(repeats));
  select_device(device);
  for (int run = 0; run < warmup; ++run) work();
  cudaEvent_t start = nullptr;
  cudaEvent_t stop = nullptr;
  cuda::check_cuda(cudaEventCreate(&start), "cudaEventCreate");
  cuda::check_cuda(cudaEventCreate(&stop), "cudaEventCreate");
  std::vector<float> times(static_cast<std::size_t>(repeats));
  for (float& milliseconds : times) {
    cuda::check_cuda(cudaEventRecord(start), "cudaEventRecord");
    work();
    cuda::check_cuda(cudaEventRecord(stop), "cudaEventRecord");
    cuda::check_cuda(cudaEventSynchronize(stop), "cudaEventSynchronize");
    cuda::check_cuda(cudaEventElapsedTime(&milliseconds, start, stop), "cudaEventElapsedTime");
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::nth_element(times.begin(), times.begin() + repeats / 2, times.end());
  return times[static_cast<std::size_t>(repeats / 2)];
}

}  // namespace mmsparse
