// BlindSight's template masks as plan builders (blindsight.h, docs/blindsight.md).

#include "methods/blindsight/blindsight.h"

#include <algorithm>
#include <array>
#include <string>
#include <vector>

#include "core/engine_chunks.h"
#include "methods/blindsight/blindsight_order.h"
#include "mmsparse/patterns.h"
#include "mmsparse/status.h"

namespace mmsparse::detail {

namespace {

// The paper's sink: 10% of each image's tokens, at its start (§6.1).
constexpr int64_t kDefaultSinkPercent = 10;
constexpr int64_t kWholeImagePercent = 100;
const std::string kSinkPercentParam = "sink_percent";
const std::string kSinksList = "sinks";
const std::string kBidirectionalParam = "bidirectional";

// Consecutive positions as ranges.
std::vector<KeyRange> runs_of(const std::vector<int64_t>& ascending_positions) {
  std::vector<KeyRange> runs;
  for (int64_t position : ascending_positions) {
    if (!runs.empty() && runs.back().end == position) {
      ++runs.back().end;
    } else {
      runs.push_back({position, position + 1});
    }
  }
  return runs;
}

// Position of the index-th token of an image whose tokens are `segments`.
int64_t image_token(const std::vector<KeyRange>& segments, int64_t index) {
  for (const KeyRange& segment : segments) {
    if (index < segment.end - segment.begin) return segment.begin + index;
    index -= segment.end - segment.begin;
  }
  return -1;  // callers check index < the image's tokens
}

// The sink offsets inside an image of `tokens` tokens: the list when given (checked against the
// image), else the first sink_percent%, rounded up so that every image has a sink.
std::vector<int64_t> sink_offsets(const PatternSpec& spec, int64_t image, int64_t tokens) {
  const std::vector<int64_t>& listed = spec.lists.at(kSinksList);
  if (!listed.empty()) {
    if (listed.back() >= tokens) {
      throw_invalid_argument(spec.name + " list " + kSinksList,
                             "offsets below every image's length (image " + std::to_string(image) +
                                 " has " + std::to_string(tokens) + " tokens)",
                             std::to_string(listed.back()));
    }
    return listed;
  }
  const int64_t percent = spec.params.at(kSinkPercentParam);
  const int64_t count = (tokens * percent + kWholeImagePercent - 1) / kWholeImagePercent;
  std::vector<int64_t> offsets(static_cast<std::size_t>(count));
  for (int64_t i = 0; i < count; ++i) offsets[i] = i;
  return offsets;
}

void check_sink_params(const PatternSpec& spec) {
  const int64_t percent = checked_param(spec, kSinkPercentParam, 1);
  if (percent > kWholeImagePercent) {
    throw_invalid_argument(spec.name + " parameter " + kSinkPercentParam, "1 to 100",
                           std::to_string(percent));
  }
  const std::vector<int64_t>& listed = spec.lists.at(kSinksList);
  for (std::size_t i = 0; i < listed.size(); ++i) {
    if (listed[i] < 0 || (i > 0 && listed[i] <= listed[i - 1])) {
      throw_invalid_argument(spec.name + " list " + kSinksList,
                             "ascending distinct offsets >= 0 inside each image", spec.to_string());
    }
  }
}

}  // namespace

ImageLayout read_layout(const ModalityLayout& layout, const PatternSpec& spec,
                        BlindSightMask mask) {
  ImageLayout images;
  images.token_media = layout.token_media();
  const auto media_count = static_cast<std::size_t>(layout.media().size());
  images.segments.resize(media_count);
  images.sinks.resize(media_count);
  for (const Segment& segment : layout.segments()) {
    if (segment.media >= 0) images.segments[segment.media].push_back({segment.begin, segment.end});
  }
  std::vector<uint8_t> shared(images.token_media.size(), 0);
  for (std::size_t i = 0; i < shared.size(); ++i) shared[i] = images.token_media[i] < 0;
  if (uses_sinks(mask)) {
    for (std::size_t image = 0; image < media_count; ++image) {
      const std::vector<KeyRange>& segments = images.segments[image];
      int64_t tokens = 0;
      for (const KeyRange& segment : segments) tokens += segment.end - segment.begin;
      std::vector<int64_t> positions;
      for (int64_t offset : sink_offsets(spec, static_cast<int64_t>(image), tokens)) {
        positions.push_back(image_token(segments, offset));
        shared[positions.back()] = 1;
      }
      images.sinks[image] = runs_of(positions);
    }
  }
  std::vector<int64_t> shared_positions;
  for (std::size_t i = 0; i < shared.size(); ++i) {
    if (shared[i] != 0) shared_positions.push_back(static_cast<int64_t>(i));
  }
  images.shared = runs_of(shared_positions);
  return images;
}

std::vector<QueryRun> images_then_text_order(std::span<const int32_t> token_media,
                                             const PlanShape& shape) {
  std::vector<QueryRun> order;
  const auto append = [&](int64_t row) {
    if (!order.empty() && order.back().start + order.back().count == row) {
      ++order.back().count;
    } else {
      order.push_back({row, 1, 1});
    }
  };
  const int64_t offset = shape.causal_offset();
  for (int64_t row = 0; row < shape.q_len; ++row) {
    if (token_media[row + offset] >= 0) append(row);
  }
  for (int64_t row = 0; row < shape.q_len; ++row) {
    if (token_media[row + offset] < 0) append(row);
  }
  if (order.size() == 1) order.clear();  // one run from row 0: the identity
  return order;
}

namespace {

// Sorts and merges the ranges into runs and lists them so that key chunks are full. A run left of
// every row of the tile (`first` is its first row's aligned position), such as an earlier image's
// sink with the text before it, is a span of whole chunks and its remainder columns; a shorter run
// is all columns; the engines pack a tile's columns into full chunks, so every chunk of such runs
// is full but the tile's last column chunk: the paper's sink packing (App. L, Fig. 18) without
// permuting K and V. A run reaching the diagonal stays a span (its last chunk is masked anyway).
void add_key_runs(PlanBuilder& builder, std::vector<KeyRange>& ranges, int64_t first) {
  std::sort(ranges.begin(), ranges.end(),
            [](const KeyRange& a, const KeyRange& b) { return a.begin < b.begin; });
  std::vector<KeyRange> merged;
  for (const KeyRange& range : ranges) {
    if (!merged.empty() && range.begin <= merged.back().end) {
      merged.back().end = std::max(merged.back().end, range.end);
    } else {
      merged.push_back(range);
    }
  }
  for (const KeyRange& run : merged) {
    const int64_t length = run.end - run.begin;
    int64_t span_end = run.begin;
    if (length >= kGatherChunkKeys) {
      span_end =
          run.end <= first ? run.begin + length / kGatherChunkKeys * kGatherChunkKeys : run.end;
    }
    builder.add_span(run.begin, span_end);  // ignores an empty span
    for (int64_t key = span_end; key < run.end; ++key) builder.add_column(key);
  }
}

// The key ranges (unsorted, may overlap) of a tile of image `image` whose last row is at aligned
// position `last`.
void image_key_ranges(const ImageLayout& images, int32_t image, int64_t last, BlindSightMask mask,
                      bool bidirectional, std::vector<KeyRange>& ranges) {
  ranges.clear();
  for (const KeyRange& run : images.shared) {
    if (run.begin > last) break;
    ranges.push_back({run.begin, std::min(run.end, last + 1)});
  }
  // Past the last row only bidirectional attention inside the image reaches.
  const int64_t own_limit =
      bidirectional ? static_cast<int64_t>(images.token_media.size()) : last + 1;
  const std::vector<KeyRange>& own =
      uses_intra(mask) ? images.segments[image] : images.sinks[image];
  for (const KeyRange& range : own) {
    const int64_t end = std::min(range.end, own_limit);
    if (range.begin < end) ranges.push_back({range.begin, end});
  }
}

}  // namespace

bool check_blindsight_head(const PatternSpec& spec, const HeadContext& context) {
  const PlanShape& shape = context.shape;
  if (context.layout != nullptr) {
    if (context.layout->length() != shape.kv_len) {
      throw_invalid_argument(spec.name + " layout",
                             "length kv_len = " + std::to_string(shape.kv_len),
                             std::to_string(context.layout->length()));
    }
    if (shape.q_len > shape.kv_len) {
      throw_invalid_argument(spec.name + " q_len", "<= kv_len = " + std::to_string(shape.kv_len),
                             std::to_string(shape.q_len));
    }
  }
  const bool bidirectional = checked_flag(spec, kBidirectionalParam);
  if (uses_sinks(blindsight_mask_of(spec))) check_sink_params(spec);
  (void)permutes_keys(spec, context.layout);  // checks permute
  return bidirectional;
}

bool permutes_keys(const PatternSpec& spec, const ModalityLayout* layout) {
  const auto found = spec.params.find(kPermuteParam);
  if (found == spec.params.end()) return false;  // blindsight-dense
  const int64_t permute = found->second;
  if (permute != kPermuteDefault && permute != kKeepInPlace && permute != kPermuteAlways) {
    throw_invalid_argument(spec.name + " parameter " + kPermuteParam,
                           "-1 (key order, the default), 0 (in place) or 1 (key order)",
                           std::to_string(permute));
  }
  const bool images = layout != nullptr && !layout->media().empty();
  return images && permute != kKeepInPlace;
}

BlindSightMask blindsight_mask_of(const PatternSpec& resolved_spec) {
  for (BlindSightMask mask : kBlindSightMasks) {
    if (is_spec_of(resolved_spec, blindsight_entry(mask))) return mask;
  }
  throw_invalid_argument("BlindSight spec", "one of the blindsight-* templates",
                         resolved_spec.to_string());
}

namespace {

// Causal tiles of tile_rows over [first, last), each reading every key up to its diagonal.
void append_causal_tiles(PlanBuilder& builder, const PlanShape& shape, int64_t first,
                         int64_t last) {
  for (int64_t begin = first; begin < last; begin += shape.tile_rows) {
    const int64_t end = std::min(last, begin + shape.tile_rows);
    builder.begin_tile(begin, end);
    builder.add_span(0, std::clamp<int64_t>(end + shape.causal_offset(), 0, shape.kv_len));
  }
}

// The model's own mask: causal, and with bidirectional images every key of a row's image too.
void build_dense(PlanBuilder& builder, const PatternSpec& spec, const HeadContext& context) {
  const bool bidirectional = check_blindsight_head(spec, context);
  const PlanShape& shape = context.shape;
  builder.begin_head();
  if (!bidirectional || context.layout == nullptr || context.layout->media().empty()) {
    append_causal_tiles(builder, shape, 0, shape.q_len);
    return;
  }
  builder.attach_layout(*context.layout);
  const std::vector<int32_t> token_media = context.layout->token_media();
  std::vector<int64_t> image_end(context.layout->media().size(), 0);
  for (const Segment& segment : context.layout->segments()) {
    if (segment.media >= 0) image_end[segment.media] = segment.end;
  }
  const MaskPolicy lifted{.causal = true, .media_bidirectional = true};
  for (int64_t begin = 0; begin < shape.q_len; begin += shape.tile_rows) {
    const int64_t end = std::min(shape.q_len, begin + shape.tile_rows);
    int64_t keys_end = end + shape.causal_offset();
    bool has_image = false;
    for (int64_t row = begin; row < end; ++row) {
      const int32_t image = token_media[row + shape.causal_offset()];
      if (image < 0) continue;
      has_image = true;
      keys_end = std::max(keys_end, image_end[image]);
    }
    builder.begin_tile(begin, end, has_image ? lifted : MaskPolicy{});
    builder.add_span(0, keys_end);
  }
}

// The sparse templates: image tiles split wherever the row's image changes, in the query order
// of images_then_text_order (order index = position in the rows of images so far); then the text
// rows, ascending, in tiles of tile_rows that each read every key up to their last row.
void build_sparse(PlanBuilder& builder, const PatternSpec& spec, const HeadContext& context,
                  BlindSightMask mask) {
  const bool bidirectional = check_blindsight_head(spec, context);
  const PlanShape& shape = context.shape;
  if (context.layout == nullptr || context.layout->media().empty()) {
    builder.begin_head();
    append_causal_tiles(builder, shape, 0, shape.q_len);  // text only: every query is a text query
    return;
  }
  const ImageLayout images = read_layout(*context.layout, spec, mask);
  builder.begin_head(images_then_text_order(images.token_media, shape));
  const int64_t offset = shape.causal_offset();
  const bool permuted = permutes_keys(spec, context.layout);
  // In place, bidirectional image tiles take the media lift, which reads the layout's tokens;
  // through the order they read only keys every row sees, unmasked (bidirectional_tile_spans).
  if (bidirectional && !permuted) builder.attach_layout(*context.layout);
  const MaskPolicy image_mask =
      bidirectional && permuted ? MaskPolicy{.causal = false}
                                : MaskPolicy{.causal = true, .media_bidirectional = bidirectional};
  const BlindSightKeyOrder key_order =
      permuted ? blindsight_key_order(images, mask) : BlindSightKeyOrder{};
  int32_t key_order_index = kKeysInPlace;  // added with its first tile
  std::vector<KeyRange> ranges;
  std::vector<int64_t> text_rows;
  int64_t image_rows = 0;  // order index of the next image row
  for (int64_t row = 0; row < shape.q_len;) {
    const int32_t image = images.token_media[row + offset];
    int64_t run_end = row + 1;
    while (run_end < shape.q_len && images.token_media[run_end + offset] == image) ++run_end;
    if (image < 0) {
      for (int64_t text = row; text < run_end; ++text) text_rows.push_back(text);
    } else {
      for (int64_t begin = row; begin < run_end; begin += shape.tile_rows) {
        const int64_t end = std::min(run_end, begin + shape.tile_rows);
        const int64_t tile_begin = image_rows + begin - row;
        const int64_t tile_end = image_rows + end - row;
        // No key for any row (an image before any text, its sinks still ahead): the rows stay in
        // no tile (O = 0, LSE = -inf, as the mask says) rather than in an empty one.
        if (permuted) {
          const std::vector<SlotSpan> spans =
              bidirectional
                  ? bidirectional_tile_spans(key_order, images, mask, image, end - 1 + offset)
                  : permuted_tile_spans(key_order, mask, image, begin + offset, end - 1 + offset);
          if (spans.empty()) continue;
          if (key_order_index == kKeysInPlace) {
            key_order_index = builder.add_key_order(key_order.slots);
          }
          builder.begin_tile(tile_begin, tile_end, image_mask, key_order_index);
          for (const SlotSpan& span : spans) builder.add_span(span.begin, span.end);
          continue;
        }
        image_key_ranges(images, image, end - 1 + offset, mask, bidirectional, ranges);
        if (ranges.empty()) continue;
        builder.begin_tile(tile_begin, tile_end, image_mask);
        add_key_runs(builder, ranges, begin + offset);
      }
      image_rows += run_end - row;
    }
    row = run_end;
  }
  const auto text_count = static_cast<int64_t>(text_rows.size());
  for (int64_t begin = 0; begin < text_count; begin += shape.tile_rows) {
    const int64_t end = std::min(text_count, begin + shape.tile_rows);
    builder.begin_tile(image_rows + begin, image_rows + end);
    builder.add_span(0, std::clamp<int64_t>(text_rows[end - 1] + 1 + offset, 0, shape.kv_len));
  }
}

void build_sink(PlanBuilder& builder, const PatternSpec& spec, const HeadContext& context) {
  build_sparse(builder, spec, context, BlindSightMask::kSink);
}
void build_intra(PlanBuilder& builder, const PatternSpec& spec, const HeadContext& context) {
  build_sparse(builder, spec, context, BlindSightMask::kIntra);
}
void build_intra_sink(PlanBuilder& builder, const PatternSpec& spec, const HeadContext& context) {
  build_sparse(builder, spec, context, BlindSightMask::kIntraSink);
}

Params image_params(int64_t) { return {{kBidirectionalParam, 0}}; }
Params intra_params(int64_t) {
  return {{kBidirectionalParam, 0}, {kPermuteParam, kPermuteDefault}};
}
Params sink_params(int64_t) {
  return {{kBidirectionalParam, 0},
          {kPermuteParam, kPermuteDefault},
          {kSinkPercentParam, kDefaultSinkPercent}};
}
Lists sink_lists() { return {{kSinksList, {}}}; }

}  // namespace

PatternEntry& blindsight_entry(BlindSightMask mask) {
  // Indexed by BlindSightMask.
  static std::array<PatternEntry, std::size(kBlindSightMasks)> entries = {{
      {{"blindsight-dense",
        "BlindSight dense head: the model's own mask (causal; bidirectional=1 keeps every pair "
        "inside an image, as Gemma 3); exact",
        "blindsight-dense"},
       build_dense,
       image_params},
      {{"blindsight-sink",
        "BlindSight sink head: image queries read text and every image's sink (the first "
        "sink_percent% of each image, or the offsets sinks=[a/b/c]); text queries every key; "
        "image tiles read K and V through a key order unless permute=0; exact",
        "blindsight-sink"},
       build_sink,
       sink_params,
       1,
       nullptr,
       nullptr,
       sink_lists},
      {{"blindsight-intra",
        "BlindSight intra-image head: image queries read text and their own image; text queries "
        "every key; image tiles read K and V through a key order unless permute=0; exact",
        "blindsight-intra"},
       build_intra,
       intra_params},
      {{"blindsight-intra-sink",
        "BlindSight intra-image+sink head: image queries read text, their own image and every "
        "image's sink; text queries every key; image tiles read K and V through a key order "
        "unless permute=0; exact",
        "blindsight-intra-sink"},
       build_intra_sink,
       sink_params,
       1,
       nullptr,
       nullptr,
       sink_lists},
  }};
  static const bool marked = [] {
    for (PatternEntry& entry : entries) entry.info.image_templates = true;
    return true;
  }();
  (void)marked;
  return entries[static_cast<std::size_t>(mask)];
}

}  // namespace mmsparse::detail
