// The CUDA attention engine's edge cases, reuse and argument errors, on one configuration each
// (plans without tiles or keys, queries before every key, a device plan reused across calls, what
// the kernels cannot serve), and the upload's merging of strided spans into lattice records.

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <functional>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "attention_harness.h"
#include "common/errors.h"
#include "common/random.h"
#include "core/engine_chunks.h"
#include "cuda/runtime/engine.h"
#include "device_buffer.h"
#include "mmsparse/attention.h"
#include "mmsparse/patterns.h"
#include "mmsparse/status.h"
#include "plan_generators.h"
#include "plan_records.h"

namespace mmsparse::test {
namespace {

const KernelConfig kSmallConfig{DType::kBFloat16, 64};
const KernelConfig kWgmmaConfig{DType::kBFloat16, 128, cuda::AttentionKernel::kWgmma,
                                cuda::kMaxTileRows};
const KernelConfig kWideConfig{DType::kFloat16, cuda::kWgmmaWideHeadDim,
                               cuda::AttentionKernel::kWgmma, cuda::kMaxTileRows};

PlanShape shape_of(const ProblemSize& size) {
  PlanShape shape;
  shape.heads = size.q_heads();
  shape.q_len = size.q_len;
  shape.kv_len = size.kv_len;
  return shape;
}

TEST(GpuAttentionEdges, PlanWithoutTilesGivesZeroAndMinusInfinity) {
  Random random;
  SCOPED_TRACE(random.trace());
  const ProblemSize size = random_problem(random, kSmallConfig, 2, 2);
  const AttentionInputs inputs = random_inputs(random, size);
  PlanBuilder builder(shape_of(size));
  for (int64_t head = 0; head < size.q_heads(); ++head) builder.begin_head();
  const Plan plan = builder.finish();
  const cuda::DevicePlan device_plan(plan, nullptr);
  expect_matches_oracle(plan, inputs, size,
                        run_gpu(device_plan, inputs, size, OperandLayout::kPaddedRows));
}

void check_tiles_without_keys(const KernelConfig& config) {
  Random random;
  SCOPED_TRACE(random.trace());
  ProblemSize size = random_problem(random, config, 1, 1);
  // kv_len < q_len: under the causal mask the first q_len - kv_len queries see no key.
  size.kv_len = size.q_len / 2 + 1;
  const AttentionInputs inputs = random_inputs(random, size);
  PlanShape shape = shape_of(size);
  shape.tile_rows = config.tile_rows;
  PlanBuilder builder(shape);
  for (int64_t head = 0; head < size.q_heads(); ++head) {
    builder.begin_head();
    constexpr int64_t kEmptyTileRows = 5;
    builder.begin_tile(0, kEmptyTileRows);  // no keys at all
    for (int64_t begin = kEmptyTileRows; begin < size.q_len; begin += config.tile_rows) {
      builder.begin_tile(begin, std::min(size.q_len, begin + config.tile_rows));
      builder.add_span(0, size.kv_len);
    }
  }
  const Plan plan = builder.finish();
  const cuda::DevicePlan device_plan(plan, nullptr);
  EXPECT_EQ(runs_on_wgmma(device_plan, size), config.kernel == cuda::AttentionKernel::kWgmma);
  expect_matches_oracle(plan, inputs, size,
                        run_gpu(device_plan, inputs, size, OperandLayout::kContiguous));
}

TEST(GpuAttentionEdges, TilesWithoutKeysAndQueriesBeforeEveryKey) {
  check_tiles_without_keys(kSmallConfig);
}

TEST(GpuAttentionEdges, WgmmaTilesWithoutKeysAndQueriesBeforeEveryKey) {
  check_tiles_without_keys(kWgmmaConfig);
}

TEST(GpuAttentionEdges, HeadDim256TilesWithoutKeysAndQueriesBeforeEveryKey) {
  check_tiles_without_keys(kWideConfig);
}

// "full", the non-causal dense reference of video DiT workloads: every key for every query under a
// mask policy that masks nothing, with kv_len above and below q_len (no query is before a key
// here), MHA and GQA.
void check_full_attention(const KernelConfig& config) {
  Random random;
  SCOPED_TRACE(random.trace());
  for (const int64_t group : {1, 4}) {
    for (const bool fewer_keys : {false, true}) {
      ProblemSize size = random_problem(random, config, 1, group);
      if (fewer_keys) size.kv_len = size.q_len / 2 + 1;
      SCOPED_TRACE(describe(size));
      const AttentionInputs inputs = random_inputs(random, size);
      PlanShape shape = shape_of(size);
      shape.tile_rows = config.tile_rows;
      const Plan plan = build_plan(PatternSpec{"full", {}}, shape);
      const cuda::DevicePlan device_plan(plan, nullptr);
      expect_matches_oracle(plan, inputs, size,
                            run_gpu(device_plan, inputs, size, OperandLayout::kContiguous));
    }
  }
}

TEST(GpuAttentionEdges, FullAttentionIsNonCausalDense) { check_full_attention(kSmallConfig); }

TEST(GpuAttentionEdges, WgmmaFullAttentionIsNonCausalDense) { check_full_attention(kWgmmaConfig); }

TEST(GpuAttentionEdges, DevicePlanIsReusableAcrossCalls) {
  Random random;
  SCOPED_TRACE(random.trace());
  const ProblemSize size = random_problem(random, kSmallConfig, 1, 2);
  RandomPlanOptions options;
  options.leave_gaps = true;
  const Plan plan = random_plan(random, shape_of(size), options);
  const cuda::DevicePlan device_plan(plan, nullptr);
  constexpr int kCalls = 2;
  for (int call = 0; call < kCalls; ++call) {
    SCOPED_TRACE("call " + std::to_string(call));
    const AttentionInputs inputs = random_inputs(random, size);
    expect_matches_oracle(plan, inputs, size,
                          run_gpu(device_plan, inputs, size, random_layout(random)));
  }
}

// --- Argument errors
// ---------------------------------------------------------------------------------

ErrorCode error_code_of(const std::function<void()>& call) {
  try {
    call();
  } catch (const Error& error) {
    return error.code();
  }
  ADD_FAILURE() << "expected mmsparse::Error";
  return ErrorCode::kBackendError;
}

// Device copies of a problem's inputs, outputs to write, and the engine's arguments over them.
struct DeviceCall {
  DeviceCall(const ProblemSize& size, const AttentionInputs& inputs)
      : q(inputs.q),
        k(inputs.k),
        v(inputs.v),
        out(inputs.q),
        lse(static_cast<std::size_t>(size.batch * size.q_heads() * size.q_len) * sizeof(float)) {
    const TensorView lse_view =
        TensorView::contiguous(lse.data(), DType::kFloat32,
                               {size.batch, size.q_heads(), size.q_len}, {DeviceType::kCUDA, 0});
    const AttentionProblem problem = describe_attention(q.view, k.view, v.view, AttentionOptions{});
    args = cuda::make_attention_args(problem, q.view, k.view, v.view, out.view, lse_view, nullptr);
  }
  DeviceOperand q, k, v, out;
  DeviceBuffer lse;
  cuda::AttentionArgs args;
};

TEST(GpuAttentionErrors, RejectsWhatTheKernelCannotServe) {
  Random random;
  const ProblemSize size = random_problem(random, kSmallConfig, 1, 1);
  const AttentionInputs inputs = random_inputs(random, size);
  const DeviceCall call(size, inputs);
  const cuda::AttentionArgs& args = call.args;

  PlanShape wide = shape_of(size);
  wide.tile_rows = cuda::kMaxTileRows * 2;
  const cuda::DevicePlan wide_plan(dense_plan(wide, true), nullptr);
  EXPECT_EQ(error_code_of([&] { cuda::attention_planned(wide_plan, args); }),
            ErrorCode::kUnsupported);

  // Tiles beyond the mma.sync kernel's rows need the wgmma kernel, which needs head_dim 128.
  PlanShape tall = shape_of(size);
  tall.tile_rows = cuda::kMaxTileRows;
  const cuda::DevicePlan tall_plan(dense_plan(tall, true), nullptr);
  EXPECT_EQ(error_code_of([&] { cuda::attention_planned(tall_plan, args); }),
            ErrorCode::kUnsupported);

  const cuda::DevicePlan plan(dense_plan(shape_of(size), true), nullptr);
  cuda::AttentionArgs forced_wgmma = args;
  forced_wgmma.kernel = cuda::AttentionKernel::kWgmma;
  EXPECT_EQ(error_code_of([&] { cuda::attention_planned(plan, forced_wgmma); }),
            ErrorCode::kUnsupported);
  // The engine folds the scale into its exponentials, which needs it positive.
  cuda::AttentionArgs negative_scale = args;
  negative_scale.scale = -args.scale;
  EXPECT_EQ(error_code_of([&] { cuda::attention_planned(plan, negative_scale); }),
            ErrorCode::kInvalidArgument);
  cuda::AttentionArgs float32 = args;
  float32.dtype = DType::kFloat32;
  EXPECT_EQ(error_code_of([&] { cuda::attention_planned(plan, float32); }),
            ErrorCode::kUnsupported);
  cuda::AttentionArgs odd_stride = args;
  odd_stride.k_strides[1] += 1;
  EXPECT_EQ(error_code_of([&] { cuda::attention_planned(plan, odd_stride); }),
            ErrorCode::kUnsupported);
  cuda::AttentionArgs other_length = args;
  other_length.q_len += 1;
  EXPECT_EQ(error_code_of([&] { cuda::attention_planned(plan, other_length); }),
            ErrorCode::kInvalidArgument);
  synchronize_device();
}

// head_dim 256 runs on the wgmma kernel alone, in 128-row tiles by preference: forcing the
// mma.sync kernel is refused, naming the head_dim, and so is a head_dim no kernel serves.
TEST(GpuAttentionErrors, HeadDim256RunsOnTheWgmmaKernelOnly) {
  constexpr int64_t kUnservedHeadDim = 192;
  EXPECT_EQ(preferred_tile_rows({DeviceType::kCUDA, 0}, cuda::kWgmmaWideHeadDim),
            cuda::kMaxTileRows);
  Random random;
  const ProblemSize size = random_problem(random, kWideConfig, 1, 1);
  const AttentionInputs inputs = random_inputs(random, size);
  const DeviceCall call(size, inputs);
  PlanShape shape = shape_of(size);
  shape.tile_rows = kDefaultTileRows;
  const cuda::DevicePlan plan(dense_plan(shape, true), nullptr);
  EXPECT_TRUE(runs_on_wgmma(plan, size));

  cuda::AttentionArgs mma_sync = call.args;
  mma_sync.kernel = cuda::AttentionKernel::kMmaSync;
  testing::expect_error([&] { cuda::attention_planned(plan, mma_sync); }, ErrorCode::kUnsupported,
                        {"head_dim 64 or 128, got 256"});
  cuda::AttentionArgs unserved = call.args;
  unserved.head_dim = kUnservedHeadDim;
  EXPECT_EQ(error_code_of([&] { cuda::attention_planned(plan, unserved); }),
            ErrorCode::kUnsupported);
  synchronize_device();
}

// upload_passes validates the whole plan once, before it uploads any pass: a later pass that
// breaks the plan (a tile naming a mask the pass does not have) is rejected.
TEST(GpuAttentionErrors, UploadOfPassesRejectsABrokenLaterPass) {
  Random random;
  const PlanShape shape = shape_of(random_problem(random, kSmallConfig, 1, 1));
  Plan plan = dense_plan(shape, true);
  Plan broken = dense_plan(shape, true);
  broken.tile_masks.front() = static_cast<int32_t>(broken.masks.size());
  plan.extra_passes.push_back(broken);
  EXPECT_EQ(error_code_of([&] { cuda::upload_passes(plan, nullptr); }),
            ErrorCode::kInvalidArgument);
}

// The upload merges kLatticeSpans strided spans into one lattice record only when they qualify
// (device_plan.cu): one step, consecutive begins, equal counts (whole kLatticePeriodsPerChunk
// periods or not), inside one period, within the whole periods of kv_len, and the plan's first
// lattice step. Any other group stays strided records (gathered: correct, only slower), and the
// plan keeps the lattice step of its first group.
TEST(GpuPlanUpload, LatticeGroupsMergeOnlyWhenTheyQualify) {
  constexpr int64_t kStep = 32;
  constexpr int64_t kWholePeriods = 40;
  constexpr int64_t kPeriods = kLatticePeriodsPerChunk;
  struct Group {
    int64_t step = kStep;
    int64_t first = 4;           // first key of the group's first strided span
    int64_t periods = kPeriods;  // keys per strided span
    int64_t gap = 0;             // extra distance between the 4th and 5th span's begins
  };
  struct Case {
    const char* what;
    std::vector<Group> groups;
    int64_t kv_extra = 0;  // keys past the whole periods
    std::vector<bool> merged;
    int32_t lattice_step;
  };
  const std::vector<Case> cases = {
      {"a qualifying group", {Group{}}, 0, {true}, kStep},
      {"crossing a period's end", {Group{.first = kStep - 4}}, 0, {false}, 0},
      {"past the whole periods of kv_len",
       {Group{.first = (kWholePeriods - kPeriods + 1) * kStep}},
       10,
       {false},
       0},
      {"part of a chunk's periods", {Group{.periods = kPeriods - 1}}, 0, {true}, kStep},
      {"a chunk and a part", {Group{.periods = kPeriods + 3}}, 0, {true}, kStep},
      {"begins not consecutive", {Group{.gap = 1}}, 0, {false}, 0},
      {"a second step after the first",
       {Group{}, Group{.step = 2 * kStep, .first = 16}},
       0,
       {true, false},
       kStep},
  };
  for (const Case& test_case : cases) {
    SCOPED_TRACE(test_case.what);
    PlanShape shape;
    shape.q_len = shape.kv_len = kWholePeriods * kStep + test_case.kv_extra;
    shape.tile_rows = 128;
    PlanBuilder builder(shape);
    builder.begin_head();
    builder.begin_tile(0, std::min<int64_t>(shape.q_len, shape.tile_rows), {.causal = false});
    for (const Group& group : test_case.groups) {
      for (int64_t j = 0; j < kLatticeSpans; ++j) {
        const int64_t begin = group.first + j + (j >= kLatticeSpans / 2 ? group.gap : 0);
        builder.add_strided_span(begin, begin + (group.periods - 1) * group.step + 1, group.step);
      }
    }
    const Plan plan = builder.finish();
    const cuda::DevicePlan uploaded(plan, 0, nullptr);
    EXPECT_EQ(uploaded.layout().lattice_step, test_case.lattice_step);
    // Strided spans left unmerged are gathered; lattice records are tensor copies.
    EXPECT_EQ(uploaded.layout().gathers, std::find(test_case.merged.begin(), test_case.merged.end(),
                                                   false) != test_case.merged.end());
    std::vector<std::array<int32_t, 4>> expected;
    std::size_t next = 0;
    for (std::size_t g = 0; g < test_case.groups.size(); ++g) {
      const Group& group = test_case.groups[g];
      if (test_case.merged[g]) {
        const int64_t last_period_begin = group.first + (group.periods - 1) * group.step;
        expected.push_back({static_cast<int32_t>(group.first),
                            static_cast<int32_t>(last_period_begin + kLatticeSpans),
                            static_cast<int32_t>(group.step), static_cast<int32_t>(kLatticeSpans)});
        next += kLatticeSpans;
        continue;
      }
      for (int64_t j = 0; j < kLatticeSpans; ++j, ++next) {
        const StridedSpan& strided = plan.strided_spans[next];
        expected.push_back({strided.begin, strided.end, strided.step, 1});
      }
    }
    EXPECT_EQ(uploaded_key_ranges(uploaded), expected);
  }
}

}  // namespace
}  // namespace mmsparse::test
