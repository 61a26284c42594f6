// DeviceTensor, the public API's device memory: round trips keep every bit in every layout, host
// copies overwrite and moves keep the memory, and mismatched views, host devices and negative
// extents are rejected with errors that name the argument.

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "attention_harness.h"
#include "attention_oracle.h"
#include "common/compare.h"
#include "common/errors.h"
#include "common/random.h"
#include "device_buffer.h"
#include "merge_tolerances.h"
#include "mmsparse/attention.h"
#include "mmsparse/device.h"
#include "mmsparse/layout.h"
#include "mmsparse/patterns.h"
#include "mmsparse/plan.h"
#include "mmsparse/tools/search.h"
#include "mmsparse/status.h"
#include "plan_generators.h"
#include "tensor_bits.h"

namespace mmsparse::test {
namespace {

using mmsparse::testing::expect_error;

constexpr Device kCuda{DeviceType::kCUDA, 0};
constexpr Device kCpu{DeviceType::kCPU, 0};

// Random bits in every byte of the storage (padding included): any dtype, NaNs and all, so that
// only a bit-exact copy passes.
void fill_random_bytes(Random& random, Tensor& storage) {
  constexpr int64_t kByteValues = 256;
  for (std::size_t i = 0; i < storage.nbytes(); ++i) {
    storage.data()[i] = static_cast<std::byte>(random.uniform_int(0, kByteValues - 1));
  }
}

TEST(GpuDeviceTensor, RoundTripKeepsEveryBitInEveryLayout) {
  Random random;
  SCOPED_TRACE(random.trace());
  constexpr int64_t kBatch = 2;
  constexpr int64_t kHeads = 3;
  constexpr int64_t kDim = 5;  // odd: rows not multiples of 16 bytes
  constexpr int64_t kMaxSeq = 41;
  constexpr std::array<OperandLayout, 3> kLayouts = {
      OperandLayout::kContiguous, OperandLayout::kHeadMajor, OperandLayout::kPaddedRows};
  for (const DType dtype :
       {DType::kFloat32, DType::kFloat16, DType::kBFloat16, DType::kInt32, DType::kUInt8}) {
    const int64_t seq = random.uniform_int(1, kMaxSeq);
    for (const OperandLayout source_layout : kLayouts) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " seq=" + std::to_string(seq) +
                   " source=" + layout_name(source_layout));
      HostOperand source(dtype, kBatch, seq, kHeads, kDim, source_layout);
      fill_random_bytes(random, source.storage);
      const DeviceTensor device = DeviceTensor::from_host(source.view, kCuda);
      const TensorView view = device.view();
      EXPECT_EQ(view.dtype, dtype);
      EXPECT_EQ(device_name(view.device), device_name(kCuda));
      EXPECT_EQ(view.shape_vector(), source.view.shape_vector());
      EXPECT_TRUE(view.is_contiguous());
      for (const OperandLayout destination_layout : kLayouts) {
        SCOPED_TRACE(std::string("destination=") + layout_name(destination_layout));
        HostOperand back(dtype, kBatch, seq, kHeads, kDim, destination_layout);
        poison(back.storage);
        device.copy_to_host(back.view);
        EXPECT_EQ(differing_elements(back.view, source.view), 0);
      }
    }
  }
}

TEST(GpuDeviceTensor, CopyFromHostOverwritesAndMovesKeepTheMemory) {
  Random random;
  SCOPED_TRACE(random.trace());
  constexpr int64_t kRows = 7;
  constexpr int64_t kColumns = 13;
  Tensor first(DType::kBFloat16, {kRows, kColumns});
  Tensor second(DType::kBFloat16, {kRows, kColumns});
  fill_random_bytes(random, first);
  fill_random_bytes(random, second);
  DeviceTensor device(DType::kBFloat16, {kRows, kColumns}, kCuda);
  device.copy_from_host(first.view());
  device.copy_from_host(second.view());
  DeviceTensor moved(std::move(device));
  DeviceTensor assigned(DType::kFloat32, {1}, kCuda);
  assigned = std::move(moved);
  Tensor back(DType::kBFloat16, {kRows, kColumns});
  assigned.copy_to_host(back.view());
  EXPECT_EQ(differing_elements(back.view(), second.view()), 0);
}

TEST(GpuDeviceTensorErrors, MismatchedHostViewsAreRejected) {
  constexpr int64_t kRows = 3;
  constexpr int64_t kColumns = 5;
  const DeviceTensor device(DType::kBFloat16, {kRows, kColumns}, kCuda);
  const Tensor other_dtype(DType::kFloat32, {kRows, kColumns});
  const Tensor other_shape(DType::kBFloat16, {kColumns, kRows});
  Tensor on_device(DType::kBFloat16, {kRows, kColumns});
  TensorView claims_device = on_device.view();
  claims_device.device = kCuda;  // host memory that says it is device memory
  Tensor destination(DType::kFloat32, {kRows, kColumns});

  DeviceTensor target(DType::kBFloat16, {kRows, kColumns}, kCuda);
  expect_error([&] { target.copy_from_host(other_dtype.view()); }, ErrorCode::kInvalidArgument,
               {"copy_from_host source dtype", "bfloat16", "float32"});
  expect_error([&] { target.copy_from_host(other_shape.view()); }, ErrorCode::kInvalidArgument,
               {"copy_from_host source shape", "[3, 5]", "[5, 3]"});
  expect_error([&] { target.copy_from_host(claims_device); }, ErrorCode::kInvalidArgument,
               {"copy_from_host source", "a host tensor", device_name(kCuda)});
  expect_error([&] { device.copy_to_host(destination.view()); }, ErrorCode::kInvalidArgument,
               {"copy_to_host destination dtype", "bfloat16", "float32"});
  expect_error([&] { device.copy_to_host(other_shape.view()); }, ErrorCode::kInvalidArgument,
               {"copy_to_host destination shape", "[3, 5]", "[5, 3]"});
  expect_error([&] { device.copy_to_host(claims_device); }, ErrorCode::kInvalidArgument,
               {"copy_to_host destination", "a host tensor", device_name(kCuda)});
}

TEST(GpuDeviceTensorErrors, HostDevicesAreRejected) {
  const Tensor host(DType::kFloat16, {2, 3});
  expect_error(
      [&] {
        [[maybe_unused]] const DeviceTensor tensor(DType::kFloat16, {2, 3}, kCpu);
      },
      ErrorCode::kInvalidArgument, {"device", "a CUDA device", device_name(kCpu)});
  expect_error([&] { (void)DeviceTensor::from_host(host.view(), kCpu); },
               ErrorCode::kInvalidArgument, {"device", "a CUDA device", device_name(kCpu)});
  expect_error([&] { synchronize(kCpu); }, ErrorCode::kInvalidArgument,
               {"device", "a CUDA device", device_name(kCpu)});
}

// Like Tensor, DeviceTensor must reject negative extents by name, before any CUDA call (a negative
// extent would otherwise wrap to a huge allocation size).
TEST(GpuDeviceTensorErrors, NegativeExtentsAreRejected) {
  constexpr int64_t kNegative = -3;
  expect_error(
      [&] {
        [[maybe_unused]] const DeviceTensor tensor(DType::kFloat32, {2, kNegative}, kCuda);
      },
      ErrorCode::kInvalidArgument, {"shape", std::to_string(kNegative)});
  // Without the check, cudaMalloc fails and the runtime keeps that error as its last one; clear it
  // so that later checks of cudaGetLastError in this process do not inherit it.
  (void)cudaGetLastError();
}

}  // namespace
}  // namespace mmsparse::test
