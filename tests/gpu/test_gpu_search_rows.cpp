// The search's candidates built, run and scored over every row on the GPU (SearchOptions::
// score_device, what a measured `mmsparse search` does) against the same on the CPU reference:
// whole-sequence, one-modality and modality-pair scopes (the pair's restriction comes from a
// key-indicator column of V), static and dynamic candidates, a freshly seeded synthetic workload
// of an odd length; a measured search end to end, each chosen spec's recall read again on the
// CPU over every row; and the measured cost's quick reading of candidates far over the budget.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/random.h"
#include "mmsparse/attention.h"
#include "mmsparse/device.h"
#include "mmsparse/tools/search.h"
#include "mmsparse/tools/workload.h"
#include "tools/search/scope.h"

namespace mmsparse::test {
namespace {

using detail::kAllModalities;
using detail::modality_bit;
using detail::ModalitySet;
using detail::Scope;

constexpr Device kCuda{DeviceType::kCUDA, 0};
constexpr int64_t kTileRows = 128;
// The GPU runs the bf16 inputs the CPU reads as fp32: the same values, other summation orders.
// Static plans: the same pairs, so recalls agree to rounding. Dynamic plans: estimated on each
// side, where near-ties of the top-k may pick other lines.
constexpr double kStaticRecallSlack = 2e-3;
constexpr double kDynamicRecallSlack = 2e-2;
constexpr double kOutputErrorSlack = 2e-2;  // absolute, on errors of a few percent

struct Input {
  Workload workload;
  Workload::Tensors tensors;  // bf16
};

Input fresh_input(Random& random, int64_t seq_len) {
  WorkloadSpec spec;
  spec.preset = "video-qwen2.5vl-1m";
  spec.seq_len = seq_len;
  spec.q_heads = 4;
  spec.kv_heads = 2;
  spec.head_dim = 128;
  spec.seed = static_cast<uint64_t>(random.uniform_int(0, 1 << 30));
  Workload workload = Workload::create(spec);
  Workload::Tensors tensors = workload.materialize(DType::kBFloat16);
  return {std::move(workload), std::move(tensors)};
}

struct ScopeCase {
  const char* name;
  ModalitySet kept, query, keys;
};

TEST(GpuSearchRows, EveryRowOnTheGpuMatchesTheCpuReference) {
  Random random;
  SCOPED_TRACE(random.trace());
  const Input input = fresh_input(random, 3001);  // not a multiple of a tile
  const ModalitySet text = modality_bit(Modality::kText), video = modality_bit(Modality::kVideo);
  const ScopeCase scopes[] = {{"full", kAllModalities, kAllModalities, kAllModalities},
                              {"video", video, video, video},
                              {"text->video", text | video, text, video},
                              {"video->text", text | video, video, text}};
  const char* candidates[] = {"a-shape:sink=64,local=256", "vertical-slash:vertical=64,slash=128",
                              "grid:stride=0,slash=1,local=0"};
  for (int64_t q_head = 0; q_head < input.workload.spec().q_heads; ++q_head) {
    const detail::HeadTensors head = detail::head_tensors(
        input.tensors.q.view(), input.tensors.k.view(), input.tensors.v.view(), q_head);
    for (const ScopeCase& scope_case : scopes) {
      SCOPED_TRACE(std::string(scope_case.name) + " head " + std::to_string(q_head));
      SearchOptions on_gpu, on_cpu;
      on_gpu.score_device = kCuda;
      on_cpu.score_device = Device{};
      Scope gpu(scope_case.name, head, input.workload.layout(), scope_case.kept, scope_case.query,
                scope_case.keys, kTileRows, on_gpu);
      Scope cpu(scope_case.name, head, input.workload.layout(), scope_case.kept, scope_case.query,
                scope_case.keys, kTileRows, on_cpu);
      ASSERT_EQ(gpu.has_rows(), cpu.has_rows());
      if (!gpu.has_rows()) continue;
      for (const char* text_spec : candidates) {
        SCOPED_TRACE(text_spec);
        const PatternSpec spec = PatternSpec::parse(text_spec);
        const std::optional<detail::BuiltCandidate> on_device = gpu.build(spec);
        const std::optional<detail::BuiltCandidate> on_host = cpu.build(spec);
        ASSERT_EQ(on_device.has_value(), on_host.has_value());
        if (!on_device) continue;
        const detail::Accuracy got = gpu.score(*on_device);
        const detail::Accuracy want = cpu.score(*on_host);
        EXPECT_EQ(got.recall_se, 0.0);
        EXPECT_NEAR(got.recall, want.recall,
                    is_dynamic(spec) ? kDynamicRecallSlack : kStaticRecallSlack);
        EXPECT_NEAR(got.output_error, want.output_error, kOutputErrorSlack);
      }
    }
  }
}

TEST(GpuSearchRows, MeasuredSearchScoresEveryRowOnTheGpu) {
  Random random;
  SCOPED_TRACE(random.trace());
  const Input input = fresh_input(random, 4096);
  const std::unique_ptr<CostModel> cost = make_measured_cost(kCuda, 1, 3);
  SearchOptions options;
  options.score_device = kCuda;
  options.index_device = kCuda;
  options.target_mean_recall = 0.9;
  const LayerSearchResult result =
      search_layer(input.tensors.q.view(), input.tensors.k.view(), input.tensors.v.view(),
                   input.workload.layout(), *cost, options);
  ASSERT_EQ(result.heads.size(), 4u);
  for (const HeadSearchResult& head : result.heads) {
    SCOPED_TRACE("head " + std::to_string(head.q_head) + " " + head.chosen.spec.to_string());
    EXPECT_EQ(head.chosen.recall_se, 0.0) << "every row scored: no sampling error";
    EXPECT_GT(head.chosen.cost, 0.0);
    // The chosen spec's recall over every row, again on the CPU reference.
    const detail::HeadTensors tensors = detail::head_tensors(
        input.tensors.q.view(), input.tensors.k.view(), input.tensors.v.view(), head.q_head);
    SearchOptions on_cpu;
    on_cpu.score_device = Device{};
    Scope full("full", tensors, input.workload.layout(), kAllModalities, kAllModalities,
               kAllModalities, kTileRows, on_cpu);
    const std::optional<detail::BuiltCandidate> candidate = full.build(head.chosen.spec);
    ASSERT_TRUE(candidate.has_value());
    EXPECT_NEAR(full.score(*candidate).recall, head.chosen.recall, kDynamicRecallSlack);
  }
  EXPECT_GE(mean_recall(result.heads), options.target_mean_recall);
}

// A measured cost reads a candidate far over its budget from one run, and times the others in
// full: dense against a limit a tenth of its time, and against ten times it.
TEST(GpuSearchRows, QuickReadingOnlyFarOverTheLimit) {
  Random random;
  SCOPED_TRACE(random.trace());
  constexpr int64_t kTokens = 8191;
  constexpr double kLimitFactor = 10.0;
  const Tensor q = random.normal_tensor(DType::kBFloat16, {1, kTokens, 1, 128});
  const Tensor k = random.normal_tensor(DType::kBFloat16, {1, kTokens, 1, 128});
  const Tensor v = random.normal_tensor(DType::kBFloat16, {1, kTokens, 1, 128});
  const std::unique_ptr<CostModel> cost = make_measured_cost(kCuda, 2, 5);
  const std::unique_ptr<CostInputs> inputs = cost->prepare(q.view(), k.view(), v.view());
  const PreparedPlan dense = prepare_pattern(
      PatternSpec{"dense", {}}, PlanShape{1, 1, kTokens, kTokens, kTileRows}, nullptr, kCuda);
  const double full = cost->cost_prepared(dense, *inputs);
  ASSERT_GT(full, 0.0);
  const double low_limit = full / kLimitFactor;
  EXPECT_GT(cost->cost_prepared_within(dense, *inputs, low_limit),
            CostModel::kQuickOverBudget * low_limit)
      << "far over the limit: over it either way";
  // Under the limit: the full timing, the same measurement up to run-to-run noise.
  EXPECT_NEAR(cost->cost_prepared_within(dense, *inputs, kLimitFactor * full), full, 0.5 * full);
}

}  // namespace
}  // namespace mmsparse::test
