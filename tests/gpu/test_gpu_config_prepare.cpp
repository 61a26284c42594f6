// prepare_pattern's per-head form beside the records checked in test_gpu_config_builder.cpp: a
// config of static heads keeps a host copy equal to build_plan's, and bad configs (spec counts,
// heads the GPU cannot build without host inputs, inputs the estimate cannot read, bad parameters
// and shapes, bad head selections) name the argument.

#include <gtest/gtest.h>

#include <vector>

#include "attention_harness.h"
#include "common/errors.h"
#include "common/random.h"
#include "device_buffer.h"
#include "index_build_cases.h"
#include "index_test_support.h"
#include "methods/estimate/index_builders.h"
#include "mmsparse/attention.h"
#include "mmsparse/patterns.h"
#include "mmsparse/plan.h"
#include "mmsparse/status.h"
#include "stream_test.h"

namespace mmsparse::test {
namespace {

using testing::expect_error;

class GpuConfigPrepare : public StreamTest {};

// A config of static heads only keeps a host copy, built on first use, equal to build_plan's.
TEST_F(GpuConfigPrepare, StaticConfigHasAHostCopy) {
  const PlanShape shape{2, 3, 200, 230, 64};
  const std::vector<PatternSpec> specs = {PatternSpec::parse("a-shape:sink=8,local=40"),
                                          PatternSpec::parse("dense"),
                                          PatternSpec::parse("a-shape:sink=8,local=40")};
  const PreparedPlan built = prepare_pattern(specs, shape, nullptr, kCuda, stream_);
  const Plan expected = build_plan(specs, shape);
  EXPECT_EQ(built.plan().tiles, expected.tiles);
  EXPECT_EQ(built.plan().spans, expected.spans);
  EXPECT_EQ(built.plan().masks, expected.masks);
  for (const HeadBuildTime& head : built.build_times().heads) EXPECT_TRUE(head.on_device);
}

TEST_F(GpuConfigPrepare, BadConfigsNameTheArgument) {
  Random random;
  const ProblemSize size = error_case_size();
  const AttentionInputs inputs = random_inputs(random, size);
  const DeviceOperand q(inputs.q);
  const DeviceOperand k(inputs.k);
  const PlanShape shape = plan_shape(size);
  const PatternInputs device_inputs{q.view, k.view};
  const PatternSpec a_shape = PatternSpec::parse("a-shape");
  const PatternSpec grid_head = PatternSpec::parse("grid");
  const PatternSpec vertical = PatternSpec::parse("vertical-slash:vertical=40,slash=200");

  expect_error(
      [&] {
        (void)prepare_pattern(std::vector<PatternSpec>{a_shape, a_shape}, shape, nullptr, kCuda,
                              stream_);
      },
      ErrorCode::kInvalidArgument, {"prepare_pattern specs", "heads = 4", "2 specs"});
  expect_error(
      [&] {
        (void)prepare_pattern(std::vector<PatternSpec>{a_shape, grid_head, a_shape, a_shape}, shape,
                              nullptr, kCuda, stream_);
      },
      ErrorCode::kUnsupported, {"head 1", "grid", "host_inputs"});
  // Device inputs the estimate cannot read: named by the first estimated head's pattern.
  TensorView float_q = q.view;
  float_q.dtype = DType::kFloat32;
  const PatternInputs float_inputs{float_q, k.view};
  expect_error(
      [&] {
        (void)prepare_pattern(std::vector<PatternSpec>{a_shape, grid_head, vertical, a_shape},
                              shape, nullptr, kCuda, stream_, &float_inputs);
      },
      ErrorCode::kInvalidArgument, {"grid input q dtype", "float32"});
  expect_error(
      [&] {
        (void)prepare_pattern(std::vector<PatternSpec>{a_shape, a_shape, vertical, a_shape}, shape,
                              nullptr, kCuda, stream_);
      },
      ErrorCode::kUnsupported, {"head 2", "vertical-slash"});
  expect_error(
      [&] {
        (void)prepare_pattern(
            std::vector<PatternSpec>{a_shape, PatternSpec::parse("a-shape:local=0"), a_shape,
                                     a_shape},
            shape, nullptr, kCuda, stream_);
      },
      ErrorCode::kInvalidArgument, {"a-shape parameter local", ">= 1"});
  expect_error(
      [&] {
        (void)prepare_pattern(std::vector<PatternSpec>{a_shape, a_shape, a_shape, a_shape},
                              {1, 4, 100, 120, 0}, nullptr, kCuda, stream_);
      },
      ErrorCode::kInvalidArgument, {"tile_rows"});

  const cuda::EstimateOperands operands =
      cuda::make_estimate_operands("vertical-slash", device_inputs, shape);
  expect_error(
      [&] {
        (void)cuda::select_heads("vertical-slash", operands, {2, 1});
      },
      ErrorCode::kInvalidArgument, {"vertical-slash heads", "ascending", "head 1"});
  expect_error(
      [&] {
        (void)cuda::select_heads("vertical-slash", operands, {0, 4});
      },
      ErrorCode::kInvalidArgument, {"vertical-slash heads", "[0, 4)", "head 4"});
  expect_error([&] { (void)cuda::select_heads("vertical-slash", operands, {}); },
               ErrorCode::kUnsupported, {"vertical-slash heads", "got 0"});
  expect_error(
      [&] {
        (void)cuda::build_dynamic_plan_on_device(
            resolve_pattern(vertical), shape, nullptr,
            cuda::select_heads("vertical-slash", operands, {1, 3}), stream_);
      },
      ErrorCode::kInvalidArgument, {"shape.heads", "2", "4"});
}

}  // namespace
}  // namespace mmsparse::test
