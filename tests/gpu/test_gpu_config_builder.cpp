// Per-head configs built on the GPU (cuda/config_builder.h) against the host: on random mixes of
// static heads (built by kernels), vertical-slash heads with boundary 0/1 (estimated on the GPU
// over just their heads; budgets with clear top-k cuts, as in test_gpu_index_builders.cpp) and
// heads the GPU does not build (grid, vertical-slash with Q/2D boundary: built on the host and
// uploaded as a part), every record of the concatenated plan equals the upload of the host plan of
// the same specs; attention through it matches the fp64 oracle; prepare_pattern's per-head form
// serves the same plan and says where each head was built; bad configs name the argument.

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "attention_harness.h"
#include "common/errors.h"
#include "common/random.h"
#include "cuda/config_builder.h"
#include "cuda/cuda_engine.h"
#include "cuda/index_builders.h"
#include "device_buffer.h"
#include "mmsparse/attention.h"
#include "mmsparse/layout.h"
#include "mmsparse/patterns.h"
#include "mmsparse/plan.h"
#include "mmsparse/status.h"
#include "patterns/estimation.h"
#include "plan_generators.h"
#include "index_test_support.h"
#include "plan_records.h"
#include "stream_test.h"

namespace mmsparse::test {
namespace {

using testing::expect_error;

constexpr Device kCuda{DeviceType::kCUDA, 0};
constexpr int kRandomTrials = 16;
constexpr int64_t kMaxQueryLength = 500;
constexpr int64_t kMaxExtraKeys = 200;
constexpr int64_t kMaxSink = 40;
constexpr int64_t kMaxLocal = 130;
constexpr int64_t kMaxLastQueries = 150;
// mixed_layout needs this many tokens (its media take 64, plus text before and after).
constexpr int64_t kMinLayoutTokens = 70;
// Distinct vertical-slash specs per mix: two sections of that builder.
constexpr int kVerticalSlashSpecs = 2;
constexpr std::array<int64_t, 2> kTileRows = {64, 128};
constexpr std::array<int64_t, 2> kHeadDims = {64, 128};
constexpr std::array<DType, 2> kDtypes = {DType::kBFloat16, DType::kFloat16};

struct Gqa {
  int64_t kv_heads;
  int64_t group;
};
// GQA ratios 1, 2 and 7.
constexpr std::array<Gqa, 4> kGqaShapes = {{{3, 1}, {2, 2}, {1, 7}, {2, 7}}};

// What builds a head of a mix.
enum class HeadKind { kStatic, kDeviceVerticalSlash, kHost };

// A static spec with random parameters around the tile height and the sequence.
PatternSpec random_static_spec(Random& random, int64_t q_len) {
  const auto length = [&](int64_t low) { return random.uniform_int(low, q_len + 64); };
  switch (random.uniform_int(0, 4)) {
    case 0:
      return {"dense", {}};
    case 1:
      return {"a-shape", {{"sink", length(0)}, {"local", length(1)}}};
    case 2:
      return {"tri-shape", {{"sink", length(0)}, {"local", length(1)}, {"bottom", length(0)}}};
    case 3:
      return {
          "sf-fixed",
          {{"segment", random.uniform_int(1, 300)}, {"vline_stride", random.uniform_int(1, 300)}}};
    default:
      return {"sf-strided", {{"local", length(1)}, {"stride", random.uniform_int(1, 300)}}};
  }
}

// A spec for a head the GPU does not build: grid, or vertical-slash with Q/2D boundary when the
// layout allows boundary modes.
PatternSpec random_host_spec(Random& random, bool boundary_modes) {
  if (boundary_modes && random.bernoulli(0.5)) {
    // Budgets count the always-kept lines: vertical >= sink, slash >= local.
    const int64_t sink = random.uniform_int(0, 10);
    const int64_t local = random.uniform_int(0, 20);
    return vertical_slash(sink + random.uniform_int(0, 60), local + random.uniform_int(0, 200),
                          sink, local, 64, random.uniform_int(2, 3));
  }
  return {"grid", {{"max_stride", random.uniform_int(2, 64)}}};
}

struct Mix {
  ProblemSize size;
  std::vector<PatternSpec> specs;  // per query head
  std::optional<ModalityLayout> layout;
  bool estimates = false;  // some head is estimated on the GPU
};

PlanShape plan_shape(const ProblemSize& size) {
  return {size.batch, size.q_heads(), size.q_len, size.kv_len, size.tile_rows};
}

// Every head a random kind (each kind at least once where the heads allow), the device
// vertical-slash heads split between kVerticalSlashSpecs specs with clear cuts on their heads.
Mix random_mix(Random& random, const ProblemSize& size, const AttentionInputs& inputs) {
  Mix mix;
  mix.size = size;
  const PlanShape shape = plan_shape(size);
  const bool boundary_modes = size.kv_len >= std::max(size.q_len, kMinLayoutTokens);
  if (boundary_modes) mix.layout = mixed_layout(random, size.kv_len);
  const int64_t heads = size.q_heads();
  std::vector<HeadKind> kinds(static_cast<std::size_t>(heads));
  for (int64_t h = 0; h < heads; ++h) {
    kinds[h] = h < 3 ? static_cast<HeadKind>(h) : static_cast<HeadKind>(random.uniform_int(0, 2));
  }
  std::shuffle(kinds.begin(), kinds.end(), random.engine());

  mix.specs.resize(static_cast<std::size_t>(heads));
  std::array<std::vector<int64_t>, kVerticalSlashSpecs> estimated;
  for (int64_t h = 0; h < heads; ++h) {
    switch (kinds[h]) {
      case HeadKind::kStatic:
        mix.specs[h] = random_static_spec(random, size.q_len);
        break;
      case HeadKind::kHost:
        mix.specs[h] = random_host_spec(random, boundary_modes);
        break;
      case HeadKind::kDeviceVerticalSlash:
        estimated[random.uniform_int(0, kVerticalSlashSpecs - 1)].push_back(h);
        break;
    }
  }
  const PatternInputs host_inputs{inputs.q.view, inputs.k.view, size.scale};
  for (const std::vector<int64_t>& group : estimated) {
    if (group.empty()) continue;
    mix.estimates = true;
    const int64_t sink = random.uniform_int(0, kMaxSink);
    const int64_t local = random.uniform_int(0, kMaxLocal);
    const int64_t last_q = random.bernoulli(0.5) ? 64 : random.uniform_int(1, kMaxLastQueries);
    const HostScores scores = host_scores(host_inputs, shape, last_q, group);
    const PatternSpec spec = vertical_slash(clear_budget(random, scores.columns, sink),
                                            clear_budget(random, scores.diagonals, local), sink,
                                            local, last_q, random.uniform_int(0, 1));
    for (const int64_t h : group) mix.specs[h] = spec;
  }
  return mix;
}

ProblemSize random_size(Random& random) {
  ProblemSize size;
  size.batch = random.uniform_int(1, 2);
  const Gqa gqa = pick(random, kGqaShapes);
  size.kv_heads = gqa.kv_heads;
  size.group = gqa.group;
  size.head_dim = pick(random, kHeadDims);
  size.dtype = pick(random, kDtypes);
  size.q_len = random.uniform_int(0, kMaxQueryLength / 2) * 2 + 1;
  size.kv_len = random.bernoulli(0.8) ? size.q_len + random.uniform_int(0, kMaxExtraKeys)
                                      : random.uniform_int(0, size.q_len);
  size.tile_rows = pick(random, kTileRows);
  size.scale = 1.0f / std::sqrt(static_cast<float>(size.head_dim));
  size.kernel = cuda::AttentionKernel::kAuto;
  return size;
}

std::string describe(const Mix& mix) {
  std::string text = describe(mix.size) + " specs:";
  for (const PatternSpec& spec : mix.specs) {
    text += ' ';
    text += spec.to_string();
  }
  return text;
}

std::vector<PatternSpec> resolved(const Mix& mix) {
  std::vector<PatternSpec> specs;
  const ModalityLayout* layout = mix.layout ? &*mix.layout : nullptr;
  for (const PatternSpec& spec : mix.specs) specs.push_back(resolve_pattern(spec, layout));
  return specs;
}

struct BothPlans {
  Plan host;
  cuda::ConfigBuild built;
};

// The host plan of the mix and the device build from device q, k (host q, k for host heads).
BothPlans build_both(const Mix& mix, const AttentionInputs& inputs, cudaStream_t stream) {
  const PlanShape shape = plan_shape(mix.size);
  const ModalityLayout* layout = mix.layout ? &*mix.layout : nullptr;
  const PatternInputs host_inputs{inputs.q.view, inputs.k.view, mix.size.scale};
  const DeviceOperand q(inputs.q);
  const DeviceOperand k(inputs.k);
  const PatternInputs device_inputs{q.view, k.view, mix.size.scale};
  BothPlans plans{build_plan(mix.specs, shape, layout, &host_inputs), {}};
  const cuda::EstimateOperands operands =
      cuda::make_estimate_operands("vertical-slash", device_inputs, shape);
  cuda::ConfigInputs config_inputs;
  config_inputs.layout = layout;
  config_inputs.device = &operands;
  config_inputs.host = &host_inputs;
  plans.built = cuda::build_config_plan_on_device(resolved(mix), shape, config_inputs, stream);
  // q and k are freed on return: the build must have read them.
  expect_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  EXPECT_EQ(plans.built.estimated_on_device, mix.estimates);
  return plans;
}

class GpuConfigBuild : public StreamTest {};

TEST_F(GpuConfigBuild, MixedHeadsMatchTheHostPlanOnRandomInputs) {
  Random random;
  SCOPED_TRACE(random.trace());
  for (int trial = 0; trial < kRandomTrials; ++trial) {
    const ProblemSize size = random_size(random);
    const AttentionInputs inputs = random_inputs(random, size);
    const Mix mix = random_mix(random, size, inputs);
    SCOPED_TRACE(describe(mix));
    const BothPlans plans = build_both(mix, inputs, stream_);
    SCOPED_TRACE(plans.host.summary());
    expect_same_records(plans.built.plan, plans.host, stream_);
  }
}

// Empty and degenerate shapes, one head of each kind, every kind alone.
TEST_F(GpuConfigBuild, EdgeShapesMatchTheHostPlan) {
  Random random;
  SCOPED_TRACE(random.trace());
  struct Edge {
    int64_t batch, q_len, kv_len, tile_rows;
  };
  const std::vector<Edge> edges = {{1, 0, 0, 64},   {1, 0, 17, 64},    {1, 1, 1, 64},
                                   {2, 5, 0, 64},   {1, 300, 45, 128}, {2, 129, 200, 64},
                                   {1, 75, 75, 128}};
  const std::vector<std::vector<PatternSpec>> configs = {
      {{"a-shape", {{"sink", 4}, {"local", 30}}},
       vertical_slash(30, 100, 30, 100, 64, 0),
       {"grid", {{"max_stride", 8}}}},
      {{"dense", {}}, {"dense", {}}, {"tri-shape", {{"sink", 2}, {"local", 9}, {"bottom", 70}}}},
      {vertical_slash(100000, 100000, 7, 9, 64, 1), vertical_slash(0, 0, 0, 0, 64, 0),
       vertical_slash(100000, 100000, 7, 9, 64, 1)},
      {{"grid", {{"max_stride", 8}}}, {"grid", {{"max_stride", 4}}}, {"grid", {}}}};
  for (const Edge& edge : edges) {
    ProblemSize size;
    size.batch = edge.batch;
    size.kv_heads = 1;
    size.group = 3;
    size.head_dim = pick(random, kHeadDims);
    size.dtype = pick(random, kDtypes);
    size.q_len = edge.q_len;
    size.kv_len = edge.kv_len;
    size.tile_rows = edge.tile_rows;
    size.scale = 1.0f / std::sqrt(static_cast<float>(size.head_dim));
    const AttentionInputs inputs = random_inputs(random, size);
    for (const std::vector<PatternSpec>& specs : configs) {
      Mix mix;
      mix.size = size;
      mix.specs = specs;
      mix.estimates = std::any_of(specs.begin(), specs.end(), [](const PatternSpec& spec) {
        return spec.name == "vertical-slash";
      });
      SCOPED_TRACE(describe(mix));
      const BothPlans plans = build_both(mix, inputs, stream_);
      expect_same_records(plans.built.plan, plans.host, stream_);
    }
  }
}

// Attention through the concatenated plan against the fp64 oracle of the host plan, on both
// kernels' tile heights.
TEST_F(GpuConfigBuild, AttentionThroughTheConfigPlanMatchesTheOracle) {
  Random random;
  SCOPED_TRACE(random.trace());
  for (const DType dtype : kDtypes) {
    for (const int64_t tile_rows : kTileRows) {
      ProblemSize size = random_size(random);
      size.dtype = dtype;
      size.tile_rows = tile_rows;
      size.head_dim = kHeadDims.back();
      size.scale = 1.0f / std::sqrt(static_cast<float>(size.head_dim));
      size.q_len = std::max<int64_t>(size.q_len, 2 * tile_rows + 1);
      size.kv_len = size.q_len + random.uniform_int(0, kMaxExtraKeys);
      const AttentionInputs inputs = random_inputs(random, size);
      const Mix mix = random_mix(random, size, inputs);
      SCOPED_TRACE(describe(mix));
      const BothPlans plans = build_both(mix, inputs, stream_);
      expect_same_records(plans.built.plan, plans.host, stream_);
      const AttentionResult gpu = run_gpu(plans.built.plan, inputs, size, random_layout(random));
      expect_matches_oracle(plans.host, inputs, size, gpu);
    }
  }
}

// The public route: prepare_pattern with per-head specs computes what
// prepare_plan(build_plan(host inputs)) computes, bit for bit, and reports where each head was
// built.
TEST_F(GpuConfigBuild, PreparePatternBuildsPerHeadSpecs) {
  Random random;
  SCOPED_TRACE(random.trace());
  ProblemSize size = random_size(random);
  size.head_dim = kHeadDims.back();
  size.scale = 1.0f / std::sqrt(static_cast<float>(size.head_dim));
  size.q_len = 333;
  size.kv_len = 401;
  const AttentionInputs inputs = random_inputs(random, size);
  const Mix mix = random_mix(random, size, inputs);
  SCOPED_TRACE(describe(mix));
  const PlanShape shape = plan_shape(size);
  const ModalityLayout* layout = mix.layout ? &*mix.layout : nullptr;
  const PatternInputs host_inputs{inputs.q.view, inputs.k.view, size.scale};
  const DeviceOperand q(inputs.q);
  const DeviceOperand k(inputs.k);
  const DeviceOperand v(inputs.v);
  const PatternInputs device_inputs{q.view, k.view, size.scale};
  const PreparedPlan expected =
      prepare_plan(build_plan(mix.specs, shape, layout, &host_inputs), kCuda, stream_);
  const PreparedPlan built =
      prepare_pattern(mix.specs, shape, layout, kCuda, stream_, &device_inputs, &host_inputs);
  EXPECT_EQ(built.shape(), shape);
  expect_error([&] { (void)built.plan(); }, ErrorCode::kUnsupported, {"no host copy"});
  const PlanBuildTimes times = built.build_times();
  ASSERT_EQ(static_cast<int64_t>(times.heads.size()), shape.head_slots());
  for (int64_t slot = 0; slot < shape.head_slots(); ++slot) {
    const PatternSpec spec = resolve_pattern(mix.specs[slot % shape.heads], layout);
    EXPECT_EQ(times.heads[slot].on_device, cuda::builds_head_on_device(spec, true))
        << "head slot " << slot;
    EXPECT_GE(times.heads[slot].seconds, 0.0);
  }
  EXPECT_GE(times.assembly_seconds, 0.0);
  expect_error([&] { (void)expected.build_times(); }, ErrorCode::kUnsupported, {"per-head"});

  expect_identical_attention(built, expected, size, q.view, k.view, v.view, stream_);
}

// A config of static heads only keeps a host copy, built on first use, equal to build_plan's.
TEST_F(GpuConfigBuild, StaticConfigHasAHostCopy) {
  const PlanShape shape{2, 3, 200, 230, 64};
  const std::vector<PatternSpec> specs = {PatternSpec::parse("a-shape:sink=8,local=40"),
                                          PatternSpec::parse("dense"),
                                          PatternSpec::parse("a-shape:sink=8,local=40")};
  const PreparedPlan built = prepare_pattern(specs, shape, nullptr, kCuda, stream_);
  const Plan expected = build_plan(specs, shape);
  EXPECT_EQ(built.plan().tiles, expected.tiles);
  EXPECT_EQ(built.plan().spans, expected.spans);
  EXPECT_EQ(built.plan().masks, expected.masks);
  for (const HeadBuildTime& head : built.build_times().heads) EXPECT_TRUE(head.on_device);
}

TEST_F(GpuConfigBuild, BadConfigsNameTheArgument) {
  Random random;
  ProblemSize size;
  size.q_len = 100;
  size.kv_len = 120;
  size.kv_heads = 2;
  size.group = 2;
  size.head_dim = 64;
  const AttentionInputs inputs = random_inputs(random, size);
  const DeviceOperand q(inputs.q);
  const DeviceOperand k(inputs.k);
  const PlanShape shape = plan_shape(size);
  const PatternInputs device_inputs{q.view, k.view};
  const PatternSpec a_shape = PatternSpec::parse("a-shape");
  const PatternSpec grid = PatternSpec::parse("grid");
  const PatternSpec vertical = PatternSpec::parse("vertical-slash:vertical=40,slash=200");

  expect_error(
      [&] {
        (void)prepare_pattern(std::vector<PatternSpec>{a_shape, a_shape}, shape, nullptr, kCuda,
                              stream_);
      },
      ErrorCode::kInvalidArgument, {"prepare_pattern specs", "heads = 4", "2 specs"});
  expect_error(
      [&] {
        (void)prepare_pattern(std::vector<PatternSpec>{a_shape, grid, a_shape, a_shape}, shape,
                              nullptr, kCuda, stream_, &device_inputs);
      },
      ErrorCode::kUnsupported, {"head 1", "grid", "host_inputs"});
  expect_error(
      [&] {
        (void)prepare_pattern(std::vector<PatternSpec>{a_shape, a_shape, vertical, a_shape}, shape,
                              nullptr, kCuda, stream_);
      },
      ErrorCode::kUnsupported, {"head 2", "vertical-slash"});
  expect_error(
      [&] {
        (void)prepare_pattern(
            std::vector<PatternSpec>{a_shape, PatternSpec::parse("a-shape:local=0"), a_shape,
                                     a_shape},
            shape, nullptr, kCuda, stream_);
      },
      ErrorCode::kInvalidArgument, {"a-shape parameter local", ">= 1"});
  expect_error(
      [&] {
        (void)prepare_pattern(std::vector<PatternSpec>{a_shape, a_shape, a_shape, a_shape},
                              {1, 4, 100, 120, 0}, nullptr, kCuda, stream_);
      },
      ErrorCode::kInvalidArgument, {"tile_rows"});

  const cuda::EstimateOperands operands =
      cuda::make_estimate_operands("vertical-slash", device_inputs, shape);
  expect_error(
      [&] {
        (void)cuda::select_heads("vertical-slash", operands, {2, 1});
      },
      ErrorCode::kInvalidArgument, {"vertical-slash heads", "ascending", "head 1"});
  expect_error(
      [&] {
        (void)cuda::select_heads("vertical-slash", operands, {0, 4});
      },
      ErrorCode::kInvalidArgument, {"vertical-slash heads", "[0, 4)", "head 4"});
  expect_error([&] { (void)cuda::select_heads("vertical-slash", operands, {}); },
               ErrorCode::kUnsupported, {"vertical-slash heads", "got 0"});
  expect_error(
      [&] {
        (void)cuda::build_dynamic_plan_on_device(
            resolve_pattern(vertical), shape,
            cuda::select_heads("vertical-slash", operands, {1, 3}), stream_);
      },
      ErrorCode::kInvalidArgument, {"shape.heads", "2", "4"});
}

}  // namespace
}  // namespace mmsparse::test
