#pragma once
// VecAttention (vertical-vector sparsity; docs/vec.md): per block of `pooling` consecutive queries,
// the mean query scores every key the block may select; keys are scanned in tiles of
// kVecKeyTileKeys keys, grouped `group` tiles at a time from key 0, with a running maximum m per
// group (reset at each group, raised by each tile before the tile is filtered), and a key is kept
// when exp(score - m) >= alpha (the paper's minS filter, Eq. 3, run inside TilingSelect). Because
// m only grows within a group and restarts with the next, the kept set is a superset of the exact
// row-wise minS set: a tile early in a group is filtered against a smaller maximum, and every
// group keeps its own near-maximal keys.
//
// Always computed as key spans: the sinks (the first `pooling` keys) and the block's diagonal
// (the keys aligned with its own queries); the selection runs over the other keys the block may
// see (causal: the keys before its diagonal; non-causal: every other key). The tile's keys (sinks,
// diagonal and selected keys) are cut into maximal runs of consecutive keys: a run that holds a
// sink or diagonal key, or at least kVecMinSpanKeys keys, is one key span; the keys of the other
// runs are gathered columns, ascending (vec_add_tile_keys). The pairs are the same either way; a
// span is read by tensor copies at the dense rate where columns are gathered row by row.
//
// Arithmetic: the pooled query is the fp32 sum of the block's rows in row order divided by the row
// count, rounded to the query's dtype (bf16 or fp16 inputs: the operand of the GPU's tensor-core
// scores; fp32 inputs: unrounded); a score is the fp32 fused multiply-add chain over head_dim in
// order, from 0, times the scale; a key is kept when (score - m) >= log(alpha) in fp32,
// log(alpha) rounded once from double. The GPU builder (vec_device.h) pools bit for bit the same
// way, but its tensor cores sum a score's products in their own order: its kept set can differ
// only at keys whose margin lies within that rounding of log(alpha).
//
// GQA: each query head selects its own keys against its KV head's keys, unexpanded.

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "methods/registry.h"
#include "mmsparse/patterns.h"
#include "mmsparse/tensor.h"

namespace mmsparse::detail {

class HeadOperands;

inline constexpr int64_t kVecKeyTileKeys = 16;     // B_k: keys per tile of the scan (the paper's)
inline constexpr int64_t kVecAlphaUnit = 1000000;  // alpha_ppm: alpha in parts per million
// The shortest run of selected keys (touching neither sinks nor diagonal) that becomes a span.
// The engines compute a span in chunks of kGatherChunkKeys = 128 keys (wgmma; 64 on mma.sync),
// its last chunk whole whatever it holds, while gathered columns fill whole chunks but run at
// about half the dense rate in vec's 64-row tiles (docs/vec.md, "Spans"): a run of L <= 128 keys
// costs one chunk as a span and L / 128 / 0.53 chunks as columns, even at L ~ 68. Half a wgmma
// chunk (one whole mma.sync chunk) is the round threshold at that break-even.
inline constexpr int64_t kVecMinSpanKeys = 64;

// A resolved vec spec's parameters, checked.
struct VecParams {
  int64_t pooling = 0;      // P_q: queries per pooled block, and the sink keys
  int64_t group_tiles = 0;  // G_k: key tiles per group of the running maximum
  int64_t alpha_ppm = 0;    // alpha * 1e6: 0 keeps every key, > 1e6 none
  bool causal = true;

  // log(alpha) as the selection compares it; -inf for alpha 0.
  float log_alpha() const {
    return alpha_ppm == 0 ? -std::numeric_limits<float>::infinity()
                          : static_cast<float>(std::log(static_cast<double>(alpha_ppm) /
                                                        static_cast<double>(kVecAlphaUnit)));
  }
  int64_t group_keys() const { return group_tiles * kVecKeyTileKeys; }
};
VecParams vec_params(const PatternSpec& resolved_spec);

// One pooled block of a plan shape: its query rows and the key ranges that decide its keys.
struct VecBlock {
  int64_t row_begin = 0;
  int64_t row_end = 0;
  int64_t sink_end = 0;        // sinks: keys [0, sink_end)
  int64_t diagonal_begin = 0;  // diagonal: keys [diagonal_begin, diagonal_end)
  int64_t diagonal_end = 0;
  int64_t candidate_end = 0;  // selection candidates lie in [sink_end, candidate_end)

  bool is_candidate(int64_t key) const {
    return key >= sink_end && key < candidate_end && (key < diagonal_begin || key >= diagonal_end);
  }
};
int64_t vec_block_count(const PlanShape& shape, const VecParams& params);
VecBlock vec_block(const PlanShape& shape, const VecParams& params, int64_t block);

// The pooled query of rows [row_begin, row_end) of a head slot, rounded to the query's dtype.
// out: [head_dim]
void vec_pooled_query(const HeadOperands& operands, int64_t row_begin, int64_t row_end, float* out);
// The score of one key, with the arithmetic above. pooled, key: [head_dim]
inline float vec_score(const float* pooled, const float* key, int64_t head_dim, float scale) {
  float sum = 0.0f;
  for (int64_t d = 0; d < head_dim; ++d) sum = std::fma(pooled[d], key[d], sum);
  return sum * scale;
}
// A candidate key of a block and its margin: score - m, m the running maximum of its group when
// its tile is filtered (so the key is kept exactly when margin >= log(alpha)). Margins do not
// depend on alpha, which lets the recall curves derive every alpha's selection from one pass.
struct VecKeyMargin {
  int64_t key = 0;
  float margin = 0.0f;
};
// Every candidate key of the block with its margin, ascending keys (params.alpha_ppm is unused).
std::vector<VecKeyMargin> vec_key_margins(const HeadOperands& operands, const VecBlock& block,
                                          const VecParams& params);
// The keys TilingSelect + minS keeps for one block, ascending (the CPU reference selection): the
// candidates whose margin is at least log(alpha).
std::vector<int64_t> vec_select_keys(const HeadOperands& operands, const VecBlock& block,
                                     const VecParams& params);

// Adds one tile's keys to `builder` (a tile begun): sinks, diagonal and `selected` (ascending,
// candidates of `block`) as maximal runs of consecutive keys; runs holding a sink or diagonal
// key or at least kVecMinSpanKeys keys become spans, the others' keys columns, both ascending.
void vec_add_tile_keys(PlanBuilder& builder, const VecBlock& block,
                       const std::vector<int64_t>& selected);

// The mask policy of every tile.
MaskPolicy vec_mask(const VecParams& params);

// The registry entry (its device builder: vec_device_builder.cu).
PatternEntry& vec_entry();

}  // namespace mmsparse::detail
