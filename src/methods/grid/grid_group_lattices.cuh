#pragma once
// The grouped grid's lattice pieces (grid_group_tiles_device.cu): in one key space of a tile, the
// keys of the slash and vline lattices that lie between the tile's spans, cut range by range into
// pieces whose first whole multiple of kGatherChunkKeys keys is a strided span and the rest
// columns. Apart from the tile kernels because this is the geometry of the lines alone (the gaps
// between spans, the residues, a piece's cut and whether a key lies on a strided span); the kernels
// locate tiles, collect frontiers and mark bitmaps with it.

#include <cstdint>

#include "core/engine_chunks.h"
#include "methods/estimate/index_kernels.h"
#include "methods/estimate/key_bitmaps.cuh"
#include "methods/grid/grid_geometry.h"

namespace mmsparse::cuda::index::grouped {

// A phase's line in one space, for the rows of that phase: its last frontier. 32-bit (keys lie
// below 2^31), so that the tile's shared memory stays within the 48 KB of static shared memory.
struct PhaseLine {
  int32_t phase, frontier;
};

// A space's line keys in a tile (GridPattern::add_tile_keys' slash and vline lattices) as
// TileKeys::write writes them in LatticeKeys::kStridedSpansInRanges. In the space's compact
// coordinates the tile's spans are the prefix [0, prefix) (sink, hline) and each row's window
// [f - window, f), so the keys between spans are the gaps [max(prefix, f_prev), f - window) before
// each distinct frontier f (one gap [prefix, last) without windows). Within one original range of
// the space original keys are compact ones shifted, and only this space's spans lie there, so a
// lattice piece is one residue's keys in one gap and one range: its first whole multiple of
// kGatherChunkKeys keys is a strided span, the others are columns. Lattices of one residue (a slash
// phase and the vline phase) join into the longer one; pieces of distinct residues of one stride,
// or of different spaces (different ranges), never share a key, so none is listed as columns.
struct SpaceLattices {
  KeySpaceView view;
  int64_t stride = 0, vline_phase = 0;
  int64_t prefix = 0, window = 0, last = 0;
  const int64_t* frontiers = nullptr;  // [rows] the tile rows' frontiers, ascending
  const PhaseLine* phases = nullptr;   // [phase_count] each row phase's last frontier
  int rows = 0, phase_count = 0;
  bool slash = false, vline = false;
  bool vline_alone = false;  // the vline residue is no slash phase's (or slash lines are off)
  // Whether a piece may hold kGatherChunkKeys keys (false: the space's ranges are all too short
  // for that at this stride, so every line key is a column and no strided span exists).
  bool strided_spans = true;

  __device__ int gaps() const { return window > 0 ? rows : 1; }
  __device__ int residues() const { return phase_count + 1; }
  // Gap g's compact keys [begin, end); false when it has none.
  __device__ bool gap(int g, int64_t& begin, int64_t& end) const {
    if (window == 0) {
      begin = prefix;
      end = last;
      return begin < end;
    }
    const int64_t frontier = frontiers[g];
    const int64_t before = g > 0 ? frontiers[g - 1] : 0;
    if (frontier < 1 || (g > 0 && frontier == before)) return false;
    begin = grid::max64(prefix, before);
    end = frontier - window;
    return begin < end;
  }
  // Residue j: its phase and the end of its joined lattice; false when there is none.
  __device__ bool residue(int j, int64_t& phase, int64_t& end) const {
    if (j < phase_count) {
      if (!slash) return false;
      phase = phases[j].phase;
      end = vline && phase == vline_phase ? last : phases[j].frontier;
      return true;
    }
    if (!vline_alone) return false;
    phase = vline_phase;
    end = last;
    return true;
  }
};

// One residue's keys first + i·step (i < count) in a piece; the first `strided` of them form the
// strided span, the others are columns. `offset` maps them to original positions.
struct LatticeCut {
  int64_t first = 0, count = 0, strided = 0, offset = 0;
};

// The piece of residue `phase` in the compact keys [low, high) of one range (count 0: none), given
// low's residue mod the stride. Keys, phases and strides lie below 2^31 (plan records are 32-bit),
// low >= 0 and phases lie in [0, stride), so 32-bit unsigned arithmetic is exact here: this runs
// once per (residue, range), and 64-bit divisions made it the conversion's main cost.
__device__ inline LatticeCut cut_piece_at(const SpaceLattices& l, int64_t phase, int64_t low,
                                          uint32_t low_residue, int64_t high, int64_t offset) {
  LatticeCut piece;
  const auto stride = static_cast<uint32_t>(l.stride);
  const auto residue = static_cast<uint32_t>(phase);
  piece.first =
      low + (residue >= low_residue ? residue - low_residue : residue + stride - low_residue);
  if (piece.first >= high) return piece;
  piece.count = static_cast<uint32_t>(high - 1 - piece.first) / stride + 1;
  piece.strided = piece.count / kGatherChunkKeys * kGatherChunkKeys;
  piece.offset = offset;
  return piece;
}

__device__ inline uint32_t residue_of(int64_t key, int64_t stride) {  // key >= 0
  return static_cast<uint32_t>(key) % static_cast<uint32_t>(stride);
}

__device__ inline LatticeCut cut_piece(const SpaceLattices& l, int64_t phase, int64_t low,
                                       int64_t high, int64_t offset) {
  return cut_piece_at(l, phase, low, residue_of(low, l.stride), high, offset);
}

// Calls visit(cut) for each piece of the space's one gap (no local windows) with ranges, the
// block's threads taking (range, residue) pairs in turn: the gap crosses most ranges of the space
// (tens: a modality's segments) and a tile has up to a residue per distinct frontier (tens in a
// 2D group's other spaces), so a thread per range left most of the block idle while each busy
// thread walked every residue. The range's residue mod the stride is one 32-bit modulo per pair.
template <class Visit>
__device__ void for_each_range_piece(const SpaceLattices& l, const Visit& visit) {
  int64_t begin = 0, gap_end = 0;
  if (!l.gap(0, begin, gap_end)) return;
  const int residues = l.residues();
  // Pair (r, j) is the (r * residues + j)-th; a thread steps kThreads pairs on (a 32-bit division
  // of small numbers, not a 64-bit one per pair).
  int64_t r = static_cast<int>(threadIdx.x) / residues;
  int j = static_cast<int>(threadIdx.x) % residues;
  for (; r < l.view.ranges; j += bitmaps::kThreads, r += j / residues, j %= residues) {
    const int64_t low = grid::max64(begin, l.view.prefix[r]);
    const int64_t range_end = grid::min64(gap_end, l.view.prefix[r + 1]);
    if (low >= range_end) continue;
    int64_t phase = 0, lattice_end = 0;
    if (!l.residue(j, phase, lattice_end)) continue;
    const int64_t high = grid::min64(range_end, lattice_end);
    if (low >= high) continue;
    const LatticeCut piece = cut_piece(l, phase, low, high, l.view.begins[r] - l.view.prefix[r]);
    if (piece.count > 0) visit(piece);
  }
}

// Calls visit(cut) for each piece of every (gap, residue) pair of the space, in no fixed order
// (the callers mark bitmaps, or sort what they append).
template <class Visit>
__device__ void for_each_lattice_piece(const SpaceLattices& l, const Visit& visit) {
  if (l.view.ranges != 0 && l.gaps() == 1) {
    for_each_range_piece(l, visit);
    return;
  }
  // Otherwise the block's threads take (gap, residue) pairs in turn: with windows each gap is
  // short and crosses few ranges.
  const int residues = l.residues();
  const int64_t pairs = static_cast<int64_t>(l.gaps()) * residues;
  for (int64_t pair = threadIdx.x; pair < pairs; pair += bitmaps::kThreads) {
    int64_t begin = 0, gap_end = 0, phase = 0, lattice_end = 0;
    if (!l.gap(static_cast<int>(pair / residues), begin, gap_end) ||
        !l.residue(static_cast<int>(pair % residues), phase, lattice_end)) {
      continue;
    }
    const int64_t end = grid::min64(gap_end, lattice_end);
    if (begin >= end) continue;
    const auto cut = [&](int64_t low, int64_t high, int64_t offset) {
      const LatticeCut piece = cut_piece(l, phase, low, high, offset);
      if (piece.count > 0) visit(piece);
    };
    if (l.view.ranges == 0) {
      cut(begin, end, 0);
      continue;
    }
    for (int32_t r = l.view.range_of(begin); r < l.view.ranges && l.view.prefix[r] < end; ++r) {
      cut(grid::max64(begin, l.view.prefix[r]), grid::min64(end, l.view.prefix[r + 1]),
          l.view.begins[r] - l.view.prefix[r]);
    }
  }
}

// The space's line keys outside its strided spans as column keys of the window.
__device__ inline void mark_lattice_columns(const SpaceLattices& l, const bitmaps::Window& window) {
  for_each_lattice_piece(l, [&](const LatticeCut& piece) {
    for (int64_t i = piece.strided; i < piece.count; ++i) {
      const int64_t key = piece.first + i * l.stride + piece.offset;
      if (window.past(key)) return;
      window.mark_column(key);
    }
  });
}

// Whether original key `key` lies on one of the space's strided spans: the piece of
// for_each_lattice_piece that holds it, found for this key alone (its range, gap and residue).
__device__ inline bool on_strided_span(const SpaceLattices& l, int64_t key) {
  if (l.last < 1 || !l.strided_spans) return false;
  int64_t compact = key;  // and its range's compact keys [low, high), original = compact + offset
  int64_t low = 0, high = l.last, offset = 0;
  if (l.view.ranges != 0) {
    compact = l.view.frontier(key - 1, 0);
    if (l.view.frontier(key, 0) == compact) return false;  // not a key of the space
    const int32_t r = l.view.range_of(compact);
    low = l.view.prefix[r];
    high = l.view.prefix[r + 1];
    offset = l.view.begins[r] - low;
  }
  if (compact >= l.last) return false;
  int64_t begin = 0, end = 0;
  bool in_gap = false;
  for (int g = 0; g < l.gaps() && !in_gap; ++g) {
    in_gap = l.gap(g, begin, end) && begin <= compact && compact < end;
  }
  if (!in_gap) return false;
  // Phases lie in [0, stride), so the key is on residue j's lattice exactly when its own residue
  // is j's phase: one modulo per key, not one per residue (a tile of a 2D-boundary group has a
  // phase per distinct frontier in its other spaces, and every item sink asks).
  const int64_t key_residue = residue_of(compact, l.stride);
  for (int j = 0; j < l.residues(); ++j) {
    int64_t phase = 0, lattice_end = 0;
    if (!l.residue(j, phase, lattice_end) || key_residue != phase) continue;
    if (compact >= lattice_end) return false;  // residues are distinct: no other holds it
    const LatticeCut piece = cut_piece(l, phase, grid::max64(begin, low),
                                       grid::min64(grid::min64(end, lattice_end), high), offset);
    return (compact - piece.first) / l.stride < piece.strided;
  }
  return false;
}

}  // namespace mmsparse::cuda::index::grouped
