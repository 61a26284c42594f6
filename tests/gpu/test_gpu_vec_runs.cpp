// VecAttention's run passes (src/methods/vec/vec_runs.cuh) cut each plan tile's steps of 1024 keys
// into segments, one warp each: a run crossing a segment's first key is classified by the count
// pass once the tile's segments are joined, and the write pass starts each segment from the run
// start and record offsets the count pass stored. Against the host's cut of the device's selection
// (tests/gpu/vec_selection_check.h), record for record: spans and column runs across segment
// edges, columns at them, tiles of one step and of fewer steps than segments (empty segments),
// segments of one step and of several; odd lengths, GQA 1, 4 and 7, causal and not, pooling 64
// and 128, one tile per block and union tiles.

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <string>

#include "attention_harness.h"
#include "common/random.h"
#include "cuda/runtime/engine.h"
#include "device_buffer.h"
#include "index_test_support.h"
#include "methods/estimate/index_builders.h"
#include "methods/vec/vec_device.h"
#include "mmsparse/patterns.h"
#include "mmsparse/plan.h"
#include "plan_records.h"
#include "stream_test.h"
#include "vec_selection_check.h"

namespace mmsparse::test {
namespace {

class GpuVecRuns : public StreamTest {};

// A problem of the given lengths and GQA group: a random head_dim and dtype, 128-row tiles.
ProblemSize runs_problem(Random& random, int64_t q_len, int64_t kv_len, int64_t group) {
  ProblemSize size;
  size.q_len = q_len;
  size.kv_len = kv_len;
  size.group = group;
  size.head_dim = pick(random, kHeadDims);
  size.dtype = pick(random, kDtypes);
  size.tile_rows = 128;
  size.scale = 1.0f / std::sqrt(static_cast<float>(size.head_dim));
  return size;
}

// Builds `spec` on the host and on the device over `inputs` and checks the device's selection
// within the rounding bound and its records byte for byte against the host's cut of it.
void expect_runs_match(const PatternSpec& spec, const ProblemSize& size,
                       const AttentionInputs& inputs, VecSelectionStats& stats,
                       cudaStream_t stream) {
  const PlanShape shape{size.batch, size.q_heads(), size.q_len, size.kv_len, size.tile_rows};
  const PatternInputs host{inputs.q.view, inputs.k.view, size.scale};
  const Plan host_plan = build_plan(spec, shape, nullptr, &host);
  const PatternSpec resolved = resolve_pattern(spec);
  ASSERT_TRUE(cuda::builds_vec_on_device(resolved, shape));
  const DeviceOperand q(inputs.q);
  const DeviceOperand k(inputs.k);
  const cuda::DevicePlan built = cuda::build_vec_plan_on_device(
      resolved, shape, cuda::make_estimate_operands("vec", {q.view, k.view, size.scale}, shape),
      stream);
  expect_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  const Plan adopted = expect_vec_selection_matches(built, host_plan, resolved, host, stats);
  expect_same_records(built, adopted, stream);
}

// Tiles of 1 to 6 steps (causal) or 6 (not): segments of one and two steps, empty segments, and
// edges at 1024 * k inside spans and column runs; alphas from every candidate (one span per tile
// across every edge) to sparse (columns); a second shape of one step per tile.
TEST_F(GpuVecRuns, SegmentEdgesMatchTheHostPlan) {
  Random random;
  SCOPED_TRACE(random.trace());
  constexpr std::array<int64_t, 6> kAlphas = {0, 30000, 100000, 300000, 600000, 950000};
  constexpr std::array<int64_t, 3> kGqa = {1, 4, 7};
  constexpr std::array<int64_t, 2> kGroups = {1, 16};
  constexpr int64_t kQueries = 5 * 1024 + 333;
  constexpr int64_t kOneStepKeys = 1000;
  VecSelectionStats stats;
  int trial = 0;
  for (const int64_t alpha : kAlphas) {
    for (const int64_t causal : {int64_t{0}, int64_t{1}}) {
      const int64_t group = kGqa[trial++ % kGqa.size()];
      const bool one_step = alpha == kAlphas.back() && causal == 0;
      const int64_t q_len = one_step ? kOneStepKeys - 91 : kQueries;
      const int64_t kv_len = one_step ? kOneStepKeys : q_len + random.uniform_int(0, 1) * 77;
      const ProblemSize size = runs_problem(random, q_len, kv_len, group);
      const AttentionInputs inputs = random_inputs(random, size);
      const PatternSpec spec{"vec",
                             {{"pooling", random.bernoulli(0.5) ? 64 : 128},
                              {"group", pick(random, kGroups)},
                              {"alpha_ppm", alpha},
                              {"causal", causal},
                              {"union_tiles", random.uniform_int(0, 1)}}};
      SCOPED_TRACE(spec.to_string() + " " + describe(size));
      expect_runs_match(spec, size, inputs, stats, stream_);
    }
  }
  EXPECT_GT(stats.spans_across_segments, 0);
  EXPECT_GT(stats.column_runs_across_segments, 0);
  EXPECT_GT(stats.columns_at_segment_edges, 0);
  EXPECT_GT(stats.tiles_of_one_step, 0);
  EXPECT_GT(stats.tiles_with_empty_segments, 0);
  EXPECT_GT(stats.selected_in_columns, 0);
  EXPECT_LE(stats.borderline * kMaxBorderlineShare, stats.candidates)
      << stats.borderline << " of " << stats.candidates << " candidates within the bound";
  RecordProperty("spans_across_segments", std::to_string(stats.spans_across_segments));
  RecordProperty("column_runs_across_segments", std::to_string(stats.column_runs_across_segments));
}

}  // namespace
}  // namespace mmsparse::test
