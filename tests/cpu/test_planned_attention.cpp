// Plan-driven attention on the CPU reference: dense plans equal dense attention, random plans
// equal the masked-dense oracle on an independently computed mask, and edge cases.

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

// --- Plan-driven attention ---------------------------------------------------------------------

using DensePlanParams = std::tuple<DType, int64_t /*group*/, bool /*causal*/>;

std::string dense_plan_name(const ::testing::TestParamInfo<DensePlanParams>& info) {
  const auto [dtype, group, causal] = info.param;
  return dtype_label(dtype) + "_gqa" + std::to_string(group) + (causal ? "_causal" : "_full");
}

class DensePlanAttention : public ::testing::TestWithParam<DensePlanParams> {};

// The dtype's unit roundoff: one rounding of the output may differ by this much, relatively.
double unit_roundoff(DType dtype) {
  switch (dtype) {
    case DType::kBFloat16:
      return std::ldexp(1.0, -8);
    case DType::kFloat16:
      return std::ldexp(1.0, -11);
    default:
      return std::ldexp(1.0, -24);
  }
}

TEST_P(DensePlanAttention, EqualsDense) {
  const auto [dtype, group, causal] = GetParam();
  Random random;
  SCOPED_TRACE(random.trace());
  const int64_t q_len = test::random_length(random, 70, 200);
  const int64_t kv_len = q_len + random.uniform_int(1, 60);
  const int64_t q_heads = kKvHeads * group;
  const Operand q = test::random_operand(random, dtype, kBatch, q_len, q_heads, kHeadDim, true);
  const Operand k = test::random_operand(random, dtype, kBatch, kv_len, kKvHeads, kHeadDim, false);
  const Operand v = test::random_operand(random, dtype, kBatch, kv_len, kKvHeads, kHeadDim, true);
  AttentionOptions options;
  options.causal = causal;

  const Operand dense_out = test::poisoned_output(dtype, kBatch, q_len, q_heads, kHeadDim, false);
  const Tensor dense_lse = test::poisoned_lse(kBatch, q_heads, q_len);
  attention_dense(q.view, k.view, v.view, dense_out.view, dense_lse.view(), options);

  const Plan plan = test::dense_plan(q_heads, q_len, kv_len, causal);
  const Operand plan_out = test::poisoned_output(dtype, kBatch, q_len, q_heads, kHeadDim, true);
  const Tensor plan_lse = test::poisoned_lse(kBatch, q_heads, q_len);
  attention_planned(plan, q.view, k.view, v.view, plan_out.view, plan_lse.view(), options);

  const test::Difference out_difference = compare(plan_out.view, dense_out.view);
  double max_output = 0.0;
  for (double value : test::to_doubles(dense_out.view))
    max_output = std::max(max_output, std::abs(value));
  EXPECT_LE(out_difference.max_abs, unit_roundoff(dtype) * max_output) << out_difference;
  const test::Difference lse_difference = compare(plan_lse.view(), dense_lse.view());
  EXPECT_LE(lse_difference.max_abs, kLseTolerance) << lse_difference;
}

INSTANTIATE_TEST_SUITE_P(AllDtypes, DensePlanAttention,
                         ::testing::Combine(::testing::Values(DType::kFloat32, DType::kFloat16,
                                                              DType::kBFloat16),
                                            ::testing::Values(1, 2, 4, 7), ::testing::Bool()),
                         dense_plan_name);

// A random plan built field by field: permuted query orders (grid runs, single-position runs,
// reversed segments), tiles of random length with gaps, shuffled spans at any alignment, columns,
// and random mask policies including windows with sinks, same-media and modality pairs.
class RandomPlan {
 public:
  RandomPlan(Random& random, PlanShape shape) : random_(random) {
    plan_.shape = shape;
    make_tokens();
    make_masks();
    plan_.head_run_offsets = {0};
    plan_.head_tile_offsets = {0};
    plan_.tile_span_offsets = {0};
    plan_.tile_strided_offsets = {0};
    plan_.tile_column_offsets = {0};
    for (int64_t slot = 0; slot < shape.head_slots(); ++slot) add_head();
  }
  const Plan& plan() const { return plan_; }

 private:
  void make_tokens() {
    constexpr int64_t kMaxSegment = 15;
    int32_t next_media = 0;
    for (int64_t begin = 0; begin < plan_.shape.kv_len;) {
      const int64_t length = random_.uniform_int(1, kMaxSegment);
      const auto modality = static_cast<uint8_t>(random_.uniform_int(0, kNumModalities - 1));
      // A media item may continue after an interruption (video frames around timestamp text).
      int32_t media = -1;
      if (modality != 0)
        media = next_media > 0 && random_.bernoulli(0.3) ? next_media - 1 : next_media++;
      for (int64_t key = begin; key < std::min(begin + length, plan_.shape.kv_len); ++key) {
        plan_.token_modality.push_back(modality);
        plan_.token_media.push_back(media);
      }
      begin += length;
    }
  }

  void make_masks() {
    constexpr int kPolicies = 5;
    plan_.masks.emplace_back();  // plain causal
    for (int p = 1; p < kPolicies; ++p) {
      MaskPolicy mask;
      mask.causal = random_.bernoulli(0.7);
      if (random_.bernoulli(0.5)) {
        mask.window = random_.uniform_int(1, std::max<int64_t>(1, plan_.shape.kv_len / 3));
        mask.window_sink = random_.uniform_int(0, 8);
      }
      mask.same_media = random_.bernoulli(0.3);
      mask.media_bidirectional = random_.bernoulli(0.25);
      if (random_.bernoulli(0.4)) {
        mask.modality_pairs = static_cast<uint16_t>(random_.uniform_int(1, kAllModalityPairs));
      }
      plan_.masks.push_back(mask);
    }
  }

  std::vector<QueryRun> random_order() {
    const int64_t q_len = plan_.shape.q_len;
    std::vector<QueryRun> runs;
    switch (random_.uniform_int(0, 3)) {
      case 0:
        break;   // identity
      case 1: {  // grid: phase-major with a stride
        const int64_t stride = random_.uniform_int(2, 5);
        for (int64_t phase = 0; phase < std::min(stride, q_len); ++phase) {
          runs.push_back({phase, (q_len - phase + stride - 1) / stride, stride});
        }
        break;
      }
      case 2: {  // an arbitrary permutation: runs of one
        std::vector<int64_t> positions(static_cast<std::size_t>(q_len));
        std::iota(positions.begin(), positions.end(), int64_t{0});
        std::shuffle(positions.begin(), positions.end(), random_.engine());
        for (int64_t position : positions) runs.push_back({position, 1, 1});
        break;
      }
      default: {  // segments in reverse order, as modality grouping might reorder them
        for (int64_t end = q_len; end > 0;) {
          const int64_t begin = std::max<int64_t>(0, end - random_.uniform_int(1, 30));
          runs.push_back({begin, end - begin, 1});
          end = begin;
        }
      }
    }
    return runs;
  }

  void add_head() {
    const std::vector<QueryRun> runs = random_order();
    plan_.runs.insert(plan_.runs.end(), runs.begin(), runs.end());
    plan_.head_run_offsets.push_back(static_cast<int64_t>(plan_.runs.size()));
    for (int64_t begin = 0; begin < plan_.shape.q_len;) {
      const int64_t end =
          std::min(plan_.shape.q_len, begin + random_.uniform_int(1, plan_.shape.tile_rows));
      if (!random_.bernoulli(0.1)) add_tile(begin, end);  // some rows stay in no tile
      begin = end;
    }
    plan_.head_tile_offsets.push_back(static_cast<int64_t>(plan_.tiles.size()));
  }

  void add_tile(int64_t begin, int64_t end) {
    constexpr int64_t kMaxPiece = 12;
    plan_.tiles.push_back({begin, end});
    plan_.tile_masks.push_back(
        static_cast<int32_t>(random_.uniform_int(0, plan_.masks.size() - 1)));
    constexpr int64_t kMaxStep = 5;
    std::vector<KeySpan> spans;
    std::vector<StridedSpan> strided;
    std::vector<int32_t> columns;
    // Every step-th key of [first, piece_end) from first, as a strided span when it has two.
    const auto add_lattice = [&](int64_t first, int64_t piece_end, int64_t step) {
      const int64_t last = first + (piece_end - 1 - first) / step * step;
      if (first < piece_end && last > first) {
        strided.push_back({static_cast<int32_t>(first), static_cast<int32_t>(last + 1),
                           static_cast<int32_t>(step)});
      }
    };
    for (int64_t key = random_.uniform_int(0, 5); key < plan_.shape.kv_len;) {
      const int64_t length = random_.uniform_int(1, kMaxPiece);
      const int64_t piece_end = std::min(plan_.shape.kv_len, key + length);
      const double kind = random_.uniform(0.0, 1.0);
      if (kind < 0.4) {
        spans.push_back({static_cast<int32_t>(key), static_cast<int32_t>(piece_end)});
      } else if (kind < 0.6) {
        // One or two residues of one step: their ranges overlap, their keys do not.
        const int64_t step = random_.uniform_int(2, kMaxStep);
        add_lattice(key, piece_end, step);
        if (random_.bernoulli(0.5)) add_lattice(key + 1, piece_end, step);
      } else {
        for (int64_t column = key; column < piece_end; ++column) {
          if (random_.bernoulli(0.3)) columns.push_back(static_cast<int32_t>(column));
        }
      }
      key = piece_end + random_.uniform_int(0, 3);
    }
    // Order inside a tile carries no meaning; shuffle so no backend may rely on it.
    std::shuffle(spans.begin(), spans.end(), random_.engine());
    std::shuffle(strided.begin(), strided.end(), random_.engine());
    std::shuffle(columns.begin(), columns.end(), random_.engine());
    plan_.spans.insert(plan_.spans.end(), spans.begin(), spans.end());
    plan_.strided_spans.insert(plan_.strided_spans.end(), strided.begin(), strided.end());
    plan_.tile_strided_offsets.push_back(static_cast<int64_t>(plan_.strided_spans.size()));
    plan_.columns.insert(plan_.columns.end(), columns.begin(), columns.end());
    plan_.tile_span_offsets.push_back(static_cast<int64_t>(plan_.spans.size()));
    plan_.tile_column_offsets.push_back(static_cast<int64_t>(plan_.columns.size()));
  }

  Random& random_;
  Plan plan_;
};

// The mask policy as the plan header defines it, written independently of the library.
bool policy_keeps(const Plan& plan, const MaskPolicy& mask, int64_t aligned, int64_t key) {
  const bool in_window = mask.window == 0 || aligned - key < mask.window || key < mask.window_sink;
  const bool positions = !(mask.causal && key > aligned) && in_window;
  const bool needs_tokens =
      mask.same_media || mask.media_bidirectional || mask.modality_pairs != kAllModalityPairs;
  if (!needs_tokens) return positions;
  if (aligned < 0) return false;  // a query before every key has no token to compare
  const int32_t media = plan.token_media[aligned];
  const bool one_media = media != -1 && media == plan.token_media[key];
  // Bidirectional media: pairs inside one media item whatever causal and the window say.
  if (!positions && !(mask.media_bidirectional && one_media)) return false;
  if (mask.same_media && !one_media) return false;
  const int bit = plan.token_modality[aligned] * kNumModalities + plan.token_modality[key];
  return (mask.modality_pairs >> bit) & 1;
}

// The boolean mask [plan batch, heads, q_len, kv_len] of a plan, from its fields.
std::vector<uint8_t> independent_mask(const Plan& plan) {
  const PlanShape& shape = plan.shape;
  std::vector<uint8_t> mask(shape.head_slots() * shape.q_len * shape.kv_len, 0);
  for (int64_t slot = 0; slot < shape.head_slots(); ++slot) {
    std::vector<int64_t> order;
    for (int64_t r = plan.head_run_offsets[slot]; r < plan.head_run_offsets[slot + 1]; ++r) {
      for (int64_t n = 0; n < plan.runs[r].count; ++n) {
        order.push_back(plan.runs[r].start + n * plan.runs[r].step);
      }
    }
    if (order.empty()) {
      order.resize(shape.q_len);
      std::iota(order.begin(), order.end(), int64_t{0});
    }
    for (int64_t t = plan.head_tile_offsets[slot]; t < plan.head_tile_offsets[slot + 1]; ++t) {
      const std::vector<int64_t> keys = testing::listed_tile_keys(plan, t);
      const MaskPolicy& policy = plan.masks[plan.tile_masks[t]];
      for (int64_t i = plan.tiles[t].begin; i < plan.tiles[t].end; ++i) {
        const int64_t query = order[i];
        for (int64_t key : keys) {
          if (!policy_keeps(plan, policy, query + shape.causal_offset(), key)) continue;
          uint8_t& entry = mask[(slot * shape.q_len + query) * shape.kv_len + key];
          EXPECT_EQ(entry, 0) << "pair (" << query << ", " << key << ") covered twice in slot "
                              << slot;
          entry = 1;
        }
      }
    }
  }
  return mask;
}

using RandomPlanParams = std::tuple<DType, int64_t /*group*/, bool /*plan per batch element*/>;

std::string random_plan_name(const ::testing::TestParamInfo<RandomPlanParams>& info) {
  const auto [dtype, group, per_batch] = info.param;
  return dtype_label(dtype) + "_gqa" + std::to_string(group) +
         (per_batch ? "_plan_per_batch" : "_plan_broadcast");
}

class RandomPlanAttention : public ::testing::TestWithParam<RandomPlanParams> {};

TEST_P(RandomPlanAttention, EqualsMaskedOracle) {
  const auto [dtype, group, per_batch] = GetParam();
  Random random;
  SCOPED_TRACE(random.trace());
  const int64_t q_heads = kKvHeads * group;
  const int64_t q_len = test::random_length(random, 40, 110);
  // Longer keys than queries (the prefill-with-cache case) and shorter (rows without keys).
  for (const int64_t kv_len :
       {q_len + random.uniform_int(1, 50), q_len - random.uniform_int(1, 20)}) {
    SCOPED_TRACE("q_len=" + std::to_string(q_len) + " kv_len=" + std::to_string(kv_len));
    PlanShape shape;
    shape.batch = per_batch ? kBatch : 1;
    shape.heads = q_heads;
    shape.q_len = q_len;
    shape.kv_len = kv_len;
    shape.tile_rows = random.uniform_int(3, 20);
    const Plan plan = RandomPlan(random, shape).plan();
    ASSERT_NO_THROW(plan.validate());
    const std::vector<uint8_t> mask_values = independent_mask(plan);
    for (int64_t slot = 0; slot < plan.head_slots(); ++slot) {
      const std::vector<uint8_t> library_mask = materialize_mask(plan, slot);
      const auto begin = mask_values.begin() + slot * q_len * kv_len;
      ASSERT_TRUE(std::equal(library_mask.begin(), library_mask.end(), begin))
          << "materialize_mask disagrees with the plan's fields in slot " << slot;
    }

    const Operand q = test::random_operand(random, dtype, kBatch, q_len, q_heads, kHeadDim, true);
    const Operand k = test::random_operand(random, dtype, kBatch, kv_len, kKvHeads, kHeadDim, true);
    const Operand v =
        test::random_operand(random, dtype, kBatch, kv_len, kKvHeads, kHeadDim, false);
    const Operand plan_out = test::poisoned_output(dtype, kBatch, q_len, q_heads, kHeadDim, false);
    const Tensor plan_lse = test::poisoned_lse(kBatch, q_heads, q_len);
    attention_planned(plan, q.view, k.view, v.view, plan_out.view, plan_lse.view());

    const TensorView mask =
        TensorView::contiguous(const_cast<uint8_t*>(mask_values.data()), DType::kUInt8,
                               {shape.batch, q_heads, q_len, kv_len});
    const Operand masked_out = test::poisoned_output(dtype, kBatch, q_len, q_heads, kHeadDim, true);
    const Tensor masked_lse = test::poisoned_lse(kBatch, q_heads, q_len);
    attention_masked(q.view, k.view, v.view, mask, masked_out.view, masked_lse.view());

    const KeepPair keep = [&](int64_t b, int64_t h, int64_t i, int64_t j) {
      const int64_t slot = (per_batch ? b : 0) * q_heads + h;
      return mask_values[(slot * q_len + i) * kv_len + j] != 0;
    };
    const double scale = 1.0 / std::sqrt(static_cast<double>(kHeadDim));
    const Reference exact = naive_attention(q.view, k.view, v.view, scale, keep, Precision::kExact);
    const Reference naive = naive_attention(q.view, k.view, v.view, scale, keep, Precision::kNaive);
    {
      SCOPED_TRACE("attention_planned");
      expect_kernel_accuracy(plan_out.view, plan_lse.view(), exact, naive);
    }
    {
      SCOPED_TRACE("attention_masked");
      expect_kernel_accuracy(masked_out.view, masked_lse.view(), exact, naive);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Plans, RandomPlanAttention,
                         ::testing::Combine(::testing::Values(DType::kFloat32, DType::kBFloat16),
                                            ::testing::Values(1, 2, 4, 7), ::testing::Bool()),
                         random_plan_name);

TEST(PlannedAttentionEdges, EmptyPlanGivesEmptyRows) {
  Random random;
  SCOPED_TRACE(random.trace());
  const int64_t q_len = test::random_length(random, 5, 40);
  PlanShape shape;
  shape.heads = 2;
  shape.q_len = q_len;
  shape.kv_len = q_len + 3;
  PlanBuilder builder(shape);
  for (int64_t head = 0; head < shape.heads; ++head) builder.begin_head();
  const Plan plan = builder.finish();
  const Operand q = test::random_operand(random, DType::kFloat16, 1, q_len, 2, kHeadDim, false);
  const Operand k = test::random_operand(random, DType::kFloat16, 1, q_len + 3, 1, kHeadDim, false);
  const Operand v = test::random_operand(random, DType::kFloat16, 1, q_len + 3, 1, kHeadDim, false);
  const Operand out = test::poisoned_output(DType::kFloat16, 1, q_len, 2, kHeadDim, false);
  const Tensor lse = test::poisoned_lse(1, 2, q_len);
  attention_planned(plan, q.view, k.view, v.view, out.view, lse.view());
  for (double value : test::to_doubles(out.view)) ASSERT_EQ(value, 0.0);
  for (double value : test::to_doubles(lse.view())) ASSERT_EQ(value, test::kNegativeInfinity);
}

}  // namespace
}  // namespace mmsparse::test
