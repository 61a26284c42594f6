#include "cuda/runtime/device_query.h"

#include <cuda_runtime.h>

#include <mutex>

#include "cuda/common/cuda_check.h"

namespace mmsparse::cuda {

std::string toolkit_version() {
  return std::to_string(CUDART_VERSION / 1000) + "." + std::to_string((CUDART_VERSION % 1000) / 10);
}

std::vector<GpuInfo> list_gpus() {
  std::vector<GpuInfo> gpus;
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error so later calls start clean
    return gpus;
  }
  constexpr double kBytesPerGiB = 1024.0 * 1024.0 * 1024.0;
  for (int index = 0; index < count; ++index) {
    cudaDeviceProp properties{};
    if (cudaGetDeviceProperties(&properties, index) != cudaSuccess) continue;
    GpuInfo info;
    info.index = index;
    info.name = properties.name;
    info.compute_major = properties.major;
    info.compute_minor = properties.minor;
    info.multiprocessors = properties.multiProcessorCount;
    info.memory_gib = static_cast<double>(properties.totalGlobalMem) / kBytesPerGiB;
    gpus.push_back(info);
  }
  return gpus;
}

int current_multiprocessors() {
  int device = 0;
  check_cuda(cudaGetDevice(&device), "current_multiprocessors: cudaGetDevice");
  static std::mutex mutex;
  static std::vector<int> counts;  // by device index; 0: not asked yet
  const std::lock_guard<std::mutex> lock(mutex);
  if (static_cast<std::size_t>(device) >= counts.size()) counts.resize(device + 1, 0);
  if (counts[device] == 0) {
    check_cuda(cudaDeviceGetAttribute(&counts[device], cudaDevAttrMultiProcessorCount, device),
               "current_multiprocessors: cudaDeviceGetAttribute(multiprocessors)");
  }
  return counts[device];
}

}  // namespace mmsparse::cuda
