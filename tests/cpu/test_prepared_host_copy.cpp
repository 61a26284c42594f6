// The host copy of a plan a device backend built itself (PreparedPlan::plan): it is built from the
// resolved specs and the layout the build read, so that templates that follow the images
// (BlindSight) get their image tiles rather than causal ones; only plans with dynamic heads, whose
// inputs are not kept, have none. A fake CUDA backend stands for one that builds every config
// itself (CPU-only builds; gtest_discover_tests runs each test in a process of its own, so the
// registration does not leak).

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/backend.h"
#include "mmsparse/attention.h"
#include "mmsparse/layout.h"
#include "mmsparse/patterns.h"
#include "mmsparse/plan.h"
#include "mmsparse/status.h"

namespace mmsparse {
namespace {

constexpr Device kCuda{DeviceType::kCUDA, 0};
constexpr const char* kCudaBuildSkip = "this build links the CUDA backend";

// A CUDA backend that "builds" every pattern and config itself, keeping nothing but a state.
class BuildsEverythingBackend final : public Backend {
 public:
  std::string name() const override { return "fake-builder"; }
  void attention_dense(const AttentionProblem&, const TensorView&, const TensorView&,
                       const TensorView&, const TensorView&, const TensorView&,
                       const AttentionOptions&) override {}
  void attention_planned(const AttentionProblem&, const Plan&, const TensorView&, const TensorView&,
                         const TensorView&, const TensorView&, const TensorView&,
                         const AttentionOptions&) override {}
  void attention_prepared(const AttentionProblem&, const PreparedPlan&, const PreparedState&,
                          const TensorView&, const TensorView&, const TensorView&,
                          const TensorView&, const TensorView&, const AttentionOptions&) override {}
  void merge_partials(std::span<const TensorView>, std::span<const TensorView>, const TensorView&,
                      const TensorView&, const AttentionOptions&) override {}
  std::unique_ptr<PreparedState> prepare_plan(const Plan&, Device, void*) override {
    return std::make_unique<PreparedState>();
  }
  std::optional<BuiltPattern> prepare_pattern(const PatternSpec&, const PlanShape&,
                                              const ModalityLayout*, Device, void*,
                                              const PatternInputs*) override {
    return built();
  }
  std::optional<BuiltPattern> prepare_pattern(const std::vector<PatternSpec>&, const PlanShape&,
                                              const ModalityLayout*, Device, void*,
                                              const PatternInputs*, const PatternInputs*) override {
    return built();
  }

 private:
  static BuiltPattern built() {
    BuiltPattern result;
    result.state = std::make_unique<PreparedState>();
    return result;
  }
};

ModalityLayout two_images() {
  return LayoutBuilder()
      .text(37)
      .image({1, 9, 11})
      .text(5)
      .image({1, 13, 7}, false)
      .text(20)
      .build();
}

// Every head slot's mask of `plan` equals `expected`'s.
void expect_same_masks(const Plan& plan, const Plan& expected) {
  ASSERT_EQ(plan.shape, expected.shape);
  for (int64_t slot = 0; slot < expected.head_slots(); ++slot) {
    EXPECT_EQ(materialize_mask(plan, slot), materialize_mask(expected, slot)) << "slot " << slot;
    EXPECT_EQ(plan.num_tiles(), expected.num_tiles());
  }
}

TEST(PreparedHostCopy, ImageTemplatesOfADeviceBuiltConfigReadTheLayout) {
  if (find_backend(DeviceType::kCUDA) != nullptr) GTEST_SKIP() << kCudaBuildSkip;
  register_backend(DeviceType::kCUDA, std::make_unique<BuildsEverythingBackend>());
  const ModalityLayout layout = two_images();
  const PlanShape shape{1, 3, layout.length(), layout.length(), kDefaultTileRows};
  const std::vector<PatternSpec> specs = {PatternSpec::parse("blindsight-intra"),
                                          PatternSpec::parse("blindsight-intra-sink"),
                                          PatternSpec::parse("dense")};
  const PreparedPlan config = prepare_pattern(specs, shape, &layout, kCuda);
  const Plan expected = build_plan(specs, shape, &layout);
  expect_same_masks(config.plan(), expected);
  // A causal plan would cover more pairs: the copy really has the image tiles.
  EXPECT_LT(count_plan_pairs(config.plan(), 0), count_plan_pairs(build_plan(specs, shape), 0));

  const PatternSpec sink = PatternSpec::parse("blindsight-sink:bidirectional=1");
  const PreparedPlan single = prepare_pattern(sink, shape, &layout, kCuda);
  expect_same_masks(single.plan(), build_plan(sink, shape, &layout));
}

TEST(PreparedHostCopy, ConfigsWithDynamicHeadsHaveNone) {
  if (find_backend(DeviceType::kCUDA) != nullptr) GTEST_SKIP() << kCudaBuildSkip;
  register_backend(DeviceType::kCUDA, std::make_unique<BuildsEverythingBackend>());
  const ModalityLayout layout = two_images();
  const PlanShape shape{1, 2, layout.length(), layout.length(), kDefaultTileRows};
  const PreparedPlan config =
      prepare_pattern({PatternSpec::parse("blindsight-sink"), PatternSpec::parse("vertical-slash")},
                      shape, &layout, kCuda);
  try {
    (void)config.plan();
    ADD_FAILURE() << "expected kUnsupported: a dynamic head's inputs are not kept";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kUnsupported);
    EXPECT_THAT(error.what(), ::testing::HasSubstr("dynamic heads"));
  }
}

}  // namespace
}  // namespace mmsparse
