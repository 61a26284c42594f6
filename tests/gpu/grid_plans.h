#pragma once
// The grid-like mask of the engine benchmark (query q attends key k <= q iff k < sink, or
// q - k < period, or (q - k) mod period < band) as plans that compute exactly its pairs, so that
// every tile's rows share their keys:
//
//  * `local`: identity order, causal with a window of `period` and the first `sink` keys exempt:
//    the sink and the local window, as two spans per tile.
//  * `bands`: queries grouped by phase p = q mod period (one run per phase, step period), run with
//    kv_len = q_len - period so that the causal cut keeps k <= q - period. Every earlier period j
//    contributes the band [j·period + p - band + 1, j·period + p] (minus the sink), and the cut
//    leaves row q = m·period + p exactly the bands of periods j < m. Bands are spans, or gathered
//    columns: a band of 64 keys fills half a 128-key chunk as a span, two bands fill one as
//    columns.
//
// No single plan holds both: two rows of one phase in different periods disagree on the local
// window's keys that are not in a band, and two rows of one period on the bands. The two parts
// cover disjoint pairs; merging their partial results gives the mask's attention.

#include <algorithm>
#include <cstdint>
#include <vector>

#include "mmsparse/plan.h"

namespace mmsparse::test {

struct GridMask {
  int64_t period = 1024;
  int64_t band = 64;
  int64_t sink = 128;

  bool keeps(int64_t query, int64_t key) const {
    return key <= query && (key < sink || query - key < period || (query - key) % period < band);
  }
};

struct GridPlans {
  Plan local;
  Plan bands;  // its shape's kv_len is q_len - period
};

// `shape`: q_len == kv_len, a multiple of the period and at least two periods (so that the bands
// part has keys). A phase's rows form tiles of at most tile_rows.
inline GridPlans grid_plans(const PlanShape& shape, const GridMask& grid, bool bands_as_columns) {
  const int64_t length = shape.q_len;
  GridPlans plans;

  MaskPolicy local_mask;
  local_mask.window = grid.period;
  local_mask.window_sink = grid.sink;
  PlanBuilder local(shape);
  for (int64_t head = 0; head < shape.head_slots(); ++head) {
    local.begin_head();
    for (int64_t begin = 0; begin < length; begin += shape.tile_rows) {
      const int64_t end = std::min(length, begin + shape.tile_rows);
      local.begin_tile(begin, end, local_mask);
      const int64_t window_begin = std::max<int64_t>(0, begin - grid.period + 1);
      local.add_span(0, std::min(grid.sink, window_begin));
      local.add_span(window_begin, end);
    }
  }
  plans.local = local.finish();

  PlanShape bands_shape = shape;
  bands_shape.kv_len = length - grid.period;
  const int64_t periods = length / grid.period;
  std::vector<QueryRun> order;
  for (int64_t phase = 0; phase < grid.period; ++phase) {
    order.push_back({phase, periods, grid.period});
  }
  PlanBuilder bands(bands_shape);
  for (int64_t head = 0; head < shape.head_slots(); ++head) {
    bands.begin_head(order);
    for (int64_t phase = 0; phase < grid.period; ++phase) {
      for (int64_t row = 0; row < periods; row += shape.tile_rows) {
        const int64_t begin = phase * periods + row;
        bands.begin_tile(begin, begin + std::min(shape.tile_rows, periods - row));
        // Periods 0 .. periods - 2: only rows of later periods keep a band, and there are none
        // after the last.
        for (int64_t j = 0; j + 1 < periods; ++j) {
          const int64_t band_end = j * grid.period + phase + 1;
          const int64_t band_begin = std::max(grid.sink, band_end - grid.band);
          if (!bands_as_columns) {
            bands.add_span(band_begin, band_end);
            continue;
          }
          for (int64_t key = band_begin; key < band_end; ++key) bands.add_column(key);
        }
      }
    }
  }
  plans.bands = bands.finish();
  return plans;
}

}  // namespace mmsparse::test
