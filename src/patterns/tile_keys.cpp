#include "patterns/tile_keys.h"

#include <algorithm>

namespace mmsparse::detail {

void TileKeys::add_range(int64_t begin, int64_t end) {
  if (begin >= end) return;
  space_->for_each_original(begin, end, [&](int64_t first, int64_t last) {
    spans_.push_back({first, last});
  });
}

void TileKeys::add_column(int64_t key) { columns_.push_back(space_->original(key)); }

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
  std::sort(columns_.begin(), columns_.end());
  columns_.erase(std::unique(columns_.begin(), columns_.end()), columns_.end());
  for (const IndexRange& span : merged) builder.add_span(span.begin, span.end);
  auto span = merged.begin();
  for (int64_t column : columns_) {  // both ascending: one pass drops the columns inside spans
    while (span != merged.end() && span->end <= column) ++span;
    if (span == merged.end() || column < span->begin) builder.add_column(column);
  }
  spans_.clear();
  columns_.clear();
}

}  // namespace mmsparse::detail
