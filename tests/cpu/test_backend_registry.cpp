// The backend registry (src/core/backend.h): the CPU reference is always registered, a device type
// without a backend gets a clear error, and a registered backend receives validated problems.
// gtest_discover_tests runs every test in a process of its own, so a test's registration does not
// leak into the others.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/errors.h"
#include "core/backend.h"
#include "mmsparse/attention.h"
#include "mmsparse/build_info.h"
#include "mmsparse/device.h"
#include "mmsparse/patterns.h"
#include "mmsparse/plan.h"
#include "mmsparse/status.h"

namespace mmsparse {
namespace {

constexpr Device kHost{DeviceType::kCPU, 0};
constexpr Device kCuda{DeviceType::kCUDA, 0};
constexpr const char* kFakeName = "fake-cuda";
constexpr const char* kCudaBuildSkip = "this build links the CUDA backend";
constexpr int64_t kHeadDim = 128;

using mmsparse::testing::expect_error;

TEST(BackendRegistry, CpuReferenceIsAlwaysRegisteredFirst) {
  const Backend* cpu = find_backend(DeviceType::kCPU);
  ASSERT_NE(cpu, nullptr);
  EXPECT_EQ(cpu->name(), "cpu-reference");
  const std::vector<const Backend*> backends = registered_backends();
  ASSERT_FALSE(backends.empty());
  EXPECT_EQ(backends.front(), cpu);
  ASSERT_FALSE(build_info().backends.empty());
  EXPECT_EQ(build_info().backends.front(), "cpu-reference");
  EXPECT_EQ(&backend_for_tensors("attention_dense", kHost), cpu);
}

TEST(BackendRegistry, SecondBackendForATypeIsRefused) {
  EXPECT_THROW(register_backend(DeviceType::kCPU, nullptr), std::logic_error);
}

TEST(BackendRegistry, CudaWithoutItsBackendSaysWhatIsMissing) {
  if (find_backend(DeviceType::kCUDA) != nullptr) GTEST_SKIP() << kCudaBuildSkip;
  expect_error([] { (void)backend_for_tensors("attention_dense", kCuda); }, ErrorCode::kUnsupported,
               {"attention_dense: tensors on cuda:0", "CUDA engine", "mmsparse::cuda",
                "pass host tensors to run the CPU reference"});
  expect_error([] { (void)backend_for_memory("DeviceTensor", kCuda); }, ErrorCode::kUnsupported,
               {"DeviceTensor", "no CUDA engine", "-DMMSPARSE_CUDA=ON"});
  expect_error([] { (void)prepare_plan(Plan{}, kCuda); }, ErrorCode::kUnsupported,
               {"prepare_plan", "CUDA engine"});
  // Queries answer without a backend rather than throw.
  EXPECT_EQ(preferred_tile_rows(kCuda, kHeadDim), kDefaultTileRows);
  const PlanShape shape{1, 2, 64, 64, kDefaultTileRows};
  EXPECT_FALSE(
      builds_plan_on_device(PatternSpec::parse("a-shape:sink=16,local=32"), shape, nullptr, kCuda));
  EXPECT_FALSE(build_info().cuda_enabled);
  EXPECT_TRUE(visible_gpus().empty());
}

TEST(BackendRegistry, HostHasNoDeviceMemory) {
  const std::vector<int64_t> shape = {2, 3};
  expect_error([&] { [[maybe_unused]] const DeviceTensor tensor(DType::kFloat32, shape, kHost); },
               ErrorCode::kInvalidArgument, {"DeviceTensor device", "got cpu"});
  expect_error([] { synchronize(kHost); }, ErrorCode::kInvalidArgument,
               {"synchronize device", "got cpu"});
}

TEST(BackendRegistry, HostPreparedPlanRecordsNoBuildTimes) {
  const PlanShape shape{1, 2, 64, 64, kDefaultTileRows};
  const PreparedPlan prepared =
      prepare_pattern(PatternSpec::parse("a-shape:sink=16,local=32"), shape, nullptr, kHost);
  EXPECT_EQ(prepared.device(), kHost);
  EXPECT_EQ(prepared.plan().shape.heads, shape.heads);
  expect_error([&] { (void)prepared.build_times(); }, ErrorCode::kUnsupported,
               {"PreparedPlan::build_times"});
}

// A backend for CUDA devices that records what it was handed instead of computing.
class FakeBackend final : public Backend {
 public:
  explicit FakeBackend(AttentionProblem* seen) : seen_(seen) {}
  std::string name() const override { return kFakeName; }
  void attention_dense(const AttentionProblem& problem, const TensorView&, const TensorView&,
                       const TensorView&, const TensorView&, const TensorView&,
                       const AttentionOptions&) override {
    *seen_ = problem;
  }
  void attention_planned(const AttentionProblem& problem, const Plan&, const TensorView&,
                         const TensorView&, const TensorView&, const TensorView&, const TensorView&,
                         const AttentionOptions&) override {
    *seen_ = problem;
  }
  void attention_prepared(const AttentionProblem& problem, const PreparedPlan&,
                          const PreparedState&, const TensorView&, const TensorView&,
                          const TensorView&, const TensorView&, const TensorView&,
                          const AttentionOptions&) override {
    *seen_ = problem;
  }
  void merge_partials(std::span<const TensorView>, std::span<const TensorView>, const TensorView&,
                      const TensorView&, const AttentionOptions&) override {}
  std::unique_ptr<PreparedState> prepare_plan(const Plan&, Device, void*) override {
    return std::make_unique<PreparedState>();
  }

 private:
  AttentionProblem* seen_;
};

TEST(BackendRegistry, RegisteredBackendReceivesValidatedProblems) {
  if (find_backend(DeviceType::kCUDA) != nullptr) GTEST_SKIP() << kCudaBuildSkip;
  AttentionProblem seen;
  register_backend(DeviceType::kCUDA, std::make_unique<FakeBackend>(&seen));
  EXPECT_THAT(build_info().backends, ::testing::Contains(kFakeName));

  // Host memory labelled as a CUDA device: the fake backend never reads it.
  constexpr int64_t kBatch = 1, kLen = 8, kHeads = 2, kDim = 4;
  Tensor q(DType::kFloat32, {kBatch, kLen, kHeads, kDim});
  Tensor out(DType::kFloat32, {kBatch, kLen, kHeads, kDim});
  Tensor lse(DType::kFloat32, {kBatch, kHeads, kLen});
  TensorView qv = q.view(), outv = out.view(), lsev = lse.view();
  for (TensorView* view : {&qv, &outv, &lsev}) view->device = kCuda;
  attention_dense(qv, qv, qv, outv, lsev, AttentionOptions{.causal = true});
  EXPECT_EQ(seen.device, kCuda);
  EXPECT_EQ(seen.q_heads, kHeads);
  EXPECT_TRUE(seen.causal);
  EXPECT_GT(seen.scale, 0.0f) << "the default scale is resolved before the backend runs";

  // Validation stays in the entry points: a bad call never reaches the backend.
  seen = AttentionProblem{};
  expect_error([&] { attention_dense(qv, qv, qv, lsev, lsev); }, ErrorCode::kInvalidArgument,
               {"out"});
  EXPECT_EQ(seen.q_heads, 0);
  // Operations the fake does not serve keep Backend's refusals.
  Tensor mask(DType::kUInt8, {1, kHeads, kLen, kLen});
  TensorView maskv = mask.view();
  maskv.device = kCuda;
  expect_error([&] { attention_masked(qv, qv, qv, maskv, outv, lsev); }, ErrorCode::kUnsupported,
               {"attention_masked", "CPU-only"});
}

}  // namespace
}  // namespace mmsparse
