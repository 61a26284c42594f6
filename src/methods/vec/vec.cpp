// VecAttention's host builder: the CPU reference selection (TilingSelect + minS over pooled
// queries) and the plan it makes: one tile per plan-height run of pooled blocks (vec.h, "Plan
// tiles"), or per pooled block.

#include "methods/vec/vec.h"

#include <algorithm>
#include <iterator>
#include <string>
#include <utility>

#include "core/parallel.h"
#include "methods/estimate/estimation.h"
#include "mmsparse/status.h"

namespace mmsparse::detail {

namespace {

constexpr char kName[] = "vec";
constexpr char kAlphaParam[] = "alpha_ppm";
constexpr char kPoolingParam[] = "pooling";
constexpr char kGroupParam[] = "group";
constexpr char kCausalParam[] = "causal";
constexpr char kUnionTilesParam[] = "union_tiles";
// The paper's settings for video understanding (§4.1): P_q = 64, G_k = 16.
constexpr int64_t kDefaultPooling = 64;
constexpr int64_t kDefaultGroupTiles = 16;
// alpha = 0.1: keep keys within ln 10 of the running maximum; a middle value of the authors'
// per-head search range [0, 0.5], which `mmsparse search` replaces per head.
constexpr int64_t kDefaultAlphaPpm = 100000;

Params vec_default_params(int64_t) {
  return {{kAlphaParam, kDefaultAlphaPpm},
          {kPoolingParam, kDefaultPooling},
          {kGroupParam, kDefaultGroupTiles},
          {kCausalParam, 1},
          {kUnionTilesParam, 1}};
}

void build_vec(PlanBuilder& builder, const PatternSpec& spec, const HeadContext& context) {
  const VecParams params = vec_params(spec);
  const PlanShape& shape = context.shape;
  check_pattern_inputs(kName, context.inputs, shape);
  if (context.validate_only) return;
  const HeadOperands operands(*context.inputs, shape, context.head_slot, *context.keys);
  const int64_t blocks = vec_block_count(shape, params);
  // Blocks are independent: select them in parallel, then write the tiles in order.
  std::vector<std::vector<int64_t>> selected(static_cast<std::size_t>(blocks));
  parallel_for(blocks, 0, [&](int64_t b) {
    selected[b] = vec_select_keys(operands, vec_block(shape, params, b), params);
  });
  const MaskPolicy mask = vec_mask(params);
  const int64_t tile_blocks = vec_tile_blocks(shape, params);
  builder.begin_head();
  for (int64_t t = 0; t < vec_tile_count(shape, params); ++t) {
    const VecBlock tile = vec_tile(shape, params, t);
    const int64_t first = t * tile_blocks;
    const std::vector<int64_t> keys =
        tile_blocks == 1
            ? selected[first]
            : vec_union_keys(tile, &selected[first], std::min(tile_blocks, blocks - first));
    // A block taller than the plan's tiles is cut into tiles that share its keys.
    for (int64_t row = tile.row_begin; row < tile.row_end; row += shape.tile_rows) {
      builder.begin_tile(row, std::min(tile.row_end, row + shape.tile_rows), mask);
      vec_add_tile_keys(builder, tile, keys);
    }
  }
}

}  // namespace

VecParams vec_params(const PatternSpec& resolved_spec) {
  VecParams params;
  params.alpha_ppm = checked_param(resolved_spec, kAlphaParam, 0);
  params.pooling = checked_param(resolved_spec, kPoolingParam, 1);
  params.group_tiles = checked_param(resolved_spec, kGroupParam, 1);
  params.causal = checked_flag(resolved_spec, kCausalParam);
  params.union_tiles = checked_flag(resolved_spec, kUnionTilesParam);
  return params;
}

int64_t vec_block_count(const PlanShape& shape, const VecParams& params) {
  return (shape.q_len + params.pooling - 1) / params.pooling;
}

VecBlock vec_block(const PlanShape& shape, const VecParams& params, int64_t block) {
  const int64_t row_begin = block * params.pooling;
  return vec_rows_block(shape, params, row_begin,
                        std::min(shape.q_len, row_begin + params.pooling));
}

VecBlock vec_rows_block(const PlanShape& shape, const VecParams& params, int64_t row_begin,
                        int64_t row_end) {
  const auto clamp_key = [&](int64_t key) { return std::clamp<int64_t>(key, 0, shape.kv_len); };
  VecBlock result;
  result.row_begin = row_begin;
  result.row_end = row_end;
  result.sink_end = clamp_key(params.pooling);
  result.diagonal_begin = clamp_key(result.row_begin + shape.causal_offset());
  result.diagonal_end = clamp_key(result.row_end + shape.causal_offset());
  // Causal: every row of the block sees the keys before its diagonal, and only those.
  result.candidate_end = params.causal ? result.diagonal_begin : shape.kv_len;
  return result;
}

int64_t vec_tile_blocks(const PlanShape& shape, const VecParams& params) {
  return params.union_tiles ? std::max<int64_t>(1, shape.tile_rows / params.pooling) : 1;
}

int64_t vec_tile_count(const PlanShape& shape, const VecParams& params) {
  const int64_t tile_blocks = vec_tile_blocks(shape, params);
  return (vec_block_count(shape, params) + tile_blocks - 1) / tile_blocks;
}

VecBlock vec_tile(const PlanShape& shape, const VecParams& params, int64_t tile) {
  const int64_t tile_rows = vec_tile_blocks(shape, params) * params.pooling;
  const int64_t row_begin = tile * tile_rows;
  return vec_rows_block(shape, params, row_begin, std::min(shape.q_len, row_begin + tile_rows));
}

std::vector<int64_t> vec_union_keys(const VecBlock& tile, const std::vector<int64_t>* selections,
                                    int64_t count) {
  std::vector<int64_t> keys;
  for (int64_t b = 0; b < count; ++b) {
    std::vector<int64_t> merged;
    merged.reserve(keys.size() + selections[b].size());
    std::set_union(keys.begin(), keys.end(), selections[b].begin(), selections[b].end(),
                   std::back_inserter(merged));
    keys = std::move(merged);
  }
  std::erase_if(keys, [&](int64_t key) { return !tile.is_candidate(key); });
  return keys;
}

std::vector<VecKeyMargin> vec_tile_key_margins(const HeadOperands& operands, const PlanShape& shape,
                                               const VecParams& params, int64_t tile) {
  const int64_t tile_blocks = vec_tile_blocks(shape, params);
  const int64_t first = tile * tile_blocks;
  const int64_t end = std::min(vec_block_count(shape, params), first + tile_blocks);
  if (end - first == 1) return vec_key_margins(operands, vec_block(shape, params, first), params);
  std::vector<VecKeyMargin> all;
  for (int64_t b = first; b < end; ++b) {
    const std::vector<VecKeyMargin> block =
        vec_key_margins(operands, vec_block(shape, params, b), params);
    all.insert(all.end(), block.begin(), block.end());
  }
  std::stable_sort(all.begin(), all.end(),
                   [](const VecKeyMargin& a, const VecKeyMargin& b) { return a.key < b.key; });
  // Per key, the largest margin; only the tile's candidates (not its diagonal).
  const VecBlock rows = vec_tile(shape, params, tile);
  std::vector<VecKeyMargin> margins;
  for (const VecKeyMargin& candidate : all) {
    if (!rows.is_candidate(candidate.key)) continue;
    if (!margins.empty() && margins.back().key == candidate.key) {
      margins.back().margin = std::max(margins.back().margin, candidate.margin);
    } else {
      margins.push_back(candidate);
    }
  }
  return margins;
}

void vec_pooled_query(const HeadOperands& operands, int64_t row_begin, int64_t row_end,
                      float* out) {
  const int64_t head_dim = operands.head_dim();
  std::vector<float> row(static_cast<std::size_t>(head_dim));
  std::fill(out, out + head_dim, 0.0f);
  for (int64_t r = row_begin; r < row_end; ++r) {
    operands.query(r, row.data());
    for (int64_t d = 0; d < head_dim; ++d) out[d] += row[d];
  }
  const auto count = static_cast<float>(row_end - row_begin);
  for (int64_t d = 0; d < head_dim; ++d) {
    out[d] = round_to_dtype(operands.query_dtype(), out[d] / count);
  }
}

std::vector<VecKeyMargin> vec_key_margins(const HeadOperands& operands, const VecBlock& block,
                                          const VecParams& params) {
  std::vector<VecKeyMargin> margins;
  if (block.candidate_end <= block.sink_end) return margins;
  const int64_t head_dim = operands.head_dim();
  std::vector<float> pooled(static_cast<std::size_t>(head_dim));
  vec_pooled_query(operands, block.row_begin, block.row_end, pooled.data());
  float scores[kVecKeyTileKeys];
  const int64_t group_keys = params.group_keys();
  for (int64_t group = block.sink_end / group_keys * group_keys; group < block.candidate_end;
       group += group_keys) {
    float running_max = -std::numeric_limits<float>::infinity();
    const int64_t group_end = std::min(group + group_keys, block.candidate_end);
    for (int64_t tile = group; tile < group_end; tile += kVecKeyTileKeys) {
      const int64_t tile_end = std::min(tile + kVecKeyTileKeys, group_end);
      for (int64_t key = tile; key < tile_end; ++key) {
        if (!block.is_candidate(key)) continue;
        scores[key - tile] =
            vec_score(pooled.data(), operands.key(key), head_dim, operands.scale());
        running_max = std::max(running_max, scores[key - tile]);
      }
      for (int64_t key = tile; key < tile_end; ++key) {
        if (block.is_candidate(key)) margins.push_back({key, scores[key - tile] - running_max});
      }
    }
  }
  return margins;
}

std::vector<int64_t> vec_select_keys(const HeadOperands& operands, const VecBlock& block,
                                     const VecParams& params) {
  const float log_alpha = params.log_alpha();
  std::vector<int64_t> kept;
  for (const VecKeyMargin& candidate : vec_key_margins(operands, block, params)) {
    if (candidate.margin >= log_alpha) kept.push_back(candidate.key);
  }
  return kept;
}

void vec_add_tile_keys(PlanBuilder& builder, const VecBlock& block,
                       const std::vector<int64_t>& selected) {
  struct KeyRun {
    int64_t begin, end;
    bool anchored;  // holds a sink or diagonal key
  };
  // Sinks, diagonal and the selected runs, by first key (sinks start at 0, selected keys are
  // neither sinks nor diagonal, so sorting by begin orders them all).
  std::vector<KeyRun> runs = {{0, block.sink_end, true},
                              {block.diagonal_begin, block.diagonal_end, true}};
  for (std::size_t i = 0; i < selected.size();) {
    std::size_t j = i + 1;
    while (j < selected.size() && selected[j] == selected[j - 1] + 1) ++j;
    runs.push_back({selected[i], selected[j - 1] + 1, false});
    i = j;
  }
  std::stable_sort(runs.begin(), runs.end(),
                   [](const KeyRun& a, const KeyRun& b) { return a.begin < b.begin; });
  const auto emit = [&](const KeyRun& run) {
    if (run.anchored || run.end - run.begin >= kVecMinSpanKeys) {
      builder.add_span(run.begin, run.end);
      return;
    }
    for (int64_t key = run.begin; key < run.end; ++key) builder.add_column(key);
  };
  // Touching or overlapping runs merge (sinks and diagonal overlap in the first blocks).
  KeyRun current{0, 0, false};
  for (const KeyRun& run : runs) {
    if (run.begin >= run.end) continue;
    if (current.end > current.begin && run.begin <= current.end) {
      current.end = std::max(current.end, run.end);
      current.anchored = current.anchored || run.anchored;
      continue;
    }
    if (current.end > current.begin) emit(current);
    current = run;
  }
  if (current.end > current.begin) emit(current);
}

MaskPolicy vec_mask(const VecParams& params) {
  MaskPolicy mask;
  mask.causal = params.causal;
  return mask;
}

bool vec_attends_causally(const PatternSpec& resolved_spec) {
  return checked_flag(resolved_spec, kCausalParam);
}

PatternEntry& vec_entry() {
  static PatternEntry entry{
      {kName,
       "VecAttention: per block of `pooling` queries, the mean query selects keys in tiles of "
       "16, `group` tiles sharing a running maximum m, keeping exp(score - m) >= alpha "
       "(`alpha_ppm` = alpha in parts per million; > 1000000 keeps none); sinks (first "
       "`pooling` keys) and the block's diagonal as spans; `causal` 0 for video DiTs; "
       "`union_tiles` 1: a tile of the plan's height holds consecutive blocks and the union of "
       "their keys, 0: one tile per block",
       "vec:alpha_ppm=100000,pooling=64", true},
      build_vec,
      vec_default_params,
      1,
      nullptr,
      nullptr,
      nullptr,
      vec_attends_causally};
  return entry;
}

}  // namespace mmsparse::detail
