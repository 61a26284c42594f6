#include "vec_selection_check.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

#include "cuda/runtime/plan_download.h"
#include "index_test_support.h"
#include "methods/estimate/estimation.h"
#include "methods/vec/vec.h"

namespace mmsparse::test {
namespace {

constexpr Device kCudaDevice{DeviceType::kCUDA, 0};
// Per addition of a score's sum: twice fp32's unit roundoff (vec_selection_check.h).
const float kRoundoff = std::ldexp(1.0f, -22);
// A key's two scores differ by at most twice the per-sum bound; a margin (score minus a maximum)
// by twice that again.
constexpr float kScoreSides = 2.0f;
constexpr float kMarginTerms = 2.0f;
constexpr int kMaxReports = 5;  // mismatches printed per check

// The block's tolerance on margins: kMarginTerms * kScoreSides * head_dim * 2^-22 * scale *
// max over its candidates of sum_d |p_d k_d|.
float margin_tolerance(const detail::HeadOperands& operands, const detail::VecBlock& block,
                       std::span<const detail::VecKeyMargin> margins) {
  const int64_t head_dim = operands.head_dim();
  std::vector<float> pooled(static_cast<std::size_t>(head_dim));
  detail::vec_pooled_query(operands, block.row_begin, block.row_end, pooled.data());
  float largest = 0.0f;
  for (const detail::VecKeyMargin& candidate : margins) {
    const float* key = operands.key(candidate.key);
    float sum = 0.0f;
    for (int64_t d = 0; d < head_dim; ++d) sum += std::abs(pooled[d] * key[d]);
    largest = std::max(largest, sum);
  }
  return kMarginTerms * kScoreSides * static_cast<float>(head_dim) * kRoundoff *
         std::abs(operands.scale()) * largest;
}

// The tile's selected keys: its spans' and columns' keys but the block's sinks and diagonal,
// ascending; fails where a key is listed twice or a sink or diagonal key is missing.
std::vector<int32_t> tile_selected_keys(const Plan& plan, int64_t tile,
                                        const detail::VecBlock& block) {
  std::vector<int32_t> keys(plan.columns.begin() + plan.tile_column_offsets[tile],
                            plan.columns.begin() + plan.tile_column_offsets[tile + 1]);
  for (int64_t s = plan.tile_span_offsets[tile]; s < plan.tile_span_offsets[tile + 1]; ++s) {
    for (int32_t key = plan.spans[s].begin; key < plan.spans[s].end; ++key) keys.push_back(key);
  }
  std::sort(keys.begin(), keys.end());
  EXPECT_TRUE(std::adjacent_find(keys.begin(), keys.end()) == keys.end())
      << "tile " << tile << ": a key listed twice";
  std::vector<int32_t> selected;
  int64_t fixed = 0;
  for (const int32_t key : keys) {
    const bool sink = key < block.sink_end;
    const bool diagonal = key >= block.diagonal_begin && key < block.diagonal_end;
    if (sink || diagonal) {
      ++fixed;
    } else {
      selected.push_back(key);
    }
  }
  const int64_t overlap =
      std::max<int64_t>(0, std::min(block.sink_end, block.diagonal_end) - block.diagonal_begin);
  EXPECT_EQ(fixed, block.sink_end + (block.diagonal_end - block.diagonal_begin) - overlap)
      << "tile " << tile << ": sinks or diagonal keys missing";
  return selected;
}

// A vec tile's tolerance on its keys' margins: the largest of its blocks' (a key's tile margin is
// the largest of its blocks' margins, each of which moves within its block's tolerance).
float tile_tolerance(const detail::HeadOperands& operands, const PlanShape& shape,
                     const detail::VecParams& params, int64_t vec_tile) {
  const int64_t tile_blocks = detail::vec_tile_blocks(shape, params);
  const int64_t end =
      std::min(detail::vec_block_count(shape, params), (vec_tile + 1) * tile_blocks);
  float tolerance = 0.0f;
  for (int64_t b = vec_tile * tile_blocks; b < end; ++b) {
    const detail::VecBlock block = detail::vec_block(shape, params, b);
    tolerance = std::max(
        tolerance,
        margin_tolerance(operands, block, detail::vec_key_margins(operands, block, params)));
  }
  return tolerance;
}

// One tile (vec tile `vec_tile`: a pooled block, or the blocks of a plan-height tile): the
// device's selected keys (spans and columns but sinks and diagonal), every one a candidate, and
// equal to the host's kept set (the union of its blocks') except at borderline keys.
void check_tile(const detail::HeadOperands& operands, const PlanShape& shape,
                const detail::VecParams& params, int64_t vec_tile, std::span<const int32_t> device,
                int64_t tile, VecSelectionStats& stats, int& reports) {
  const detail::VecBlock block = detail::vec_tile(shape, params, vec_tile);
  const std::vector<detail::VecKeyMargin> margins =
      detail::vec_tile_key_margins(operands, shape, params, vec_tile);
  const float tolerance = tile_tolerance(operands, shape, params, vec_tile);
  const float log_alpha = params.log_alpha();
  int64_t found = 0;
  for (const detail::VecKeyMargin& candidate : margins) {
    const bool host_kept = candidate.margin >= log_alpha;
    const bool device_kept =
        std::binary_search(device.begin(), device.end(), static_cast<int32_t>(candidate.key));
    found += device_kept;
    const bool borderline = std::abs(candidate.margin - log_alpha) <= tolerance;
    // The key at a running maximum has margin exactly 0, so with log(alpha) within the tolerance
    // of 0 (alpha 1) it is borderline however tight the bound: counted apart.
    const bool at_maximum = candidate.margin == 0.0f;
    ++stats.candidates;
    stats.borderline += borderline && !at_maximum;
    stats.borderline_maxima += borderline && at_maximum;
    if (host_kept == device_kept) continue;
    ++stats.differing;
    if (!borderline && reports++ < kMaxReports) {
      ADD_FAILURE() << "tile " << tile << " (rows " << block.row_begin << ".." << block.row_end
                    << ") key " << candidate.key << ": host " << (host_kept ? "keeps" : "drops")
                    << " it (margin " << candidate.margin << ", log alpha " << log_alpha
                    << ", tolerance " << tolerance << "), the device does not";
    }
  }
  EXPECT_EQ(found, static_cast<int64_t>(device.size()))
      << "tile " << tile << ": the device kept keys that are not candidates";
}

// Counts the run-pass steps of tile `tile` of `device` (columns ascending) whose column keys lie
// in at most kCheckedWarpStagingWords words, or in more: the two ways the write pass stages them.
void count_column_words_per_step(const Plan& device, int64_t tile, VecSelectionStats& stats) {
  int64_t step = -1;
  int64_t word = -1;
  int64_t words = 0;
  const auto count_step = [&] {
    if (words == 0) return;
    ++(words <= kCheckedWarpStagingWords ? stats.steps_with_few_column_words
                                         : stats.steps_with_many_column_words);
  };
  for (int64_t c = device.tile_column_offsets[tile]; c < device.tile_column_offsets[tile + 1];
       ++c) {
    const int64_t key = device.columns[c];
    if (key / kCheckedRunStepKeys != step) {
      count_step();
      step = key / kCheckedRunStepKeys;
      words = 0;
    }
    if (key / kCheckedRunWordKeys != word) {
      word = key / kCheckedRunWordKeys;
      ++words;
    }
  }
  count_step();
}

// Counts the records of tile `tile` of `device` at its run-pass segment edges (spans and column
// runs across them, columns at them) and its segments' shape, for the tile's keys [0, key_end).
void count_segment_edges(const Plan& device, int64_t tile, int64_t key_end,
                         VecSelectionStats& stats) {
  const std::vector<int64_t> edges = run_segment_edges(key_end);
  const int64_t steps = (key_end + kCheckedRunStepKeys - 1) / kCheckedRunStepKeys;
  stats.tiles_of_one_step += steps == 1;
  stats.tiles_with_empty_segments += steps < kCheckedRunSegments;
  for (const int64_t edge : edges) {
    for (int64_t s = device.tile_span_offsets[tile]; s < device.tile_span_offsets[tile + 1]; ++s) {
      stats.spans_across_segments += device.spans[s].begin < edge && device.spans[s].end > edge;
    }
    for (int64_t c = device.tile_column_offsets[tile]; c < device.tile_column_offsets[tile + 1];
         ++c) {
      const int64_t key = device.columns[c];
      stats.columns_at_segment_edges += key == edge - 1 || key == edge;
      const bool run_goes_on =
          c > device.tile_column_offsets[tile] && key == edge && device.columns[c - 1] == edge - 1;
      stats.column_runs_across_segments += run_goes_on;
    }
  }
}

// Head slot `slot` of `host`, a head of another method: its records copied as they are.
void copy_host_slot(const Plan& host, int64_t slot, PlanBuilder& adopted) {
  adopted.begin_head(std::vector<QueryRun>(host.runs.begin() + host.head_run_offsets[slot],
                                           host.runs.begin() + host.head_run_offsets[slot + 1]));
  for (int64_t tile = host.head_tile_offsets[slot]; tile < host.head_tile_offsets[slot + 1];
       ++tile) {
    adopted.begin_tile(host.tiles[tile].begin, host.tiles[tile].end,
                       host.masks[host.tile_masks[tile]]);
    for (int64_t s = host.tile_span_offsets[tile]; s < host.tile_span_offsets[tile + 1]; ++s) {
      adopted.add_span(host.spans[s].begin, host.spans[s].end);
    }
    for (int64_t s = host.tile_strided_offsets[tile]; s < host.tile_strided_offsets[tile + 1];
         ++s) {
      const StridedSpan& span = host.strided_spans[s];
      adopted.add_strided_span(span.begin, span.end, span.step);
    }
    for (int64_t c = host.tile_column_offsets[tile]; c < host.tile_column_offsets[tile + 1]; ++c) {
      adopted.add_column(host.columns[c]);
    }
  }
}

// Head slot `slot`, a vec head of `params`: each tile's selection checked (check_tile), and the
// host's records for the device's selection added to `adopted`.
void adopt_vec_slot(const Plan& device, const Plan& host, const detail::VecParams& params,
                    const PatternInputs& host_inputs, int64_t slot, PlanBuilder& adopted,
                    VecSelectionStats& stats, int& reports) {
  const PlanShape& shape = host.shape;
  const MaskPolicy mask = detail::vec_mask(params);
  detail::KeyCache cache;
  const detail::HeadOperands operands(host_inputs, shape, slot, cache);
  adopted.begin_head();
  for (int64_t tile = host.head_tile_offsets[slot]; tile < host.head_tile_offsets[slot + 1];
       ++tile) {
    // One tile per vec tile (the device builds pooling <= tile_rows only).
    const int64_t vec_tile =
        host.tiles[tile].begin / (detail::vec_tile_blocks(shape, params) * params.pooling);
    const detail::VecBlock block = detail::vec_tile(shape, params, vec_tile);
    const std::vector<int32_t> selected = tile_selected_keys(device, tile, block);
    const int64_t listed = device.tile_column_offsets[tile + 1] - device.tile_column_offsets[tile];
    stats.selected_in_columns += listed;
    stats.selected_in_spans += static_cast<int64_t>(selected.size()) - listed;
    for (int64_t s = device.tile_span_offsets[tile]; s < device.tile_span_offsets[tile + 1]; ++s) {
      const int64_t last = device.spans[s].end - 1;
      stats.spans_across_splits +=
          last / kCheckedSplitKeys != device.spans[s].begin / kCheckedSplitKeys;
    }
    for (int64_t c = device.tile_column_offsets[tile] + 1; c < device.tile_column_offsets[tile + 1];
         ++c) {
      const bool run_goes_on = device.columns[c] == device.columns[c - 1] + 1;
      stats.column_runs_across_steps += run_goes_on && device.columns[c] % kCheckedRunStepKeys == 0;
      stats.column_runs_across_words += run_goes_on && device.columns[c] % kCheckedRunWordKeys == 0;
    }
    count_column_words_per_step(device, tile, stats);
    count_segment_edges(device, tile,
                        params.causal ? std::max(block.sink_end, block.diagonal_end) : shape.kv_len,
                        stats);
    check_tile(operands, shape, params, vec_tile, selected, tile, stats, reports);
    adopted.begin_tile(host.tiles[tile].begin, host.tiles[tile].end, mask);
    detail::vec_add_tile_keys(adopted, block,
                              std::vector<int64_t>(selected.begin(), selected.end()));
  }
}

}  // namespace

std::vector<int64_t> run_segment_edges(int64_t key_end) {
  const int64_t steps = (key_end + kCheckedRunStepKeys - 1) / kCheckedRunStepKeys;
  const int64_t per_segment = (steps + kCheckedRunSegments - 1) / kCheckedRunSegments;
  std::vector<int64_t> edges;
  for (int64_t segment = 1; segment < kCheckedRunSegments; ++segment) {
    if (segment * per_segment < steps) edges.push_back(segment * per_segment * kCheckedRunStepKeys);
  }
  return edges;
}

Plan expect_vec_heads_match(const Plan& device, const Plan& host,
                            const std::vector<PatternSpec>& head_specs,
                            const PatternInputs& host_inputs, VecSelectionStats& stats) {
  const PlanShape& shape = host.shape;
  EXPECT_EQ(static_cast<int64_t>(head_specs.size()), shape.heads);
  EXPECT_EQ(device.num_tiles(), host.num_tiles());
  if (device.num_tiles() != host.num_tiles() ||
      static_cast<int64_t>(head_specs.size()) != shape.heads) {
    return host;
  }
  // The host's records for the device's selection: what the device must have written.
  PlanBuilder adopted(shape);
  int reports = 0;
  for (int64_t slot = 0; slot < shape.head_slots(); ++slot) {
    const PatternSpec& spec = head_specs[static_cast<std::size_t>(slot % shape.heads)];
    if (spec.name == "vec") {
      adopt_vec_slot(device, host, detail::vec_params(spec), host_inputs, slot, adopted, stats,
                     reports);
    } else {
      copy_host_slot(host, slot, adopted);
    }
  }
  return adopted.finish();
}

Plan expect_built_vec_heads_match(const cuda::DevicePlan& built,
                                  const std::vector<MaskPolicy>& masks, const Plan& host,
                                  const std::vector<PatternSpec>& head_specs,
                                  const PatternInputs& host_inputs, VecSelectionStats& stats) {
  const Plan device =
      cuda::download_plan(std::span<const cuda::DevicePlan>(&built, 1), {masks}, kCudaDevice);
  return expect_vec_heads_match(device, host, head_specs, host_inputs, stats);
}

std::vector<MaskPolicy> vec_build_masks(const PatternSpec& resolved, const PlanShape& shape) {
  if (shape.q_len == 0) return {};
  return {detail::vec_mask(detail::vec_params(resolved))};
}

Plan expect_vec_selection_matches(const cuda::DevicePlan& built, const Plan& host,
                                  const PatternSpec& resolved, const PatternInputs& host_inputs,
                                  VecSelectionStats& stats) {
  return expect_built_vec_heads_match(
      built, vec_build_masks(resolved, host.shape), host,
      std::vector<PatternSpec>(static_cast<std::size_t>(host.shape.heads), resolved), host_inputs,
      stats);
}

PatternSpec random_vec_base(Random& random, int64_t tile_rows) {
  constexpr std::array<int64_t, 5> kPoolings = {16, 24, 48, 64, 128};
  constexpr std::array<int64_t, 4> kGroups = {1, 3, 16, 8192};
  int64_t pooling = pick(random, kPoolings);
  while (pooling > tile_rows) pooling = pick(random, kPoolings);
  return {"vec",
          {{"pooling", pooling},
           {"group", pick(random, kGroups)},
           {"causal", random.uniform_int(0, 1)},
           {"union_tiles", random.uniform_int(0, 1)}}};
}

int64_t random_vec_alpha(Random& random, double searched_share) {
  constexpr int64_t kAlphaOne = 1000000;  // alpha_ppm of alpha 1
  // Every candidate (0), a few fixed points, alpha 1 and above it (sinks and diagonal only).
  constexpr std::array<int64_t, 7> kAlphas = {0, 1000, 100000, 300000, 900000, 1000000, 2000000};
  return random.bernoulli(searched_share) ? random.uniform_int(0, kAlphaOne)
                                          : pick(random, kAlphas);
}

PatternSpec with_alpha(PatternSpec spec, int64_t alpha_ppm) {
  spec.params["alpha_ppm"] = alpha_ppm;
  return spec;
}

}  // namespace mmsparse::test
