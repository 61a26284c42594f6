#pragma once
// Host-callable queries into the CUDA runtime, compiled only in CUDA builds.

#include <string>
#include <vector>

#include "mmsparse/build_info.h"

namespace mmsparse::cuda {

std::string toolkit_version();
std::vector<GpuInfo> list_gpus();  // empty when no driver or device is present; never throws

}  // namespace mmsparse::cuda
