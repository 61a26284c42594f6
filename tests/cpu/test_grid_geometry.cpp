// The GPU grid builder's index arithmetic (methods/grid/grid_geometry.h, plain C++) against the
// host builder it stands for: for random shapes, parameters and lines, every run, tile, span and
// column the arithmetic gives equals the host plan of the same lines (GridPattern through
// build_dynamic_head), and the capacity bounds the device plan is sized by hold.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "common/random.h"
#include "methods/estimate/dynamic_head.h"
#include "methods/grid/grid.h"
#include "methods/grid/grid_geometry.h"
#include "methods/registry.h"
#include "mmsparse/patterns.h"
#include "mmsparse/plan.h"

namespace mmsparse {
namespace {

namespace grid = cuda::index::grid;

constexpr int kTrials = 400;
// Strided spans need a residue of at least kGatherChunkKeys keys, which some seeds' 400 small
// shapes never reach: the test draws on (up to this many) until it has compared some.
constexpr int kMaxTrials = 4 * kTrials;
constexpr int64_t kMaxRows = 700;
constexpr int64_t kMaxShortRows = 40;
constexpr int64_t kMaxExtraKeys = 300;
constexpr int64_t kMaxFixedStride = 2000;
constexpr int64_t kMaxSearchedStride = 400;
constexpr int64_t kMaxSink = 40;
constexpr int64_t kMaxWideSink = 800;
constexpr int64_t kMaxNarrowLocal = 3;
constexpr int64_t kMaxLocal = 300;
constexpr int64_t kMaxOddTileRows = 9;
constexpr int64_t kHeadDim = 16;  // the estimate runs but the lines are given

struct Trial {
  PatternSpec spec;
  PlanShape shape;
  std::vector<detail::GridLines> lines;  // per head slot
};

Trial random_trial(test::Random& random) {
  Trial trial;
  PlanShape& shape = trial.shape;
  shape.q_len = random.bernoulli(0.5) ? random.uniform_int(1, kMaxRows)
                                      : random.uniform_int(1, kMaxShortRows);
  shape.kv_len = random.bernoulli(0.8) ? shape.q_len + random.uniform_int(0, kMaxExtraKeys)
                                       : random.uniform_int(0, shape.q_len);
  shape.tile_rows = random.bernoulli(0.7) ? (random.bernoulli(0.5) ? 64 : 128)
                                          : random.uniform_int(1, kMaxOddTileRows);
  shape.batch = random.uniform_int(1, 2);
  shape.heads = random.uniform_int(1, 2);
  const int64_t hline = random.uniform_int(0, 1);
  const int64_t vline = random.uniform_int(0, 1);
  trial.spec = resolve_pattern(
      {"grid",
       {{"stride", random.bernoulli(0.25) ? random.uniform_int(2, kMaxFixedStride) : 0},
        {"max_stride", random.uniform_int(2, kMaxSearchedStride)},
        {"hline", hline},
        {"vline", vline},
        {"slash", hline == 0 && vline == 0 ? 1 : random.uniform_int(0, 1)},
        {"sink", random.bernoulli(0.75) ? random.uniform_int(0, kMaxSink)
                                        : random.uniform_int(0, kMaxWideSink)},
        {"local", random.bernoulli(0.6) ? random.uniform_int(0, kMaxNarrowLocal)
                                        : random.uniform_int(0, kMaxLocal)},
        {"boundary", random.uniform_int(0, 1)}}});
  // Strides the device search may return: the fixed one, or [2, max(2, min(max_stride, keys / 4))].
  const detail::GridOptions options = detail::grid_options(trial.spec);
  const int64_t last =
      options.stride != 0
          ? options.stride
          : std::max(detail::kMinStride,
                     std::min(options.max_stride, shape.kv_len / detail::kMinGridLines));
  const int64_t first = options.stride != 0 ? options.stride : detail::kMinStride;
  for (int64_t slot = 0; slot < shape.head_slots(); ++slot) {
    const int64_t stride = random.uniform_int(first, last);
    trial.lines.push_back({stride, random.uniform_int(0, stride - 1)});
  }
  return trial;
}

// The host builder's plan of the given lines.
Plan host_plan(const Trial& trial, test::Random& random) {
  const PlanShape& shape = trial.shape;
  Tensor q =
      random.normal_tensor(DType::kFloat32, {shape.batch, shape.q_len, shape.heads, kHeadDim});
  Tensor k = random.normal_tensor(DType::kFloat32, {shape.batch, shape.kv_len, 1, kHeadDim});
  const PatternInputs inputs{q.view(), k.view()};
  const detail::GridOptions options = detail::grid_options(trial.spec);
  PlanBuilder builder(shape);
  detail::KeyCache cache;
  for (int64_t slot = 0; slot < shape.head_slots(); ++slot) {
    detail::build_dynamic_head(builder, trial.spec, {shape, nullptr, &inputs, slot, &cache},
                               [&](const detail::Estimate&) {
                                 return detail::make_grid_pattern(trial.lines[slot], options);
                               });
  }
  return builder.finish();
}

TEST(GridGeometry, IndexArithmeticEqualsTheHostPlan) {
  test::Random random;
  SCOPED_TRACE(random.trace());
  int64_t compared_columns = 0;
  int64_t compared_strided = 0;
  for (int t = 0;
       t < kTrials || ((compared_columns == 0 || compared_strided == 0) && t < kMaxTrials); ++t) {
    const Trial trial = random_trial(random);
    const PlanShape& shape = trial.shape;
    SCOPED_TRACE(trial.spec.to_string() + " q_len " + std::to_string(shape.q_len) + " kv_len " +
                 std::to_string(shape.kv_len) + " tile_rows " + std::to_string(shape.tile_rows));
    const Plan plan = host_plan(trial, random);
    const detail::GridOptions options = detail::grid_options(trial.spec);
    const int64_t residues = (options.slash ? 1 : 0) + (options.vline ? 1 : 0);
    for (int64_t slot = 0; slot < shape.head_slots(); ++slot) {
      SCOPED_TRACE("head slot " + std::to_string(slot) + ", stride " +
                   std::to_string(trial.lines[slot].stride) + ", phase " +
                   std::to_string(trial.lines[slot].phase));
      const grid::GridRows rows(shape.q_len, shape.kv_len, shape.tile_rows,
                                trial.lines[slot].stride);
      // Runs: none for the identity order, else each with its order index.
      const int64_t first_run = plan.head_run_offsets[slot];
      ASSERT_EQ(plan.head_run_offsets[slot + 1] - first_run, rows.identity() ? 0 : rows.runs());
      int64_t order_begin = 0;
      for (int64_t r = 0; r < plan.head_run_offsets[slot + 1] - first_run; ++r) {
        const grid::GridRun run = rows.run(r);
        const QueryRun& host = plan.runs[first_run + r];
        EXPECT_EQ(run.start, host.start) << "run " << r;
        EXPECT_EQ(run.count, host.count) << "run " << r;
        EXPECT_EQ(run.step, host.step) << "run " << r;
        EXPECT_EQ(run.order_begin, order_begin) << "run " << r;
        order_begin += host.count;
      }
      // Tiles, their spans and columns.
      const int64_t first_tile = plan.head_tile_offsets[slot];
      ASSERT_EQ(plan.head_tile_offsets[slot + 1] - first_tile, rows.tiles());
      int64_t spans = 0;
      int64_t strided = 0;
      int64_t columns = 0;
      for (int64_t position = 0; position < rows.tiles(); ++position) {
        const int64_t tile = first_tile + position;
        const grid::TileSite site = grid::locate_tile(rows, position, trial.lines[slot], options);
        ASSERT_EQ(site.begin, plan.tiles[tile].begin) << "tile " << position;
        ASSERT_EQ(site.end, plan.tiles[tile].end) << "tile " << position;
        std::vector<KeySpan> site_spans;
        std::vector<StridedSpan> site_strided;
        std::vector<int32_t> site_columns;
        if (site.sees_keys) {
          const grid::GridTile& keys = site.keys;
          for (int64_t j = 0; j < keys.span_count(); ++j) {
            const grid::KeyRange range = keys.span(j);
            site_spans.push_back(
                {static_cast<int32_t>(range.begin), static_cast<int32_t>(range.end)});
          }
          for (int64_t j = 0; j < keys.strided_count(); ++j) {
            const grid::KeyRange range = keys.strided_span(j);
            site_strided.push_back({static_cast<int32_t>(range.begin),
                                    static_cast<int32_t>(range.end),
                                    static_cast<int32_t>(keys.stride)});
          }
          const int64_t begin = keys.below(keys.column_begin());
          const int64_t end =
              keys.column_begin() < keys.column_end ? keys.below(keys.column_end) : begin;
          for (int64_t c = begin; c < end; ++c) {
            const int64_t key = keys.candidate(c);
            if (!keys.in_window(key) && keys.is_column(key)) {
              site_columns.push_back(static_cast<int32_t>(key));
            }
          }
        }
        const std::vector<KeySpan> host_spans(
            plan.spans.begin() + plan.tile_span_offsets[tile],
            plan.spans.begin() + plan.tile_span_offsets[tile + 1]);
        const std::vector<StridedSpan> host_strided(
            plan.strided_spans.begin() + plan.tile_strided_offsets[tile],
            plan.strided_spans.begin() + plan.tile_strided_offsets[tile + 1]);
        const std::vector<int32_t> host_columns(
            plan.columns.begin() + plan.tile_column_offsets[tile],
            plan.columns.begin() + plan.tile_column_offsets[tile + 1]);
        ASSERT_EQ(site_spans, host_spans) << "spans of tile " << position;
        ASSERT_EQ(site_strided, host_strided) << "strided spans of tile " << position;
        ASSERT_EQ(site_columns, host_columns) << "columns of tile " << position;
        strided += static_cast<int64_t>(site_strided.size());
        spans += static_cast<int64_t>(site_spans.size());
        columns += static_cast<int64_t>(site_columns.size());
      }
      // The bounds the device plan's sections are sized by (index::plan_grid).
      EXPECT_LE(spans, rows.tiles() + (options.local > 0 ? rows.rows : 0));
      EXPECT_LE(strided, rows.strided_bound(residues));
      EXPECT_LE(columns, rows.column_bound(residues));
      compared_columns += columns;
      compared_strided += strided;
    }
  }
  EXPECT_GT(compared_columns, 0);
  EXPECT_GT(compared_strided, 0);
}

}  // namespace
}  // namespace mmsparse
