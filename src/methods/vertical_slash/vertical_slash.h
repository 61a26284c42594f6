#pragma once
// Vertical-slash (MInference; MMInference App. C.3): from the last-q estimate, the `vertical` key
// columns with the largest column sums and the `slash` diagonals with the largest diagonal sums;
// the first `sink` keys and the `local` nearest diagonals are always among them (they count toward
// the budgets, as in MInference).
//
// Conversion to a tile (any key space, compact coordinates): for every run of consecutive frontiers
// [lo, hi] among the tile's rows, each diagonal d becomes the band [lo - 1 - d, hi - 1 - d], the
// union of the rows' own keys frontier - 1 - d; bands are merged; verticals outside them become
// columns. With all keys and contiguous rows that is MInference's conversion (block_offset ranges
// [end_m - d - 64, end_m - d) at any alignment, verticals outside as column_index): every row
// computes its own lines plus the other rows' slash keys it sees causally inside the bands, a
// superset of the exact lines by less than a tile width per diagonal.

#include <cstdint>
#include <vector>

#include "methods/estimate/estimation.h"
#include "methods/registry.h"
#include "mmsparse/patterns.h"

namespace mmsparse::detail {

// Slash bands narrower than this, in a modality's compact key space (2D boundary), are read as
// columns: half a key chunk, below which a span's chunk is mostly empty. Shared with the GPU
// builder, which must convert exactly as the host does.
inline constexpr int64_t kNarrowBandKeys = 64;

struct VerticalSlashLines {
  std::vector<int64_t> verticals;  // compact keys, ascending
  std::vector<int64_t> slashes;    // diagonal offsets d = frontier - 1 - key, ascending
};

// The spec's line budgets and forced lines, checked as the host builder checks them: a budget
// counts its always-kept lines, so it must hold them. Shared with the GPU index builder.
struct VerticalSlashBudgets {
  int64_t vertical = 0;
  int64_t slash = 0;
  int64_t sink = 0;
  int64_t local = 0;
};
VerticalSlashBudgets vertical_slash_budgets(const PatternSpec& resolved_spec);

// The registry entry (its device builder: vertical_slash_device_builder.cu).
PatternEntry& vertical_slash_entry();

VerticalSlashLines select_vertical_slash(const Estimate& estimate, int64_t vertical, int64_t slash,
                                         int64_t sink, int64_t local);

}  // namespace mmsparse::detail
