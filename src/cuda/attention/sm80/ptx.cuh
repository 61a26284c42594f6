#pragma once
// Thin wrappers over the sm_80-era PTX the mma.sync mainloop uses: asynchronous global -> shared
// copies (cp.async), ldmatrix and the m16n8k16 tensor-core MMA with fp32 accumulation. All of them
// run on sm_90a; the wgmma/TMA mainloop's own are in cuda/attention/sm90/ptx.cuh.

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <cstring>

namespace mmsparse::cuda {

inline constexpr int kWarpSize = 32;
inline constexpr unsigned kFullWarpMask = 0xffffffffu;
inline constexpr int kCopyBytes = 16;  // one cp.async vector

__device__ inline uint32_t shared_address(const void* pointer) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(pointer));
}

// Copies 16 bytes global -> shared, bypassing L1. With `valid` false nothing is read and the
// destination is zero-filled (source must still be a valid address).
__device__ inline void copy_async_16(uint32_t destination, const void* source, bool valid) {
  const int source_bytes = valid ? kCopyBytes : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(destination), "l"(source),
               "r"(source_bytes)
               : "memory");
}

// Copies 4 bytes global -> shared; zero-fills when `valid` is false.
__device__ inline void copy_async_4(uint32_t destination, const void* source, bool valid) {
  const int source_bytes = valid ? static_cast<int>(sizeof(int32_t)) : 0;
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(destination), "l"(source),
               "r"(source_bytes)
               : "memory");
}

__device__ inline void commit_async_copies() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}

// Waits until at most `kPending` of this thread's committed copy groups are still in flight.
template <int kPending>
__device__ inline void wait_async_copies() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

// Four 8×8 b16 matrices; lane l supplies the address of row l % 8 of matrix l / 8.
__device__ inline void load_matrix_x4(uint32_t (&fragment)[4], uint32_t address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(fragment[0]), "=r"(fragment[1]), "=r"(fragment[2]), "=r"(fragment[3])
               : "r"(address));
}

// As load_matrix_x4, each matrix transposed (for an operand stored [k][n] that MMA wants as "col").
__device__ inline void load_matrix_x4_transposed(uint32_t (&fragment)[4], uint32_t address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(fragment[0]), "=r"(fragment[1]), "=r"(fragment[2]), "=r"(fragment[3])
               : "r"(address));
}

// The m16n8k16 MMA D = A·B + D for one 16-bit input type, and packing two floats into its operand.
// Fragment ownership (g = lane / 4, t = lane % 4): A a0 (g, 2t..2t+1), a1 (g+8, 2t..), a2 (g,
// 2t+8..), a3 (g+8, 2t+8..); B b0 (k 2t..2t+1, n g), b1 (k 2t+8.., n g); D d0,d1 (g, 2t..2t+1),
// d2,d3 (g+8, ..).
template <class Element>
struct TensorCore;

template <>
struct TensorCore<__nv_bfloat16> {
  __device__ static void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
  // `low` goes to the lower 16 bits, the element with the smaller column index.
  __device__ static uint32_t pack(float low, float high) {
    const __nv_bfloat162 pair = __floats2bfloat162_rn(low, high);
    uint32_t bits;
    std::memcpy(&bits, &pair, sizeof(bits));
    return bits;
  }
  // pack's inverse: x from the lower 16 bits.
  __device__ static float2 unpack(uint32_t bits) {
    __nv_bfloat162 pair;
    std::memcpy(&pair, &bits, sizeof(bits));
    return __bfloat1622float2(pair);
  }
};

template <>
struct TensorCore<__half> {
  __device__ static void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
  __device__ static uint32_t pack(float low, float high) {
    const __half2 pair = __floats2half2_rn(low, high);
    uint32_t bits;
    std::memcpy(&bits, &pair, sizeof(bits));
    return bits;
  }
  __device__ static float2 unpack(uint32_t bits) {
    __half2 pair;
    std::memcpy(&pair, &bits, sizeof(bits));
    return __half22float2(pair);
  }
};

}  // namespace mmsparse::cuda
