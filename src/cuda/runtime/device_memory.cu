// Device memory and event timing (device_memory.h) on the CUDA runtime.

#include <algorithm>
#include <vector>

#include "cuda/common/cuda_check.h"
#include "cuda/runtime/device_memory.h"

namespace mmsparse::cuda {
namespace {

void select_device(Device device) { check_cuda(cudaSetDevice(device.index), "cudaSetDevice"); }

}  // namespace

void* allocate_device_memory(std::size_t bytes, Device device) {
  select_device(device);
  void* data = nullptr;
  if (bytes > 0) check_cuda(cudaMalloc(&data, bytes), "cudaMalloc (DeviceTensor)");
  return data;
}

void free_device_memory(void* data) noexcept {
  if (data != nullptr) cudaFree(data);
}

void copy_host_to_device(void* device_data, const void* host, std::size_t bytes, Device device) {
  select_device(device);
  check_cuda(cudaMemcpy(device_data, host, bytes, cudaMemcpyHostToDevice),
             "cudaMemcpy (host to device)");
}

void copy_device_to_host(void* host, const void* device_data, std::size_t bytes, Device device) {
  select_device(device);
  check_cuda(cudaMemcpy(host, device_data, bytes, cudaMemcpyDeviceToHost),
             "cudaMemcpy (device to host)");
}

void synchronize_device(Device device) {
  select_device(device);
  check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
}

double median_event_milliseconds(const std::function<void()>& work, int warmup, int repeats,
                                 Device device) {
  select_device(device);
  for (int run = 0; run < warmup; ++run) work();
  cudaEvent_t start = nullptr;
  cudaEvent_t stop = nullptr;
  check_cuda(cudaEventCreate(&start), "cudaEventCreate");
  check_cuda(cudaEventCreate(&stop), "cudaEventCreate");
  std::vector<float> times(static_cast<std::size_t>(repeats));
  for (float& milliseconds : times) {
    check_cuda(cudaEventRecord(start), "cudaEventRecord");
    work();
    check_cuda(cudaEventRecord(stop), "cudaEventRecord");
    check_cuda(cudaEventSynchronize(stop), "cudaEventSynchronize");
    check_cuda(cudaEventElapsedTime(&milliseconds, start, stop), "cudaEventElapsedTime");
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::nth_element(times.begin(), times.begin() + repeats / 2, times.end());
  return times[static_cast<std::size_t>(repeats / 2)];
}

}  // namespace mmsparse::cuda
