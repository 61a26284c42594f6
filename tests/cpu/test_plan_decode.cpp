// The CUDA backend's decoding of device plan records into a host Plan (cuda/runtime/plan_decode.h),
// without a GPU: random plans (permuted orders, uncovered rows, spans, strided spans, lattice
// groups, columns, every mask policy, token arrays) packed by this test's own encoder of the record
// formats of cuda/runtime/plan_view.cuh (spans first, strided spans or lattices after, runs without
// the empty ones), with and without lattices and with capacity sections (empty tiles after the
// real ones, stale records past the real key ranges, columns and runs), decode to the plan they
// came from; malformed records are refused naming the record. The GPU suite
// (test_gpu_plan_download.cpp) holds the decoding to the real upload and device builders.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "common/errors.h"
#include "common/key_order_plans.h"
#include "common/random.h"
#include "core/mask_rule.h"
#include "cuda/runtime/plan_decode.h"
#include "gpu/plan_equality.h"
#include "gpu/plan_generators.h"
#include "mmsparse/layout.h"
#include "mmsparse/plan.h"
#include "mmsparse/status.h"

namespace mmsparse {
namespace {

using cuda::PlanRecords;
using cuda::RunRecord;
using cuda::SpanRecord;
using cuda::TileRecord;
using test::Random;
using testing::expect_error;

constexpr int kRandomTrials = 60;
constexpr int32_t kLatticeWidth = 8;  // plan_view.cuh's kLatticeWidth
// A value no real record holds, for the stale records past the real ones of a capacity section.
constexpr int32_t kStale = -7;

struct EncodeOptions {
  bool lattices = false;      // merge groups of kLatticeWidth strided spans, as the upload does
  int64_t spare_runs = 0;     // stale run records after the real ones
  int64_t spare_tiles = 0;    // empty (zero) tiles after the real ones
  int64_t spare_records = 0;  // stale key ranges and columns after the real ones
};

// Whether strided spans [s, s + kLatticeWidth) of `spans` (all before `last`) form a lattice:
// one step and count, consecutive begins.
bool lattice_at(const std::vector<StridedSpan>& spans, int64_t s, int64_t last) {
  if (last - s < kLatticeWidth) return false;
  for (int64_t j = 1; j < kLatticeWidth; ++j) {
    if (spans[s + j].step != spans[s].step || spans[s + j].begin != spans[s].begin + j ||
        spans[s + j].count() != spans[s].count()) {
      return false;
    }
  }
  return true;
}

// A plan with key orders: the orders one after another, each padded to the longest, and a shift
// per key range (plan_view.cuh's kSpanInPlace for ranges read in place).
void encode_key_orders(const Plan& plan, PlanRecords& records) {
  for (const std::vector<int32_t>& order : plan.key_orders) {
    records.key_order_slots = std::max(records.key_order_slots, static_cast<int64_t>(order.size()));
  }
  for (const std::vector<int32_t>& order : plan.key_orders) {
    records.key_orders.insert(records.key_orders.end(), order.begin(), order.end());
    records.key_orders.resize(records.key_orders.size() + records.key_order_slots - order.size(),
                              kPaddingKey);
  }
}

void encode_key_ranges(const Plan& plan, int64_t t, bool lattices, PlanRecords& out) {
  std::vector<SpanRecord>& records = out.key_ranges;
  const int32_t order = plan.tile_key_order(t);
  const int64_t first_row = order == kKeysInPlace ? 0 : order * out.key_order_slots;
  for (int64_t s = plan.tile_span_offsets[t]; s < plan.tile_span_offsets[t + 1]; ++s) {
    const KeySpan& span = plan.spans[s];
    records.push_back({static_cast<int32_t>(first_row + span.begin),
                       static_cast<int32_t>(first_row + span.end), 1, 1});
    if (!plan.has_key_orders()) continue;
    out.span_shifts.push_back(order == kKeysInPlace
                                  ? cuda::kSpanInPlace
                                  : static_cast<int32_t>(plan.key_orders[order][span.end - 1] -
                                                         (first_row + span.end - 1)));
  }
  const int64_t last = plan.tile_strided_offsets[t + 1];
  for (int64_t s = plan.tile_strided_offsets[t]; s < last;) {
    const StridedSpan& lead = plan.strided_spans[s];
    if (lattices && lattice_at(plan.strided_spans, s, last)) {
      const auto end =
          static_cast<int32_t>(lead.begin + (lead.count() - 1) * lead.step + kLatticeWidth);
      records.push_back({lead.begin, end, lead.step, kLatticeWidth});
      s += kLatticeWidth;
      continue;
    }
    records.push_back({lead.begin, lead.end, lead.step, 1});
    ++s;
  }
  if (plan.has_key_orders()) out.span_shifts.resize(records.size(), cuda::kSpanInPlace);
}

// One pass's records as the plan_view.cuh formats lay them out (this test's own encoder).
PlanRecords encode(const Plan& plan, const EncodeOptions& options) {
  PlanRecords records;
  records.shape = plan.shape;
  records.head_run_offsets = {0};
  if (plan.has_key_orders()) encode_key_orders(plan, records);
  for (int64_t slot = 0; slot < plan.head_slots(); ++slot) {
    int32_t order_begin = 0;
    for (int64_t r = plan.head_run_offsets[slot]; r < plan.head_run_offsets[slot + 1]; ++r) {
      const QueryRun& run = plan.runs[r];
      if (run.count == 0) continue;
      records.runs.push_back(
          {order_begin, static_cast<int32_t>(run.start), static_cast<int32_t>(run.step)});
      order_begin += static_cast<int32_t>(run.count);
    }
    records.head_run_offsets.push_back(static_cast<int64_t>(records.runs.size()));
    for (int64_t t = plan.head_tile_offsets[slot]; t < plan.head_tile_offsets[slot + 1]; ++t) {
      const auto ranges_begin = static_cast<int64_t>(records.key_ranges.size());
      encode_key_ranges(plan, t, options.lattices, records);
      records.tiles.push_back({static_cast<int32_t>(plan.tiles[t].begin),
                               static_cast<int32_t>(plan.tiles[t].end), static_cast<int32_t>(slot),
                               plan.tile_masks[t], ranges_begin,
                               static_cast<int64_t>(records.key_ranges.size()),
                               plan.tile_column_offsets[t], plan.tile_column_offsets[t + 1]});
    }
  }
  records.columns = plan.columns;
  records.runs.resize(records.runs.size() + options.spare_runs, {kStale, kStale, kStale});
  records.tiles.resize(records.tiles.size() + options.spare_tiles, TileRecord{});
  records.key_ranges.resize(records.key_ranges.size() + options.spare_records,
                            {kStale, kStale, kStale, kStale});
  if (plan.has_key_orders()) {
    records.span_shifts.resize(records.span_shifts.size() + options.spare_records, kStale);
  }
  records.columns.resize(records.columns.size() + options.spare_records, kStale);
  const bool tokens = std::any_of(plan.masks.begin(), plan.masks.end(),
                                  [](const MaskPolicy& m) { return m.needs_token_arrays(); });
  if (tokens) {
    for (int64_t key = 0; key < plan.shape.kv_len; ++key) {
      records.token_info.push_back(
          mask_rule::pack_token(plan.token_media[key], plan.token_modality[key]));
    }
  }
  return records;
}

test::RandomPlanOptions random_options(Random& random, bool with_layout) {
  test::RandomPlanOptions options;
  options.permute_queries = random.bernoulli(0.7);
  options.leave_gaps = random.bernoulli(0.3);
  options.masks = with_layout ? test::MaskMix::kMixed : test::MaskMix::kPositional;
  options.max_strided_spans = random.uniform_int(0, 3);
  options.max_lattice_groups = random.uniform_int(0, 2);
  options.max_columns = random.bernoulli(0.2) ? 0 : 96;
  return options;
}

TEST(PlanDecode, RandomPlansRoundTrip) {
  Random random;
  SCOPED_TRACE(random.trace());
  int64_t lattice_records = 0;
  for (int trial = 0; trial < kRandomTrials; ++trial) {
    const int64_t tile_rows = random.bernoulli(0.5) ? 64 : 128;
    const int64_t q_len = random.uniform_int(1, 700);
    const int64_t kv_len = std::max<int64_t>(q_len + random.uniform_int(-40, 300), 70);
    const PlanShape shape{random.uniform_int(1, 2), random.uniform_int(1, 7), q_len, kv_len,
                          tile_rows};
    const bool with_layout = random.bernoulli(0.4);
    const ModalityLayout layout = test::mixed_layout(random, kv_len);
    const Plan plan = test::random_plan(random, shape, random_options(random, with_layout),
                                        with_layout ? &layout : nullptr);
    EncodeOptions options;
    options.lattices = random.bernoulli(0.6);
    if (random.bernoulli(0.5)) {
      options.spare_runs = random.uniform_int(0, 9);
      options.spare_tiles = random.uniform_int(1, 40);
      options.spare_records = random.uniform_int(1, 50);
    }
    SCOPED_TRACE(plan.summary() + (options.lattices ? " with lattices" : "") +
                 (options.spare_tiles > 0 ? " with capacity sections" : ""));
    const PlanRecords records = encode(plan, options);
    for (const SpanRecord& range : records.key_ranges) lattice_records += range.width > 1 ? 1 : 0;
    const Plan decoded = cuda::decode_plan_records(records, plan.masks);
    test::expect_decoded_plan(decoded, plan);
    const cuda::RecordExtents extents = cuda::real_record_extents(records.tiles);
    EXPECT_EQ(extents.columns, static_cast<int64_t>(plan.columns.size()));
    EXPECT_EQ(extents.key_ranges,
              static_cast<int64_t>(records.key_ranges.size()) - options.spare_records);
  }
  EXPECT_GT(lattice_records, 0) << "no trial encoded a lattice: the expansion went untested";
}

// Two head slots of 100 rows over 120 keys: a permuted order, two tiles each, a span, a strided
// span and columns.
Plan small_plan() {
  PlanBuilder builder({1, 2, 100, 120, 64});
  for (int64_t slot = 0; slot < 2; ++slot) {
    builder.begin_head({{0, 50, 2}, {1, 50, 2}});
    builder.begin_tile(0, 64);
    builder.add_span(0, 10);
    builder.add_strided_span(11, 120, 3);
    builder.begin_tile(64, 100, MaskPolicy{.causal = false});
    builder.add_span(20, 40);
    builder.add_column(50);
    builder.add_column(61);
  }
  return builder.finish();
}

TEST(PlanDecode, MalformedRecordsAreRefusedNamingTheRecord) {
  const Plan plan = small_plan();
  const auto refused = [&](const PlanRecords& records, std::initializer_list<std::string> words) {
    expect_error([&] { (void)cuda::decode_plan_records(records, plan.masks); },
                 ErrorCode::kBackendError, words);
  };
  EncodeOptions capacity;
  capacity.spare_tiles = 3;
  const PlanRecords good = encode(plan, capacity);
  test::expect_decoded_plan(cuda::decode_plan_records(good, plan.masks), plan);

  PlanRecords records = good;
  records.tiles[1].mask = 2;
  refused(records, {"tile 1", "mask 2", "2 policies"});
  records = good;
  records.tiles.back().span_end = 1;  // an empty capacity tile that is not empty
  refused(records, {"tile 6", "not empty"});
  records = good;
  records.tiles[3].span_end = static_cast<int64_t>(records.key_ranges.size()) + 1;
  refused(records, {"tile 3", "key ranges"});
  records = good;
  records.tiles[2].column_end = static_cast<int64_t>(records.columns.size()) + 2;
  refused(records, {"tile 2", "columns"});
  records = good;
  records.tiles[3].head_slot = 0;  // after a tile of head slot 1
  refused(records, {"tile 3", "head slot 0"});
  records = good;
  records.runs[1].order_begin = 0;
  refused(records, {"run 0 of head slot 0", "order index 0"});
  records = good;
  records.head_run_offsets.pop_back();
  refused(records, {"head run offsets", "3 offsets"});
  records = good;
  records.key_ranges[1].width = 0;
  refused(records, {"key range 1", "width 0"});
  records = good;
  records.token_info.assign(3, 0);
  refused(records, {"token info", "120 tokens"});
}

// Columns that do not start at record 0, or not back to back, are gathered tile by tile.
TEST(PlanDecode, ColumnsOutOfOrderAreGathered) {
  const Plan plan = small_plan();
  PlanRecords records = encode(plan, {});
  constexpr int64_t kLead = 5;
  records.columns.insert(records.columns.begin(), kLead, kStale);
  records.columns.insert(records.columns.end(), kLead, kStale);
  // The last tile's columns move past the stale records at the end.
  const auto last = static_cast<std::size_t>(plan.num_tiles() - 1);
  for (std::size_t t = 0; t < records.tiles.size(); ++t) {
    const int64_t shift = t == last ? 2 * kLead : kLead;
    if (t == last) {
      std::rotate(records.columns.begin() + records.tiles[t].column_begin + kLead,
                  records.columns.begin() + records.tiles[t].column_end + kLead,
                  records.columns.end());
    }
    records.tiles[t].column_begin += shift;
    records.tiles[t].column_end += shift;
  }
  test::expect_decoded_plan(cuda::decode_plan_records(records, plan.masks), plan);
}

// The mask table is the caller's, so policies the records clamp (a window past kv_len) survive.
TEST(PlanDecode, MaskPoliciesComeFromTheTable) {
  PlanBuilder builder({1, 1, 50, 60, 64});
  builder.begin_head();
  const MaskPolicy wide_window{.window = 1000, .window_sink = 5};
  builder.begin_tile(0, 50, wide_window);
  builder.add_span(0, 60);
  const Plan plan = builder.finish();
  const Plan decoded = cuda::decode_plan_records(encode(plan, {}), plan.masks);
  test::expect_decoded_plan(decoded, plan);
  EXPECT_EQ(decoded.masks.front().window, 1000);
}

// Random key-ordered plans (tests/common/key_order_plans.h: orders with padding between and after
// their blocks, in-place tiles beside key-ordered ones, permuted query orders, rows in no tile)
// decode to the plan they came from, their spans back on slots of their orders.
TEST(PlanDecode, RandomKeyOrderPlansRoundTrip) {
  Random random;
  SCOPED_TRACE(random.trace());
  int64_t ordered_tiles = 0;
  int64_t trimmed_orders = 0;
  for (int trial = 0; trial < kRandomTrials; ++trial) {
    test::KeyOrderPlanOptions options;
    options.batch = random.uniform_int(1, 2);
    options.heads = random.uniform_int(1, 4);
    options.q_len = random.uniform_int(1, 300);
    options.kv_len = options.q_len + random.uniform_int(0, 200);
    options.tile_rows = random.bernoulli(0.5) ? 16 : 64;
    options.orders = random.uniform_int(1, 3);
    options.in_place_share = random.uniform(0.0, 0.6);
    const Plan plan = test::random_key_order_plan(random, options).plan;
    if (!plan.has_key_orders()) continue;
    EncodeOptions encoding;
    if (random.bernoulli(0.5)) {
      encoding.spare_tiles = random.uniform_int(1, 20);
      encoding.spare_records = random.uniform_int(1, 30);
    }
    SCOPED_TRACE(plan.summary() + (encoding.spare_tiles > 0 ? " with capacity sections" : ""));
    const Plan decoded = cuda::decode_plan_records(encode(plan, encoding), plan.masks);
    test::expect_decoded_plan(decoded, plan);
    ordered_tiles += std::count_if(decoded.tile_key_orders.begin(), decoded.tile_key_orders.end(),
                                   [](int32_t order) { return order != kKeysInPlace; });
    for (const std::vector<int32_t>& order : plan.key_orders) {
      trimmed_orders += !order.empty() && order.back() == kPaddingKey ? 1 : 0;
    }
  }
  EXPECT_GT(ordered_tiles, 0) << "no trial decoded a key-ordered tile";
  EXPECT_GT(trimmed_orders, 0) << "no order ended in padding: the trimming went untested";
}

// A head of 12 rows over 12 keys: tile 0 in place, tile 1 through an order with padding, two spans
// (keys 0, 1, 8, 9 and keys 2 to 5).
Plan small_key_order_plan() {
  PlanBuilder builder({.batch = 1, .heads = 1, .q_len = 12, .kv_len = 12, .tile_rows = 4});
  const int32_t order = builder.add_key_order(
      {0, 1, 8, 9, kPaddingKey, kPaddingKey, 2, 3, 4, 5, 6, 7, 10, 11, kPaddingKey});
  builder.begin_head();
  builder.begin_tile(0, 4);
  builder.add_span(0, 4);
  builder.begin_tile(8, 12, {}, order);
  builder.add_span(0, 4);
  builder.add_span(6, 10);
  return builder.finish();
}

TEST(PlanDecode, MalformedKeyOrderRecordsAreRefusedNamingTheRecord) {
  const Plan plan = small_key_order_plan();
  const auto refused = [&](const PlanRecords& records, std::initializer_list<std::string> words) {
    expect_error([&] { (void)cuda::decode_plan_records(records, plan.masks); },
                 ErrorCode::kBackendError, words);
  };
  const PlanRecords good = encode(plan, {});
  ASSERT_EQ(good.key_order_slots, 15);
  const Plan decoded = cuda::decode_plan_records(good, plan.masks);
  test::expect_decoded_plan(decoded, plan);
  EXPECT_EQ(decoded.tile_key_orders, (std::vector<int32_t>{kKeysInPlace, 0}));
  EXPECT_EQ(decoded.key_orders.front().size(), 14u) << "the trailing padding slot is dropped";

  PlanRecords records = good;
  records.span_shifts[1] += 1;
  refused(records, {"key range 1 of tile 1", "shift"});
  records = good;
  records.span_shifts[2] = cuda::kSpanInPlace;
  refused(records, {"key range 2 of tile 1", "one order"});
  records = good;
  records.key_ranges[2].end = 16;  // past order 0's 15 rows
  refused(records, {"key range 2 of tile 1", "one order's rows"});
  records = good;
  records.key_ranges[1].step = 2;
  refused(records, {"key range 1 of tile 1", "step 1"});
  records = good;
  records.span_shifts.pop_back();
  refused(records, {"tile 1", "span shifts"});
  records = good;
  records.key_orders.pop_back();
  refused(records, {"key orders", "multiple"});
}

}  // namespace
}  // namespace mmsparse
