// Accuracy measures on constructed inputs whose answers are known in closed form.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <numeric>
#include <string>
#include <vector>

#include "common/compare.h"
#include "common/random.h"
#include "cpu/attention_helpers.h"
#include "mmsparse/attention.h"
#include "mmsparse/plan.h"
#include "mmsparse/tools/metrics.h"

namespace mmsparse {
namespace {

using test::Operand;
using test::Random;

constexpr int64_t kHeadDim = 24;
// fp32 attention outputs and LSEs carry relative errors of a few 1e-7.
constexpr double kFp32Tolerance = 1e-5;

struct AttentionRun {
  Operand out;  // [batch, q_len, heads, head_dim]
  Tensor lse;   // [batch, heads, q_len]
};

AttentionRun run_dense(const TensorView& q, const TensorView& k, const TensorView& v,
                       const AttentionOptions& options = {}) {
  AttentionRun run{
      test::poisoned_output(q.dtype, q.shape[0], q.shape[1], q.shape[2], q.shape[3], false),
      test::poisoned_lse(q.shape[0], q.shape[2], q.shape[1])};
  attention_dense(q, k, v, run.out.view, run.lse.view(), options);
  return run;
}

AttentionRun run_plan(const Plan& plan, const TensorView& q, const TensorView& k,
                      const TensorView& v, const AttentionOptions& options = {}) {
  AttentionRun run{
      test::poisoned_output(q.dtype, q.shape[0], q.shape[1], q.shape[2], q.shape[3], false),
      test::poisoned_lse(q.shape[0], q.shape[2], q.shape[1])};
  attention_planned(plan, q, k, v, run.out.view, run.lse.view(), options);
  return run;
}

// A plan with one tile per `tile_rows` rows whose keys are `keys(begin, end, builder)`.
Plan custom_plan(int64_t heads, int64_t q_len, int64_t kv_len, const MaskPolicy& mask,
                 const std::function<void(PlanBuilder&)>& add_keys) {
  PlanShape shape;
  shape.heads = heads;
  shape.q_len = q_len;
  shape.kv_len = kv_len;
  PlanBuilder builder(shape);
  for (int64_t head = 0; head < heads; ++head) {
    builder.begin_head();
    for (int64_t begin = 0; begin < q_len; begin += shape.tile_rows) {
      builder.begin_tile(begin, std::min(q_len, begin + shape.tile_rows), mask);
      add_keys(builder);
    }
  }
  return builder.finish();
}

void set(const Tensor& tensor, std::initializer_list<int64_t> index, float value) {
  const TensorView view = tensor.view();
  int64_t offset = 0;
  int d = 0;
  for (int64_t i : index) offset += i * view.strides[d++];
  store_float(view, offset, value);
}

// --- Recall and output error -------------------------------------------------------------------

TEST(Recall, DensePlanRecallsEverything) {
  Random random;
  SCOPED_TRACE(random.trace());
  const int64_t q_len = test::random_length(random, 30, 120);
  const int64_t kv_len = q_len + random.uniform_int(1, 40);
  constexpr int64_t kBatch = 2, kHeads = 4, kKvHeads = 2;
  const Operand q =
      test::random_operand(random, DType::kFloat32, kBatch, q_len, kHeads, kHeadDim, true);
  const Operand k =
      test::random_operand(random, DType::kFloat32, kBatch, kv_len, kKvHeads, kHeadDim, false);
  const Operand v =
      test::random_operand(random, DType::kFloat32, kBatch, kv_len, kKvHeads, kHeadDim, false);
  const AttentionRun dense = run_dense(q.view, k.view, v.view);
  const AttentionRun planned =
      run_plan(test::dense_plan(kHeads, q_len, kv_len, true), q.view, k.view, v.view);
  for (int64_t b = 0; b < kBatch; ++b) {
    for (int64_t h = 0; h < kHeads; ++h) {
      const HeadAccuracy accuracy = compare_head(planned.out.view, planned.lse.view(),
                                                 dense.out.view, dense.lse.view(), b, h);
      EXPECT_NEAR(accuracy.recall_mean, 1.0, kFp32Tolerance);
      EXPECT_NEAR(accuracy.recall_min, 1.0, kFp32Tolerance);
      EXPECT_LE(accuracy.output_error, kFp32Tolerance);
      EXPECT_LE(accuracy.nmse, kFp32Tolerance * kFp32Tolerance);
    }
  }
}

TEST(Recall, UniformLogitsWithOneKeptKeyRecallOneOverRowLength) {
  Random random;
  SCOPED_TRACE(random.trace());
  const int64_t q_len = test::random_length(random, 10, 90);
  const int64_t kv_len = q_len + random.uniform_int(0, 30);
  const int64_t offset = kv_len - q_len;
  // K = 0 makes every logit 0: row i's softmax is uniform over its i + offset + 1 keys.
  const Tensor q = random.normal_tensor(DType::kFloat32, {1, q_len, 1, kHeadDim});
  const Tensor k(DType::kFloat32, {1, kv_len, 1, kHeadDim});
  const Tensor v = random.normal_tensor(DType::kFloat32, {1, kv_len, 1, kHeadDim});
  const Plan first_key_only = custom_plan(1, q_len, kv_len, MaskPolicy{},
                                          [](PlanBuilder& builder) { builder.add_column(0); });
  const AttentionRun dense = run_dense(q.view(), k.view(), v.view());
  const AttentionRun planned = run_plan(first_key_only, q.view(), k.view(), v.view());

  const std::vector<double> recall = row_recall(planned.lse.view(), dense.lse.view(), 0, 0);
  ASSERT_EQ(static_cast<int64_t>(recall.size()), q_len);
  double expected_mean = 0.0;
  for (int64_t i = 0; i < q_len; ++i) {
    const double expected = 1.0 / static_cast<double>(i + offset + 1);
    EXPECT_NEAR(recall[i], expected, kFp32Tolerance * expected) << "row " << i;
    expected_mean += expected / static_cast<double>(q_len);
  }
  const HeadAccuracy accuracy =
      compare_head(planned.out.view, planned.lse.view(), dense.out.view, dense.lse.view(), 0, 0);
  EXPECT_NEAR(accuracy.recall_mean, expected_mean, kFp32Tolerance);
  EXPECT_NEAR(accuracy.recall_min, 1.0 / static_cast<double>(kv_len), kFp32Tolerance);

  // The planned output is v_0 on every row; the dense output the mean of v_0 .. v_(i+offset).
  double error_squares = 0.0, dense_squares = 0.0;
  for (int64_t i = 0; i < q_len; ++i) {
    for (int64_t d = 0; d < kHeadDim; ++d) {
      double mean = 0.0;
      for (int64_t j = 0; j <= i + offset; ++j) mean += v.data_as<float>()[j * kHeadDim + d];
      mean /= static_cast<double>(i + offset + 1);
      const double error = v.data_as<float>()[d] - mean;
      error_squares += error * error;
      dense_squares += mean * mean;
    }
  }
  const double expected_error = std::sqrt(error_squares / dense_squares);
  EXPECT_NEAR(accuracy.output_error, expected_error, kFp32Tolerance * expected_error);
  EXPECT_NEAR(accuracy.nmse, expected_error * expected_error,
              2 * kFp32Tolerance * expected_error * expected_error);
}

TEST(Recall, KeepingOneOfTwoEqualDominantKeysRecallsHalf) {
  Random random;
  SCOPED_TRACE(random.trace());
  const int64_t q_len = test::random_length(random, 10, 90);
  const int64_t kv_len = q_len + random.uniform_int(2, 30);
  // Keys 0 and 1 score kDominant, every other key 0: the rest hold kv_len * e^-30 of the mass.
  constexpr float kDominant = 30.0f;
  Tensor q(DType::kFloat32, {1, q_len, 1, kHeadDim});
  Tensor k(DType::kFloat32, {1, kv_len, 1, kHeadDim});
  for (int64_t i = 0; i < q_len; ++i) set(q, {0, i, 0, 0}, 1.0f);
  for (int64_t j : {0, 1}) set(k, {0, j, 0, 0}, kDominant);
  const Tensor v = random.normal_tensor(DType::kFloat32, {1, kv_len, 1, kHeadDim});
  AttentionOptions options;
  options.scale = 1.0f;
  const Plan without_first = custom_plan(
      1, q_len, kv_len, MaskPolicy{}, [&](PlanBuilder& builder) { builder.add_span(1, kv_len); });
  const AttentionRun dense = run_dense(q.view(), k.view(), v.view(), options);
  const AttentionRun planned = run_plan(without_first, q.view(), k.view(), v.view(), options);
  const HeadAccuracy accuracy =
      compare_head(planned.out.view, planned.lse.view(), dense.out.view, dense.lse.view(), 0, 0);
  EXPECT_NEAR(accuracy.recall_mean, 0.5, kFp32Tolerance);
  EXPECT_NEAR(accuracy.recall_min, 0.5, kFp32Tolerance);
}

TEST(OutputError, IdenticalOutputsHaveNoError) {
  Random random;
  SCOPED_TRACE(random.trace());
  const int64_t q_len = test::random_length(random, 5, 50);
  const Tensor out = random.normal_tensor(DType::kBFloat16, {2, q_len, 3, kHeadDim});
  const Tensor lse = random.normal_tensor(DType::kFloat32, {2, 3, q_len});
  const HeadAccuracy accuracy = compare_head(out.view(), lse.view(), out.view(), lse.view(), 1, 2);
  EXPECT_EQ(accuracy.output_error, 0.0);
  EXPECT_EQ(accuracy.nmse, 0.0);
  EXPECT_EQ(accuracy.recall_mean, 1.0);
  EXPECT_EQ(accuracy.recall_min, 1.0);
}

TEST(OutputError, ScaledHeadHasItsRelativeErrorAndOthersNone) {
  Random random;
  SCOPED_TRACE(random.trace());
  const int64_t q_len = test::random_length(random, 5, 50);
  constexpr int64_t kBatch = 2, kHeads = 3;
  const Tensor dense = random.normal_tensor(DType::kFloat32, {kBatch, q_len, kHeads, kHeadDim});
  const Tensor lse = random.normal_tensor(DType::kFloat32, {kBatch, kHeads, q_len});
  Tensor plan = dense;
  // O_plan = (1 + epsilon) O_dense on (batch 1, head 2): output error epsilon, NMSE epsilon^2.
  const double epsilon = random.uniform(0.01, 0.2);
  for (int64_t i = 0; i < q_len; ++i) {
    for (int64_t d = 0; d < kHeadDim; ++d) {
      float& value = plan.data_as<float>()[((1 * q_len + i) * kHeads + 2) * kHeadDim + d];
      value = static_cast<float>(value * (1.0 + epsilon));
    }
  }
  const HeadAccuracy perturbed =
      compare_head(plan.view(), lse.view(), dense.view(), lse.view(), 1, 2);
  EXPECT_NEAR(perturbed.output_error, epsilon, kFp32Tolerance);
  EXPECT_NEAR(perturbed.nmse, epsilon * epsilon, kFp32Tolerance);
  for (int64_t h = 0; h < kHeads; ++h) {
    const HeadAccuracy untouched =
        compare_head(plan.view(), lse.view(), dense.view(), lse.view(), 0, h);
    EXPECT_EQ(untouched.output_error, 0.0) << "head " << h;
  }
}

TEST(Recall, RowsWithoutKeysAreExcluded) {
  constexpr int64_t kRows = 4;
  Tensor plan_lse(DType::kFloat32, {1, 1, kRows});
  Tensor dense_lse(DType::kFloat32, {1, 1, kRows});
  // Row 0: no keys anywhere. Row 1: the plan misses everything. Rows 2, 3: recall 1 and e^-1.
  const float plan_values[kRows] = {-INFINITY, -INFINITY, 1.5f, 2.0f};
  const float dense_values[kRows] = {-INFINITY, 0.5f, 1.5f, 3.0f};
  std::copy(plan_values, plan_values + kRows, plan_lse.data_as<float>());
  std::copy(dense_values, dense_values + kRows, dense_lse.data_as<float>());
  const std::vector<double> recall = row_recall(plan_lse.view(), dense_lse.view(), 0, 0);
  EXPECT_TRUE(std::isnan(recall[0]));
  EXPECT_EQ(recall[1], 0.0);
  EXPECT_EQ(recall[2], 1.0);
  EXPECT_NEAR(recall[3], std::exp(-1.0), 1e-12);
  const Tensor out(DType::kFloat32, {1, kRows, 1, kHeadDim});
  const HeadAccuracy accuracy =
      compare_head(out.view(), plan_lse.view(), out.view(), dense_lse.view(), 0, 0);
  EXPECT_NEAR(accuracy.recall_mean, (0.0 + 1.0 + std::exp(-1.0)) / 3.0, 1e-12);
  EXPECT_EQ(accuracy.recall_min, 0.0);
}

// --- Density -----------------------------------------------------------------------------------

TEST(Density, CausalPairCountMatchesEnumeration) {
  Random random;
  SCOPED_TRACE(random.trace());
  for (int trial = 0; trial < 20; ++trial) {
    const int64_t q_len = random.uniform_int(0, 70);
    const int64_t kv_len = random.uniform_int(0, 90);
    int64_t causal = 0;
    for (int64_t i = 0; i < q_len; ++i) {
      for (int64_t j = 0; j < kv_len; ++j) causal += j <= i + kv_len - q_len ? 1 : 0;
    }
    EXPECT_EQ(causal_pair_count(q_len, kv_len), causal) << q_len << " x " << kv_len;
    EXPECT_EQ(causal_pair_count(q_len, kv_len, false), q_len * kv_len);
  }
}

TEST(Density, DensePlanIsOneAndDiagonalPlanIsOneKeyPerRow) {
  Random random;
  SCOPED_TRACE(random.trace());
  const int64_t q_len = test::random_length(random, 20, 150);
  const int64_t kv_len = q_len + random.uniform_int(0, 50);
  const Plan dense = test::dense_plan(2, q_len, kv_len, true);
  EXPECT_DOUBLE_EQ(plan_density(dense, 1), 1.0);
  MaskPolicy diagonal;
  diagonal.window = 1;  // only the aligned key itself
  const Plan diagonal_plan = custom_plan(
      2, q_len, kv_len, diagonal, [&](PlanBuilder& builder) { builder.add_span(0, kv_len); });
  EXPECT_DOUBLE_EQ(
      plan_density(diagonal_plan, 0),
      static_cast<double>(q_len) / static_cast<double>(causal_pair_count(q_len, kv_len)));
}

TEST(Density, FlopsCountFourPerPairAndDimension) {
  EXPECT_DOUBLE_EQ(attention_flops(1000, 128), 4.0 * 1000 * 128);
  EXPECT_DOUBLE_EQ(attention_flops(0, 64), 0.0);
}

TEST(Density, SampleRowsSpreadEvenlyAndEndAtTheLastRow) {
  Random random;
  SCOPED_TRACE(random.trace());
  const int64_t q_len = test::random_length(random, 10, 5000);
  const int64_t count = random.uniform_int(1, q_len);
  const std::vector<int64_t> rows = sample_rows(q_len, count);
  ASSERT_EQ(static_cast<int64_t>(rows.size()), count);
  EXPECT_EQ(rows.back(), q_len - 1);
  EXPECT_GE(rows.front(), 0);
  EXPECT_TRUE(std::adjacent_find(rows.begin(), rows.end(), std::greater_equal<>()) == rows.end());
  // Evenly: gaps differ by at most one row.
  std::vector<int64_t> gaps;
  for (std::size_t n = 1; n < rows.size(); ++n) gaps.push_back(rows[n] - rows[n - 1]);
  if (!gaps.empty())
    EXPECT_LE(
        *std::max_element(gaps.begin(), gaps.end()) - *std::min_element(gaps.begin(), gaps.end()),
        1);
  EXPECT_EQ(sample_rows(q_len, q_len + 7).size(), static_cast<std::size_t>(q_len));
  EXPECT_TRUE(sample_rows(q_len, 0).empty());
}

// --- Oracle density ----------------------------------------------------------------------------

TEST(OracleDensity, DominantKeyNeedsOneKeyPerRow) {
  Random random;
  SCOPED_TRACE(random.trace());
  const int64_t q_len = test::random_length(random, 20, 150);
  const int64_t kv_len = q_len + random.uniform_int(0, 50);
  // Queries point along dimension 0, where only key 0 has a component (60 / sqrt(24) ~ 12 above
  // the others' logits, which are products of a 0.1-sized query noise and unit key noise).
  constexpr float kDominant = 60.0f;
  constexpr float kQueryNoise = 0.1f;
  Tensor q(DType::kFloat32, {1, q_len, 1, kHeadDim});
  Tensor k(DType::kFloat32, {1, kv_len, 1, kHeadDim});
  for (int64_t i = 0; i < q_len; ++i) {
    set(q, {0, i, 0, 0}, 1.0f);
    for (int64_t d = 1; d < kHeadDim; ++d) set(q, {0, i, 0, d}, random.normal(0.0f, kQueryNoise));
  }
  set(k, {0, 0, 0, 0}, kDominant);
  for (int64_t j = 1; j < kv_len; ++j) {
    for (int64_t d = 1; d < kHeadDim; ++d) set(k, {0, j, 0, d}, random.normal());
  }
  const OracleDensity oracle = oracle_density(q.view(), k.view(), 0, 0, 0.95);
  EXPECT_EQ(oracle.rows_sampled, q_len);
  EXPECT_DOUBLE_EQ(oracle.density, static_cast<double>(q_len) /
                                       static_cast<double>(causal_pair_count(q_len, kv_len)));
}

TEST(OracleDensity, UniformLogitsNeedTheRecallShareOfEachRow) {
  Random random;
  SCOPED_TRACE(random.trace());
  const int64_t q_len = test::random_length(random, 20, 200);
  const int64_t kv_len = q_len + random.uniform_int(0, 50);
  const Tensor q = random.normal_tensor(DType::kFloat32, {1, q_len, 2, kHeadDim});
  const Tensor k(DType::kFloat32, {1, kv_len, 1, kHeadDim});  // zero keys: uniform softmax
  // recall = numerator / 10: a row of n keys needs ceil(numerator * n / 10) of them.
  constexpr int64_t kDenominator = 10;
  for (const int64_t numerator : {5, 9, 10}) {
    const double recall = static_cast<double>(numerator) / kDenominator;
    const std::vector<int64_t> rows = sample_rows(q_len, random.uniform_int(1, q_len));
    int64_t needed = 0, causal = 0;
    for (int64_t row : rows) {
      const int64_t n = row + kv_len - q_len + 1;
      needed += (numerator * n + kDenominator - 1) / kDenominator;
      causal += n;
    }
    const OracleDensity oracle = oracle_density(q.view(), k.view(), 0, 1, recall, rows);
    EXPECT_EQ(oracle.rows_sampled, static_cast<int64_t>(rows.size()));
    EXPECT_DOUBLE_EQ(oracle.density, static_cast<double>(needed) / static_cast<double>(causal))
        << "recall " << recall;
    EXPECT_NEAR(oracle.density, recall, 1.0 / static_cast<double>(causal) * rows.size());
  }
}

// Keys needed per row by brute force: probabilities in fp64, sorted, summed until they reach the
// recall target.
int64_t brute_force_keys(const TensorView& q, const TensorView& k, int64_t row, int64_t head,
                         int64_t kv_head, double recall) {
  const int64_t q_len = q.shape[1], kv_len = k.shape[1], dim = q.shape[3];
  const int64_t visible = std::clamp<int64_t>(row + kv_len - q_len + 1, 0, kv_len);
  std::vector<double> logits(static_cast<std::size_t>(visible));
  for (int64_t j = 0; j < visible; ++j) {
    double dot = 0.0;
    for (int64_t d = 0; d < dim; ++d) {
      dot += load_float(q, row * q.strides[1] + head * q.strides[2] + d * q.strides[3]) *
             load_float(k, j * k.strides[1] + kv_head * k.strides[2] + d * k.strides[3]);
    }
    logits[j] = dot / std::sqrt(static_cast<double>(dim));
  }
  const double top = *std::max_element(logits.begin(), logits.end());
  double total = 0.0;
  for (double& value : logits) total += (value = std::exp(value - top));
  std::sort(logits.rbegin(), logits.rend());
  double mass = 0.0;
  for (int64_t n = 0; n < visible; ++n) {
    if ((mass += logits[n]) >= recall * total) return n + 1;
  }
  return visible;
}

TEST(OracleDensity, MatchesBruteForceWithGqaAndStrides) {
  Random random;
  SCOPED_TRACE(random.trace());
  const int64_t q_len = test::random_length(random, 30, 120);
  const int64_t kv_len = q_len + random.uniform_int(1, 60);
  constexpr int64_t kHeads = 8, kKvHeads = 2;
  const Operand q =
      test::random_operand(random, DType::kBFloat16, 1, q_len, kHeads, kHeadDim, true);
  const Operand k =
      test::random_operand(random, DType::kBFloat16, 1, kv_len, kKvHeads, kHeadDim, true);
  const int64_t head = random.uniform_int(0, kHeads - 1);
  const int64_t kv_head = head / (kHeads / kKvHeads);
  const std::vector<int64_t> rows = sample_rows(q_len, random.uniform_int(5, q_len));
  double previous = 0.0;
  for (const double recall : {0.5, 0.9, 0.99}) {
    int64_t needed = 0, causal = 0;
    for (int64_t row : rows) {
      needed += brute_force_keys(q.view, k.view, row, head, kv_head, recall);
      causal += row + kv_len - q_len + 1;
    }
    const OracleDensity oracle = oracle_density(q.view, k.view, 0, head, recall, rows, 0.0f, 3);
    // fp32 scores may move a key across the recall boundary on a row or two.
    EXPECT_NEAR(oracle.density, static_cast<double>(needed) / causal, 2.0 / causal) << recall;
    EXPECT_GE(oracle.density, previous) << "density must grow with the recall target";
    previous = oracle.density;
  }
  EXPECT_LE(previous, 1.0);
}

TEST(OracleDensity, WorksAt128KKeys) {
  Random random;
  SCOPED_TRACE(random.trace());
  constexpr int64_t kLongContext = 131072 - 13;
  constexpr int64_t kQueries = 257;
  constexpr int64_t kSampled = 16;
  constexpr int64_t kDim = 64;
  const Tensor q = random.normal_tensor(DType::kBFloat16, {1, kQueries, 1, kDim});
  const Tensor k = random.normal_tensor(DType::kBFloat16, {1, kLongContext, 1, kDim});
  const std::vector<int64_t> rows = sample_rows(kQueries, kSampled);
  const OracleDensity oracle = oracle_density(q.view(), k.view(), 0, 0, 0.9, rows);
  EXPECT_EQ(oracle.rows_sampled, kSampled);
  // Check one row exactly; with unit-variance logits at this length the answer is far from 0 and 1.
  const std::vector<int64_t> last_row = {rows.back()};
  const OracleDensity single = oracle_density(q.view(), k.view(), 0, 0, 0.9, last_row);
  const int64_t needed = brute_force_keys(q.view(), k.view(), rows.back(), 0, 0, 0.9);
  EXPECT_NEAR(single.density, static_cast<double>(needed) / kLongContext, 2.0 / kLongContext);
  EXPECT_GT(oracle.density, 0.1);
  EXPECT_LT(oracle.density, 0.95);
}

}  // namespace
}  // namespace mmsparse
