// LSE merge: partial results over disjoint key sets combine into the result over their union.

#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "common/compare.h"
#include "common/random.h"
#include "cpu/attention_helpers.h"
#include "mmsparse/attention.h"
#include "mmsparse/plan.h"

namespace mmsparse {
namespace {

using test::compare;
using test::Operand;
using test::Random;

constexpr int64_t kBatch = 2;
constexpr int64_t kKvHeads = 2;
constexpr int64_t kHeadDim = 40;
// Merging fp32 partials reorders fp32 sums over O(100) keys: a few units of fp32 roundoff.
constexpr double kFp32Tolerance = 2e-6;
// LSE ~ log(kv_len) + max score ~ 10: a few fp32 ulps.
constexpr double kLseTolerance = 2e-5;

// Splits dense causal attention into two plans with disjoint keys: per tile, the causal key range
// is cut into random pieces, each going to one plan as a span, or as columns when short.
std::array<Plan, 2> split_dense(Random& random, int64_t heads, int64_t q_len, int64_t kv_len) {
  constexpr int64_t kTileRows = 32;
  constexpr int64_t kMaxPiece = 20;
  constexpr int64_t kColumnPiece = 3;  // pieces this short become gathered columns
  PlanShape shape;
  shape.heads = heads;
  shape.q_len = q_len;
  shape.kv_len = kv_len;
  shape.tile_rows = kTileRows;
  std::array<PlanBuilder, 2> builders{PlanBuilder(shape), PlanBuilder(shape)};
  for (int64_t head = 0; head < heads; ++head) {
    for (PlanBuilder& builder : builders) builder.begin_head();
    for (int64_t begin = 0; begin < q_len; begin += kTileRows) {
      const int64_t end = std::min(q_len, begin + kTileRows);
      for (PlanBuilder& builder : builders) builder.begin_tile(begin, end);
      const int64_t last_key = std::clamp<int64_t>(end + kv_len - q_len, 0, kv_len);
      for (int64_t key = 0; key < last_key;) {
        const int64_t piece_end = std::min(last_key, key + random.uniform_int(1, kMaxPiece));
        PlanBuilder& owner = builders[random.uniform_int(0, 1)];
        if (piece_end - key <= kColumnPiece) {
          for (int64_t column = key; column < piece_end; ++column) owner.add_column(column);
        } else {
          owner.add_span(key, piece_end);
        }
        key = piece_end;
      }
    }
  }
  return {builders[0].finish(), builders[1].finish()};
}

struct Result {
  Operand out;  // [batch, q_len, heads, head_dim]
  Tensor lse;   // [batch, heads, q_len]
};

Result planned(const Plan& plan, const Operand& q, const Operand& k, const Operand& v, DType dtype,
               bool strided_out) {
  Result result{
      test::poisoned_output(dtype, kBatch, q.view.shape[1], q.view.shape[2], kHeadDim, strided_out),
      test::poisoned_lse(kBatch, q.view.shape[2], q.view.shape[1])};
  attention_planned(plan, q.view, k.view, v.view, result.out.view, result.lse.view());
  return result;
}

TEST(MergePartials, DisjointPlansMergeIntoTheirUnionTheirPassesAndDense) {
  Random random;
  SCOPED_TRACE(random.trace());
  for (const int64_t group : {1, 7}) {
    SCOPED_TRACE("group=" + std::to_string(group));
    const int64_t heads = kKvHeads * group;
    const int64_t q_len = test::random_length(random, 40, 130);
    const int64_t kv_len = q_len + random.uniform_int(1, 40);
    const Operand q =
        test::random_operand(random, DType::kFloat32, kBatch, q_len, heads, kHeadDim, true);
    const Operand k =
        test::random_operand(random, DType::kFloat32, kBatch, kv_len, kKvHeads, kHeadDim, true);
    const Operand v =
        test::random_operand(random, DType::kFloat32, kBatch, kv_len, kKvHeads, kHeadDim, false);
    const auto [first, second] = split_dense(random, heads, q_len, kv_len);
    const Result a = planned(first, q, k, v, DType::kFloat32, true);
    const Result b = planned(second, q, k, v, DType::kFloat32, false);

    const Operand merged =
        test::poisoned_output(DType::kFloat32, kBatch, q_len, heads, kHeadDim, true);
    const Tensor merged_lse = test::poisoned_lse(kBatch, heads, q_len);
    const std::vector<TensorView> outs = {a.out.view, b.out.view};
    const std::vector<TensorView> lses = {a.lse.view(), b.lse.view()};
    merge_partials(outs, lses, merged.view, merged_lse.view());

    const Result whole =
        planned(test::dense_plan(heads, q_len, kv_len, true), q, k, v, DType::kFloat32, false);
    // The same parts as one plan of two passes: the reference computes their union directly.
    Plan two_passes = first;
    add_pass(two_passes, second);
    const Result passes = planned(two_passes, q, k, v, DType::kFloat32, false);
    const Operand dense =
        test::poisoned_output(DType::kFloat32, kBatch, q_len, heads, kHeadDim, false);
    const Tensor dense_lse = test::poisoned_lse(kBatch, heads, q_len);
    attention_dense(q.view, k.view, v.view, dense.view, dense_lse.view());

    for (const auto& [name, out, lse] :
         {std::tuple{"union plan", whole.out.view, whole.lse.view()},
          std::tuple{"two passes", passes.out.view, passes.lse.view()},
          std::tuple{"dense", dense.view, dense_lse.view()}}) {
      SCOPED_TRACE(name);
      const test::Difference out_difference = compare(merged.view, out);
      EXPECT_LE(out_difference.max_abs, kFp32Tolerance) << out_difference;
      const test::Difference lse_difference = compare(merged_lse.view(), lse);
      EXPECT_LE(lse_difference.max_abs, kLseTolerance) << lse_difference;
    }
  }
}

TEST(MergePartials, EmptyPartContributesNothingWhateverItsOutput) {
  Random random;
  SCOPED_TRACE(random.trace());
  const int64_t q_len = test::random_length(random, 10, 60);
  const int64_t heads = 3;
  const Tensor out_a = random.normal_tensor(DType::kFloat32, {kBatch, q_len, heads, kHeadDim});
  const Tensor lse_a = random.normal_tensor(DType::kFloat32, {kBatch, heads, q_len}, 3.0f);
  // A part without keys: LSE -inf, output garbage (NaN) that must not leak into the result.
  const Operand out_empty =
      test::poisoned_output(DType::kFloat32, kBatch, q_len, heads, kHeadDim, false);
  Tensor lse_empty(DType::kFloat32, {kBatch, heads, q_len});
  std::fill(lse_empty.data_as<float>(), lse_empty.data_as<float>() + lse_empty.numel(), -INFINITY);

  const Operand merged =
      test::poisoned_output(DType::kFloat32, kBatch, q_len, heads, kHeadDim, true);
  const Tensor merged_lse = test::poisoned_lse(kBatch, heads, q_len);
  const std::vector<TensorView> outs = {out_empty.view, out_a.view()};
  const std::vector<TensorView> lses = {lse_empty.view(), lse_a.view()};
  merge_partials(outs, lses, merged.view, merged_lse.view());
  EXPECT_EQ(compare(merged.view, out_a.view()).max_abs, 0.0);
  EXPECT_EQ(compare(merged_lse.view(), lse_a.view()).max_abs, 0.0);
}

TEST(MergePartials, AllEmptyRowsGiveZeroOutputAndNegativeInfinityLse) {
  Random random;
  SCOPED_TRACE(random.trace());
  const int64_t q_len = test::random_length(random, 3, 50);
  constexpr int64_t kHeads = 2;
  constexpr int kParts = 3;
  std::vector<Operand> parts;
  std::vector<Tensor> part_lses;
  std::vector<TensorView> outs, lses;
  for (int p = 0; p < kParts; ++p) {
    parts.push_back(
        test::poisoned_output(DType::kBFloat16, 1, q_len, kHeads, kHeadDim, p % 2 == 1));
    part_lses.emplace_back(DType::kFloat32, std::vector<int64_t>{1, kHeads, q_len});
    std::fill(part_lses.back().data_as<float>(),
              part_lses.back().data_as<float>() + part_lses.back().numel(), -INFINITY);
  }
  // Row 0 of head 0 does have keys in part 1: the merge must keep that row and only that row.
  constexpr float kRowLse = 2.5f;
  part_lses[1].data_as<float>()[0] = kRowLse;
  for (int64_t d = 0; d < kHeadDim; ++d)
    store_float(parts[1].view, d * parts[1].view.strides[3], 1.0f);
  for (int p = 0; p < kParts; ++p) {
    outs.push_back(parts[p].view);
    lses.push_back(part_lses[p].view());
  }
  const Operand merged = test::poisoned_output(DType::kBFloat16, 1, q_len, kHeads, kHeadDim, false);
  const Tensor merged_lse = test::poisoned_lse(1, kHeads, q_len);
  merge_partials(outs, lses, merged.view, merged_lse.view());
  const std::vector<double> out_values = test::to_doubles(merged.view);
  const std::vector<double> lse_values = test::to_doubles(merged_lse.view());
  for (std::size_t n = 0; n < out_values.size(); ++n) {
    const bool kept_row = n < static_cast<std::size_t>(kHeadDim);  // row 0, head 0
    ASSERT_EQ(out_values[n], kept_row ? 1.0 : 0.0) << "element " << n;
  }
  for (std::size_t n = 0; n < lse_values.size(); ++n) {
    ASSERT_EQ(lse_values[n], n == 0 ? kRowLse : test::kNegativeInfinity) << "row " << n;
  }
}

TEST(MergePartials, LargeLseDoesNotOverflowAndWeighsPartsByMass) {
  Random random;
  SCOPED_TRACE(random.trace());
  const int64_t q_len = test::random_length(random, 2, 20);
  // exp(1000) overflows fp32 and fp64: a safe merge works relative to the largest LSE.
  const double base = 1000.0 + random.uniform(-1.0, 1.0);
  const Tensor out_a = random.normal_tensor(DType::kFloat32, {1, q_len, 1, kHeadDim});
  const Tensor out_b = random.normal_tensor(DType::kFloat32, {1, q_len, 1, kHeadDim});
  Tensor lse_a(DType::kFloat32, {1, 1, q_len});
  Tensor lse_b(DType::kFloat32, {1, 1, q_len});
  for (int64_t i = 0; i < q_len; ++i) {
    lse_a.data_as<float>()[i] = static_cast<float>(base);
    lse_b.data_as<float>()[i] = static_cast<float>(base + std::log(3.0));  // three times a's mass
  }
  const Operand merged = test::poisoned_output(DType::kFloat32, 1, q_len, 1, kHeadDim, false);
  const Tensor merged_lse = test::poisoned_lse(1, 1, q_len);
  const std::vector<TensorView> outs = {out_a.view(), out_b.view()};
  const std::vector<TensorView> lses = {lse_a.view(), lse_b.view()};
  merge_partials(outs, lses, merged.view, merged_lse.view());

  std::vector<double> expected_out;
  std::vector<double> expected_lse;
  const std::vector<double> a = test::to_doubles(out_a.view());
  const std::vector<double> b = test::to_doubles(out_b.view());
  for (std::size_t n = 0; n < a.size(); ++n) expected_out.push_back(0.25 * a[n] + 0.75 * b[n]);
  for (int64_t i = 0; i < q_len; ++i) {
    expected_lse.push_back(static_cast<double>(lse_a.data_as<float>()[i]) + std::log(4.0));
  }
  // fp32 LSE near 1000 carries an ulp of 6e-5; the weights inherit that relative error.
  constexpr double kLargeLseTolerance = 2e-4;
  EXPECT_LE(compare(merged.view, expected_out).max_abs, kLargeLseTolerance);
  EXPECT_LE(compare(merged_lse.view(), expected_lse).max_abs, kLargeLseTolerance);
}

TEST(MergePartials, Fp32PartsMergeIntoBf16Output) {
  Random random;
  SCOPED_TRACE(random.trace());
  const int64_t q_len = test::random_length(random, 5, 40);
  const Tensor out_a = random.normal_tensor(DType::kFloat32, {kBatch, q_len, 2, kHeadDim});
  const Tensor out_b = random.normal_tensor(DType::kFloat32, {kBatch, q_len, 2, kHeadDim});
  const Tensor lse_a = random.normal_tensor(DType::kFloat32, {kBatch, 2, q_len});
  const Tensor lse_b = random.normal_tensor(DType::kFloat32, {kBatch, 2, q_len});
  const std::vector<TensorView> outs = {out_a.view(), out_b.view()};
  const std::vector<TensorView> lses = {lse_a.view(), lse_b.view()};
  const Operand fp32 = test::poisoned_output(DType::kFloat32, kBatch, q_len, 2, kHeadDim, false);
  const Operand bf16 = test::poisoned_output(DType::kBFloat16, kBatch, q_len, 2, kHeadDim, true);
  const Tensor lse = test::poisoned_lse(kBatch, 2, q_len);
  merge_partials(outs, lses, fp32.view, lse.view());
  merge_partials(outs, lses, bf16.view, lse.view());
  // bf16 keeps 8 bits: rounding to nearest is within half of 2^-7 relative.
  const std::vector<double> reference = test::to_doubles(fp32.view);
  const std::vector<double> rounded = test::to_doubles(bf16.view);
  for (std::size_t n = 0; n < reference.size(); ++n) {
    ASSERT_LE(std::abs(rounded[n] - reference[n]), std::ldexp(std::abs(reference[n]), -8))
        << "element " << n;
  }
}

}  // namespace
}  // namespace mmsparse
