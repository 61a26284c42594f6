// The plan: random plans validate and mutations of them are caught, the builder, and the coverage
// it defines (test_plan_validation.cpp checks each invariant on small plans).

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

constexpr int kRandomTrials = 20;

// --- Independent definition of the coverage, element by element -------------------------------

bool policy_keeps(const Plan& plan, const MaskPolicy& mask, int64_t query, int64_t key) {
  const int64_t aligned = query + plan.shape.kv_len - plan.shape.q_len;
  if (mask.causal && key > aligned) return false;
  if (mask.window > 0 && key >= mask.window_sink && aligned - key >= mask.window) return false;
  if (mask.min_distance > 0 && aligned - key < mask.min_distance) return false;
  if (mask.period > 0 && (aligned - key) % mask.period >= mask.band) return false;
  if (mask.same_media) {
    if (aligned < 0 || plan.token_media[aligned] < 0) return false;
    if (plan.token_media[aligned] != plan.token_media[key]) return false;
  }
  if (mask.modality_pairs != kAllModalityPairs) {
    if (aligned < 0) return false;
    const int bit = plan.token_modality[aligned] * kNumModalities + plan.token_modality[key];
    if (((mask.modality_pairs >> bit) & 1) == 0) return false;
  }
  return true;
}

std::vector<uint8_t> brute_force_mask(const Plan& plan, int64_t slot) {
  const int64_t q_len = plan.shape.q_len;
  const int64_t kv_len = plan.shape.kv_len;
  std::vector<int64_t> order;
  for (int64_t r = plan.head_run_offsets[slot]; r < plan.head_run_offsets[slot + 1]; ++r) {
    for (int64_t i = 0; i < plan.runs[r].count; ++i)
      order.push_back(plan.runs[r].start + i * plan.runs[r].step);
  }
  if (order.empty()) {
    order.resize(q_len);
    std::iota(order.begin(), order.end(), 0);
  }
  std::vector<uint8_t> mask(q_len * kv_len, 0);
  for (int64_t t = plan.head_tile_offsets[slot]; t < plan.head_tile_offsets[slot + 1]; ++t) {
    const MaskPolicy& policy = plan.masks[plan.tile_masks[t]];
    const std::vector<int64_t> keys = testing::listed_tile_keys(plan, t);
    for (int64_t i = plan.tiles[t].begin; i < plan.tiles[t].end; ++i) {
      for (int64_t key : keys) {
        if (policy_keeps(plan, policy, order[i], key)) mask[order[i] * kv_len + key] = 1;
      }
    }
  }
  return mask;
}

// --- Random valid plans ----------------------------------------------------------------------

// A query order: identity, grid-like phases, or an arbitrary permutation as runs of one.
std::vector<QueryRun> random_order(std::mt19937_64& rng, int64_t q_len) {
  switch (std::uniform_int_distribution<int>(0, 2)(rng)) {
    case 0: return {};
    case 1: {
      const int64_t stride =
          std::uniform_int_distribution<int64_t>(1, std::max<int64_t>(1, q_len / 3))(rng);
      std::vector<QueryRun> runs;
      for (int64_t phase = 0; phase < std::min(stride, q_len); ++phase) {
        runs.push_back({phase, (q_len - phase + stride - 1) / stride, stride});
      }
      return runs;
    }
    default: {
      std::vector<int64_t> positions(q_len);
      std::iota(positions.begin(), positions.end(), 0);
      std::shuffle(positions.begin(), positions.end(), rng);
      std::vector<QueryRun> runs;
      for (int64_t position : positions) runs.push_back({position, 1, 1});
      return runs;
    }
  }
}

// Random disjoint spans, strided spans in some of the gaps between them, and columns outside
// both, any alignment.
void add_random_keys(std::mt19937_64& rng, PlanBuilder& builder, int64_t kv_len) {
  constexpr int64_t kMaxStep = 5;
  std::vector<int64_t> cuts(std::uniform_int_distribution<int>(0, 6)(rng));
  for (int64_t& cut : cuts) cut = std::uniform_int_distribution<int64_t>(0, kv_len)(rng);
  std::sort(cuts.begin(), cuts.end());
  std::vector<uint8_t> covered(kv_len, 0);
  for (size_t i = 0; i + 1 < cuts.size(); i += 2) {
    builder.add_span(cuts[i], cuts[i + 1]);
    std::fill(covered.begin() + cuts[i], covered.begin() + cuts[i + 1], 1);
  }
  // The gaps: [previous span's end, next span's begin).
  std::vector<int64_t> gap_edges = {0};
  for (size_t i = 0; i + 1 < cuts.size(); i += 2) {
    gap_edges.push_back(cuts[i]);
    gap_edges.push_back(cuts[i + 1]);
  }
  gap_edges.push_back(kv_len);
  for (size_t g = 0; g + 1 < gap_edges.size(); g += 2) {
    const int64_t begin = gap_edges[g];
    const int64_t end = gap_edges[g + 1];
    if (end - begin < 2 || !std::bernoulli_distribution(0.5)(rng)) continue;
    const int64_t step = std::uniform_int_distribution<int64_t>(2, kMaxStep)(rng);
    const int64_t first = std::uniform_int_distribution<int64_t>(begin, end - 1)(rng);
    builder.add_strided_span(first, end, step);
    for (int64_t key = first; key < end; key += step) covered[key] = 1;
  }
  for (int64_t key = 0; key < kv_len; ++key) {
    if (!covered[key] && std::bernoulli_distribution(0.1)(rng)) builder.add_column(key);
  }
}

Plan random_plan(std::mt19937_64& rng, bool with_token_masks) {
  auto uniform = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  PlanShape shape;
  shape.batch = uniform(1, 2);
  shape.heads = uniform(1, 3);
  shape.q_len = uniform(1, 70);
  shape.kv_len = shape.q_len + uniform(0, 30);
  shape.tile_rows = uniform(1, 20);
  const int64_t period = uniform(1, 12);
  const std::vector<MaskPolicy> policies = {
      {},
      {.causal = false},
      {.causal = true, .window = uniform(1, 20), .window_sink = uniform(0, 6)},
      {.causal = false, .min_distance = uniform(1, 15)},
      {.causal = true,
       .window = uniform(0, 20),
       .window_sink = uniform(0, 6),
       .min_distance = uniform(0, 15),
       .period = period,
       .band = uniform(1, period)}};
  PlanBuilder builder(shape);
  for (int64_t slot = 0; slot < shape.head_slots(); ++slot) {
    builder.begin_head(random_order(rng, shape.q_len));
    for (int64_t begin = 0; begin < shape.q_len;) {
      const int64_t end = std::min(shape.q_len, begin + uniform(1, shape.tile_rows));
      if (std::bernoulli_distribution(0.9)(rng)) {  // some queries stay in no tile
        builder.begin_tile(begin, end, policies[uniform(0, policies.size() - 1)]);
        add_random_keys(rng, builder, shape.kv_len);
      }
      begin = end;
    }
  }
  Plan plan = builder.finish();
  if (!with_token_masks) return plan;
  // Token masks need the token arrays first; give some tiles one of them afterwards.
  plan.token_media.resize(shape.kv_len);
  plan.token_modality.resize(shape.kv_len);
  for (int64_t k = 0; k < shape.kv_len; ++k) {
    plan.token_modality[k] = static_cast<uint8_t>(uniform(0, kNumModalities - 1));
    plan.token_media[k] = plan.token_modality[k] == 0 ? -1 : static_cast<int32_t>(uniform(0, 2));
  }
  plan.masks.push_back({.same_media = true});
  plan.masks.push_back(
      {.causal = false, .modality_pairs = static_cast<uint16_t>(uniform(0, kAllModalityPairs))});
  for (int32_t& mask : plan.tile_masks) {
    if (std::bernoulli_distribution(0.5)(rng))
      mask = static_cast<int32_t>(plan.masks.size() - uniform(1, 2));
  }
  plan.validate();
  return plan;
}

// --- Tests -----------------------------------------------------------------------------------

TEST(PlanValidate, RandomPlansValidateAndMutationsAreCaught) {
  test::Random random;
  SCOPED_TRACE(random.trace());
  std::mt19937_64& rng = random.engine();
  for (int trial = 0; trial < kRandomTrials; ++trial) {
    Plan plan = random_plan(rng, trial % 2 == 1);
    ASSERT_NO_THROW(plan.validate());
    // Repeat the first key of some tile's span as a column: that pair would be covered twice.
    for (int64_t t = 0; t < plan.num_tiles(); ++t) {
      if (plan.tile_span_offsets[t] == plan.tile_span_offsets[t + 1]) continue;
      const int32_t key = plan.spans[plan.tile_span_offsets[t]].begin;
      plan.columns.insert(plan.columns.begin() + plan.tile_column_offsets[t], key);
      for (int64_t u = t + 1; u <= plan.num_tiles(); ++u) ++plan.tile_column_offsets[u];
      expect_error([&] { plan.validate(); }, ErrorCode::kInvalidArgument,
                   {"plan.columns", "inside span"});
      break;
    }
  }
}

TEST(PlanCoverage, MaterializedMaskMatchesElementwiseDefinition) {
  test::Random random;
  SCOPED_TRACE(random.trace());
  std::mt19937_64& rng = random.engine();
  for (int trial = 0; trial < kRandomTrials; ++trial) {
    const Plan plan = random_plan(rng, trial % 2 == 1);
    SCOPED_TRACE(plan.summary());
    const std::vector<int64_t> slot_pairs = count_plan_pairs(plan);
    ASSERT_EQ(static_cast<int64_t>(slot_pairs.size()), plan.head_slots());
    for (int64_t slot = 0; slot < plan.head_slots(); ++slot) {
      const std::vector<uint8_t> expected = brute_force_mask(plan, slot);
      ASSERT_EQ(materialize_mask(plan, slot), expected) << "head slot " << slot;
      const int64_t pairs = std::count(expected.begin(), expected.end(), 1);
      EXPECT_EQ(count_plan_pairs(plan, slot), pairs);
      EXPECT_EQ(slot_pairs[slot], pairs);
    }
  }
}

TEST(PlanCoverage, QueryOrderIsAPermutation) {
  test::Random random;
  SCOPED_TRACE(random.trace());
  std::mt19937_64& rng = random.engine();
  const Plan plan = random_plan(rng, false);
  for (int64_t slot = 0; slot < plan.head_slots(); ++slot) {
    const std::vector<int64_t> order = plan.query_order(slot);
    ASSERT_EQ(static_cast<int64_t>(order.size()), plan.shape.q_len);
    for (int64_t i = 0; i < plan.shape.q_len; ++i)
      EXPECT_EQ(plan.query_position(slot, i), order[i]);
    std::vector<int64_t> sorted = order;
    std::sort(sorted.begin(), sorted.end());
    for (int64_t i = 0; i < plan.shape.q_len; ++i) ASSERT_EQ(sorted[i], i);
  }
  expect_error([&] { (void)plan.query_position(plan.head_slots(), 0); },
               ErrorCode::kInvalidArgument, {"head_slot"});
}

TEST(PlanCoverage, WindowSinkAndBottomRightCausalAlignment) {
  // q_len 3, kv_len 8: query i aligns with key i + 5. Window 3 with sink 1.
  PlanBuilder builder({.q_len = 3, .kv_len = 8, .tile_rows = 4});
  builder.begin_head();
  builder.begin_tile(0, 3, {.window = 3, .window_sink = 1});
  builder.add_span(0, 8);
  const Plan plan = builder.finish();
  const std::vector<uint8_t> expected = {
      1, 0, 0, 1, 1, 1, 0, 0,  // query 0 -> aligned 5: sink 0, keys 3..5
      1, 0, 0, 0, 1, 1, 1, 0,  // aligned 6
      1, 0, 0, 0, 0, 1, 1, 1,  // aligned 7
  };
  EXPECT_EQ(materialize_mask(plan, 0), expected);
  EXPECT_EQ(count_plan_pairs(plan, 0), 12);
}

TEST(PlanBuilder, MergesTouchingSpansAndDeduplicatesMasks) {
  PlanBuilder builder({.heads = 2, .q_len = 5, .kv_len = 20, .tile_rows = 8});
  for (int head = 0; head < 2; ++head) {
    builder.begin_head();
    builder.begin_tile(0, 5, {.window = 4});
    builder.add_span(0, 3);
    builder.add_span(3, 6);
    builder.add_span(6, 6);  // empty: ignored
    builder.add_span(8, 10);
    builder.add_column(12);
  }
  const Plan plan = builder.finish();
  EXPECT_EQ(plan.spans, (std::vector<KeySpan>{{0, 6}, {8, 10}, {0, 6}, {8, 10}}));
  EXPECT_EQ(plan.masks.size(), 1u);
  EXPECT_EQ(plan.tile_span_offsets, (std::vector<int64_t>{0, 2, 4}));
  EXPECT_EQ(plan.head_tile_offsets, (std::vector<int64_t>{0, 1, 2}));
  EXPECT_NE(plan.summary().find("tiles=2 spans=4 strided_spans=0 columns=2"), std::string::npos)
      << plan.summary();
}

TEST(PlanBuilder, AddStridedSpanNormalisesItsEnd) {
  PlanBuilder builder({.batch = 1, .heads = 1, .q_len = 4, .kv_len = 30, .tile_rows = 4});
  builder.begin_head();
  builder.begin_tile(0, 4, {.causal = false});
  builder.add_strided_span(3, 12, 4);   // 3, 7, 11
  builder.add_strided_span(12, 19, 3);  // 12, 15, 18 -> end 19
  builder.add_strided_span(20, 21, 5);  // one key: a column
  builder.add_strided_span(22, 24, 1);  // a span
  builder.add_strided_span(25, 25, 2);  // nothing
  const Plan plan = builder.finish();
  EXPECT_EQ(plan.strided_spans, (std::vector<StridedSpan>{{3, 12, 4}, {12, 19, 3}}));
  EXPECT_EQ(plan.strided_spans[1].count(), 3);
  EXPECT_EQ(plan.columns, (std::vector<int32_t>{20}));
  EXPECT_EQ(plan.spans, (std::vector<KeySpan>{{22, 24}}));
  EXPECT_EQ(count_plan_pairs(plan, 0), 4 * (3 + 3 + 1 + 2));
  PlanBuilder misuse({.batch = 1, .heads = 1, .q_len = 4, .kv_len = 30, .tile_rows = 4});
  misuse.begin_head();
  misuse.begin_tile(0, 4);
  expect_error([&] { misuse.add_strided_span(0, 8, 0); }, ErrorCode::kInvalidArgument,
               {"add_strided_span step", ">= 1"});
  expect_error([&] { misuse.add_strided_span(20, 33, 4); }, ErrorCode::kInvalidArgument,
               {"add_strided_span", "kv_len = 30", "last key 32"});
  // An end past kv_len is fine while the keys are not.
  misuse.add_strided_span(20, 32, 4);  // 20, 24, 28
  EXPECT_EQ(misuse.finish().strided_spans, (std::vector<StridedSpan>{{20, 29, 4}}));
}

TEST(PlanBuilder, ReportsMisuse) {
  PlanBuilder builder({.heads = 1, .q_len = 4, .kv_len = 4});
  expect_error([&] { builder.begin_tile(0, 4); }, ErrorCode::kInvalidArgument, {"begin_head"});
  builder.begin_head();
  expect_error([&] { builder.add_span(0, 2); }, ErrorCode::kInvalidArgument, {"begin_tile"});
  expect_error([&] { builder.add_strided_span(0, 4, 2); }, ErrorCode::kInvalidArgument,
               {"add_strided_span", "begin_tile"});
  builder.begin_tile(0, 4);
  expect_error([&] { builder.add_span(2, 5); }, ErrorCode::kInvalidArgument,
               {"add_span", "kv_len = 4"});
  expect_error([&] { builder.add_column(4); }, ErrorCode::kInvalidArgument, {"add_column"});
  expect_error([&] { builder.begin_head(); }, ErrorCode::kInvalidArgument,
               {"begin_head", "at most 1"});
  PlanBuilder unfinished({.heads = 3, .q_len = 4, .kv_len = 4});
  unfinished.begin_head();
  expect_error([&] { (void)unfinished.finish(); }, ErrorCode::kInvalidArgument,
               {"finish", "3 head slots"});
}

TEST(PlanLayout, AttachLayoutFillsTokenArrays) {
  const ModalityLayout layout = LayoutBuilder().text(3).image({1, 2, 2}, false).text(2).build();
  PlanBuilder builder({.q_len = 9, .kv_len = 9, .tile_rows = 9});
  builder.attach_layout(layout);
  builder.begin_head();
  builder.begin_tile(0, 9, {.same_media = true});
  builder.add_span(0, 9);
  const Plan plan = builder.finish();
  EXPECT_EQ(plan.token_media, layout.token_media());
  // Only image tokens 3..6 attend, causally, to each other.
  EXPECT_EQ(count_plan_pairs(plan, 0), 1 + 2 + 3 + 4);
  Plan mismatched = plan;
  expect_error([&] { mismatched.attach_layout(ModalityLayout::text_only(5)); },
               ErrorCode::kInvalidArgument, {"layout", "length 9"});
}

TEST(PlanCoverage, MinDistanceAndPeriodicBand) {
  PlanBuilder builder({.q_len = 12, .kv_len = 12, .tile_rows = 12});
  builder.begin_head();
  builder.begin_tile(0, 12, {.min_distance = 2, .period = 5, .band = 2});
  builder.add_span(0, 12);
  const Plan plan = builder.finish();
  const std::vector<uint8_t> mask = materialize_mask(plan, 0);
  for (int64_t q = 0; q < 12; ++q) {
    for (int64_t k = 0; k < 12; ++k) {
      const int64_t distance = q - k;
      const bool expected = distance >= 2 && distance % 5 < 2;
      EXPECT_EQ(mask[q * 12 + k] != 0, expected) << "query " << q << ", key " << k;
    }
  }
}

// Pass 0 keeps the even keys of each row as columns, pass 1 the odd ones in a strided order.
Plan two_pass_plan() {
  const PlanShape shape{.heads = 2, .q_len = 9, .kv_len = 11, .tile_rows = 4};
  PlanBuilder even(shape);
  PlanBuilder odd(shape);
  for (int64_t head = 0; head < shape.heads; ++head) {
    even.begin_head();
    odd.begin_head({{0, 3, 3}, {1, 3, 3}, {2, 3, 3}});
    for (int64_t begin = 0; begin < shape.q_len; begin += shape.tile_rows) {
      even.begin_tile(begin, std::min(shape.q_len, begin + shape.tile_rows));
      odd.begin_tile(begin, std::min(shape.q_len, begin + shape.tile_rows));
      for (int64_t key = 0; key < shape.kv_len; ++key) (key % 2 == 0 ? even : odd).add_column(key);
    }
  }
  Plan plan = even.finish();
  add_pass(plan, odd.finish());
  return plan;
}

TEST(PlanPasses, CoverageIsTheUnionAndCountsAdd) {
  const Plan plan = two_pass_plan();
  EXPECT_EQ(plan.num_passes(), 2);
  EXPECT_NO_THROW(check_passes_disjoint(plan));
  // Causal, bottom-right aligned: query q keeps keys k <= q + 2.
  const std::vector<uint8_t> mask = materialize_mask(plan, 1);
  int64_t causal_pairs = 0;
  for (int64_t q = 0; q < 9; ++q) {
    for (int64_t k = 0; k < 11; ++k) {
      EXPECT_EQ(mask[q * 11 + k] != 0, k <= q + 2) << "query " << q << ", key " << k;
      causal_pairs += k <= q + 2;
    }
  }
  EXPECT_EQ(count_plan_pairs(plan, 1), causal_pairs);
  EXPECT_NE(plan.summary().find("passes=2"), std::string::npos);
}

TEST(PlanPasses, RejectsOverlapsShapesAndNesting) {
  Plan overlapping = two_pass_plan();
  overlapping.extra_passes[0].columns[0] = 0;  // pass 0's key 0 of tile 0's rows
  EXPECT_NO_THROW(overlapping.validate());
  expect_error([&] { check_passes_disjoint(overlapping); }, ErrorCode::kInvalidArgument,
               {"plan.extra_passes", "both compute query", "and key 0"});

  Plan reshaped = two_pass_plan();
  Plan other = two_pass_plan();
  other.extra_passes.clear();
  other.shape.kv_len = 12;
  expect_error([&] { add_pass(reshaped, other); }, ErrorCode::kInvalidArgument,
               {"plan.extra_passes", "pass 2 has shape", "kv_len=12"});
  EXPECT_EQ(reshaped.num_passes(), 2);  // left as it was

  Plan nested = two_pass_plan();
  expect_error([&] { add_pass(nested, two_pass_plan()); }, ErrorCode::kInvalidArgument,
               {"plan.extra_passes", "pass 2 has 1 passes of its own"});

  Plan broken = two_pass_plan();
  broken.extra_passes[0].tile_masks[0] = 7;
  expect_error([&] { broken.validate(); }, ErrorCode::kInvalidArgument,
               {"plan.extra_passes: pass 1: plan.tile_masks", "mask 7"});
  expect_error([&] { (void)broken.pass(2); }, ErrorCode::kInvalidArgument, {"pass", "[0, 2)"});
  expect_error([&] { (void)to_minference_index(two_pass_plan()); }, ErrorCode::kUnsupported,
               {"to_minference_index", "2 passes"});
}

}  // namespace
}  // namespace mmsparse
