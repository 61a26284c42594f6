// The bfloat16 instantiations of the wgmma attention kernel with persistent CTAs
// (cuda/attention/sm90/persistent.cuh): plans with gathered keys, head_dim 128, tiles of up to 128
// rows (two consumer warpgroups), for positional masks and for masks that read tokens (MaskTerms).
// The engine runs them on request (CtaSchedule in cuda/runtime/engine.h), for plans of spans only
// too (every chunk then a tensor copy).

#include "cuda/attention/sm90/persistent.cuh"

namespace mmsparse::cuda {

template void launch_wgmma_persistent_attention<__nv_bfloat16, 128, 2, ChunkSources::kGathers,
                                                MaskTerms::kPositional>(const WgmmaAttentionParams&,
                                                                        int32_t, int32_t, int32_t,
                                                                        uint32_t*, cudaStream_t);
template void launch_wgmma_persistent_attention<__nv_bfloat16, 128, 2, ChunkSources::kGathers,
                                                MaskTerms::kTokens>(const WgmmaAttentionParams&,
                                                                    int32_t, int32_t, int32_t,
                                                                    uint32_t*, cudaStream_t);

}  // namespace mmsparse::cuda
