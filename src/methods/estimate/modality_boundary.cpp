// Query groups and key spaces of the inter-modality modes.

#include "methods/estimate/modality_boundary.h"

#include <algorithm>
#include <map>
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

// Item boundary: the text rows over all keys, then each media item's rows over its own tokens
// (primary) and every other key.
std::vector<QueryGroup> item_groups(const PlanShape& shape, const ModalityLayout& layout) {
  const int64_t offset = shape.causal_offset();
  std::vector<std::vector<IndexRange>> item_keys(layout.media().size());
  std::vector<IndexRange> text_rows;
  for (const Segment& segment : layout.segments()) {
    if (segment.media >= 0) {
      item_keys[static_cast<std::size_t>(segment.media)].push_back({segment.begin, segment.end});
    }
    // Query rows of the segment (keys [offset, kv_len) have queries).
    const int64_t begin = std::max(segment.begin, offset) - offset;
    const int64_t end = segment.end - offset;
    if (segment.media < 0 && begin < end) {
      if (!text_rows.empty() && text_rows.back().end == begin) {
        text_rows.back().end = end;
      } else {
        text_rows.push_back({begin, end});
      }
    }
  }
  std::vector<QueryGroup> groups;
  if (!text_rows.empty()) groups.push_back({text_rows, {KeySpace::all_keys(shape.kv_len)}, 0});
  for (const std::vector<IndexRange>& keys : item_keys) {
    QueryGroup group;
    for (const IndexRange& range : keys) {
      const int64_t begin = std::max(range.begin, offset) - offset;
      if (begin < range.end - offset) group.rows.push_back({begin, range.end - offset});
    }
    if (group.rows.empty()) continue;
    std::vector<IndexRange> others;  // the complement of the item's tokens in [0, kv_len)
    int64_t next = 0;
    for (const IndexRange& range : keys) {
      if (next < range.begin) others.push_back({next, range.begin});
      next = range.end;
    }
    if (next < shape.kv_len) others.push_back({next, shape.kv_len});
    group.key_spaces.emplace_back(keys);
    if (!others.empty()) group.key_spaces.emplace_back(std::move(others));
    group.primary = 0;
    groups.push_back(std::move(group));
  }
  return groups;
}

}  // namespace

BoundaryMode boundary_mode(const PatternSpec& spec) {
  const int64_t value = spec.params.at(kBoundaryParam);
  if (value < static_cast<int64_t>(BoundaryMode::kNone) ||
      value > static_cast<int64_t>(BoundaryMode::kItem)) {
    throw_invalid_argument(spec.name + " parameter " + kBoundaryParam,
                           "0 (none), 1 (K-boundary), 2 (Q-boundary), 3 (2D-boundary) or 4 (item "
                           "boundary)",
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
  if (mode == BoundaryMode::kItem) return item_groups(shape, *layout);
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

std::vector<int64_t> item_sink_keys(const ModalityLayout& layout, int64_t count) {
  constexpr int64_t kWholeImage = -1;  // an image's frame: the item
  std::vector<int64_t> keys;
  if (count <= 0) return keys;
  // Tokens seen so far of each (item, frame); a frame interrupted by text continues its count.
  // Walked piece by piece (a frame's tokens within one segment), not token by token: the GPU grid
  // builder plans a head several times per build, and a per-token lookup cost a millisecond each
  // time at 128K tokens.
  std::map<std::pair<int32_t, int64_t>, int64_t> seen;
  const std::vector<Segment>& segments = layout.segments();
  for (std::size_t s = 0; s < segments.size(); ++s) {
    const Segment& segment = segments[s];
    if (segment.media < 0) continue;
    const bool video = segment.modality == Modality::kVideo;
    const int64_t frame_tokens =
        video ? layout.media()[static_cast<std::size_t>(segment.media)].grid.frame_tokens()
              : segment.length();
    // The token before the segment is text where the previous segment is.
    bool after_text = s > 0 && segments[s - 1].media < 0;
    for (int64_t begin = segment.begin; begin < segment.end;) {
      const int64_t local_frame = (begin - segment.begin) / frame_tokens;
      const int64_t end = std::min(segment.end, segment.begin + (local_frame + 1) * frame_tokens);
      const int64_t frame = video ? segment.first_frame + local_frame : kWholeImage;
      int64_t& tokens = seen[{segment.media, frame}];
      if (tokens == 0 && after_text) keys.push_back(begin - 1);
      for (int64_t position = begin; position < end && tokens + (position - begin) < count;
           ++position) {
        keys.push_back(position);
      }
      tokens += end - begin;
      after_text = false;  // the next piece follows a token of this item
      begin = end;
    }
  }
  return keys;
}

}  // namespace mmsparse::detail
