// VecAttention's host builder: the CPU reference selection (TilingSelect + minS over pooled
// queries) and the plan it makes, one tile per pooled block.

#include "methods/vec/vec.h"

#include <algorithm>
#include <string>

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
          {kCausalParam, 1}};
}

void build_vec(PlanBuilder& builder, const PatternSpec& spec, const HeadContext& context) {
  const VecParams params = vec_params(spec);
  const PlanShape& shape = context.shape;
  check_pattern_inputs(kName, context.inputs, shape);
  if (context.validate_only) return;
  const HeadOperands operands(*context.inputs, shape, context.head_slot, *context.keys);
  const int64_t blocks = vec_block_count(shape, params);
  // Blocks are independent: select them in parallel, then write them in order.
  std::vector<std::vector<int64_t>> selected(static_cast<std::size_t>(blocks));
  parallel_for(blocks, 0, [&](int64_t b) {
    selected[b] = vec_select_keys(operands, vec_block(shape, params, b), params);
  });
  const MaskPolicy mask = vec_mask(params);
  builder.begin_head();
  for (int64_t b = 0; b < blocks; ++b) {
    const VecBlock block = vec_block(shape, params, b);
    // A block taller than the plan's tiles is cut into tiles that share its keys.
    for (int64_t row = block.row_begin; row < block.row_end; row += shape.tile_rows) {
      builder.begin_tile(row, std::min(block.row_end, row + shape.tile_rows), mask);
      vec_add_tile_keys(builder, block, selected[b]);
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
  return params;
}

int64_t vec_block_count(const PlanShape& shape, const VecParams& params) {
  return (shape.q_len + params.pooling - 1) / params.pooling;
}

VecBlock vec_block(const PlanShape& shape, const VecParams& params, int64_t block) {
  const auto clamp_key = [&](int64_t key) { return std::clamp<int64_t>(key, 0, shape.kv_len); };
  VecBlock result;
  result.row_begin = block * params.pooling;
  result.row_end = std::min(shape.q_len, result.row_begin + params.pooling);
  result.sink_end = clamp_key(params.pooling);
  result.diagonal_begin = clamp_key(result.row_begin + shape.causal_offset());
  result.diagonal_end = clamp_key(result.row_end + shape.causal_offset());
  // Causal: every row of the block sees the keys before its diagonal, and only those.
  result.candidate_end = params.causal ? result.diagonal_begin : shape.kv_len;
  return result;
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
       "`pooling` keys) and the block's diagonal as spans; `causal` 0 for video DiTs",
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
