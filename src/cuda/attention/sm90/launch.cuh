#pragma once
// Definition of launch_wgmma_attention (see cuda/attention/launch.h).

#include "cuda/attention/launch.h"
#include "cuda/attention/sm90/kernel.cuh"
#include "cuda/attention/sm90/traits.cuh"
#include "cuda/common/cuda_check.h"

namespace mmsparse::cuda {

template <class Element, int kHeadDim, int kConsumerWarpgroups, ChunkSources kSources,
          MaskTerms kMaskTerms>
void launch_wgmma_attention(const WgmmaAttentionParams& params, int32_t num_tiles,
                            int32_t batch_blocks, cudaStream_t stream) {
  using Traits = WgmmaTraits<Element, kHeadDim, kConsumerWarpgroups, kSources, kMaskTerms>;
  static_assert(kWgmmaSharedBytes<Traits> <= kMaxSharedBytesPerBlock,
                "the stages, the query tile and the barriers must fit one block's shared memory");
  const auto kernel = wgmma_attention_kernel<Traits>;
  // Above 48 KB a kernel must opt in to its dynamic shared memory.
  check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  kWgmmaSharedBytes<Traits>),
             "wgmma_attention_kernel: cudaFuncSetAttribute");
  const dim3 grid(static_cast<unsigned>(num_tiles), static_cast<unsigned>(batch_blocks));
  kernel<<<grid, Traits::kThreads, kWgmmaSharedBytes<Traits>, stream>>>(params);
  check_launch("wgmma_attention_kernel");
}

}  // namespace mmsparse::cuda
