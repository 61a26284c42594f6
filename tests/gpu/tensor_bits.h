#pragma once
// Poisoned host tensors and bit-for-bit comparison of host views, for the device suites that
// check what the GPU wrote element by element.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "common/random.h"
#include "mmsparse/tensor.h"

namespace mmsparse::test {

// All bytes 0xFF: NaN in float32, float16 and bfloat16, so an unwritten element never passes.
inline constexpr int kNaNByte = 0xFF;

// Fills every byte of `host` with kNaNByte.
inline void poison(Tensor& host) {
  if (host.nbytes() > 0) std::memset(host.data(), kNaNByte, host.nbytes());
}

// Bit-for-bit equality of two host views of one dtype and shape, element by element (any
// strides): NaN payloads and the sign of zero count.
inline int64_t differing_elements(const TensorView& a, const TensorView& b) {
  EXPECT_EQ(a.dtype, b.dtype);
  EXPECT_EQ(a.shape_vector(), b.shape_vector());
  std::vector<int64_t> offsets_a;
  std::vector<int64_t> offsets_b;
  for_each_offset(a, [&](int64_t, int64_t offset) { offsets_a.push_back(offset); });
  for_each_offset(b, [&](int64_t, int64_t offset) { offsets_b.push_back(offset); });
  if (offsets_a.size() != offsets_b.size()) return std::max<int64_t>(1, offsets_a.size());
  const std::size_t element = dtype_size(a.dtype);
  const auto* bytes_a = static_cast<const std::byte*>(a.data);
  const auto* bytes_b = static_cast<const std::byte*>(b.data);
  int64_t differing = 0;
  for (std::size_t i = 0; i < offsets_a.size(); ++i) {
    differing += std::memcmp(bytes_a + offsets_a[i] * element, bytes_b + offsets_b[i] * element,
                             element) != 0;
  }
  return differing;
}

}  // namespace mmsparse::test
