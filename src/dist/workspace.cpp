// Workspace buffers: host tensors for the CPU, DeviceTensor (the backend's memory) elsewhere.

#include "dist/workspace.h"

#include <algorithm>

namespace mmsparse::dist {
namespace {

// Buffers start at this size so tiny growth steps do not reallocate every call.
constexpr int64_t kMinimumBytes = 256;

}  // namespace

Workspace::Workspace() : impl_(std::make_unique<Impl>()) {}
Workspace::~Workspace() = default;
Workspace::Workspace(Workspace&&) noexcept = default;
Workspace& Workspace::operator=(Workspace&&) noexcept = default;

void* Workspace::Impl::bytes(const std::string& name, int64_t bytes, Device device) {
  Buffer& buffer = buffers[name];
  const bool same_device =
      (device.type == DeviceType::kCPU) ? !buffer.device : (buffer.device != nullptr);
  if (buffer.bytes < bytes || !same_device || buffer.bytes == 0) {
    const int64_t size = std::max(bytes, kMinimumBytes);
    buffer = Buffer{};
    if (device.type == DeviceType::kCPU) {
      buffer.host = Tensor(DType::kUInt8, {size});
    } else {
      buffer.device =
          std::make_unique<DeviceTensor>(DType::kUInt8, std::vector<int64_t>{size}, device);
    }
    buffer.bytes = size;
  }
  return buffer.data();
}

TensorView Workspace::Impl::tensor(const std::string& name, DType dtype,
                                   const std::vector<int64_t>& shape, Device device) {
  int64_t count = 1;
  for (int64_t extent : shape) count *= extent;
  void* data = bytes(name, count * static_cast<int64_t>(dtype_size(dtype)), device);
  return TensorView::contiguous(data, dtype, shape, device);
}

}  // namespace mmsparse::dist
