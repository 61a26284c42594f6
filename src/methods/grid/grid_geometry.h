#pragma once
// The grid head's plan geometry by index arithmetic (methods/grid/grid_device.cu): a head slot's
// runs and tiles for a stride, and a phase tile's spans and columns, exactly as the host builder
// (grid.cpp, GridPattern; tile_keys.cpp) arranges and merges them for boundary none/K. Plain C++
// usable on the device and on the host, so the CPU tests check it against the host builder without
// a GPU.

#include <cstdint>

#include "core/engine_chunks.h"
#include "cuda/common/math.h"
#include "methods/grid/grid.h"
#include "mmsparse/plan.h"


namespace mmsparse::cuda::index::grid {

MMSPARSE_HOST_DEVICE inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
MMSPARSE_HOST_DEVICE inline int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }
using cuda::ceil_div;
MMSPARSE_HOST_DEVICE inline int64_t floor_div(int64_t a, int64_t b) {  // b > 0
  return a >= 0 ? a / b : -((-a + b - 1) / b);
}
MMSPARSE_HOST_DEVICE inline int64_t floor_mod(int64_t a, int64_t b) {
  return a - floor_div(a, b) * b;
}

// One query run of a head slot's order, with where its rows and tiles start.
struct GridRun {
  int64_t start, count, step;
  int64_t order_begin;  // order index of its first row
  int64_t tile_begin;   // the slot's index of its first tile
  bool sees_keys;       // false for the run of rows that precede every key
};

// A head slot's rows in GridPattern::arrange's order for one stride. The `blind` rows that see no
// key (kv_len < q_len) keep their order as the first run. The other `rows`, with coordinates
// c0, c0 + 1, ..., go phase by phase (coordinate mod stride, ascending), one run each: row
// blind + m (m < min(stride, rows)) starts the run of phase (c0 + m) mod stride, so in phase order
// the runs are m in [wrap, min(stride, rows)) then m in [0, wrap), wrap = stride - c0 mod stride.
// Run m holds quotient + 1 rows when m < remainder, else quotient (rows = quotient·stride +
// remainder). Each run is cut into tiles of tile_rows.
struct GridRows {
  int64_t stride = 0, tile_rows = 0, offset = 0;
  int64_t blind = 0, rows = 0, c0 = 0, wrap = 0, quotient = 0, remainder = 0;

  MMSPARSE_HOST_DEVICE GridRows(int64_t q_len, int64_t kv_len, int64_t tile_rows_, int64_t stride_)
      : stride(stride_), tile_rows(tile_rows_), offset(kv_len - q_len) {
    blind = min64(max64(-offset, 0), q_len);
    rows = q_len - blind;
    c0 = blind + offset;  // >= 0
    wrap = stride - c0 % stride;
    quotient = rows / stride;
    remainder = rows % stride;
  }
  MMSPARSE_HOST_DEVICE int64_t phase_runs() const { return min64(stride, rows); }
  MMSPARSE_HOST_DEVICE int64_t wrapped() const { return max64(0, phase_runs() - wrap); }
  MMSPARSE_HOST_DEVICE int64_t blind_tiles() const { return ceil_div(blind, tile_rows); }
  MMSPARSE_HOST_DEVICE int64_t runs() const { return (blind > 0 ? 1 : 0) + phase_runs(); }
  MMSPARSE_HOST_DEVICE int64_t tiles() const { return blind_tiles() + tiles_below(phase_runs()); }
  // The runs are in the identity order exactly when every run has one row and phase order is
  // offset order (no wrapped run); the host then stores no runs.
  MMSPARSE_HOST_DEVICE bool identity() const { return rows <= wrap; }

  // Rows and tiles of the runs with offsets m in [0, x), x <= stride.
  MMSPARSE_HOST_DEVICE int64_t rows_below(int64_t x) const {
    return quotient * x + min64(x, remainder);
  }
  MMSPARSE_HOST_DEVICE int64_t tiles_below(int64_t x) const {
    return min64(x, remainder) * ceil_div(quotient + 1, tile_rows) +
           max64(0, x - remainder) * ceil_div(quotient, tile_rows);
  }
  // Offset m of the phase run with ordinal o (phase order).
  MMSPARSE_HOST_DEVICE int64_t offset_of(int64_t o) const {
    return o < wrapped() ? wrap + o : o - wrapped();
  }
  // Rows (or tiles) of the phase runs before ordinal o, by `below`.
  template <class Below>
  MMSPARSE_HOST_DEVICE int64_t before(int64_t o, Below below) const {
    const int64_t first_unwrapped = min64(wrap, phase_runs());
    if (o < wrapped()) return below(wrap + o) - below(first_unwrapped);
    return below(phase_runs()) - below(first_unwrapped) + below(o - wrapped());
  }
  MMSPARSE_HOST_DEVICE GridRun phase_run(int64_t o) const {
    const int64_t m = offset_of(o);
    GridRun run;
    run.start = blind + m;
    run.count = (rows - 1 - m) / stride + 1;
    run.step = stride;
    run.order_begin = blind + before(o, [this](int64_t x) { return rows_below(x); });
    run.tile_begin = blind_tiles() + before(o, [this](int64_t x) { return tiles_below(x); });
    run.sees_keys = true;
    return run;
  }
  // Run r of the slot's list (the blind run first when there is one).
  MMSPARSE_HOST_DEVICE GridRun run(int64_t r) const {
    if (blind > 0) {
      if (r == 0) return {0, blind, 1, 0, 0, false};
      --r;
    }
    return phase_run(r);
  }
  // The run holding the slot's tile t (< tiles()).
  MMSPARSE_HOST_DEVICE GridRun run_of_tile(int64_t t) const {
    if (t < blind_tiles()) return run(0);
    const int64_t local = t - blind_tiles();
    int64_t low = 0;
    int64_t high = phase_runs();  // the answer is in [low, high)
    while (high - low > 1) {
      const int64_t middle = (low + high) / 2;
      if (before(middle, [this](int64_t x) { return tiles_below(x); }) <= local) {
        low = middle;
      } else {
        high = middle;
      }
    }
    return phase_run(low);
  }

  // Upper bounds of a slot's records for `residues` line residues (GridTile): a tile has at most
  // one strided span per residue, and its columns are at most, per residue, fewer than
  // kGatherChunkKeys keys before its first window and one key per gap between windows.
  MMSPARSE_HOST_DEVICE int64_t strided_bound(int64_t residues) const {
    return residues * tiles_below(phase_runs());
  }
  MMSPARSE_HOST_DEVICE int64_t column_bound(int64_t residues) const {
    return residues * (rows + (kGatherChunkKeys - 1) * tiles_below(phase_runs()));
  }
};

struct KeyRange {
  int64_t begin, end;
};

// The keys of one phase tile whose rows have the frontiers first + i·stride (i < rows), as
// GridPattern::add_tile_keys adds them and TileKeys::write merges them:
//   spans    [0, head) when head > 0: the sink merged with the local windows it reaches (every
//            key of an hline tile); then either one span [window_begin, last) (local >= stride:
//            consecutive windows touch) or each window i >= window_first on its own
//            ([frontier_i - local, frontier_i), local < stride: windows neither overlap nor touch);
//   strided  per line residue (the tile's phase for slash lines, the vertical phase for vertical
//            lines), the first whole multiple of kGatherChunkKeys of its keys in [head,
//            lattice_end) — the gap before the first window — as one strided span, ordered by
//            first key;
//   columns  the other keys of the residues in [head, column_end) outside those windows (a gap
//            between two windows is shorter than the stride: one key of each residue at most),
//            ascending.
struct GridTile {
  int64_t first = 0, last = 0, rows = 0, stride = 0, local = 0;
  int64_t head = 0;
  bool one_window = false;
  int64_t window_begin = 0;
  bool separate_windows = false;
  int64_t window_first = 0;
  int64_t column_end = 0;
  int64_t lattice_end = 0;
  int64_t residues[2] = {0, 0};
  int64_t residue_count = 0;

  MMSPARSE_HOST_DEVICE int64_t frontier(int64_t i) const { return first + i * stride; }
  MMSPARSE_HOST_DEVICE int64_t span_count() const {
    return (head > 0 ? 1 : 0) + (one_window ? 1 : 0) + (separate_windows ? rows - window_first : 0);
  }
  MMSPARSE_HOST_DEVICE KeyRange span(int64_t j) const {
    if (head > 0) {
      if (j == 0) return {0, head};
      --j;
    }
    if (one_window) return {window_begin, last};
    const int64_t f = frontier(window_first + j);
    return {max64(0, f - local), f};
  }
  // Whether `key` lies in a window span of its own: the first window ending after it holds it.
  MMSPARSE_HOST_DEVICE bool in_window(int64_t key) const {
    if (!separate_windows) return false;
    const int64_t i = key < first ? 0 : (key - first) / stride + 1;
    return i >= window_first && i < rows && frontier(i) - local <= key;
  }
  // Keys of the residues in [0, x).
  MMSPARSE_HOST_DEVICE int64_t below(int64_t x) const {
    int64_t count = 0;
    for (int64_t r = 0; r < residue_count; ++r) {
      if (x > residues[r]) count += (x - 1 - residues[r]) / stride + 1;
    }
    return count;
  }
  // The t-th key of the residues (ascending).
  MMSPARSE_HOST_DEVICE int64_t candidate(int64_t t) const {
    return t / residue_count * stride + residues[t % residue_count];
  }
  // Residue r's keys in [head, lattice_end): the first and how many.
  MMSPARSE_HOST_DEVICE int64_t lattice_first(int64_t r) const {
    return head + floor_mod(residues[r] - head, stride);
  }
  MMSPARSE_HOST_DEVICE int64_t lattice_keys(int64_t r) const {
    const int64_t first_key = lattice_first(r);
    return first_key < lattice_end ? (lattice_end - 1 - first_key) / stride + 1 : 0;
  }
  // Of those, the first whole multiple of kGatherChunkKeys are residue r's strided span; its keys
  // lie below strided_end(r).
  MMSPARSE_HOST_DEVICE int64_t strided_keys(int64_t r) const {
    return lattice_keys(r) / kGatherChunkKeys * kGatherChunkKeys;
  }
  MMSPARSE_HOST_DEVICE int64_t strided_end(int64_t r) const {
    return lattice_first(r) + strided_keys(r) * stride;
  }
  MMSPARSE_HOST_DEVICE int64_t strided_count() const {
    int64_t count = 0;
    for (int64_t r = 0; r < residue_count; ++r) count += strided_keys(r) > 0 ? 1 : 0;
    return count;
  }
  // The j-th strided span (j < strided_count()), ordered by first key, as {begin, end}; its step
  // is the stride.
  MMSPARSE_HOST_DEVICE KeyRange strided_span(int64_t j) const {
    int64_t order[2] = {0, 1};
    if (residue_count == 2 && lattice_first(1) < lattice_first(0)) {
      order[0] = 1;
      order[1] = 0;
    }
    for (int64_t o = 0; o < residue_count; ++o) {
      const int64_t r = order[o];
      if (strided_keys(r) == 0) continue;
      if (j-- == 0) return {lattice_first(r), strided_end(r) - stride + 1};
    }
    return {0, 0};
  }
  // The columns are the residues' keys in [column_begin(), column_end) outside the windows and
  // the strided spans (is_column).
  MMSPARSE_HOST_DEVICE int64_t column_begin() const {
    int64_t begin = column_end;
    for (int64_t r = 0; r < residue_count; ++r) begin = min64(begin, strided_end(r));
    return max64(begin, head);
  }
  // Whether residue key `key` >= head lies outside the strided spans.
  MMSPARSE_HOST_DEVICE bool is_column(int64_t key) const {
    for (int64_t r = 0; r < residue_count; ++r) {
      if (floor_mod(key - residues[r], stride) == 0) return key >= strided_end(r);
    }
    return true;
  }
};

MMSPARSE_HOST_DEVICE inline GridTile make_grid_tile(int64_t first, int64_t rows, int64_t stride,
                                                    int64_t phase, int64_t vertical_phase,
                                                    const detail::GridOptions& options) {
  GridTile tile;
  tile.first = first;
  tile.rows = rows;
  tile.stride = stride;
  tile.local = detail::tile_window(options);
  tile.last = tile.frontier(rows - 1);
  if (options.slash) tile.residues[tile.residue_count++] = phase;
  if (options.vline && !(options.slash && vertical_phase == phase)) {
    tile.residues[tile.residue_count++] = vertical_phase;
  }
  if (tile.residue_count == 2 && tile.residues[1] < tile.residues[0]) {
    const int64_t swapped = tile.residues[0];
    tile.residues[0] = tile.residues[1];
    tile.residues[1] = swapped;
  }
  tile.column_end = tile.last;
  if (options.hline && phase == vertical_phase) {
    tile.head = tile.last;
    tile.lattice_end = tile.last;
    return tile;
  }
  const int64_t sink_end = min64(options.sink, tile.last);
  if (tile.local == 0) {
    tile.head = sink_end;
  } else if (tile.local >= stride) {
    const int64_t begin = max64(0, first - tile.local);
    if (sink_end > 0 && begin <= sink_end) {
      tile.head = tile.last;
    } else {
      tile.head = sink_end;
      tile.one_window = true;
      tile.window_begin = begin;
      tile.column_end = begin;
    }
  } else {
    // Window i joins the sink span when it begins at or before the sink's end; its end then
    // stays below the next window's begin.
    tile.separate_windows = true;
    const int64_t absorbed =
        sink_end > 0 ? min64(max64(floor_div(sink_end + tile.local - first, stride) + 1, 0), rows)
                     : 0;
    tile.window_first = absorbed;
    tile.head = absorbed > 0 ? max64(sink_end, tile.frontier(absorbed - 1)) : sink_end;
  }
  // The first separate window cuts the residues' keys; otherwise none lies between head and
  // column_end.
  tile.lattice_end = tile.separate_windows && tile.window_first < rows
                         ? max64(tile.head, tile.frontier(tile.window_first) - tile.local)
                         : tile.column_end;
  return tile;
}

// Where tile `position` of a head slot lies, for the slot's lines: its rows as order indices and,
// unless its rows see no key, its keys.
struct TileSite {
  int64_t begin = 0, end = 0;  // order indices
  bool sees_keys = false;
  GridTile keys;
};

MMSPARSE_HOST_DEVICE inline TileSite locate_tile(const GridRows& rows, int64_t position,
                                                 const detail::GridLines& lines,
                                                 const detail::GridOptions& options) {
  TileSite site;
  const GridRun run = rows.run_of_tile(position);
  const int64_t first_row = (position - run.tile_begin) * rows.tile_rows;
  const int64_t tile_rows = min64(rows.tile_rows, run.count - first_row);
  site.begin = run.order_begin + first_row;
  site.end = site.begin + tile_rows;
  site.sees_keys = run.sees_keys;
  if (run.sees_keys) {
    // Row start + i·stride has frontier start + i·stride + offset + 1, coordinate one less.
    const int64_t first = run.start + first_row * run.step + rows.offset + 1;
    site.keys = make_grid_tile(first, tile_rows, lines.stride, (first - 1) % lines.stride,
                               lines.phase, options);
  }
  return site;
}

}  // namespace mmsparse::cuda::index::grid
