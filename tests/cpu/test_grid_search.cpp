// The grid search (stride and phase of a grid head): it finds planted strides and phases, its
// margin and given lines reproduce it, a diagonal window with slash lines adds no spans, and it
// finds the frame tokens of synthetic video grid heads.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <numeric>
#include <string>
#include <vector>

#include "common/masked_oracle.h"
#include "common/random.h"
#include "cpu/attention_helpers.h"
#include "cpu/dynamic_helpers.h"
#include "mmsparse/attention.h"
#include "mmsparse/patterns.h"
#include "mmsparse/status.h"
#include "methods/estimate/estimation.h"
#include "methods/grid/grid.h"

namespace mmsparse {
namespace {

// q, k [1, n, 1, dim] whose attention has slash lines at every multiple of `stride` (each token
// carries the unit vector of its phase position % stride, matched strongly by queries of the same
// phase) and a vertical line on the keys of phase `vertical_phase`. Phases are orthogonal, so the
// lines are the only structure.
struct PlantedGrid {
  Tensor q, k;
};

PlantedGrid planted_grid(test::Random& random, int64_t n, int64_t stride, int64_t vertical_phase) {
  constexpr int64_t kDim = 64;
  constexpr int64_t kLineDim = kDim - 1;  // phases use dims [0, stride), the vertical line 63
  constexpr double kSlashLogit = 8.0;     // logit of a same-phase key
  constexpr double kVerticalLogit = 4.0;  // extra logit of the vertical line's keys
  constexpr float kKeyNoise = 0.05f;
  const double scale = 1.0 / std::sqrt(static_cast<double>(kDim));
  PlantedGrid grid{Tensor(DType::kFloat32, {1, n, 1, kDim}),
                   Tensor(DType::kFloat32, {1, n, 1, kDim})};
  for (int64_t i = 0; i < n; ++i) {
    float* q = grid.q.data_as<float>() + i * kDim;
    float* k = grid.k.data_as<float>() + i * kDim;
    for (int64_t d = 0; d < kDim; ++d) {
      q[d] = 0.0f;
      k[d] = kKeyNoise * random.normal();
    }
    q[i % stride] = static_cast<float>(kSlashLogit / scale);
    k[i % stride] += 1.0f;
    q[kLineDim] = static_cast<float>(kVerticalLogit / scale);
    k[kLineDim] += i % stride == vertical_phase ? 1.0f : 0.0f;
  }
  return grid;
}

// The grid search on the estimate of rows [end - last_q, end) over all keys.
detail::GridLines search_head(const Tensor& q, const Tensor& k, const detail::GridOptions& options,
                              int64_t last_q, int64_t end = 0) {
  const int64_t n = q.shape()[1];
  const PlanShape shape{.heads = 1, .q_len = n, .kv_len = n};
  const PatternInputs inputs{q.view(), k.view()};
  detail::KeyCache cache;
  const detail::HeadOperands operands(inputs, shape, 0, cache);
  const int64_t rows_end = end == 0 ? n : end;
  std::vector<int64_t> rows(static_cast<std::size_t>(std::min(last_q, rows_end)));
  std::iota(rows.begin(), rows.end(), rows_end - static_cast<int64_t>(rows.size()));
  return detail::search_grid(
      detail::estimate_last_queries(operands, rows, detail::KeySpace::all_keys(n), 0), options);
}

TEST(Grid, SearchFindsAPlantedStrideAndPhase) {
  test::Random random;
  SCOPED_TRACE(random.trace());
  constexpr int kPlantedTrials = 10;
  for (int trial = 0; trial < kPlantedTrials; ++trial) {
    const int64_t stride = random.uniform_int(5, 40);
    const int64_t phase = random.uniform_int(0, stride - 1);
    // Long enough that lines lie beyond the default sink (30) and local window (100).
    constexpr int64_t kMinLength = 400;
    const int64_t shortest = std::max(kMinLength, 12 * stride);
    const int64_t n = test::random_length(random, shortest, shortest + 8 * stride);
    SCOPED_TRACE("stride " + std::to_string(stride) + ", phase " + std::to_string(phase) + ", n " +
                 std::to_string(n));
    const PlantedGrid grid = planted_grid(random, n, stride, phase);
    detail::GridOptions options{.stride = 0, .max_stride = 1024, .sink = 30, .local = 100};
    const detail::GridLines found = search_head(grid.q, grid.k, options, 64);
    EXPECT_EQ(found.stride, stride);
    EXPECT_EQ(found.phase, phase);
    options.hline = options.vline = false;  // slash lines alone give the stride
    EXPECT_EQ(search_head(grid.q, grid.k, options, 64).stride, stride);

    // The plan groups rows by phase: runs step by the stride.
    const PatternInputs inputs{grid.q.view(), grid.k.view()};
    const Plan plan =
        build_plan(PatternSpec::parse("grid"), {.q_len = n, .kv_len = n}, nullptr, &inputs);
    ASSERT_FALSE(plan.runs.empty());
    EXPECT_EQ(plan.runs.front().step, stride);
  }
}

// search_grid's margin: positive and clear on a planted grid, 0 on a tie (no evidence: every
// candidate scores 0). make_grid_pattern with the lines found rebuilds build_plan's plan exactly
// (the oracle the GPU builder's conversion is compared with).
TEST(Grid, MarginAndGivenLinesReproduceTheSearch) {
  test::Random random;
  SCOPED_TRACE(random.trace());
  constexpr int64_t kStride = 17;
  constexpr int64_t kPhase = 5;
  constexpr int64_t kLength = 500;
  constexpr int64_t kLastQueries = 64;
  const PlantedGrid grid = planted_grid(random, kLength, kStride, kPhase);
  const PatternInputs inputs{grid.q.view(), grid.k.view()};
  const PlanShape shape{.q_len = kLength, .kv_len = kLength};
  const PatternSpec spec = resolve_pattern(PatternSpec::parse("grid"));
  detail::KeyCache cache;
  const detail::HeadOperands operands(inputs, shape, 0, cache);
  std::vector<int64_t> rows(kLastQueries);
  std::iota(rows.begin(), rows.end(), kLength - kLastQueries);
  const detail::Estimate estimate = detail::estimate_last_queries(
      operands, rows, detail::KeySpace::all_keys(kLength), shape.causal_offset());
  double margin = 0.0;
  const detail::GridLines lines =
      detail::search_grid(estimate, detail::grid_options(spec), &margin);
  EXPECT_EQ(lines.stride, kStride);
  EXPECT_EQ(lines.phase, kPhase);
  EXPECT_GT(margin, 0.0);
  EXPECT_EQ(detail::search_grid(detail::Estimate{}, detail::grid_options(spec), &margin).stride,
            detail::kMinStride);
  EXPECT_EQ(margin, 0.0);

  PlanBuilder builder(shape);
  detail::build_dynamic_head(builder, spec, {shape, nullptr, &inputs, 0, &cache},
                             [&](const detail::Estimate&) {
                               return detail::make_grid_pattern(lines, detail::grid_options(spec));
                             });
  const Plan given = builder.finish();
  const Plan searched = build_plan(spec, shape, nullptr, &inputs);
  EXPECT_EQ(given.runs, searched.runs);
  EXPECT_EQ(given.head_tile_offsets, searched.head_tile_offsets);
  EXPECT_EQ(given.tiles, searched.tiles);
  EXPECT_EQ(given.tile_span_offsets, searched.tile_span_offsets);
  EXPECT_EQ(given.spans, searched.spans);
  EXPECT_EQ(given.tile_column_offsets, searched.tile_column_offsets);
  EXPECT_EQ(given.columns, searched.columns);
}

// The default diagonal window (local=1) with slash lines on: each row's diagonal is its own
// slash key (distance 0), so phase tiles read no one-key window spans (a key chunk each on the
// engine) and the plan covers exactly the pairs of the window-free plan.
TEST(Grid, DiagonalWindowWithSlashLinesAddsNoSpans) {
  test::Random random;
  SCOPED_TRACE(random.trace());
  constexpr int64_t kStride = 23;
  constexpr int64_t kPhase = 7;
  const int64_t n = test::random_length(random, 600, 900);
  const PlantedGrid grid = planted_grid(random, n, kStride, kPhase);
  const PatternInputs inputs{grid.q.view(), grid.k.view()};
  const PlanShape shape{.q_len = n, .kv_len = n};
  const Plan diagonal =
      build_plan(PatternSpec::parse("grid:stride=23,local=1,hline=0"), shape, nullptr, &inputs);
  const Plan window_free =
      build_plan(PatternSpec::parse("grid:stride=23,local=0,hline=0"), shape, nullptr, &inputs);
  for (std::size_t t = 0; t < diagonal.tiles.size(); ++t) {
    EXPECT_LE(diagonal.tile_span_offsets[t + 1] - diagonal.tile_span_offsets[t], 1)
        << "tile " << t << ": only the sink is a span";
  }
  EXPECT_EQ(materialize_mask(diagonal, 0), materialize_mask(window_free, 0));

  // Without slash lines the diagonal is a window of its own.
  const Plan vertical_only = build_plan(
      PatternSpec::parse("grid:stride=23,local=1,hline=0,slash=0"), shape, nullptr, &inputs);
  const std::vector<uint8_t> vertical_mask = materialize_mask(vertical_only, 0);
  for (int64_t row = 0; row < n; ++row) {
    EXPECT_TRUE(vertical_mask[row * n + row]) << "row " << row;
  }
}

TEST(Grid, SearchFindsTheFrameTokensOfSyntheticVideoGridHeads) {
  constexpr int64_t kSeqLen = 8192;
  WorkloadSpec spec;  // video-qwen2.5vl-128k, scaled: 16 x 28 = 448 tokens per frame
  spec.seq_len = kSeqLen;
  const Workload workload = Workload::create(spec);
  const int64_t frame_tokens = workload.layout().video_frame_tokens();
  int64_t video_end = 0;
  for (const Segment& segment : workload.layout().segments()) {
    if (segment.modality == Modality::kVideo) video_end = segment.end;
  }
  int grid_heads = 0;
  for (int64_t head = 0; head < workload.spec().q_heads; ++head) {
    if (workload.behaviour(head) != HeadBehaviour::kGrid) continue;
    ++grid_heads;
    const test::HeadProblem problem = test::workload_head(workload, head);
    const detail::GridLines found =
        search_head(problem.q, problem.k,
                    {.stride = 0, .max_stride = 1024, .sink = 30, .local = 100}, 64, video_end);
    EXPECT_EQ(found.stride, frame_tokens) << "SYNTHETIC grid head " << head;
    const detail::GridLines text = search_head(
        problem.q, problem.k, {.stride = 0, .max_stride = 1024, .sink = 30, .local = 100}, 64);
    std::cout << "SYNTHETIC grid head " << head << ": last video rows -> stride " << found.stride
              << " phase " << found.phase << "; last (text) rows -> stride " << text.stride << "\n";
  }
  EXPECT_GT(grid_heads, 0);
}

}  // namespace
}  // namespace mmsparse
