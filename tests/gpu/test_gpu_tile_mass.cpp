// The tile oracle's device block sums against the host ones (the CPU version is checked against
// brute force in tests/cpu/test_tile_oracle.cpp): fresh random inputs, odd lengths, GQA ratios,
// query tiles taller than a CTA's rows, sampled tiles, rows without keys, every input dtype.

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "common/random.h"
#include "cpu/attention_helpers.h"
#include "mmsparse/attention.h"
#include "mmsparse/device.h"
#include "mmsparse/status.h"
#include "mmsparse/tools/metrics.h"

namespace mmsparse::test {
namespace {

constexpr Device kCuda{DeviceType::kCUDA, 0};
// Both sides read the same stored inputs; fp32 scores summed in other orders differ by ~1e-6
// relative, which exp turns into ~1e-5 of a tile's mass at |score| ~ 10.
constexpr double kRelativeSlack = 1e-4;
constexpr double kAbsoluteSlack = 1e-6;

struct Case {
  DType dtype;
  int64_t head_dim;
  int64_t group;       // q_heads / kv_heads
  int64_t tile_rows;   // 200: taller than a CTA's 128 rows
  int64_t chunk_keys;  // 0 = the engine's chunk
  int64_t sample_tiles;
  bool shorter_kv;  // kv_len < q_len: the first rows see no key (LSE -inf)
};

const std::array<Case, 6> kCases = {{
    {DType::kBFloat16, 128, 1, 128, 0, 0, false},
    {DType::kBFloat16, 128, 7, 64, 0, 0, false},
    {DType::kFloat16, 64, 4, 200, 48, 0, false},
    {DType::kFloat32, 40, 2, 64, 128, 3, false},
    {DType::kBFloat16, 128, 4, 128, 0, 4, true},
    {DType::kFloat16, 128, 1, 77, 100, 0, true},
}};

std::string describe(const Case& c) {
  return std::string(dtype_name(c.dtype)) + " d" + std::to_string(c.head_dim) + " group " +
         std::to_string(c.group) + " tile_rows " + std::to_string(c.tile_rows) + " chunk " +
         std::to_string(c.chunk_keys) + " sample " + std::to_string(c.sample_tiles) +
         (c.shorter_kv ? " kv<q" : "");
}

TEST(GpuTileMass, MatchesTheHostSums) {
  Random random;
  SCOPED_TRACE(random.trace());
  for (const Case& c : kCases) {
    SCOPED_TRACE(describe(c));
    const int64_t kv_heads = 2;
    const int64_t heads = kv_heads * c.group;
    const int64_t q_len = random_length(random, 300, 900);
    const int64_t kv_len =
        c.shorter_kv ? q_len - random.uniform_int(1, 100) : q_len + random.uniform_int(0, 150);
    Operand q = random_operand(random, c.dtype, 1, q_len, heads, c.head_dim, false);
    Operand k = random_operand(random, c.dtype, 1, kv_len, kv_heads, c.head_dim, true);
    Operand v = random_operand(random, c.dtype, 1, kv_len, kv_heads, c.head_dim, false);
    Operand out = poisoned_output(c.dtype, 1, q_len, heads, c.head_dim, false);
    Tensor lse = poisoned_lse(1, heads, q_len);
    attention_dense(q.view, k.view, v.view, out.view, lse.view());

    const DeviceTensor device_q = DeviceTensor::from_host(q.view, kCuda);
    const DeviceTensor device_k = DeviceTensor::from_host(k.view, kCuda);
    const DeviceTensor device_lse = DeviceTensor::from_host(lse.view(), kCuda);
    TileMassOptions options;
    options.tile_rows = c.tile_rows;
    options.chunk_keys = c.chunk_keys;
    options.sample_tiles = c.sample_tiles;
    const std::vector<double> recalls(std::begin(kTileOracleRecalls), std::end(kTileOracleRecalls));
    for (int64_t head = 0; head < heads; head += std::max<int64_t>(1, heads / 3)) {
      SCOPED_TRACE("head " + std::to_string(head));
      const TileMass host = tile_mass(q.view, k.view, lse.view(), 0, head, options);
      const TileMass device =
          tile_mass(device_q.view(), device_k.view(), device_lse.view(), 0, head, options);
      ASSERT_EQ(device.sampled, host.sampled);
      ASSERT_EQ(device.mass.size(), host.mass.size());
      for (std::size_t n = 0; n < host.mass.size(); ++n) {
        ASSERT_NEAR(device.mass[n], host.mass[n],
                    kRelativeSlack * std::abs(host.mass[n]) + kAbsoluteSlack)
            << "sample " << n / host.key_chunks << " chunk " << n % host.key_chunks;
      }
      const TileOracle host_oracle = tile_oracle(host, recalls);
      const TileOracle device_oracle = tile_oracle(device, recalls);
      for (std::size_t level = 0; level < recalls.size(); ++level) {
        // Near-ties may swap a tile; the fractional cost moves by less than one tile.
        EXPECT_NEAR(device_oracle.levels[level].cost_share, host_oracle.levels[level].cost_share,
                    1.0 / std::max<int64_t>(1, host_oracle.causal_tiles));
      }
    }
  }
}

TEST(GpuTileMass, RefusesMixedDevices) {
  Random random;
  Operand q = random_operand(random, DType::kBFloat16, 1, 65, 2, 64, false);
  Operand k = random_operand(random, DType::kBFloat16, 1, 65, 2, 64, false);
  Tensor lse = poisoned_lse(1, 2, 65);
  const DeviceTensor device_q = DeviceTensor::from_host(q.view, kCuda);
  EXPECT_THROW(tile_mass(device_q.view(), k.view, lse.view(), 0, 0), Error);
}

}  // namespace
}  // namespace mmsparse::test
