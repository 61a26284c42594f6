// Validation of key orders (Plan::key_orders) and of the tiles that read through them: the
// restrictions that let a kernel position a key-ordered span's slots by one shift (plan.h), or,
// for the unmasked policy, that read no position at all.

#include <algorithm>
#include <limits>
#include <string>
#include <vector>

#include "core/plan_checks.h"
#include "mmsparse/plan.h"
#include "mmsparse/status.h"

namespace mmsparse::detail {

namespace {

// Whether a mask has no term but maybe the causal one: the policies key-ordered tiles take.
bool causal_or_unmasked(const MaskPolicy& mask) {
  return mask.window == 0 && mask.min_distance == 0 && mask.period == 0 &&
         !mask.media_bidirectional && !mask.same_media && mask.modality_pairs == kAllModalityPairs;
}

// The aligned position of the lowest row of tile t of a head slot (its query order given).
int64_t lowest_aligned_row(const Plan& plan, int64_t t, const std::vector<int64_t>& query_order) {
  int64_t lowest = std::numeric_limits<int64_t>::max();
  for (int64_t i = plan.tiles[t].begin; i < plan.tiles[t].end; ++i) {
    lowest = std::min(lowest, query_order[i]);
  }
  return lowest + plan.shape.causal_offset();
}

// One span of a key-ordered tile: inside the order, over no padding and, under a causal mask,
// strictly increasing original positions with the keys before its last consecutive run low enough
// for the span's one shift (plan.h): their computed positions reach order[r] - 1, r the run's
// first slot.
void check_key_ordered_span(const Plan& plan, const TileName& name, int32_t o,
                            const KeyOrderRuns& runs, const KeySpan& span, bool causal,
                            int64_t lowest_row) {
  const std::vector<int32_t>& order = plan.key_orders[o];
  // Formed only for a failure: validation visits every span.
  const auto what = [&] {
    return name() + " has span " + range_string(span.begin, span.end) + " of key order " +
           std::to_string(o);
  };
  if (span.begin < 0 || span.end > static_cast<int64_t>(order.size()) || span.begin >= span.end) {
    fail("spans", what() + ", expected a non-empty range inside its slots [0, " +
                      std::to_string(order.size()) + ")");
  }
  const int32_t last = span.end - 1;
  if (order[last] == kPaddingKey || runs.key_start[last] > span.begin) {
    // Found slot by slot only for the message.
    int32_t p = span.begin;
    while (order[p] != kPaddingKey) ++p;
    fail("spans", what() + " covering padding slot " + std::to_string(p));
  }
  // The unmasked policy keeps every pair: nothing reads the slots' positions.
  if (!causal) return;
  if (runs.increasing_start[last] > span.begin) {
    const int32_t p = runs.increasing_start[last];
    fail("spans", what() + " whose original positions do not strictly increase (key " +
                      std::to_string(order[p - 1]) + " at slot " + std::to_string(p - 1) +
                      ", key " + std::to_string(order[p]) + " at slot " + std::to_string(p) + ")");
  }
  const int32_t run = std::max(runs.consecutive_start[last], span.begin);
  if (run > span.begin && order[run] - 1 > lowest_row) {
    fail("spans", what() + " whose keys before its last consecutive run (slots " +
                      range_string(span.begin, run) + ") a kernel positions up to " +
                      std::to_string(order[run] - 1) + " (the run's first key - 1), above " +
                      std::to_string(lowest_row) +
                      " (the tile's lowest aligned row); expected them visible to every row");
  }
}

}  // namespace

// Entries are kPaddingKey or keys in [0, kv_len), none twice; tile_key_orders empty or one valid
// index (or kKeysInPlace) per tile. Returns each order's runs.
std::vector<KeyOrderRuns> check_key_orders(const Plan& plan) {
  const int64_t kv_len = plan.shape.kv_len;
  std::vector<KeyOrderRuns> all_runs(plan.key_orders.size());
  std::vector<uint8_t> seen;
  for (size_t o = 0; o < plan.key_orders.size(); ++o) {
    const std::vector<int32_t>& order = plan.key_orders[o];
    const std::string name = "key order " + std::to_string(o);
    if (order.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
      fail("key_orders", name + " has " + std::to_string(order.size()) +
                             " slots, expected <= 2^31 - 1 (slots are int32)");
    }
    seen.assign(static_cast<size_t>(kv_len), 0);
    KeyOrderRuns& runs = all_runs[o];
    runs.consecutive_start.resize(order.size());
    runs.increasing_start.resize(order.size());
    runs.key_start.resize(order.size());
    for (size_t p = 0; p < order.size(); ++p) {
      const int32_t key = order[p];
      const auto slot = static_cast<int32_t>(p);
      if (key == kPaddingKey) {
        runs.consecutive_start[p] = runs.increasing_start[p] = runs.key_start[p] = slot + 1;
        continue;
      }
      if (key < 0 || key >= kv_len) {
        fail("key_orders", name + " maps slot " + std::to_string(p) + " to key " +
                               std::to_string(key) +
                               ", expected kPaddingKey (-1) or a key in [0, " +
                               "kv_len = " + std::to_string(kv_len) + ")");
      }
      if (seen[key]) {
        fail("key_orders", name + " maps key " + std::to_string(key) + " twice (again at slot " +
                               std::to_string(p) + ")");
      }
      seen[key] = 1;
      const bool after_key = p > 0 && order[p - 1] != kPaddingKey;
      runs.consecutive_start[p] =
          after_key && order[p - 1] + 1 == key ? runs.consecutive_start[p - 1] : slot;
      runs.increasing_start[p] =
          after_key && order[p - 1] < key ? runs.increasing_start[p - 1] : slot;
      runs.key_start[p] = after_key ? runs.key_start[p - 1] : slot;
    }
  }
  if (plan.tile_key_orders.empty()) return all_runs;
  if (plan.tile_key_orders.size() != plan.tiles.size()) {
    throw_invalid_argument("plan.tile_key_orders",
                           std::to_string(plan.tiles.size()) + " entries (one per tile) or none",
                           std::to_string(plan.tile_key_orders.size()));
  }
  for (size_t t = 0; t < plan.tile_key_orders.size(); ++t) {
    const int32_t o = plan.tile_key_orders[t];
    if (o != kKeysInPlace && (o < 0 || o >= static_cast<int64_t>(plan.key_orders.size()))) {
      // head_tile_offsets were checked before: the head slot holding tile t.
      const auto after = std::upper_bound(plan.head_tile_offsets.begin(),
                                          plan.head_tile_offsets.end(), static_cast<int64_t>(t));
      const int64_t slot = after - plan.head_tile_offsets.begin() - 1;
      const TileName name{static_cast<int64_t>(t) - plan.head_tile_offsets[slot], slot};
      fail("tile_key_orders", name() + " refers to key order " + std::to_string(o) +
                                  ", expected kKeysInPlace (-1) or < " +
                                  std::to_string(plan.key_orders.size()) +
                                  " (the size of plan.key_orders)");
    }
  }
  return all_runs;
}

// A key-ordered tile: spans only, a plain causal mask or none at all, valid spans
// (check_key_ordered_span), pairwise disjoint.
void check_key_ordered_tile(const Plan& plan, int64_t slot, int64_t t,
                            const std::vector<KeyOrderRuns>& order_runs,
                            const std::vector<int64_t>& query_order, std::vector<KeySpan>& spans) {
  const TileName name{t - plan.head_tile_offsets[slot], slot};
  const int32_t o = plan.tile_key_orders[t];
  if (plan.tile_strided_offsets[t] != plan.tile_strided_offsets[t + 1] ||
      plan.tile_column_offsets[t] != plan.tile_column_offsets[t + 1]) {
    fail(plan.tile_column_offsets[t] != plan.tile_column_offsets[t + 1] ? "columns"
                                                                        : "strided_spans",
         name() + " reads key order " + std::to_string(o) + ": key-ordered tiles take spans only");
  }
  const MaskPolicy& mask = plan.masks[plan.tile_masks[t]];
  if (!causal_or_unmasked(mask)) {
    fail("tile_masks", name() + " reads key order " + std::to_string(o) + " with mask " +
                           std::to_string(plan.tile_masks[t]) +
                           ": key-ordered tiles take a plain causal mask or none (no window, "
                           "min_distance, period, media_bidirectional, same_media or "
                           "modality_pairs)");
  }
  const int64_t lowest_row = lowest_aligned_row(plan, t, query_order);
  spans.assign(plan.spans.begin() + plan.tile_span_offsets[t],
               plan.spans.begin() + plan.tile_span_offsets[t + 1]);
  for (const KeySpan& span : spans) {
    check_key_ordered_span(plan, name, o, order_runs[o], span, mask.causal, lowest_row);
  }
  check_spans_disjoint(spans, name, o);
}

}  // namespace mmsparse::detail
