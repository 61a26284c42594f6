// The item boundary (boundary=4) and per-item sinks (item_sinks > 0) estimated on the GPU
// (methods/estimate/item_spaces.h) against the host builders: on random layouts like Qwen3-VL's
// (several videos of different frame sizes, a variable run of text before every frame, images,
// odd lengths) and GQA ratios 1, 4 and 7, the device plan equals the host plan record for record
// (vertical-slash: with budgets whose top-k cuts are clear; grid: the host plan of the lines the
// device chose, and those lines equal the host search's where it is clear); attention through the
// device plans matches the fp64 oracle; layouts the GPU cannot take stay on the host.

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "attention_harness.h"
#include "common/errors.h"
#include "common/random.h"
#include "core/engine_chunks.h"
#include "cuda/runtime/engine.h"
#include "device_buffer.h"
#include "grid_inputs.h"
#include "index_build_cases.h"
#include "index_test_support.h"
#include "methods/estimate/estimation.h"
#include "methods/estimate/index_builders.h"
#include "methods/estimate/index_kernels.h"
#include "methods/estimate/modality_boundary.h"
#include "methods/grid/grid.h"
#include "methods/registry.h"
#include "mmsparse/attention.h"
#include "mmsparse/layout.h"
#include "mmsparse/patterns.h"
#include "mmsparse/plan.h"
#include "mmsparse/status.h"
#include "mmsparse/tools/workload.h"
#include "plan_records.h"
#include "stream_test.h"

namespace mmsparse::test {
namespace {

using testing::expect_error;

constexpr int64_t kItemBoundary = static_cast<int64_t>(detail::BoundaryMode::kItem);
constexpr std::array<Gqa, 3> kItemGqa = {{{1, 1}, {2, 4}, {1, 7}}};
constexpr ProblemLimits kItemLimits{kItemGqa, kMaxQueryLength, kMaxExtraKeys};
constexpr int64_t kMaxTimestamp = 5;  // text tokens before a frame (Qwen3-VL: "<t seconds>")
constexpr int64_t kMaxItemFrames = 4;
constexpr int64_t kMinFrameSide = 2;
constexpr int64_t kMaxFrameSide = 5;
constexpr int64_t kMaxItemSinks = 3;
constexpr int64_t kEveryLine = int64_t{1} << 20;

// Segments and media of a layout under construction; consecutive text joins one segment.
struct LayoutParts {
  std::vector<Segment> segments;
  std::vector<Media> media;
  int64_t length = 0;

  void text(int64_t tokens) {
    if (tokens <= 0) return;
    if (!segments.empty() && segments.back().modality == Modality::kText) {
      segments.back().end += tokens;
    } else {
      segments.push_back({Modality::kText, length, length + tokens, -1, 0});
    }
    length += tokens;
  }
  void frame(Modality modality, int64_t tokens, int64_t frame_index) {
    const auto item = static_cast<int32_t>(media.size() - 1);
    segments.push_back({modality, length, length + tokens, item, frame_index});
    length += tokens;
  }
};

// How many media items a layout holds at most, and their sizes.
struct ItemLayoutLimits {
  int64_t max_items = std::numeric_limits<int64_t>::max();
  int64_t max_frames = kMaxItemFrames;
  int64_t min_side = kMinFrameSide, max_side = kMaxFrameSide;
};

// A random Qwen3-VL-like layout of `length` tokens: text runs between videos (each its own frame
// size, 1 to 4 frames, a timestamp of 1 to 5 text tokens before every frame) and images; text
// fills what no item fits in, and the rest once `limits.max_items` items are placed.
ModalityLayout item_layout(Random& random, int64_t length, const ItemLayoutLimits& limits = {}) {
  LayoutParts parts;
  while (parts.length < length && static_cast<int64_t>(parts.media.size()) < limits.max_items) {
    parts.text(std::min(length - parts.length, random.uniform_int(1, kMaxTextRun)));
    const bool video = random.bernoulli(0.6);
    const Grid grid{video ? random.uniform_int(1, limits.max_frames) : 1,
                    random.uniform_int(limits.min_side, limits.max_side),
                    random.uniform_int(limits.min_side, limits.max_side)};
    std::vector<int64_t> timestamps;
    int64_t tokens = grid.tokens();
    for (int64_t f = 0; video && f < grid.t; ++f) {
      timestamps.push_back(random.uniform_int(1, kMaxTimestamp));
      tokens += timestamps.back();
    }
    if (tokens >= length - parts.length) continue;  // no room: text fills the rest
    parts.media.push_back({video ? Modality::kVideo : Modality::kImage, grid, -1, -1});
    for (int64_t f = 0; f < grid.t; ++f) {
      if (video) parts.text(timestamps[static_cast<std::size_t>(f)]);
      parts.frame(video ? Modality::kVideo : Modality::kImage, grid.frame_tokens(), f);
    }
  }
  parts.text(length - parts.length);
  return ModalityLayout(parts.segments, parts.media);
}

QueryBoundaryProblem item_problem(Random& random, ProblemSize size) {
  size.kv_len = std::max(size.kv_len, size.q_len);
  const int64_t last_q = random.bernoulli(0.5) ? 64 : random.uniform_int(1, kMaxLastQueries);
  return {size, item_layout(random, size.kv_len), last_q};
}

// Whether every query group's last rows of `resolved` fit the GPU estimate.
bool item_groups_fit(const PatternSpec& resolved, const QueryBoundaryProblem& problem) {
  const PlanShape shape = plan_shape(problem.size);
  const int64_t last_q = resolved.params.at("last_q");
  const auto groups = detail::query_groups(resolved, shape, &problem.layout);
  return std::all_of(groups.begin(), groups.end(), [&](const detail::QueryGroup& group) {
    return cuda::index::fits_estimate(group.last_rows(last_q));
  });
}

// Whether the grid's grouped conversion takes the spec's query groups.
bool grid_groups_fit(const PatternSpec& resolved, const QueryBoundaryProblem& problem) {
  return static_cast<int64_t>(
             detail::query_groups(resolved, plan_shape(problem.size), &problem.layout).size()) <=
         cuda::index::kMaxGroupedGridGroups;
}

// Fresh inputs, with a planted grid half of the time (so that searches have a clear answer).
AttentionInputs grid_trial_inputs(Random& random, const ProblemSize& size) {
  constexpr int64_t kMinPlantedStride = 3;
  AttentionInputs inputs = random_inputs(random, size);
  if (random.bernoulli(0.5)) {
    const int64_t stride = random.uniform_int(kMinPlantedStride, size.head_dim - 2);
    plant_grid(random, inputs, size, stride, random.uniform_int(0, stride - 1));
  }
  return inputs;
}

// The host estimate's scores of every (query group, key space) pair of `resolved`'s boundary, pair
// by pair, for every head slot.
HostScores pair_scores(const PatternSpec& resolved, const QueryBoundaryProblem& problem,
                       const AttentionInputs& inputs) {
  const PlanShape shape = plan_shape(problem.size);
  const PatternInputs host_inputs{inputs.q.view, inputs.k.view, problem.size.scale};
  detail::KeyCache cache;
  HostScores scores;
  for (const detail::QueryGroup& group : detail::query_groups(resolved, shape, &problem.layout)) {
    const std::vector<int64_t> rows = group.last_rows(resolved.params.at("last_q"));
    for (const detail::KeySpace& space : group.key_spaces) {
      for (int64_t slot = 0; slot < shape.head_slots(); ++slot) {
        const detail::HeadOperands operands(host_inputs, shape, slot, cache);
        const detail::Estimate estimate =
            detail::estimate_last_queries(operands, rows, space, shape.causal_offset());
        scores.columns.push_back(estimate.column_sums());
        scores.diagonals.push_back(estimate.diagonal_sums());
      }
    }
  }
  return scores;
}

// A vertical-slash spec with `boundary` and `item_sinks` and budgets whose cuts are clear in every
// pair and head slot (a third keep every line, a cut that is always clear).
PatternSpec clear_item_spec(Random& random, const QueryBoundaryProblem& problem,
                            const AttentionInputs& inputs, int64_t boundary, int64_t item_sinks) {
  const int64_t sink = random.uniform_int(0, kMaxSink);
  const int64_t local = random.uniform_int(0, kMaxLocal);
  PatternSpec spec = vertical_slash(kEveryLine, kEveryLine, sink, local, problem.last_q, boundary);
  spec.params["item_sinks"] = item_sinks;
  if (random.bernoulli(1.0 / 3.0)) return spec;
  const HostScores scores = pair_scores(resolve_pattern(spec), problem, inputs);
  spec.params["vertical"] = clear_budget(random, scores.columns, sink);
  spec.params["slash"] = clear_budget(random, scores.diagonals, local);
  return spec;
}

// What a check of both builds of `spec` starts from: the trace naming the spec, the size and the
// layout; the resolved spec and shape; device copies of q and k with the estimate operands over
// them; the host inputs; and whether every query group's last rows fit the GPU estimate. Members
// point into one another: it is neither copied nor moved.
struct ItemBuildTrial {
  ItemBuildTrial(const PatternSpec& spec, const QueryBoundaryProblem& problem,
                 const AttentionInputs& inputs)
      : trace(__FILE__, __LINE__,
              spec.to_string() + " " + describe(problem.size) + " layout " +
                  problem.layout.to_json()),
        resolved(resolve_pattern(spec)),
        shape(plan_shape(problem.size)),
        q(inputs.q),
        k(inputs.k),
        operands(
            cuda::make_estimate_operands(spec.name, {q.view, k.view, problem.size.scale}, shape)),
        host_inputs{inputs.q.view, inputs.k.view, problem.size.scale},
        estimate_fits(item_groups_fit(resolved, problem)) {}
  ItemBuildTrial(const ItemBuildTrial&) = delete;
  ItemBuildTrial& operator=(const ItemBuildTrial&) = delete;

  ::testing::ScopedTrace trace;
  PatternSpec resolved;
  PlanShape shape;
  DeviceOperand q;
  DeviceOperand k;
  cuda::EstimateOperands operands;
  PatternInputs host_inputs;
  bool estimate_fits;
};

// Both builds of a vertical-slash spec where its groups fit the estimate (records compared,
// returns true); else the spec is routed to the host and the device build says why.
bool expect_item_vertical_slash(const PatternSpec& spec, const QueryBoundaryProblem& problem,
                                const AttentionInputs& inputs, cudaStream_t stream,
                                Plan* keep_host = nullptr, cuda::DevicePlan* keep = nullptr) {
  const ItemBuildTrial trial(spec, problem, inputs);
  const auto build = [&] {
    return cuda::build_dynamic_plan_on_device(trial.resolved, trial.shape, &problem.layout,
                                              trial.operands, stream);
  };
  if (!trial.estimate_fits) {
    EXPECT_FALSE(cuda::builds_dynamic_on_device(trial.resolved, trial.shape, &problem.layout));
    expect_error([&] { (void)build(); }, ErrorCode::kUnsupported,
                 {"vertical-slash parameter last_q", "runs"});
    return false;
  }
  EXPECT_TRUE(cuda::builds_dynamic_on_device(trial.resolved, trial.shape, &problem.layout));
  Plan host = build_plan(spec, trial.shape, &problem.layout, &trial.host_inputs);
  cuda::DevicePlan built = build();
  expect_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  SCOPED_TRACE(host.summary());
  expect_same_records(built, host, stream);
  if (keep_host != nullptr) *keep_host = std::move(host);
  if (keep != nullptr) *keep = std::move(built);
  return true;
}

// The device grid build with `chosen` lines per (group, space) pair and head slot.
struct ItemGridBuilt {
  cuda::DevicePlan plan;
  std::vector<detail::GridLines> lines;
};

// One grid trial (check_grouped_grid's for any boundary with item sinks): returns how many
// searches were clear, or -1 when the groups do not fit and the spec stays on the host.
int64_t expect_item_grid(const PatternSpec& spec, const QueryBoundaryProblem& problem,
                         const AttentionInputs& inputs, cudaStream_t stream,
                         ItemGridBuilt* keep = nullptr, Plan* keep_host = nullptr) {
  const ItemBuildTrial trial(spec, problem, inputs);
  const PatternSpec& resolved = trial.resolved;
  const PlanShape& shape = trial.shape;
  const bool groups_fit = grid_groups_fit(resolved, problem);
  if (!groups_fit || !trial.estimate_fits) {
    EXPECT_FALSE(cuda::builds_grid_on_device(resolved, shape, &problem.layout));
    const auto build = [&] {
      (void)cuda::build_grid_plan_on_device(resolved, shape, &problem.layout, trial.operands,
                                            stream);
    };
    if (groups_fit) {
      expect_error(build, ErrorCode::kUnsupported, {"grid parameter last_q", "runs"});
    } else {
      expect_error(build, ErrorCode::kUnsupported, {"grid parameter boundary", "query groups"});
    }
    return -1;
  }
  EXPECT_TRUE(cuda::builds_grid_on_device(resolved, shape, &problem.layout));
  const auto entries = static_cast<std::size_t>(
      shape.head_slots() * cuda::grid_selections(resolved, shape, &problem.layout));
  DeviceBuffer chosen(std::max<std::size_t>(1, entries) * sizeof(detail::GridLines));
  ItemGridBuilt built;
  built.plan =
      cuda::build_grid_plan_on_device(resolved, shape, &problem.layout, trial.operands, stream,
                                      static_cast<detail::GridLines*>(chosen.data()));
  expect_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  const PatternInputs& host_inputs = trial.host_inputs;
  int64_t clear = 0;
  if (shape.q_len > 0) {
    built.lines.resize(entries);
    chosen.download(built.lines.data());
    const HostGridSearch search =
        host_grouped_grid_search(resolved, shape, host_inputs, problem.layout);
    EXPECT_EQ(search.lines.size(), built.lines.size());
    clear = expect_clear_lines_equal(search, built.lines);
  }
  Plan host = host_grid_plan(resolved, shape, host_inputs, built.lines, &problem.layout);
  SCOPED_TRACE(host.summary());
  expect_same_grid_records(built.plan, host, stream);
  if (keep != nullptr) *keep = std::move(built);
  if (keep_host != nullptr) *keep_host = std::move(host);
  return clear;
}

// A random grid spec (random_grid_spec's regimes) with `boundary` and `item_sinks`.
PatternSpec item_grid_spec(Random& random, int64_t boundary, int64_t item_sinks) {
  const int64_t stride = random.bernoulli(0.3) ? random.uniform_int(2, 40) : 0;
  const int64_t hline = random.uniform_int(0, 1);
  const int64_t vline = random.uniform_int(0, 1);
  const int64_t slash = hline == 0 && vline == 0 ? 1 : random.uniform_int(0, 1);
  const int64_t local =
      random.bernoulli(0.5) ? random.uniform_int(0, 2) : random.uniform_int(0, 40);
  const int64_t last_q = random.bernoulli(0.5) ? 64 : random.uniform_int(1, kMaxLastQueries);
  PatternSpec spec = grid(stride, random.uniform_int(2, 60), hline, vline, slash,
                          random.uniform_int(0, kMaxSink), local, last_q, boundary);
  spec.params["item_sinks"] = item_sinks;
  return spec;
}

// A problem for the fp64 oracle (oracle_problem) on an item layout of no more media items than
// the grouped grid's query groups.
QueryBoundaryProblem item_oracle_problem(Random& random, DType dtype, int64_t tile_rows) {
  const PatternSpec item_grid = resolve_pattern(PatternSpec::parse("grid:boundary=4"));
  QueryBoundaryProblem problem;
  do {
    problem = item_problem(random, oracle_problem(random, kItemLimits, dtype, tile_rows));
  } while (!grid_groups_fit(item_grid, problem));
  return problem;
}

// Boundary and item sinks of a trial: the item boundary with or without sinks, or sinks under
// another boundary.
void random_item_mode(Random& random, int64_t& boundary, int64_t& item_sinks) {
  constexpr std::array<int64_t, 4> kOtherBoundaries = {0, 1, 2, 3};
  const bool item = random.bernoulli(0.6);
  boundary = item ? kItemBoundary : pick(random, kOtherBoundaries);
  item_sinks = item && random.bernoulli(0.5) ? 0 : random.uniform_int(1, kMaxItemSinks);
}

TEST_F(GpuIndexBuild, ItemVerticalSlashMatchesTheHostPlanOnQwen3VlLikeLayouts) {
  Random random;
  SCOPED_TRACE(random.trace());
  int built = 0;
  for (int trial = 0; trial < kRandomTrials; ++trial) {
    const QueryBoundaryProblem problem = item_problem(random, random_problem(random, kItemLimits));
    const AttentionInputs inputs = random_inputs(random, problem.size);
    int64_t boundary = 0;
    int64_t item_sinks = 0;
    random_item_mode(random, boundary, item_sinks);
    const PatternSpec spec = clear_item_spec(random, problem, inputs, boundary, item_sinks);
    built += expect_item_vertical_slash(spec, problem, inputs, stream_) ? 1 : 0;
  }
  EXPECT_GT(built, 0) << "no trial's groups fit the GPU estimate";
}

TEST_F(GpuIndexBuild, ItemGridMatchesTheHostPlanOnQwen3VlLikeLayouts) {
  Random random;
  SCOPED_TRACE(random.trace());
  int built = 0;
  int64_t clear = 0;
  for (int trial = 0; trial < kRandomTrials; ++trial) {
    const QueryBoundaryProblem problem = item_problem(random, random_problem(random, kItemLimits));
    const AttentionInputs inputs = grid_trial_inputs(random, problem.size);
    int64_t boundary = 0;
    int64_t item_sinks = 0;
    random_item_mode(random, boundary, item_sinks);
    const int64_t trial_clear =
        expect_item_grid(item_grid_spec(random, boundary, item_sinks), problem, inputs, stream_);
    if (trial_clear < 0) continue;
    ++built;
    clear += trial_clear;
  }
  EXPECT_GT(built, 0) << "no trial's groups fit the GPU estimate";
  EXPECT_GT(clear, 0) << "no search had a clear host choice to compare";
}

// (tile, item sink) pairs of `plan` whose sink lies on one of the tile's strided spans.
int64_t sinks_on_strided_spans(const Plan& plan, const std::vector<int64_t>& sinks) {
  int64_t count = 0;
  for (std::size_t t = 0; t < plan.tiles.size(); ++t) {
    for (int64_t i = plan.tile_strided_offsets[t]; i < plan.tile_strided_offsets[t + 1]; ++i) {
      const StridedSpan& span = plan.strided_spans[static_cast<std::size_t>(i)];
      count += std::count_if(sinks.begin(), sinks.end(), [&](int64_t key) {
        return key >= span.begin && key < span.end && (key - span.begin) % span.step == 0;
      });
    }
  }
  return count;
}

// Item-boundary grids and grids with item sinks at a few thousand tokens and short strides, where
// the lines' pieces between spans are strided spans (LatticeKeys::kStridedSpansInRanges) and item
// sinks lie on them: the device plan equals the host plan record for record (a sink on a strided
// span is read through it, not listed again as a column), on odd lengths and GQA 1, 4 and 7; the
// item boundary with and without sinks, and sinks under boundaries 0-3.
TEST_F(GpuIndexBuild, ItemGridStridedSpansMatchTheHostOnLongLayouts) {
  constexpr int kTrials = 9;
  constexpr int64_t kMaxShortStride = 7;
  constexpr int64_t kMaxWindow = 9;  // local: windows narrower and wider than the strides
  constexpr int64_t kMaxLastQ = 16;  // at most 16 estimate runs: every group fits the estimate
  // Few items (the grid's query groups), frames of 16 to 256 tokens.
  constexpr ItemLayoutLimits kLongLayout{6, 2 * kMaxItemFrames, 4, 16};
  Random random;
  SCOPED_TRACE(random.trace());
  int built = 0;
  int64_t strided_spans = 0;
  int64_t sinks_on_lines = 0;
  for (int trial = 0; trial < kTrials; ++trial) {
    ProblemSize size = random_problem(random, kItemLimits);
    size.q_len = random.uniform_int(1500, 4500) | 1;
    size.kv_len = size.q_len + random.uniform_int(0, kMaxExtraKeys);
    const QueryBoundaryProblem problem{size, item_layout(random, size.kv_len, kLongLayout),
                                       random.uniform_int(1, kMaxLastQ)};
    const AttentionInputs inputs = grid_trial_inputs(random, size);
    // By trial: sinks under boundary 0-3, the item boundary alone, the item boundary with sinks.
    const int64_t boundary = trial % 3 == 0 ? random.uniform_int(0, 3) : kItemBoundary;
    const int64_t item_sinks = trial % 3 == 1 ? 0 : random.uniform_int(1, kMaxItemSinks);
    // Vertical lines with sinks, so that some sinks lie on a lattice.
    const int64_t hline = random.uniform_int(0, 1);
    const int64_t vline = item_sinks > 0 ? 1 : random.uniform_int(0, 1);
    const int64_t slash = hline == 0 && vline == 0 ? 1 : random.uniform_int(0, 1);
    const int64_t stride = random.bernoulli(0.25) ? 0 : random.uniform_int(2, kMaxShortStride);
    PatternSpec spec =
        grid(stride, kMaxShortStride, hline, vline, slash, random.uniform_int(0, kMaxSink),
             random.uniform_int(0, kMaxWindow), problem.last_q, boundary);
    spec.params["item_sinks"] = item_sinks;
    Plan host;
    if (expect_item_grid(spec, problem, inputs, stream_, nullptr, &host) < 0) continue;
    ++built;
    strided_spans += static_cast<int64_t>(host.strided_spans.size());
    sinks_on_lines +=
        sinks_on_strided_spans(host, detail::item_sink_keys(problem.layout, item_sinks));
  }
  EXPECT_GT(built, kTrials / 2) << "too few trials' groups fit the GPU estimate";
  EXPECT_GT(strided_spans, 0) << "no trial's lines made a strided span";
  EXPECT_GT(sinks_on_lines, 0) << "no item sink lay on a strided span";
}

// The searched 128K mixed-interleaved config's grid heads (2D boundary, one sink per frame and
// item, a fixed frame-like stride, no windows) on the SYNTHETIC preset's layout scaled to a few
// thousand tokens, 4 query heads over 1 KV head and 7 over 1: up to three query groups over three
// key spaces, 9 pairs of different sizes one after another in one scratch, plans sized by the
// residue-key bound of the lattice columns. Record for record against the host, and with a
// window and the searched stride for the other regimes.
TEST_F(GpuIndexBuild, ItemSinkTwoDGridMatchesTheHostOnMixedInterleaved) {
  // Two query groups (text, video) at 6001 tokens, three (text, image, video) beyond.
  constexpr std::array<int64_t, 3> kLengths = {6001, 16001, 24001};
  constexpr std::array<int64_t, 2> kGroups = {4, 7};
  constexpr int64_t kSearchedConfigStride = 448;
  constexpr int64_t kMaxSearchedStride = 256;  // the host's search stays quick
  constexpr int64_t kConfigSink = 30;
  constexpr int64_t kWindow = 5;
  constexpr int64_t kConfigLastQ = 64;
  constexpr int64_t kTwoD = 3;
  Random random;
  SCOPED_TRACE(random.trace());
  int built = 0;
  for (std::size_t trial = 0; trial < kLengths.size() * kGroups.size(); ++trial) {
    WorkloadSpec workload_spec;
    workload_spec.preset = "mixed-interleaved";
    workload_spec.seq_len = kLengths[trial % kLengths.size()];
    workload_spec.q_heads = 1;
    workload_spec.kv_heads = 1;
    const Workload workload = Workload::create(workload_spec);
    ProblemSize size;
    size.q_len = workload.seq_len();
    size.kv_len = workload.seq_len();
    size.group = kGroups[trial / kLengths.size()];
    size.head_dim = 128;
    size.tile_rows = 128;  // the H100's tile height at head dim 128
    size.kernel = cuda::AttentionKernel::kAuto;
    size.scale = 1.0f / std::sqrt(static_cast<float>(size.head_dim));
    const QueryBoundaryProblem problem{size, workload.layout(), kConfigLastQ};
    const AttentionInputs inputs = grid_trial_inputs(random, size);
    // The config's spec first, then a window (one span per row) or a searched stride.
    const auto regime = static_cast<int64_t>((trial + trial / kLengths.size()) % 3);
    const int64_t stride = regime == 2 ? 0 : kSearchedConfigStride;
    // Slash lines only (hline 0, vline 0, slash 1), as in the config.
    PatternSpec spec = grid(stride, regime == 2 ? kMaxSearchedStride : kSearchedConfigStride, 0, 0,
                            1, kConfigSink, regime == 1 ? kWindow : 0, kConfigLastQ, kTwoD);
    spec.params["item_sinks"] = 1;
    if (expect_item_grid(spec, problem, inputs, stream_) < 0) continue;
    ++built;
  }
  EXPECT_EQ(built, static_cast<int>(kLengths.size() * kGroups.size()))
      << "the config's grid heads must build on the GPU";
}

// Attention through item-boundary and item-sink plans (permuted query orders, empty capacity
// tiles, sink columns) against the fp64 oracle of the host plan, on both kernels' tile heights.
TEST_F(GpuIndexBuild, ItemPlansAttentionMatchesTheOracle) {
  Random random;
  SCOPED_TRACE(random.trace());
  for (const DType dtype : kDtypes) {
    for (const int64_t tile_rows : kTileRows) {
      QueryBoundaryProblem problem = item_oracle_problem(random, dtype, tile_rows);
      problem.last_q = 1;  // one estimate row per group: every group fits the estimate
      const AttentionInputs inputs = grid_trial_inputs(random, problem.size);
      const int64_t item_sinks = random.uniform_int(0, kMaxItemSinks);
      SCOPED_TRACE(describe(problem.size));
      Plan host;
      cuda::DevicePlan built;
      ASSERT_TRUE(expect_item_vertical_slash(
          clear_item_spec(random, problem, inputs, kItemBoundary, item_sinks), problem, inputs,
          stream_, &host, &built));
      expect_matches_oracle(host, inputs, problem.size,
                            run_gpu(built, inputs, problem.size, random_layout(random)));
      PatternSpec grid_spec = item_grid_spec(random, kItemBoundary, item_sinks);
      grid_spec.params["last_q"] = problem.last_q;
      ItemGridBuilt grid_built;
      ASSERT_GE(expect_item_grid(grid_spec, problem, inputs, stream_, &grid_built, &host), 0);
      expect_matches_oracle(host, inputs, problem.size,
                            run_gpu(grid_built.plan, inputs, problem.size, random_layout(random)));
    }
  }
}

// More media items than the grid's query groups: the grid stays on the host (vertical-slash,
// which has no such bound, builds it), and the public route says why; builds_plan_on_device,
// which the GPU search asks, agrees.
TEST_F(GpuIndexBuild, ItemGridOfTooManyItemsStaysOnTheHost) {
  constexpr int64_t kImages = 40;  // more items than grouped::kMaxGroups - 1
  Random random;
  LayoutBuilder builder;
  for (int64_t i = 0; i < kImages; ++i) builder.text(2).image({1, 2, 2}, false);
  const ModalityLayout layout = builder.text(3).build();
  ProblemSize size = error_case_size();
  size.q_len = size.kv_len = layout.length();
  const AttentionInputs inputs = random_inputs(random, size);
  const PlanShape shape = plan_shape(size);
  const DeviceOperand q(inputs.q);
  const DeviceOperand k(inputs.k);
  const PatternInputs device_inputs{q.view, k.view, size.scale};
  PatternSpec grid_spec = PatternSpec::parse("grid:boundary=4,last_q=1");
  EXPECT_FALSE(cuda::builds_grid_on_device(resolve_pattern(grid_spec), shape, &layout));
  EXPECT_FALSE(builds_plan_on_device(grid_spec, shape, &layout, kCuda));
  expect_error(
      [&] { (void)prepare_pattern(grid_spec, shape, &layout, kCuda, stream_, &device_inputs); },
      ErrorCode::kUnsupported, {"not built on the GPU", "host inputs"});
  const PatternSpec vertical =
      PatternSpec::parse("vertical-slash:boundary=4,last_q=1,item_sinks=2");
  EXPECT_TRUE(builds_plan_on_device(vertical, shape, &layout, kCuda));
  const QueryBoundaryProblem problem{size, layout, 1};
  EXPECT_TRUE(expect_item_vertical_slash(vertical, problem, inputs, stream_));
}

// The public route for the heads the GPU search now offers: prepare_pattern with device inputs
// builds item-boundary and item-sink heads on the GPU (builds_plan_on_device) and computes what
// the host plan computes, bit for bit.
TEST_F(GpuIndexBuild, ItemHeadsServePreparePattern) {
  Random random;
  SCOPED_TRACE(random.trace());
  const QueryBoundaryProblem problem =
      item_oracle_problem(random, DType::kBFloat16, kTileRows.front());
  const AttentionInputs inputs = grid_trial_inputs(random, problem.size);
  const PlanShape shape = plan_shape(problem.size);
  const DeviceOperand q(inputs.q);
  const DeviceOperand k(inputs.k);
  const DeviceOperand v(inputs.v);
  const PatternInputs device_inputs{q.view, k.view, problem.size.scale};
  const PatternInputs host_inputs{inputs.q.view, inputs.k.view, problem.size.scale};
  // Every line kept, and grids of slash lines only at a fixed stride (whose records do not depend
  // on the phase found): no top-k or arg-max the GPU's rounding could decide otherwise.
  for (const char* text :
       {"vertical-slash:vertical=1048576,slash=1048576,boundary=4,item_sinks=1,last_q=1",
        "vertical-slash:vertical=1048576,slash=1048576,item_sinks=2",
        "grid:boundary=4,stride=6,hline=0,vline=0,last_q=1",
        "grid:item_sinks=1,stride=9,hline=0,vline=0"}) {
    const PatternSpec spec = PatternSpec::parse(text);
    SCOPED_TRACE(spec.to_string() + " " + describe(problem.size) + " layout " +
                 problem.layout.to_json());
    ASSERT_TRUE(builds_plan_on_device(spec, shape, &problem.layout, kCuda));
    const Plan host = build_plan(spec, shape, &problem.layout, &host_inputs);
    const PreparedPlan expected = prepare_plan(host, kCuda, stream_);
    const PreparedPlan prepared =
        prepare_pattern(spec, shape, &problem.layout, kCuda, stream_, &device_inputs);
    expect_identical_attention(prepared, expected, problem.size, q.view, k.view, v.view, stream_);
  }
}

// The 2D- and item-boundary grid without windows at the length where one residue of an image's
// keys first makes a strided span: an image of (kGatherChunkKeys - 1) * stride + delta tokens
// (delta -1, 0, 1) between short text runs, so the text rows after it hold every image key and
// the image's last rows nearly all; a second, small image gives the space a second range. The
// conversion skips strided-span work where no range of a space is long enough for a piece of
// kGatherChunkKeys keys: record for record against the host, on plans with strided spans and
// without (on an H100 the host's first strided span came at delta -1 or 0, by the item's phase).
// The options fix the lines (grid_lines_fixed: the build skips the estimate), so every pair's
// lines must be {stride, 0}. GQA 1, 4 and 7, with and without item sinks.
TEST_F(GpuIndexBuild, GridBoundaryStridedSpanThresholdMatchesTheHost) {
  constexpr std::array<int64_t, 2> kStrides = {3, 5};
  constexpr std::array<int64_t, 3> kDeltas = {-1, 0, 1};
  constexpr std::array<int64_t, 2> kBoundaries = {3, kItemBoundary};  // 2D, item
  constexpr std::array<int64_t, 3> kGroups = {1, 4, 7};
  constexpr int64_t kLastQ = 64;
  Random random;
  SCOPED_TRACE(random.trace());
  int built = 0;
  int trial = 0;
  int with_strided = 0;
  int without_strided = 0;
  for (const int64_t stride : kStrides) {
    for (const int64_t delta : kDeltas) {
      for (const int64_t boundary : kBoundaries) {
        ++trial;
        const int64_t image_tokens = (kGatherChunkKeys - 1) * stride + delta;
        // Text runs shorter than image_tokens - 1 keep the text space's pieces short.
        const ModalityLayout layout = LayoutBuilder()
                                          .text(random.uniform_int(20, 120) | 1)
                                          .image({1, 1, image_tokens}, false)
                                          .text(random.uniform_int(130, 250))
                                          .image({1, 4, 4}, random.bernoulli(0.5))
                                          .text(random.uniform_int(90, 200))
                                          .build();
        ProblemSize size;
        size.q_len = layout.length();
        size.kv_len = layout.length();
        size.group = kGroups[static_cast<std::size_t>(trial) % kGroups.size()];
        size.head_dim = 128;
        size.tile_rows = 128;
        size.kernel = cuda::AttentionKernel::kAuto;
        size.scale = 1.0f / std::sqrt(static_cast<float>(size.head_dim));
        const QueryBoundaryProblem problem{size, layout, kLastQ};
        const AttentionInputs inputs = grid_trial_inputs(random, size);
        // Slash lines only, no sink and no windows: the lattice of a text row's image phase
        // starts at key 0 and runs over the whole image.
        PatternSpec spec = grid(stride, stride, 0, 0, 1, 0, 0, kLastQ, boundary);
        spec.params["item_sinks"] = (trial / 2) % 2;
        SCOPED_TRACE(spec.to_string() + " " + describe(size) + " layout " + layout.to_json());
        ItemGridBuilt device;
        Plan host;
        if (expect_item_grid(spec, problem, inputs, stream_, &device, &host) < 0) continue;
        ++built;
        for (const detail::GridLines& lines : device.lines) {
          EXPECT_EQ(lines.stride, stride);
          EXPECT_EQ(lines.phase, 0);
        }
        (host.strided_spans.empty() ? without_strided : with_strided) += 1;
      }
    }
  }
  EXPECT_EQ(built, trial) << "every trial's groups must fit the GPU estimate";
  // Both sides of the skip: plans with and without strided spans (where exactly the host starts
  // cutting them depends on the item's phase, not only on delta).
  EXPECT_GT(with_strided, 0) << "no trial's host plan had strided spans";
  EXPECT_GT(without_strided, 0) << "every trial's host plan had strided spans";
}

}  // namespace
}  // namespace mmsparse::test
