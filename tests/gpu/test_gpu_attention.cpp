// The plan-driven CUDA attention engine against the fp64 oracle and the CPU reference: dense and
// sparse plans, permuted query orders, uneven tiles, every mask policy, GQA, strides and batch
// broadcast on every kernel configuration (test_gpu_attention_edges.cpp has the edge cases, plan
// reuse, argument errors and the lattice upload).

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <functional>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "attention_harness.h"
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

constexpr std::array<int64_t, 4> kGroups = {1, 2, 4, 7};  // GQA ratios

class GpuAttention : public ::testing::TestWithParam<KernelConfig> {
 protected:
  // Plans of batch 1 broadcast over the batch; others hold one head slot per (batch, head).
  static PlanShape plan_shape(const ProblemSize& size, bool broadcast) {
    PlanShape shape;
    shape.batch = broadcast ? 1 : size.batch;
    shape.heads = size.q_heads();
    shape.q_len = size.q_len;
    shape.kv_len = size.kv_len;
    shape.tile_rows = size.tile_rows;
    return shape;
  }

  // Runs the plan on the GPU (output in a random layout) and checks it against the oracles.
  void check_plan(Random& random, const Plan& plan, const AttentionInputs& inputs,
                  const ProblemSize& size) {
    const OperandLayout out_layout = random_layout(random);
    SCOPED_TRACE(describe(size) + " out=" + layout_name(out_layout) + " plan: " + plan.summary());
    const std::vector<cuda::DevicePlan> passes = cuda::upload_passes(plan, nullptr);
    if (runs_on_wgmma(passes, size)) ++wgmma_runs_;
    expect_matches_oracle(plan, inputs, size, run_gpu(passes, inputs, size, out_layout));
  }

  // Plans whose masks read tokens and whose upload has lattice records run on the mma.sync kernel
  // alone (wgmma_serves), which holds 64 rows a tile and head_dim 64 or 128: configurations of
  // taller tiles or head_dim 256 skip them (the 64-row head_dim 128 wgmma configurations check
  // that such plans fall back to it).
  static bool needs_mma_sync(const Plan& plan) {
    const std::vector<cuda::DevicePlan> passes = cuda::upload_passes(plan, nullptr);
    return std::any_of(passes.begin(), passes.end(), [](const cuda::DevicePlan& pass) {
      return pass.layout().has_token_info && pass.layout().lattice_step > 0;
    });
  }
  static bool has_mma_sync_tiles() {
    return GetParam().tile_rows <= cuda::kMmaSyncTileRows &&
           GetParam().head_dim != cuda::kWgmmaWideHeadDim;
  }

  // For tests whose plans the wgmma kernel serves: under a wgmma configuration, it ran.
  void expect_wgmma_ran() const {
    if (GetParam().kernel == cuda::AttentionKernel::kWgmma) {
      EXPECT_GT(wgmma_runs_, 0);
    }
  }

 private:
  int wgmma_runs_ = 0;
};

TEST_P(GpuAttention, DenseCausalMatchesOracle) {
  Random random;
  SCOPED_TRACE(random.trace());
  for (int64_t group : kGroups) {
    const ProblemSize size = random_problem(random, GetParam(), 2, group);
    const AttentionInputs inputs = random_inputs(random, size);
    check_plan(random, dense_plan(plan_shape(size, true), true), inputs, size);
  }
  expect_wgmma_ran();
}

// Enough keys for many chunks per tile, so that every stage of the K/V ring is refilled.
TEST_P(GpuAttention, DenseCausalLongSequence) {
  Random random;
  SCOPED_TRACE(random.trace());
  constexpr int64_t kMinLength = 900;
  constexpr int64_t kMaxLength = 1100;
  ProblemSize size = random_problem(random, GetParam(), 1, 2);
  size.q_len = random.uniform_int(kMinLength, kMaxLength);
  size.kv_len = size.q_len + random.uniform_int(1, kMaxLength - kMinLength);
  const AttentionInputs inputs = random_inputs(random, size);
  check_plan(random, dense_plan(plan_shape(size, true), true), inputs, size);
  expect_wgmma_ran();
}

TEST_P(GpuAttention, DenseNonCausalMatchesOracle) {
  Random random;
  SCOPED_TRACE(random.trace());
  const ProblemSize size = random_problem(random, GetParam(), 1, 2);
  const AttentionInputs inputs = random_inputs(random, size);
  check_plan(random, dense_plan(plan_shape(size, true), false), inputs, size);
  expect_wgmma_ran();
}

TEST_P(GpuAttention, RandomSpansAndColumnsWithPermutedQueries) {
  Random random;
  SCOPED_TRACE(random.trace());
  for (int64_t group : kGroups) {
    const ProblemSize size = random_problem(random, GetParam(), 2, group);
    const AttentionInputs inputs = random_inputs(random, size);
    RandomPlanOptions options;
    options.leave_gaps = true;
    // A per-batch plan: every (batch, head) slot has its own order, tiles and keys.
    check_plan(random, random_plan(random, plan_shape(size, false), options), inputs, size);
  }
  expect_wgmma_ran();
}

// Columns over several chunks of the wgmma kernel (128 keys each, 64 at head_dim 256, the last one
// partial), on every side of the diagonal, under causal, window-with-sink and no masks.
TEST_P(GpuAttention, ManyColumnsAcrossChunks) {
  constexpr int64_t kManyColumns = 400;  // draws; duplicates and span keys are dropped
  Random random;
  SCOPED_TRACE(random.trace());
  for (int64_t group : {int64_t{1}, int64_t{4}}) {
    const ProblemSize size = random_problem(random, GetParam(), 2, group);
    const AttentionInputs inputs = random_inputs(random, size);
    RandomPlanOptions options;
    options.masks = MaskMix::kPositional;
    options.max_extra_spans = 1;
    options.max_columns = kManyColumns;
    check_plan(random, random_plan(random, plan_shape(size, true), options), inputs, size);
  }
  expect_wgmma_ran();
}

// A random plan drawn again (up to a bound) until `wanted` holds: a tile draws the rarer key kinds
// with some probability only, and a small plan has few tiles. The caller asserts `wanted` after.
template <class Wanted>
Plan random_plan_with(Random& random, const PlanShape& shape, const RandomPlanOptions& options,
                      Wanted wanted) {
  constexpr int kPlanAttempts = 20;
  Plan plan = random_plan(random, shape, options);
  for (int attempt = 0; attempt < kPlanAttempts && !wanted(plan); ++attempt) {
    plan = random_plan(random, shape, options);
  }
  return plan;
}

// Plans of several strided spans per tile beside a span, under positional masks.
RandomPlanOptions strided_plan_options() {
  constexpr int64_t kManyStridedSpans = 6;
  RandomPlanOptions options;
  options.masks = MaskMix::kPositional;
  options.max_extra_spans = 1;
  options.max_strided_spans = kManyStridedSpans;
  return options;
}

// A random plan of `options` redrawn until it holds strided spans.
Plan random_strided_plan(Random& random, const PlanShape& shape, const RandomPlanOptions& options) {
  return random_plan_with(random, shape, options,
                          [](const Plan& drawn) { return !drawn.strided_spans.empty(); });
}

// Strided spans (a grid head's lines, gathered by index arithmetic) over several chunks, beside
// columns and spans, under causal, window-with-sink, minimum-distance and periodic-band masks.
TEST_P(GpuAttention, StridedSpansAcrossChunks) {
  Random random;
  SCOPED_TRACE(random.trace());
  for (int64_t group : {int64_t{1}, int64_t{7}}) {
    const ProblemSize size = random_problem(random, GetParam(), 2, group);
    const AttentionInputs inputs = random_inputs(random, size);
    RandomPlanOptions options = strided_plan_options();
    options.leave_gaps = true;
    const Plan plan = random_strided_plan(random, plan_shape(size, false), options);
    ASSERT_FALSE(plan.strided_spans.empty());
    check_plan(random, plan, inputs, size);
  }
  expect_wgmma_ran();
}

// Strided spans without any column: the upload must still mark the plan as gathering keys, or
// the kernel of tensor copies only (ChunkSources::kSpans) would read them as consecutive keys.
TEST_P(GpuAttention, StridedSpansWithoutColumns) {
  Random random;
  SCOPED_TRACE(random.trace());
  const ProblemSize size = random_problem(random, GetParam(), 2, 4);
  const AttentionInputs inputs = random_inputs(random, size);
  RandomPlanOptions options = strided_plan_options();
  options.max_columns = 0;
  // The builder lists a one-key strided span as a column: keep the spans alone (fewer pairs).
  const Plan plan = split_plan(random_strided_plan(random, plan_shape(size, false), options),
                               /*keep_spans=*/true);
  ASSERT_FALSE(plan.strided_spans.empty());
  EXPECT_TRUE(cuda::DevicePlan(plan, 0, nullptr).layout().gathers);
  check_plan(random, plan, inputs, size);
  expect_wgmma_ran();
}

// The step of the lattice records pass `pass` of `plan` has once uploaded; 0 without any.
int32_t uploaded_lattice_step(const Plan& plan, int64_t pass) {
  return cuda::DevicePlan(plan, pass, nullptr).layout().lattice_step;
}

// Lattices (engine_chunks.h: kLatticeSpans strided spans of one step over consecutive keys and one
// count of periods; tensor boxes on the wgmma kernel, gathers on mma.sync): random groups of random
// steps and counts (last chunks often partial, their boxes copying keys past the lattice) beside
// spans, strided spans and columns under random positional masks (a band's period seldom divides
// the step: per-score masks), then the grid mask's bands as lattices (the band's period is the
// step: bit-set masks and the phase classification of its chunks; kv_len's partial last period cuts
// lattices short of whole chunks).
TEST_P(GpuAttention, LatticeChunks) {
  constexpr int64_t kLatticeGroups = 3;
  constexpr int64_t kMinLength = 600;
  constexpr int64_t kMaxLength = 900;
  constexpr int64_t kMaxExtraKeys = 200;
  const char* grid_mask = "grid-mask:sink=8,local=40,period=32,band=6,phases=4,lattice=1";
  Random random;
  SCOPED_TRACE(random.trace());
  for (int64_t group : {int64_t{1}, int64_t{7}}) {
    ProblemSize size = random_problem(random, GetParam(), 2, group);
    size.q_len = random.uniform_int(kMinLength, kMaxLength);
    size.kv_len = size.q_len + random.uniform_int(0, kMaxExtraKeys);
    const AttentionInputs inputs = random_inputs(random, size);
    RandomPlanOptions options;
    options.masks = MaskMix::kPositional;
    options.leave_gaps = true;
    options.max_lattice_groups = kLatticeGroups;
    const Plan plan =
        random_plan_with(random, plan_shape(size, false), options,
                         [](const Plan& drawn) { return uploaded_lattice_step(drawn, 0) > 0; });
    ASSERT_GT(uploaded_lattice_step(plan, 0), 0);
    check_plan(random, plan, inputs, size);

    const Plan bands = build_plan(PatternSpec::parse(grid_mask), plan_shape(size, true));
    ASSERT_EQ(uploaded_lattice_step(bands, 1), 32);
    check_plan(random, bands, inputs, size);
  }
  expect_wgmma_ran();
}

// Spans only, with the same permuted orders, gaps and unaligned spans.
TEST_P(GpuAttention, RandomSpansWithPermutedQueries) {
  Random random;
  SCOPED_TRACE(random.trace());
  for (int64_t group : kGroups) {
    const ProblemSize size = random_problem(random, GetParam(), 2, group);
    const AttentionInputs inputs = random_inputs(random, size);
    RandomPlanOptions options;
    options.leave_gaps = true;
    options.max_strided_spans = 0;
    options.max_columns = 0;
    check_plan(random, random_plan(random, plan_shape(size, false), options), inputs, size);
  }
  expect_wgmma_ran();
}

// A problem long enough for query orders of thousands of runs (1300-1600 queries, odd: never whole
// tiles; a few more keys) with options for plans of spans that leave some rows out.
struct LongOrderProblem {
  static constexpr int64_t kMinLength = 1300;
  static constexpr int64_t kMaxLength = 1600;
  static constexpr int64_t kMaxExtraKeys = 200;

  LongOrderProblem(Random& random, const KernelConfig& config)
      : size(long_size(random, config)), inputs(random_inputs(random, size)) {
    options.leave_gaps = true;
    options.max_strided_spans = 0;
    options.max_columns = 0;
  }

  ProblemSize size;
  AttentionInputs inputs;
  RandomPlanOptions options;

 private:
  static ProblemSize long_size(Random& random, const KernelConfig& config) {
    ProblemSize drawn = random_problem(random, config, 1, 2);
    drawn.q_len = random.uniform_int(kMinLength, kMaxLength) | 1;
    drawn.kv_len = drawn.q_len + random.uniform_int(1, kMaxExtraKeys);
    return drawn;
  }
};

// Heads whose query order has thousands of runs (an arbitrary permutation: a run per row), where
// the kernels' warp-wide run search (query_rows.cuh) narrows in several steps and every row of a
// warp may lie in another run; tiles start anywhere in a run.
TEST_P(GpuAttention, PermutedOrdersOfThousandsOfRuns) {
  constexpr int64_t kManyRuns = 1100;  // more than 32² runs: at least three narrowing steps
  Random random;
  SCOPED_TRACE(random.trace());
  const LongOrderProblem problem(random, GetParam());
  const auto& [size, inputs, options] = problem;
  const auto has_many_runs = [](const Plan& drawn) {
    for (std::size_t slot = 0; slot + 1 < drawn.head_run_offsets.size(); ++slot) {
      if (drawn.head_run_offsets[slot + 1] - drawn.head_run_offsets[slot] >= kManyRuns) {
        return true;
      }
    }
    return false;
  };
  const Plan plan = random_plan_with(random, plan_shape(size, false), options, has_many_runs);
  ASSERT_TRUE(has_many_runs(plan));
  check_plan(random, plan, inputs, size);
  expect_wgmma_ran();
}

// Heads whose runs are far from equally long: the first half of the positions in one run, the rest
// a run per row in random order. A warp's first index then lies far from where its share of q_len
// puts it among the runs, so the kernels' run search (query_rows.cuh) misses its first window and
// narrows; warps of the first half find their run at the head's first.
TEST_P(GpuAttention, PermutedOrdersOfUnevenRuns) {
  Random random;
  SCOPED_TRACE(random.trace());
  const LongOrderProblem problem(random, GetParam());
  const auto& [size, inputs, options] = problem;
  Plan plan = random_plan(random, plan_shape(size, false), options);
  // Tiles cover order indices, so any order of the same positions keeps them valid.
  const int64_t half = size.q_len / 2;
  std::vector<int64_t> rest(static_cast<std::size_t>(size.q_len - half));
  std::iota(rest.begin(), rest.end(), half);
  plan.runs.clear();
  plan.head_run_offsets.assign(1, 0);
  for (int64_t slot = 0; slot < plan.head_slots(); ++slot) {
    std::shuffle(rest.begin(), rest.end(), random.engine());
    plan.runs.push_back({.start = 0, .count = half, .step = 1});
    for (const int64_t position : rest) plan.runs.push_back({.start = position, .count = 1});
    plan.head_run_offsets.push_back(static_cast<int64_t>(plan.runs.size()));
  }
  plan.validate();
  check_plan(random, plan, inputs, size);
  expect_wgmma_ran();
}

// The plan with every head slot in head slot 0's order. Tiles cover order indices, so any order
// of the same positions keeps them valid.
Plan with_first_order_everywhere(Plan plan) {
  const std::vector<QueryRun> first(plan.runs.begin(),
                                    plan.runs.begin() + plan.head_run_offsets[1]);
  plan.runs.clear();
  plan.head_run_offsets.assign(1, 0);
  for (int64_t slot = 0; slot < plan.head_slots(); ++slot) {
    plan.runs.insert(plan.runs.end(), first.begin(), first.end());
    plan.head_run_offsets.push_back(static_cast<int64_t>(plan.runs.size()));
  }
  plan.validate();
  return plan;
}

// Runs of head slot 0 that hold positions: the run records its upload keeps.
int64_t first_head_run_records(const Plan& plan) {
  return std::count_if(plan.runs.begin(), plan.runs.begin() + plan.head_run_offsets[1],
                       [](const QueryRun& run) { return run.count > 0; });
}

bool first_head_permuted(const Plan& plan) { return first_head_run_records(plan) > 1; }

// Every head in one permuted order (a static pattern's, such as the grid mask's bands): the kernels
// take every head's runs from the first head's (DevicePlanLayout::shared_runs) without loading run
// offsets.
TEST_P(GpuAttention, HeadsSharingOnePermutedOrder) {
  Random random;
  SCOPED_TRACE(random.trace());
  for (int64_t group : {int64_t{1}, int64_t{4}}) {
    const ProblemSize size = random_problem(random, GetParam(), 2, group);
    const AttentionInputs inputs = random_inputs(random, size);
    RandomPlanOptions options;
    options.leave_gaps = true;
    options.masks = MaskMix::kPositional;
    const Plan plan = with_first_order_everywhere(
        random_plan_with(random, plan_shape(size, false), options, first_head_permuted));
    ASSERT_TRUE(first_head_permuted(plan));
    EXPECT_EQ(cuda::upload_passes(plan, nullptr)[0].layout().shared_runs,
              first_head_run_records(plan));
    check_plan(random, plan, inputs, size);
  }
  expect_wgmma_ran();
}

// What an upload adds for the kernels: launch records (upload_passes alone), with a permuted
// tile's rows as arithmetic where they allow it, and whether the heads share one order: the first
// head's run count where they do (0 without runs), kPerHeadRuns where any differs.
TEST(GpuPlanUpload, LaunchRecordsAndSharedOrders) {
  constexpr int64_t kHeads = 3;
  constexpr int64_t kLength = 301;
  Random random;
  SCOPED_TRACE(random.trace());
  PlanShape shape;
  shape.heads = kHeads;
  shape.q_len = shape.kv_len = kLength;
  shape.tile_rows = 64;
  const Plan shared = with_first_order_everywhere(
      random_plan_with(random, shape, RandomPlanOptions{}, first_head_permuted));
  ASSERT_TRUE(first_head_permuted(shared));
  // The last head in the identity order instead, as one run.
  Plan differing = shared;
  differing.runs.resize(static_cast<std::size_t>(differing.head_run_offsets[kHeads - 1]));
  differing.runs.push_back({.start = 0, .count = kLength, .step = 1});
  differing.head_run_offsets.back() = static_cast<int64_t>(differing.runs.size());
  differing.validate();
  const Plan identity = dense_plan(shape, /*causal=*/true);

  const struct {
    const char* what;
    const Plan& plan;
    int64_t shared_runs;
  } cases[] = {{"one permuted order", shared, first_head_run_records(shared)},
               {"orders that differ", differing, cuda::kPerHeadRuns},
               {"the identity order", identity, 0}};
  for (const auto& test_case : cases) {
    SCOPED_TRACE(test_case.what);
    const std::vector<cuda::DevicePlan> passes = cuda::upload_passes(test_case.plan, nullptr);
    EXPECT_EQ(passes[0].layout().shared_runs, test_case.shared_runs);
    const int64_t arithmetic = expect_launch_records_follow_schedule(passes[0], test_case.plan);
    // Identity tiles need no arithmetic: the kernels know them from shared_runs or the offsets.
    if (test_case.shared_runs == 0) {
      EXPECT_EQ(arithmetic, 0);
    }
    // Other uploads write no launch records (a per-head config's host section, the builders' form).
    for (const cuda::RecordForm form :
         {cuda::RecordForm::kLattices, cuda::RecordForm::kAsDeviceBuilders}) {
      const cuda::DevicePlan other(test_case.plan, 0, nullptr, form);
      EXPECT_FALSE(other.layout().has_launch_records);
      EXPECT_EQ(other.layout().shared_runs, test_case.shared_runs);
    }
  }

  // The grid mask's band pass: every tile is `phases` consecutive positions in each of its periods
  // (queries aligned with keys, whole periods), so every launch record has its rows as arithmetic.
  constexpr int64_t kGridPeriod = 32;  // the spec's period
  constexpr int64_t kGridPeriods = 20;
  PlanShape grid_shape = shape;
  grid_shape.q_len = grid_shape.kv_len = kGridPeriods * kGridPeriod;
  const Plan grid = build_plan(
      PatternSpec::parse("grid-mask:sink=8,local=40,period=32,band=6,phases=4"), grid_shape);
  const std::vector<cuda::DevicePlan> grid_passes = cuda::upload_passes(grid, nullptr);
  ASSERT_GE(grid_passes.size(), 2u);
  EXPECT_EQ(grid_passes[1].layout().shared_runs, first_head_run_records(grid.pass(1)));
  EXPECT_EQ(expect_launch_records_follow_schedule(grid_passes[1], grid.pass(1)),
            grid.pass(1).num_tiles());
}

// Causal, none and window-with-sink policies per tile, spans only.
TEST_P(GpuAttention, PositionalMaskPolicies) {
  Random random;
  SCOPED_TRACE(random.trace());
  for (int64_t group : {int64_t{1}, int64_t{4}}) {
    const ProblemSize size = random_problem(random, GetParam(), 2, group);
    const AttentionInputs inputs = random_inputs(random, size);
    RandomPlanOptions options;
    options.masks = MaskMix::kPositional;
    options.leave_gaps = true;
    options.max_strided_spans = 0;
    options.max_columns = 0;
    check_plan(random, random_plan(random, plan_shape(size, true), options), inputs, size);
  }
  expect_wgmma_ran();
}

// Every policy, token masks among them, on plans without lattice records: every configuration's
// kernel serves them (tests/gpu/test_gpu_token_masks.cpp holds more for the wgmma kernel).
TEST_P(GpuAttention, MixedMaskPolicies) {
  Random random;
  SCOPED_TRACE(random.trace());
  for (int64_t group : {int64_t{1}, int64_t{4}}) {
    const ProblemSize size = random_problem(random, GetParam(), 2, group);
    const AttentionInputs inputs = random_inputs(random, size);
    const ModalityLayout layout = mixed_layout(random, size.kv_len);
    RandomPlanOptions options;
    options.masks = MaskMix::kMixed;
    options.leave_gaps = true;
    check_plan(random, random_plan(random, plan_shape(size, true), options, &layout), inputs, size);
  }
}

// Passes: a random plan's spans and its columns as two passes, and a third pass of nothing; run
// apart and merged on the device, they must give the one plan's attention. (The grid-mask pattern
// in StaticPatterns has passes of different query orders.)
TEST_P(GpuAttention, PassesMergeToTheUnion) {
  Random random;
  SCOPED_TRACE(random.trace());
  const ProblemSize size = random_problem(random, GetParam(), 2, 2);
  const AttentionInputs inputs = random_inputs(random, size);
  RandomPlanOptions options;
  options.masks = MaskMix::kPositional;
  options.leave_gaps = true;
  const Plan whole = random_plan(random, plan_shape(size, false), options);
  Plan plan = split_plan(whole, true);
  add_pass(plan, split_plan(whole, false));
  PlanBuilder empty(whole.shape);
  for (int64_t slot = 0; slot < whole.head_slots(); ++slot) empty.begin_head();
  add_pass(plan, empty.finish());
  check_passes_disjoint(plan);
  check_plan(random, plan, inputs, size);
  expect_wgmma_ran();
}

TEST_P(GpuAttention, NonCausalSparsePlan) {
  Random random;
  SCOPED_TRACE(random.trace());
  const ProblemSize size = random_problem(random, GetParam(), 1, 7);
  const AttentionInputs inputs = random_inputs(random, size);
  RandomPlanOptions options;
  options.masks = MaskMix::kNonCausal;
  check_plan(random, random_plan(random, plan_shape(size, true), options), inputs, size);
  expect_wgmma_ran();
}

TEST_P(GpuAttention, TriShapeWithUnevenTiles) {
  Random random;
  SCOPED_TRACE(random.trace());
  const ProblemSize size = random_problem(random, GetParam(), 1, 4);
  const AttentionInputs inputs = random_inputs(random, size);
  constexpr int64_t kSink = 13;
  constexpr int64_t kLocal = 70;
  constexpr int64_t kBottom = 45;
  check_plan(random, tri_shape_plan(plan_shape(size, true), kSink, kLocal, kBottom), inputs, size);
  expect_wgmma_ran();
}

TEST_P(GpuAttention, StaticPatterns) {
  Random random;
  SCOPED_TRACE(random.trace());
  const ProblemSize size = random_problem(random, GetParam(), 1, 2);
  const AttentionInputs inputs = random_inputs(random, size);
  const ModalityLayout layout = mixed_layout(random, size.kv_len);
  for (const char* spec :
       {"dense", "a-shape:sink=8,local=40", "tri-shape:sink=8,local=40,bottom=30",
        "sf-fixed:segment=48,vline_stride=32", "sf-strided:local=40,stride=24",
        "grid-mask:sink=8,local=40,period=32,band=6,phases=4,columns=1",
        "grid-mask:sink=3,local=20,period=150,band=70,phases=8,columns=0"}) {
    SCOPED_TRACE(spec);
    const Plan plan = build_plan(PatternSpec::parse(spec), plan_shape(size, true), &layout);
    if (needs_mma_sync(plan) && !has_mma_sync_tiles()) continue;
    check_plan(random, plan, inputs, size);
  }
  expect_wgmma_ran();
}

constexpr auto kMmaSync = cuda::AttentionKernel::kMmaSync;
constexpr auto kWgmma = cuda::AttentionKernel::kWgmma;
constexpr int64_t kWgmmaTileRows = 128;  // two consumer warpgroups
constexpr int64_t kWideHeadDim = cuda::kWgmmaWideHeadDim;

INSTANTIATE_TEST_SUITE_P(
    Kernels, GpuAttention,
    ::testing::Values(KernelConfig{DType::kBFloat16, 64, kMmaSync},
                      KernelConfig{DType::kBFloat16, 128, kMmaSync},
                      KernelConfig{DType::kFloat16, 64, kMmaSync},
                      KernelConfig{DType::kFloat16, 128, kMmaSync},
                      KernelConfig{DType::kBFloat16, 128, kWgmma, kWgmmaTileRows},
                      KernelConfig{DType::kFloat16, 128, kWgmma, kWgmmaTileRows},
                      KernelConfig{DType::kBFloat16, 128, kWgmma, kDefaultTileRows},
                      KernelConfig{DType::kFloat16, 128, kWgmma, kDefaultTileRows},
                      // head_dim 256: two consumer warpgroups whatever the tiles, so 64-row tiles
                      // leave the second one without rows.
                      KernelConfig{DType::kBFloat16, kWideHeadDim, kWgmma, kWgmmaTileRows},
                      KernelConfig{DType::kFloat16, kWideHeadDim, kWgmma, kWgmmaTileRows},
                      KernelConfig{DType::kBFloat16, kWideHeadDim, kWgmma, kDefaultTileRows}),
    [](const ::testing::TestParamInfo<KernelConfig>& info) { return config_name(info.param); });

}  // namespace
}  // namespace mmsparse::test
