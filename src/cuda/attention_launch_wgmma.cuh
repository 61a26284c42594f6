#pragma once
// Definition of launch_wgmma_attention (see attention_launch.h).

#include <algorithm>
#include <cstdint>

#include "cuda/attention_kernel_wgmma.cuh"
#include "cuda/attention_launch.h"
#include "cuda/cuda_check.h"
#include "cuda/wgmma_traits.cuh"

namespace mmsparse::cuda {

template <class Element, int kHeadDim, int kConsumerWarpgroups>
void launch_wgmma_attention(const WgmmaAttentionParams& params, int32_t num_tiles,
                            int32_t batch_blocks, int64_t max_ctas, cudaStream_t stream) {
  using Traits = WgmmaTraits<Element, kHeadDim, kConsumerWarpgroups>;
  static_assert(kWgmmaSharedBytes<Traits> <= kMaxSharedBytesPerBlock,
                "the stages, the query tile and the barriers must fit one block's shared memory");
  const auto kernel = wgmma_attention_kernel<Traits>;
  // Above 48 KB a kernel must opt in to its dynamic shared memory.
  check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  kWgmmaSharedBytes<Traits>),
             "wgmma_attention_kernel: cudaFuncSetAttribute");
  // Persistent CTAs: as many as the device holds at once (or max_ctas), which take the work items
  // one by one; never more than the items, so that every CTA has a first tile. The occupancy is 0
  // only when the kernel cannot run at all, which the launch then reports.
  int device = 0;
  check_cuda(cudaGetDevice(&device), "wgmma_attention_kernel: cudaGetDevice");
  int processors = 0;
  check_cuda(cudaDeviceGetAttribute(&processors, cudaDevAttrMultiProcessorCount, device),
             "wgmma_attention_kernel: cudaDeviceGetAttribute");
  int resident = 0;
  check_cuda(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&resident, kernel, Traits::kThreads,
                                                           kWgmmaSharedBytes<Traits>),
             "wgmma_attention_kernel: cudaOccupancyMaxActiveBlocksPerMultiprocessor");
  const int64_t items = static_cast<int64_t>(num_tiles) * batch_blocks;
  const int64_t resident_ctas = static_cast<int64_t>(processors) * std::max(resident, 1);
  const int64_t ctas =
      std::min(items, max_ctas > 0 ? std::min(max_ctas, resident_ctas) : resident_ctas);
  // The CTAs take their items after the first from one counter, zeroed in stream order for this
  // launch (no host synchronisation) and freed after it.
  void* counter = nullptr;
  check_cuda(cudaMallocAsync(&counter, sizeof(unsigned long long), stream),
             "wgmma_attention_kernel: cudaMallocAsync");
  cudaError_t status = cudaMemsetAsync(counter, 0, sizeof(unsigned long long), stream);
  if (status == cudaSuccess) {
    kernel<<<static_cast<unsigned>(ctas), Traits::kThreads, kWgmmaSharedBytes<Traits>, stream>>>(
        params, num_tiles, batch_blocks, static_cast<unsigned long long*>(counter));
    status = cudaGetLastError();
  }
  const cudaError_t freed = cudaFreeAsync(counter, stream);
  check_cuda(status, "wgmma_attention_kernel");  // the first failure is the one to report
  check_cuda(freed, "wgmma_attention_kernel: cudaFreeAsync");
}

}  // namespace mmsparse::cuda
