#pragma once
// A rank's reusable scratch: named buffers on one device that grow on demand.

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "mmsparse/device.h"
#include "mmsparse/dist.h"
#include "mmsparse/tensor.h"

namespace mmsparse::dist {

struct Workspace::Impl {
  // Owning bytes on the host or a device.
  struct Buffer {
    Tensor host;
    std::unique_ptr<DeviceTensor> device;
    int64_t bytes = 0;
    void* data() const {
      return device ? device->view().data : const_cast<std::byte*>(host.data());
    }
  };
  // At least `bytes` bytes under `name` on `device`; the contents of a reused buffer are kept, of a
  // grown one lost.
  void* bytes(const std::string& name, int64_t bytes, Device device);
  // A contiguous view of `shape` under `name`.
  TensorView tensor(const std::string& name, DType dtype, const std::vector<int64_t>& shape,
                    Device device);

  std::map<std::string, Buffer> buffers;
};

}  // namespace mmsparse::dist
