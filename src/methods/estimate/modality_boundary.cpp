// Query groups and key spaces of the inter-modality modes.

#include "methods/estimate/modality_boundary.h"

#include <algorithm>
#include <string>
#include <utility>

#include "mmsparse/status.h"

namespace mmsparse::detail {

namespace {

// Maximal runs of equal entries of `types` inside [begin, end), shifted by -shift, per modality.
std::vector<std::vector<IndexRange>> ranges_by_modality(const std::vector<uint8_t>& types,
                                                        int64_t begin, int64_t end, int64_t shift) {
  std::vector<std::vector<IndexRange>> ranges(kNumModalities);
  for (int64_t run = begin; run < end;) {
    int64_t run_end = run + 1;
    while (run_end < end && types[run_end] == types[run]) ++run_end;
    ranges[types[run]].push_back({run - shift, run_end - shift});
    run = run_end;
  }
  return ranges;
}

void check_layout(const PatternSpec& spec, BoundaryMode mode, const PlanShape& shape,
                  const ModalityLayout* layout) {
  const std::string parameter = spec.name + " parameter " + kBoundaryParam;
  const std::string value = std::to_string(static_cast<int64_t>(mode));
  if (layout == nullptr) {
    throw_invalid_argument(parameter, "a modality layout for boundary " + value, "none");
  }
  if (layout->length() != shape.kv_len) {
    throw_invalid_argument(parameter,
                           "a layout of kv_len = " + std::to_string(shape.kv_len) + " tokens",
                           std::to_string(layout->length()));
  }
  if (shape.kv_len < shape.q_len) {
    throw_invalid_argument(
        parameter, "kv_len >= q_len for boundary " + value + " (every query has a token)",
        "kv_len " + std::to_string(shape.kv_len) + " < q_len " + std::to_string(shape.q_len));
  }
}

}  // namespace

BoundaryMode boundary_mode(const PatternSpec& spec) {
  const int64_t value = spec.params.at(kBoundaryParam);
  if (value < static_cast<int64_t>(BoundaryMode::kNone) ||
      value > static_cast<int64_t>(BoundaryMode::kTwoD)) {
    throw_invalid_argument(spec.name + " parameter " + kBoundaryParam,
                           "0 (none), 1 (K-boundary), 2 (Q-boundary) or 3 (2D-boundary)",
                           std::to_string(value));
  }
  return static_cast<BoundaryMode>(value);
}

int64_t QueryGroup::row_count() const {
  int64_t count = 0;
  for (const IndexRange& range : rows) count += range.end - range.begin;
  return count;
}

std::vector<int64_t> QueryGroup::last_rows(int64_t count) const {
  std::vector<int64_t> last;
  for (auto range = rows.rbegin(); range != rows.rend() && count > 0; ++range) {
    for (int64_t row = range->end - 1; row >= range->begin && count > 0; --row, --count) {
      last.push_back(row);
    }
  }
  std::reverse(last.begin(), last.end());
  return last;
}

std::vector<QueryGroup> query_groups(const PatternSpec& spec, const PlanShape& shape,
                                     const ModalityLayout* layout) {
  const BoundaryMode mode = boundary_mode(spec);
  if (mode == BoundaryMode::kNone || mode == BoundaryMode::kKey) {
    QueryGroup all{{}, {KeySpace::all_keys(shape.kv_len)}, 0};
    if (shape.q_len > 0) all.rows.push_back({0, shape.q_len});
    return {all};
  }
  check_layout(spec, mode, shape, layout);
  const std::vector<uint8_t> types = layout->token_types();
  const int64_t offset = shape.causal_offset();
  const auto query_ranges = ranges_by_modality(types, offset, shape.kv_len, offset);
  const auto key_ranges = ranges_by_modality(types, 0, shape.kv_len, 0);
  std::vector<QueryGroup> groups;
  for (int modality = 0; modality < kNumModalities; ++modality) {
    if (query_ranges[modality].empty()) continue;
    QueryGroup group{query_ranges[modality], {}, 0};
    if (mode == BoundaryMode::kQuery) {
      group.key_spaces.push_back(KeySpace::all_keys(shape.kv_len));
    } else {
      for (int key_modality = 0; key_modality < kNumModalities; ++key_modality) {
        if (key_ranges[key_modality].empty()) continue;
        if (key_modality == modality) group.primary = group.key_spaces.size();
        group.key_spaces.emplace_back(key_ranges[key_modality]);
      }
    }
    groups.push_back(std::move(group));
  }
  return groups;
}

}  // namespace mmsparse::detail
