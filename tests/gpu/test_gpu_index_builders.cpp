// Dynamic patterns estimated on the GPU (methods/estimate/index_builders.h) against the host
// builders, their oracle: on random inputs whose top-k cuts are clear (rounding cannot reorder the
// lines at the cut), every record of the device-built plan equals the uploaded host plan's;
// attention through the device-built plan matches the fp64 oracle; prepare_pattern with device
// inputs serves the same plan; bad inputs name the argument. The grid's device builds are
// test_gpu_grid_builders.cpp.

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "attention_harness.h"
#include "common/errors.h"
#include "common/random.h"
#include "cuda/runtime/engine.h"
#include "methods/estimate/index_builders.h"
#include "methods/estimate/index_kernels.h"
#include "device_buffer.h"
#include "mmsparse/attention.h"
#include "mmsparse/layout.h"
#include "mmsparse/patterns.h"
#include "mmsparse/plan.h"
#include "mmsparse/status.h"
#include "mmsparse/tools/workload.h"
#include "methods/estimate/estimation.h"
#include "methods/grid/grid.h"
#include "methods/estimate/modality_boundary.h"
#include "methods/registry.h"
#include "grid_inputs.h"
#include "index_build_cases.h"
#include "index_test_support.h"
#include "plan_equality.h"
#include "plan_records.h"
#include "stream_test.h"

namespace mmsparse::test {
namespace {

using testing::expect_error;

// The two builds of one spec on one set of inputs.
struct BothPlans {
  Plan host;
  cuda::DevicePlan built;
};

BothPlans build_both(const PatternSpec& spec, const PlanShape& shape, const AttentionInputs& inputs,
                     float scale, cudaStream_t stream, const ModalityLayout* layout = nullptr) {
  const PatternInputs host_inputs{inputs.q.view, inputs.k.view, scale};
  const DeviceOperand q(inputs.q);
  const DeviceOperand k(inputs.k);
  const PatternInputs device_inputs{q.view, k.view, scale};
  BothPlans plans{build_plan(spec, shape, layout, &host_inputs), {}};
  plans.built = cuda::build_dynamic_plan_on_device(
      resolve_pattern(spec), shape, layout,
      cuda::make_estimate_operands(spec.name, device_inputs, shape), stream);
  // q and k are freed on return: the build must have read them.
  expect_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  return plans;
}

// Random sink, local and last_q, budgets with clear cuts for these inputs.
PatternSpec random_clear_spec(Random& random, const ProblemSize& size,
                              const AttentionInputs& inputs) {
  const int64_t sink = random.uniform_int(0, kMaxSink);
  const int64_t local = random.uniform_int(0, kMaxLocal);
  const int64_t last_q = random.bernoulli(0.5) ? 64 : random.uniform_int(1, kMaxLastQueries);
  const HostScores scores =
      host_scores({inputs.q.view, inputs.k.view, size.scale}, plan_shape(size), last_q);
  return vertical_slash(clear_budget(random, scores.columns, sink),
                        clear_budget(random, scores.diagonals, local), sink, local, last_q,
                        random.uniform_int(0, 1));
}

TEST_F(GpuIndexBuild, VerticalSlashMatchesTheHostPlanOnRandomInputs) {
  Random random;
  SCOPED_TRACE(random.trace());
  for (int trial = 0; trial < kRandomTrials; ++trial) {
    const ProblemSize size = random_problem(random, kLimits);
    const AttentionInputs inputs = random_inputs(random, size);
    const PatternSpec spec = random_clear_spec(random, size, inputs);
    SCOPED_TRACE(spec.to_string() + " " + describe(size));
    const BothPlans plans = build_both(spec, plan_shape(size), inputs, size.scale, stream_);
    SCOPED_TRACE(plans.host.summary());
    expect_same_records(plans.built, plans.host, stream_);
  }
}

// Empty and degenerate shapes; budgets of the forced lines only, of nothing, of every line.
TEST_F(GpuIndexBuild, VerticalSlashEdgeShapesAndBudgetsMatchTheHostPlan) {
  Random random;
  SCOPED_TRACE(random.trace());
  const std::vector<EdgeShape> edges = {{1, 0, 0, 64},     {1, 0, 17, 64},    {1, 1, 1, 64},
                                        {1, 5, 0, 64},     {2, 64, 64, 64},   {1, 300, 45, 128},
                                        {2, 129, 200, 64}, {1, 257, 513, 128}};
  const std::vector<PatternSpec> specs = {
      vertical_slash(30, 100, 30, 100, 64, 0),     // the forced lines only
      vertical_slash(0, 0, 0, 0, 64, 1),           // nothing
      vertical_slash(5, 3, 5, 3, 1, 0),            // forced lines of one estimate row
      vertical_slash(100000, 100000, 7, 9, 64, 0)  // every line
  };
  for (const EdgeShape& edge : edges) {
    const ProblemSize size = edge_size(random, edge);
    const AttentionInputs inputs = random_inputs(random, size);
    for (const PatternSpec& spec : specs) {
      SCOPED_TRACE(spec.to_string() + " " + describe(size));
      const BothPlans plans = build_both(spec, plan_shape(size), inputs, size.scale, stream_);
      expect_same_records(plans.built, plans.host, stream_);
    }
  }
}

// Attention through the device-built plan against the fp64 oracle of the host plan (the kernel
// check rule), on both kernels' tile heights.
TEST_F(GpuIndexBuild, AttentionThroughTheDevicePlanMatchesTheOracle) {
  Random random;
  SCOPED_TRACE(random.trace());
  for (const DType dtype : kDtypes) {
    for (const int64_t tile_rows : kTileRows) {
      const ProblemSize size = oracle_problem(random, kLimits, dtype, tile_rows);
      const AttentionInputs inputs = random_inputs(random, size);
      const PatternSpec spec = random_clear_spec(random, size, inputs);
      SCOPED_TRACE(spec.to_string() + " " + describe(size));
      const BothPlans plans = build_both(spec, plan_shape(size), inputs, size.scale, stream_);
      expect_same_records(plans.built, plans.host, stream_);
      const AttentionResult gpu = run_gpu(plans.built, inputs, size, random_layout(random));
      expect_matches_oracle(plans.host, inputs, size, gpu);
    }
  }
}

// Budgets with clear cuts in every query group and head slot, the spec with boundary 2.
PatternSpec clear_query_boundary_spec(Random& random, const QueryBoundaryProblem& problem,
                                      const AttentionInputs& inputs) {
  const PlanShape shape = plan_shape(problem.size);
  const int64_t sink = random.uniform_int(0, kMaxSink);
  const int64_t local = random.uniform_int(0, kMaxLocal);
  const HostScores scores = host_scores({inputs.q.view, inputs.k.view, problem.size.scale}, shape,
                                        query_group_rows(shape, problem.layout, problem.last_q));
  return vertical_slash(clear_budget(random, scores.columns, sink),
                        clear_budget(random, scores.diagonals, local), sink, local, problem.last_q,
                        static_cast<int64_t>(detail::BoundaryMode::kQuery));
}

// A Q- or 2D-boundary spec with clear budgets for a problem and its inputs.
using BoundarySpecMaker =
    std::function<PatternSpec(Random&, const QueryBoundaryProblem&, const AttentionInputs&)>;

// The device plan of a boundary spec against the host plan, record for record (runs included),
// where its groups fit the estimate; where they do not, the spec is routed to the host
// (builds_dynamic_on_device) and the device build says why. Returns whether it was built on the
// device.
bool expect_boundary_plan(Random& random, const QueryBoundaryProblem& problem,
                          const BoundarySpecMaker& make_spec, cudaStream_t stream) {
  const AttentionInputs inputs = random_inputs(random, problem.size);
  const PatternSpec spec = make_spec(random, problem, inputs);
  const PlanShape shape = plan_shape(problem.size);
  SCOPED_TRACE(spec.to_string() + " " + describe(problem.size) + " layout " +
               problem.layout.to_json());
  if (!groups_fit(problem)) {
    EXPECT_FALSE(cuda::builds_dynamic_on_device(resolve_pattern(spec), shape, &problem.layout));
    expect_error(
        [&] { (void)build_both(spec, shape, inputs, problem.size.scale, stream, &problem.layout); },
        ErrorCode::kUnsupported, {"vertical-slash parameter last_q", "runs"});
    return false;
  }
  EXPECT_TRUE(cuda::builds_dynamic_on_device(resolve_pattern(spec), shape, &problem.layout));
  const BothPlans plans =
      build_both(spec, shape, inputs, problem.size.scale, stream, &problem.layout);
  SCOPED_TRACE(plans.host.summary());
  expect_same_records(plans.built, plans.host, stream);
  return true;
}

// expect_boundary_plan on random interleaved layouts and problems; some must be built.
void expect_boundary_plans_on_interleaved_layouts(const BoundarySpecMaker& make_spec,
                                                  cudaStream_t stream) {
  Random random;
  SCOPED_TRACE(random.trace());
  int built = 0;
  for (int trial = 0; trial < kRandomTrials; ++trial) {
    built += expect_boundary_plan(
        random, query_boundary_problem(random, random_problem(random, kLimits)), make_spec, stream);
  }
  EXPECT_GT(built, 0) << "no trial's groups fit the GPU estimate";
}

// Q-boundary (MMInference Alg. 2): each query modality estimated from its own last rows and its
// runs of rows tiled in a permuted query order. On interleaved layouts with odd runs, every GQA
// shape, head dim, dtype and tile height: the device plan equals the host plan record for record
// where the groups' rows fit the estimate (expect_boundary_plan).
TEST_F(GpuIndexBuild, QueryBoundaryMatchesTheHostPlanOnInterleavedLayouts) {
  expect_boundary_plans_on_interleaved_layouts(clear_query_boundary_spec, stream_);
}

// A modality whose last rows are single tokens between text (more runs than the estimate takes):
// the spec is routed to the host, and the device build and prepare_pattern say why; for Q- and
// 2D-boundary alike.
TEST_F(GpuIndexBuild, QueryBoundaryGroupsOfTooManyRunsStayOnTheHost) {
  constexpr int64_t kSingleTokenImages = 40;  // image runs of one token, more than 16
  Random random;
  LayoutBuilder builder;
  for (int64_t i = 0; i < kSingleTokenImages; ++i) builder.text(1).image({1, 1, 1});
  const ModalityLayout layout = builder.text(1).build();
  ProblemSize size = error_case_size();
  size.q_len = size.kv_len = layout.length();
  const AttentionInputs inputs = random_inputs(random, size);
  const PlanShape shape = plan_shape(size);
  const DeviceOperand q(inputs.q);
  const DeviceOperand k(inputs.k);
  const PatternInputs device_inputs{q.view, k.view, size.scale};
  for (const detail::BoundaryMode mode :
       {detail::BoundaryMode::kQuery, detail::BoundaryMode::kTwoD}) {
    const PatternSpec spec = vertical_slash(40, 200, 30, 100, 64, static_cast<int64_t>(mode));
    SCOPED_TRACE(spec.to_string());
    EXPECT_FALSE(cuda::builds_dynamic_on_device(resolve_pattern(spec), shape, &layout));
    expect_error([&] { (void)build_both(spec, shape, inputs, size.scale, stream_, &layout); },
                 ErrorCode::kUnsupported, {"vertical-slash parameter last_q", "16 runs"});
    PatternSpec grid_spec = PatternSpec::parse("grid");
    grid_spec.params["boundary"] = static_cast<int64_t>(mode);
    EXPECT_FALSE(cuda::builds_grid_on_device(resolve_pattern(grid_spec), shape, &layout));
    for (const PatternSpec& routed : {spec, grid_spec}) {
      expect_error(
          [&] { (void)prepare_pattern(routed, shape, &layout, kCuda, stream_, &device_inputs); },
          ErrorCode::kUnsupported, {"not built on the GPU", "host inputs"});
    }
  }
}

// Attention through a Q- or 2D-boundary device plan (permuted query order) against the fp64 oracle
// of the host plan, on both kernels' tile heights; `make_spec` gives the spec's clear budgets.
void expect_boundary_attention_matches(const BoundarySpecMaker& make_spec, cudaStream_t stream) {
  Random random;
  SCOPED_TRACE(random.trace());
  for (const DType dtype : kDtypes) {
    for (const int64_t tile_rows : kTileRows) {
      QueryBoundaryProblem problem =
          query_boundary_problem(random, oracle_problem(random, kLimits, dtype, tile_rows));
      problem.last_q = std::min<int64_t>(problem.last_q, 64);
      if (!groups_fit(problem)) problem.layout = LayoutBuilder().text(problem.size.kv_len).build();
      const AttentionInputs inputs = random_inputs(random, problem.size);
      const PatternSpec spec = make_spec(random, problem, inputs);
      SCOPED_TRACE(spec.to_string() + " " + describe(problem.size));
      const BothPlans plans = build_both(spec, plan_shape(problem.size), inputs, problem.size.scale,
                                         stream, &problem.layout);
      expect_same_records(plans.built, plans.host, stream);
      const AttentionResult gpu = run_gpu(plans.built, inputs, problem.size, random_layout(random));
      expect_matches_oracle(plans.host, inputs, problem.size, gpu);
    }
  }
}

TEST_F(GpuIndexBuild, QueryBoundaryAttentionMatchesTheOracle) {
  expect_boundary_attention_matches(clear_query_boundary_spec, stream_);
}

// Budgets with clear cuts in every (query group, key space) pair and head slot, the spec with
// boundary 3; a third of the specs keep every line (a cut that is always clear: in the other
// modalities' spaces every key then becomes a column).
PatternSpec clear_two_d_spec(Random& random, const QueryBoundaryProblem& problem,
                             const AttentionInputs& inputs) {
  constexpr int64_t kEveryLine = int64_t{1} << 20;
  constexpr int64_t kTwoD = static_cast<int64_t>(detail::BoundaryMode::kTwoD);
  const int64_t sink = random.uniform_int(0, kMaxSink);
  const int64_t local = random.uniform_int(0, kMaxLocal);
  if (random.bernoulli(1.0 / 3.0)) {
    return vertical_slash(kEveryLine, kEveryLine, sink, local, problem.last_q, kTwoD);
  }
  const HostScores scores = two_d_scores({inputs.q.view, inputs.k.view, problem.size.scale},
                                         plan_shape(problem.size), problem.layout, problem.last_q);
  return vertical_slash(clear_budget(random, scores.columns, sink),
                        clear_budget(random, scores.diagonals, local), sink, local, problem.last_q,
                        kTwoD);
}

// 2D boundary (MMInference Alg. 3): each (query modality, key modality) pair estimated and
// selected in the compact coordinates of its keys, each tile reading every pair of its group. On
// interleaved layouts with odd runs, every GQA shape, head dim, dtype and tile height: the device
// plan equals the host plan record for record.
TEST_F(GpuIndexBuild, TwoDBoundaryMatchesTheHostPlanOnInterleavedLayouts) {
  expect_boundary_plans_on_interleaved_layouts(clear_two_d_spec, stream_);
}

// Layouts whose key spaces include the identity (one range from key 0: compact keys are original
// positions, so narrow bands stay spans), one modality only, media first, media last, and more
// keys than queries.
TEST_F(GpuIndexBuild, TwoDBoundaryEdgeLayoutsMatchTheHostPlan) {
  Random random;
  SCOPED_TRACE(random.trace());
  for (const auto& make_layout : edge_layouts()) {
    for (int trial = 0; trial < 3; ++trial) {
      QueryBoundaryProblem problem =
          query_boundary_problem(random, random_problem(random, kLimits));
      if (problem.size.kv_len == 0) continue;
      problem.layout = make_layout(problem.size.kv_len);
      (void)expect_boundary_plan(random, problem, clear_two_d_spec, stream_);
    }
  }
}

TEST_F(GpuIndexBuild, TwoDBoundaryAttentionMatchesTheOracle) {
  expect_boundary_attention_matches(clear_two_d_spec, stream_);
}

// The public route: prepare_pattern with device inputs estimates on the GPU and computes what
// prepare_plan(build_plan(host inputs)) computes, bit for bit.
TEST_F(GpuIndexBuild, PreparePatternEstimatesFromDeviceInputs) {
  Random random;
  SCOPED_TRACE(random.trace());
  ProblemSize size = random_problem(random, kLimits);
  size.head_dim = kHeadDims.back();
  size.scale = 1.0f / std::sqrt(static_cast<float>(size.head_dim));
  size.q_len = 333;
  size.kv_len = 401;
  const AttentionInputs inputs = random_inputs(random, size);
  const PatternSpec spec = random_clear_spec(random, size, inputs);
  SCOPED_TRACE(spec.to_string() + " " + describe(size));
  const PlanShape shape = plan_shape(size);
  const PatternInputs host_inputs{inputs.q.view, inputs.k.view, size.scale};
  const DeviceOperand q(inputs.q);
  const DeviceOperand k(inputs.k);
  const DeviceOperand v(inputs.v);
  const PatternInputs device_inputs{q.view, k.view, size.scale};
  const PreparedPlan expected =
      prepare_plan(build_plan(spec, shape, nullptr, &host_inputs), kCuda, stream_);
  const PreparedPlan built = prepare_pattern(spec, shape, nullptr, kCuda, stream_, &device_inputs);
  EXPECT_EQ(built.shape(), shape);
  // Its host copy is the download of the device records: the host builder's plan.
  expect_decoded_plan(built.plan(), build_plan(spec, shape, nullptr, &host_inputs));

  expect_identical_attention(built, expected, size, q.view, k.view, v.view, stream_);
}

TEST_F(GpuIndexBuild, BadInputsNameTheArgument) {
  Random random;
  const ProblemSize size = error_case_size();
  const AttentionInputs inputs = random_inputs(random, size);
  const DeviceOperand q(inputs.q);
  const DeviceOperand k(inputs.k);
  const PlanShape shape = plan_shape(size);
  const PatternSpec spec = PatternSpec::parse("vertical-slash:vertical=40,slash=200");
  const auto operands = [&](const TensorView& q_view, const TensorView& k_view,
                            const PlanShape& plan) {
    return cuda::make_estimate_operands("vertical-slash", {q_view, k_view}, plan);
  };

  expect_error([&] { (void)operands(q.view, inputs.k.view, shape); }, ErrorCode::kInvalidArgument,
               {"vertical-slash input k device", "cuda"});
  TensorView float_q = q.view;
  float_q.dtype = DType::kFloat32;
  expect_error([&] { (void)operands(float_q, k.view, shape); }, ErrorCode::kInvalidArgument,
               {"vertical-slash input q dtype", "float32"});
  PlanShape longer = shape;
  longer.q_len = 101;
  expect_error([&] { (void)operands(q.view, k.view, longer); }, ErrorCode::kInvalidArgument,
               {"vertical-slash input q q_len", "101", "100"});
  PlanShape more_heads = shape;
  more_heads.heads = 3;
  expect_error([&] { (void)operands(q.view, k.view, more_heads); }, ErrorCode::kInvalidArgument,
               {"vertical-slash input q heads"});
  TensorView strided_q = q.view;
  strided_q.strides[3] = 2;
  expect_error([&] { (void)operands(strided_q, k.view, shape); }, ErrorCode::kInvalidArgument,
               {"vertical-slash input q strides", "contiguous last dimension"});
  TensorView narrow_q = q.view;
  TensorView narrow_k = k.view;
  narrow_q.shape[3] = narrow_k.shape[3] = 40;
  expect_error([&] { (void)operands(narrow_q, narrow_k, shape); }, ErrorCode::kUnsupported,
               {"vertical-slash input q head_dim", "40"});

  const cuda::EstimateOperands good = operands(q.view, k.view, shape);
  expect_error(
      [&] {
        (void)cuda::build_dynamic_plan_on_device(
            resolve_pattern(PatternSpec::parse("vertical-slash:vertical=10")), shape, nullptr, good,
            stream_);
      },
      ErrorCode::kInvalidArgument, {"vertical-slash parameter vertical", ">= sink = 30"});
  for (const char* boundary_spec : {"vertical-slash:boundary=2", "vertical-slash:boundary=3"}) {
    expect_error(
        [&] {
          (void)cuda::build_dynamic_plan_on_device(
              resolve_pattern(PatternSpec::parse(boundary_spec)), shape, nullptr, good, stream_);
        },
        ErrorCode::kInvalidArgument, {"vertical-slash parameter boundary", "a modality layout"});
  }
  expect_error(
      [&] {
        (void)cuda::build_dynamic_plan_on_device(
            resolve_pattern(PatternSpec::parse("grid:boundary=2")), shape, nullptr, good, stream_);
      },
      ErrorCode::kInvalidArgument, {"grid parameter boundary", "a modality layout"});
  expect_error(
      [&] {
        (void)cuda::build_dynamic_plan_on_device(resolve_pattern(spec), {1, 4, 100, 120, 0},
                                                 nullptr, good, stream_);
      },
      ErrorCode::kInvalidArgument, {"tile_rows"});
  EXPECT_TRUE(cuda::builds_dynamic_on_device(resolve_pattern(spec), shape, nullptr));
  EXPECT_FALSE(cuda::builds_dynamic_on_device(
      resolve_pattern(PatternSpec::parse("grid:boundary=2")), shape, nullptr));
}

}  // namespace
}  // namespace mmsparse::test
