#pragma once
// The keys of one query tile, gathered from one or more key spaces in their compact coordinates and
// written to the plan in original positions: spans merged where they overlap or touch, lattices
// (every step-th key, a grid's lines) as strided spans between the spans, columns unique and
// outside every span and strided span. Whatever the patterns add, no (query, key) pair is covered
// twice, and equal key sets give equal records.

#include <cstdint>
#include <vector>

#include "core/engine_chunks.h"
#include "mmsparse/plan.h"
#include "methods/estimate/estimation.h"

namespace mmsparse::detail {

// a mod b in [0, b) for b > 0, also for negative a: a lattice's residue.
inline int64_t floor_mod(int64_t a, int64_t b) { return ((a % b) + b) % b; }

// How a tile writes lattices.
//   kStridedSpans          strided spans; lattices of one step and residue join where they overlap
//                          or touch (the next key of one is the first of the other), which the GPU
//                          grid builder of boundary none/K reproduces from its closed form.
//   kStridedSpansInRanges  strided spans; lattices join only where they share a key, so a lattice
//                          of a compact key space stays one lattice per original range it crosses
//                          even where the shift across the gap happens to keep its residue: each
//                          range's pieces then follow from the tile's own data in that range,
//                          which the GPU builder of Q/2D-boundary grids finds without scanning its
//                          bitmaps (docs/index_builders.md, "Grid with a Q or 2D boundary").
enum class LatticeKeys { kStridedSpans, kStridedSpansInRanges };

class TileKeys {
 public:
  explicit TileKeys(LatticeKeys lattice_keys = LatticeKeys::kStridedSpans)
      : lattice_keys_(lattice_keys) {}
  void use_space(const KeySpace& space) { space_ = &space; }
  void add_range(int64_t begin, int64_t end);  // compact keys [begin, end) of the space in use
  // Compact keys begin, begin + step, ... below end of the space in use (step >= 1).
  void add_lattice(int64_t begin, int64_t end, int64_t step);
  void add_column(int64_t key);  // a compact key of the space in use
  void add_original_column(int64_t key) { columns_.push_back(key); }  // an original position
  // Whether the space in use maps compact keys elsewhere (one modality's keys, 2D boundary).
  bool compact_space() const { return !space_->is_identity(); }
  // Adds the gathered keys to the tile the builder began last, then forgets them. Each lattice
  // is cut by the spans into pieces; a piece's first whole multiple of kGatherChunkKeys keys is a
  // strided span, its other keys columns (pieces of one lattice that share a key with another's
  // are listed as columns).
  void write(PlanBuilder& builder);

 private:
  struct Lattice {
    int64_t begin, end, step;  // original positions; end is the last key + 1
  };
  void cut_lattice(const Lattice& lattice, const std::vector<IndexRange>& spans);

  LatticeKeys lattice_keys_;
  const KeySpace* space_ = nullptr;
  std::vector<IndexRange> spans_;  // original positions
  std::vector<Lattice> lattices_;  // original positions
  std::vector<int64_t> columns_;   // original positions
  std::vector<StridedSpan> pieces_;  // write()'s strided lattice pieces
};

}  // namespace mmsparse::detail
