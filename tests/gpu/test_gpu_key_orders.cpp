// Plans whose tiles read keys through key orders (Plan::key_orders) on the CUDA engine: random
// plans mixing key-ordered (causal or unmasked) and in-place tiles (orders with scattered runs and
// padding, GQA, odd lengths, q_len < kv_len, K and V in random memory layouts) against the fp64
// oracle and the CPU reference, in both upload forms, on both kernels and both CTA schedules of
// the wgmma kernel; and the upload's refusal of an invalid one.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "attention_harness.h"
#include "common/errors.h"
#include "common/key_order_plans.h"
#include "common/random.h"
#include "cuda/runtime/engine.h"
#include "device_buffer.h"
#include "mmsparse/attention.h"
#include "mmsparse/plan.h"
#include "mmsparse/status.h"

namespace mmsparse::test {
namespace {

using testing::expect_error;

// A random key-ordered plan over the problem's shape; tiles of at most the config's rows.
KeyOrderPlan plan_for(Random& random, const ProblemSize& size, bool broadcast) {
  KeyOrderPlanOptions options;
  options.batch = broadcast ? 1 : size.batch;
  options.heads = size.q_heads();
  options.q_len = size.q_len;
  options.kv_len = size.kv_len;
  options.tile_rows = size.tile_rows;  // tiles of random lengths up to it
  options.orders = random.uniform_int(1, 3);
  options.unmasked_share = 0.3;  // some key-ordered tiles unmasked: spans of keys in any order
  return random_key_order_plan(random, options);
}

using KeyOrderParams = std::tuple<KernelConfig, int64_t /*group*/>;

class GpuKeyOrders : public ::testing::TestWithParam<KeyOrderParams> {};

// The wgmma kernel's CTA schedules (one tile per CTA and persistent CTAs, which it compiles for
// tiles of more than 64 rows at head_dim 128), or the mma.sync kernel's one.
std::vector<cuda::CtaSchedule> schedules_of(const KernelConfig& config) {
  if (config.kernel != cuda::AttentionKernel::kWgmma) return {cuda::CtaSchedule::kAuto};
  return {cuda::CtaSchedule::kOneTilePerCta, cuda::CtaSchedule::kPersistent};
}

TEST_P(GpuKeyOrders, RandomPlansMatchTheOracle) {
  const auto [config, group] = GetParam();
  Random random;
  SCOPED_TRACE(random.trace());
  for (const bool broadcast : {true, false}) {
    ProblemSize size = random_problem(random, config, broadcast ? 1 : 2, group);
    SCOPED_TRACE(describe(size));
    const KeyOrderPlan generated = plan_for(random, size, broadcast);
    const AttentionInputs inputs = random_inputs(random, size);
    // The default upload, then the attention form with launch records.
    const cuda::DevicePlan device_plan(generated.plan, nullptr);
    // Small shapes can draw no key-ordered tile (every tile in place or skipped).
    EXPECT_EQ(device_plan.layout().has_key_orders, generated.plan.has_key_orders());
    EXPECT_EQ(runs_on_wgmma(device_plan, size), config.kernel == cuda::AttentionKernel::kWgmma);
    const std::vector<cuda::DevicePlan> passes = cuda::upload_passes(generated.plan, nullptr);
    for (const cuda::CtaSchedule schedule : schedules_of(config)) {
      size.schedule = schedule;
      const bool persistent_compiled =
          config.head_dim == cuda::kWgmmaHeadDim && size.tile_rows > cuda::kMmaSyncTileRows;
      if (schedule == cuda::CtaSchedule::kPersistent && !persistent_compiled) continue;
      SCOPED_TRACE(schedule == cuda::CtaSchedule::kPersistent ? "persistent" : "one tile per CTA");
      expect_matches_oracle(generated.plan, inputs, size,
                            run_gpu(device_plan, inputs, size, random_layout(random)));
      expect_matches_oracle(generated.plan, inputs, size,
                            run_gpu(passes, inputs, size, random_layout(random)));
    }
  }
}

std::string key_order_name(const ::testing::TestParamInfo<KeyOrderParams>& info) {
  const auto [config, group] = info.param;
  return config_name(config) + "_gqa" + std::to_string(group);
}

INSTANTIATE_TEST_SUITE_P(
    Kernels, GpuKeyOrders,
    ::testing::Combine(
        ::testing::Values(
            KernelConfig{DType::kBFloat16, 128, cuda::AttentionKernel::kWgmma, cuda::kMaxTileRows},
            KernelConfig{DType::kFloat16, 128, cuda::AttentionKernel::kWgmma, cuda::kMaxTileRows},
            KernelConfig{DType::kBFloat16, 128, cuda::AttentionKernel::kWgmma,
                         cuda::kMmaSyncTileRows},
            KernelConfig{DType::kFloat16, cuda::kWgmmaWideHeadDim, cuda::AttentionKernel::kWgmma,
                         cuda::kMaxTileRows},
            KernelConfig{DType::kBFloat16, 64}, KernelConfig{DType::kFloat16, 128}),
        ::testing::Values(int64_t{1}, int64_t{4}, int64_t{7})),
    key_order_name);

// Every byte of a device buffer, for comparing what a refused call left there.
std::vector<uint8_t> device_bytes(const DeviceBuffer& buffer) {
  std::vector<uint8_t> bytes(buffer.bytes());
  buffer.download(bytes.data());
  return bytes;
}

// A key-ordered plan of 128-row tiles at head_dim 64, which neither kernel serves: the call is
// refused before anything runs (the K/V copy allocated for its tensor maps is freed unused) and
// the outputs keep what they held.
TEST(GpuKeyOrdersRefusals, RefusedCallLeavesOutputsIntact) {
  Random random;
  SCOPED_TRACE(random.trace());
  ProblemSize size = random_problem(random, KernelConfig{DType::kBFloat16, 64}, 1, 4);
  size.tile_rows = cuda::kMaxTileRows;
  size.kernel = cuda::AttentionKernel::kAuto;
  const KeyOrderPlan generated = plan_for(random, size, true);
  const cuda::DevicePlan device_plan(generated.plan, nullptr);
  const AttentionInputs inputs = random_inputs(random, size);
  const DeviceOperand q(inputs.q);
  const DeviceOperand k(inputs.k);
  const DeviceOperand v(inputs.v);
  HostOperand host_out(size.dtype, size.batch, size.q_len, size.q_heads(), size.head_dim,
                       OperandLayout::kContiguous);
  DeviceOperand out(host_out);
  Tensor host_lse(DType::kFloat32, {size.batch, size.q_heads(), size.q_len});
  DeviceBuffer lse(host_lse.nbytes());
  out.buffer.poison();
  lse.poison();
  TensorView lse_view = host_lse.view();
  lse_view.data = lse.data();
  lse_view.device = {DeviceType::kCUDA, 0};
  AttentionOptions options;
  options.scale = size.scale;
  const AttentionProblem problem = describe_attention(q.view, k.view, v.view, options);
  const cuda::AttentionArgs args =
      cuda::make_attention_args(problem, q.view, k.view, v.view, out.view, lse_view, nullptr);
  const std::vector<uint8_t> out_before = device_bytes(out.buffer);
  const std::vector<uint8_t> lse_before = device_bytes(lse);
  expect_error([&] { cuda::attention_planned(device_plan, args); }, ErrorCode::kUnsupported,
               {"tile_rows"});
  synchronize_device();
  EXPECT_EQ(device_bytes(out.buffer), out_before);
  EXPECT_EQ(device_bytes(lse), lse_before);
}

TEST(GpuKeyOrdersRefusals, InvalidKeyOrderedPlansAreRefusedAtUpload) {
  PlanBuilder builder({.batch = 1, .heads = 1, .q_len = 9, .kv_len = 12});
  builder.add_key_order({11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0});
  builder.begin_head();
  builder.begin_tile(0, 9, {}, 0);
  builder.add_span(0, 1);
  Plan plan = builder.finish();
  plan.key_orders[0][3] = plan.key_orders[0][4];  // a key twice
  expect_error([&] { const cuda::DevicePlan device_plan(plan, nullptr); },
               ErrorCode::kInvalidArgument, {"plan.key_orders", "twice"});
}

}  // namespace
}  // namespace mmsparse::test
