// The persistent kernel's queue counters: one slab of kMaxQueueCounters per device, allocated and
// zeroed on first use, and a slot of it per stream for the process's lifetime (a stream handle
// that is destroyed and handed out again keeps its slot, which its launches left zero).

#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "cuda/attention/tile_queue.h"
#include "cuda/common/cuda_check.h"
#include "mmsparse/status.h"

namespace mmsparse::cuda {
namespace {

struct DeviceCounters {
  uint32_t* slab = nullptr;  // [kMaxQueueCounters]
  std::map<cudaStream_t, int> slots;
};

}  // namespace

uint32_t* tile_queue_counter(cudaStream_t stream) {
  static std::mutex mutex;
  static std::map<int, DeviceCounters> devices;
  int device = 0;
  check_cuda(cudaGetDevice(&device), "tile queue: cudaGetDevice");
  const std::lock_guard<std::mutex> lock(mutex);
  DeviceCounters& counters = devices[device];
  if (counters.slab == nullptr) {
    void* slab = nullptr;
    check_cuda(cudaMalloc(&slab, kMaxQueueCounters * sizeof(uint32_t)), "tile queue: cudaMalloc");
    counters.slab = static_cast<uint32_t*>(slab);
  }
  const auto found = counters.slots.find(stream);
  if (found != counters.slots.end()) return counters.slab + found->second;
  const auto slot = static_cast<int>(counters.slots.size());
  if (slot >= kMaxQueueCounters) {
    throw Error(ErrorCode::kUnsupported,
                "schedule: persistent CTAs keep one queue counter per stream, at most " +
                    std::to_string(kMaxQueueCounters) + " streams per device; this is stream " +
                    std::to_string(slot + 1));
  }
  // Ordered before the stream's first persistent launch, which is queued after it.
  check_cuda(cudaMemsetAsync(counters.slab + slot, 0, sizeof(uint32_t), stream),
             "tile queue: cudaMemsetAsync");
  counters.slots.emplace(stream, slot);
  return counters.slab + slot;
}

}  // namespace mmsparse::cuda
