// VecAttention's plan built on the GPU (methods/vec/vec_device.h) against the host builder, its
// oracle. The GPU's scores are tensor-core sums, so its selected keys (spans and columns but the
// sinks and diagonal) are compared with the host's within the rounding bound of
// vec_selection_check.h (every key farther than the bound from the threshold kept or dropped
// alike), and then every record byte for byte against the host's cut of those keys into spans and
// columns (runs joined across key splits included), on every input
// (random, edge shapes, keys across several splits, a synthetic preset; GQA 1, 4 and 7; pooling
// 64 and 128; head_dim 64 and 128; causal and non-causal; alpha from "every key" to "sinks and
// diagonal only"). Attention through the device plan matches the fp64 oracle of the plan it holds;
// per-head configs that mix vec heads with other methods, and prepare_pattern, serve the host
// plan where no rounding can change the selection (alpha 0 or above 1); specs the GPU does not
// build say so.

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <string>
#include <vector>

#include "attention_harness.h"
#include "common/errors.h"
#include "common/random.h"
#include "config_build_check.h"
#include "cuda/runtime/config_builder.h"
#include "cuda/runtime/engine.h"
#include "device_buffer.h"
#include "index_test_support.h"
#include "methods/estimate/index_builders.h"
#include "methods/vec/vec_device.h"
#include "mmsparse/attention.h"
#include "mmsparse/patterns.h"
#include "mmsparse/plan.h"
#include "mmsparse/status.h"
#include "mmsparse/tools/workload.h"
#include "plan_records.h"
#include "stream_test.h"
#include "vec_selection_check.h"

namespace mmsparse::test {
namespace {

using testing::expect_error;

constexpr Device kCuda{DeviceType::kCUDA, 0};
constexpr int kRandomTrials = 30;
// GQA ratios 1, 4 and 7, with one or two KV heads.
constexpr std::array<Gqa, 5> kVecGqaShapes = {{{1, 1}, {2, 1}, {1, 4}, {2, 4}, {1, 7}}};
constexpr ProblemLimits kVecLimits{kVecGqaShapes, 700, 300};
constexpr int64_t kSyntheticLength = 4096;

class GpuVecBuild : public StreamTest {};

struct BothPlans {
  Plan host;
  cuda::DevicePlan built;
  PatternSpec resolved;
};

PlanShape shape_of(const ProblemSize& size) {
  return {size.batch, size.q_heads(), size.q_len, size.kv_len, size.tile_rows};
}

// The host plan from host q and k, the device plan from their device copies (its phases timed
// into `times` when not null).
BothPlans build_both(const PatternSpec& spec, const PlanShape& shape, const PatternInputs& host,
                     const PatternInputs& device, cudaStream_t stream,
                     cuda::VecBuildTimes* times = nullptr) {
  BothPlans plans{build_plan(spec, shape, nullptr, &host), {}, resolve_pattern(spec)};
  EXPECT_TRUE(cuda::builds_vec_on_device(plans.resolved, shape));
  plans.built = cuda::build_vec_plan_on_device(
      plans.resolved, shape, cuda::make_estimate_operands("vec", device, shape), stream, times);
  // The caller frees q and k on return: the build must have read them.
  expect_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  return plans;
}

// The selected keys within the rounding bound, every record byte for byte against the host's
// records for the device's selection; returns that plan (the plan the device plan stands for).
Plan expect_matching_plans(const BothPlans& plans, const PatternInputs& host_inputs,
                           VecSelectionStats& stats, cudaStream_t stream) {
  const Plan adopted =
      expect_vec_selection_matches(plans.built, plans.host, plans.resolved, host_inputs, stats);
  expect_same_records(plans.built, adopted, stream);
  return adopted;
}

PatternInputs host_inputs_of(const AttentionInputs& inputs, const ProblemSize& size) {
  return {inputs.q.view, inputs.k.view, size.scale};
}

BothPlans build_both(const PatternSpec& spec, const ProblemSize& size,
                     const AttentionInputs& inputs, cudaStream_t stream) {
  const PatternOperands operands(inputs, size.scale);
  return build_both(spec, shape_of(size), operands.host, operands.device, stream);
}

// A device copy of a contiguous host tensor, with its view.
struct DeviceCopy {
  explicit DeviceCopy(const Tensor& host) : buffer(host.nbytes()), view(host.view()) {
    buffer.upload(host.data());
    view.data = buffer.data();
    view.device = kCuda;
  }
  DeviceBuffer buffer;
  TensorView view;
};

// Pooling up to the tile height, one tile per block or plan-height tiles of whole blocks (union
// tiles), alphas from every key to none, groups of one tile to more than the keys, causal or not.

PatternSpec random_spec(Random& random, int64_t tile_rows) {
  // Alphas mostly at the edges and a few fixed points, 3 in 10 from the searched range.
  constexpr double kSearchedAlphaShare = 0.3;
  const PatternSpec base = random_vec_base(random, tile_rows);
  return with_alpha(base, random_vec_alpha(random, kSearchedAlphaShare));
}

// A random spec whose selection no rounding can change: alpha 0 (every candidate) or above 1
// (none), where the device plan must equal the host plan record for record.
PatternSpec clear_spec(Random& random, int64_t tile_rows) {
  constexpr int64_t kAboveOne = 2000000;
  PatternSpec spec = random_spec(random, tile_rows);
  spec.params["alpha_ppm"] = random.bernoulli(0.5) ? 0 : kAboveOne;
  return spec;
}

TEST_F(GpuVecBuild, MatchesTheHostPlanOnRandomInputs) {
  Random random;
  SCOPED_TRACE(random.trace());
  VecSelectionStats stats;
  for (int trial = 0; trial < kRandomTrials; ++trial) {
    const ProblemSize size = random_problem(random, kVecLimits);
    const AttentionInputs inputs = random_inputs(random, size);
    const PatternSpec spec = random_spec(random, size.tile_rows);
    SCOPED_TRACE(spec.to_string() + " " + describe(size));
    if (size.kv_len == 0) {
      // No keys to select from: the device builder declines the shape (and says so) rather than
      // launch an empty selection; the host plan serves it.
      EXPECT_FALSE(cuda::builds_vec_on_device(resolve_pattern(spec), shape_of(size)));
      continue;
    }
    const BothPlans plans = build_both(spec, size, inputs, stream_);
    SCOPED_TRACE(plans.host.summary());
    const Plan adopted = expect_matching_plans(plans, host_inputs_of(inputs, size), stats, stream_);
    EXPECT_EQ(plans.built.num_columns(), static_cast<int64_t>(adopted.columns.size()));
  }
  EXPECT_GT(stats.selected_in_columns, 0) << "no trial listed a selected key as a column";
  EXPECT_GT(stats.selected_in_spans, 0) << "no trial made a span of selected keys";
  EXPECT_LE(stats.borderline * kMaxBorderlineShare, stats.candidates)
      << stats.borderline << " of " << stats.candidates << " candidates within the bound";
  RecordProperty("borderline_keys", std::to_string(stats.borderline));
  RecordProperty("differing_keys", std::to_string(stats.differing));
}

// Pooling 64 and 128, head_dim 64 and 128, GQA 1, 4 and 7, causal and not, over more keys than a
// split holds (vec_device.cu: about 4096 keys, whole groups), so the per-split counts, offsets and
// running maxima restarting at split boundaries are exercised; odd lengths, kv_len > q_len.
TEST_F(GpuVecBuild, KeysAcrossSplitsMatchTheHostPlan) {
  Random random;
  SCOPED_TRACE(random.trace());
  constexpr int64_t kQueries = 4801;
  constexpr int64_t kKeys = 9217;
  constexpr std::array<int64_t, 3> kGroups = {1, 3, 16};
  VecSelectionStats stats;
  for (const int64_t group : {int64_t{1}, int64_t{4}, int64_t{7}}) {
    for (const int64_t pooling : {int64_t{64}, int64_t{128}}) {
      for (const int64_t union_tiles : {int64_t{0}, int64_t{1}}) {
        if (pooling == 128 && union_tiles == 0) continue;  // the same plan as union_tiles 1
        const ProblemSize size = vec_problem(random, kQueries, kKeys, group);
        const AttentionInputs inputs = random_inputs(random, size);
        const int64_t causal = random.uniform_int(0, 1);
        const PatternSpec spec{"vec",
                               {{"pooling", pooling},
                                {"group", pick(random, kGroups)},
                                {"alpha_ppm", 100000},
                                {"causal", causal},
                                {"union_tiles", union_tiles}}};
        SCOPED_TRACE(spec.to_string() + " " + describe(size));
        const BothPlans plans = build_both(spec, size, inputs, stream_);
        const Plan adopted =
            expect_matching_plans(plans, host_inputs_of(inputs, size), stats, stream_);
        (void)adopted;
      }
    }
  }
  EXPECT_GT(stats.selected_in_spans + stats.selected_in_columns, 0);
  EXPECT_LE(stats.borderline * kMaxBorderlineShare, stats.candidates)
      << stats.borderline << " of " << stats.candidates << " candidates within the bound";
}

// Runs of kept keys across the score pass's key splits and the run pass's steps (vec_runs.cuh):
// alphas from every candidate (one span per tile, across every split) to sparse selections (short
// runs, columns), groups that divide the 4096-key split, GQA 1, 4 and 7, pooling 64 and 128,
// head_dim 64 and 128, causal and not, odd lengths over three splits. Every record equals the
// host's cut of the device's selection; spans must cross split edges, column runs the run pass's
// step edges, and both spans and columns must occur.
TEST_F(GpuVecBuild, SpansAcrossSplitsMatchTheHostPlan) {
  Random random;
  SCOPED_TRACE(random.trace());
  constexpr std::array<int64_t, 5> kSpanAlphas = {0, 1000, 100000, 600000, 950000};
  constexpr std::array<int64_t, 2> kDividingGroups = {1, 16};
  VecSelectionStats stats;
  constexpr std::array<int64_t, 3> kGqa = {1, 4, 7};
  for (std::size_t trial = 0; trial < kSpanAlphas.size(); ++trial) {
    const int64_t alpha = kSpanAlphas[trial];
    const int64_t group = kGqa[trial % kGqa.size()];
    {
      const int64_t q_len = 2 * kCheckedSplitKeys + 333;
      const int64_t kv_len = q_len + random.uniform_int(0, 1) * 77;
      const ProblemSize size = vec_problem(random, q_len, kv_len, group);
      const AttentionInputs inputs = random_inputs(random, size);
      const PatternSpec spec{"vec",
                             {{"pooling", random.bernoulli(0.5) ? 64 : 128},
                              {"group", pick(random, kDividingGroups)},
                              {"alpha_ppm", alpha},
                              {"causal", random.uniform_int(0, 1)}}};
      SCOPED_TRACE(spec.to_string() + " " + describe(size));
      const BothPlans plans = build_both(spec, size, inputs, stream_);
      (void)expect_matching_plans(plans, host_inputs_of(inputs, size), stats, stream_);
    }
  }
  EXPECT_GT(stats.spans_across_splits, 0);
  EXPECT_GT(stats.column_runs_across_steps, 0);
  EXPECT_GT(stats.column_runs_across_words, 0);
  EXPECT_GT(stats.steps_with_few_column_words, 0);
  EXPECT_GT(stats.steps_with_many_column_words, 0);
  EXPECT_GT(stats.selected_in_spans, 0);
  EXPECT_GT(stats.selected_in_columns, 0);
  EXPECT_LE(stats.borderline * kMaxBorderlineShare, stats.candidates)
      << stats.borderline << " of " << stats.candidates << " candidates within the bound";
}

// Single rows, fewer keys than queries, lengths one past a block, batch 2, both tile heights.
TEST_F(GpuVecBuild, EdgeShapesMatchTheHostPlan) {
  Random random;
  SCOPED_TRACE(random.trace());
  struct Edge {
    int64_t batch, q_len, kv_len, tile_rows;
  };
  const std::vector<Edge> edges = {{1, 1, 1, 64},     {1, 1, 300, 64},    {2, 65, 65, 64},
                                   {1, 300, 45, 128}, {2, 129, 200, 128}, {1, 257, 513, 128},
                                   {1, 700, 700, 64}};
  VecSelectionStats stats;
  for (const Edge& edge : edges) {
    ProblemSize size = random_problem(random, kVecLimits);
    size.batch = edge.batch;
    size.q_len = edge.q_len;
    size.kv_len = edge.kv_len;
    size.tile_rows = edge.tile_rows;
    const AttentionInputs inputs = random_inputs(random, size);
    for (const int64_t causal : {0, 1}) {
      for (const int64_t alpha : {int64_t{0}, int64_t{200000}, int64_t{1000001}}) {
        const PatternSpec spec{"vec",
                               {{"pooling", 64},
                                {"alpha_ppm", alpha},
                                {"causal", causal},
                                {"union_tiles", alpha % 2}}};
        SCOPED_TRACE(spec.to_string() + " " + describe(size));
        const BothPlans plans = build_both(spec, size, inputs, stream_);
        (void)expect_matching_plans(plans, host_inputs_of(inputs, size), stats, stream_);
      }
    }
  }
}

// The score pass takes chunks of 64 keys; a chunk inside every row's candidate range of a warp's
// 16 blocks skips the per-key range test, the others (at the sinks, the diagonal and the keys
// past it, the end of kv_len) test each key. Sinks that end inside a chunk (pooling 16 and 48),
// diagonals off the 16-key tiles (pooling 48), groups of the running maximum that restart inside
// a chunk (1, 3 and 5 tiles), keys past the diagonal without causality (kv_len past q_len), lengths
// off a chunk; GQA 1, 4 and 7: every record equals the host's cut of the device's selection.
TEST_F(GpuVecBuild, ChunksAtCandidateRangeEdgesMatchTheHostPlan) {
  Random random;
  SCOPED_TRACE(random.trace());
  constexpr std::array<int64_t, 3> kGqa = {1, 4, 7};
  constexpr std::array<int64_t, 3> kGroupTiles = {1, 3, 5};
  constexpr std::array<int64_t, 3> kExtraKeys = {0, 45, 203};
  constexpr std::array<int64_t, 2> kEdgeAlphas = {100000, 600000};
  VecSelectionStats stats;
  for (const int64_t pooling : {int64_t{16}, int64_t{48}, int64_t{64}, int64_t{128}}) {
    for (const int64_t causal : {int64_t{0}, int64_t{1}}) {
      for (const int64_t group_tiles : kGroupTiles) {
        const int64_t q_len = 1500 + random.uniform_int(0, 63);
        const int64_t kv_len = q_len + pick(random, kExtraKeys);
        const ProblemSize size = vec_problem(random, q_len, kv_len, pick(random, kGqa));
        const AttentionInputs inputs = random_inputs(random, size);
        const PatternSpec spec{"vec",
                               {{"pooling", pooling},
                                {"group", group_tiles},
                                {"alpha_ppm", pick(random, kEdgeAlphas)},
                                {"causal", causal}}};
        SCOPED_TRACE(spec.to_string() + " " + describe(size));
        const BothPlans plans = build_both(spec, size, inputs, stream_);
        (void)expect_matching_plans(plans, host_inputs_of(inputs, size), stats, stream_);
      }
    }
  }
  EXPECT_GT(stats.selected_in_spans, 0);
  EXPECT_GT(stats.selected_in_columns, 0);
  EXPECT_LE(stats.borderline * kMaxBorderlineShare, stats.candidates)
      << stats.borderline << " of " << stats.candidates << " candidates within the bound";
}

// The score pass scores each chunk in two halves, each half's MMAs beside the filter of the half
// before, and scores its last chunk's stage once more (the scores dropped); splits are sized to
// the device. Keys past the sinks filling 1 to 5 chunks (fewer and more chunks than the pipeline's
// stages), or ending 17 keys short of that; head_dim 64 (copies sized from the parameters) and 128
// (copies at fixed strides); causal and not; groups of 1 and 16 tiles; GQA 1, 4 and 7: every
// record equals the host's cut of the device's selection.
TEST_F(GpuVecBuild, ChunkCountsAroundThePipelineMatchTheHostPlan) {
  Random random;
  SCOPED_TRACE(random.trace());
  constexpr int64_t kSinkKeys = 64;  // the pooling: the keys before the first scored chunk
  constexpr int64_t kChunkKeys = 64;
  constexpr int64_t kShortBy = 17;
  constexpr std::array<int64_t, 3> kGqa = {1, 4, 7};
  constexpr std::array<int64_t, 2> kGroupTiles = {1, 16};
  VecSelectionStats stats;
  for (int64_t chunks = 1; chunks <= 5; ++chunks) {
    for (const int64_t head_dim : {int64_t{64}, int64_t{128}}) {
      const int64_t kv_len = kSinkKeys + chunks * kChunkKeys - random.uniform_int(0, 1) * kShortBy;
      ProblemSize size = vec_problem(random, kv_len, kv_len, pick(random, kGqa));
      size.head_dim = head_dim;
      size.scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
      const AttentionInputs inputs = random_inputs(random, size);
      for (const int64_t causal : {int64_t{0}, int64_t{1}}) {
        const PatternSpec spec{"vec",
                               {{"pooling", kSinkKeys},
                                {"group", pick(random, kGroupTiles)},
                                {"alpha_ppm", random.bernoulli(0.5) ? 100000 : 600000},
                                {"causal", causal}}};
        SCOPED_TRACE(spec.to_string() + " " + describe(size));
        const BothPlans plans = build_both(spec, size, inputs, stream_);
        (void)expect_matching_plans(plans, host_inputs_of(inputs, size), stats, stream_);
      }
    }
  }
  EXPECT_GT(stats.selected_in_spans + stats.selected_in_columns, 0);
  EXPECT_LE(stats.borderline * kMaxBorderlineShare, stats.candidates)
      << stats.borderline << " of " << stats.candidates << " candidates within the bound";
}

// Union tiles at the engine's 128-row tiles: 2 blocks per tile (pooling 64; pooling 48: 96-row
// tiles) and 8 (pooling 16), the last tile whole, with fewer blocks, or with a partial last block
// (odd lengths); GQA 1, 4 and 7; causal and not; kv_len at or past q_len. The device ORs its
// blocks' keep masks: the plan must equal the host's union, record for record.
TEST_F(GpuVecBuild, UnionTilesMatchTheHostPlan) {
  Random random;
  SCOPED_TRACE(random.trace());
  constexpr std::array<int64_t, 4> kUnionQueries = {1024, 1024 + 64 + 17, 1024 + 30, 1537};
  VecSelectionStats stats;
  int64_t trial = 0;
  for (const int64_t pooling : {int64_t{64}, int64_t{48}, int64_t{16}}) {
    for (const int64_t group : {int64_t{1}, int64_t{4}, int64_t{7}}) {
      const int64_t q_len = kUnionQueries[static_cast<std::size_t>(trial++) % kUnionQueries.size()];
      const int64_t kv_len = q_len + random.uniform_int(0, 1) * random.uniform_int(1, 99);
      const ProblemSize size = vec_problem(random, q_len, kv_len, group);
      const AttentionInputs inputs = random_inputs(random, size);
      for (const int64_t causal : {0, 1}) {
        PatternSpec spec{"vec",
                         {{"pooling", pooling},
                          {"group", 16},
                          {"alpha_ppm", random.uniform_int(50000, 600000)},
                          {"causal", causal},
                          {"union_tiles", 1}}};
        SCOPED_TRACE(spec.to_string() + " " + describe(size));
        const BothPlans plans = build_both(spec, size, inputs, stream_);
        const Plan adopted =
            expect_matching_plans(plans, host_inputs_of(inputs, size), stats, stream_);
        const int64_t union_rows = size.tile_rows / pooling * pooling;
        EXPECT_EQ(adopted.num_tiles(),
                  size.batch * size.q_heads() * ((size.q_len + union_rows - 1) / union_rows));
      }
    }
  }
  EXPECT_GT(stats.selected_in_spans + stats.selected_in_columns, 0);
  EXPECT_LE(stats.borderline * kMaxBorderlineShare, stats.candidates)
      << stats.borderline << " of " << stats.candidates << " candidates within the bound";
}

// A plan of more tiles than one CTA sorts into its schedule and scans into offsets (short blocks
// of 16 queries, one tile each, GQA 7 and a second batch element, non-causal over few keys to keep
// the host's reference short): the device radix sort's schedule, byte for byte the host's, ties in
// position order, and the device scan's offsets.
TEST_F(GpuVecBuild, SchedulesOfManyTilesMatchTheHostPlan) {
  Random random;
  SCOPED_TRACE(random.trace());
  constexpr int64_t kPooling = 16;
  constexpr int64_t kGroup = 7;
  constexpr int64_t kBatch = 2;
  constexpr int64_t kOneCtaTiles = std::max(kCheckedBlockScheduleTiles, kCheckedBlockOffsetCounts);
  constexpr int64_t kQueries = kOneCtaTiles / (kBatch * kGroup) * kPooling + 37;
  const int64_t kv_len = random.uniform_int(300, 700);
  ProblemSize size = vec_problem(random, kQueries, kv_len, kGroup);
  size.batch = kBatch;
  const AttentionInputs inputs = random_inputs(random, size);
  const PatternSpec spec{"vec",
                         {{"pooling", kPooling},
                          {"alpha_ppm", random.uniform_int(50000, 600000)},
                          {"causal", 0},
                          {"union_tiles", 0}}};
  SCOPED_TRACE(spec.to_string() + " " + describe(size));
  const BothPlans plans = build_both(spec, size, inputs, stream_);
  ASSERT_GE(plans.host.num_tiles(), kOneCtaTiles);
  VecSelectionStats stats;
  (void)expect_matching_plans(plans, host_inputs_of(inputs, size), stats, stream_);
  EXPECT_LE(stats.borderline * kMaxBorderlineShare, stats.candidates)
      << stats.borderline << " of " << stats.candidates << " candidates within the bound";
}

// Every phase time of a timed build is a stream time (>= 0, the score pass > 0), and they add up to
// the build's total within the events' resolution (about 0.5 us each) and float rounding.
void expect_phase_times(const cuda::VecBuildTimes& times) {
  const float phases[] = {times.scratch, times.pool,    times.score, times.count,   times.offsets,
                          times.host,    times.records, times.write, times.schedule};
  float sum = 0.0f;
  for (const float phase : phases) {
    EXPECT_GE(phase, 0.0f);
    sum += phase;
  }
  EXPECT_GT(times.score, 0.0f);
  constexpr float kRelativeRounding = 1e-3f;
  constexpr float kEventResolutionMs = 1e-3f;
  const float tolerance =
      kRelativeRounding * times.total + static_cast<float>(std::size(phases)) * kEventResolutionMs;
  EXPECT_NEAR(sum, times.total, tolerance) << "phases do not add up";
}

// SYNTHETIC preset inputs (structured attention, not N(0, 1)): all heads, GQA of the preset. Two
// builds of one spec hold the same spans and columns (no atomics decide where a key goes), the
// second one timed by phases.
TEST_F(GpuVecBuild, SyntheticPresetMatchesTheHostPlan) {
  WorkloadSpec workload_spec;
  workload_spec.seq_len = kSyntheticLength;
  const Workload workload = Workload::create(workload_spec);
  const Workload::Tensors tensors = workload.materialize(DType::kBFloat16);
  const TensorView q = tensors.q.view();
  const TensorView k = tensors.k.view();
  const DeviceCopy device_q(tensors.q);
  const DeviceCopy device_k(tensors.k);
  const float scale = 1.0f / std::sqrt(static_cast<float>(q.shape[3]));
  const PlanShape shape{1, q.shape[2], q.shape[1], k.shape[1], 128};
  const PatternInputs host_inputs{q, k, scale};
  const PatternInputs device_inputs{device_q.view, device_k.view, scale};
  VecSelectionStats stats;
  for (const char* text : {"vec", "vec:alpha_ppm=500000,pooling=128", "vec:causal=0,group=64"}) {
    SCOPED_TRACE(text);
    const PatternSpec spec = PatternSpec::parse(text);
    const BothPlans plans = build_both(spec, shape, host_inputs, device_inputs, stream_);
    const Plan adopted = expect_matching_plans(plans, host_inputs, stats, stream_);
    // The second build times its phases (events between them): the same records, and phase
    // times that add up to the build's.
    cuda::VecBuildTimes times;
    const BothPlans again = build_both(spec, shape, host_inputs, device_inputs, stream_, &times);
    const Plan adopted_again = expect_matching_plans(again, host_inputs, stats, stream_);
    EXPECT_EQ(adopted_again.columns, adopted.columns) << "two builds chose different columns";
    EXPECT_EQ(adopted_again.spans, adopted.spans) << "two builds chose different spans";
    expect_phase_times(times);
  }
}

// Attention through the device plan against the fp64 oracle of the host plan, on both kernels'
// tile heights and both dtypes.
TEST_F(GpuVecBuild, AttentionThroughTheDevicePlanMatchesTheOracle) {
  Random random;
  SCOPED_TRACE(random.trace());
  for (const DType dtype : kDtypes) {
    for (const int64_t tile_rows : kTileRows) {
      for (const int64_t causal : {0, 1}) {
        const ProblemSize size = oracle_problem(random, kVecLimits, dtype, tile_rows);
        const AttentionInputs inputs = random_inputs(random, size);
        PatternSpec spec = random_spec(random, tile_rows);
        spec.params["causal"] = causal;
        SCOPED_TRACE(spec.to_string() + " " + describe(size));
        const BothPlans plans = build_both(spec, size, inputs, stream_);
        VecSelectionStats stats;
        const Plan adopted =
            expect_matching_plans(plans, host_inputs_of(inputs, size), stats, stream_);
        const AttentionResult gpu = run_gpu(plans.built, inputs, size, random_layout(random));
        expect_matches_oracle(adopted, inputs, size, gpu);
      }
    }
  }
}

// A per-head config mixing vec heads (four specs, alphas no rounding can change) with static and
// vertical-slash heads: the concatenated device plan equals the upload of build_plan over the same
// specs; prepare_pattern of one vec spec with device inputs serves the host plan's attention.
TEST_F(GpuVecBuild, MixedConfigsAndPreparePatternServeTheHostPlan) {
  Random random;
  SCOPED_TRACE(random.trace());
  for (int trial = 0; trial < 4; ++trial) {
    // Shapes without keys are declined by the device build (MatchesTheHostPlanOnRandomInputs),
    // so prepare_pattern with device inputs would refuse them: this test draws shapes with keys.
    ProblemSize size = random_problem(random, kVecLimits);
    while (size.kv_len == 0) size = random_problem(random, kVecLimits);
    size.kv_heads = 1;
    size.group = 7;
    size.head_dim = kHeadDims.back();
    size.scale = 1.0f / std::sqrt(static_cast<float>(size.head_dim));
    const AttentionInputs inputs = random_inputs(random, size);
    const std::vector<PatternSpec> specs = {
        clear_spec(random, size.tile_rows),          PatternSpec::parse("dense"),
        clear_spec(random, size.tile_rows),          PatternSpec::parse("a-shape:sink=8,local=40"),
        vertical_slash(100000, 100000, 7, 9, 64, 0),  // every line: a clear top-k
        clear_spec(random, size.tile_rows),          clear_spec(random, size.tile_rows)};
    std::string names;
    for (const PatternSpec& spec : specs) names += spec.to_string() + " ";
    SCOPED_TRACE(names + describe(size));
    const PlanShape shape = shape_of(size);
    const PatternOperands operands(inputs, size.scale);
    const DeviceOperand v(inputs.v);
    const Plan host = build_plan(specs, shape, nullptr, &operands.host);
    std::vector<PatternSpec> resolved;
    for (const PatternSpec& spec : specs) resolved.push_back(resolve_pattern(spec));
    const cuda::ConfigBuild built =
        build_config_and_wait(resolved, shape, nullptr, operands, stream_);
    expect_same_records(built.plan, host, stream_);

    const PreparedPlan expected =
        prepare_plan(build_plan(specs.front(), shape, nullptr, &operands.host), kCuda, stream_);
    const PreparedPlan prepared =
        prepare_pattern(specs.front(), shape, nullptr, kCuda, stream_, &operands.device);
    expect_identical_attention(prepared, expected, size, operands.q.view, operands.k.view, v.view,
                               stream_);
  }
}

// Blocks taller than the plan's tiles stay on the host (the device build says so); bad parameters
// are named as the host names them.
TEST_F(GpuVecBuild, UnsupportedShapesAndBadSpecsAreNamed) {
  Random random;
  ProblemSize size = error_case_size();
  size.tile_rows = 64;
  const AttentionInputs inputs = random_inputs(random, size);
  const PatternOperands pattern_operands(inputs, size.scale);
  const PatternInputs& device_inputs = pattern_operands.device;
  const PlanShape shape = shape_of(size);
  const cuda::EstimateOperands operands = cuda::make_estimate_operands("vec", device_inputs, shape);
  const PatternSpec tall = resolve_pattern(PatternSpec::parse("vec:pooling=128"));
  EXPECT_FALSE(cuda::builds_vec_on_device(tall, shape));
  expect_error([&] { (void)cuda::build_vec_plan_on_device(tall, shape, operands, stream_); },
               ErrorCode::kUnsupported, {"pooling <= shape.tile_rows = 64"});
  expect_error(
      [&] {
        (void)prepare_pattern(PatternSpec::parse("vec:pooling=128"), shape, nullptr, kCuda, stream_,
                              &device_inputs);
      },
      ErrorCode::kUnsupported, {"not built on the GPU"});
  for (const char* bad : {"vec:pooling=0", "vec:alpha_ppm=-3", "vec:causal=5", "vec:group=0"}) {
    expect_error(
        [&] {
          (void)cuda::build_vec_plan_on_device(resolve_pattern(PatternSpec::parse(bad)), shape,
                                               operands, stream_);
        },
        ErrorCode::kInvalidArgument, {"vec parameter"});
  }
}

}  // namespace
}  // namespace mmsparse::test
