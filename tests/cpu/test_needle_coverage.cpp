// Needle coverage: the structural count on hand-built plans whose answers are known, the mass
// measure against a brute-force softmax, and a needle task on the synthetic workload.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <numeric>
#include <vector>

#include "common/errors.h"
#include "common/random.h"
#include "cpu/attention_helpers.h"
#include "mmsparse/attention.h"
#include "mmsparse/tools/metrics.h"
#include "mmsparse/patterns.h"
#include "mmsparse/plan.h"
#include "mmsparse/tools/workload.h"

namespace mmsparse {
namespace {

constexpr int64_t kLength = 128;
constexpr int64_t kTileRows = 64;
// The question: the last rows of the sequence, all in the second tile.
constexpr int64_t kQuestionBegin = 100;
const std::vector<int64_t> kNeedleKeys = {10, 50};

std::vector<int64_t> rows_from(int64_t begin, int64_t end) {
  std::vector<int64_t> rows(static_cast<std::size_t>(end - begin));
  std::iota(rows.begin(), rows.end(), begin);
  return rows;
}

// One head, two 64-row tiles; `second_tile` adds the keys of the tile that holds the question.
Plan two_tile_plan(const MaskPolicy& second_mask,
                   const std::function<void(PlanBuilder&)>& second_tile, int64_t heads = 1) {
  PlanShape shape;
  shape.heads = heads;
  shape.q_len = kLength;
  shape.kv_len = kLength;
  shape.tile_rows = kTileRows;
  PlanBuilder builder(shape);
  for (int64_t head = 0; head < heads; ++head) {
    builder.begin_head();
    builder.begin_tile(0, kTileRows);
    builder.add_span(0, kTileRows);
    builder.begin_tile(kTileRows, kLength, second_mask);
    second_tile(builder);
  }
  return builder.finish();
}

TEST(NeedleCoverage, CountsNeedlesEveryQueryingRowComputes) {
  const std::vector<int64_t> rows = rows_from(kQuestionBegin, kLength);
  const Plan dense = two_tile_plan({}, [](PlanBuilder& b) { b.add_span(0, kLength); });
  const NeedleCoverage all = needle_coverage(dense, 0, kNeedleKeys, rows);
  EXPECT_EQ(all.needles, 2);
  EXPECT_EQ(all.covered, 2);
  EXPECT_EQ(all.needle_covered, (std::vector<uint8_t>{1, 1}));

  // A local band from key 60 on plus the gathered column 10: needle 50 is missed.
  const Plan column = two_tile_plan({}, [](PlanBuilder& b) {
    b.add_span(60, kLength);
    b.add_column(10);
  });
  const NeedleCoverage one = needle_coverage(column, 0, kNeedleKeys, rows);
  EXPECT_EQ(one.covered, 1);
  EXPECT_EQ(one.needle_covered, (std::vector<uint8_t>{1, 0}));
  // Without dense inputs there is no mass measure.
  EXPECT_TRUE(std::isnan(one.mass_kept));
  EXPECT_TRUE(std::isnan(one.needle_mass_kept[0]));
}

TEST(NeedleCoverage, NeedsEveryQueryingRowNotJustSome) {
  // A window of 60 keys keeps needle 50 for rows up to 109 only: rows 100..109 compute the pair,
  // rows 110..127 do not, so it is not covered; needle 10 is among the 16 sink keys of every row.
  MaskPolicy window;
  window.window = 60;
  window.window_sink = 16;
  const Plan plan = two_tile_plan(window, [](PlanBuilder& b) { b.add_span(0, kLength); });
  const NeedleCoverage coverage =
      needle_coverage(plan, 0, kNeedleKeys, rows_from(kQuestionBegin, kLength));
  EXPECT_EQ(coverage.needle_covered, (std::vector<uint8_t>{1, 0}));
  // The rows that do compute it alone would count it covered.
  EXPECT_EQ(needle_coverage(plan, 0, kNeedleKeys, rows_from(kQuestionBegin, 110)).covered, 2);
}

TEST(NeedleCoverage, RowsInNoTileComputeNothing) {
  PlanShape shape;
  shape.q_len = kLength;
  shape.kv_len = kLength;
  PlanBuilder builder(shape);
  builder.begin_head();
  builder.begin_tile(0, kTileRows);  // the question's rows are in no tile
  builder.add_span(0, kTileRows);
  const NeedleCoverage coverage =
      needle_coverage(builder.finish(), 0, kNeedleKeys, rows_from(kQuestionBegin, kLength));
  EXPECT_EQ(coverage.covered, 0);
}

// The mass measure from first principles: softmax over every causal key in double precision.
struct BruteForceMass {
  double kept = 0.0;   // over all needles and rows
  double dense = 0.0;
  std::vector<double> needle_kept, needle_dense;
};

BruteForceMass brute_force_mass(const Plan& plan, int64_t head, const TensorView& q,
                                const TensorView& k, const std::vector<int64_t>& needles,
                                const std::vector<int64_t>& rows) {
  const std::vector<uint8_t> mask = materialize_mask(plan, head);
  const int64_t head_dim = q.shape[3];
  const int64_t kv_head = head / (q.shape[2] / k.shape[2]);
  const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
  const auto score = [&](int64_t row, int64_t key) {
    double sum = 0.0;
    for (int64_t d = 0; d < head_dim; ++d) {
      sum += static_cast<double>(load_float(q, row * q.strides[1] + head * q.strides[2] +
                                                   d * q.strides[3])) *
             load_float(k, key * k.strides[1] + kv_head * k.strides[2] + d * k.strides[3]);
    }
    return scale * sum;
  };
  BruteForceMass mass;
  mass.needle_kept.assign(needles.size(), 0.0);
  mass.needle_dense.assign(needles.size(), 0.0);
  for (int64_t row : rows) {
    double total = 0.0;
    for (int64_t key = 0; key <= row; ++key) total += std::exp(score(row, key));
    for (std::size_t n = 0; n < needles.size(); ++n) {
      const double probability = std::exp(score(row, needles[n])) / total;
      mass.needle_dense[n] += probability;
      if (mask[row * plan.shape.kv_len + needles[n]] != 0) mass.needle_kept[n] += probability;
    }
  }
  for (std::size_t n = 0; n < needles.size(); ++n) {
    mass.kept += mass.needle_kept[n];
    mass.dense += mass.needle_dense[n];
  }
  return mass;
}

TEST(NeedleCoverage, MassMatchesBruteForceSoftmax) {
  test::Random random;
  SCOPED_TRACE(random.trace());
  constexpr int64_t kHeads = 2;
  constexpr int64_t kHeadDim = 16;
  // Rows 80..127, so that a window of 60 keeps needle 50 for some querying rows and not others.
  constexpr int64_t kFirstRow = 80;
  const Tensor q = random.normal_tensor(DType::kFloat32, {1, kLength, kHeads, kHeadDim});
  const Tensor k = random.normal_tensor(DType::kFloat32, {1, kLength, 1, kHeadDim});
  const Tensor v = random.normal_tensor(DType::kFloat32, {1, kLength, 1, kHeadDim});
  Tensor out(DType::kFloat32, {1, kLength, kHeads, kHeadDim});
  Tensor lse(DType::kFloat32, {1, kHeads, kLength});
  attention_dense(q.view(), k.view(), v.view(), out.view(), lse.view());

  MaskPolicy window;
  window.window = 60;
  const Plan plan = two_tile_plan(
      window, [](PlanBuilder& b) { b.add_span(0, kLength); }, kHeads);
  const std::vector<int64_t> rows = rows_from(kFirstRow, kLength);
  const NeedleDenseInputs dense{q.view(), k.view(), lse.view()};
  // fp32 scores and LSE against a double-precision softmax.
  constexpr double kTolerance = 1e-5;
  for (int64_t head = 0; head < kHeads; ++head) {
    const NeedleCoverage coverage = needle_coverage(plan, head, kNeedleKeys, rows, &dense);
    const BruteForceMass expected = brute_force_mass(plan, head, q.view(), k.view(), kNeedleKeys, rows);
    ASSERT_GT(expected.needle_kept[1], 0.0);  // the case is partial, not all or nothing
    ASSERT_LT(expected.needle_kept[1], expected.needle_dense[1]);
    EXPECT_EQ(coverage.needle_covered, (std::vector<uint8_t>{0, 0}));
    for (std::size_t n = 0; n < kNeedleKeys.size(); ++n) {
      EXPECT_NEAR(coverage.needle_mass_kept[n], expected.needle_kept[n] / expected.needle_dense[n],
                  kTolerance);
      EXPECT_NEAR(coverage.needle_dense_mass[n],
                  expected.needle_dense[n] / static_cast<double>(rows.size()), kTolerance);
    }
    EXPECT_NEAR(coverage.mass_kept, expected.kept / expected.dense, kTolerance);
    EXPECT_NEAR(coverage.dense_probability, expected.dense, kTolerance * expected.dense);
  }
}

TEST(NeedleCoverage, RejectsBadArguments) {
  using testing::expect_error;
  const Plan plan = two_tile_plan({}, [](PlanBuilder& b) { b.add_span(0, kLength); });
  const std::vector<int64_t> rows = rows_from(kQuestionBegin, kLength);
  expect_error([&] { needle_coverage(plan, 1, kNeedleKeys, rows); }, ErrorCode::kInvalidArgument,
               {"head_slot: expected in [0, 1)"});
  const std::vector<int64_t> late_needle = {kQuestionBegin + 1};
  expect_error([&] { needle_coverage(plan, 0, late_needle, rows); }, ErrorCode::kInvalidArgument,
               {"needle_keys: expected keys every querying row sees causally", "got 101"});
  const std::vector<int64_t> bad_row = {kLength};
  expect_error([&] { needle_coverage(plan, 0, kNeedleKeys, bad_row); },
               ErrorCode::kInvalidArgument, {"query_rows: expected in [0, 128)"});
  const Tensor q(DType::kFloat32, {1, kLength, 2, 8});  // two heads, the plan has one
  const Tensor k(DType::kFloat32, {1, kLength, 1, 8});
  const Tensor lse(DType::kFloat32, {1, 2, kLength});
  const NeedleDenseInputs dense{q.view(), k.view(), lse.view()};
  expect_error([&] { needle_coverage(plan, 0, kNeedleKeys, rows, &dense); },
               ErrorCode::kInvalidArgument, {"dense.q shape"});
}

// A needle task on the synthetic workload (SYNTHETIC): the final question reads the needles; dense
// covers them all, a narrow A-shape none, and the vertical head puts real weight on them.
TEST(NeedleCoverage, SyntheticNeedleTask) {
  WorkloadSpec spec;
  spec.seq_len = 1024;
  spec.q_heads = 4;  // one head of each behaviour: local, grid, vertical, dense
  spec.kv_heads = 2;
  spec.head_dim = 64;
  spec.needles = 4;
  const Workload workload = Workload::create(spec);
  ASSERT_EQ(workload.needles().size(), 4u);
  std::vector<int64_t> keys;
  for (const Needle& needle : workload.needles()) {
    keys.push_back(needle.key);
    EXPECT_LT(needle.key, workload.question_begin());
    EXPECT_EQ(needle.first_query, workload.question_begin());
  }
  const std::vector<int64_t> rows = rows_from(workload.question_begin(), workload.seq_len());
  ASSERT_FALSE(rows.empty());

  const Workload::Tensors tensors = workload.materialize(DType::kFloat32);
  const int64_t n = workload.seq_len();
  Tensor out(DType::kFloat32, {1, n, spec.q_heads, spec.head_dim});
  Tensor lse(DType::kFloat32, {1, spec.q_heads, n});
  attention_dense(tensors.q.view(), tensors.k.view(), tensors.v.view(), out.view(), lse.view());
  const NeedleDenseInputs dense{tensors.q.view(), tensors.k.view(), lse.view()};

  const PlanShape shape{1, spec.q_heads, n, n, kDefaultTileRows};
  const Plan dense_plan = build_plan(PatternSpec::parse("dense"), shape);
  const Plan narrow = build_plan(PatternSpec::parse("a-shape:sink=4,local=64"), shape);
  for (int64_t head = 0; head < spec.q_heads; ++head) {
    SCOPED_TRACE(head);
    const NeedleCoverage full = needle_coverage(dense_plan, head, keys, rows, &dense);
    EXPECT_EQ(full.covered, 4);
    EXPECT_NEAR(full.mass_kept, 1.0, 1e-12);
    const NeedleCoverage missed = needle_coverage(narrow, head, keys, rows, &dense);
    EXPECT_EQ(missed.covered, 0);
    EXPECT_EQ(missed.mass_kept, 0.0);
  }
  const int64_t vertical_head = 2;
  ASSERT_EQ(workload.behaviour(vertical_head), HeadBehaviour::kVertical);
  const NeedleCoverage read = needle_coverage(dense_plan, vertical_head, keys, rows, &dense);
  // The vertical head puts most of its weight on the needles (docs/workloads.md: > 50%).
  const double share = read.dense_probability / static_cast<double>(rows.size());
  EXPECT_GT(share, 0.5);
}

}  // namespace
}  // namespace mmsparse
