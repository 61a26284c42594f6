// The CPU reference (the oracle)'s dense attention against an independent naive fp64
// implementation (naive_reference.h), by the kernel accuracy rule, and its edge cases. Plan-driven
// attention is test_planned_attention.cpp.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <numeric>
#include <string>
#include <tuple>
#include <vector>

#include "common/compare.h"
#include "common/tile_keys.h"
#include "common/random.h"
#include "cpu/attention_helpers.h"
#include "cpu/naive_reference.h"
#include "mmsparse/attention.h"
#include "mmsparse/plan.h"

namespace mmsparse::test {
namespace {

// --- Dense attention ---------------------------------------------------------------------------

using DenseParams = std::tuple<DType, int64_t /*group*/, bool /*causal*/, bool /*strided*/>;

std::string dense_name(const ::testing::TestParamInfo<DenseParams>& info) {
  const auto [dtype, group, causal, strided] = info.param;
  return dtype_label(dtype) + "_gqa" + std::to_string(group) + (causal ? "_causal" : "_full") +
         (strided ? "_strided" : "_contiguous");
}

class DenseAttention : public ::testing::TestWithParam<DenseParams> {};

TEST_P(DenseAttention, MatchesFp64ByKernelRule) {
  const auto [dtype, group, causal, strided] = GetParam();
  Random random;
  SCOPED_TRACE(random.trace());
  const int64_t q_len = test::random_length(random, 20, 110);
  const int64_t kv_len = q_len + random.uniform_int(1, 50);
  const int64_t q_heads = kKvHeads * group;
  SCOPED_TRACE("q_len=" + std::to_string(q_len) + " kv_len=" + std::to_string(kv_len));

  const Operand q = test::random_operand(random, dtype, kBatch, q_len, q_heads, kHeadDim, strided);
  const Operand k =
      test::random_operand(random, dtype, kBatch, kv_len, kKvHeads, kHeadDim, strided);
  const Operand v =
      test::random_operand(random, dtype, kBatch, kv_len, kKvHeads, kHeadDim, strided);
  const Operand out = test::poisoned_output(dtype, kBatch, q_len, q_heads, kHeadDim, strided);
  const Tensor lse = test::poisoned_lse(kBatch, q_heads, q_len);
  AttentionOptions options;
  options.causal = causal;
  attention_dense(q.view, k.view, v.view, out.view, lse.view(), options);

  const int64_t offset = kv_len - q_len;
  const KeepPair keep = [&](int64_t, int64_t, int64_t i, int64_t j) {
    return !causal || j <= i + offset;
  };
  const double scale = 1.0 / std::sqrt(static_cast<double>(kHeadDim));
  expect_kernel_accuracy(out.view, lse.view(),
                         naive_attention(q.view, k.view, v.view, scale, keep, Precision::kExact),
                         naive_attention(q.view, k.view, v.view, scale, keep, Precision::kNaive));
}

INSTANTIATE_TEST_SUITE_P(
    AllLayouts, DenseAttention,
    ::testing::Combine(::testing::Values(DType::kFloat32, DType::kFloat16, DType::kBFloat16),
                       ::testing::Values(1, 2, 4, 7), ::testing::Bool(), ::testing::Bool()),
    dense_name);

TEST(DenseAttentionEdges, FewerKeysThanQueriesLeavesEarlyRowsEmpty) {
  Random random;
  SCOPED_TRACE(random.trace());
  const int64_t q_len = test::random_length(random, 40, 90);
  const int64_t kv_len = q_len - random.uniform_int(5, 30);
  const Operand q =
      test::random_operand(random, DType::kFloat32, kBatch, q_len, 4, kHeadDim, false);
  const Operand k =
      test::random_operand(random, DType::kFloat32, kBatch, kv_len, 2, kHeadDim, true);
  const Operand v =
      test::random_operand(random, DType::kFloat32, kBatch, kv_len, 2, kHeadDim, true);
  const Operand out = test::poisoned_output(DType::kFloat32, kBatch, q_len, 4, kHeadDim, false);
  const Tensor lse = test::poisoned_lse(kBatch, 4, q_len);
  attention_dense(q.view, k.view, v.view, out.view, lse.view());

  const KeepPair keep = [&](int64_t, int64_t, int64_t i, int64_t j) {
    return j <= i + kv_len - q_len;
  };
  const double scale = 1.0 / std::sqrt(static_cast<double>(kHeadDim));
  const Reference exact = naive_attention(q.view, k.view, v.view, scale, keep, Precision::kExact);
  expect_kernel_accuracy(out.view, lse.view(), exact,
                         naive_attention(q.view, k.view, v.view, scale, keep, Precision::kNaive));
  // Row 0 sees no key: the reference must say so explicitly, not by accident of the comparison.
  EXPECT_EQ(lse.data_as<float>()[0], -INFINITY);
  EXPECT_EQ(load_float(out.view, 0), 0.0f);
}

TEST(DenseAttentionEdges, NoKeysGivesZeroOutputAndNegativeInfinityLse) {
  Random random;
  SCOPED_TRACE(random.trace());
  const int64_t q_len = test::random_length(random, 3, 20);
  const Operand q = test::random_operand(random, DType::kBFloat16, 1, q_len, 2, kHeadDim, false);
  const Tensor k(DType::kBFloat16, {1, 0, 1, kHeadDim});
  const Tensor v(DType::kBFloat16, {1, 0, 1, kHeadDim});
  const Operand out = test::poisoned_output(DType::kBFloat16, 1, q_len, 2, kHeadDim, false);
  const Tensor lse = test::poisoned_lse(1, 2, q_len);
  for (bool causal : {true, false}) {
    AttentionOptions options;
    options.causal = causal;
    attention_dense(q.view, k.view(), v.view(), out.view, lse.view(), options);
    for (double value : test::to_doubles(out.view)) ASSERT_EQ(value, 0.0);
    for (double value : test::to_doubles(lse.view())) ASSERT_EQ(value, test::kNegativeInfinity);
  }
}

TEST(DenseAttentionEdges, ExplicitScaleIsUsed) {
  Random random;
  SCOPED_TRACE(random.trace());
  const int64_t q_len = test::random_length(random, 10, 50);
  const int64_t kv_len = q_len + random.uniform_int(1, 20);
  const float scale = static_cast<float>(random.uniform(0.05, 0.6));
  const Operand q = test::random_operand(random, DType::kFloat32, 1, q_len, 2, kHeadDim, false);
  const Operand k = test::random_operand(random, DType::kFloat32, 1, kv_len, 1, kHeadDim, false);
  const Operand v = test::random_operand(random, DType::kFloat32, 1, kv_len, 1, kHeadDim, false);
  const Operand out = test::poisoned_output(DType::kFloat32, 1, q_len, 2, kHeadDim, false);
  const Tensor lse = test::poisoned_lse(1, 2, q_len);
  AttentionOptions options;
  options.scale = scale;
  attention_dense(q.view, k.view, v.view, out.view, lse.view(), options);
  const KeepPair keep = [&](int64_t, int64_t, int64_t i, int64_t j) {
    return j <= i + kv_len - q_len;
  };
  expect_kernel_accuracy(out.view, lse.view(),
                         naive_attention(q.view, k.view, v.view, scale, keep, Precision::kExact),
                         naive_attention(q.view, k.view, v.view, scale, keep, Precision::kNaive));
}

TEST(DenseAttentionEdges, ThreadCountDoesNotChangeTheResult) {
  Random random;
  SCOPED_TRACE(random.trace());
  const int64_t q_len = test::random_length(random, 30, 100);
  const int64_t kv_len = q_len + random.uniform_int(1, 30);
  const Operand q =
      test::random_operand(random, DType::kBFloat16, kBatch, q_len, 4, kHeadDim, true);
  const Operand k =
      test::random_operand(random, DType::kBFloat16, kBatch, kv_len, 2, kHeadDim, true);
  const Operand v =
      test::random_operand(random, DType::kBFloat16, kBatch, kv_len, 2, kHeadDim, true);
  std::vector<std::vector<double>> outs;
  std::vector<std::vector<double>> lses;
  for (int threads : {1, 3}) {
    const Operand out = test::poisoned_output(DType::kBFloat16, kBatch, q_len, 4, kHeadDim, false);
    const Tensor lse = test::poisoned_lse(kBatch, 4, q_len);
    AttentionOptions options;
    options.num_threads = threads;
    attention_dense(q.view, k.view, v.view, out.view, lse.view(), options);
    outs.push_back(test::to_doubles(out.view));
    lses.push_back(test::to_doubles(lse.view()));
  }
  EXPECT_EQ(outs[0], outs[1]);
  EXPECT_EQ(lses[0], lses[1]);
}

}  // namespace
}  // namespace mmsparse::test
