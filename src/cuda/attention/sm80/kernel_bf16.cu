// The bfloat16 instantiations of the attention kernel (head_dim 64 and 128).

#include "cuda/attention/sm80/launch.cuh"

namespace mmsparse::cuda {

template void launch_planned_attention<__nv_bfloat16, 64>(const AttentionParams&, int32_t, int32_t,
                                                          cudaStream_t);
template void launch_planned_attention<__nv_bfloat16, 128>(const AttentionParams&, int32_t, int32_t,
                                                           cudaStream_t);

}  // namespace mmsparse::cuda
