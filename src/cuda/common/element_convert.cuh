#pragma once
// Device conversions between the element types kernels read (bf16, fp16, fp32) and fp32, rounded
// to nearest even as the host's round_to_dtype, and between the 16-bit types and their raw bits
// (for kernels that load several elements as one word): one set for every kernel that converts
// elements one at a time.

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace mmsparse::cuda {

__device__ inline float to_float(__nv_bfloat16 value) { return __bfloat162float(value); }
__device__ inline float to_float(__half value) { return __half2float(value); }
__device__ inline float to_float(float value) { return value; }

template <class Element>
__device__ Element from_float(float value);
template <>
__device__ inline __nv_bfloat16 from_float<__nv_bfloat16>(float value) {
  return __float2bfloat16_rn(value);
}
template <>
__device__ inline __half from_float<__half>(float value) {
  return __float2half_rn(value);
}

template <class Element>
__device__ Element element_from_bits(uint16_t bits);
template <>
__device__ inline __nv_bfloat16 element_from_bits<__nv_bfloat16>(uint16_t bits) {
  return __ushort_as_bfloat16(bits);
}
template <>
__device__ inline __half element_from_bits<__half>(uint16_t bits) {
  return __ushort_as_half(bits);
}
__device__ inline uint16_t bits_of(__nv_bfloat16 value) { return __bfloat16_as_ushort(value); }
__device__ inline uint16_t bits_of(__half value) { return __half_as_ushort(value); }

}  // namespace mmsparse::cuda
