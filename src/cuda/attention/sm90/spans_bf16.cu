// The bfloat16 instantiations of the wgmma attention kernel for plans of spans only (dense, A-shape
// and the other plans without gathered keys; head_dim 128; one consumer warpgroup for tiles of up
// to 64 rows, two for tiles of up to 128), each for positional masks and for masks that read tokens
// (MaskTerms).

#include "cuda/attention/sm90/launch.cuh"

namespace mmsparse::cuda {

template void launch_wgmma_attention<__nv_bfloat16, 128, 1, ChunkSources::kSpans,
                                     MaskTerms::kPositional>(const WgmmaAttentionParams&, int32_t,
                                                             int32_t, cudaStream_t);
template void launch_wgmma_attention<__nv_bfloat16, 128, 2, ChunkSources::kSpans,
                                     MaskTerms::kPositional>(const WgmmaAttentionParams&, int32_t,
                                                             int32_t, cudaStream_t);
template void launch_wgmma_attention<__nv_bfloat16, 128, 1, ChunkSources::kSpans,
                                     MaskTerms::kTokens>(const WgmmaAttentionParams&, int32_t,
                                                         int32_t, cudaStream_t);
template void launch_wgmma_attention<__nv_bfloat16, 128, 2, ChunkSources::kSpans,
                                     MaskTerms::kTokens>(const WgmmaAttentionParams&, int32_t,
                                                         int32_t, cudaStream_t);

}  // namespace mmsparse::cuda
