// BlindSight's device builder (src/methods/blindsight/blindsight_device.h): plans built on the GPU
// from the layout alone equal the upload of the host builder's plan record for record (tiles,
// spans, the packed sink columns, masks, token arrays, schedule), on random layouts (odd image
// sizes, adjacent images, no text, one image, a hundred images; Qwen sink_percent and Gemma 3 sink
// lists; causal and bidirectional; several head slots, q_len <= kv_len, tile heights 64 and 128);
// attention over them matches the fp64 oracle with GQA; prepare_pattern takes them; and a Gemma 3
// config (bidirectional images: token masks) mixes with other device-built heads in one plan. The
// device builder writes in-place plans (permute=0): plans through key orders (causal, or
// bidirectional and unmasked) are built on the host and uploaded, alone or as parts of a per-head
// config.

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include "attention_harness.h"
#include "common/blindsight_cases.h"
#include "common/random.h"
#include "config_build_check.h"
#include "cuda/runtime/engine.h"
#include "device_buffer.h"
#include "methods/blindsight/blindsight_device.h"
#include "methods/device_builder.h"
#include "mmsparse/attention.h"
#include "mmsparse/layout.h"
#include "mmsparse/patterns.h"
#include "mmsparse/plan.h"
#include "plan_records.h"
#include "stream_test.h"

namespace mmsparse::test {
namespace {

constexpr int64_t kMaxText = 40;
constexpr std::array<int64_t, 2> kTileRows = {kDefaultTileRows, cuda::kMaxTileRows};

// A layout of images only: adjacent images without markers, no text anywhere.
BlindSightLayoutCase images_only(Random& random) {
  BlindSightLayoutCase result;
  result.bidirectional = random.bernoulli(0.5);
  LayoutBuilder builder;
  const int64_t images = random.uniform_int(1, 6);
  for (int64_t i = 0; i < images; ++i) {
    builder.image({1, random.uniform_int(1, 12), random.uniform_int(1, 12)}, false);
  }
  result.layout = builder.build();  // images of different sizes: Qwen-style sinks
  return result;
}

// The cases: random, one image, a hundred images, images only.
std::vector<BlindSightLayoutCase> random_cases(Random& random) {
  std::vector<BlindSightLayoutCase> cases;
  constexpr int kRandom = 6;
  for (int c = 0; c < kRandom; ++c) {
    cases.push_back(random_blindsight_case(random, random.uniform_int(1, 8), 24, kMaxText));
  }
  cases.push_back(random_blindsight_case(random, 1, 40, kMaxText));
  cases.push_back(random_blindsight_case(random, 100, 5, 6));
  cases.push_back(images_only(random));
  return cases;
}

// The keys each tile of a host plan lists, counted record by record (DevicePlan::listed_keys).
std::vector<int64_t> tile_keys(const Plan& plan) {
  std::vector<int64_t> keys;
  for (std::size_t t = 0; t < plan.tiles.size(); ++t) {
    int64_t count = plan.tile_column_offsets[t + 1] - plan.tile_column_offsets[t];
    for (int64_t s = plan.tile_span_offsets[t]; s < plan.tile_span_offsets[t + 1]; ++s) {
      count += plan.spans[s].end - plan.spans[s].begin;
    }
    for (int64_t s = plan.tile_strided_offsets[t]; s < plan.tile_strided_offsets[t + 1]; ++s) {
      count += plan.strided_spans[s].count();
    }
    keys.push_back(count);
  }
  return keys;
}

// kAuto's CTA schedule reads the keys the tiles list: both counts of `plan` against the records.
void expect_listed_keys(const cuda::DevicePlan& plan, const Plan& host) {
  const std::vector<int64_t> keys = tile_keys(host);
  EXPECT_EQ(plan.listed_keys(), std::accumulate(keys.begin(), keys.end(), int64_t{0}));
  EXPECT_EQ(plan.longest_tile_keys(),
            keys.empty() ? 0 : *std::max_element(keys.begin(), keys.end()));
}

class GpuBlindSightBuilder : public StreamTest {};

TEST_F(GpuBlindSightBuilder, RecordsEqualTheUpload) {
  Random random;
  SCOPED_TRACE(random.trace());
  for (const BlindSightLayoutCase& test_case : random_cases(random)) {
    const int64_t kv_len = test_case.layout.length();
    for (const int64_t tile_rows : kTileRows) {
      const PlanShape shape{.batch = random.uniform_int(1, 2),
                            .heads = random.uniform_int(1, 4),
                            .q_len = random.bernoulli(0.5) ? kv_len : random.uniform_int(1, kv_len),
                            .kv_len = kv_len,
                            .tile_rows = tile_rows};
      for (const char* name : kBlindSightTemplates) {
        const PatternSpec spec = resolve_pattern(
            blindsight_spec(random, test_case, name, KeyPlacement::kInPlace), &test_case.layout);
        SCOPED_TRACE(spec.to_string() + " batch " + std::to_string(shape.batch) + " heads " +
                     std::to_string(shape.heads) + " q_len " + std::to_string(shape.q_len) +
                     " tile_rows " + std::to_string(tile_rows) + " layout " +
                     test_case.layout.to_json());
        EXPECT_NE(detail::device_builder_for(spec, shape, &test_case.layout, false), nullptr);
        const cuda::DevicePlan built =
            cuda::build_blindsight_plan_on_device(spec, shape, &test_case.layout, stream_);
        expect_cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
        const Plan host = build_plan(spec, shape, &test_case.layout);
        expect_same_records(built, host, stream_);
        expect_listed_keys(built, host);
        expect_listed_keys(cuda::DevicePlan(host, stream_), host);
      }
    }
  }
}

// GQA problems at head_dim 128 on the wgmma kernel and 64 on mma.sync, through plans the GPU built.
TEST_F(GpuBlindSightBuilder, AttentionMatchesTheOracle) {
  Random random;
  SCOPED_TRACE(random.trace());
  const std::array<KernelConfig, 2> configs = {
      KernelConfig{DType::kBFloat16, cuda::kWgmmaHeadDim, cuda::AttentionKernel::kWgmma,
                   cuda::kMaxTileRows},
      KernelConfig{DType::kFloat16, 64, cuda::AttentionKernel::kMmaSync, kDefaultTileRows}};
  for (const KernelConfig& config : configs) {
    for (const char* name : kBlindSightTemplates) {
      const BlindSightLayoutCase test_case =
          random_blindsight_case(random, random.uniform_int(1, 6), 12, kMaxText);
      ProblemSize size = random_problem(random, config, 1, random.uniform_int(1, 4));
      size.kv_len = test_case.layout.length();
      size.q_len = random.bernoulli(0.5) ? size.kv_len : random.uniform_int(1, size.kv_len);
      const PlanShape shape{.heads = size.q_heads(),
                            .q_len = size.q_len,
                            .kv_len = size.kv_len,
                            .tile_rows = size.tile_rows};
      const PatternSpec spec = resolve_pattern(
          blindsight_spec(random, test_case, name, KeyPlacement::kInPlace), &test_case.layout);
      SCOPED_TRACE(describe(size) + " " + spec.to_string() + " layout " +
                   test_case.layout.to_json());
      const cuda::DevicePlan built =
          cuda::build_blindsight_plan_on_device(spec, shape, &test_case.layout, stream_);
      expect_cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
      const AttentionInputs inputs = random_inputs(random, size);
      expect_matches_oracle(build_plan(spec, shape, &test_case.layout), inputs, size,
                            run_gpu(built, inputs, size, random_layout(random)));
    }
  }
}

// prepare_pattern builds a BlindSight spec on the GPU without inputs, and its host copy is the
// host builder's plan over the same layout.
TEST_F(GpuBlindSightBuilder, PreparePatternBuildsOnTheDevice) {
  Random random;
  SCOPED_TRACE(random.trace());
  BlindSightLayoutCase test_case = random_blindsight_case(random, 4, 12, kMaxText);
  test_case.bidirectional = true;
  const int64_t kv_len = test_case.layout.length();
  const PlanShape shape{.heads = 4, .q_len = kv_len, .kv_len = kv_len};
  const Device gpu{DeviceType::kCUDA, 0};
  for (const char* name : kBlindSightTemplates) {
    const PatternSpec spec = blindsight_spec(random, test_case, name, KeyPlacement::kInPlace);
    EXPECT_TRUE(builds_plan_on_device(spec, shape, &test_case.layout, gpu)) << name;
    const PreparedPlan prepared = prepare_pattern(spec, shape, &test_case.layout, gpu, stream_);
    const Plan host = build_plan(spec, shape, &test_case.layout);
    for (int64_t slot = 0; slot < shape.head_slots(); ++slot) {
      EXPECT_EQ(materialize_mask(prepared.plan(), slot), materialize_mask(host, slot)) << name;
    }
  }
}

// Sparse templates through key orders (the default; bidirectional ones unmasked) are built on the
// host and uploaded by prepare_pattern: the device builder answers no (its geometry refuses them:
// the CPU test), and the prepared plan is the host builder's; attention through it matches the
// oracle.
TEST_F(GpuBlindSightBuilder, KeyOrderedPlansAreBuiltOnTheHost) {
  Random random;
  SCOPED_TRACE(random.trace());
  for (const bool bidirectional : {false, true}) {
    BlindSightLayoutCase test_case = random_blindsight_case(random, 4, 12, kMaxText);
    test_case.bidirectional = bidirectional;
    const KernelConfig config{DType::kBFloat16, cuda::kWgmmaHeadDim, cuda::AttentionKernel::kWgmma,
                              cuda::kMaxTileRows};
    ProblemSize size = random_problem(random, config, 1, 2);
    size.kv_len = test_case.layout.length();
    size.q_len = size.kv_len;
    const PlanShape shape{.heads = size.q_heads(),
                          .q_len = size.q_len,
                          .kv_len = size.kv_len,
                          .tile_rows = size.tile_rows};
    const Device gpu{DeviceType::kCUDA, 0};
    for (const char* name : {"blindsight-sink", "blindsight-intra", "blindsight-intra-sink"}) {
      const PatternSpec spec = resolve_pattern(
          PatternSpec{name, {{"bidirectional", bidirectional ? 1 : 0}}}, &test_case.layout);
      SCOPED_TRACE(spec.to_string() + " layout " + test_case.layout.to_json());
      EXPECT_FALSE(builds_plan_on_device(spec, shape, &test_case.layout, gpu));
      EXPECT_EQ(detail::device_builder_for(spec, shape, &test_case.layout, false), nullptr);
      const PreparedPlan prepared = prepare_pattern(spec, shape, &test_case.layout, gpu, stream_);
      const Plan host = build_plan(spec, shape, &test_case.layout);
      EXPECT_TRUE(host.has_key_orders());
      for (int64_t slot = 0; slot < shape.head_slots(); ++slot) {
        EXPECT_EQ(materialize_mask(prepared.plan(), slot), materialize_mask(host, slot));
      }
      const AttentionInputs inputs = random_inputs(random, size);
      expect_matches_oracle(host, inputs, size,
                            run_gpu(cuda::upload_passes(prepared.plan(), nullptr), inputs, size,
                                    random_layout(random)));
    }
  }
}

// A Gemma 3 config: bidirectional BlindSight heads of every template beside dense and A-shape
// heads, those in place built on the GPU and concatenated with one token array, those through key
// orders (unmasked) built on the host and uploaded as parts of the one plan, record for record the
// upload of the host plan; attention through it matches the oracle. And a Qwen config the same
// way.
TEST_F(GpuBlindSightBuilder, ConfigsMixWithOtherDeviceBuiltHeads) {
  Random random;
  SCOPED_TRACE(random.trace());
  constexpr int64_t kGroup = 4;
  const KernelConfig config{DType::kBFloat16, cuda::kWgmmaHeadDim, cuda::AttentionKernel::kWgmma,
                            cuda::kMaxTileRows};
  for (const bool bidirectional : {true, false}) {
    BlindSightLayoutCase test_case =
        random_blindsight_case(random, random.uniform_int(2, 7), 12, kMaxText);
    test_case.bidirectional = bidirectional;
    ProblemSize size = random_problem(random, config, 1, kGroup);
    size.kv_len = test_case.layout.length();
    size.q_len = random.bernoulli(0.5) ? size.kv_len : random.uniform_int(1, size.kv_len);
    const PlanShape shape{.heads = size.q_heads(),
                          .q_len = size.q_len,
                          .kv_len = size.kv_len,
                          .tile_rows = size.tile_rows};
    std::vector<PatternSpec> resolved;
    for (int64_t head = 0; head < shape.heads; ++head) {
      const PatternSpec spec =
          head == 0   ? PatternSpec{"dense", {}}
          : head == 1 ? PatternSpec{"a-shape", {{"sink", 16}, {"local", 100}}}
                      : blindsight_spec(random, test_case,
                                        kBlindSightTemplates[head % kBlindSightTemplates.size()]);
      resolved.push_back(resolve_pattern(spec, &test_case.layout));
    }
    SCOPED_TRACE(describe(size) + " layout " + test_case.layout.to_json());
    expect_static_config_matches_host(resolved, shape, test_case.layout, size, random, stream_);
  }
}

}  // namespace
}  // namespace mmsparse::test
