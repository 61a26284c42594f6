#pragma once
// The grid head (MMInference §3.1, Alg. 1, Table 3): evenly spaced lines of stride s and phase p,
// in the compact coordinates of a key space (with all keys: original positions; a row's coordinate
// is frontier - 1, its aligned position):
//   vline  the keys k ≡ p (mod s), for every row                       (vertical lines)
//   hline  the rows whose coordinate ≡ p (mod s) read every key          (horizontal lines)
//   slash  the keys at distances that are multiples of s: k ≡ row (mod s) (slash lines, e.g. the
//          same spatial location in every earlier video frame)
// plus the first `sink` keys and the `local` nearest keys of every row, always.
//
// Stride and phase (Alg. 1): with stride=0, every s in [kMinStride, max_stride] (at most
// 1/kMinGridLines of the estimate's keys) and every phase p is scored on the last-q estimate, the
// sink and local entries left out (always kept, they say nothing about a stride): the estimated
// attention mass on the enabled vline(p) and slash(s) lines, less kEntryCost times the mean
// eligible attention per line entry — what Alg. 1's max over the strided view compares, made
// comparable across strides by charging each stride for the entries it covers. Multiples of the
// true stride lose the lines they skip; divisors pay for lines of average attention. Ties go to
// the smaller stride, then phase. With only slash lines the phase is irrelevant and is 0; hline
// rows take the vertical phase (the paper finds grid lines "often symmetrical"). A fixed stride
// searches the phase only.
//
// Permutation (Fig. 8): rows are grouped by phase (coordinate mod s) into query runs
// start + i·s, so a tile holds rows of one phase; their slash keys are one strided key set, the
// vline keys another: gathered columns, dense for the tile (the permuted K of Fig. 8c, without
// moving memory). Hline tiles read every key as spans.
//
// Exact coverage of a row in a phase tile whose rows have frontiers f_0 < ... < f_n:
//   sink, vline, slash, hline  exactly the row's own lines (one key set per tile, trimmed
//                              causally);
//   local                      the union of the tile rows' windows [f_j - local, f_j): a row also
//                              reads the `local` keys before the same phase in each earlier frame
//                              of its tile, the window widened along the slash lines. A SUPERSET.
// A tile computes those keys for all its rows anyway (dense compute), so they only add recall, but
// they cost about tile_rows * local / 2 keys per row. Hence the grid's default local window is
// kDefaultGridLocal = 1, the diagonal: with slash lines on the rows' own positions are their slash
// keys, so the tiles read no window at all (tile_window), and without them a few keys. The
// paper's kernel (App. G) computes sink + local in a separate natural-order pass; plans of several
// passes (Plan::extra_passes, as grid-mask uses) could express that, the grid pattern does not yet.

#include <cstdint>
#include <memory>

#include "methods/estimate/dynamic_head.h"
#include "methods/estimate/estimation.h"
#include "methods/registry.h"
#include "mmsparse/patterns.h"

namespace mmsparse::detail {

// Stride 1 puts every key on one line: dense, not a grid.
inline constexpr int64_t kMinStride = 2;
// The grid's local window: the diagonal only (see the coverage note above).
inline constexpr int64_t kDefaultGridLocal = 1;
// A searched stride leaves at least this many lines in the estimate, so that a single heavy
// column (a vertical line) does not pass for a grid of one line per phase.
inline constexpr int64_t kMinGridLines = 4;
// Each line entry is charged this many times the mean eligible attention: a line pays off when it
// holds at least twice the average. The charge makes divisors of the true stride (their extra
// lines hold about the average) lose, while multiples lose the true lines they leave out.
inline constexpr double kEntryCost = 2.0;

struct GridOptions {
  int64_t stride = 0;  // 0: search
  int64_t max_stride = 0;
  bool hline = true;
  bool vline = true;
  bool slash = true;
  int64_t sink = 0;
  int64_t local = 0;
};

// The local window a phase tile reads as spans, one per row. A one-key window is the row's
// diagonal, which the row's own slash line (distance 0) holds when slash lines are on: it adds no
// key then, and as one-key spans it would cost a key chunk per row (the rows of a phase tile lie a
// stride apart), 128 chunks for ~5 of gathered line keys. The search's evidence still leaves out
// `local` keys: the option keeps its meaning there.
constexpr int64_t tile_window(const GridOptions& options) {
  return options.slash && options.local == 1 ? 0 : options.local;
}

// Whether the options fix the search's choice: one candidate stride and no line that depends on
// the phase (vline, hline). search_grid then offers a single candidate, {stride, 0}, whatever the
// estimate, so the GPU builds write those lines without estimating.
constexpr bool grid_lines_fixed(const GridOptions& options) {
  return options.stride != 0 && !options.vline && !options.hline;
}

struct GridLines {
  int64_t stride = kMinStride;
  int64_t phase = 0;
};

// The best (stride, phase). `margin` (nullable) receives the best score less the runner-up's over
// every other candidate (stride, phase), 0 on a tie and infinity without a runner-up: how clearly
// the choice stands, which is what a builder summing in another order can reproduce (the GPU
// builder's contract, docs/dynamic_patterns.md).
GridLines search_grid(const Estimate& estimate, const GridOptions& options,
                      double* margin = nullptr);

// The spec's grid parameters, checked as build_plan checks them (errors name the parameter).
GridOptions grid_options(const PatternSpec& resolved_spec);
// The grid of the given lines, e.g. to build the host plan of lines found elsewhere.
std::unique_ptr<KeyPattern> make_grid_pattern(GridLines lines, const GridOptions& options);

// The registry entry (its device builder: grid_device_builder.cu).
PatternEntry& grid_entry();

}  // namespace mmsparse::detail
