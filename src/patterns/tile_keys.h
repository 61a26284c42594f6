#pragma once
// The keys of one query tile, gathered from one or more key spaces in their compact coordinates and
// written to the plan in original positions: spans merged where they overlap or touch, columns
// unique and outside every span. Whatever the patterns add, no (query, key) pair is covered twice.

#include <cstdint>
#include <vector>

#include "mmsparse/plan.h"
#include "patterns/estimation.h"

namespace mmsparse::detail {

class TileKeys {
 public:
  void use_space(const KeySpace& space) { space_ = &space; }
  void add_range(int64_t begin, int64_t end);  // compact keys [begin, end) of the space in use
  void add_column(int64_t key);                // a compact key of the space in use
  // Whether the space in use maps compact keys elsewhere (one modality's keys, 2D boundary).
  bool compact_space() const { return !space_->is_identity(); }
  // Adds the gathered keys to the tile the builder began last, then forgets them.
  void write(PlanBuilder& builder);

 private:
  const KeySpace* space_ = nullptr;
  std::vector<IndexRange> spans_;  // original positions
  std::vector<int64_t> columns_;   // original positions
};

}  // namespace mmsparse::detail
