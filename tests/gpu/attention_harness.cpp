#include "attention_harness.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "attention_oracle.h"
#include "common/compare.h"
#include "mmsparse/attention.h"

namespace mmsparse::test {
namespace {

constexpr int64_t kMinQueryLength = 65;
constexpr int64_t kMaxQueryLength = 250;
constexpr int64_t kMaxExtraKeys = 150;
constexpr int64_t kTileMultiple = 64;
constexpr double kRandomScaleProbability = 0.3;
constexpr double kMinRandomScale = 0.05;
constexpr double kMaxRandomScale = 0.4;
// Slack of the check rule: the rounding noise of one output element in 16-bit precision, and
// the float32 noise of an LSE.
constexpr double kOutputSlack = 1e-3;
constexpr double kLseSlack = 1e-3;

Tensor lse_tensor(const ProblemSize& size) {
  return Tensor(DType::kFloat32, {size.batch, size.q_heads(), size.q_len});
}

void expect_within_rule(const char* who, const AttentionResult& result, const OracleResult& fp64,
                        const OracleResult& naive) {
  const Difference naive_out = compare(std::span<const double>(naive.out), fp64.out);
  const Difference naive_lse = compare(std::span<const double>(naive.lse), fp64.lse);
  const Difference out = compare(result.out.view, fp64.out);
  const Difference lse = compare(result.lse.view(), fp64.lse);
  EXPECT_EQ(out.mismatches, 0) << who << " O has NaN, unwritten or misplaced infinite entries";
  EXPECT_EQ(lse.mismatches, 0) << who << " LSE differs in which rows are -inf, or is NaN";
  EXPECT_LE(out.max_abs, 2.0 * naive_out.max_abs + kOutputSlack)
      << who << " O: " << out << "; naive O: " << naive_out;
  EXPECT_LE(lse.max_abs, 2.0 * naive_lse.max_abs + kLseSlack)
      << who << " LSE: " << lse << "; naive LSE: " << naive_lse;
}

}  // namespace

std::string config_name(const KernelConfig& config) {
  std::string name = std::string(config.dtype == DType::kBFloat16 ? "bf16" : "fp16") + "_d" +
                     std::to_string(config.head_dim);
  if (config.kernel == cuda::AttentionKernel::kWgmma) {
    name += "_wgmma" + std::to_string(config.tile_rows);
  }
  return name;
}

void PrintTo(const KernelConfig& config, std::ostream* out) { *out << config_name(config); }

std::string describe(const ProblemSize& size) {
  return "batch=" + std::to_string(size.batch) + " q_len=" + std::to_string(size.q_len) +
         " kv_len=" + std::to_string(size.kv_len) + " kv_heads=" + std::to_string(size.kv_heads) +
         " group=" + std::to_string(size.group) + " head_dim=" + std::to_string(size.head_dim) +
         " dtype=" + std::string(dtype_name(size.dtype)) + " scale=" + std::to_string(size.scale);
}

ProblemSize random_problem(Random& random, const KernelConfig& config, int64_t batch,
                           int64_t group) {
  ProblemSize size;
  size.batch = batch;
  size.group = group;
  size.kv_heads = random.uniform_int(1, 2);
  size.head_dim = config.head_dim;
  size.dtype = config.dtype;
  size.kernel = config.kernel;
  size.tile_rows = config.tile_rows;
  size.q_len = random.uniform_int(kMinQueryLength, kMaxQueryLength);
  if (size.q_len % kTileMultiple == 0) ++size.q_len;
  size.kv_len = size.q_len + random.uniform_int(1, kMaxExtraKeys);
  if (size.kv_len % kTileMultiple == 0) ++size.kv_len;
  size.scale = random.bernoulli(kRandomScaleProbability)
                   ? static_cast<float>(random.uniform(kMinRandomScale, kMaxRandomScale))
                   : 1.0f / std::sqrt(static_cast<float>(size.head_dim));
  return size;
}

OperandLayout random_layout(Random& random) {
  return static_cast<OperandLayout>(random.uniform_int(0, 2));
}

AttentionInputs random_inputs(Random& random, const ProblemSize& size) {
  AttentionInputs inputs{HostOperand(size.dtype, size.batch, size.q_len, size.q_heads(),
                                     size.head_dim, random_layout(random)),
                         HostOperand(size.dtype, size.batch, size.kv_len, size.kv_heads,
                                     size.head_dim, random_layout(random)),
                         HostOperand(size.dtype, size.batch, size.kv_len, size.kv_heads,
                                     size.head_dim, random_layout(random))};
  random.fill_normal(inputs.q.view);
  random.fill_normal(inputs.k.view);
  random.fill_normal(inputs.v.view);
  return inputs;
}

AttentionResult run_gpu(const cuda::DevicePlan& plan, const AttentionInputs& inputs,
                        const ProblemSize& size, OperandLayout out_layout) {
  return run_gpu(std::span(&plan, 1), inputs, size, out_layout);
}

AttentionResult run_gpu(std::span<const cuda::DevicePlan> passes, const AttentionInputs& inputs,
                        const ProblemSize& size, OperandLayout out_layout) {
  AttentionResult result{
      HostOperand(size.dtype, size.batch, size.q_len, size.q_heads(), size.head_dim, out_layout),
      lse_tensor(size)};
  const DeviceOperand q(inputs.q);
  const DeviceOperand k(inputs.k);
  const DeviceOperand v(inputs.v);
  DeviceOperand out(result.out);
  DeviceBuffer lse(result.lse.nbytes());
  out.buffer.poison();
  lse.poison();
  TensorView lse_view = result.lse.view();
  lse_view.data = lse.data();
  lse_view.device = {DeviceType::kCUDA, 0};

  AttentionOptions options;
  options.scale = size.scale;
  const AttentionProblem problem = describe_attention(q.view, k.view, v.view, options);
  check_outputs(problem, out.view, lse_view);
  cuda::AttentionArgs args =
      cuda::make_attention_args(problem, q.view, k.view, v.view, out.view, lse_view, nullptr);
  args.kernel = runs_on_wgmma(passes, size) || size.kernel != cuda::AttentionKernel::kWgmma
                    ? size.kernel
                    : cuda::AttentionKernel::kAuto;
  args.schedule = size.schedule;
  cuda::attention_passes(passes, args);
  synchronize_device();
  out.download(result.out);
  lse.download(result.lse.data());
  return result;
}

bool runs_on_wgmma(const cuda::DevicePlan& plan, const ProblemSize& size) {
  return runs_on_wgmma(std::span(&plan, 1), size);
}

bool runs_on_wgmma(std::span<const cuda::DevicePlan> passes, const ProblemSize& size) {
  cuda::AttentionArgs args;
  args.dtype = size.dtype;
  args.head_dim = size.head_dim;
  return size.kernel == cuda::AttentionKernel::kWgmma &&
         std::all_of(passes.begin(), passes.end(),
                     [&](const cuda::DevicePlan& pass) { return cuda::wgmma_serves(pass, args); });
}

AttentionResult run_cpu(const Plan& plan, const AttentionInputs& inputs, const ProblemSize& size) {
  AttentionResult result{HostOperand(size.dtype, size.batch, size.q_len, size.q_heads(),
                                     size.head_dim, OperandLayout::kContiguous),
                         lse_tensor(size)};
  AttentionOptions options;
  options.scale = size.scale;
  attention_planned(plan, inputs.q.view, inputs.k.view, inputs.v.view, result.out.view,
                    result.lse.view(), options);
  return result;
}

void expect_matches_oracle(const Plan& plan, const AttentionInputs& inputs, const ProblemSize& size,
                           const AttentionResult& gpu) {
  const OracleResult fp64 = attention_oracle(plan, inputs.q.view, inputs.k.view, inputs.v.view,
                                             size.scale, OraclePrecision::kFloat64);
  const OracleResult naive = attention_oracle(plan, inputs.q.view, inputs.k.view, inputs.v.view,
                                              size.scale, OraclePrecision::kNaive);
  expect_within_rule("GPU", gpu, fp64, naive);
  expect_within_rule("CPU reference", run_cpu(plan, inputs, size), fp64, naive);
}

}  // namespace mmsparse::test
