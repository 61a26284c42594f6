// Vec heads whose specs differ in alpha only, built in one device build (build_vec_plan_on_device
// with a spec per head; a per-head config groups such heads into one section), against the host
// builder: each head's selected keys equal the host's under its own alpha within the rounding
// bound of vec_selection_check.h, and every record equals the host's records for the device's
// selection, alone and among MMInference heads (dense, A-shape, vertical-slash) and vec heads of
// another pooling, group or causality in a config; GQA 1, 4 and 7, odd lengths, batch 1 and 2.
// Heads whose specs differ otherwise are refused by name.

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "attention_harness.h"
#include "common/errors.h"
#include "common/random.h"
#include "config_build_check.h"
#include "cuda/runtime/config_builder.h"
#include "cuda/runtime/engine.h"
#include "device_buffer.h"
#include "index_test_support.h"
#include "methods/estimate/index_builders.h"
#include "methods/vec/vec_device.h"
#include "mmsparse/patterns.h"
#include "mmsparse/plan.h"
#include "mmsparse/status.h"
#include "plan_records.h"
#include "stream_test.h"
#include "vec_selection_check.h"

namespace mmsparse::test {
namespace {

using testing::expect_error;

constexpr int kRandomTrials = 16;
constexpr int kConfigTrials = 6;
// GQA ratios 1, 4 and 7, with one or two KV heads.
constexpr std::array<Gqa, 5> kGqaShapes = {{{1, 1}, {2, 1}, {1, 4}, {2, 4}, {1, 7}}};
constexpr ProblemLimits kLimits{kGqaShapes, 700, 300};
// Half the heads' alphas from the searched range, half from its edges and beyond.
constexpr double kSearchedAlphaShare = 0.5;

class GpuVecHeads : public StreamTest {};

PlanShape shape_of(const ProblemSize& size) {
  return {size.batch, size.q_heads(), size.q_len, size.kv_len, size.tile_rows};
}

int64_t random_alpha(Random& random) { return random_vec_alpha(random, kSearchedAlphaShare); }

std::vector<PatternSpec> resolved(const std::vector<PatternSpec>& specs) {
  std::vector<PatternSpec> result;
  for (const PatternSpec& spec : specs) result.push_back(resolve_pattern(spec));
  return result;
}

std::string names(const std::vector<PatternSpec>& specs) {
  std::string text;
  for (const PatternSpec& spec : specs) text += spec.to_string() + " ";
  return text;
}

void expect_few_borderline_keys(const VecSelectionStats& stats) {
  EXPECT_GT(stats.candidates, 0);
  EXPECT_LE(stats.borderline * kMaxBorderlineShare, stats.candidates)
      << stats.borderline << " of " << stats.candidates << " candidates within the bound";
}

// One build over every head, each with its own random alpha (some heads sharing one): each
// head's selection within the bound of its own alpha's, records the host's for it.
TEST_F(GpuVecHeads, PerHeadAlphasMatchTheHostPlan) {
  Random random;
  SCOPED_TRACE(random.trace());
  VecSelectionStats stats;
  for (int trial = 0; trial < kRandomTrials; ++trial) {
    ProblemSize size = random_problem(random, kLimits);
    size.kv_len = std::max<int64_t>(size.kv_len, 1);  // the device builds shapes with keys
    const AttentionInputs inputs = random_inputs(random, size);
    const PlanShape shape = shape_of(size);
    const PatternSpec base = random_vec_base(random, size.tile_rows);
    std::vector<PatternSpec> specs;
    for (int64_t h = 0; h < shape.heads; ++h) {
      specs.push_back(with_alpha(base, h > 0 && random.bernoulli(0.2)
                                           ? specs.back().params.at("alpha_ppm")
                                           : random_alpha(random)));
    }
    const std::vector<PatternSpec> resolved_specs = resolved(specs);
    SCOPED_TRACE(names(specs) + describe(size));
    const PatternOperands operands(inputs, size.scale);
    const Plan host = build_plan(specs, shape, nullptr, &operands.host);
    const cuda::DevicePlan built = cuda::build_vec_plan_on_device(
        resolved_specs, shape, cuda::make_estimate_operands("vec", operands.device, shape),
        stream_);
    expect_cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
    const Plan adopted =
        expect_built_vec_heads_match(built, vec_build_masks(resolved_specs[0], shape), host,
                                     resolved_specs, operands.host, stats);
    expect_same_records(built, adopted, stream_);
  }
  expect_few_borderline_keys(stats);
  RecordProperty("borderline_keys", std::to_string(stats.borderline));
}

// The specs of a config with 7 or 14 query heads (GQA 7): vec heads of one base spec with their
// own alphas, two vec heads of another base (a second section), and MMInference heads whose
// device builds equal the host's exactly.
std::vector<PatternSpec> mixed_specs(Random& random, const PlanShape& shape) {
  const PatternSpec base = random_vec_base(random, shape.tile_rows);
  PatternSpec other = random_vec_base(random, shape.tile_rows);
  other.params["group"] = base.params.at("group") == 16 ? 3 : 16;  // never the same section
  const std::array<PatternSpec, 3> others = {
      PatternSpec::parse("dense"), PatternSpec::parse("a-shape:sink=8,local=40"),
      vertical_slash(100000, 100000, 7, 9, 64, 0)};  // every line: a clear top-k
  std::vector<PatternSpec> specs;
  for (int64_t h = 0; h < shape.heads; ++h) {
    if (h % 5 == 1) {
      specs.push_back(others[static_cast<std::size_t>(h / 5 % 3)]);
    } else if (h % 5 == 3) {
      specs.push_back(with_alpha(other, random_alpha(random)));
    } else {
      specs.push_back(with_alpha(base, random_alpha(random)));
    }
  }
  return specs;
}

// A per-head config of vec heads of different alphas among other methods' heads: the vec heads of
// one base are one section; every vec head's selection within the bound of its own alpha's, and
// the whole concatenated plan the host's records for the device's selection.
TEST_F(GpuVecHeads, ConfigOfVecHeadsOfDifferentAlphasMatchesTheHostPlan) {
  Random random;
  SCOPED_TRACE(random.trace());
  VecSelectionStats stats;
  for (int trial = 0; trial < kConfigTrials; ++trial) {
    ProblemSize size = random_problem(random, kLimits);
    size.kv_len = std::max<int64_t>(size.kv_len, 1);
    size.kv_heads = 1 + trial % 2;
    size.group = 7;
    const AttentionInputs inputs = random_inputs(random, size);
    const PlanShape shape = shape_of(size);
    const std::vector<PatternSpec> specs = mixed_specs(random, shape);
    const std::vector<PatternSpec> resolved_specs = resolved(specs);
    SCOPED_TRACE(names(specs) + describe(size));
    const PatternOperands operands(inputs, size.scale);
    const Plan host = build_plan(specs, shape, nullptr, &operands.host);
    const cuda::ConfigBuild built =
        build_config_and_wait(resolved_specs, shape, nullptr, operands, stream_);
    const Plan adopted = expect_built_vec_heads_match(built.plan, built.masks, host, resolved_specs,
                                                      operands.host, stats);
    expect_same_records(built.plan, adopted, stream_);
  }
  expect_few_borderline_keys(stats);
}

// Heads built together must share everything but alpha; the spec count must match the heads.
TEST_F(GpuVecHeads, SpecsThatDifferBeyondAlphaAreNamed) {
  Random random;
  const ProblemSize size = error_case_size();
  const AttentionInputs inputs = random_inputs(random, size);
  const PatternOperands pattern_operands(inputs, size.scale);
  const PlanShape shape = shape_of(size);
  const cuda::EstimateOperands operands =
      cuda::make_estimate_operands("vec", pattern_operands.device, shape);
  const PatternSpec spec = resolve_pattern(PatternSpec::parse("vec:pooling=32"));
  const PatternSpec other_group = resolve_pattern(PatternSpec::parse("vec:pooling=32,group=3"));
  std::vector<PatternSpec> specs(static_cast<std::size_t>(shape.heads), spec);
  specs.back() = other_group;
  expect_error([&] { (void)cuda::build_vec_plan_on_device(specs, shape, operands, stream_); },
               ErrorCode::kInvalidArgument,
               {"build_vec_plan_on_device resolved_specs", "differ only in alpha_ppm"});
  specs.back() = resolve_pattern(PatternSpec::parse("dense"));
  expect_error([&] { (void)cuda::build_vec_plan_on_device(specs, shape, operands, stream_); },
               ErrorCode::kInvalidArgument,
               {"build_vec_plan_on_device resolved_specs", "vec specs"});
  specs.pop_back();
  expect_error([&] { (void)cuda::build_vec_plan_on_device(specs, shape, operands, stream_); },
               ErrorCode::kInvalidArgument, {"build_vec_plan_on_device resolved_specs", "one per"});
}

}  // namespace
}  // namespace mmsparse::test
