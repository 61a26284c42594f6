#pragma once
// Grid heads for the GPU suites (index builders, per-head configs): the spec, inputs with a planted
// grid, and the host search with how clearly it chose, so that a test compares the device's choice
// only where rounding cannot flip it.

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "attention_harness.h"
#include "common/random.h"
#include "cuda/runtime/engine.h"
#include "methods/grid/grid.h"
#include "mmsparse/patterns.h"
#include "mmsparse/plan.h"

namespace mmsparse::test {

PatternSpec grid(int64_t stride, int64_t max_stride, int64_t hline, int64_t vline, int64_t slash,
                 int64_t sink, int64_t local, int64_t last_q, int64_t boundary);

// Overwrites q and k with a grid of stride `stride`: every query row matches the keys of its own
// coordinate's phase (slash lines) and the keys of `vertical_phase` (a vertical line); the phases
// are orthogonal dimensions, so the lines are the only structure. stride < head_dim - 1.
void plant_grid(Random& random, AttentionInputs& inputs, const ProblemSize& size, int64_t stride,
                int64_t vertical_phase);

// The host search (grid.cpp) of each head slot searched (or, with a Q/2D boundary, of each
// (query group, key space) pair and head slot), and how clearly it chose.
struct HostGridSearch {
  std::vector<detail::GridLines> lines;
  std::vector<double> margins;
  std::vector<int64_t> rows;  // estimate rows that see a key, per search
  bool clear(std::size_t search) const;
  bool all_clear() const;
};

// The search of every head slot, or with `heads` (ascending query heads) of the slots batch element
// × heads.size() + the head's index, as a head selection orders them.
HostGridSearch host_grid_search(const PatternSpec& resolved, const PlanShape& shape,
                                const PatternInputs& inputs,
                                const std::vector<int64_t>& heads = {});

// With a Q/2D boundary: the search of every (query group g, key space s) pair and head slot, in
// build_grid_plan_on_device's `chosen` order ([pairs, slots], pair g * spaces + s).
// `heads` (ascending query heads) restricts the slots as for host_grid_search.
HostGridSearch host_grouped_grid_search(const PatternSpec& resolved, const PlanShape& shape,
                                        const PatternInputs& inputs, const ModalityLayout& layout,
                                        const std::vector<int64_t>& heads = {});

// Expects the device's lines `built` (in `search`'s order) to equal the host search's wherever it
// chose clearly; returns how many searches were clear.
int64_t expect_clear_lines_equal(const HostGridSearch& search,
                                 const std::vector<detail::GridLines>& built);

// The host builder's plan of the given lines (host_grouped_grid_search's order; one pair per slot
// without a Q/2D boundary): the conversion's oracle.
Plan host_grid_plan(const PatternSpec& resolved, const PlanShape& shape,
                    const PatternInputs& inputs, const std::vector<detail::GridLines>& lines,
                    const ModalityLayout* layout = nullptr);

// The host side of a Q/2D-boundary grid check of the device's `plan` and `lines`: where there are
// query rows, the host search of every (group, space) pair and head slot, its lines compared with
// `lines` where it chose clearly; then the host plan of `lines` against `plan`, record for record
// (kept in `keep_host` when given). Returns how many searches were clear.
int64_t expect_grouped_grid_matches_host(const PatternSpec& resolved, const PlanShape& shape,
                                         const PatternInputs& host_inputs,
                                         const ModalityLayout& layout, const cuda::DevicePlan& plan,
                                         const std::vector<detail::GridLines>& lines,
                                         cudaStream_t stream, Plan* keep_host = nullptr);

}  // namespace mmsparse::test
