#pragma once
// The counters of the persistent wgmma kernel's tile queue (cuda/attention/sm90/persistent.cuh):
// one 32-bit counter in device memory per (device, stream), zero between launches. A launch
// leaves its counter zero (its last claim resets it), and launches on one stream run one after
// another, so a stream's launches can share one counter; launches on different streams may
// overlap and take different ones.

#include <cuda_runtime.h>

#include <cstdint>

namespace mmsparse::cuda {

// The queue counter of `stream` on the current device, zeroed on the stream when first handed
// out; throws kBackendError naming the CUDA call that failed, kUnsupported once the device's
// kMaxQueueCounters are taken by distinct streams. The device's first call allocates
// (cudaMalloc), which a stream capture in cudaStreamCaptureModeGlobal refuses: a captured graph
// gets its counters from a persistent launch made before the capture.
uint32_t* tile_queue_counter(cudaStream_t stream);

inline constexpr int kMaxQueueCounters = 4096;  // distinct streams per device and process

}  // namespace mmsparse::cuda
