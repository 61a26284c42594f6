#pragma once
// Launchers of the attention kernel instantiations, one per (element type, head_dim). Declared
// here, defined in attention_launch.cuh and explicitly instantiated in attention_bf16.cu and
// attention_fp16.cu, so only those files compile the kernel body.

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/attention_params.cuh"

namespace mmsparse::cuda {

// grid: one CTA per (tile, batch block); batch_blocks is the batch for a broadcast plan, else 1.
template <class Element, int kHeadDim>
void launch_planned_attention(const AttentionParams& params, int32_t num_tiles,
                              int32_t batch_blocks, cudaStream_t stream);

}  // namespace mmsparse::cuda
