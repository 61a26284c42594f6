// The public API on device memory, as a user calls it: DeviceTensor holds the operands, the entry
// points of attention.h dispatch to the CUDA engine because the tensors are on the device, and the
// results come back to the host to be checked against the CPU reference and the fp64 oracle. Also
// event timing and PreparedPlan on the device (DeviceTensor itself: test_gpu_device_tensor.cpp).

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "attention_harness.h"
#include "attention_oracle.h"
#include "common/compare.h"
#include "common/errors.h"
#include "common/random.h"
#include "cuda/runtime/engine.h"
#include "device_buffer.h"
#include "merge_tolerances.h"
#include "mmsparse/attention.h"
#include "mmsparse/device.h"
#include "mmsparse/layout.h"
#include "mmsparse/patterns.h"
#include "mmsparse/plan.h"
#include "mmsparse/tools/search.h"
#include "mmsparse/status.h"
#include "plan_generators.h"
#include "tensor_bits.h"

namespace mmsparse::test {
namespace {

using mmsparse::testing::expect_error;

constexpr Device kCuda{DeviceType::kCUDA, 0};
constexpr Device kCpu{DeviceType::kCPU, 0};
constexpr std::array<int64_t, 3> kGroups = {1, 4, 7};  // GQA ratios, 7 being the awkward one
constexpr int64_t kBatched = 2;  // batch of the batched cases; the others keep the oracle cheap
// Slack of the rule against the CPU reference (the harness's values): the rounding noise of one
// output element in 16-bit precision, and the float32 noise of an LSE.
constexpr double kOutputSlack = 1e-3;
constexpr double kLseSlack = 1e-3;

const KernelConfig kSmallConfig{DType::kBFloat16, 64};
// Edge cases on both head dims: the engine's automatic kernel choice may send head_dim 128 plans
// of spans to another kernel than head_dim 64 ones.
const std::array<KernelConfig, 2> kEdgeConfigs = {KernelConfig{DType::kBFloat16, 64},
                                                  KernelConfig{DType::kFloat16, 128}};

PlanShape shape_of(const ProblemSize& size, int64_t plan_batch = 1) {
  PlanShape shape;
  shape.batch = plan_batch;
  shape.heads = size.q_heads();
  shape.q_len = size.q_len;
  shape.kv_len = size.kv_len;
  return shape;
}

AttentionOptions options_of(const ProblemSize& size, bool causal = true) {
  AttentionOptions options;
  options.scale = size.scale;
  options.causal = causal;
  return options;
}

DeviceTensor poisoned_device(DType dtype, std::vector<int64_t> shape) {
  Tensor host(dtype, std::move(shape));
  poison(host);
  return DeviceTensor::from_host(host.view(), kCuda);
}

// Device copies of the inputs: DeviceTensor packs whatever layout the host operand has.
struct DeviceInputs {
  explicit DeviceInputs(const AttentionInputs& inputs)
      : q(DeviceTensor::from_host(inputs.q.view, kCuda)),
        k(DeviceTensor::from_host(inputs.k.view, kCuda)),
        v(DeviceTensor::from_host(inputs.v.view, kCuda)) {}
  DeviceTensor q, k, v;
};

// Poisoned device outputs of a problem.
struct DeviceOutputs {
  explicit DeviceOutputs(const ProblemSize& size)
      : out(poisoned_device(size.dtype, {size.batch, size.q_len, size.q_heads(), size.head_dim})),
        lse(poisoned_device(DType::kFloat32, {size.batch, size.q_heads(), size.q_len})) {}

  // Waits for the device (surfacing asynchronous faults), then downloads into an output of
  // `layout`: copy_to_host unpacks into any strides.
  AttentionResult download(const ProblemSize& size, OperandLayout layout) const {
    synchronize(kCuda);
    AttentionResult result{
        HostOperand(size.dtype, size.batch, size.q_len, size.q_heads(), size.head_dim, layout),
        Tensor(DType::kFloat32, {size.batch, size.q_heads(), size.q_len})};
    out.copy_to_host(result.out.view);
    lse.copy_to_host(result.lse.view());
    return result;
  }

  DeviceTensor out, lse;
};

void expect_bit_identical(const AttentionResult& actual, const AttentionResult& expected) {
  EXPECT_EQ(differing_elements(actual.out.view, expected.out.view), 0)
      << "O: " << compare(actual.out.view, expected.out.view);
  EXPECT_EQ(differing_elements(actual.lse.view(), expected.lse.view()), 0)
      << "LSE: " << compare(actual.lse.view(), expected.lse.view());
}

// max |result - fp64| <= 2 × max |baseline - fp64| + slack, for O and LSE; rows without keys
// (O = 0, LSE = -inf) must agree exactly, so any mismatch fails.
void expect_within_twice(const char* who, const AttentionResult& result, const char* baseline_name,
                         const Difference& baseline_out, const Difference& baseline_lse,
                         const OracleResult& fp64) {
  const Difference out = compare(result.out.view, fp64.out);
  const Difference lse = compare(result.lse.view(), fp64.lse);
  EXPECT_EQ(out.mismatches, 0) << who << " O has NaN, unwritten or misplaced infinite entries";
  EXPECT_EQ(lse.mismatches, 0) << who << " LSE differs in which rows are -inf, or is NaN";
  EXPECT_LE(out.max_abs, 2.0 * baseline_out.max_abs + kOutputSlack)
      << who << " O: " << out << "; " << baseline_name << " O: " << baseline_out;
  EXPECT_LE(lse.max_abs, 2.0 * baseline_lse.max_abs + kLseSlack)
      << who << " LSE: " << lse << "; " << baseline_name << " LSE: " << baseline_lse;
}

// --- attention_dense ---------------------------------------------------------------------------

class GpuPublicApi : public ::testing::TestWithParam<KernelConfig> {};

// The GPU's dense attention against the CPU reference's attention_dense on the same host inputs:
// both by the kernel rule against the fp64 oracle (dense attention as a plan gives the oracle its
// mask; the CPU passing proves that mask right), and the GPU's error within twice the CPU
// reference's (same input precision, fp32 arithmetic) plus slack.
TEST_P(GpuPublicApi, DenseAttentionMatchesTheCpuReference) {
  Random random;
  SCOPED_TRACE(random.trace());
  for (const int64_t group : kGroups) {
    for (const bool causal : {true, false}) {
      const ProblemSize size = random_problem(random, GetParam(), group == 1 ? kBatched : 1, group);
      const OperandLayout out_layout = random_layout(random);
      SCOPED_TRACE(describe(size) + (causal ? " causal" : " non-causal") +
                   " out=" + layout_name(out_layout));
      const AttentionInputs inputs = random_inputs(random, size);
      const AttentionOptions options = options_of(size, causal);

      const DeviceInputs device(inputs);
      const DeviceOutputs outputs(size);
      attention_dense(device.q.view(), device.k.view(), device.v.view(), outputs.out.view(),
                      outputs.lse.view(), options);
      const AttentionResult gpu = outputs.download(size, out_layout);

      AttentionResult cpu{HostOperand(size.dtype, size.batch, size.q_len, size.q_heads(),
                                      size.head_dim, OperandLayout::kContiguous),
                          Tensor(DType::kFloat32, {size.batch, size.q_heads(), size.q_len})};
      attention_dense(inputs.q.view, inputs.k.view, inputs.v.view, cpu.out.view, cpu.lse.view(),
                      options);

      const Plan plan = dense_plan(shape_of(size), causal);
      const OracleResult fp64 = attention_oracle(plan, inputs.q.view, inputs.k.view, inputs.v.view,
                                                 size.scale, OraclePrecision::kFloat64);
      const OracleResult naive = attention_oracle(plan, inputs.q.view, inputs.k.view, inputs.v.view,
                                                  size.scale, OraclePrecision::kNaive);
      const Difference naive_out = compare(std::span<const double>(naive.out), fp64.out);
      const Difference naive_lse = compare(std::span<const double>(naive.lse), fp64.lse);
      expect_within_twice("GPU", gpu, "naive", naive_out, naive_lse, fp64);
      expect_within_twice("CPU reference", cpu, "naive", naive_out, naive_lse, fp64);
      expect_within_twice("GPU", gpu, "CPU reference", compare(cpu.out.view, fp64.out),
                          compare(cpu.lse.view(), fp64.lse), fp64);
    }
  }
}

// --- attention_planned: host Plan and PreparedPlan ---------------------------------------------

// Runs `plan` on the device as a host Plan (uploaded for the call) and as a PreparedPlan (uploaded
// once, used `calls` times on fresh inputs): the two must agree bit for bit (same kernel, same
// plan), and both must match the oracle as the CPU reference does.
void check_planned(Random& random, const Plan& plan, const ProblemSize& size, int calls = 1) {
  SCOPED_TRACE(describe(size) + " plan: " + plan.summary());
  const PreparedPlan prepared = prepare_plan(plan, kCuda);
  EXPECT_EQ(device_name(prepared.device()), device_name(kCuda));
  EXPECT_EQ(prepared.plan().shape, plan.shape);
  for (int call = 0; call < calls; ++call) {
    SCOPED_TRACE("call " + std::to_string(call));
    const AttentionInputs inputs = random_inputs(random, size);
    const AttentionOptions options = options_of(size);
    const DeviceInputs device(inputs);

    const DeviceOutputs host_plan(size);
    attention_planned(plan, device.q.view(), device.k.view(), device.v.view(), host_plan.out.view(),
                      host_plan.lse.view(), options);
    const AttentionResult from_plan = host_plan.download(size, OperandLayout::kContiguous);

    const DeviceOutputs prepared_plan(size);
    attention_planned(prepared, device.q.view(), device.k.view(), device.v.view(),
                      prepared_plan.out.view(), prepared_plan.lse.view(), options);
    const AttentionResult from_prepared = prepared_plan.download(size, random_layout(random));

    expect_bit_identical(from_prepared, from_plan);
    expect_matches_oracle(plan, inputs, size, from_prepared);
  }
}

TEST_P(GpuPublicApi, PlannedStaticPatternsHostAndPreparedAgree) {
  Random random;
  SCOPED_TRACE(random.trace());
  const ProblemSize size = random_problem(random, GetParam(), 1, 2);
  const ModalityLayout layout = mixed_layout(random, size.kv_len);  // SF frame strides
  for (const char* spec :
       {"dense", "a-shape:sink=8,local=40", "tri-shape:sink=8,local=40,bottom=30",
        "sf-fixed:segment=48,vline_stride=32", "sf-strided:local=40,stride=24",
        "grid-mask:sink=8,local=40,period=32,band=6,phases=4,columns=1",
        "grid-mask:sink=8,local=40,period=32,band=6,phases=4,columns=0"}) {
    SCOPED_TRACE(spec);
    check_planned(random, build_plan(PatternSpec::parse(spec), shape_of(size), &layout), size);
  }
}

// A tri-shape plan with uneven tiles and the layout attached, and a plan whose masks read the
// layout's token arrays (same-media, modality pairs), one per batch element, so that the device
// copy of the token arrays is used. Each prepared plan serves more than one call.
TEST_P(GpuPublicApi, PlannedWithLayoutHostAndPreparedAgree) {
  Random random;
  SCOPED_TRACE(random.trace());
  constexpr int kCalls = 2;
  const ProblemSize size = random_problem(random, GetParam(), kBatched, 4);
  const ModalityLayout layout = mixed_layout(random, size.kv_len);
  {
    SCOPED_TRACE("tri-shape with layout");
    constexpr int64_t kSink = 13;
    constexpr int64_t kLocal = 70;
    constexpr int64_t kBottom = 45;
    Plan plan = tri_shape_plan(shape_of(size), kSink, kLocal, kBottom);
    plan.attach_layout(layout);
    check_planned(random, plan, size, kCalls);
  }
  {
    SCOPED_TRACE("mixed masks, one plan per batch element");
    RandomPlanOptions options;
    options.masks = MaskMix::kMixed;
    options.leave_gaps = true;
    check_planned(random, random_plan(random, shape_of(size, size.batch), options, &layout), size,
                  kCalls);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Kernels, GpuPublicApi,
    ::testing::Values(KernelConfig{DType::kBFloat16, 64}, KernelConfig{DType::kBFloat16, 128},
                      KernelConfig{DType::kFloat16, 64}, KernelConfig{DType::kFloat16, 128},
                      KernelConfig{DType::kBFloat16, cuda::kWgmmaWideHeadDim},
                      KernelConfig{DType::kFloat16, cuda::kWgmmaWideHeadDim}),
    [](const ::testing::TestParamInfo<KernelConfig>& info) { return config_name(info.param); });

// --- Edges: rows without keys, no keys at all, nothing to compute -----------------------------

TEST(GpuPublicApiEdges, DenseWithFewerKeysThanQueriesLeavesEarlyRowsEmpty) {
  Random random;
  SCOPED_TRACE(random.trace());
  for (const KernelConfig& config : kEdgeConfigs) {
    ProblemSize size = random_problem(random, config, kBatched, 7);
    // Under the bottom-right causal mask the first q_len - kv_len queries see no key: the
    // dispatcher's dense plan must give them tiles without keys (or none), and O = 0, LSE = -inf.
    size.kv_len = size.q_len / 2 + 1;
    SCOPED_TRACE(describe(size));
    const AttentionInputs inputs = random_inputs(random, size);
    const DeviceInputs device(inputs);
    const DeviceOutputs outputs(size);
    attention_dense(device.q.view(), device.k.view(), device.v.view(), outputs.out.view(),
                    outputs.lse.view(), options_of(size));
    const AttentionResult gpu = outputs.download(size, random_layout(random));
    expect_matches_oracle(dense_plan(shape_of(size), true), inputs, size, gpu);
    EXPECT_EQ(gpu.lse.data_as<float>()[0], -std::numeric_limits<float>::infinity());
  }
}

// attention.h: kv_len == 0 gives every row O = 0 and LSE = -inf, also for device tensors, whose
// empty k and v own no memory (a null pointer, as DLPack allows for empty tensors).
TEST(GpuPublicApiEdges, NoKeysGivesZeroOutputAndNegativeInfinityLse) {
  Random random;
  SCOPED_TRACE(random.trace());
  for (const KernelConfig& config : kEdgeConfigs) {
    ProblemSize size = random_problem(random, config, 1, 4);
    size.kv_len = 0;
    SCOPED_TRACE(describe(size));
    const AttentionInputs inputs = random_inputs(random, size);
    const DeviceInputs device(inputs);
    for (const bool causal : {true, false}) {
      SCOPED_TRACE(causal ? "causal" : "non-causal");
      const DeviceOutputs outputs(size);
      attention_dense(device.q.view(), device.k.view(), device.v.view(), outputs.out.view(),
                      outputs.lse.view(), options_of(size, causal));
      const AttentionResult gpu = outputs.download(size, OperandLayout::kContiguous);
      for (const double value : to_doubles(gpu.out.view)) ASSERT_EQ(value, 0.0);
      for (const double value : to_doubles(gpu.lse.view())) {
        ASSERT_EQ(value, -std::numeric_limits<double>::infinity());
      }
    }
  }
}

TEST(GpuPublicApiEdges, NoQueriesIsANoOp) {
  Random random;
  SCOPED_TRACE(random.trace());
  ProblemSize size = random_problem(random, kSmallConfig, 1, 2);
  size.q_len = 0;
  const AttentionInputs inputs = random_inputs(random, size);
  const DeviceInputs device(inputs);
  const DeviceOutputs outputs(size);
  EXPECT_NO_THROW(attention_dense(device.q.view(), device.k.view(), device.v.view(),
                                  outputs.out.view(), outputs.lse.view(), options_of(size)));
  EXPECT_NO_THROW(synchronize(kCuda));
}

// --- merge_partials ----------------------------------------------------------------------------

struct MergeCase {
  DType part_dtype;
  DType out_dtype;
  int parts;
};

TEST(GpuPublicApiMerge, MergePartialsOnTheDeviceMatchesTheCpu) {
  Random random;
  SCOPED_TRACE(random.trace());
  constexpr int64_t kBatch = 2;
  constexpr int64_t kHeads = 3;
  constexpr int64_t kHeadDim = 72;  // not a multiple of the warp size: a partial last slice
  constexpr int64_t kMaxQueryLength = 97;
  const int64_t q_len = random.uniform_int(1, kMaxQueryLength);
  const std::vector<int64_t> lse_shape = {kBatch, kHeads, q_len};
  for (const MergeCase& merge : {MergeCase{DType::kBFloat16, DType::kBFloat16, 2},
                                 MergeCase{DType::kFloat32, DType::kBFloat16, 3},
                                 MergeCase{DType::kFloat16, DType::kFloat32, 1}}) {
    SCOPED_TRACE("q_len=" + std::to_string(q_len) + " parts=" + std::to_string(merge.parts) +
                 " part dtype=" + std::string(dtype_name(merge.part_dtype)) +
                 " out dtype=" + std::string(dtype_name(merge.out_dtype)));
    std::vector<HostOperand> host_outs;
    std::vector<Tensor> host_lses;
    for (int p = 0; p < merge.parts; ++p) {
      host_outs.emplace_back(merge.part_dtype, kBatch, q_len, kHeads, kHeadDim,
                             random_layout(random));
      random.fill_normal(host_outs.back().view);
      Tensor lse(DType::kFloat32, lse_shape);
      float* values = lse.data_as<float>();
      for (int64_t i = 0; i < lse.numel(); ++i) {
        values[i] = random.bernoulli(kEmptyPartProbability)
                        ? -std::numeric_limits<float>::infinity()
                        : random.normal(0.0f, kLseSpread);
      }
      values[0] = -std::numeric_limits<float>::infinity();  // row 0 has no keys in any part
      host_lses.push_back(std::move(lse));
    }
    std::vector<TensorView> out_views, lse_views;
    std::vector<DeviceTensor> device_outs, device_lses;
    std::vector<TensorView> device_out_views, device_lse_views;
    for (int p = 0; p < merge.parts; ++p) {
      out_views.push_back(host_outs[p].view);
      lse_views.push_back(host_lses[p].view());
      device_outs.push_back(DeviceTensor::from_host(host_outs[p].view, kCuda));
      device_lses.push_back(DeviceTensor::from_host(host_lses[p].view(), kCuda));
    }
    for (int p = 0; p < merge.parts; ++p) {
      device_out_views.push_back(device_outs[p].view());
      device_lse_views.push_back(device_lses[p].view());
    }

    const DeviceTensor merged = poisoned_device(merge.out_dtype, {kBatch, q_len, kHeads, kHeadDim});
    const DeviceTensor merged_lse = poisoned_device(DType::kFloat32, lse_shape);
    merge_partials(device_out_views, device_lse_views, merged.view(), merged_lse.view());
    synchronize(kCuda);
    HostOperand gpu_out(merge.out_dtype, kBatch, q_len, kHeads, kHeadDim, random_layout(random));
    Tensor gpu_lse(DType::kFloat32, lse_shape);
    merged.copy_to_host(gpu_out.view);
    merged_lse.copy_to_host(gpu_lse.view());

    HostOperand cpu_out(merge.out_dtype, kBatch, q_len, kHeads, kHeadDim,
                        OperandLayout::kContiguous);
    Tensor cpu_lse(DType::kFloat32, lse_shape);
    merge_partials(out_views, lse_views, cpu_out.view, cpu_lse.view());

    // Within one rounding of the output dtype, element by element.
    const std::vector<double> expected = to_doubles(cpu_out.view);
    const std::vector<double> actual = to_doubles(gpu_out.view);
    int64_t bad = 0;
    for (std::size_t i = 0; i < expected.size(); ++i) {
      const double bound =
          kMergeAbsolute + relative_rounding(merge.out_dtype) * std::abs(expected[i]);
      if (!(std::abs(actual[i] - expected[i]) <= bound)) ++bad;
    }
    EXPECT_EQ(bad, 0) << "O elements off by more than one rounding: "
                      << compare(gpu_out.view, cpu_out.view);
    const Difference lse = compare(gpu_lse.view(), cpu_lse.view());
    EXPECT_EQ(lse.mismatches, 0) << lse;
    EXPECT_LE(lse.max_abs, kMergeRelative * kLseSpread * merge.parts) << lse;
    EXPECT_EQ(gpu_lse.data_as<float>()[0], -std::numeric_limits<float>::infinity());
    for (int64_t d = 0; d < kHeadDim; ++d) {
      ASSERT_EQ(load_float(gpu_out.view, d * gpu_out.view.strides[3]), 0.0f)
          << "row 0 has no keys in any part, element " << d;
    }
  }
}

// --- Timing ------------------------------------------------------------------------------------

TEST(GpuTiming, MedianDeviceMillisecondsTimesTheWork) {
  Random random;
  SCOPED_TRACE(random.trace());
  const ProblemSize size = random_problem(random, kSmallConfig, 1, 2);
  SCOPED_TRACE(describe(size));
  const AttentionInputs inputs = random_inputs(random, size);
  const DeviceInputs device(inputs);
  const DeviceOutputs outputs(size);
  int runs = 0;
  const auto work = [&] {
    ++runs;
    attention_dense(device.q.view(), device.k.view(), device.v.view(), outputs.out.view(),
                    outputs.lse.view(), options_of(size));
  };
  constexpr int kWarmup = 2;
  constexpr int kRepeats = 5;
  const double milliseconds = median_device_milliseconds(work, kWarmup, kRepeats, kCuda);
  EXPECT_TRUE(std::isfinite(milliseconds)) << milliseconds;
  EXPECT_GT(milliseconds, 0.0);
  EXPECT_EQ(runs, kWarmup + kRepeats);
  // The timed runs computed attention: the outputs hold the result, not the poison.
  expect_matches_oracle(dense_plan(shape_of(size), true), inputs, size,
                        outputs.download(size, OperandLayout::kContiguous));

  runs = 0;
  for (const int repeats : {0, -1}) {
    SCOPED_TRACE("repeats=" + std::to_string(repeats));
    expect_error([&] { (void)median_device_milliseconds(work, kWarmup, repeats, kCuda); },
                 ErrorCode::kInvalidArgument, {"repeats", ">= 1", std::to_string(repeats)});
  }
  expect_error([&] { (void)median_device_milliseconds(work, kWarmup, kRepeats, kCpu); },
               ErrorCode::kInvalidArgument, {"device", device_name(kCpu)});
  EXPECT_EQ(runs, 0) << "work ran although the arguments were rejected";
}

// --- PreparedPlan across devices ---------------------------------------------------------------

TEST(GpuPreparedPlan, PlanPreparedForTheDeviceRejectsHostTensors) {
  Random random;
  SCOPED_TRACE(random.trace());
  const ProblemSize size = random_problem(random, kSmallConfig, 1, 2);
  const Plan plan = dense_plan(shape_of(size), true);
  const PreparedPlan prepared = prepare_plan(plan, kCuda);
  const AttentionInputs inputs = random_inputs(random, size);
  HostOperand out(size.dtype, size.batch, size.q_len, size.q_heads(), size.head_dim,
                  OperandLayout::kContiguous);
  Tensor lse(DType::kFloat32, {size.batch, size.q_heads(), size.q_len});
  poison(out.storage);
  poison(lse);
  expect_error(
      [&] {
        attention_planned(prepared, inputs.q.view, inputs.k.view, inputs.v.view, out.view,
                          lse.view(), options_of(size));
      },
      ErrorCode::kInvalidArgument, {"prepared plan device", device_name(kCpu), device_name(kCuda)});
  for (const double value : to_doubles(out.view)) ASSERT_TRUE(std::isnan(value)) << "O written";

  // The device upload validates the plan too, naming the field.
  Plan broken = plan;
  broken.tiles.back().end = size.q_len + 1;
  expect_error([&] { (void)prepare_plan(std::move(broken), kCuda); }, ErrorCode::kInvalidArgument,
               {"plan.tiles"});

  // An empty PreparedPlan is rejected on device tensors as on host ones.
  const DeviceInputs device(inputs);
  const DeviceOutputs outputs(size);
  const PreparedPlan empty;
  expect_error(
      [&] {
        attention_planned(empty, device.q.view(), device.k.view(), device.v.view(),
                          outputs.out.view(), outputs.lse.view(), options_of(size));
      },
      ErrorCode::kInvalidArgument, {"PreparedPlan"});
  synchronize(kCuda);
}

// The search's measured cost: a scope's q, k, v go to the device once (prepare) and each candidate
// pays only for its plan's upload and timed runs. Times are positive and finite; a sparse plan
// over a small share of the pairs runs faster than dense; index costs are 0 for static patterns
// and positive for dynamic ones, built on the GPU or on the host; inputs prepared by another model
// are rejected by name.
TEST(GpuMeasuredCost, TimesPlansOnInputsPreparedOnce) {
  Random random;
  SCOPED_TRACE(random.trace());
  constexpr int64_t kTokens = 8192;
  constexpr int64_t kHeadDim = 128;
  const Tensor q = random.normal_tensor(DType::kFloat32, {1, kTokens, 1, kHeadDim});
  const Tensor k = random.normal_tensor(DType::kFloat32, {1, kTokens, 1, kHeadDim});
  const Tensor v = random.normal_tensor(DType::kFloat32, {1, kTokens, 1, kHeadDim});
  const std::unique_ptr<CostModel> model = make_measured_cost(kCuda, 1, 3);
  ASSERT_TRUE(model->measured());
  const std::unique_ptr<CostInputs> inputs = model->prepare(q.view(), k.view(), v.view());
  const PlanShape shape{1, 1, kTokens, kTokens, model->tile_rows(kHeadDim)};
  const double dense = model->cost(build_plan(PatternSpec{"dense", {}}, shape), *inputs);
  const double sparse =
      model->cost(build_plan(PatternSpec::parse("a-shape:sink=128,local=256"), shape), *inputs);
  EXPECT_TRUE(std::isfinite(dense) && dense > 0.0) << dense;
  EXPECT_TRUE(std::isfinite(sparse) && sparse > 0.0) << sparse;
  EXPECT_LT(sparse, dense) << "a-shape reads about 5% of the causal pairs";

  // The index: none for a static pattern; a vertical-slash head built by the GPU's kernels; a
  // Q-boundary grid head whose last rows are more runs than the GPU estimate takes (a layout
  // ending in one-token images), as its host build from the host q and k.
  constexpr int64_t kOneTokenRuns = 17;
  const ModalityLayout text = ModalityLayout::text_only(kTokens);
  EXPECT_EQ(model->index_cost(PatternSpec::parse("a-shape:sink=128,local=256"), shape, text, 0.0f,
                              *inputs),
            0.0);
  const double on_device =
      model->index_cost(PatternSpec::parse("vertical-slash"), shape, text, 0.0f, *inputs);
  EXPECT_TRUE(std::isfinite(on_device) && on_device > 0.0) << on_device;
  const ModalityLayout many_runs = mixed_layout(random, kTokens, kOneTokenRuns);
  ASSERT_FALSE(
      builds_plan_on_device(PatternSpec::parse("grid:boundary=2"), shape, &many_runs, kCuda));
  const double on_host =
      model->index_cost(PatternSpec::parse("grid:boundary=2"), shape, many_runs, 0.0f, *inputs);
  EXPECT_TRUE(std::isfinite(on_host) && on_host > 0.0) << on_host;

  const std::unique_ptr<CostInputs> modelled_inputs =
      make_modelled_cost()->prepare(q.view(), k.view(), v.view());
  expect_error(
      [&] {
        (void)model->index_cost(PatternSpec::parse("vertical-slash"), shape, text, 0.0f,
                                *modelled_inputs);
      },
      ErrorCode::kInvalidArgument, {"inputs", "measured cost"});
  expect_error(
      [&] {
        (void)model->cost(build_plan(PatternSpec{"dense", {}}, shape), *modelled_inputs);
      },
      ErrorCode::kInvalidArgument, {"inputs", "measured cost"});
}

}  // namespace
}  // namespace mmsparse::test
