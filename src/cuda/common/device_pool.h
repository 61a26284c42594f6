#pragma once
// mmsparse's own stream-ordered memory pool, one per device, from which plans and the builders'
// scratch are allocated (cudaFreeAsync returns memory to it). Unlike the device's default pool it
// keeps freed memory at synchronisation points (up to a threshold), as a caching allocator does:
// a model builds a plan per layer and call, and mapping a plan's buffers afresh each time cost as
// much as the build itself (2-70 ms for VecAttention's plans at 128K on an H100). The threshold
// is MMSPARSE_POOL_KEEP_MB megabytes (0: keep nothing, the default pool's behaviour), unbounded
// when the variable is unset.

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace mmsparse::cuda {

inline constexpr char kPoolKeepVariable[] = "MMSPARSE_POOL_KEEP_MB";

// The bytes a pool keeps at synchronisation points for MMSPARSE_POOL_KEEP_MB's value `megabytes`
// (nullptr or empty: unset, everything); throws kInvalidArgument naming the variable for anything
// but a whole number.
uint64_t pool_kept_bytes(const char* megabytes);

// The pool of `device`, created on first use (thread-safe); throws kBackendError naming the call
// that failed, kInvalidArgument for a malformed MMSPARSE_POOL_KEEP_MB.
cudaMemPool_t memory_pool(int device);

// `bytes` from the pool of the current device, ordered on `stream`; `what` names the allocation in
// the error thrown on failure. Free with cudaFreeAsync.
void* allocate_async(std::size_t bytes, cudaStream_t stream, const char* what);

}  // namespace mmsparse::cuda
