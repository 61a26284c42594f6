#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <string>
#include <vector>

#include "cuda/common/cuda_check.h"
#include "cuda/common/device_pool.h"
#include "mmsparse/status.h"

namespace mmsparse::cuda {
namespace {

constexpr uint64_t kBytesPerMegabyte = uint64_t{1} << 20;

cudaMemPool_t create_pool(int device) {
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = device;
  cudaMemPool_t pool = nullptr;
  check_cuda(cudaMemPoolCreate(&pool, &props), "mmsparse memory pool: cudaMemPoolCreate");
  uint64_t threshold = pool_kept_bytes(std::getenv(kPoolKeepVariable));
  check_cuda(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold),
             "mmsparse memory pool: cudaMemPoolSetAttribute");
  return pool;
}

}  // namespace

uint64_t pool_kept_bytes(const char* megabytes) {
  if (megabytes == nullptr || *megabytes == '\0') return std::numeric_limits<uint64_t>::max();
  const bool digits_only = std::all_of(megabytes, megabytes + std::strlen(megabytes),
                                       [](char c) { return c >= '0' && c <= '9'; });
  errno = 0;
  const unsigned long long value = digits_only ? std::strtoull(megabytes, nullptr, 10) : 0;
  if (!digits_only || errno == ERANGE ||
      value > std::numeric_limits<uint64_t>::max() / kBytesPerMegabyte) {
    throw Error(ErrorCode::kInvalidArgument,
                std::string(kPoolKeepVariable) +
                    ": expected a whole number of megabytes (0 keeps nothing), got '" + megabytes +
                    "'");
  }
  return value * kBytesPerMegabyte;
}

cudaMemPool_t memory_pool(int device) {
  // Pools live until the process ends: the driver reclaims them, and no destructor runs after
  // the CUDA runtime may have shut down.
  static std::mutex mutex;
  static std::vector<cudaMemPool_t> pools;
  const std::lock_guard<std::mutex> lock(mutex);
  if (device < 0) {
    throw Error(ErrorCode::kInvalidArgument,
                "device: expected a CUDA device index >= 0, got " + std::to_string(device));
  }
  if (static_cast<std::size_t>(device) >= pools.size()) pools.resize(device + 1, nullptr);
  if (pools[device] == nullptr) pools[device] = create_pool(device);
  return pools[device];
}

void* allocate_async(std::size_t bytes, cudaStream_t stream, const char* what) {
  int device = 0;
  check_cuda(cudaGetDevice(&device), what, "cudaGetDevice");
  void* data = nullptr;
  check_cuda(cudaMallocFromPoolAsync(&data, bytes, memory_pool(device), stream), what);
  return data;
}

}  // namespace mmsparse::cuda
