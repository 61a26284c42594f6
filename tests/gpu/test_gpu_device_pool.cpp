// mmsparse's memory pool (cuda/common/device_pool.h): one pool per device, memory freed in stream
// order stays reserved in it after a synchronisation (so the next build maps nothing), a plan
// uploaded twice reuses it, and a malformed MMSPARSE_POOL_KEEP_MB or device is refused by name.

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <limits>

#include "common/errors.h"
#include "cuda/common/device_pool.h"
#include "mmsparse/status.h"

namespace mmsparse::test {
namespace {

using mmsparse::testing::expect_error;

constexpr std::size_t kAllocationBytes = std::size_t{64} << 20;  // several of the pool's chunks
constexpr uint64_t kMegabyte = uint64_t{1} << 20;

uint64_t reserved_bytes(cudaMemPool_t pool) {
  uint64_t bytes = 0;
  EXPECT_EQ(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &bytes), cudaSuccess);
  return bytes;
}

TEST(GpuDevicePool, OnePoolPerDeviceKeepsFreedMemory) {
  int device = 0;
  ASSERT_EQ(cudaGetDevice(&device), cudaSuccess);
  const cudaMemPool_t pool = cuda::memory_pool(device);
  EXPECT_EQ(cuda::memory_pool(device), pool);
  cudaMemPool_t default_pool = nullptr;
  ASSERT_EQ(cudaDeviceGetDefaultMemPool(&default_pool, device), cudaSuccess);
  EXPECT_NE(pool, default_pool) << "the device's default pool is left as the process set it";

  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  void* data = cuda::allocate_async(kAllocationBytes, stream, "test allocation");
  ASSERT_NE(data, nullptr);
  ASSERT_EQ(cudaMemsetAsync(data, 0, kAllocationBytes, stream), cudaSuccess);
  ASSERT_EQ(cudaFreeAsync(data, stream), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  // Freed and synchronised, yet still reserved (MMSPARSE_POOL_KEEP_MB unset): the next allocation
  // of this size maps nothing new.
  const uint64_t reserved = reserved_bytes(pool);
  EXPECT_GE(reserved, kAllocationBytes);
  void* again = cuda::allocate_async(kAllocationBytes, stream, "test allocation");
  EXPECT_EQ(reserved_bytes(pool), reserved);
  ASSERT_EQ(cudaFreeAsync(again, stream), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  ASSERT_EQ(cudaStreamDestroy(stream), cudaSuccess);
}

TEST(GpuDevicePool, KeptBytesFollowTheVariable) {
  EXPECT_EQ(cuda::pool_kept_bytes(nullptr), std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(cuda::pool_kept_bytes(""), std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(cuda::pool_kept_bytes("0"), 0u);
  EXPECT_EQ(cuda::pool_kept_bytes("1536"), 1536 * kMegabyte);
  for (const char* bad : {"-1", "2GB", " 5", "1.5", "99999999999999999999"}) {
    SCOPED_TRACE(bad);
    expect_error([&] { (void)cuda::pool_kept_bytes(bad); }, ErrorCode::kInvalidArgument,
                 {cuda::kPoolKeepVariable, "whole number of megabytes", bad});
  }
}

TEST(GpuDevicePool, NegativeDeviceIsNamed) {
  expect_error([] { (void)cuda::memory_pool(-1); }, ErrorCode::kInvalidArgument,
               {"device", ">= 0", "-1"});
}

}  // namespace
}  // namespace mmsparse::test
