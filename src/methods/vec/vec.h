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
//
// Plan tiles (`union_tiles`, default 1): when the plan's tiles are taller than a pooled block, a
// tile holds tile_rows / pooling consecutive blocks and its keys are the union of their selections
// (vec_tile): each row keeps every key its own block keeps, so recall can only rise, and pays for
// the keys its neighbours keep and it does not. The engine's query tile is then full (at head_dim
// 128 the wgmma kernel runs two 64-row warpgroups per 128-row tile: a 64-row block would leave one
// idle). The tile's diagonal is one span over its rows' diagonals. `union_tiles=0` keeps one tile
// per pooled block (a block taller than the plan's tiles is always cut into tiles sharing its
// keys).

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
  bool union_tiles = true;  // tiles of the plan's height union their pooled blocks' keys

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
// The VecBlock of query rows [row_begin, row_end) (within the shape, whole pooled blocks or the
// last partial one): sinks, the rows' diagonal, and the candidates outside both.
VecBlock vec_rows_block(const PlanShape& shape, const VecParams& params, int64_t row_begin,
                        int64_t row_end);
// Pooled blocks per plan tile: tile_rows / pooling when union_tiles and the tiles are taller than
// a block, else 1.
int64_t vec_tile_blocks(const PlanShape& shape, const VecParams& params);
// Vec tiles of the shape (a block taller than the plan's tiles counts once: vec_tile_blocks 1).
int64_t vec_tile_count(const PlanShape& shape, const VecParams& params);
// Vec tile `tile` (its blocks vec_tile_blocks * tile onwards) as a VecBlock over all its rows.
VecBlock vec_tile(const PlanShape& shape, const VecParams& params, int64_t tile);

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

// The kept keys of a vec tile, ascending: the union of its blocks' selections (`count` of them
// from `selections`, each ascending) without the keys of the tile's diagonal (a later block's
// candidates include an earlier block's diagonal; non-causal, the other way round too).
std::vector<int64_t> vec_union_keys(const VecBlock& tile, const std::vector<int64_t>* selections,
                                    int64_t count);
// Every candidate key of vec tile `tile` with the largest margin any of its blocks gives it (so
// the tile keeps it exactly when that margin >= log(alpha)), ascending keys.
std::vector<VecKeyMargin> vec_tile_key_margins(const HeadOperands& operands, const PlanShape& shape,
                                               const VecParams& params, int64_t tile);

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
