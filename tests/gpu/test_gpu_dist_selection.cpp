// Essential-KV selection on the GPU against the host selection: the packed passing rows must be
// identical, bit for bit (same fp32 arithmetic in the same order, same tie rule), over dtypes,
// odd block lengths, GQA ratios, pool widths and ties; and repeated runs agree.

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "common/random.h"
#include "device_buffer.h"
#include "dist/selection.h"
#include "mmsparse/device.h"

namespace mmsparse {
namespace {

using test::Random;

struct SelectionCase {
  DType dtype;
  int64_t query_len, q_heads, kv_heads, head_dim, len, count, pool_width;
  bool constant_keys;  // every score equal: the first `count` positions must win
};

std::string describe(const SelectionCase& c) {
  return std::string(dtype_name(c.dtype)) + " query=" + std::to_string(c.query_len) +
         " heads=" + std::to_string(c.q_heads) + "/" + std::to_string(c.kv_heads) +
         " dim=" + std::to_string(c.head_dim) + " len=" + std::to_string(c.len) +
         " count=" + std::to_string(c.count) + " pool=" + std::to_string(c.pool_width) +
         (c.constant_keys ? " constant keys" : "");
}

std::vector<std::byte> host_message(const TensorView& q, const TensorView& k, const TensorView& v,
                                    const SelectionCase& c) {
  std::vector<std::byte> message(
      static_cast<std::size_t>(c.count * c.kv_heads * 2 * c.head_dim * dtype_size(c.dtype)));
  dist::detail::select_and_pack(q, k, v, c.count, c.pool_width, message.data(), nullptr);
  return message;
}

std::vector<std::byte> device_message(const Tensor& q, const Tensor& k, const Tensor& v,
                                      const SelectionCase& c) {
  const Device gpu{DeviceType::kCUDA, 0};
  const DeviceTensor device_q = DeviceTensor::from_host(q.view(), gpu);
  const DeviceTensor device_k = DeviceTensor::from_host(k.view(), gpu);
  const DeviceTensor device_v = DeviceTensor::from_host(v.view(), gpu);
  const std::size_t bytes =
      static_cast<std::size_t>(c.count * c.kv_heads * 2 * c.head_dim * dtype_size(c.dtype));
  test::DeviceBuffer message(bytes);
  cudaStream_t stream = nullptr;
  test::expect_cuda(cudaStreamCreate(&stream), "cudaStreamCreate");
  dist::detail::select_and_pack(device_q.view(), device_k.view(), device_v.view(), c.count,
                                c.pool_width, message.data(), stream);
  test::expect_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  test::expect_cuda(cudaStreamDestroy(stream), "cudaStreamDestroy");
  test::synchronize_device();
  std::vector<std::byte> result(bytes);
  test::expect_cuda(cudaMemcpy(result.data(), message.data(), bytes, cudaMemcpyDeviceToHost),
                    "cudaMemcpy");
  return result;
}

TEST(GpuDistSelection, PacksTheSameRowsAsTheHostSelection) {
  Random random;
  const std::vector<SelectionCase> cases = {
      {DType::kBFloat16, 37, 28, 4, 128, 4099, 257, 5, false},
      {DType::kBFloat16, 1, 8, 8, 64, 1, 1, 5, false},
      {DType::kFloat16, 5, 6, 2, 128, 67, 67, 5, false},   // whole block
      {DType::kFloat32, 9, 7, 1, 32, 1001, 13, 1, false},  // no pooling, GQA 7
      {DType::kBFloat16, 3, 4, 2, 128, 40000, 312, 5, false},
      {DType::kBFloat16, 4, 4, 1, 64, 300, 17, 5, true},
  };
  for (const SelectionCase& c : cases) {
    SCOPED_TRACE(describe(c) + " " + random.trace());
    const Tensor q = random.normal_tensor(c.dtype, {1, c.query_len, c.q_heads, c.head_dim});
    Tensor k = random.normal_tensor(c.dtype, {1, c.len, c.kv_heads, c.head_dim});
    if (c.constant_keys) {
      for (int64_t i = 0; i < k.numel(); ++i) store_float(k.view(), i, 0.5f);
    }
    const Tensor v = random.normal_tensor(c.dtype, {1, c.len, c.kv_heads, c.head_dim});
    const std::vector<std::byte> expected = host_message(q.view(), k.view(), v.view(), c);
    const std::vector<std::byte> first = device_message(q, k, v, c);
    const std::vector<std::byte> second = device_message(q, k, v, c);
    EXPECT_TRUE(first == expected) << "the device packed other rows than the host";
    EXPECT_TRUE(second == first) << "two device runs disagree";
  }
}

}  // namespace
}  // namespace mmsparse
