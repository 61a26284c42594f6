#include "methods/estimate/tile_keys.h"

#include <algorithm>
#include <tuple>

namespace mmsparse::detail {

void TileKeys::add_range(int64_t begin, int64_t end) {
  if (begin >= end) return;
  space_->for_each_original(begin, end, [&](int64_t first, int64_t last) {
    spans_.push_back({first, last});
  });
}

void TileKeys::add_lattice(int64_t begin, int64_t end, int64_t step) {
  if (begin >= end) return;
  if (step == 1) {
    add_range(begin, end);
    return;
  }
  // Each original range the compact keys map to holds the lattice shifted by the range's offset.
  int64_t compact = begin;
  space_->for_each_original(begin, end, [&](int64_t first, int64_t last) {
    const int64_t offset = first - compact;  // original = compact + offset within this range
    const int64_t first_key = compact + floor_mod(begin - compact, step);
    compact += last - first;
    if (first_key >= compact) return;
    const int64_t last_key = first_key + (compact - 1 - first_key) / step * step;
    lattices_.push_back({first_key + offset, last_key + offset + 1, step});
  });
}

void TileKeys::add_column(int64_t key) { columns_.push_back(space_->original(key)); }

// The lattice's keys outside the (sorted, merged) spans: maximal pieces between spans. A piece's
// first whole multiple of kGatherChunkKeys keys goes to pieces_, the rest to the columns.
void TileKeys::cut_lattice(const Lattice& lattice, const std::vector<IndexRange>& spans) {
  const auto emit = [&](int64_t lo, int64_t hi) {  // the lattice's keys in [lo, hi)
    const int64_t first = lo + floor_mod(lattice.begin - lo, lattice.step);
    if (first >= hi) return;
    const int64_t keys = (hi - 1 - first) / lattice.step + 1;
    const int64_t strided = keys / kGatherChunkKeys * kGatherChunkKeys;
    const int64_t rest = first + strided * lattice.step;  // the first key listed as a column
    if (strided > 0) {
      pieces_.push_back({static_cast<int32_t>(first), static_cast<int32_t>(rest - lattice.step + 1),
                         static_cast<int32_t>(lattice.step)});
    }
    for (int64_t key = rest; key < hi; key += lattice.step) columns_.push_back(key);
  };
  int64_t lo = lattice.begin;
  auto span = std::upper_bound(spans.begin(), spans.end(), lo,
                               [](int64_t key, const IndexRange& s) { return key < s.begin; });
  if (span != spans.begin() && std::prev(span)->end > lo) lo = std::prev(span)->end;
  for (; lo < lattice.end && span != spans.end() && span->begin < lattice.end; ++span) {
    emit(lo, span->begin);
    lo = std::max(lo, span->end);
  }
  emit(lo, lattice.end);
}

void TileKeys::write(PlanBuilder& builder) {
  std::sort(spans_.begin(), spans_.end(),
            [](const IndexRange& a, const IndexRange& b) { return a.begin < b.begin; });
  std::vector<IndexRange> merged;
  for (const IndexRange& span : spans_) {
    if (!merged.empty() && span.begin <= merged.back().end) {
      merged.back().end = std::max(merged.back().end, span.end);
    } else {
      merged.push_back(span);
    }
  }

  // Lattices of one step and residue merge where they overlap or touch (the next key of one is
  // the first of the other), or in kStridedSpansInRanges only where they overlap.
  const int64_t join_reach = lattice_keys_ == LatticeKeys::kStridedSpansInRanges ? 0 : 1;
  const auto lattice_order = [](const Lattice& a, const Lattice& b) {
    return std::tuple(a.step, floor_mod(a.begin, a.step), a.begin) <
           std::tuple(b.step, floor_mod(b.begin, b.step), b.begin);
  };
  std::sort(lattices_.begin(), lattices_.end(), lattice_order);
  std::vector<Lattice> joined;
  for (const Lattice& lattice : lattices_) {
    if (!joined.empty() && joined.back().step == lattice.step &&
        floor_mod(joined.back().begin - lattice.begin, lattice.step) == 0 &&
        lattice.begin <= joined.back().end - 1 + join_reach * lattice.step) {
      joined.back().end = std::max(joined.back().end, lattice.end);
    } else {
      joined.push_back(lattice);
    }
  }
  pieces_.clear();
  for (const Lattice& lattice : joined) cut_lattice(lattice, merged);
  // Pieces of different lattices that share a key (lattices of other steps or residues crossing):
  // the later one is listed as columns, which the dedup below keeps once.
  std::vector<StridedSpan> kept;
  for (const StridedSpan& piece : pieces_) {
    const bool crosses = std::any_of(kept.begin(), kept.end(), [&](const StridedSpan& other) {
      return strided_spans_share_keys(piece, other);
    });
    if (!crosses) {
      kept.push_back(piece);
      continue;
    }
    for (int64_t key = piece.begin; key < piece.end; key += piece.step) columns_.push_back(key);
  }
  std::sort(kept.begin(), kept.end(), [](const StridedSpan& a, const StridedSpan& b) {
    return std::tuple(a.begin, a.step) < std::tuple(b.begin, b.step);
  });
  const auto on_piece = [&](int64_t key) {
    return std::any_of(kept.begin(), kept.end(), [&](const StridedSpan& piece) {
      return key >= piece.begin && key < piece.end && (key - piece.begin) % piece.step == 0;
    });
  };

  std::sort(columns_.begin(), columns_.end());
  columns_.erase(std::unique(columns_.begin(), columns_.end()), columns_.end());
  for (const IndexRange& span : merged) builder.add_span(span.begin, span.end);
  for (const StridedSpan& piece : kept)
    builder.add_strided_span(piece.begin, piece.end, piece.step);
  auto span = merged.begin();
  for (int64_t column : columns_) {  // both ascending: one pass drops the columns inside spans
    while (span != merged.end() && span->end <= column) ++span;
    if ((span == merged.end() || column < span->begin) && !on_piece(column)) {
      builder.add_column(column);
    }
  }
  spans_.clear();
  lattices_.clear();
  columns_.clear();
}

}  // namespace mmsparse::detail
