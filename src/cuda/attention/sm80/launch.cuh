#pragma once
// Definition of launch_planned_attention (see cuda/attention/launch.h).

#include "cuda/attention/launch.h"
#include "cuda/attention/sm80/kernel.cuh"
#include "cuda/common/cuda_check.h"

namespace mmsparse::cuda {

template <class Element, int kHeadDim>
void launch_planned_attention(const AttentionParams& params, int32_t num_tiles,
                              int32_t batch_blocks, cudaStream_t stream) {
  using Traits = AttentionTraits<Element, kHeadDim>;
  const auto kernel = planned_attention_kernel<Traits>;
  // Above 48 KB a kernel must opt in to its dynamic shared memory.
  check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  kSharedBytes<Traits>),
             "planned_attention_kernel: cudaFuncSetAttribute");
  const dim3 grid(static_cast<unsigned>(num_tiles), static_cast<unsigned>(batch_blocks));
  kernel<<<grid, Traits::kThreads, kSharedBytes<Traits>, stream>>>(params);
  check_launch("planned_attention_kernel");
}

}  // namespace mmsparse::cuda
