// Per-head configs built on the GPU (cuda/runtime/config_builder.h) against the host: on random
// mixes of static heads (built by kernels), vertical-slash heads of every boundary mode and grid
// heads with boundary 0/1 (estimated on the GPU over just their heads; vertical-slash budgets with
// clear top-k cuts, grid specs whose host search chose clearly, as in test_gpu_index_builders.cpp)
// and heads the GPU does not build (grid with Q/2D boundary whose groups do not fit the estimate,
// item boundary, per-item sinks: built on the host and uploaded as a part), every record of the
// concatenated plan equals the upload of the host plan of the same specs (with grid heads, at the
// front of the capacity sections); attention through it matches the fp64 oracle; prepare_pattern's
// per-head form serves the same plan and says where each head was built. Static configs' host
// copies and bad configs: test_gpu_config_prepare.cpp.

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "attention_harness.h"
#include "common/errors.h"
#include "common/random.h"
#include "config_build_check.h"
#include "cuda/runtime/config_builder.h"
#include "cuda/runtime/engine.h"
#include "device_buffer.h"
#include "grid_inputs.h"
#include "index_test_support.h"
#include "methods/device_builder.h"
#include "methods/estimate/estimation.h"
#include "methods/estimate/index_builders.h"
#include "methods/estimate/modality_boundary.h"
#include "mmsparse/attention.h"
#include "mmsparse/layout.h"
#include "mmsparse/patterns.h"
#include "mmsparse/plan.h"
#include "mmsparse/status.h"
#include "plan_equality.h"
#include "plan_generators.h"
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
// One-token image runs at the end of a layout: more than the GPU estimate's 16 segments; with
// their markers and text tokens they take at most kRunTailTokens tokens.
constexpr int64_t kOneTokenRuns = 17;
constexpr int64_t kRunTailTokens = 4 * kOneTokenRuns;
// Distinct vertical-slash specs per mix: two sections of that builder.
constexpr int kVerticalSlashSpecs = 2;
// Distinct device grid specs per mix: one searched, one of a fixed stride.
constexpr int kGridSpecs = 2;
constexpr int64_t kMaxSearchedStride = 64;
constexpr int64_t kMaxFixedStride = 300;
// A planted grid's stride (plant_grid: below head_dim - 1) and how often a trial has one, so that
// the grid search has a clear answer to find.
constexpr int64_t kMinPlantedStride = 3;
constexpr double kPlantedShare = 0.5;
// GQA ratios 1, 2 and 7.
constexpr std::array<Gqa, 4> kGqaShapes = {{{3, 1}, {2, 2}, {1, 7}, {2, 7}}};
constexpr ProblemLimits kLimits{kGqaShapes, kMaxQueryLength, kMaxExtraKeys};

// What builds a head of a mix.
enum class HeadKind { kStatic, kDeviceVerticalSlash, kDeviceGrid, kBoundaryGrid };
constexpr int kHeadKinds = 4;

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

// A grid spec with a Q/2D or item boundary (it needs a layout), with per-item sinks a quarter of
// the time: built on the GPU where its query groups' last 64 rows fit the estimate, on the host
// where they do not (a layout ending in many one-token runs: with_run_tail).
PatternSpec random_boundary_grid_spec(Random& random) {
  constexpr int64_t kQuery = static_cast<int64_t>(detail::BoundaryMode::kQuery);
  constexpr int64_t kItem = static_cast<int64_t>(detail::BoundaryMode::kItem);
  constexpr int64_t kMaxItemSinks = 3;
  return {"grid",
          {{"max_stride", random.uniform_int(2, kMaxSearchedStride)},
           {"boundary", random.uniform_int(kQuery, kItem)},
           {"item_sinks", random.bernoulli(0.75) ? 0 : random.uniform_int(1, kMaxItemSinks)}}};
}

// A grid spec of the GPU (boundary 0/1): searched (`searched`) or of a fixed stride, random lines,
// sink, local window and last_q.
PatternSpec random_grid_spec(Random& random, bool searched) {
  const int64_t stride = searched ? 0 : random.uniform_int(2, kMaxFixedStride);
  const int64_t hline = random.uniform_int(0, 1);
  const int64_t vline = random.uniform_int(0, 1);
  const int64_t slash = hline == 0 && vline == 0 ? 1 : random.uniform_int(0, 1);
  const int64_t last_q = random.bernoulli(0.5) ? 64 : random.uniform_int(1, kMaxLastQueries);
  return grid(stride, random.uniform_int(2, kMaxSearchedStride), hline, vline, slash,
              random.uniform_int(0, kMaxSink), random.uniform_int(0, kMaxLocal), last_q,
              random.uniform_int(0, 1));
}

// Inputs with a planted grid in kPlantedShare of the calls (every head the same grid).
void maybe_plant_grid(Random& random, AttentionInputs& inputs, const ProblemSize& size) {
  if (!random.bernoulli(kPlantedShare)) return;
  const int64_t stride = random.uniform_int(kMinPlantedStride, size.head_dim - 2);
  plant_grid(random, inputs, size, stride, random.uniform_int(0, stride - 1));
}

struct Mix {
  ProblemSize size;
  std::vector<PatternSpec> specs;  // per query head
  std::optional<ModalityLayout> layout;
};

PlanShape plan_shape(const ProblemSize& size) {
  return {size.batch, size.q_heads(), size.q_len, size.kv_len, size.tile_rows};
}

// Each device grid spec of the mix whose host search does not choose clearly on one of its head
// slots becomes the same spec with slash lines only at a fixed stride: one candidate and no phase
// search, so nothing that rounding could flip and the host plan is the device's.
void make_grid_choices_clear(Random& random, Mix& mix, const AttentionInputs& inputs) {
  const PlanShape shape = plan_shape(mix.size);
  if (shape.q_len == 0) return;  // no rows: nothing searched
  const ModalityLayout* layout = mix.layout ? &*mix.layout : nullptr;
  const PatternInputs host_inputs{inputs.q.view, inputs.k.view, mix.size.scale};
  std::map<std::string, std::vector<int64_t>> sections;  // by resolved spec, as the builder groups
  for (int64_t h = 0; h < shape.heads; ++h) {
    const PatternSpec resolved = resolve_pattern(mix.specs[h], layout);
    if (cuda::builds_grid_on_device(resolved, shape, layout)) {
      sections[resolved.to_string()].push_back(h);
    }
  }
  for (const auto& [text, heads] : sections) {
    const PatternSpec resolved = resolve_pattern(mix.specs[heads.front()], layout);
    const bool grouped =
        resolved.params.at("boundary") >= static_cast<int64_t>(detail::BoundaryMode::kQuery);
    const HostGridSearch search =
        grouped ? host_grouped_grid_search(resolved, shape, host_inputs, *layout, heads)
                : host_grid_search(resolved, shape, host_inputs, heads);
    if (search.all_clear()) continue;
    PatternSpec fixed = resolved;
    fixed.params["stride"] = random.uniform_int(2, kMaxFixedStride);
    fixed.params["hline"] = 0;
    fixed.params["vline"] = 0;
    fixed.params["slash"] = 1;
    for (const int64_t h : heads) mix.specs[h] = fixed;
  }
}

// Whether a resolved spec is estimated on the GPU when device inputs are given.
bool estimated_on_device(const PatternSpec& resolved, const PlanShape& shape,
                         const ModalityLayout* layout) {
  return cuda::builds_dynamic_on_device(resolved, shape, layout) ||
         cuda::builds_grid_on_device(resolved, shape, layout);
}

// Every head a random kind (each kind at least once where the heads allow; host heads only with a
// layout for their boundary modes), the device vertical-slash heads split between
// kVerticalSlashSpecs specs with clear cuts on their heads, the device grid heads between
// kGridSpecs specs with clear choices on their heads.
Mix random_mix(Random& random, const ProblemSize& size, const AttentionInputs& inputs) {
  Mix mix;
  mix.size = size;
  const PlanShape shape = plan_shape(size);
  const bool boundary_modes = size.kv_len >= std::max(size.q_len, kMinLayoutTokens);
  // Half the layouts end in one-token runs (when they are query rows), which the Q/2D heads'
  // last rows do not fit: those heads are built on the host.
  const bool run_tail = boundary_modes && size.q_len >= kRunTailTokens &&
                        size.kv_len >= kMinLayoutTokens + kRunTailTokens && random.bernoulli(0.5);
  if (boundary_modes) mix.layout = mixed_layout(random, size.kv_len, run_tail ? kOneTokenRuns : 0);
  const int64_t heads = size.q_heads();
  // kBoundaryGrid is last.
  const int kinds_available = boundary_modes ? kHeadKinds : kHeadKinds - 1;
  std::vector<HeadKind> kinds(static_cast<std::size_t>(heads));
  for (int64_t h = 0; h < heads; ++h) {
    kinds[h] = h < kinds_available
                   ? static_cast<HeadKind>(h)
                   : static_cast<HeadKind>(random.uniform_int(0, kinds_available - 1));
  }
  std::shuffle(kinds.begin(), kinds.end(), random.engine());

  mix.specs.resize(static_cast<std::size_t>(heads));
  std::array<std::vector<int64_t>, kVerticalSlashSpecs> estimated;
  std::array<std::vector<int64_t>, kGridSpecs> grids;
  for (int64_t h = 0; h < heads; ++h) {
    switch (kinds[h]) {
      case HeadKind::kStatic:
        mix.specs[h] = random_static_spec(random, size.q_len);
        break;
      case HeadKind::kBoundaryGrid:
        mix.specs[h] = random_boundary_grid_spec(random);
        break;
      case HeadKind::kDeviceVerticalSlash:
        estimated[random.uniform_int(0, kVerticalSlashSpecs - 1)].push_back(h);
        break;
      case HeadKind::kDeviceGrid:
        grids[random.uniform_int(0, kGridSpecs - 1)].push_back(h);
        break;
    }
  }
  for (std::size_t g = 0; g < grids.size(); ++g) {
    if (grids[g].empty()) continue;
    const PatternSpec spec = random_grid_spec(random, g == 0);
    for (const int64_t h : grids[g]) mix.specs[h] = spec;
  }
  const PatternInputs host_inputs{inputs.q.view, inputs.k.view, size.scale};
  for (const std::vector<int64_t>& group : estimated) {
    if (group.empty()) continue;
    const int64_t sink = random.uniform_int(0, kMaxSink);
    const int64_t local = random.uniform_int(0, kMaxLocal);
    const int64_t last_q = random.bernoulli(0.5) ? 64 : random.uniform_int(1, kMaxLastQueries);
    // Boundary none, K or, with a layout, Q (each query modality estimated from its own rows) or
    // 2D (each pair of query and key modality).
    const auto boundary = static_cast<detail::BoundaryMode>(
        random.uniform_int(0, static_cast<int64_t>(mix.layout ? detail::BoundaryMode::kTwoD
                                                              : detail::BoundaryMode::kKey)));
    HostScores scores;
    if (boundary == detail::BoundaryMode::kQuery) {
      scores = host_scores(host_inputs, shape, query_group_rows(shape, *mix.layout, last_q), group);
    } else if (boundary == detail::BoundaryMode::kTwoD) {
      scores = two_d_scores(host_inputs, shape, *mix.layout, last_q, group);
    } else {
      scores = host_scores(host_inputs, shape, last_q, group);
    }
    const PatternSpec spec = vertical_slash(clear_budget(random, scores.columns, sink),
                                            clear_budget(random, scores.diagonals, local), sink,
                                            local, last_q, static_cast<int64_t>(boundary));
    for (const int64_t h : group) mix.specs[h] = spec;
  }
  make_grid_choices_clear(random, mix, inputs);
  return mix;
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
  const PatternOperands operands(inputs, mix.size.scale);
  BothPlans plans{build_plan(mix.specs, shape, layout, &operands.host), {}};
  const std::vector<PatternSpec> specs = resolved(mix);
  // q and k are freed on return: the build waits until it has read them.
  plans.built = build_config_and_wait(specs, shape, layout, operands, stream);
  EXPECT_EQ(plans.built.estimated_on_device,
            std::any_of(specs.begin(), specs.end(), [&](const PatternSpec& spec) {
              return estimated_on_device(spec, shape, layout);
            }));
  return plans;
}

// The device plan against the upload of the host plan: with device grid heads, whose sections are
// capacities (runs and tiles too), the host's records at the front of each section and empty
// tiles after the real ones, scheduled last.
void expect_same_config_records(const Mix& mix, const BothPlans& plans, cudaStream_t stream) {
  const std::vector<PatternSpec> specs = resolved(mix);
  const PlanShape shape = plan_shape(mix.size);
  const ModalityLayout* layout = mix.layout ? &*mix.layout : nullptr;
  if (std::any_of(specs.begin(), specs.end(), [&](const PatternSpec& spec) {
        return cuda::builds_grid_on_device(spec, shape, layout);
      })) {
    expect_same_grid_records(plans.built.plan, plans.host, stream);
  } else {
    expect_same_records(plans.built.plan, plans.host, stream);
  }
}

class GpuConfigBuild : public StreamTest {};

TEST_F(GpuConfigBuild, MixedHeadsMatchTheHostPlanOnRandomInputs) {
  Random random;
  SCOPED_TRACE(random.trace());
  for (int trial = 0; trial < kRandomTrials; ++trial) {
    const ProblemSize size = random_problem(random, kLimits);
    AttentionInputs inputs = random_inputs(random, size);
    maybe_plant_grid(random, inputs, size);
    const Mix mix = random_mix(random, size, inputs);
    SCOPED_TRACE(describe(mix));
    const BothPlans plans = build_both(mix, inputs, stream_);
    SCOPED_TRACE(plans.host.summary());
    expect_same_config_records(mix, plans, stream_);
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
      {{"grid", {{"max_stride", 8}}}, {"grid", {{"max_stride", 4}}}, {"grid", {}}},
      {grid(5, 8, 0, 1, 1, 3, 2, 64, 1), grid(0, 3, 1, 1, 1, 0, 0, 1, 0),
       grid(5, 8, 0, 1, 1, 3, 2, 64, 1)}};
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
      make_grid_choices_clear(random, mix, inputs);
      const std::vector<PatternSpec> resolved_specs = resolved(mix);
      SCOPED_TRACE(describe(mix));
      const BothPlans plans = build_both(mix, inputs, stream_);
      expect_same_config_records(mix, plans, stream_);
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
      const ProblemSize size = oracle_problem(random, kLimits, dtype, tile_rows);
      AttentionInputs inputs = random_inputs(random, size);
      maybe_plant_grid(random, inputs, size);
      const Mix mix = random_mix(random, size, inputs);
      SCOPED_TRACE(describe(mix));
      const BothPlans plans = build_both(mix, inputs, stream_);
      expect_same_config_records(mix, plans, stream_);
      const AttentionResult gpu = run_gpu(plans.built.plan, inputs, size, random_layout(random));
      expect_matches_oracle(plans.host, inputs, size, gpu);
    }
  }
}

// Grid heads of a searched and a fixed-stride spec among the other kinds, on a planted grid the
// search finds clearly: GQA 7, batch 2, odd sizes; the records equal the host plan's, the two grid
// sections' empty tiles are gathered after every real tile, and attention matches the oracle.
// Small, for the memory checker.
TEST_F(GpuConfigBuild, GridSectionsMatchTheHostPlan) {
  Random random;
  SCOPED_TRACE(random.trace());
  constexpr int64_t kStride = 7;
  constexpr int64_t kPhase = 3;
  ProblemSize size;
  size.batch = 2;
  size.kv_heads = 1;
  size.group = 7;
  size.head_dim = kHeadDims.front();
  size.dtype = DType::kBFloat16;
  size.q_len = 201;
  size.kv_len = 263;
  size.tile_rows = kTileRows.front();
  size.scale = 1.0f / std::sqrt(static_cast<float>(size.head_dim));
  AttentionInputs inputs = random_inputs(random, size);
  plant_grid(random, inputs, size, kStride, kPhase);
  const PatternSpec searched = PatternSpec::parse("grid");
  const PatternSpec fixed =
      PatternSpec::parse("grid:stride=" + std::to_string(kStride) + ",boundary=1");
  Mix mix;
  mix.size = size;
  mix.layout = mixed_layout(random, size.kv_len);
  mix.specs = {
      {"a-shape", {{"sink", 4}, {"local", 30}}},
      searched,
      fixed,
      vertical_slash(100000, 100000, 7, 9, 64, 0),
      searched,
      // A Q-boundary grid of slash lines at a fixed stride: one candidate, no phase search.
      {"grid", {{"boundary", 2}, {"stride", kStride}, {"hline", 0}, {"vline", 0}}},
      fixed};
  SCOPED_TRACE(describe(mix));
  // Both grid sections search (the fixed stride its phases): the planted grid must be a clear
  // choice for the host plan to be the device's.
  const PatternInputs host_inputs{inputs.q.view, inputs.k.view, size.scale};
  const ModalityLayout* layout = &*mix.layout;
  ASSERT_TRUE(
      host_grid_search(resolve_pattern(searched, layout), plan_shape(size), host_inputs, {1, 4})
          .all_clear())
      << "the planted grid is not a clear choice of the search";
  ASSERT_TRUE(
      host_grid_search(resolve_pattern(fixed, layout), plan_shape(size), host_inputs, {2, 6})
          .all_clear())
      << "the planted grid's vertical phase is not a clear choice";
  const BothPlans plans = build_both(mix, inputs, stream_);
  SCOPED_TRACE(plans.host.summary());
  EXPECT_GT(plans.built.plan.num_tiles(), plans.host.num_tiles()) << "no empty capacity tiles";
  expect_same_grid_records(plans.built.plan, plans.host, stream_);
  const AttentionResult gpu = run_gpu(plans.built.plan, inputs, size, random_layout(random));
  expect_matches_oracle(plans.host, inputs, size, gpu);
}

// The public route: prepare_pattern with per-head specs computes what
// prepare_plan(build_plan(host inputs)) computes, bit for bit, and reports where each head was
// built.
TEST_F(GpuConfigBuild, PreparePatternBuildsPerHeadSpecs) {
  Random random;
  SCOPED_TRACE(random.trace());
  ProblemSize size = random_problem(random, kLimits);
  size.head_dim = kHeadDims.back();
  size.scale = 1.0f / std::sqrt(static_cast<float>(size.head_dim));
  size.q_len = 333;
  size.kv_len = 401;
  AttentionInputs inputs = random_inputs(random, size);
  maybe_plant_grid(random, inputs, size);
  const Mix mix = random_mix(random, size, inputs);
  SCOPED_TRACE(describe(mix));
  const PlanShape shape = plan_shape(size);
  const ModalityLayout* layout = mix.layout ? &*mix.layout : nullptr;
  const PatternOperands operands(inputs, size.scale);
  const PatternInputs& host_inputs = operands.host;
  const PatternInputs& device_inputs = operands.device;
  const DeviceOperand v(inputs.v);
  const PreparedPlan expected =
      prepare_plan(build_plan(mix.specs, shape, layout, &host_inputs), kCuda, stream_);
  const PreparedPlan built =
      prepare_pattern(mix.specs, shape, layout, kCuda, stream_, &device_inputs, &host_inputs);
  EXPECT_EQ(built.shape(), shape);
  // Its host copy is the download of the device records: the host builder's plan.
  expect_decoded_plan(built.plan(), build_plan(mix.specs, shape, layout, &host_inputs));
  const PlanBuildTimes times = built.build_times();
  ASSERT_EQ(static_cast<int64_t>(times.heads.size()), shape.head_slots());
  for (int64_t slot = 0; slot < shape.head_slots(); ++slot) {
    const PatternSpec spec = resolve_pattern(mix.specs[slot % shape.heads], layout);
    EXPECT_EQ(times.heads[slot].on_device, detail::device_builder_for(spec, shape, layout, true) != nullptr)
        << "head slot " << slot;
    EXPECT_GE(times.heads[slot].seconds, 0.0);
  }
  EXPECT_GE(times.assembly_seconds, 0.0);
  expect_error([&] { (void)expected.build_times(); }, ErrorCode::kUnsupported, {"per-head"});

  expect_identical_attention(built, expected, size, operands.q.view, operands.k.view, v.view,
                             stream_);
}

// Item-boundary heads and heads with per-item sinks are built on the GPU (methods/estimate/
// item_spaces.h): in a config they are device sections beside static heads, and the plan serves
// the attention of the host plan of the same specs, bit for bit. Their specs keep every line or
// search no phase (slash lines at a fixed stride), so that rounding decides nothing.
TEST_F(GpuConfigBuild, ItemBoundaryAndItemSinkHeadsAreBuiltOnTheDevice) {
  Random random;
  SCOPED_TRACE(random.trace());
  ProblemSize size = random_problem(random, kLimits);
  size.head_dim = kHeadDims.back();
  size.scale = 1.0f / std::sqrt(static_cast<float>(size.head_dim));
  size.batch = 1;
  size.kv_heads = 2;  // 4 query heads, GQA 2
  size.group = 2;
  size.q_len = 301;
  size.kv_len = 377;
  const AttentionInputs inputs = random_inputs(random, size);
  const ModalityLayout layout = mixed_layout(random, size.kv_len);
  const PlanShape shape = plan_shape(size);
  const PatternOperands operands(inputs, size.scale);
  const PatternInputs& host_inputs = operands.host;
  const PatternInputs& device_inputs = operands.device;
  const DeviceOperand v(inputs.v);
  const std::vector<PatternSpec> specs = {
      PatternSpec::parse("grid:boundary=4,stride=5,hline=0,vline=0"),
      PatternSpec::parse("vertical-slash:vertical=1048576,slash=1048576,item_sinks=2"),
      PatternSpec::parse("grid:boundary=3,item_sinks=1,stride=7,hline=0,vline=0"),
      PatternSpec::parse("a-shape:sink=8,local=40")};
  for (std::size_t h = 0; h + 1 < specs.size(); ++h) {
    const PatternSpec resolved = resolve_pattern(specs[h], &layout);
    EXPECT_TRUE(estimated_on_device(resolved, shape, &layout)) << resolved.to_string();
  }
  const PreparedPlan expected =
      prepare_plan(build_plan(specs, shape, &layout, &host_inputs), kCuda, stream_);
  const PreparedPlan built =
      prepare_pattern(specs, shape, &layout, kCuda, stream_, &device_inputs, &host_inputs);
  const PlanBuildTimes times = built.build_times();
  ASSERT_EQ(static_cast<int64_t>(times.heads.size()), shape.head_slots());
  for (int64_t slot = 0; slot < shape.head_slots(); ++slot) {
    EXPECT_TRUE(times.heads[slot].on_device) << "head slot " << slot;
  }
  expect_identical_attention(built, expected, size, operands.q.view, operands.k.view, v.view,
                             stream_);
}

}  // namespace
}  // namespace mmsparse::test
