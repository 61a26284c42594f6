// include/mmsparse/device.h in builds without the CUDA engine: every entry point says so.

#include "mmsparse/device.h"
#include "mmsparse/status.h"

namespace mmsparse {
namespace {

[[noreturn]] void no_cuda(const char* what) {
  throw Error(ErrorCode::kUnsupported,
              std::string(what) + ": this build of mmsparse has no CUDA engine (configure with "
                                  "-DMMSPARSE_CUDA=ON on a machine with the CUDA toolkit)");
}

}  // namespace

DeviceTensor::DeviceTensor(DType, std::vector<int64_t>, Device) { no_cuda("DeviceTensor"); }
DeviceTensor::~DeviceTensor() = default;
DeviceTensor::DeviceTensor(DeviceTensor&&) noexcept = default;
DeviceTensor& DeviceTensor::operator=(DeviceTensor&&) noexcept = default;
TensorView DeviceTensor::view() const { no_cuda("DeviceTensor::view"); }
void DeviceTensor::copy_from_host(const TensorView&) { no_cuda("DeviceTensor::copy_from_host"); }
void DeviceTensor::copy_to_host(const TensorView&) const { no_cuda("DeviceTensor::copy_to_host"); }
DeviceTensor DeviceTensor::from_host(const TensorView&, Device) { no_cuda("DeviceTensor"); }
void synchronize(Device) { no_cuda("synchronize"); }
double median_device_milliseconds(const std::function<void()>&, int, int, Device) {
  no_cuda("median_device_milliseconds");
}

}  // namespace mmsparse
