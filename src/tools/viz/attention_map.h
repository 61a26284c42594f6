#pragma once
// Internals of the attention pictures (include/mmsparse/tools/viz.h): how positions split into cells,
// range pooling, the causal region of a grid, and the colour scale. Shared by the pooling code,
// the renderer and the tests.

#include <cstdint>
#include <vector>

#include "mmsparse/tools/viz.h"

namespace mmsparse::viz {

// [0, length) split into `cells` nearly equal ranges: cell c is [begin(c), begin(c + 1)). Needs
// 1 <= cells <= length, so that no cell is empty.
struct CellSplit {
  int64_t length = 0;
  int64_t cells = 0;
  int64_t begin(int64_t cell) const { return cell * length / cells; }
  // The largest c with begin(c) <= position.
  int64_t cell_of(int64_t position) const { return ((position + 1) * cells - 1) / length; }
};

inline CellSplit row_split(const PooledGrid& grid) { return {grid.q_len, grid.rows}; }
inline CellSplit col_split(const PooledGrid& grid) { return {grid.kv_len, grid.cols}; }

// A zeroed grid of min(cells, q_len) × min(cells, kv_len) cells; throws naming `cells` when it is
// below 1 and naming q_len / kv_len when they are 0 (there is nothing to draw).
PooledGrid make_grid(int64_t q_len, int64_t kv_len, int64_t cells);

// Adds to counts[c] how many keys of [begin, end) lie in cell c of `keys` (counts [keys.cells]).
void add_range_counts(const CellSplit& keys, int64_t begin, int64_t end, int64_t* counts);

// Share of each cell's pairs that causal attention computes (key <= query + kv_len - q_len). Grid
// row i holds the query order[i], or position i when `order` is empty.
PooledGrid pool_causal_mask(int64_t q_len, int64_t kv_len, int64_t cells,
                            const std::vector<int64_t>& order);

// Inverse of a permutation of [0, n): result[order[i]] = i.
std::vector<int64_t> inverse_permutation(const std::vector<int64_t>& order);

struct Rgb {
  uint8_t r = 0;
  uint8_t g = 0;
  uint8_t b = 0;
  bool operator==(const Rgb&) const = default;
};

// Matplotlib's viridis at t in [0, 1] (clamped): dark violet at 0, yellow at 1. Perceptually
// uniform, so equal steps in log probability look like equal steps in colour.
Rgb viridis(double t);

// The log10 range the colour scale spans: the largest cell value at the top, and at the bottom
// the low quantile of the positive causal cells, at most kMaxDecades below the top (a few cells
// whose probabilities underflow must not stretch the scale).
struct LogScale {
  static constexpr double kMaxDecades = 8.0;
  static constexpr double kLowQuantile = 0.01;
  double low = 0.0;   // log10 of the value drawn as viridis(0)
  double high = 0.0;  // log10 of the value drawn as viridis(1)
  double position(double value) const;  // in [0, 1]; 0 for value <= 0
  static LogScale of(const PooledGrid& values, const PooledGrid& causal);
};

}  // namespace mmsparse::viz
