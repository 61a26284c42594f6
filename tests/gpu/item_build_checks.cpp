// The item-boundary and item-sink checks of item_build_checks.h: layouts, specs, and both builds
// of a spec compared record for record.

#include "item_build_checks.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "attention_harness.h"
#include "common/errors.h"
#include "common/random.h"
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
#include "mmsparse/layout.h"
#include "mmsparse/patterns.h"
#include "mmsparse/plan.h"
#include "mmsparse/status.h"
#include "plan_records.h"

namespace mmsparse::test {
namespace {

using testing::expect_error;

constexpr int64_t kMaxTimestamp = 5;  // text tokens before a frame (Qwen3-VL: "<t seconds>")
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

}  // namespace

ModalityLayout item_layout(Random& random, int64_t length, const ItemLayoutLimits& limits) {
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

AttentionInputs grid_trial_inputs(Random& random, const ProblemSize& size) {
  constexpr int64_t kMinPlantedStride = 3;
  AttentionInputs inputs = random_inputs(random, size);
  if (random.bernoulli(0.5)) {
    const int64_t stride = random.uniform_int(kMinPlantedStride, size.head_dim - 2);
    plant_grid(random, inputs, size, stride, random.uniform_int(0, stride - 1));
  }
  return inputs;
}

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

bool expect_item_vertical_slash(const PatternSpec& spec, const QueryBoundaryProblem& problem,
                                const AttentionInputs& inputs, cudaStream_t stream, Plan* keep_host,
                                cuda::DevicePlan* keep) {
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

int64_t expect_item_grid(const PatternSpec& spec, const QueryBoundaryProblem& problem,
                         const AttentionInputs& inputs, cudaStream_t stream, ItemGridBuilt* keep,
                         Plan* keep_host) {
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
  if (shape.q_len > 0) {
    built.lines.resize(entries);
    chosen.download(built.lines.data());
  }
  const int64_t clear =
      expect_grouped_grid_matches_host(resolved, shape, trial.host_inputs, problem.layout,
                                       built.plan, built.lines, stream, keep_host);
  if (keep != nullptr) *keep = std::move(built);
  return clear;
}

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

QueryBoundaryProblem item_oracle_problem(Random& random, DType dtype, int64_t tile_rows) {
  const PatternSpec item_grid = resolve_pattern(PatternSpec::parse("grid:boundary=4"));
  QueryBoundaryProblem problem;
  do {
    problem = item_problem(random, oracle_problem(random, kItemLimits, dtype, tile_rows));
  } while (!grid_groups_fit(item_grid, problem));
  return problem;
}

void random_item_mode(Random& random, int64_t& boundary, int64_t& item_sinks) {
  constexpr std::array<int64_t, 4> kOtherBoundaries = {0, 1, 2, 3};
  const bool item = random.bernoulli(0.6);
  boundary = item ? kItemBoundary : pick(random, kOtherBoundaries);
  item_sinks = item && random.bernoulli(0.5) ? 0 : random.uniform_int(1, kMaxItemSinks);
}

}  // namespace mmsparse::test
