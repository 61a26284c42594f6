// The Q/2D/item-boundary grid's lattice record bound (methods/grid/grid_group_bounds.h), which
// sizes the GPU builder's plan sections: on random interleaved layouts long enough for strided
// spans, every head slot's host plan (TileKeys in LatticeKeys::kStridedSpansInRanges) stays within
// it, and attention over the plan equals the masked-dense oracle. And what the bound gives per head
// at 1M tokens on the video preset, against the column lists it replaced.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <iostream>
#include <string>
#include <vector>

#include "common/masked_oracle.h"
#include "common/random.h"
#include "cuda/runtime/plan_decode.h"
#include "dynamic_helpers.h"
#include "methods/estimate/modality_boundary.h"
#include "methods/grid/grid.h"
#include "methods/grid/grid_group_bounds.h"
#include "methods/registry.h"
#include "mmsparse/layout.h"
#include "mmsparse/patterns.h"
#include "mmsparse/plan.h"
#include "mmsparse/tools/workload.h"

namespace mmsparse {
namespace {

constexpr int kTrials = 24;
constexpr int kOracleTrials = 4;  // the masked oracle is N × N per head slot
constexpr double kTolerance = 1e-5;
constexpr int64_t kHeadDim = 8;
constexpr int64_t kMaxLineStride = 6;  // short strides: pieces of 128 keys fit short layouts

// Text runs between videos (frames separated by 0-2 timestamp tokens) and images, long enough that
// one residue holds 128 keys in a gap, then text to exactly `length` tokens.
ModalityLayout interleaved_layout(test::Random& random, int64_t length) {
  constexpr int kAttempts = 12;
  return test::fill_layout(length, kAttempts, [&](LayoutBuilder& extended) {
    extended.text(random.uniform_int(1, 300));
    if (random.bernoulli(0.6)) {
      extended.video(
          {random.uniform_int(2, 24), random.uniform_int(2, 6), random.uniform_int(2, 6)},
          random.uniform_int(0, 2), random.bernoulli(0.5));
    } else {
      extended.image({1, random.uniform_int(2, 12), random.uniform_int(2, 12)},
                     random.bernoulli(0.5));
    }
  });
}

PatternSpec random_grid_spec(test::Random& random, int64_t boundary) {
  int64_t lines = 0;
  while (lines == 0) lines = random.uniform_int(1, 7);  // hline, vline, slash bits, not all 0
  const bool searched = random.bernoulli(0.3);
  return resolve_pattern(
      PatternSpec{"grid",
                  {{"boundary", boundary},
                   {"stride", searched ? 0 : random.uniform_int(2, kMaxLineStride)},
                   {"max_stride", kMaxLineStride},
                   {"sink", random.uniform_int(0, 40)},
                   {"local", random.uniform_int(0, 9)},
                   {"last_q", random.uniform_int(1, 16)},
                   {"hline", lines & 1},
                   {"vline", (lines >> 1) & 1},
                   {"slash", (lines >> 2) & 1}}});
}

// Σ over the head slot's tiles.
detail::LatticeRecordBound slot_records(const Plan& plan, int64_t slot) {
  const int64_t first = plan.head_tile_offsets[slot];
  const int64_t last = plan.head_tile_offsets[slot + 1];
  return {plan.tile_strided_offsets[last] - plan.tile_strided_offsets[first],
          plan.tile_column_offsets[last] - plan.tile_column_offsets[first]};
}

detail::LatticeRecordBound head_bound(const PatternSpec& spec, const PlanShape& shape,
                                      const ModalityLayout& layout) {
  const detail::GridOptions options = detail::grid_options(spec);
  detail::LatticeRecordBound total;
  for (const detail::QueryGroup& group : detail::query_groups(spec, shape, &layout)) {
    const detail::LatticeRecordBound bound =
        detail::grouped_grid_lattice_bound(group, options, shape);
    total.strided_spans += bound.strided_spans;
    total.columns += bound.columns;
  }
  return total;
}

// Every head slot's strided spans and columns within the lattice bound of the spec's heads;
// returns their sums over the slots.
detail::LatticeRecordBound expect_within_bound(const Plan& plan, const PatternSpec& spec,
                                               const PlanShape& shape,
                                               const ModalityLayout& layout) {
  const detail::LatticeRecordBound bound = head_bound(spec, shape, layout);
  detail::LatticeRecordBound total;
  for (int64_t slot = 0; slot < plan.head_slots(); ++slot) {
    const detail::LatticeRecordBound records = slot_records(plan, slot);
    EXPECT_LE(records.strided_spans, bound.strided_spans) << "head slot " << slot;
    EXPECT_LE(records.columns, bound.columns) << "head slot " << slot;
    total.strided_spans += records.strided_spans;
    total.columns += records.columns;
  }
  return total;
}

TEST(GridGroupBounds, HostPlansStayWithinTheLatticeBound) {
  test::Random random;
  SCOPED_TRACE(random.trace());
  int64_t strided_spans = 0;
  for (int trial = 0; trial < kTrials; ++trial) {
    const bool oracle = trial < kOracleTrials;
    const int64_t kv_len = random.uniform_int(oracle ? 300 : 800, oracle ? 1200 : 4000);
    const int64_t q_len = kv_len - random.uniform_int(0, 40);
    const int64_t kv_heads = random.uniform_int(1, 2);
    const int64_t tile_rows = int64_t{8} << random.uniform_int(0, 4);
    const PlanShape shape{1, kv_heads * random.uniform_int(1, 2), q_len, kv_len, tile_rows};
    const ModalityLayout layout = interleaved_layout(random, kv_len);
    const PatternSpec spec = random_grid_spec(random, random.uniform_int(2, 4));
    SCOPED_TRACE(spec.to_string() + " q_len=" + std::to_string(q_len) +
                 " tile_rows=" + std::to_string(tile_rows) + " layout " + layout.to_json());
    const Tensor q = random.normal_tensor(DType::kFloat32, {1, q_len, shape.heads, kHeadDim});
    const Tensor k = random.normal_tensor(DType::kFloat32, {1, kv_len, kv_heads, kHeadDim});
    const PatternInputs inputs{q.view(), k.view()};
    const Plan plan = build_plan(spec, shape, &layout, &inputs);
    ASSERT_NO_THROW(plan.validate());
    strided_spans += expect_within_bound(plan, spec, shape, layout).strided_spans;
    if (oracle) {
      const Tensor v = random.normal_tensor(DType::kFloat32, {1, kv_len, kv_heads, kHeadDim});
      test::expect_plan_equals_masked_oracle(plan, q.view(), k.view(), v.view(), kTolerance);
    }
  }
  EXPECT_GT(strided_spans, 0) << "no trial's lines made a strided span";
}

// Fixed strides longer than a group's runs of rows (frame-like, as searched configs fix them): a
// non-primary space's residues are then fewer than the stride, so the bound's residue-key and
// chunk terms are the ones that bind; the host plans must still fit, with and without a window.
TEST(GridGroupBounds, HostPlansWithLongFixedStridesStayWithinTheLatticeBound) {
  constexpr int kLongStrideTrials = 16;
  constexpr int64_t kMinFixedStride = 16;
  constexpr int64_t kMaxFixedStride = 160;
  test::Random random;
  SCOPED_TRACE(random.trace());
  int64_t columns = 0;
  for (int trial = 0; trial < kLongStrideTrials; ++trial) {
    const int64_t kv_len = random.uniform_int(1500, 5000);
    const int64_t q_len = kv_len - random.uniform_int(0, 40);
    const int64_t tile_rows = int64_t{16} << random.uniform_int(0, 3);
    const PlanShape shape{1, random.uniform_int(1, 2), q_len, kv_len, tile_rows};
    const ModalityLayout layout = interleaved_layout(random, kv_len);
    const int64_t stride = random.uniform_int(kMinFixedStride, kMaxFixedStride);
    const PatternSpec spec = resolve_pattern(
        PatternSpec{"grid",
                    {{"boundary", random.uniform_int(2, 4)},
                     {"stride", stride},
                     {"max_stride", stride},
                     {"sink", random.uniform_int(0, 40)},
                     {"local", random.bernoulli(0.5) ? 0 : random.uniform_int(1, 9)},
                     {"last_q", random.uniform_int(1, 16)},
                     {"hline", 0},
                     {"vline", random.uniform_int(0, 1)},
                     {"slash", 1}}});
    SCOPED_TRACE(spec.to_string() + " q_len=" + std::to_string(q_len) +
                 " tile_rows=" + std::to_string(tile_rows) + " layout " + layout.to_json());
    const Tensor q = random.normal_tensor(DType::kFloat32, {1, q_len, shape.heads, kHeadDim});
    const Tensor k = random.normal_tensor(DType::kFloat32, {1, kv_len, 1, kHeadDim});
    const PatternInputs inputs{q.view(), k.view()};
    const Plan plan = build_plan(spec, shape, &layout, &inputs);
    columns += expect_within_bound(plan, spec, shape, layout).columns;
  }
  EXPECT_GT(columns, 0) << "no trial's lines made a column";
}

// The default grid at 1M tokens on the SYNTHETIC hour-long video preset, per head slot: the lines'
// records now, against the column lists the plan was sized for before (every residue key below a
// group's last frontier, per tile, in every space), at both kernel tile heights.
TEST(GridGroupBounds, OneMillionTokenVideoHeadFitsOneGpu) {
  constexpr int64_t kMaxLatticeBytesPerHead = int64_t{512} << 20;
  const Workload workload = Workload::create({.preset = "video-qwen2.5vl-1m"});
  const ModalityLayout& layout = workload.layout();
  const int64_t n = layout.length();
  for (const int64_t boundary : {2, 3, 4}) {
    for (const int64_t tile_rows : {64, 128}) {
      const PlanShape shape{1, 1, n, n, tile_rows};
      PatternSpec spec = resolve_pattern(PatternSpec::parse("grid"));
      spec.params["boundary"] = boundary;
      const detail::GridOptions options = detail::grid_options(spec);
      const int64_t residues = (options.slash ? 1 : 0) + (options.vline ? 1 : 0);
      const detail::LatticeRecordBound bound = head_bound(spec, shape, layout);
      const int64_t bytes = bound.strided_spans * static_cast<int64_t>(sizeof(cuda::SpanRecord)) +
                            bound.columns * static_cast<int64_t>(sizeof(int32_t));
      int64_t listed_columns = 0;  // the former bound: every line key listed
      for (const detail::QueryGroup& group : detail::query_groups(spec, shape, &layout)) {
        const int64_t last = group.rows.back().end - 1;
        const detail::KeySpace& own = group.key_spaces[group.primary];
        const int64_t own_keys = own.frontier(last);
        const detail::StrideCandidates strides = detail::grid_stride_candidates(options, own_keys);
        int64_t tiles = 0;
        int64_t own_columns = 0;
        for (int64_t s = strides.first; s <= strides.last; ++s) {
          tiles = std::max(tiles, detail::grouped_grid_tile_bound(group.row_count(), s, tile_rows));
          own_columns = std::max(own_columns,
                                 detail::grouped_grid_tile_bound(group.row_count(), s, tile_rows) *
                                     std::min(own_keys, residues * (own_keys / s + 1)));
        }
        listed_columns += own_columns;
        for (std::size_t s = 0; s < group.key_spaces.size(); ++s) {
          if (s != group.primary) listed_columns += tiles * group.key_spaces[s].frontier(last);
        }
      }
      const int64_t listed_bytes = listed_columns * static_cast<int64_t>(sizeof(int32_t));
      std::cout << "grid:boundary=" << boundary << " at " << n << " tokens, " << tile_rows
                << "-row tiles, per head slot: " << bound.strided_spans << " strided spans + "
                << bound.columns << " columns = " << bytes / (1 << 20)
                << " MiB (column lists: " << listed_bytes / (1 << 20) << " MiB)\n";
      EXPECT_LT(bytes, kMaxLatticeBytesPerHead);
      EXPECT_LT(bytes * 10, listed_bytes);
    }
  }
}

}  // namespace
}  // namespace mmsparse
