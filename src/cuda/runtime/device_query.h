#pragma once
// Host-callable queries into the CUDA runtime, compiled only in CUDA builds.

#include <string>
#include <vector>

#include "mmsparse/build_info.h"

namespace mmsparse::cuda {

std::string toolkit_version();
std::vector<GpuInfo> list_gpus();  // empty when no driver or device is present; never throws

// The current device's multiprocessors, asked of the driver once per device: launch paths size
// their grids by it on every call. Throws kBackendError naming the call that failed.
int current_multiprocessors();

}  // namespace mmsparse::cuda
