// include/mmsparse/device.h: arguments are checked here, the memory and the clocks belong to the
// backend of the device (which throws for devices without memory of their own, such as the host).

#include <string>
#include <utility>

#include "core/backend.h"
#include "mmsparse/device.h"
#include "mmsparse/status.h"

namespace mmsparse {
namespace {

std::size_t byte_size(DType dtype, const std::vector<int64_t>& shape) {
  std::size_t count = 1;
  for (int64_t extent : shape) count *= static_cast<std::size_t>(extent);
  return count * dtype_size(dtype);
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
  Backend& backend = backend_for_memory("DeviceTensor", device);
  if (shape_.size() > static_cast<std::size_t>(kMaxDims)) {
    throw_invalid_argument("DeviceTensor shape",
                           "at most " + std::to_string(kMaxDims) + " dimensions",
                           std::to_string(shape_.size()));
  }
  for (const int64_t extent : shape_) {
    if (extent < 0) {
      throw_invalid_argument("DeviceTensor shape", "non-negative extents", std::to_string(extent));
    }
  }
  data_ = backend.allocate("DeviceTensor", byte_size(dtype_, shape_), device);
}

DeviceTensor::~DeviceTensor() {
  // Memory was allocated by this device's backend, so there is one.
  if (data_ != nullptr) find_backend(device_.type)->release(data_, device_);
}

DeviceTensor::DeviceTensor(DeviceTensor&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      dtype_(other.dtype_),
      shape_(std::move(other.shape_)),
      device_(other.device_) {}

DeviceTensor& DeviceTensor::operator=(DeviceTensor&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) find_backend(device_.type)->release(data_, device_);
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
  const std::size_t bytes = byte_size(dtype_, shape_);
  if (bytes == 0) return;
  Tensor scratch;
  const void* source = packed_host_data(host, scratch);
  backend_for_memory("DeviceTensor::copy_from_host", device_)
      .copy_to_device(data_, source, bytes, device_);
}

void DeviceTensor::copy_to_host(const TensorView& host) const {
  check_host_view("copy_to_host destination", host, dtype_, shape_);
  const std::size_t bytes = byte_size(dtype_, shape_);
  if (bytes == 0) return;
  Backend& backend = backend_for_memory("DeviceTensor::copy_to_host", device_);
  if (host.is_contiguous()) {
    backend.copy_to_host(host.data, data_, bytes, device_);
    return;
  }
  Tensor packed(dtype_, shape_);
  backend.copy_to_host(packed.data(), data_, bytes, device_);
  copy_tensor(packed.view(), host);
}

DeviceTensor DeviceTensor::from_host(const TensorView& host, Device device) {
  DeviceTensor tensor(host.dtype, host.shape_vector(), device);
  tensor.copy_from_host(host);
  return tensor;
}

void synchronize(Device device) { backend_for_memory("synchronize", device).synchronize(device); }

double median_device_milliseconds(const std::function<void()>& work, int warmup, int repeats,
                                  Device device) {
  Backend& backend = backend_for_memory("median_device_milliseconds", device);
  if (repeats < 1) throw_invalid_argument("repeats", ">= 1", std::to_string(repeats));
  return backend.median_device_milliseconds(work, warmup, repeats, device);
}

}  // namespace mmsparse
