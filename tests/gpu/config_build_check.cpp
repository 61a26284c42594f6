#include "config_build_check.h"

#include <gtest/gtest.h>

#include <cstdint>

#include "methods/blindsight/blindsight.h"
#include "methods/estimate/index_builders.h"
#include "plan_records.h"

namespace mmsparse::test {

PatternOperands::PatternOperands(const AttentionInputs& inputs, float scale)
    : host{inputs.q.view, inputs.k.view, scale},
      q(inputs.q),
      k(inputs.k),
      device{q.view, k.view, scale} {}

cuda::ConfigBuild build_config_and_wait(const std::vector<PatternSpec>& resolved_specs,
                                        const PlanShape& shape, const ModalityLayout* layout,
                                        const PatternOperands& operands, cudaStream_t stream) {
  // The name only prefixes the operands' errors: every estimating builder takes them alike.
  const cuda::EstimateOperands estimate_operands =
      cuda::make_estimate_operands("prepare_pattern specs", operands.device, shape);
  cuda::ConfigInputs config_inputs;
  config_inputs.layout = layout;
  config_inputs.device = &estimate_operands;
  config_inputs.host = &operands.host;
  cuda::ConfigBuild built =
      cuda::build_config_plan_on_device(resolved_specs, shape, config_inputs, stream);
  expect_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  return built;
}

void expect_static_config_matches_host(const std::vector<PatternSpec>& resolved_specs,
                                       const PlanShape& shape, const ModalityLayout& layout,
                                       const ProblemSize& size, Random& random,
                                       cudaStream_t stream) {
  const Plan host = build_plan(resolved_specs, shape, &layout);
  cuda::ConfigInputs inputs;
  inputs.layout = &layout;
  const cuda::ConfigBuild built =
      cuda::build_config_plan_on_device(resolved_specs, shape, inputs, stream);
  expect_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  expect_same_records(built.plan, host, stream);
  const PlanBuildTimes times = cuda::config_build_times(*built.timer);
  ASSERT_EQ(static_cast<int64_t>(times.heads.size()), shape.head_slots());
  for (int64_t head = 0; head < shape.heads; ++head) {
    EXPECT_EQ(times.heads[head].on_device, !detail::permutes_keys(resolved_specs[head], &layout))
        << resolved_specs[head].to_string();
  }
  const AttentionInputs attention_inputs = random_inputs(random, size);
  expect_matches_oracle(host, attention_inputs, size,
                        run_gpu(built.plan, attention_inputs, size, random_layout(random)));
}

}  // namespace mmsparse::test
