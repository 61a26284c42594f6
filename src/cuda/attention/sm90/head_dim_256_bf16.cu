// The bfloat16 instantiations of the wgmma attention kernel at head_dim 256 (kWgmmaWideHeadDim),
// one per kind of key chunk a plan can hold (ChunkSources), positional masks on each, and masks
// that read tokens (MaskTerms) on span and gather plans (as at head_dim 128). Two consumer
// warpgroups only, for tiles of up to 128 rows: the budget in cuda/attention/sm90/traits.cuh.

#include "cuda/attention/sm90/launch.cuh"

namespace mmsparse::cuda {

template void launch_wgmma_attention<__nv_bfloat16, 256, 2, ChunkSources::kSpans,
                                     MaskTerms::kPositional>(const WgmmaAttentionParams&, int32_t,
                                                             int32_t, cudaStream_t);
template void launch_wgmma_attention<__nv_bfloat16, 256, 2, ChunkSources::kSpans,
                                     MaskTerms::kTokens>(const WgmmaAttentionParams&, int32_t,
                                                         int32_t, cudaStream_t);
template void launch_wgmma_attention<__nv_bfloat16, 256, 2, ChunkSources::kGathers,
                                     MaskTerms::kPositional>(const WgmmaAttentionParams&, int32_t,
                                                             int32_t, cudaStream_t);
template void launch_wgmma_attention<__nv_bfloat16, 256, 2, ChunkSources::kGathers,
                                     MaskTerms::kTokens>(const WgmmaAttentionParams&, int32_t,
                                                         int32_t, cudaStream_t);
template void launch_wgmma_attention<__nv_bfloat16, 256, 2, ChunkSources::kLattices,
                                     MaskTerms::kPositional>(const WgmmaAttentionParams&, int32_t,
                                                             int32_t, cudaStream_t);
template void launch_wgmma_attention<__nv_bfloat16, 256, 2, ChunkSources::kLatticesAndGathers,
                                     MaskTerms::kPositional>(const WgmmaAttentionParams&, int32_t,
                                                             int32_t, cudaStream_t);

}  // namespace mmsparse::cuda
