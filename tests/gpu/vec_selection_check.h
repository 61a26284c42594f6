#pragma once
// VecAttention's device selection against the CPU reference (methods/vec/vec.h). The GPU pools the
// queries bit for bit as the host does, but sums each score's products on tensor cores in their
// own order, so its kept set may differ from the host's at keys whose margin (score minus the
// running maximum) lies within rounding of log(alpha), and nowhere else.
//
// The bound. Every product is exact in fp32 (two 8- or 11-bit significands); a sum of head_dim of
// them in any order is within head_dim * u * sum_d |p_d k_d| of the exact sum, u = 2^-22: twice
// fp32's unit roundoff, which covers truncating additions and the tensor cores' alignment of
// several products to the largest; the host's FMA chain too. So the two scores of a key differ by
// at most twice that (times the scale). A margin is a score minus a maximum of scores, so it moves
// by at most twice the largest such difference among the block's candidates: that is the block's
// tolerance. Keys whose host margin lies farther than the tolerance from log(alpha) must be kept or
// dropped alike; the others may differ. With N(0, 1) inputs the tolerance is about 1e-4 in margin,
// so a wrong score, maximum, group, candidate range or write position still fails.

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "common/random.h"
#include "cuda/runtime/engine.h"
#include "mmsparse/patterns.h"
#include "mmsparse/plan.h"

namespace mmsparse::test {

// At most one candidate key in this many may lie within the rounding bound of the threshold (the
// bound is about 1e-4 in margin, margins spread over units): a looser bound would let the
// comparison pass anything. Not one in 100: a pool of random queries averages to nearly zero, so
// its scores cluster and, with alpha near 1, 1.04-1.07% of a random draw's candidates fell within
// the bound (seeds 12461296887626800489 and 12355531712383482465, H100). The keys at a running
// maximum are left out (VecSelectionStats::borderline_maxima): at alpha 1 every one is within any
// bound, one key in 16 with groups of one tile (seed 17039443626345603128 drew two such specs:
// 3.2% of its candidates, H200).
inline constexpr int64_t kMaxBorderlineShare = 50;

struct VecSelectionStats {
  int64_t candidates = 0;                // candidate keys compared
  int64_t borderline = 0;                // of which within the tolerance of log(alpha), but
                                         // the keys at a running maximum
  int64_t borderline_maxima = 0;         // the keys at a running maximum (margin 0) within it:
                                         // alpha 1, one per group's maximum; the bound's width
                                         // does not decide them, so the tests' borderline share
                                         // (kMaxBorderlineShare) leaves them out
  int64_t differing = 0;                 // of which kept on one side only (all borderline)
  int64_t selected_in_spans = 0;         // device-selected keys that lie in spans
  int64_t selected_in_columns = 0;       // device-selected keys listed as columns
  int64_t spans_across_splits = 0;       // device spans that hold keys on both sides of a multiple
                                         // of kCheckedSplitKeys
  int64_t column_runs_across_steps = 0;  // column runs (consecutive columns) holding keys on both
                                         // sides of a multiple of kCheckedRunStepKeys
  int64_t column_runs_across_words = 0;  // the same across a multiple of kCheckedRunWordKeys
  int64_t steps_with_few_column_words = 0;   // tile steps whose columns lie in 1 to
                                             // kCheckedWarpStagingWords words
  int64_t steps_with_many_column_words = 0;  // in more words
  // The run passes' segments (kCheckedRunSegments per tile, run_segment_edges):
  int64_t spans_across_segments = 0;        // spans holding keys on both sides of a segment edge
  int64_t column_runs_across_segments = 0;  // column runs holding keys on both sides of one
  int64_t columns_at_segment_edges = 0;     // columns at a segment's first or last key
  int64_t tiles_of_one_step = 0;            // tiles whose keys one step covers (one segment)
  int64_t tiles_with_empty_segments = 0;    // tiles of fewer steps than segments (one step too)
};
// The device's key split when a group of the running maximum divides it (vec_select.cuh's
// kSplitKeys): spans crossing its multiples exercise the runs joined across splits.
inline constexpr int64_t kCheckedSplitKeys = 4096;
// The keys one step of the device's run pass covers (vec_runs.cuh's kRunStepKeys: 32 lanes of 32
// keys): column runs crossing its multiples are staged across two steps.
inline constexpr int64_t kCheckedRunStepKeys = 1024;
// One lane's word in that step (kWordKeys): a column run crossing its multiples is staged by two
// lanes (the trailing bits of one word, the head of the next).
inline constexpr int64_t kCheckedRunWordKeys = 32;
// The most words holding columns that the write pass stages one word at a time across the warp
// (vec_runs.cuh's stage_column_bits: 14 instructions per word against 4 per bit of a lane's word);
// with more, each lane walks its own word. Counted by the columns' keys, which for all but the
// column runs crossing a step are the columns staged in that step.
inline constexpr int64_t kCheckedWarpStagingWords = 9;
// The segments the run passes cut a tile's steps into, one warp each (vec_runs.cuh's
// kRunSegments, segment_words): whole steps, ceil(steps / kCheckedRunSegments) per segment.
inline constexpr int64_t kCheckedRunSegments = 4;
// The first keys of a tile's segments after the first, for a tile whose run pass covers keys
// [0, key_end) (causal: through its sinks and diagonal; else kv_len).
std::vector<int64_t> run_segment_edges(int64_t key_end);
// The most plan tiles whose schedule the device sorts in one CTA, and the most counts (tiles + 1)
// whose offsets it scans in one (vec_small_plans.cuh's kBlockScheduleTiles, kBlockOffsetCounts);
// larger plans take cub's device radix sort and scan.
inline constexpr int64_t kCheckedBlockScheduleTiles = 8192;
inline constexpr int64_t kCheckedBlockOffsetCounts = 8704;

// Downloads `built` (one vec spec, `resolved`, over host_inputs' device copies) and checks its
// selected keys (spans and columns but the sinks and diagonal, which must all be there once)
// against `host` = build_plan(spec, shape, nullptr, &host_inputs), tile for tile, within the bound
// above; adds to `stats`. Returns the host's plan for the device's selected keys
// (vec_add_tile_keys: the same cut into spans and columns): the plan `built` must equal record
// for record (expect_same_records), and the plan whose attention the device plan computes.
Plan expect_vec_selection_matches(const cuda::DevicePlan& built, const Plan& host,
                                  const PatternSpec& resolved, const PatternInputs& host_inputs,
                                  VecSelectionStats& stats);

// The same for a plan whose query heads have specs of their own, `device` downloaded (a per-head
// config's, with its mask table) and `host` = build_plan(head_specs, shape, nullptr,
// &host_inputs): the vec heads are checked as above, each with its own resolved spec in
// `head_specs` (one per query head); the other heads' records are copied from `host`. Returns the
// host's plan for the device's selection, which the device plan must equal record for record.
Plan expect_vec_heads_match(const Plan& device, const Plan& host,
                            const std::vector<PatternSpec>& head_specs,
                            const PatternInputs& host_inputs, VecSelectionStats& stats);

// The same for `built` downloaded with its mask table `masks` (a per-head config's ConfigBuild::
// masks, or vec_build_masks for a vec build).
Plan expect_built_vec_heads_match(const cuda::DevicePlan& built,
                                  const std::vector<MaskPolicy>& masks, const Plan& host,
                                  const std::vector<PatternSpec>& head_specs,
                                  const PatternInputs& host_inputs, VecSelectionStats& stats);

// The mask table of a vec build over `shape` (its device builder's): the spec's mask where there
// are queries.
std::vector<MaskPolicy> vec_build_masks(const PatternSpec& resolved, const PlanShape& shape);

// What the vec tests draw: a random vec spec without alpha (pooling up to `tile_rows`, any group,
// causality and tile mode), and a random alpha_ppm, with probability `searched_share` uniform over
// the searched range [0, 1], else one of the values from "every candidate" (0) to "none" (above
// 1) and between.
PatternSpec random_vec_base(Random& random, int64_t tile_rows);
int64_t random_vec_alpha(Random& random, double searched_share);
PatternSpec with_alpha(PatternSpec spec, int64_t alpha_ppm);

}  // namespace mmsparse::test
