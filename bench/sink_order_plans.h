#pragma once
// The engine bench's key-order cases (synthetic): a sink-like plan, where each 64-row tile reads
// its local window and every "sink run" (kSinkRunKeys keys every kSinkStride positions, as
// images' sink keys lie scattered through a multimodal sequence) below its rows. sinks-in-place
// lists those runs in place, one short span each; sinks-ordered reads them through a key order
// that puts every sink run first, so that a tile's sinks are one contiguous span (plan.h's key
// orders): the same pairs, fewer and fuller key chunks, and a K/V copy per call.

#include <algorithm>
#include <cstdint>
#include <vector>

#include "mmsparse/plan.h"

namespace mmsparse::bench {

inline constexpr int64_t kSinkStride = 1024;
inline constexpr int64_t kSinkRunKeys = 16;
inline constexpr int64_t kSinkLocalWindow = 1024;

inline bool is_sink_key(int64_t key) { return key % kSinkStride < kSinkRunKeys; }

// The keys of one tile of rows [row_begin, row_end) (identity order, kv_len == q_len): sink keys
// below the window, and the window [max(0, row_end - kSinkLocalWindow), row_end).
inline int64_t window_begin(int64_t row_end) {
  return std::max<int64_t>(0, row_end - kSinkLocalWindow);
}

// Appends to `builder`'s open key-ordered tile the slots [begin, end) of `order` as the fewest
// spans that validate() takes for a tile whose lowest aligned row is `lowest_row`: from the end,
// a span reaches back over earlier runs while the keys before its last run would still sit at or
// below that row. The slots must hold strictly increasing keys.
inline void add_valid_spans(PlanBuilder& builder, const std::vector<int32_t>& order, int64_t begin,
                            int64_t end, int64_t lowest_row) {
  std::vector<std::pair<int64_t, int64_t>> spans;
  while (end > begin) {
    int64_t run = end - 1;
    while (run > begin && order[run - 1] + 1 == order[run]) --run;
    const int64_t first = order[run] - 1 <= lowest_row ? begin : run;
    spans.emplace_back(first, end);
    end = first;
  }
  for (auto span = spans.rbegin(); span != spans.rend(); ++span) {
    builder.add_span(span->first, span->second);
  }
}

// sinks-in-place (ordered false) or sinks-ordered (true) over `shape` (q_len == kv_len).
inline Plan sink_plan(const PlanShape& shape, bool ordered) {
  const int64_t length = shape.kv_len;
  PlanBuilder builder(shape);
  // The order: every sink key ascending, then every other key ascending.
  std::vector<int32_t> order;
  for (int64_t key = 0; key < length; ++key) {
    if (is_sink_key(key)) order.push_back(static_cast<int32_t>(key));
  }
  const auto sinks = static_cast<int64_t>(order.size());
  for (int64_t key = 0; key < length; ++key) {
    if (!is_sink_key(key)) order.push_back(static_cast<int32_t>(key));
  }
  // slot_of[key]: the key's slot in the order.
  std::vector<int64_t> slot_of(static_cast<std::size_t>(length));
  for (int64_t p = 0; p < length; ++p) slot_of[order[p]] = p;
  const int32_t index = ordered ? builder.add_key_order(order) : kKeysInPlace;
  for (int64_t head = 0; head < shape.head_slots(); ++head) {
    builder.begin_head();
    for (int64_t row = 0; row < shape.q_len; row += shape.tile_rows) {
      const int64_t row_end = std::min(shape.q_len, row + shape.tile_rows);
      const int64_t local = window_begin(row_end);
      builder.begin_tile(row, row_end, {}, index);
      if (!ordered) {
        for (int64_t run = 0; run < local; run += kSinkStride) {
          builder.add_span(run, std::min(local, run + kSinkRunKeys));
        }
        builder.add_span(local, row_end);
        continue;
      }
      // Sinks below row_end (those inside the window too), then the window's other keys.
      const int64_t sinks_below = static_cast<int64_t>(
          std::lower_bound(order.begin(), order.begin() + sinks, static_cast<int32_t>(row_end)) -
          order.begin());
      add_valid_spans(builder, order, 0, sinks_below, row);
      int64_t first = local;
      while (first < row_end && is_sink_key(first)) ++first;
      int64_t last = row_end - 1;
      while (last >= first && is_sink_key(last)) --last;
      if (first <= last) add_valid_spans(builder, order, slot_of[first], slot_of[last] + 1, row);
    }
  }
  return builder.finish();
}

}  // namespace mmsparse::bench
