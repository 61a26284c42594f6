#pragma once
// Which keys a plan computes, row by row. The mask semantics have one definition, the rule of
// core/mask_rule.h: the CPU reference and materialize_mask apply it key by key (for_each_tile_key,
// mask_keeps); count_plan_pairs, the interchange converters and the pictures read coverage as key
// ranges derived from it (for_each_kept_range), so pair counts stay cheap at long contexts. Only
// the token terms are evaluated key by key there too.

#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/mask_rule.h"
#include "mmsparse/plan.h"

namespace mmsparse::detail {

// The packed token (mask_rule.h) of position `position` of the plan's token arrays; kNoToken for a
// position before every key (a query when kv_len < q_len).
inline int32_t plan_token(const Plan& plan, int64_t position) {
  if (position < 0) return mask_rule::kNoToken;
  return mask_rule::pack_token(plan.token_media[position], plan.token_modality[position]);
}

// Whether `mask` keeps the pair (query at original position `query`, key): the rule of
// mask_rule.h on the plan's positions and tokens.
inline bool mask_keeps(const Plan& plan, const MaskPolicy& mask, int64_t query, int64_t key) {
  const int64_t aligned = query + plan.shape.causal_offset();
  if (!mask.needs_token_arrays()) {
    return mask_rule::keeps(mask, aligned, key, mask_rule::kNoToken, mask_rule::kNoToken);
  }
  return mask_rule::keeps(mask, aligned, key, plan_token(plan, aligned), plan_token(plan, key));
}

// Calls emit(lo, hi) for each maximal range of keys in [lo, hi) whose distance to `aligned` lies
// in the periodic band of `mask` (every key when it has none), in ascending order. The keys must
// not lie past `aligned` (distances >= 0; validate() makes periodic masks causal).
template <class Emit>
void for_each_band_range(const MaskPolicy& mask, int64_t aligned, int64_t lo, int64_t hi,
                         Emit&& emit) {
  if (lo >= hi) return;
  if (mask.period == 0) {
    emit(lo, hi);
    return;
  }
  // Period j's band holds distances [j·period, j·period + band), keys ascending as j falls.
  for (int64_t j = (aligned - lo) / mask.period; j >= (aligned - (hi - 1)) / mask.period; --j) {
    const int64_t nearest = aligned - j * mask.period;  // the band's key at distance j·period
    const int64_t begin = std::max(lo, nearest - mask.band + 1);
    const int64_t end = std::min(hi, nearest + 1);
    if (begin < end) emit(begin, end);
  }
}

// Calls emit(begin, end) for each maximal range of keys in [begin, end) that `mask` keeps for the
// query at original position `query`. Ranges come in ascending order.
template <class Emit>
void for_each_kept_range(const Plan& plan, const MaskPolicy& mask, int64_t query, int64_t begin,
                         int64_t end, Emit&& emit) {
  const int64_t aligned = query + plan.shape.causal_offset();
  // Keys by the rule, `positions_kept` standing for the positional verdict: as maximal runs.
  const auto emit_by_rule = [&](int64_t lo, int64_t hi, bool positions_kept) {
    const int32_t query_token = plan_token(plan, aligned);
    int64_t run_begin = -1;
    for (int64_t key = lo; key < hi; ++key) {
      const bool positions = positions_kept || mask_rule::positions_keep(mask, aligned, key);
      if (mask_rule::tokens_keep(mask, positions, query_token, plan_token(plan, key))) {
        if (run_begin < 0) run_begin = key;
      } else if (run_begin >= 0) {
        emit(run_begin, key);
        run_begin = -1;
      }
    }
    if (run_begin >= 0) emit(run_begin, hi);
  };
  // The lift reaches past every positional bound: key by key over the whole range.
  if (mask.media_bidirectional) {
    emit_by_rule(begin, end, false);
    return;
  }
  int64_t upper = mask.causal ? std::min(end, aligned + 1) : end;
  if (mask.min_distance > 0) upper = std::min(upper, aligned - mask.min_distance + 1);
  if (begin >= upper) return;

  auto emit_tokens = [&](int64_t lo, int64_t hi) {
    if (mask.needs_token_arrays()) {
      emit_by_rule(lo, hi, true);
    } else {
      emit(lo, hi);
    }
  };
  auto emit_piece = [&](int64_t lo, int64_t hi) {
    for_each_band_range(mask, aligned, lo, hi, emit_tokens);
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

// For a tile that reads through a key order: calls emit(begin, end) for each maximal run of
// consecutive original positions its spans' slots map to, span by span, in slot order. Costs a
// step per slot; the plan must be valid (no padding under a span).
template <class Emit>
void for_each_key_order_run(const Plan& plan, int64_t t, Emit&& emit) {
  const std::vector<int32_t>& order = plan.key_orders[plan.tile_key_order(t)];
  for (int64_t s = plan.tile_span_offsets[t]; s < plan.tile_span_offsets[t + 1]; ++s) {
    int64_t run_begin = order[plan.spans[s].begin];
    int64_t run_end = run_begin + 1;
    for (int64_t slot = plan.spans[s].begin + 1; slot < plan.spans[s].end; ++slot) {
      if (order[slot] != run_end) {
        emit(run_begin, run_end);
        run_begin = order[slot];
        run_end = run_begin;
      }
      ++run_end;
    }
    emit(run_begin, run_end);
  }
}

// Calls emit(begin, end) for every key range of tile `t`'s spans and columns that its mask keeps
// for the query at original position `query` (for_each_tile_range without the strided spans).
// Ranges are original positions, a key-ordered tile's mapped through its order.
template <class Emit>
void for_each_tile_span_and_column_range(const Plan& plan, int64_t t, int64_t query, Emit&& emit) {
  const MaskPolicy& mask = plan.masks[plan.tile_masks[t]];
  if (plan.tile_key_order(t) != kKeysInPlace) {  // spans only (validate())
    for_each_key_order_run(plan, t, [&](int64_t begin, int64_t end) {
      for_each_kept_range(plan, mask, query, begin, end, emit);
    });
    return;
  }
  for (int64_t s = plan.tile_span_offsets[t]; s < plan.tile_span_offsets[t + 1]; ++s) {
    for_each_kept_range(plan, mask, query, plan.spans[s].begin, plan.spans[s].end, emit);
  }
  // Columns listed as consecutive keys (runs, as the grid mask's bands are) go as one range each.
  const int64_t last = plan.tile_column_offsets[t + 1];
  for (int64_t c = plan.tile_column_offsets[t]; c < last;) {
    const int64_t begin = plan.columns[c];
    int64_t end = begin + 1;
    for (++c; c < last && plan.columns[c] == end; ++c) ++end;
    for_each_kept_range(plan, mask, query, begin, end, emit);
  }
}

// Calls emit(begin, end) for every key range tile `t` computes for the query at original position
// `query`: its spans, strided spans and columns, restricted by the tile's mask. Ranges are disjoint
// but not ordered. The plan must be valid.
template <class Emit>
void for_each_tile_range(const Plan& plan, int64_t t, int64_t query, Emit&& emit) {
  for_each_tile_span_and_column_range(plan, t, query, emit);
  const MaskPolicy& mask = plan.masks[plan.tile_masks[t]];
  for (int64_t s = plan.tile_strided_offsets[t]; s < plan.tile_strided_offsets[t + 1]; ++s) {
    const StridedSpan& lattice = plan.strided_spans[s];
    for (int64_t key = lattice.begin; key < lattice.end; key += lattice.step) {
      for_each_kept_range(plan, mask, query, key, key + 1, emit);
    }
  }
}

// Calls visit(key) for every key tile `t` lists (spans, strided spans, columns), before its mask:
// original positions, a key-ordered tile's slots mapped through its order.
template <class Visit>
void for_each_tile_key(const Plan& plan, int64_t t, Visit&& visit) {
  if (const int32_t o = plan.tile_key_order(t); o != kKeysInPlace) {  // spans only (validate())
    const std::vector<int32_t>& order = plan.key_orders[o];
    for (int64_t s = plan.tile_span_offsets[t]; s < plan.tile_span_offsets[t + 1]; ++s) {
      for (int64_t slot = plan.spans[s].begin; slot < plan.spans[s].end; ++slot) {
        visit(static_cast<int64_t>(order[slot]));
      }
    }
    return;
  }
  for (int64_t s = plan.tile_span_offsets[t]; s < plan.tile_span_offsets[t + 1]; ++s) {
    for (int64_t key = plan.spans[s].begin; key < plan.spans[s].end; ++key) visit(key);
  }
  for (int64_t s = plan.tile_strided_offsets[t]; s < plan.tile_strided_offsets[t + 1]; ++s) {
    const StridedSpan& lattice = plan.strided_spans[s];
    for (int64_t key = lattice.begin; key < lattice.end; key += lattice.step) visit(key);
  }
  for (int64_t c = plan.tile_column_offsets[t]; c < plan.tile_column_offsets[t + 1]; ++c) {
    visit(static_cast<int64_t>(plan.columns[c]));
  }
}

// Calls visit(key) for every key tile `t` computes for the query at original position `query`:
// its listed keys that the rule keeps (mask_keeps), one by one. The plan must be valid.
template <class Visit>
void for_each_tile_kept_key(const Plan& plan, int64_t t, int64_t query, Visit&& visit) {
  const MaskPolicy& mask = plan.masks[plan.tile_masks[t]];
  for_each_tile_key(plan, t, [&](int64_t key) {
    if (mask_keeps(plan, mask, query, key)) visit(key);
  });
}

// The keys of a strided span in [lo, hi).
inline int64_t strided_keys_in(const StridedSpan& lattice, int64_t lo, int64_t hi) {
  lo = std::max<int64_t>(lo, lattice.begin);
  hi = std::min<int64_t>(hi, lattice.end);
  if (lo >= hi) return 0;
  // The first key at or after lo: the span's own first key in the common call, without a division.
  const int64_t first =
      lo == lattice.begin
          ? lo
          : lattice.begin + (lo - lattice.begin + lattice.step - 1) / lattice.step * lattice.step;
  return first < hi ? (hi - 1 - first) / lattice.step + 1 : 0;
}

// The keys of a strided span that `mask` keeps for the query at original position `query`. When
// the mask reads no token arrays and its band (if any) sees every key of the span alike (a step
// that is a multiple of the band's period), the kept keys are those of one or two key intervals,
// counted without visiting them: a grid mask's band as strided spans holds hundreds of millions
// of pairs per head at 128K. Otherwise key by key.
inline int64_t count_strided_kept(const Plan& plan, const MaskPolicy& mask, int64_t query,
                                  const StridedSpan& lattice) {
  if (mask.needs_token_arrays() || (mask.period > 0 && lattice.step % mask.period != 0)) {
    int64_t kept = 0;
    for (int64_t key = lattice.begin; key < lattice.end; key += lattice.step) {
      for_each_kept_range(plan, mask, query, key, key + 1,
                          [&](int64_t begin, int64_t end) { kept += end - begin; });
    }
    return kept;
  }
  const int64_t aligned = query + plan.shape.causal_offset();
  if (mask.period > 0) {
    // Periodic masks are causal: the kept keys lie at or below `aligned` (none when the span
    // starts above it), where the distance's phase is that of the span's first key.
    const int64_t distance = aligned - lattice.begin;
    if (distance < 0 || distance % mask.period >= mask.band) return 0;
  }
  int64_t upper = mask.causal ? aligned + 1 : lattice.end;
  if (mask.min_distance > 0) upper = std::min(upper, aligned - mask.min_distance + 1);
  const int64_t window_begin = aligned - mask.window + 1;
  if (mask.window > 0 && window_begin > mask.window_sink) {
    return strided_keys_in(lattice, lattice.begin, std::min(upper, mask.window_sink)) +
           strided_keys_in(lattice, window_begin, upper);
  }
  return strided_keys_in(lattice, lattice.begin, upper);
}

// The number of pairs tile `t` computes for the query at original position `query`.
inline int64_t count_tile_pairs(const Plan& plan, int64_t t, int64_t query) {
  int64_t pairs = 0;
  for_each_tile_span_and_column_range(plan, t, query,
                                      [&](int64_t begin, int64_t end) { pairs += end - begin; });
  const MaskPolicy& mask = plan.masks[plan.tile_masks[t]];
  for (int64_t s = plan.tile_strided_offsets[t]; s < plan.tile_strided_offsets[t + 1]; ++s) {
    pairs += count_strided_kept(plan, mask, query, plan.strided_spans[s]);
  }
  return pairs;
}

// Calls visit(query, begin, end) for every key range one pass of a head slot computes: each span
// and column of each tile (a strided span's keys one by one), restricted by the tile's mask.
// `query` is an original position. Ranges of one row are disjoint but not ordered. The plan must be
// valid.
template <class Visit>
void for_each_pass_range(const Plan& pass, int64_t head_slot, Visit&& visit) {
  const std::vector<int64_t> order = pass.query_order(head_slot);
  for (int64_t t = pass.head_tile_offsets[head_slot]; t < pass.head_tile_offsets[head_slot + 1];
       ++t) {
    for (int64_t i = pass.tiles[t].begin; i < pass.tiles[t].end; ++i) {
      const int64_t query = order[i];
      for_each_tile_range(pass, t, query,
                          [&](int64_t begin, int64_t end) { visit(query, begin, end); });
    }
  }
}

// for_each_pass_range over every pass of the plan: the head slot's whole coverage. Ranges of one
// row are disjoint when the passes are (check_passes_disjoint).
template <class Visit>
void for_each_covered_range(const Plan& plan, int64_t head_slot, Visit&& visit) {
  for (int64_t p = 0; p < plan.num_passes(); ++p)
    for_each_pass_range(plan.pass(p), head_slot, visit);
}

// For one head slot of one pass: the tile holding each original query position, -1 for rows in no
// tile (validate() guarantees tiles do not overlap, so a row has at most one).
inline std::vector<int64_t> tile_of_rows(const Plan& pass, int64_t head_slot) {  // -> [q_len]
  std::vector<int64_t> tile_of(static_cast<std::size_t>(pass.shape.q_len), -1);
  const std::vector<int64_t> order = pass.query_order(head_slot);
  for (int64_t t = pass.head_tile_offsets[head_slot]; t < pass.head_tile_offsets[head_slot + 1];
       ++t) {
    for (int64_t i = pass.tiles[t].begin; i < pass.tiles[t].end; ++i) tile_of[order[i]] = t;
  }
  return tile_of;
}

// Row-at-a-time coverage over every pass (the CPU reference, needle coverage): each pass's tile
// lookup for one head slot, built once.
class RowCoverage {
 public:
  RowCoverage(const Plan& plan, int64_t head_slot) : plan_(plan) {
    for (int64_t p = 0; p < plan.num_passes(); ++p) {
      tile_of_.push_back(tile_of_rows(plan.pass(p), head_slot));
    }
  }
  // Calls emit(begin, end) for every key range the passes compute for the query at `query`.
  template <class Emit>
  void for_each_range(int64_t query, Emit&& emit) const {
    for (std::size_t p = 0; p < tile_of_.size(); ++p) {
      const int64_t t = tile_of_[p][query];
      if (t >= 0) for_each_tile_range(plan_.pass(static_cast<int64_t>(p)), t, query, emit);
    }
  }
  // Calls visit(key) for every key the passes compute for the query at `query`, by the rule
  // applied key by key (for_each_tile_kept_key): the CPU reference's definition.
  template <class Visit>
  void for_each_kept_key(int64_t query, Visit&& visit) const {
    for (std::size_t p = 0; p < tile_of_.size(); ++p) {
      const int64_t t = tile_of_[p][query];
      if (t >= 0) for_each_tile_kept_key(plan_.pass(static_cast<int64_t>(p)), t, query, visit);
    }
  }

 private:
  const Plan& plan_;
  std::vector<std::vector<int64_t>> tile_of_;  // [passes][q_len]
};

}  // namespace mmsparse::detail
