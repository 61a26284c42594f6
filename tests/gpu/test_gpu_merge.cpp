// The GPU merge of partial (O, LSE) results against the CPU merge_partials, and end to end: the
// merge of a plan's span half and column half equals the whole plan.

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "attention_harness.h"
#include "common/compare.h"
#include "common/random.h"
#include "cuda/runtime/engine.h"
#include "device_buffer.h"
#include "merge_tolerances.h"
#include "mmsparse/attention.h"
#include "plan_generators.h"

namespace mmsparse::test {
namespace {

constexpr float kNegativeInfinity = -std::numeric_limits<float>::infinity();

struct MergeCase {
  DType part_dtype;
  DType out_dtype;
  int parts;
};

struct HostPart {
  HostOperand out;  // [batch, q_len, heads, head_dim]
  Tensor lse;       // [batch, heads, q_len]
};

struct DevicePart {
  DeviceOperand out;
  DeviceBuffer lse;
};


// A contiguous [batch, heads, q_len] float32 view of device memory.
TensorView device_view(const DeviceBuffer& lse, int64_t batch, int64_t heads, int64_t q_len) {
  return TensorView::contiguous(lse.data(), DType::kFloat32, {batch, heads, q_len},
                                {DeviceType::kCUDA, 0});
}

// Runs cuda::merge_partials and mmsparse::merge_partials (CPU) on the same random parts and
// compares element by element: within one rounding of the output dtype, equal infinities.
void check_merge(Random& random, const MergeCase& merge, int64_t batch, int64_t q_len,
                 int64_t heads, int64_t head_dim) {
  SCOPED_TRACE("parts=" + std::to_string(merge.parts) +
               " part dtype=" + std::string(dtype_name(merge.part_dtype)) +
               " out dtype=" + std::string(dtype_name(merge.out_dtype)));
  std::vector<HostPart> parts;
  for (int p = 0; p < merge.parts; ++p) {
    HostPart part{
        HostOperand(merge.part_dtype, batch, q_len, heads, head_dim, random_layout(random)),
        Tensor(DType::kFloat32, {batch, heads, q_len})};
    random.fill_normal(part.out.view);
    float* lse = part.lse.data_as<float>();
    for (int64_t i = 0; i < part.lse.numel(); ++i) {
      lse[i] = random.bernoulli(kEmptyPartProbability) ? kNegativeInfinity
                                                       : random.normal(0.0f, kLseSpread);
    }
    parts.push_back(std::move(part));
  }
  // Row 0 of batch 0, head 0 has no keys in any part.
  for (HostPart& part : parts) part.lse.data_as<float>()[0] = kNegativeInfinity;

  std::vector<DevicePart> device_parts;
  std::vector<TensorView> device_outs;
  std::vector<TensorView> device_lses;
  for (const HostPart& part : parts) {
    DevicePart device{DeviceOperand(part.out), DeviceBuffer(part.lse.nbytes())};
    device.lse.upload(part.lse.data());
    device_outs.push_back(device.out.view);
    device_lses.push_back(device_view(device.lse, batch, heads, q_len));
    device_parts.push_back(std::move(device));
  }
  const std::vector<cuda::MergePart> merge_parts = cuda::make_merge_parts(device_outs, device_lses);

  HostOperand gpu_out(merge.out_dtype, batch, q_len, heads, head_dim, random_layout(random));
  Tensor gpu_lse(DType::kFloat32, {batch, heads, q_len});
  DeviceOperand out(gpu_out);
  DeviceBuffer lse(gpu_lse.nbytes());
  out.buffer.poison();
  lse.poison();
  const cuda::MergeArgs args =
      cuda::make_merge_args(merge_parts, out.view, device_view(lse, batch, heads, q_len), nullptr);
  cuda::merge_partials(args);
  synchronize_device();
  out.download(gpu_out);
  lse.download(gpu_lse.data());

  HostOperand cpu_out(merge.out_dtype, batch, q_len, heads, head_dim, OperandLayout::kContiguous);
  Tensor cpu_lse(DType::kFloat32, {batch, heads, q_len});
  std::vector<TensorView> out_views;
  std::vector<TensorView> lse_views;
  for (const HostPart& part : parts) {
    out_views.push_back(part.out.view);
    lse_views.push_back(part.lse.view());
  }
  merge_partials(out_views, lse_views, cpu_out.view, cpu_lse.view());

  const std::vector<double> expected_out = to_doubles(cpu_out.view);
  const std::vector<double> actual_out = to_doubles(gpu_out.view);
  const double relative = relative_rounding(merge.out_dtype);
  int64_t bad = 0;
  for (std::size_t i = 0; i < expected_out.size(); ++i) {
    const double bound = kMergeAbsolute + relative * std::abs(expected_out[i]);
    if (!(std::abs(actual_out[i] - expected_out[i]) <= bound)) ++bad;
  }
  EXPECT_EQ(bad, 0) << "O elements off by more than one rounding: "
                    << compare(gpu_out.view, cpu_out.view);
  const Difference lse_difference = compare(gpu_lse.view(), cpu_lse.view());
  EXPECT_EQ(lse_difference.mismatches, 0) << lse_difference;
  EXPECT_LE(lse_difference.max_abs, kMergeRelative * kLseSpread * merge.parts) << lse_difference;
}

TEST(GpuMerge, MatchesCpuMerge) {
  Random random;
  SCOPED_TRACE(random.trace());
  constexpr int64_t kBatch = 2;
  constexpr int64_t kHeads = 3;
  // 72: rows of 16-byte vectors, for the vector kernel (9 threads per row, so rows straddle warps
  // and blocks end mid-warp); 36: not whole vectors, for the generic kernel (and not a multiple of
  // the warp size: a partial last slice).
  for (const int64_t head_dim : {72, 36}) {
    SCOPED_TRACE("head_dim=" + std::to_string(head_dim));
    const int64_t q_len = random.uniform_int(1, 97);
    for (const MergeCase& merge : {MergeCase{DType::kBFloat16, DType::kBFloat16, 2},
                                   MergeCase{DType::kFloat16, DType::kFloat32, 3},
                                   MergeCase{DType::kFloat32, DType::kBFloat16, 5},
                                   MergeCase{DType::kBFloat16, DType::kFloat32, 1}}) {
      check_merge(random, merge, kBatch, q_len, kHeads, head_dim);
    }
  }
}

TEST(GpuMerge, MorePartsThanOneLaunchTakes) {
  Random random;
  SCOPED_TRACE(random.trace());
  constexpr int kParts = 70;  // three launches of at most 32 parts
  check_merge(random, MergeCase{DType::kFloat32, DType::kFloat32, kParts}, 1, 17, 2, 64);
}

TEST(GpuMerge, SpanAndColumnHalvesMergeToTheWholePlan) {
  Random random;
  SCOPED_TRACE(random.trace());
  const KernelConfig config{DType::kBFloat16, 128};
  const ProblemSize size = random_problem(random, config, 1, 2);
  SCOPED_TRACE(describe(size));
  const AttentionInputs inputs = random_inputs(random, size);
  PlanShape shape;
  shape.heads = size.q_heads();
  shape.q_len = size.q_len;
  shape.kv_len = size.kv_len;
  RandomPlanOptions options;
  options.leave_gaps = true;
  const Plan plan = random_plan(random, shape, options);

  const cuda::DevicePlan whole_plan(plan, nullptr);
  const cuda::DevicePlan span_plan(split_plan(plan, true), nullptr);
  const cuda::DevicePlan column_plan(split_plan(plan, false), nullptr);
  const AttentionResult whole = run_gpu(whole_plan, inputs, size, OperandLayout::kContiguous);
  const AttentionResult spans = run_gpu(span_plan, inputs, size, OperandLayout::kContiguous);
  const AttentionResult columns = run_gpu(column_plan, inputs, size, OperandLayout::kHeadMajor);

  std::vector<DeviceOperand> outs;
  std::vector<DeviceBuffer> lses;
  std::vector<cuda::MergePart> parts;
  for (const AttentionResult* half : {&spans, &columns}) {
    outs.emplace_back(half->out);
    lses.emplace_back(half->lse.nbytes());
    lses.back().upload(half->lse.data());
  }
  const cuda::Strides3 lse_strides = {size.q_heads() * size.q_len, size.q_len, 1};
  for (std::size_t p = 0; p < outs.size(); ++p) {
    const TensorView& view = outs[p].view;
    parts.push_back({size.dtype,
                     view.data,
                     {view.strides[0], view.strides[1], view.strides[2], view.strides[3]},
                     static_cast<const float*>(lses[p].data()),
                     lse_strides});
  }
  // Merge in place into the span half's buffers: out and lse alias part 0.
  cuda::MergeArgs args;
  args.batch = size.batch;
  args.q_len = size.q_len;
  args.heads = size.q_heads();
  args.head_dim = size.head_dim;
  args.parts = parts;
  args.dtype = size.dtype;
  args.out = outs[0].buffer.data();
  args.out_strides = parts[0].out_strides;
  args.lse = static_cast<float*>(lses[0].data());
  args.lse_strides = lse_strides;
  cuda::merge_partials(args);
  synchronize_device();
  HostOperand merged(size.dtype, size.batch, size.q_len, size.q_heads(), size.head_dim,
                     OperandLayout::kContiguous);
  Tensor merged_lse(DType::kFloat32, {size.batch, size.q_heads(), size.q_len});
  outs[0].download(merged);
  lses[0].download(merged_lse.data());

  // The halves round their outputs to bf16 before the merge, so the merged result carries up to
  // two extra roundings; the whole plan's own error against the oracle is checked elsewhere. LSEs
  // stay float32 throughout.
  constexpr double kTwoRoundings = 2.0 / 128;
  constexpr double kLseTolerance = 1e-3;
  const Difference out = compare(merged.view, whole.out.view);
  const Difference lse = compare(merged_lse.view(), whole.lse.view());
  EXPECT_EQ(out.mismatches, 0) << out;
  EXPECT_EQ(lse.mismatches, 0) << lse;
  EXPECT_LE(out.relative, kTwoRoundings) << out;
  EXPECT_LE(lse.max_abs, kLseTolerance) << lse;
}

}  // namespace
}  // namespace mmsparse::test
