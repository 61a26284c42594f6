// Key orders (Plan::key_orders): random plans mixing key-ordered and in-place tiles compute exactly
// the pairs their generator meant (materialize_mask, pair counts, attention against the masked
// oracle), and every restriction on key-ordered tiles is rejected with an error naming it.

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/errors.h"
#include "common/key_order_plans.h"
#include "common/masked_oracle.h"
#include "common/random.h"
#include "mmsparse/attention.h"
#include "mmsparse/plan.h"
#include "mmsparse/status.h"

namespace mmsparse {
namespace {

using testing::expect_error;

constexpr int64_t kHeadDim = 16;
constexpr double kTolerance = 1e-5;

void expect_invalid(const Plan& plan, std::initializer_list<std::string> fragments) {
  expect_error([&] { plan.validate(); }, ErrorCode::kInvalidArgument, fragments);
}

struct RandomCase {
  int64_t batch, kv_heads, group, q_len, kv_len;
};

class RandomKeyOrderPlans : public ::testing::TestWithParam<RandomCase> {};

TEST_P(RandomKeyOrderPlans, ComputeTheGeneratorsPairs) {
  const RandomCase c = GetParam();
  test::Random random;
  SCOPED_TRACE(random.trace());
  for (int trial = 0; trial < 4; ++trial) {
    test::KeyOrderPlanOptions options;
    options.batch = c.batch;
    options.heads = c.kv_heads * c.group;
    options.q_len = c.q_len;
    options.kv_len = c.kv_len;
    options.tile_rows = random.uniform_int(1, 24);
    options.orders = random.uniform_int(1, 3);
    options.unmasked_share = 0.3;
    const test::KeyOrderPlan generated = test::random_key_order_plan(random, options);
    const Plan& plan = generated.plan;
    ASSERT_TRUE(plan.has_key_orders());
    const std::vector<int64_t> counts = count_plan_pairs(plan);
    for (int64_t slot = 0; slot < plan.head_slots(); ++slot) {
      const std::vector<uint8_t> mask = materialize_mask(plan, slot);
      ASSERT_EQ(mask, generated.expected[slot]) << "head slot " << slot;
      int64_t pairs = 0;
      for (uint8_t kept : mask) pairs += kept;
      EXPECT_EQ(counts[slot], pairs) << "head slot " << slot;
    }
    Tensor q = random.normal_tensor(DType::kFloat32, {c.batch, c.q_len, options.heads, kHeadDim});
    Tensor k = random.normal_tensor(DType::kFloat32, {c.batch, c.kv_len, c.kv_heads, kHeadDim});
    Tensor v = random.normal_tensor(DType::kFloat32, {c.batch, c.kv_len, c.kv_heads, kHeadDim});
    test::expect_plan_equals_masked_oracle(plan, q.view(), k.view(), v.view(), kTolerance);
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, RandomKeyOrderPlans,
                         ::testing::Values(RandomCase{1, 1, 1, 97, 97},
                                           RandomCase{1, 2, 4, 61, 150},
                                           RandomCase{2, 1, 7, 45, 83},
                                           RandomCase{1, 1, 1, 130, 131}));

// A two-key-order plan by hand: order 0 gathers keys 0-1 and 8-9 before the rest, with padding.
//   slots: 0:0 1:1 2:8 3:9 4:pad 5:pad 6:2 7:3 8:4 9:5 10:6 11:7 12:10 13:11
std::vector<int32_t> gathered_order() {
  return {0, 1, 8, 9, kPaddingKey, kPaddingKey, 2, 3, 4, 5, 6, 7, 10, 11};
}

TEST(KeyOrders, BuilderDeduplicatesOrdersAndKeepsInPlaceTilesEmpty) {
  PlanBuilder builder({.batch = 1, .heads = 1, .q_len = 12, .kv_len = 12, .tile_rows = 4});
  EXPECT_EQ(builder.add_key_order(gathered_order()), 0);
  EXPECT_EQ(builder.add_key_order({11, 10}), 1);
  EXPECT_EQ(builder.add_key_order(gathered_order()), 0);
  builder.begin_head();
  builder.begin_tile(0, 4);
  builder.add_span(0, 4);
  builder.begin_tile(8, 12, {}, 0);
  builder.add_span(0, 4);  // keys 0, 1, 8, 9: the last run 8-9 starts at or below row 8
  builder.add_span(6, 11);
  const Plan plan = builder.finish();
  EXPECT_EQ(plan.tile_key_orders, (std::vector<int32_t>{kKeysInPlace, 0}));
  EXPECT_EQ(plan.key_orders.size(), 2u);
  EXPECT_NE(plan.summary().find("key_orders=2 key_ordered_tiles=1"), std::string::npos)
      << plan.summary();
  // Row 8 sees keys 0-8 but 7 (slot 11 is not in a span): 0, 1, 8 and 2-6.
  const std::vector<uint8_t> mask = materialize_mask(plan, 0);
  std::vector<uint8_t> row8(mask.begin() + 8 * 12, mask.begin() + 9 * 12);
  EXPECT_EQ(row8, (std::vector<uint8_t>{1, 1, 1, 1, 1, 1, 1, 0, 1, 0, 0, 0}));

  // Touching spans of a key-ordered tile stay apart (each has its own shift), in place they merge.
  PlanBuilder touching({.batch = 1, .heads = 1, .q_len = 12, .kv_len = 12, .tile_rows = 4});
  touching.add_key_order(gathered_order());
  touching.begin_head();
  touching.begin_tile(8, 12, {}, 0);
  touching.add_span(6, 8);
  touching.add_span(8, 10);
  touching.begin_tile(0, 4);
  touching.add_span(0, 2);
  touching.add_span(2, 4);
  EXPECT_EQ(touching.finish().spans, (std::vector<KeySpan>{{6, 8}, {8, 10}, {0, 4}}));

  PlanBuilder in_place({.batch = 1, .heads = 1, .q_len = 4, .kv_len = 4, .tile_rows = 4});
  in_place.begin_head();
  in_place.begin_tile(0, 4);
  in_place.add_span(0, 4);
  const Plan plain = in_place.finish();
  EXPECT_TRUE(plain.tile_key_orders.empty());
  EXPECT_FALSE(plain.has_key_orders());
}

TEST(KeyOrders, BuilderRejectsUnknownOrdersAndSlotsPastTheOrder) {
  PlanBuilder builder({.batch = 1, .heads = 1, .q_len = 12, .kv_len = 12, .tile_rows = 4});
  builder.add_key_order({0, 1, 2});
  builder.begin_head();
  expect_error([&] { builder.begin_tile(0, 4, {}, 1); }, ErrorCode::kInvalidArgument,
               {"key_order", "add_key_order", "1"});
  builder.begin_tile(0, 4, {}, 0);
  expect_error([&] { builder.add_span(1, 4); }, ErrorCode::kInvalidArgument,
               {"add_span", "slots [0, 3) of key order 0"});
}

// One key-ordered tile over gathered_order(), rows [8, 12), valid: spans {0-4} and {6-11}.
Plan valid_plan() {
  PlanBuilder builder({.batch = 1, .heads = 2, .q_len = 12, .kv_len = 12, .tile_rows = 4});
  builder.add_key_order(gathered_order());
  for (int head = 0; head < 2; ++head) {
    builder.begin_head();
    builder.begin_tile(0, 4);
    builder.add_span(0, 4);
    builder.begin_tile(8, 12, {}, 0);
    builder.add_span(0, 4);
    builder.add_span(6, 11);
  }
  return builder.finish();
}

TEST(KeyOrders, ValidationNamesEveryBrokenRestriction) {
  valid_plan().validate();
  Plan plan = valid_plan();
  plan.key_orders[0][3] = 12;
  expect_invalid(plan, {"plan.key_orders", "key order 0", "slot 3", "key 12"});
  plan = valid_plan();
  plan.key_orders[0][7] = 8;
  expect_invalid(plan, {"plan.key_orders", "key 8 twice"});
  plan = valid_plan();
  plan.tile_key_orders.pop_back();
  expect_invalid(plan, {"plan.tile_key_orders", "entries"});
  plan = valid_plan();
  plan.tile_key_orders[3] = 1;
  expect_invalid(plan, {"plan.tile_key_orders", "tile 1 of head slot 1", "key order 1"});
  plan = valid_plan();
  plan.columns.push_back(5);
  plan.tile_column_offsets[4] = 1;  // the column belongs to tile 3, tile 1 of head slot 1
  expect_invalid(plan, {"plan.columns", "tile 1 of head slot 1", "spans only"});
  plan = valid_plan();
  plan.strided_spans.push_back({0, 5, 2});
  for (std::size_t t = 2; t < plan.tile_strided_offsets.size(); ++t) {
    plan.tile_strided_offsets[t] = 1;
  }
  expect_invalid(plan, {"plan.strided_spans", "tile 1 of head slot 0", "spans only"});
  plan = valid_plan();
  plan.masks.push_back({.window = 4});
  plan.tile_masks[1] = 1;
  expect_invalid(plan, {"plan.tile_masks", "tile 1 of head slot 0", "plain causal"});
  plan = valid_plan();
  plan.spans[2].end = 15;
  expect_invalid(plan, {"plan.spans", "key order 0", "[0, 14)"});
  plan = valid_plan();
  plan.spans[1] = {2, 7};  // slots 4-5 are padding
  expect_invalid(plan, {"plan.spans", "tile 1 of head slot 0", "padding slot 4"});
  plan = valid_plan();
  plan.key_orders[0][1] = 8;  // keys 0, 8, 1, 9: no longer increasing
  plan.key_orders[0][2] = 1;
  expect_invalid(plan, {"plan.spans", "do not strictly increase", "slot 2"});
  plan = valid_plan();
  plan.spans[2] = {3, 11};  // overlaps {0, 4}... and crosses padding
  expect_invalid(plan, {"plan.spans", "padding"});
  plan = valid_plan();
  plan.spans[2] = {2, 4};
  expect_invalid(plan, {"plan.spans", "overlapping", "key order 0"});
  // Rows [0, 4) through the order: the keys before the last run 8-9 sit at 6 and 7 by the shift,
  // above row 0's aligned position.
  plan = valid_plan();
  plan.tile_key_orders[0] = 0;
  expect_invalid(plan, {"plan.spans", "tile 0 of head slot 0", "up to 7", "lowest aligned row"});
}

// The unmasked policy: a key-ordered tile keeps every pair of its spans, so they may hold keys in
// any order, after the tile's rows too; padding, overlaps and other mask terms stay refused.
constexpr MaskPolicy kUnmasked{.causal = false};

Plan unmasked_plan() {
  PlanBuilder builder({.batch = 1, .heads = 1, .q_len = 12, .kv_len = 12, .tile_rows = 4});
  builder.add_key_order(gathered_order());
  builder.add_key_order({11, 10, 3, 2});
  builder.begin_head();
  builder.begin_tile(0, 4, kUnmasked, 0);
  builder.add_span(0, 4);   // keys 0, 1, 8, 9: past rows 0-3
  builder.add_span(6, 14);  // keys 2-7, 10, 11
  builder.begin_tile(4, 8, kUnmasked, 1);
  builder.add_span(0, 4);  // keys 11, 10, 3, 2: descending
  builder.begin_tile(8, 12);
  builder.add_span(0, 12);
  return builder.finish();
}

TEST(KeyOrders, UnmaskedTilesReadTheirSlotsInAnyOrder) {
  const Plan plan = unmasked_plan();
  const std::vector<uint8_t> mask = materialize_mask(plan, 0);
  for (int64_t row = 0; row < 12; ++row) {
    for (int64_t key = 0; key < 12; ++key) {
      const bool expected = row < 4 || (row < 8 ? key == 2 || key == 3 || key >= 10 : key <= row);
      ASSERT_EQ(mask[row * 12 + key] != 0, expected) << "row " << row << " key " << key;
    }
  }
  EXPECT_EQ(count_plan_pairs(plan, 0), 4 * 12 + 4 * 4 + (9 + 10 + 11 + 12));
  test::Random random;
  SCOPED_TRACE(random.trace());
  const Tensor q = random.normal_tensor(DType::kFloat32, {1, 12, 1, kHeadDim});
  const Tensor k = random.normal_tensor(DType::kFloat32, {1, 12, 1, kHeadDim});
  const Tensor v = random.normal_tensor(DType::kFloat32, {1, 12, 1, kHeadDim});
  test::expect_plan_equals_masked_oracle(plan, q.view(), k.view(), v.view(), kTolerance);
}

TEST(KeyOrders, UnmaskedTilesStillRefusePaddingOverlapsAndOtherTerms) {
  Plan plan = unmasked_plan();
  plan.spans[1] = {5, 14};  // slot 5 is padding
  expect_invalid(plan, {"plan.spans", "tile 0 of head slot 0", "padding slot 5"});
  plan = unmasked_plan();
  plan.spans[0] = {0, 5};
  expect_invalid(plan, {"plan.spans", "tile 0 of head slot 0", "padding slot 4"});
  plan = unmasked_plan();
  plan.spans[1] = {3, 4};
  expect_invalid(plan, {"plan.spans", "overlapping", "key order 0"});
  plan = unmasked_plan();
  plan.spans[2].end = 5;
  expect_invalid(plan, {"plan.spans", "key order 1", "[0, 4)"});
  for (const MaskPolicy& other : {MaskPolicy{.causal = false, .window = 4},
                                  MaskPolicy{.causal = false, .media_bidirectional = true},
                                  MaskPolicy{.causal = false, .same_media = true}}) {
    plan = unmasked_plan();
    plan.token_modality.assign(12, 0);  // all text: the token masks have their arrays
    plan.token_media.assign(12, -1);
    plan.masks.push_back(other);
    plan.tile_masks[1] = static_cast<int32_t>(plan.masks.size()) - 1;
    expect_invalid(plan, {"plan.tile_masks", "tile 1 of head slot 0", "plain causal mask or none"});
  }
  // The same descending span under the causal mask: its positions would be read.
  plan = unmasked_plan();
  plan.masks.push_back({});
  plan.tile_masks[1] = static_cast<int32_t>(plan.masks.size()) - 1;
  expect_invalid(plan, {"plan.spans", "tile 1 of head slot 0", "do not strictly increase"});
}

TEST(KeyOrders, ConvertersRejectKeyOrderedPlans) {
  const Plan plan = valid_plan();
  expect_error([&] { (void)to_block_lists(plan, 4, 4); }, ErrorCode::kUnsupported,
               {"to_block_lists", "key order"});
  expect_error([&] { (void)to_minference_index(plan); }, ErrorCode::kUnsupported,
               {"to_minference_index", "key order"});
}

TEST(KeyOrders, PassesAreDisjointOnOriginalPositions) {
  // Pass 1 reads keys 10-11 of rows 8-11 in place: disjoint from pass 0's keys 0-9 there.
  const PlanShape shape{.batch = 1, .heads = 2, .q_len = 12, .kv_len = 12, .tile_rows = 4};
  PlanBuilder builder(shape);
  for (int head = 0; head < 2; ++head) {
    builder.begin_head();
    builder.begin_tile(8, 12);
    builder.add_span(10, 12);
  }
  Plan plan = valid_plan();
  add_pass(plan, builder.finish());
  check_passes_disjoint(plan);
  EXPECT_EQ(count_plan_pairs(plan, 0), count_plan_pairs(valid_plan(), 0) + 2 + 1);
  // A pass 1 that also reads key 9 (slot 3 of the order) for those rows overlaps pass 0.
  PlanBuilder overlapping(shape);
  for (int head = 0; head < 2; ++head) {
    overlapping.begin_head();
    overlapping.begin_tile(8, 12);
    overlapping.add_span(9, 10);
  }
  Plan both = valid_plan();
  add_pass(both, overlapping.finish());
  expect_error([&] { check_passes_disjoint(both); }, ErrorCode::kInvalidArgument,
               {"passes 0 and 1", "key 9"});
}

}  // namespace
}  // namespace mmsparse
