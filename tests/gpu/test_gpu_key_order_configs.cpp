// Key orders (Plan::key_orders) through per-head configs (cuda/runtime/config_builder.h) and
// download_plan. A layer's config mixes heads built on the GPU (dense, A-shape, vertical-slash
// estimated from device q and k with every line kept, so that no rounding decides a line) with
// BlindSight heads whose image tiles read K and V through key orders (permute=1, built on the host
// and uploaded as the host section), with GQA where query heads of one KV head read through
// different orders (blindsight-intra's and blindsight-sink's), causal and bidirectional (unmasked
// image tiles); random multi-image layouts, q_len at
// or below kv_len, both kernels. The concatenation equals the upload of build_plan's plan record
// for record (span shifts and orders included), its download is that plan, prepare_pattern's host
// copy too, and attention through it matches the fp64 oracle. Random key-ordered plans, uploaded
// in both forms, download to the plans they came from.

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "attention_harness.h"
#include "common/blindsight_cases.h"
#include "common/key_order_plans.h"
#include "common/random.h"
#include "config_build_check.h"
#include "cuda/runtime/config_builder.h"
#include "cuda/runtime/engine.h"
#include "cuda/runtime/plan_download.h"
#include "index_build_cases.h"
#include "index_test_support.h"
#include "methods/blindsight/blindsight.h"
#include "mmsparse/attention.h"
#include "mmsparse/layout.h"
#include "mmsparse/patterns.h"
#include "mmsparse/plan.h"
#include "plan_equality.h"
#include "plan_records.h"
#include "stream_test.h"

namespace mmsparse::test {
namespace {

constexpr int kConfigTrials = 3;  // per kernel
constexpr int kDownloadTrials = 12;
// A few thousand tokens at most (the fp64 oracle is dense); images past one 128-key chunk.
constexpr int64_t kMaxImages = 6;
constexpr int64_t kMaxSide = 12;
constexpr int64_t kMaxText = 30;
constexpr int64_t kMaxQueryShortfall = 90;
constexpr int64_t kKvHeads = 2;
constexpr int64_t kGroup = 4;
// Vertical-slash budgets above any line count: every line kept, on the host and the device alike.
constexpr int64_t kEveryLine = 100000;
constexpr int64_t kLastQueries = 64;

PatternSpec permuted(Random& random, const BlindSightLayoutCase& test_case,
                     const std::string& name) {
  PatternSpec spec = blindsight_spec(random, test_case, name);
  spec.params["permute"] = 1;
  return spec;
}

// KV head 0: three heads built on the GPU beside a key-ordered one; KV head 1: key-ordered heads
// of both orders and an in-place one. Without device heads, every head is BlindSight (the host
// section is the whole layer).
std::vector<PatternSpec> layer_specs(Random& random, const BlindSightLayoutCase& test_case,
                                     bool device_heads) {
  std::vector<PatternSpec> specs;
  if (device_heads) {
    specs.push_back({"dense", {}});
    specs.push_back({"a-shape", {{"sink", 16}, {"local", 100}}});
    specs.push_back(vertical_slash(kEveryLine, kEveryLine, 0, 0, kLastQueries, 0));
  } else {
    specs.push_back(permuted(random, test_case, "blindsight-intra"));
    specs.push_back(blindsight_spec(random, test_case, "blindsight-dense"));
    specs.push_back(permuted(random, test_case, "blindsight-intra-sink"));
  }
  specs.push_back(permuted(random, test_case, "blindsight-sink"));
  specs.push_back(permuted(random, test_case, "blindsight-intra"));
  specs.push_back(permuted(random, test_case, "blindsight-sink"));
  specs.push_back(permuted(random, test_case, "blindsight-intra-sink"));
  specs.push_back(blindsight_spec(random, test_case, "blindsight-intra", KeyPlacement::kInPlace));
  return specs;
}

// The key orders each head slot's tiles read through.
std::vector<std::set<int32_t>> slot_orders(const Plan& plan) {
  std::vector<std::set<int32_t>> orders(static_cast<std::size_t>(plan.head_slots()));
  for (int64_t slot = 0; slot < plan.head_slots(); ++slot) {
    for (int64_t t = plan.head_tile_offsets[slot]; t < plan.head_tile_offsets[slot + 1]; ++t) {
      if (plan.tile_key_order(t) != kKeysInPlace) orders[slot].insert(plan.tile_key_order(t));
    }
  }
  return orders;
}

// Whether two query heads of one KV head read through different orders.
bool group_mixes_orders(const Plan& plan, int64_t group) {
  const std::vector<std::set<int32_t>> orders = slot_orders(plan);
  for (std::size_t a = 0; a < orders.size(); ++a) {
    for (std::size_t b = a + 1; b < orders.size() && b / group == a / group; ++b) {
      if (!orders[a].empty() && !orders[b].empty() && orders[a] != orders[b]) return true;
    }
  }
  return false;
}

ProblemSize layer_size(Random& random, const KernelConfig& config, int64_t kv_len) {
  ProblemSize size = random_problem(random, config, 1, kGroup);
  size.kv_heads = kKvHeads;
  size.kv_len = kv_len;
  size.q_len = random.bernoulli(0.5)
                   ? kv_len
                   : std::max<int64_t>(1, kv_len - random.uniform_int(1, kMaxQueryShortfall));
  return size;
}

class GpuKeyOrdersConfig : public StreamTest, public ::testing::WithParamInterface<KernelConfig> {};

TEST_P(GpuKeyOrdersConfig, MixedHeadsMatchTheHostPlanAndTheOracle) {
  const KernelConfig config = GetParam();
  Random random;
  SCOPED_TRACE(random.trace());
  int64_t mixed_groups = 0;
  int64_t ordered_trials = 0;  // a short q_len may hold no image row
  for (int trial = 0; trial < kConfigTrials; ++trial) {
    BlindSightLayoutCase test_case =
        random_blindsight_case(random, random.uniform_int(2, kMaxImages), kMaxSide, kMaxText);
    // Both styles: bidirectional image tiles read their order unmasked.
    test_case.bidirectional = trial % 2 == 1;
    const ModalityLayout& layout = test_case.layout;
    const ProblemSize size = layer_size(random, config, layout.length());
    const PlanShape shape = plan_shape(size);
    const bool device_heads = trial != kConfigTrials - 1;
    const std::vector<PatternSpec> specs = layer_specs(random, test_case, device_heads);
    ASSERT_EQ(static_cast<int64_t>(specs.size()), shape.heads);
    std::vector<PatternSpec> resolved;
    for (const PatternSpec& spec : specs) resolved.push_back(resolve_pattern(spec, &layout));
    const AttentionInputs inputs = random_inputs(random, size);
    const PatternOperands operands(inputs, size.scale);
    const Plan host = build_plan(specs, shape, &layout, &operands.host);
    SCOPED_TRACE(describe(size) + " layout " + layout.to_json() + " plan " + host.summary());
    ordered_trials += host.has_key_orders() ? 1 : 0;
    mixed_groups += group_mixes_orders(host, size.group) ? 1 : 0;

    const cuda::ConfigBuild built =
        build_config_and_wait(resolved, shape, &layout, operands, stream_);
    EXPECT_EQ(built.plan.layout().has_key_orders, host.has_key_orders());
    expect_same_records(built.plan, host, stream_);
    const Plan downloaded = cuda::download_plan(std::span(&built.plan, 1), {built.masks}, kCuda);
    expect_decoded_plan(downloaded, host);
    const PlanBuildTimes times = cuda::config_build_times(*built.timer);
    for (int64_t slot = 0; slot < shape.head_slots(); ++slot) {
      if (detail::permutes_keys(resolved[slot % shape.heads], &layout)) {
        EXPECT_FALSE(times.heads[slot].on_device) << "head slot " << slot;
      }
    }
    expect_matches_oracle(host, inputs, size,
                          run_gpu(built.plan, inputs, size, random_layout(random)));

    // prepare_pattern's per-head form: its host copy is the download of the same records.
    const PreparedPlan prepared =
        prepare_pattern(specs, shape, &layout, kCuda, stream_, &operands.device, &operands.host);
    expect_decoded_plan(prepared.plan(), host);
  }
  EXPECT_GT(ordered_trials, 0) << "no trial's plan read keys through a key order";
  EXPECT_GT(mixed_groups, 0) << "no KV head had query heads of different orders";
}

INSTANTIATE_TEST_SUITE_P(
    Kernels, GpuKeyOrdersConfig,
    ::testing::Values(KernelConfig{DType::kBFloat16, cuda::kWgmmaHeadDim,
                                   cuda::AttentionKernel::kWgmma, cuda::kMaxTileRows},
                      KernelConfig{DType::kFloat16, 64, cuda::AttentionKernel::kMmaSync,
                                   cuda::kMmaSyncTileRows}),
    [](const ::testing::TestParamInfo<KernelConfig>& info) { return config_name(info.param); });

// Random key-ordered plans (tests/common/key_order_plans.h), uploaded as a per-head config's host
// section is (lattices) and for attention, download to the plans they came from.
TEST(GpuKeyOrdersDownload, RandomUploadsDownloadToTheirPlans) {
  Random random;
  SCOPED_TRACE(random.trace());
  for (int trial = 0; trial < kDownloadTrials; ++trial) {
    KeyOrderPlanOptions options;
    options.batch = random.uniform_int(1, 2);
    options.heads = random.uniform_int(1, 5);
    options.q_len = random.uniform_int(1, 400);
    options.kv_len = options.q_len + random.uniform_int(0, 300);
    options.tile_rows = random.bernoulli(0.5) ? cuda::kMmaSyncTileRows : cuda::kMaxTileRows;
    options.orders = random.uniform_int(1, 3);
    const Plan plan = random_key_order_plan(random, options).plan;
    SCOPED_TRACE(plan.summary());
    const cuda::DevicePlan uploaded(plan, nullptr);
    const Plan downloaded = cuda::download_plan(std::span(&uploaded, 1), {plan.masks}, kCuda);
    expect_decoded_plan(downloaded, plan);
    const std::vector<cuda::DevicePlan> passes = cuda::upload_passes(plan, nullptr);
    expect_decoded_plan(cuda::download_plan(passes, {plan.masks}, kCuda), plan);
  }
}

}  // namespace
}  // namespace mmsparse::test
