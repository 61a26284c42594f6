// Plan validation: small plans with one field broken at a time are rejected with an error that
// names the field; strided spans are checked by their arithmetic.

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "common/random.h"
#include "common/errors.h"
#include "common/tile_keys.h"
#include "mmsparse/layout.h"
#include "mmsparse/plan.h"
#include "mmsparse/status.h"

namespace mmsparse {
namespace {

using testing::expect_error;

void expect_invalid(const Plan& plan, std::initializer_list<std::string> fragments) {
  expect_error([&] { plan.validate(); }, ErrorCode::kInvalidArgument, fragments);
}

// Two batch elements × two heads, q_len 10, kv_len 13, tiles of at most 4 rows; head slot 1 has a
// strided order. Every tile has a span and a column, so each mutation below has a target.
Plan small_plan() {
  PlanBuilder builder({.batch = 2, .heads = 2, .q_len = 10, .kv_len = 13, .tile_rows = 4});
  for (int slot = 0; slot < 4; ++slot) {
    if (slot == 1) {
      builder.begin_head({{0, 5, 2}, {1, 5, 2}});
    } else {
      builder.begin_head();
    }
    for (int64_t begin : {0, 4, 8}) {
      builder.begin_tile(begin, std::min<int64_t>(begin + 4, 10));
      builder.add_span(4, 9);
      builder.add_column(1);
    }
  }
  return builder.finish();
}

TEST(PlanValidate, AcceptsSmallPlanWithBatchAndStridedOrder) {
  const Plan plan = small_plan();
  EXPECT_NO_THROW(plan.validate());
  EXPECT_EQ(plan.head_slots(), 4);
  EXPECT_EQ(plan.query_position(1, 0), 0);
  EXPECT_EQ(plan.query_position(1, 5), 1);
  EXPECT_EQ(plan.query_position(1, 9), 9);
  EXPECT_EQ(plan.query_order(1), (std::vector<int64_t>{0, 2, 4, 6, 8, 1, 3, 5, 7, 9}));
  EXPECT_EQ(plan.query_position(0, 7), 7);
}

TEST(PlanValidate, RejectsOverlappingSpans) {
  Plan plan = small_plan();
  // Plan tile 3 (tile 0 of head slot 1) gets a second span overlapping its [4, 9).
  plan.spans.insert(plan.spans.begin() + 4, KeySpan{6, 12});
  for (size_t t = 4; t < plan.tile_span_offsets.size(); ++t) ++plan.tile_span_offsets[t];
  expect_invalid(plan,
                 {"plan.spans", "tile 0 of head slot 1", "overlapping spans [4, 9) and [6, 12)"});
}

TEST(PlanValidate, RejectsColumnInsideSpan) {
  Plan plan = small_plan();
  plan.columns[4] = 6;  // tile 1 of head slot 1
  expect_invalid(plan, {"plan.columns", "tile 1 of head slot 1", "column 6 inside span [4, 9)"});
}

TEST(PlanValidate, RejectsDuplicateColumns) {
  Plan plan = small_plan();
  plan.columns.insert(plan.columns.begin() + 2, 1);  // tile 2 of head slot 0 gets column 1 twice
  for (size_t t = 3; t < plan.tile_column_offsets.size(); ++t) ++plan.tile_column_offsets[t];
  expect_invalid(plan, {"plan.columns", "tile 2 of head slot 0", "duplicate column 1"});
}

// small_plan() with one strided span in tile 0 of head slot 0 (outside its span [4, 9) and column
// 1).
Plan plan_with_strided(StridedSpan strided) {
  Plan plan = small_plan();
  plan.strided_spans.insert(plan.strided_spans.begin(), strided);
  for (size_t t = 1; t < plan.tile_strided_offsets.size(); ++t) ++plan.tile_strided_offsets[t];
  return plan;
}

TEST(PlanValidate, AcceptsAndRejectsStridedSpans) {
  // Keys 9, 11 lie past the span [4, 9); 0, 2 skip column 1.
  EXPECT_NO_THROW(plan_with_strided({9, 12, 2}).validate());
  EXPECT_NO_THROW(plan_with_strided({0, 3, 2}).validate());
  // Keys 3, 6, 9: 6 lies in the span [4, 9).
  expect_invalid(plan_with_strided({3, 10, 3}),
                 {"plan.strided_spans", "tile 0 of head slot 0", "[3, 10) step 3",
                  "sharing keys with span [4, 9)"});
  expect_invalid(plan_with_strided({1, 4, 2}),
                 {"plan.columns", "tile 0 of head slot 0", "column 1 inside strided span"});
  expect_invalid(plan_with_strided({9, 12, 1}), {"plan.strided_spans", "step >= 2"});
  expect_invalid(plan_with_strided({9, 13, 2}), {"plan.strided_spans", "end = its last key + 1"});
  expect_invalid(plan_with_strided({11, 15, 2}), {"plan.strided_spans", "kv_len = 13"});
  expect_invalid(plan_with_strided({-1, 2, 3}), {"plan.strided_spans", "non-empty range"});
  // Two lattices: residues that never meet, then ones that meet at key 12 only.
  Plan plan = plan_with_strided({9, 12, 2});
  plan.strided_spans.insert(plan.strided_spans.begin() + 1, StridedSpan{10, 13, 2});
  for (size_t t = 1; t < plan.tile_strided_offsets.size(); ++t) ++plan.tile_strided_offsets[t];
  EXPECT_NO_THROW(plan.validate());
  plan.strided_spans[0] = {0, 4, 3};    // 0, 3
  plan.strided_spans[1] = {10, 13, 2};  // 10, 12
  EXPECT_NO_THROW(plan.validate());
  plan.strided_spans[0] = {9, 13, 3};  // 9, 12
  expect_invalid(plan, {"plan.strided_spans", "[9, 13) step 3 and [10, 13) step 2 sharing keys"});
  plan.tile_strided_offsets.pop_back();
  expect_invalid(plan, {"plan.tile_strided_offsets"});
}

// A tile of many strided spans of one step (a grid mask's lattice tile): spans on different
// residues never meet, wherever they lie; a column or a span on a residue's range is found whatever
// the order of the tile's spans, and named.
TEST(PlanValidate, ManyStridedSpansOfOneStep) {
  constexpr int32_t kStep = 16;
  constexpr int32_t kKeys = 4096;
  constexpr int32_t kHalf = kKeys / 2;
  // Residue r: keys r .. r + kHalf - kStep and r + kHalf .. r + kKeys - 2·kStep; the last kStep
  // keys, past every range, are columns.
  PlanBuilder builder({.q_len = 4, .kv_len = kKeys, .tile_rows = 4});
  builder.begin_head();
  builder.begin_tile(0, 4);
  for (int32_t residue = kStep - 1; residue >= 0; --residue) {  // out of key order on purpose
    builder.add_strided_span(residue + kHalf, residue + kKeys - 2 * kStep + 1, kStep);
    builder.add_strided_span(residue, residue + kHalf - kStep + 1, kStep);
  }
  for (int32_t key = kKeys - kStep; key < kKeys; ++key) builder.add_column(key);
  Plan plan;
  ASSERT_NO_THROW(plan = builder.finish());  // finish() validates
  // A column on residue 5 inside its second range [2053, 4070).
  Plan with_column = plan;
  with_column.columns.push_back(2117);
  ++with_column.tile_column_offsets.back();
  expect_invalid(with_column,
                 {"plan.columns", "column 2117 inside strided span [2053, 4070) step 16"});
  // A strided span at key 2035, inside residue 3's first range [3, 2036).
  plan.strided_spans.push_back({2035, 2036, kStep});
  ++plan.tile_strided_offsets.back();
  expect_invalid(plan,
                 {"plan.strided_spans", "[3, 2036) step 16 and [2035, 2036) step 16 sharing keys"});
}

TEST(PlanValidate, StridedSpansShareKeysByTheChineseRemainderTheorem) {
  // Brute force over small lattices against the closed form.
  for (int32_t step_a = 2; step_a <= 7; ++step_a) {
    for (int32_t step_b = 2; step_b <= 7; ++step_b) {
      for (int32_t begin_a = 0; begin_a < 9; ++begin_a) {
        for (int32_t begin_b = 0; begin_b < 9; ++begin_b) {
          const StridedSpan a{begin_a, begin_a + 4 * step_a + 1, step_a};
          const StridedSpan b{begin_b, begin_b + 3 * step_b + 1, step_b};
          bool shared = false;
          for (int32_t x = a.begin; x < a.end; x += a.step) {
            shared = shared || (x >= b.begin && x < b.end && (x - b.begin) % b.step == 0);
          }
          EXPECT_EQ(strided_spans_share_keys(a, b), shared)
              << "a = [" << a.begin << ", " << a.end << ") step " << a.step << ", b = [" << b.begin
              << ", " << b.end << ") step " << b.step;
        }
      }
    }
  }
}

TEST(PlanValidate, RejectsOutOfRangeKeys) {
  Plan plan = small_plan();
  plan.spans[5] = {9, 14};
  expect_invalid(plan, {"plan.spans", "tile 2 of head slot 1", "[9, 14)", "kv_len = 13"});
  plan = small_plan();
  plan.spans[5] = {7, 7};
  expect_invalid(plan, {"plan.spans", "non-empty"});
  plan = small_plan();
  plan.columns[7] = 13;
  expect_invalid(plan, {"plan.columns", "tile 1 of head slot 2", "column 13 outside"});
  plan = small_plan();
  plan.columns[0] = -1;
  expect_invalid(plan, {"plan.columns", "column -1 outside"});
}

TEST(PlanValidate, RejectsBadTiles) {
  Plan plan = small_plan();
  plan.tiles[2] = {8, 11};
  expect_invalid(plan, {"plan.tiles", "tile 2 of head slot 0", "[8, 11)", "q_len = 10"});
  plan = small_plan();
  plan.tiles[1] = {3, 8};
  expect_invalid(plan, {"plan.tiles", "tile 1 of head slot 0", "more than tile_rows = 4"});
  plan = small_plan();
  plan.tiles[4] = {2, 6};
  expect_invalid(
      plan, {"plan.tiles", "tile 1 of head slot 1 [2, 6) overlaps tile 0 of head slot 1 [0, 4)"});
  plan = small_plan();
  plan.tile_masks[5] = 1;
  expect_invalid(plan, {"plan.tile_masks", "tile 2 of head slot 1", "mask 1"});
}

TEST(PlanValidate, RejectsBadRuns) {
  Plan plan = small_plan();
  plan.runs[1] = {1, 5, 3};  // reaches query 13
  expect_invalid(plan, {"plan.runs", "run 1 of head slot 1", "q_len = 10"});
  plan = small_plan();
  plan.runs[1] = {0, 5, 2};  // visits the even queries twice
  expect_invalid(plan, {"plan.runs", "head slot 1 visits query 0 twice"});
  plan = small_plan();
  plan.runs[1] = {1, 4, 2};  // misses query 9
  expect_invalid(plan, {"plan.runs", "head slot 1 visits 9 queries, expected q_len = 10"});
  plan = small_plan();
  plan.runs[0].step = 0;
  expect_invalid(plan, {"plan.runs", "step > 0"});
}

TEST(PlanValidate, RejectsBadOffsets) {
  Plan plan = small_plan();
  plan.head_tile_offsets.pop_back();
  expect_invalid(plan, {"plan.head_tile_offsets", "expected 5 entries, got 4"});
  plan = small_plan();
  plan.head_run_offsets.push_back(2);
  expect_invalid(plan, {"plan.head_run_offsets", "expected 5 entries"});
  plan = small_plan();
  std::swap(plan.tile_span_offsets[2], plan.tile_span_offsets[3]);
  expect_invalid(plan, {"plan.tile_span_offsets", "not monotone"});
  plan = small_plan();
  plan.tile_column_offsets.back() = 15;
  expect_invalid(plan,
                 {"plan.tile_column_offsets", "last entry is 15, expected 12", "plan.columns"});
  plan = small_plan();
  plan.tile_masks.pop_back();
  expect_invalid(plan, {"plan.tile_masks", "one per tile"});
  plan = small_plan();
  plan.shape.batch = 0;
  expect_invalid(plan, {"plan.shape.batch"});
}

TEST(PlanValidate, RequiresTokenArraysForTokenMasks) {
  Plan plan = small_plan();
  plan.masks.push_back({.same_media = true});
  plan.tile_masks[3] = 1;
  expect_invalid(
      plan, {"plan.token_modality", "expected 13 entries", "mask 1 needs token arrays", "got 0"});
  plan.token_modality.assign(13, 1);
  expect_invalid(plan, {"plan.token_media", "expected 13 entries"});
  plan.token_media.assign(13, 0);
  EXPECT_NO_THROW(plan.validate());
  plan.token_modality[4] = kNumModalities;
  expect_invalid(plan, {"plan.token_modality", "entry 4"});
  plan = small_plan();
  plan.masks.push_back({.modality_pairs = modality_pair_bit(Modality::kText, Modality::kImage)});
  plan.tile_masks[0] = 1;
  expect_invalid(plan, {"plan.token_modality", "mask 1 needs token arrays"});
}

TEST(PlanValidate, RejectsBadDistanceAndBandFields) {
  const auto plan_with = [](const MaskPolicy& mask) {
    Plan plan = small_plan();
    plan.masks[0] = mask;
    return plan;
  };
  expect_invalid(plan_with({.min_distance = -1}), {"plan.masks", "min_distance -1", ">= 0"});
  expect_invalid(plan_with({.period = -3, .band = 1}), {"plan.masks", "period -3"});
  expect_invalid(plan_with({.period = 4, .band = 0}), {"plan.masks", "0 < band <= period"});
  expect_invalid(plan_with({.period = 4, .band = 5}), {"plan.masks", "band 5"});
  expect_invalid(plan_with({.period = 0, .band = 2}), {"plan.masks", "or both 0"});
  expect_invalid(plan_with({.causal = false, .period = 4, .band = 2}),
                 {"plan.masks", "without causal", "causal = true"});
  EXPECT_NO_THROW(plan_with({.min_distance = 3, .period = 4, .band = 4}).validate());
}

}  // namespace
}  // namespace mmsparse
