// BlindSight's templates (src/methods/blindsight) on the CUDA engine: plans built on the host from
// random multi-image layouts (odd image sizes, adjacent images, a video, up to 100 images; sinks
// of the Qwen and the Gemma 3 style, causal and bidirectional), the four templates mixed over the
// heads, uploaded and run against the fp64 oracle and the CPU reference, on fresh random inputs,
// GQA ratios, q_len <= kv_len, bfloat16 and float16, image tiles in place and through key orders
// (permute, random per head). With head_dim 128 they must run on the wgmma kernel: spans, gathered
// columns (the packed sinks), key orders and bidirectional token masks. Then BlindSight
// heads in a per-head config beside heads built on the GPU, as a characterised config runs, and the
// characterisation (Alg. 1) with its attention on the GPU against the CPU reference.

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "attention_harness.h"
#include "common/blindsight_cases.h"
#include "common/random.h"
#include "config_build_check.h"
#include "cuda/runtime/engine.h"
#include "device_buffer.h"
#include "mmsparse/attention.h"
#include "mmsparse/layout.h"
#include "mmsparse/patterns.h"
#include "mmsparse/plan.h"
#include "mmsparse/tools/blindsight_workload.h"
#include "mmsparse/tools/characterise.h"
#include "stream_test.h"

namespace mmsparse::test {
namespace {

constexpr std::array<int64_t, 4> kGroups = {1, 2, 4, 7};  // GQA ratios
// Images up to 12 × 12 tokens, so that image runs reach past one 128-key chunk (spans) while sinks
// and short text stay columns; a hundred images of up to 3 × 3. A few thousand tokens at most: the
// fp64 oracle is dense.
constexpr int64_t kMaxSide = 12;
constexpr int64_t kMaxSideOfMany = 3;
constexpr int64_t kMaxImages = 8;
constexpr int64_t kMaxText = 30;
constexpr int64_t kMaxQueryShortfall = 90;

// A random case of the shared generator (common/blindsight_cases.h) with this file's sizes.
BlindSightLayoutCase random_case(Random& random, int64_t images, int64_t max_side) {
  return random_blindsight_case(random, images, max_side, kMaxText);
}

// One template per query head, in turn from a random first.
std::vector<PatternSpec> head_specs(Random& random, const BlindSightLayoutCase& test_case,
                                    int64_t heads) {
  std::vector<PatternSpec> specs;
  const int64_t first = random.uniform_int(0, 3);
  for (int64_t head = 0; head < heads; ++head) {
    specs.push_back(blindsight_spec(
        random, test_case, kBlindSightTemplates[(first + head) % kBlindSightTemplates.size()]));
  }
  return specs;
}

ProblemSize case_problem(Random& random, const KernelConfig& config, int64_t group,
                         int64_t kv_len) {
  ProblemSize size = random_problem(random, config, 1, group);
  size.kv_len = kv_len;
  size.q_len = random.bernoulli(0.5)
                   ? kv_len
                   : std::max<int64_t>(1, kv_len - random.uniform_int(1, kMaxQueryShortfall));
  return size;
}

class GpuBlindSight : public ::testing::TestWithParam<KernelConfig> {};

TEST_P(GpuBlindSight, TemplatesMatchTheOracle) {
  Random random;
  SCOPED_TRACE(random.trace());
  const KernelConfig& config = GetParam();
  for (const int64_t group : kGroups) {
    const BlindSightLayoutCase test_case =
        random_case(random, random.uniform_int(1, kMaxImages), kMaxSide);
    const ProblemSize size = case_problem(random, config, group, test_case.layout.length());
    const PlanShape shape{.heads = size.q_heads(),
                          .q_len = size.q_len,
                          .kv_len = size.kv_len,
                          .tile_rows = size.tile_rows};
    const Plan plan =
        build_plan(head_specs(random, test_case, shape.heads), shape, &test_case.layout);
    SCOPED_TRACE(describe(size) + " layout " + test_case.layout.to_json() + " plan " +
                 plan.summary());
    const AttentionInputs inputs = random_inputs(random, size);
    const std::vector<cuda::DevicePlan> passes = cuda::upload_passes(plan, nullptr);
    if (config.kernel == cuda::AttentionKernel::kWgmma) {
      EXPECT_TRUE(runs_on_wgmma(passes, size)) << "BlindSight plans must run on the wgmma kernel";
    }
    expect_matches_oracle(plan, inputs, size, run_gpu(passes, inputs, size, random_layout(random)));
  }
}

// A hundred small images: many gathered sink columns per tile, many short tiles.
TEST_P(GpuBlindSight, AHundredImages) {
  Random random;
  SCOPED_TRACE(random.trace());
  constexpr int64_t kImages = 100;
  const BlindSightLayoutCase test_case = random_case(random, kImages, kMaxSideOfMany);
  const ProblemSize size = case_problem(random, GetParam(), 2, test_case.layout.length());
  const PlanShape shape{.heads = size.q_heads(),
                        .q_len = size.q_len,
                        .kv_len = size.kv_len,
                        .tile_rows = size.tile_rows};
  const Plan plan =
      build_plan(head_specs(random, test_case, shape.heads), shape, &test_case.layout);
  const AttentionInputs inputs = random_inputs(random, size);
  const std::vector<cuda::DevicePlan> passes = cuda::upload_passes(plan, nullptr);
  expect_matches_oracle(plan, inputs, size, run_gpu(passes, inputs, size, random_layout(random)));
}

constexpr auto kWgmma = cuda::AttentionKernel::kWgmma;

class GpuBlindSightConfig : public StreamTest {};

// BlindSight heads in a per-head config next to static heads the GPU builds (dense, A-shape), Qwen
// style, in place (built on the GPU) and through key orders (built on the host and uploaded as a
// part): record for record the upload of the host plan, and attention through it matches the
// oracle (Gemma 3 configs: test_gpu_blindsight_builder.cpp).
TEST_F(GpuBlindSightConfig, MixedWithDeviceBuiltHeads) {
  Random random;
  SCOPED_TRACE(random.trace());
  constexpr int64_t kGroup = 4;
  const KernelConfig config{DType::kBFloat16, cuda::kWgmmaHeadDim, kWgmma, cuda::kMaxTileRows};
  BlindSightLayoutCase test_case = random_case(random, random.uniform_int(2, kMaxImages), kMaxSide);
  test_case.bidirectional = false;
  const ProblemSize size = case_problem(random, config, kGroup, test_case.layout.length());
  const PlanShape shape{.heads = size.q_heads(),
                        .q_len = size.q_len,
                        .kv_len = size.kv_len,
                        .tile_rows = size.tile_rows};
  std::vector<PatternSpec> specs = head_specs(random, test_case, shape.heads);
  specs[0] = {"dense", {}};
  specs[1] = {"a-shape", {{"sink", 16}, {"local", 100}}};
  std::vector<PatternSpec> resolved;
  for (const PatternSpec& spec : specs)
    resolved.push_back(resolve_pattern(spec, &test_case.layout));
  SCOPED_TRACE(describe(size) + " layout " + test_case.layout.to_json());
  expect_static_config_matches_host(resolved, shape, test_case.layout, size, random, stream_);
}

// `tensor` rounded to bfloat16, as a model's activations are.
Tensor to_bfloat16(const Tensor& tensor) {
  Tensor result(DType::kBFloat16, tensor.shape());
  for (int64_t i = 0; i < tensor.numel(); ++i) {
    store_float(result.view(), i, load_float(tensor.view(), i));
  }
  return result;
}

// Alg. 1 with its attention on the GPU makes the choices it makes on the CPU reference, with the
// same pair counts and NMSEs equal up to the two backends' rounding.
TEST(GpuBlindSightCharacterise, MatchesTheCpuReference) {
  constexpr double kAlpha = 0.1;
  constexpr double kNmseTolerance = 0.02;  // absolute, plus 5% of the NMSE
  constexpr double kNmseRelative = 0.05;
  constexpr uint64_t kPrompts = 3;
  for (const BlindSightStyle style : {BlindSightStyle::kQwen, BlindSightStyle::kGemma3}) {
    const BlindSightModel model({.style = style, .layers = 2, .heads = 4, .head_dim = 64});
    for (uint64_t prompt = 0; prompt < kPrompts; ++prompt) {
      const ModalityLayout layout = model.prompt_layout(prompt);
      for (int64_t layer = 0; layer < model.spec().layers; ++layer) {
        SCOPED_TRACE("style " + std::to_string(static_cast<int>(style)) + " prompt " +
                     std::to_string(prompt) + " layer " + std::to_string(layer));
        const BlindSightModel::LayerTensors tensors = model.layer(prompt, layer);
        const Tensor q = to_bfloat16(tensors.q);
        const Tensor k = to_bfloat16(tensors.k);
        const Tensor v = to_bfloat16(tensors.v);
        const auto on = [&](Device device) {
          return characterise_layer(q.view(), k.view(), v.view(), layout, model.image_style(),
                                    kAlpha, 0, device);
        };
        const std::vector<HeadCharacterisation> cpu = on(Device{});
        const std::vector<HeadCharacterisation> gpu = on(Device{DeviceType::kCUDA, 0});
        ASSERT_EQ(cpu.size(), gpu.size());
        for (std::size_t head = 0; head < cpu.size(); ++head) {
          EXPECT_EQ(gpu[head].pairs, cpu[head].pairs);
          bool near_alpha = false;
          for (std::size_t t = 0; t < cpu[head].nmse.size(); ++t) {
            const double tolerance = kNmseTolerance + kNmseRelative * cpu[head].nmse[t];
            EXPECT_NEAR(gpu[head].nmse[t], cpu[head].nmse[t], tolerance) << "head " << head;
            near_alpha |= std::abs(cpu[head].nmse[t] - kAlpha) < tolerance;
          }
          if (!near_alpha) {
            EXPECT_EQ(gpu[head].type, cpu[head].type) << "head " << head;
          }
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Kernels, GpuBlindSight,
    ::testing::Values(KernelConfig{DType::kBFloat16, 128, kWgmma, cuda::kMaxTileRows},
                      KernelConfig{DType::kFloat16, 128, kWgmma, cuda::kMaxTileRows},
                      KernelConfig{DType::kBFloat16, 128, kWgmma, kDefaultTileRows},
                      KernelConfig{DType::kBFloat16, 64, cuda::AttentionKernel::kMmaSync,
                                   kDefaultTileRows}),
    [](const ::testing::TestParamInfo<KernelConfig>& info) { return config_name(info.param); });

}  // namespace
}  // namespace mmsparse::test
