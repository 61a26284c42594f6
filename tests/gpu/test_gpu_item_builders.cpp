// The item boundary (boundary=4) and per-item sinks (item_sinks > 0) estimated on the GPU
// (methods/estimate/item_spaces.h) against the host builders: on random layouts like Qwen3-VL's
// (several videos of different frame sizes, a variable run of text before every frame, images,
// odd lengths) and GQA ratios 1, 4 and 7, the device plan equals the host plan record for record
// (vertical-slash: with budgets whose top-k cuts are clear; grid: the host plan of the lines the
// device chose, and those lines equal the host search's where it is clear); attention through the
// device plans matches the fp64 oracle; layouts the GPU cannot take stay on the host. The grid on
// layouts of a few thousand tokens is test_gpu_item_grid_long_layouts.cpp's.

#include <gtest/gtest.h>

#include <cstdint>

#include "attention_harness.h"
#include "common/errors.h"
#include "common/random.h"
#include "cuda/runtime/engine.h"
#include "device_buffer.h"
#include "index_build_cases.h"
#include "index_test_support.h"
#include "item_build_checks.h"
#include "methods/estimate/index_builders.h"
#include "mmsparse/attention.h"
#include "mmsparse/layout.h"
#include "mmsparse/patterns.h"
#include "mmsparse/plan.h"
#include "mmsparse/status.h"

namespace mmsparse::test {
namespace {

using testing::expect_error;

TEST_F(GpuIndexBuild, ItemVerticalSlashMatchesTheHostPlanOnQwen3VlLikeLayouts) {
  Random random;
  SCOPED_TRACE(random.trace());
  int built = 0;
  for (int trial = 0; trial < kRandomTrials; ++trial) {
    const QueryBoundaryProblem problem = item_problem(random, random_problem(random, kItemLimits));
    const AttentionInputs inputs = random_inputs(random, problem.size);
    int64_t boundary = 0;
    int64_t item_sinks = 0;
    random_item_mode(random, boundary, item_sinks);
    const PatternSpec spec = clear_item_spec(random, problem, inputs, boundary, item_sinks);
    built += expect_item_vertical_slash(spec, problem, inputs, stream_) ? 1 : 0;
  }
  EXPECT_GT(built, 0) << "no trial's groups fit the GPU estimate";
}

TEST_F(GpuIndexBuild, ItemGridMatchesTheHostPlanOnQwen3VlLikeLayouts) {
  Random random;
  SCOPED_TRACE(random.trace());
  int built = 0;
  int64_t clear = 0;
  for (int trial = 0; trial < kRandomTrials; ++trial) {
    const QueryBoundaryProblem problem = item_problem(random, random_problem(random, kItemLimits));
    const AttentionInputs inputs = grid_trial_inputs(random, problem.size);
    int64_t boundary = 0;
    int64_t item_sinks = 0;
    random_item_mode(random, boundary, item_sinks);
    const int64_t trial_clear =
        expect_item_grid(item_grid_spec(random, boundary, item_sinks), problem, inputs, stream_);
    if (trial_clear < 0) continue;
    ++built;
    clear += trial_clear;
  }
  EXPECT_GT(built, 0) << "no trial's groups fit the GPU estimate";
  EXPECT_GT(clear, 0) << "no search had a clear host choice to compare";
}

// Attention through item-boundary and item-sink plans (permuted query orders, empty capacity
// tiles, sink columns) against the fp64 oracle of the host plan, on both kernels' tile heights.
TEST_F(GpuIndexBuild, ItemPlansAttentionMatchesTheOracle) {
  Random random;
  SCOPED_TRACE(random.trace());
  for (const DType dtype : kDtypes) {
    for (const int64_t tile_rows : kTileRows) {
      QueryBoundaryProblem problem = item_oracle_problem(random, dtype, tile_rows);
      problem.last_q = 1;  // one estimate row per group: every group fits the estimate
      const AttentionInputs inputs = grid_trial_inputs(random, problem.size);
      const int64_t item_sinks = random.uniform_int(0, kMaxItemSinks);
      SCOPED_TRACE(describe(problem.size));
      Plan host;
      cuda::DevicePlan built;
      ASSERT_TRUE(expect_item_vertical_slash(
          clear_item_spec(random, problem, inputs, kItemBoundary, item_sinks), problem, inputs,
          stream_, &host, &built));
      expect_matches_oracle(host, inputs, problem.size,
                            run_gpu(built, inputs, problem.size, random_layout(random)));
      PatternSpec grid_spec = item_grid_spec(random, kItemBoundary, item_sinks);
      grid_spec.params["last_q"] = problem.last_q;
      ItemGridBuilt grid_built;
      ASSERT_GE(expect_item_grid(grid_spec, problem, inputs, stream_, &grid_built, &host), 0);
      expect_matches_oracle(host, inputs, problem.size,
                            run_gpu(grid_built.plan, inputs, problem.size, random_layout(random)));
    }
  }
}

// More media items than the grid's query groups: the grid stays on the host (vertical-slash,
// which has no such bound, builds it), and the public route says why; builds_plan_on_device,
// which the GPU search asks, agrees.
TEST_F(GpuIndexBuild, ItemGridOfTooManyItemsStaysOnTheHost) {
  constexpr int64_t kImages = 40;  // more items than grouped::kMaxGroups - 1
  Random random;
  LayoutBuilder builder;
  for (int64_t i = 0; i < kImages; ++i) builder.text(2).image({1, 2, 2}, false);
  const ModalityLayout layout = builder.text(3).build();
  ProblemSize size = error_case_size();
  size.q_len = size.kv_len = layout.length();
  const AttentionInputs inputs = random_inputs(random, size);
  const PlanShape shape = plan_shape(size);
  const DeviceOperand q(inputs.q);
  const DeviceOperand k(inputs.k);
  const PatternInputs device_inputs{q.view, k.view, size.scale};
  PatternSpec grid_spec = PatternSpec::parse("grid:boundary=4,last_q=1");
  EXPECT_FALSE(cuda::builds_grid_on_device(resolve_pattern(grid_spec), shape, &layout));
  EXPECT_FALSE(builds_plan_on_device(grid_spec, shape, &layout, kCuda));
  expect_error(
      [&] { (void)prepare_pattern(grid_spec, shape, &layout, kCuda, stream_, &device_inputs); },
      ErrorCode::kUnsupported, {"not built on the GPU", "host inputs"});
  const PatternSpec vertical =
      PatternSpec::parse("vertical-slash:boundary=4,last_q=1,item_sinks=2");
  EXPECT_TRUE(builds_plan_on_device(vertical, shape, &layout, kCuda));
  const QueryBoundaryProblem problem{size, layout, 1};
  EXPECT_TRUE(expect_item_vertical_slash(vertical, problem, inputs, stream_));
}

// The public route for the heads the GPU search now offers: prepare_pattern with device inputs
// builds item-boundary and item-sink heads on the GPU (builds_plan_on_device) and computes what
// the host plan computes, bit for bit.
TEST_F(GpuIndexBuild, ItemHeadsServePreparePattern) {
  Random random;
  SCOPED_TRACE(random.trace());
  const QueryBoundaryProblem problem =
      item_oracle_problem(random, DType::kBFloat16, kTileRows.front());
  const AttentionInputs inputs = grid_trial_inputs(random, problem.size);
  const PlanShape shape = plan_shape(problem.size);
  const DeviceOperand q(inputs.q);
  const DeviceOperand k(inputs.k);
  const DeviceOperand v(inputs.v);
  const PatternInputs device_inputs{q.view, k.view, problem.size.scale};
  const PatternInputs host_inputs{inputs.q.view, inputs.k.view, problem.size.scale};
  // Every line kept, and grids of slash lines only at a fixed stride (whose records do not depend
  // on the phase found): no top-k or arg-max the GPU's rounding could decide otherwise.
  for (const char* text :
       {"vertical-slash:vertical=1048576,slash=1048576,boundary=4,item_sinks=1,last_q=1",
        "vertical-slash:vertical=1048576,slash=1048576,item_sinks=2",
        "grid:boundary=4,stride=6,hline=0,vline=0,last_q=1",
        "grid:item_sinks=1,stride=9,hline=0,vline=0"}) {
    const PatternSpec spec = PatternSpec::parse(text);
    SCOPED_TRACE(spec.to_string() + " " + describe(problem.size) + " layout " +
                 problem.layout.to_json());
    ASSERT_TRUE(builds_plan_on_device(spec, shape, &problem.layout, kCuda));
    const Plan host = build_plan(spec, shape, &problem.layout, &host_inputs);
    const PreparedPlan expected = prepare_plan(host, kCuda, stream_);
    const PreparedPlan prepared =
        prepare_pattern(spec, shape, &problem.layout, kCuda, stream_, &device_inputs);
    expect_identical_attention(prepared, expected, problem.size, q.view, k.view, v.view, stream_);
  }
}

}  // namespace
}  // namespace mmsparse::test
