#pragma once
// Which keys a plan computes, row by row. materialize_mask, count_plan_pairs and the interchange
// converters all read coverage through these helpers, so the mask semantics have one definition.
// They work on key ranges, not elements, so pair counts stay cheap at long contexts; only the
// token-array restrictions (same-media, modality pairs) are evaluated key by key.

#include <algorithm>
#include <cstdint>
#include <vector>

#include "mmsparse/plan.h"

namespace mmsparse::detail {

// The token-array restrictions of `mask` for an aligned query position and a key.
inline bool tokens_allow(const Plan& plan, const MaskPolicy& mask, int64_t aligned, int64_t key) {
  if (aligned < 0) return false;  // only when kv_len < q_len: the query has no token to read
  if (mask.same_media) {
    const int32_t media = plan.token_media[aligned];
    if (media < 0 || plan.token_media[key] != media) return false;
  }
  if (mask.modality_pairs != kAllModalityPairs) {
    const uint16_t bit = modality_pair_bit(static_cast<Modality>(plan.token_modality[aligned]),
                                           static_cast<Modality>(plan.token_modality[key]));
    if ((mask.modality_pairs & bit) == 0) return false;
  }
  return true;
}

// Whether `mask` keeps the pair (query at original position `query`, key).
inline bool mask_keeps(const Plan& plan, const MaskPolicy& mask, int64_t query, int64_t key) {
  const int64_t aligned = query + plan.shape.causal_offset();
  if (mask.causal && key > aligned) return false;
  if (mask.window > 0 && key >= mask.window_sink && aligned - key >= mask.window) return false;
  return !mask.needs_token_arrays() || tokens_allow(plan, mask, aligned, key);
}

// Calls emit(begin, end) for each maximal range of keys in [begin, end) that `mask` keeps for the
// query at original position `query`. Ranges come in ascending order.
template <class Emit>
void for_each_kept_range(const Plan& plan, const MaskPolicy& mask, int64_t query, int64_t begin,
                         int64_t end, Emit&& emit) {
  const int64_t aligned = query + plan.shape.causal_offset();
  const int64_t upper = mask.causal ? std::min(end, aligned + 1) : end;
  if (begin >= upper) return;

  auto emit_piece = [&](int64_t lo, int64_t hi) {
    if (lo >= hi) return;
    if (!mask.needs_token_arrays()) {
      emit(lo, hi);
      return;
    }
    int64_t run_begin = -1;
    for (int64_t key = lo; key < hi; ++key) {
      if (tokens_allow(plan, mask, aligned, key)) {
        if (run_begin < 0) run_begin = key;
      } else if (run_begin >= 0) {
        emit(run_begin, key);
        run_begin = -1;
      }
    }
    if (run_begin >= 0) emit(run_begin, hi);
  };

  // The window removes keys in [window_sink, window_begin); that gap splits the range in two.
  const int64_t window_begin = aligned - mask.window + 1;
  if (mask.window > 0 && window_begin > mask.window_sink) {
    emit_piece(begin, std::min(upper, mask.window_sink));
    emit_piece(std::max(begin, window_begin), upper);
  } else {
    emit_piece(begin, upper);
  }
}

// Calls emit(begin, end) for every key range tile `t` computes for the query at original position
// `query`: its spans and columns, restricted by the tile's mask. Ranges are disjoint but not
// ordered. The plan must be valid.
template <class Emit>
void for_each_tile_range(const Plan& plan, int64_t t, int64_t query, Emit&& emit) {
  const MaskPolicy& mask = plan.masks[plan.tile_masks[t]];
  for (int64_t s = plan.tile_span_offsets[t]; s < plan.tile_span_offsets[t + 1]; ++s) {
    for_each_kept_range(plan, mask, query, plan.spans[s].begin, plan.spans[s].end, emit);
  }
  for (int64_t c = plan.tile_column_offsets[t]; c < plan.tile_column_offsets[t + 1]; ++c) {
    for_each_kept_range(plan, mask, query, plan.columns[c], plan.columns[c] + 1, emit);
  }
}

// Calls visit(query, begin, end) for every key range a head slot computes: each span and column of
// each tile, restricted by the tile's mask. `query` is an original position. Ranges of one row are
// disjoint but not ordered. The plan must be valid.
template <class Visit>
void for_each_covered_range(const Plan& plan, int64_t head_slot, Visit&& visit) {
  const std::vector<int64_t> order = plan.query_order(head_slot);
  for (int64_t t = plan.head_tile_offsets[head_slot]; t < plan.head_tile_offsets[head_slot + 1];
       ++t) {
    for (int64_t i = plan.tiles[t].begin; i < plan.tiles[t].end; ++i) {
      const int64_t query = order[i];
      for_each_tile_range(plan, t, query,
                          [&](int64_t begin, int64_t end) { visit(query, begin, end); });
    }
  }
}

// For one head slot: the tile holding each original query position, -1 for rows in no tile
// (validate() guarantees tiles do not overlap, so a row has at most one). Row-at-a-time consumers
// (the CPU reference, the attention pictures) look their tile up here.
inline std::vector<int64_t> tile_of_rows(const Plan& plan, int64_t head_slot) {  // -> [q_len]
  std::vector<int64_t> tile_of(static_cast<std::size_t>(plan.shape.q_len), -1);
  const std::vector<int64_t> order = plan.query_order(head_slot);
  for (int64_t t = plan.head_tile_offsets[head_slot]; t < plan.head_tile_offsets[head_slot + 1];
       ++t) {
    for (int64_t i = plan.tiles[t].begin; i < plan.tiles[t].end; ++i) tile_of[order[i]] = t;
  }
  return tile_of;
}

}  // namespace mmsparse::detail
