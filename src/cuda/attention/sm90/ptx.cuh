#pragma once
// Thin wrappers over the sm_90a PTX of the wgmma mainloop: transaction barriers (mbarrier), tensor
// copies (cp.async.bulk.tensor, TMA), proxy fences, named barriers, register reallocation
// (setmaxnreg) and the warpgroup MMA (wgmma.mma_async) with its shared-memory descriptors.

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "cuda/attention/sm80/ptx.cuh"

namespace mmsparse::cuda {

inline constexpr int kWarpgroupWarps = 4;  // wgmma is issued by 4 consecutive warps
inline constexpr int kWarpgroupThreads = kWarpgroupWarps * kWarpSize;

// --- Transaction barriers ------------------------------------------------------------------------

__device__ inline void barrier_init(uint32_t barrier, uint32_t arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(barrier), "r"(arrivals)
               : "memory");
}

// Makes initialised barriers visible to the other threads and to the copy engine.
__device__ inline void fence_barrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

// One arrival that also announces `bytes` that asynchronous copies will complete on the barrier.
__device__ inline void barrier_arrive_expect_bytes(uint32_t barrier, uint32_t bytes) {
  [[maybe_unused]] uint64_t state;
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 %0, [%1], %2;\n"
               : "=l"(state)
               : "r"(barrier), "r"(bytes)
               : "memory");
}

__device__ inline void barrier_arrive(uint32_t barrier) {
  [[maybe_unused]] uint64_t state;
  asm volatile("mbarrier.arrive.shared::cta.b64 %0, [%1];\n"
               : "=l"(state)
               : "r"(barrier)
               : "memory");
}

// `arrivals` arrivals at once, for threads that have nothing to load into the stage (sm_90's
// counted arrive): they need not reach the barrier, or wait for the stage, themselves.
__device__ inline void barrier_arrive_for(uint32_t barrier, uint32_t arrivals) {
  [[maybe_unused]] uint64_t state;
  asm volatile("mbarrier.arrive.shared::cta.b64 %0, [%1], %2;\n"
               : "=l"(state)
               : "r"(barrier), "r"(arrivals)
               : "memory");
}

// One arrival that the barrier receives once every cp.async this thread issued before it has
// landed. "noinc": the arrival is one of those the barrier was initialised to expect.
__device__ inline void barrier_arrive_after_async_copies(uint32_t barrier) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(barrier) : "memory");
}

// The arrival of a thread that also wrote shared memory the waiting threads read: the barrier
// receives it once every cp.async this thread issued before it has landed (the asynchronous
// arrive without noinc adds a pending arrival and takes it back then), and the plain arrive
// releases the thread's own earlier writes to every thread that waits for the phase. Counts as
// one of the arrivals the barrier was initialised to expect, like
// barrier_arrive_after_async_copies.
__device__ inline void barrier_arrive_releasing_after_async_copies(uint32_t barrier) {
  [[maybe_unused]] uint64_t state;
  asm volatile(
      "cp.async.mbarrier.arrive.shared::cta.b64 [%1];\n"
      "mbarrier.arrive.shared::cta.b64 %0, [%1];\n"
      : "=l"(state)
      : "r"(barrier)
      : "memory");
}

// Blocks until the barrier's phase of parity `parity` has completed.
__device__ inline void barrier_wait(uint32_t barrier, uint32_t parity) {
  uint32_t done = 0;
  while (done == 0) {
    asm volatile(
        "{\n"
        ".reg .pred complete;\n"
        "mbarrier.try_wait.parity.shared::cta.b64 complete, [%1], %2;\n"
        "selp.u32 %0, 1, 0, complete;\n"
        "}\n"
        : "=r"(done)
        : "r"(barrier), "r"(parity)
        : "memory");
  }
}

// --- Tensor copies -------------------------------------------------------------------------------

// Copies the box of a 4-D tensor map at coordinates (c0 innermost .. c3) into shared memory; the
// bytes complete on `barrier`. Out-of-range elements are zero-filled and still counted.
__device__ inline void copy_tensor_4d(uint32_t destination, const CUtensorMap* map, int32_t c0,
                                      int32_t c1, int32_t c2, int32_t c3, uint32_t barrier) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3, %4, %5}], [%6];\n" ::"r"(destination),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(barrier)
      : "memory");
}

// The same for a 5-D tensor map.
__device__ inline void copy_tensor_5d(uint32_t destination, const CUtensorMap* map, int32_t c0,
                                      int32_t c1, int32_t c2, int32_t c3, int32_t c4,
                                      uint32_t barrier) {
  asm volatile(
      "cp.async.bulk.tensor.5d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3, %4, %5, %6}], [%7];\n" ::"r"(destination),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4),
      "r"(barrier)
      : "memory");
}

__device__ inline void prefetch_tensor_map(const CUtensorMap* map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}

// Orders this thread's generic-proxy shared-memory accesses (ordinary stores, cp.async) with the
// async proxy's (wgmma operand reads, tensor copies).
__device__ inline void fence_proxy_async() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

__device__ inline void wait_all_async_copies() {
  asm volatile("cp.async.wait_all;\n" ::: "memory");
}

// --- Named barriers and register reallocation ----------------------------------------------------

// bar.sync over `threads` threads on hardware barrier `id` (0 is __syncthreads).
__device__ inline void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// Arrives at hardware barrier `id` (counting `threads` in all) without waiting.
__device__ inline void named_barrier_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

template <int kRegisters>
__device__ inline void raise_register_limit() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
}

template <int kRegisters>
__device__ inline void lower_register_limit() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
}

// --- Warpgroup MMA -------------------------------------------------------------------------------

// Shared-memory matrix descriptor of a tile stored in 128-byte swizzle atoms (8 rows of 128 bytes,
// 1024-byte aligned). Addresses and offsets are encoded in 16-byte units.
inline constexpr int kSwizzleBytes = 128;
inline constexpr int kSwizzleAtomRows = 8;
inline constexpr int kSwizzleAtomBytes = kSwizzleBytes * kSwizzleAtomRows;
inline constexpr uint64_t kDescriptorSwizzle128 = uint64_t{1} << 62;
inline constexpr int kDescriptorUnitShift = 4;
inline constexpr int kDescriptorLeadingShift = 16;
inline constexpr int kDescriptorStrideShift = 32;
inline constexpr uint32_t kDescriptorFieldMask = (1u << 14) - 1;

// `leading` and `stride`: byte distances between atoms along the two matrix dimensions (for a
// K-major operand `leading` is unused; for an MN-major one it steps between 64-element blocks of
// MN and `stride` between 8-row groups of K).
__device__ inline uint64_t matrix_descriptor(uint32_t address, uint32_t leading, uint32_t stride) {
  return kDescriptorSwizzle128 |
         (static_cast<uint64_t>((stride >> kDescriptorUnitShift) & kDescriptorFieldMask)
          << kDescriptorStrideShift) |
         (static_cast<uint64_t>((leading >> kDescriptorUnitShift) & kDescriptorFieldMask)
          << kDescriptorLeadingShift) |
         static_cast<uint64_t>((address >> kDescriptorUnitShift) & kDescriptorFieldMask);
}

// The descriptor of the same operand layout `bytes` further on. The start address sits in the
// low 14 bits as address >> 4, and shared addresses stay below 2^18 bytes (228 KiB per block), so
// the field never carries into the leading offset: one 32-bit add on the low word, the high word
// (stride, swizzle) untouched, instead of rebuilding all fields for every wgmma.
__device__ inline uint64_t advance_descriptor(uint64_t descriptor, uint32_t bytes) {
  const uint32_t low = static_cast<uint32_t>(descriptor) + (bytes >> kDescriptorUnitShift);
  return (descriptor & ~uint64_t{0xffffffffu}) | low;
}

__device__ inline void warpgroup_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ inline void warpgroup_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int kPending>
__device__ inline void warpgroup_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}

// Keeps the compiler from moving accesses of accumulator registers across an asynchronous MMA.
template <int kTiles>
__device__ inline void pin_accumulators(float (&accumulators)[kTiles][4]) {
#pragma unroll
  for (int tile = 0; tile < kTiles; ++tile) {
#pragma unroll
    for (int e = 0; e < 4; ++e) asm volatile("" : "+f"(accumulators[tile][e])::"memory");
  }
}

// Accumulator operand lists: a [kTiles][4] float array in the m64nNk16 layout, tile j holding
// columns 8j..8j+7 of the thread's rows (the mma.sync m16n8 layout, repeated along N).
#define MMSPARSE_ACCUMULATOR_TILE(d, j) "+f"(d[j][0]), "+f"(d[j][1]), "+f"(d[j][2]), "+f"(d[j][3])
#define MMSPARSE_ACCUMULATOR_8_TILES(d, first)                                          \
  MMSPARSE_ACCUMULATOR_TILE(d, first), MMSPARSE_ACCUMULATOR_TILE(d, first + 1),         \
      MMSPARSE_ACCUMULATOR_TILE(d, first + 2), MMSPARSE_ACCUMULATOR_TILE(d, first + 3), \
      MMSPARSE_ACCUMULATOR_TILE(d, first + 4), MMSPARSE_ACCUMULATOR_TILE(d, first + 5), \
      MMSPARSE_ACCUMULATOR_TILE(d, first + 6), MMSPARSE_ACCUMULATOR_TILE(d, first + 7)
// The accumulator operands of an m64nN wgmma: N / 2 floats a thread, N / 8 tiles.
#define MMSPARSE_ACCUMULATORS_64(d) MMSPARSE_ACCUMULATOR_8_TILES(d, 0)
#define MMSPARSE_ACCUMULATORS_128(d) \
  MMSPARSE_ACCUMULATOR_8_TILES(d, 0), MMSPARSE_ACCUMULATOR_8_TILES(d, 8)
#define MMSPARSE_ACCUMULATORS_256(d)                                      \
  MMSPARSE_ACCUMULATOR_8_TILES(d, 0), MMSPARSE_ACCUMULATOR_8_TILES(d, 8), \
      MMSPARSE_ACCUMULATOR_8_TILES(d, 16), MMSPARSE_ACCUMULATOR_8_TILES(d, 24)

// The accumulators' places in the instruction (operands 0 .. N / 2 - 1).
#define MMSPARSE_REGISTERS_32                                                              \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, " \
  "%19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define MMSPARSE_REGISTERS_64                                                              \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, " \
  "%19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, "  \
  "%36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, "  \
  "%53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"
#define MMSPARSE_REGISTERS_128                                                             \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, " \
  "%19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, "  \
  "%36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, "  \
  "%53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, "  \
  "%70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, "  \
  "%87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, "    \
  "%103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, "   \
  "%117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}"

// The two wgmma shapes of the mainloop for one 16-bit input type, N their columns:
//   WgmmaScores:  D[64×N] (+)= A[64×16] · B[16×N], A and B K-major in shared memory (Q·K^T, N the
//                 keys of a chunk);
//   WgmmaOutput:  D[64×N] += A[64×16] · B[16×N], A in registers (P), B MN-major in shared memory
//                 (V, N / 64 swizzle atoms side by side: one instruction per k-step covers the
//                 whole head_dim, so P's fragments go to the tensor cores once per k-step rather
//                 than once per atom).
// Specialised for the N the kernel's traits use: scores of 128 keys (head_dim 128) and 64 (256),
// outputs of 128 and 256 columns (wgmma's largest N).
template <class Element, int kColumns>
struct WgmmaScores;
template <class Element, int kColumns>
struct WgmmaOutput;

// REGISTERS, ACCUMULATORS: the macros above for N; A, B, ACCUMULATE: the operand numbers after
// the accumulators.
#define MMSPARSE_DEFINE_WGMMA_SCORES(ELEMENT, PTX_TYPE, N, REGISTERS, ACCUMULATORS, A, B,        \
                                     ACCUMULATE)                                                 \
  template <>                                                                                    \
  struct WgmmaScores<ELEMENT, N> {                                                               \
    static constexpr int kTiles = N / 8; /* N columns in tiles of 8 */                           \
    __device__ static void run(float (&d)[kTiles][4], uint64_t a, uint64_t b, bool accumulate) { \
      asm volatile("{\n.reg .pred accumulate;\nsetp.ne.b32 accumulate, " ACCUMULATE              \
                   ", 0;\n"                                                                      \
                   "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." PTX_TYPE "." PTX_TYPE       \
                   " " REGISTERS ", " A ", " B ", accumulate, 1, 1, 0, 0;\n}\n"                  \
                   : ACCUMULATORS(d)                                                             \
                   : "l"(a), "l"(b), "r"(static_cast<int>(accumulate)));                         \
    }                                                                                            \
  };

// A0: the first of the four A fragment registers' operand numbers.
#define MMSPARSE_DEFINE_WGMMA_OUTPUT(ELEMENT, PTX_TYPE, N, REGISTERS, ACCUMULATORS, A0, A1, A2,   \
                                     A3, B, ACCUMULATE)                                           \
  template <>                                                                                     \
  struct WgmmaOutput<ELEMENT, N> {                                                                \
    static constexpr int kTiles = N / 8; /* N columns in tiles of 8 */                            \
    __device__ static void run(float (&d)[kTiles][4], const uint32_t (&a)[4], uint64_t b) {       \
      asm volatile(                                                                               \
          "{\n.reg .pred accumulate;\nsetp.ne.b32 accumulate, " ACCUMULATE                        \
          ", 0;\n"                                                                                \
          "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." PTX_TYPE "." PTX_TYPE " " REGISTERS   \
          ", {" A0 ", " A1 ", " A2 ", " A3 "}, " B ", accumulate, 1, 1, 1;\n}\n"                  \
          : ACCUMULATORS(d)                                                                       \
          : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1) /* always accumulates */); \
    }                                                                                             \
  };

#define MMSPARSE_DEFINE_WGMMA_SHAPES(ELEMENT, PTX_TYPE)                                           \
  MMSPARSE_DEFINE_WGMMA_SCORES(ELEMENT, PTX_TYPE, 64, MMSPARSE_REGISTERS_32,                      \
                               MMSPARSE_ACCUMULATORS_64, "%32", "%33", "%34")                     \
  MMSPARSE_DEFINE_WGMMA_SCORES(ELEMENT, PTX_TYPE, 128, MMSPARSE_REGISTERS_64,                     \
                               MMSPARSE_ACCUMULATORS_128, "%64", "%65", "%66")                    \
  MMSPARSE_DEFINE_WGMMA_OUTPUT(ELEMENT, PTX_TYPE, 128, MMSPARSE_REGISTERS_64,                     \
                               MMSPARSE_ACCUMULATORS_128, "%64", "%65", "%66", "%67", "%68",      \
                               "%69")                                                             \
  MMSPARSE_DEFINE_WGMMA_OUTPUT(ELEMENT, PTX_TYPE, 256, MMSPARSE_REGISTERS_128,                    \
                               MMSPARSE_ACCUMULATORS_256, "%128", "%129", "%130", "%131", "%132", \
                               "%133")

MMSPARSE_DEFINE_WGMMA_SHAPES(__nv_bfloat16, "bf16")
MMSPARSE_DEFINE_WGMMA_SHAPES(__half, "f16")

#undef MMSPARSE_DEFINE_WGMMA_SHAPES
#undef MMSPARSE_DEFINE_WGMMA_OUTPUT
#undef MMSPARSE_DEFINE_WGMMA_SCORES
#undef MMSPARSE_REGISTERS_128
#undef MMSPARSE_REGISTERS_64
#undef MMSPARSE_REGISTERS_32
#undef MMSPARSE_ACCUMULATORS_256
#undef MMSPARSE_ACCUMULATORS_128
#undef MMSPARSE_ACCUMULATORS_64
#undef MMSPARSE_ACCUMULATOR_8_TILES
#undef MMSPARSE_ACCUMULATOR_TILE

}  // namespace mmsparse::cuda
