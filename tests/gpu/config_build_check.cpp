#include "config_build_check.h"

#include "methods/estimate/index_builders.h"

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

}  // namespace mmsparse::test
