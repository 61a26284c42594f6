#pragma once
// Launchers of the attention kernel instantiations, one per (element type, head_dim) for the
// mma.sync kernel and per (element type, head_dim, consumer warpgroups) for the wgmma kernel.
// Declared here, defined in cuda/attention/sm80/launch.cuh / cuda/attention/sm90/launch.cuh and
// explicitly instantiated in sm80/kernel_{bf16,fp16}.cu and sm90/*.cu, so only those files compile
// the kernel bodies.

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/attention/params.cuh"
#include "cuda/attention/sm90/params.cuh"

namespace mmsparse::cuda {

// grid: one CTA per (tile, batch block); batch_blocks is the batch for a broadcast plan, else 1.
template <class Element, int kHeadDim>
void launch_planned_attention(const AttentionParams& params, int32_t num_tiles,
                              int32_t batch_blocks, cudaStream_t stream);

// The wgmma kernel: 64 query rows per consumer warpgroup, so plan tiles of up to
// 64 * kConsumerWarpgroups rows; kSources: the key chunks the plan has (ChunkSources); kMaskTerms:
// whether its masks read tokens (MaskTerms).
template <class Element, int kHeadDim, int kConsumerWarpgroups, ChunkSources kSources,
          MaskTerms kMaskTerms>
void launch_wgmma_attention(const WgmmaAttentionParams& params, int32_t num_tiles,
                            int32_t batch_blocks, cudaStream_t stream);

// The wgmma kernel with persistent CTAs (cuda/attention/sm90/persistent.cuh): `ctas` CTAs, at most
// num_tiles × batch_blocks (which fits 32 bits), taking the launch order's items from a dynamic
// queue; `queue_counter` ([1], zero, left zero) is the stream's (tile_queue_counter). Instantiated
// for head_dim 128, two consumer warpgroups and gathered keys (CtaSchedule); the engine runs plans
// of spans only on the same instantiations.
template <class Element, int kHeadDim, int kConsumerWarpgroups, ChunkSources kSources,
          MaskTerms kMaskTerms>
void launch_wgmma_persistent_attention(const WgmmaAttentionParams& params, int32_t num_tiles,
                                       int32_t batch_blocks, int32_t ctas, uint32_t* queue_counter,
                                       cudaStream_t stream);

}  // namespace mmsparse::cuda
