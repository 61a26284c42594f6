#pragma once
// What the GPU suites of the item boundary and per-item sinks share (test_gpu_item_builders.cpp on
// short random layouts, test_gpu_item_grid_long_layouts.cpp on layouts of a few thousand tokens):
// random Qwen3-VL-like layouts, grid and vertical-slash specs with those modes, and the checks that
// build a spec both ways and expect the device plan to equal the host plan record for record. Apart
// from the tests so that both suites run one copy of the checks.

#include <cuda_runtime.h>

#include <array>
#include <cstdint>
#include <limits>
#include <vector>

#include "attention_harness.h"
#include "common/random.h"
#include "cuda/runtime/engine.h"
#include "index_build_cases.h"
#include "index_test_support.h"
#include "methods/estimate/modality_boundary.h"
#include "methods/grid/grid.h"
#include "mmsparse/layout.h"
#include "mmsparse/patterns.h"
#include "mmsparse/plan.h"

namespace mmsparse::test {

inline constexpr int64_t kItemBoundary = static_cast<int64_t>(detail::BoundaryMode::kItem);
inline constexpr std::array<Gqa, 3> kItemGqa = {{{1, 1}, {2, 4}, {1, 7}}};
inline constexpr ProblemLimits kItemLimits{kItemGqa, kMaxQueryLength, kMaxExtraKeys};
inline constexpr int64_t kMaxItemFrames = 4;
inline constexpr int64_t kMinFrameSide = 2;
inline constexpr int64_t kMaxFrameSide = 5;
inline constexpr int64_t kMaxItemSinks = 3;

// How many media items a layout holds at most, and their sizes.
struct ItemLayoutLimits {
  int64_t max_items = std::numeric_limits<int64_t>::max();
  int64_t max_frames = kMaxItemFrames;
  int64_t min_side = kMinFrameSide, max_side = kMaxFrameSide;
};

// A random Qwen3-VL-like layout of `length` tokens: text runs between videos (each its own frame
// size, 1 to 4 frames, a timestamp of 1 to 5 text tokens before every frame) and images; text
// fills what no item fits in, and the rest once `limits.max_items` items are placed.
ModalityLayout item_layout(Random& random, int64_t length, const ItemLayoutLimits& limits = {});

// A random problem of `size` (kv_len at least q_len) on an item layout; last_q 64 or random.
QueryBoundaryProblem item_problem(Random& random, ProblemSize size);

// Fresh inputs, with a planted grid half of the time (so that searches have a clear answer).
AttentionInputs grid_trial_inputs(Random& random, const ProblemSize& size);

// A vertical-slash spec with `boundary` and `item_sinks` and budgets whose cuts are clear in every
// pair and head slot (a third keep every line, a cut that is always clear).
PatternSpec clear_item_spec(Random& random, const QueryBoundaryProblem& problem,
                            const AttentionInputs& inputs, int64_t boundary, int64_t item_sinks);

// Both builds of a vertical-slash spec where its groups fit the estimate (records compared,
// returns true); else the spec is routed to the host and the device build says why.
bool expect_item_vertical_slash(const PatternSpec& spec, const QueryBoundaryProblem& problem,
                                const AttentionInputs& inputs, cudaStream_t stream,
                                Plan* keep_host = nullptr, cuda::DevicePlan* keep = nullptr);

// The device grid build with `chosen` lines per (group, space) pair and head slot.
struct ItemGridBuilt {
  cuda::DevicePlan plan;
  std::vector<detail::GridLines> lines;
};

// One grid trial (check_grouped_grid's for any boundary with item sinks): returns how many
// searches were clear, or -1 when the groups do not fit and the spec stays on the host.
int64_t expect_item_grid(const PatternSpec& spec, const QueryBoundaryProblem& problem,
                         const AttentionInputs& inputs, cudaStream_t stream,
                         ItemGridBuilt* keep = nullptr, Plan* keep_host = nullptr);

// A random grid spec (random_grid_spec's regimes) with `boundary` and `item_sinks`.
PatternSpec item_grid_spec(Random& random, int64_t boundary, int64_t item_sinks);

// A problem for the fp64 oracle (oracle_problem) on an item layout of no more media items than
// the grouped grid's query groups.
QueryBoundaryProblem item_oracle_problem(Random& random, DType dtype, int64_t tile_rows);

// Boundary and item sinks of a trial: the item boundary with or without sinks, or sinks under
// another boundary.
void random_item_mode(Random& random, int64_t& boundary, int64_t& item_sinks);

}  // namespace mmsparse::test
