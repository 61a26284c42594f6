#include "mmsparse/layout.h"

#include <algorithm>
#include <cstddef>
#include <iterator>
#include <limits>

#include "core/layout_internal.h"
#include "mmsparse/status.h"

namespace mmsparse {

namespace detail {

std::string indexed(std::string_view name, std::size_t index) {
  return std::string(name).append("[").append(std::to_string(index)).append("]");
}

std::string grid_string(const Grid& grid) {
  return std::string("[")
      .append(std::to_string(grid.t))
      .append(", ")
      .append(std::to_string(grid.h))
      .append(", ")
      .append(std::to_string(grid.w))
      .append("]");
}

std::string range_string(int64_t begin, int64_t end) {
  return std::string("[")
      .append(std::to_string(begin))
      .append(", ")
      .append(std::to_string(end))
      .append(")");
}

void validate_grid(const Grid& grid, Modality modality, const std::string& field) {
  if (grid.t <= 0 || grid.h <= 0 || grid.w <= 0) {
    throw_invalid_argument(field, "positive extents [t, h, w]", grid_string(grid));
  }
  if (modality == Modality::kImage && grid.t != 1) {
    throw_invalid_argument(field, "t = 1 for an image", grid_string(grid));
  }
  constexpr int64_t kMaxTokens = std::numeric_limits<int64_t>::max();
  if (grid.h > kMaxTokens / grid.w || grid.t > kMaxTokens / grid.frame_tokens()) {
    throw_invalid_argument(field, "a token count that fits in 64 bits", grid_string(grid));
  }
}

}  // namespace detail

using detail::grid_string;
using detail::indexed;
using detail::kNoMarker;
using detail::kNoMedia;
using detail::range_string;
using detail::validate_grid;

namespace {

constexpr int64_t kNoFrame = -1;
// Marker tokens (vision_start / vision_end) are single text tokens.
constexpr int64_t kMarkerTokens = 1;
// Segments a layout may hold: far more than any prompt has (a video of 10,000 frames with a
// timestamp before each makes 20,000), and few enough that a malformed layout (a video of 10^8
// one-token frames with separators) fails in milliseconds instead of allocating gigabytes.
constexpr std::size_t kMaxSegments = std::size_t{1} << 20;

void validate_media_items(const std::vector<Media>& media) {
  for (std::size_t m = 0; m < media.size(); ++m) {
    const std::string field = indexed("media", m);
    if (media[m].modality != Modality::kImage && media[m].modality != Modality::kVideo) {
      throw_invalid_argument(field + ".modality", "image or video",
                             std::string(modality_name(media[m].modality)));
    }
    validate_grid(media[m].grid, media[m].modality, field + ".grid");
  }
}

// Segments sorted, contiguous from 0, non-empty, maximal, text without media, media references
// valid, of the same modality, and numbered in order of first appearance (so that every layout has
// one representation and operator== means "same layout"). Returns the sequence length.
int64_t validate_segment_order(const std::vector<Segment>& segments,
                               const std::vector<Media>& media) {
  int64_t position = 0;
  int32_t next_new_media = 0;
  for (std::size_t i = 0; i < segments.size(); ++i) {
    const Segment& segment = segments[i];
    const std::string field = indexed("segments", i);
    if (segment.begin != position) {
      throw_invalid_argument(field + ".begin",
                             std::to_string(position) + " (segments sorted and contiguous from 0)",
                             std::to_string(segment.begin));
    }
    if (segment.end <= segment.begin) {
      throw_invalid_argument(
          field + ".end", "> begin " + std::to_string(segment.begin) + " (segments are non-empty)",
          std::to_string(segment.end));
    }
    if (i > 0 && segment.modality == segments[i - 1].modality &&
        segment.media == segments[i - 1].media) {
      throw_invalid_argument(field,
                             "a different modality or media than " + indexed("segments", i - 1) +
                                 " (segments are maximal runs)",
                             "the same " + std::string(modality_name(segment.modality)) + " run");
    }
    if (segment.modality == Modality::kText) {
      if (segment.media != kNoMedia) {
        throw_invalid_argument(field + ".media", "-1 for text", std::to_string(segment.media));
      }
      if (segment.first_frame != 0) {
        throw_invalid_argument(field + ".first_frame", "0 for text",
                               std::to_string(segment.first_frame));
      }
    } else {
      if (segment.media < 0 || segment.media >= static_cast<int32_t>(media.size())) {
        throw_invalid_argument(field + ".media",
                               "an index into " + std::to_string(media.size()) + " media items",
                               std::to_string(segment.media));
      }
      if (segment.media > next_new_media) {
        throw_invalid_argument(field + ".media",
                               "at most " + std::to_string(next_new_media) +
                                   " (media are numbered in order of first appearance)",
                               std::to_string(segment.media));
      }
      next_new_media = std::max(next_new_media, segment.media + 1);
      const Modality expected = media[segment.media].modality;
      if (segment.modality != expected) {
        throw_invalid_argument(
            field + ".modality",
            std::string(modality_name(expected)) + " like " + indexed("media", segment.media),
            std::string(modality_name(segment.modality)));
      }
    }
    position = segment.end;
  }
  return position;
}

// Where each media item's tokens lie: [first, last) over all its segments.
struct MediaSpan {
  int64_t tokens = 0;
  int64_t first = 0;
  int64_t last = 0;
};

// An image is one segment of exactly its grid; a video's segments are whole frames in frame
// order and together cover t * h * w tokens.
std::vector<MediaSpan> validate_media_coverage(const std::vector<Segment>& segments,
                                               const std::vector<Media>& media) {
  std::vector<MediaSpan> spans(media.size());
  for (std::size_t i = 0; i < segments.size(); ++i) {
    const Segment& segment = segments[i];
    if (segment.modality == Modality::kText) continue;
    const std::string field = indexed("segments", i);
    MediaSpan& span = spans[segment.media];
    const int64_t frame_tokens = media[segment.media].grid.frame_tokens();
    if (segment.modality == Modality::kImage && span.tokens != 0) {
      throw_invalid_argument(field,
                             "one segment per image (" + indexed("media", segment.media) +
                                 " already began at " + std::to_string(span.first) + ")",
                             "a second segment");
    }
    if (segment.modality == Modality::kVideo && segment.length() % frame_tokens != 0) {
      throw_invalid_argument(field + ".length",
                             "whole frames: a multiple of " + std::to_string(frame_tokens) +
                                 " tokens of " + indexed("media", segment.media),
                             std::to_string(segment.length()));
    }
    if (segment.first_frame != span.tokens / frame_tokens) {
      throw_invalid_argument(
          field + ".first_frame",
          std::to_string(span.tokens / frame_tokens) + " (frames continue in order)",
          std::to_string(segment.first_frame));
    }
    if (span.tokens == 0) span.first = segment.begin;
    span.tokens += segment.length();
    span.last = segment.end;
  }
  for (std::size_t m = 0; m < media.size(); ++m) {
    if (spans[m].tokens != media[m].grid.tokens()) {
      throw_invalid_argument(
          indexed("media", m) + " tokens",
          std::to_string(media[m].grid.tokens()) + " (grid " + grid_string(media[m].grid) + ")",
          std::to_string(spans[m].tokens));
    }
  }
  return spans;
}

Modality modality_at(const std::vector<Segment>& segments, int64_t position) {
  const auto after =
      std::upper_bound(segments.begin(), segments.end(), position,
                       [](int64_t value, const Segment& segment) { return value < segment.begin; });
  return std::prev(after)->modality;
}

// A marker is a text token inside the sequence, before (start) or after (end) its media's tokens.
void validate_marker(const std::vector<Segment>& segments, int64_t length, int64_t marker,
                     bool is_start, const MediaSpan& span, const std::string& field) {
  if (marker == kNoMarker) return;
  if (marker < 0 || marker >= length) {
    throw_invalid_argument(field, "-1 or a position in " + range_string(0, length),
                           std::to_string(marker));
  }
  const Modality modality = modality_at(segments, marker);
  if (modality != Modality::kText) {
    throw_invalid_argument(
        field, "the position of a text token",
        std::string(modality_name(modality)) + " token at " + std::to_string(marker));
  }
  if (is_start && marker >= span.first) {
    throw_invalid_argument(
        field, "a position before the media's first token " + std::to_string(span.first),
        std::to_string(marker));
  }
  if (!is_start && marker < span.last) {
    throw_invalid_argument(
        field, "a position after the media's last token " + std::to_string(span.last - 1),
        std::to_string(marker));
  }
}

}  // namespace

std::string_view modality_name(Modality modality) {
  switch (modality) {
    case Modality::kText: return "text";
    case Modality::kImage: return "image";
    case Modality::kVideo: return "video";
  }
  return "unknown";
}

ModalityLayout::ModalityLayout(std::vector<Segment> segments, std::vector<Media> media)
    : segments_(std::move(segments)), media_(std::move(media)) {
  validate_media_items(media_);
  length_ = validate_segment_order(segments_, media_);
  const std::vector<MediaSpan> spans = validate_media_coverage(segments_, media_);
  for (std::size_t m = 0; m < media_.size(); ++m) {
    const std::string field = indexed("media", m);
    validate_marker(segments_, length_, media_[m].start_marker, true, spans[m],
                    field + ".start_marker");
    validate_marker(segments_, length_, media_[m].end_marker, false, spans[m],
                    field + ".end_marker");
  }
}

ModalityLayout ModalityLayout::text_only(int64_t length) {
  if (length < 0) throw_invalid_argument("length", ">= 0", std::to_string(length));
  if (length == 0) return {};
  return ModalityLayout({Segment{Modality::kText, 0, length, kNoMedia, 0}}, {});
}

bool ModalityLayout::is_mixed() const {
  return std::any_of(segments_.begin(), segments_.end(), [&](const Segment& segment) {
    return segment.modality != segments_.front().modality;
  });
}

std::vector<uint8_t> ModalityLayout::token_types() const {
  std::vector<uint8_t> types(length_);
  for (const Segment& segment : segments_) {
    std::fill(types.begin() + segment.begin, types.begin() + segment.end,
              static_cast<uint8_t>(segment.modality));
  }
  return types;
}

std::vector<int32_t> ModalityLayout::token_media() const {
  std::vector<int32_t> media(length_);
  for (const Segment& segment : segments_) {
    std::fill(media.begin() + segment.begin, media.begin() + segment.end, segment.media);
  }
  return media;
}

std::vector<int64_t> ModalityLayout::token_frames() const {
  std::vector<int64_t> frames(length_, kNoFrame);
  for (const Segment& segment : segments_) {
    if (segment.modality != Modality::kVideo) continue;
    const int64_t frame_tokens = media_[segment.media].grid.frame_tokens();
    for (int64_t position = segment.begin; position < segment.end; ++position) {
      frames[position] = segment.first_frame + (position - segment.begin) / frame_tokens;
    }
  }
  return frames;
}

int64_t ModalityLayout::video_frame_tokens() const {
  for (const Media& item : media_) {
    if (item.modality == Modality::kVideo) return item.grid.frame_tokens();
  }
  return 0;
}

LayoutBuilder& LayoutBuilder::text(int64_t length) {
  if (length <= 0) throw_invalid_argument("text length", "> 0", std::to_string(length));
  push(Modality::kText, length, kNoMedia, 0);
  return *this;
}

LayoutBuilder& LayoutBuilder::image(Grid grid, bool markers) {
  validate_grid(grid, Modality::kImage, indexed("media", media_.size()) + ".grid");
  Media& media = media_.emplace_back(Media{Modality::kImage, grid, kNoMarker, kNoMarker});
  const auto index = static_cast<int32_t>(media_.size() - 1);
  if (markers) {
    media.start_marker = length_;
    push(Modality::kText, kMarkerTokens, kNoMedia, 0);
  }
  push(Modality::kImage, grid.tokens(), index, 0);
  if (markers) {
    media.end_marker = length_;
    push(Modality::kText, kMarkerTokens, kNoMedia, 0);
  }
  return *this;
}

LayoutBuilder& LayoutBuilder::video(Grid grid, int64_t frame_separator, bool markers) {
  validate_grid(grid, Modality::kVideo, indexed("media", media_.size()) + ".grid");
  if (frame_separator < 0) {
    throw_invalid_argument("frame_separator", ">= 0", std::to_string(frame_separator));
  }
  Media& media = media_.emplace_back(Media{Modality::kVideo, grid, kNoMarker, kNoMarker});
  const auto index = static_cast<int32_t>(media_.size() - 1);
  if (markers) {
    media.start_marker = length_;
    push(Modality::kText, kMarkerTokens, kNoMedia, 0);
  }
  if (frame_separator == 0) {
    push(Modality::kVideo, grid.tokens(), index, 0);
  } else {
    for (int64_t frame = 0; frame < grid.t; ++frame) {
      if (frame > 0) push(Modality::kText, frame_separator, kNoMedia, 0);
      push(Modality::kVideo, grid.frame_tokens(), index, frame);
    }
  }
  if (markers) {
    media.end_marker = length_;
    push(Modality::kText, kMarkerTokens, kNoMedia, 0);
  }
  return *this;
}

ModalityLayout LayoutBuilder::build() const { return ModalityLayout(segments_, media_); }

// Text appended after text extends the same segment, so built layouts are made of maximal runs.
void LayoutBuilder::push(Modality modality, int64_t length, int32_t media, int64_t first_frame) {
  if (length > std::numeric_limits<int64_t>::max() - length_) {
    throw_invalid_argument("layout length", "a token count that fits in 64 bits",
                           std::to_string(length_) + " + " + std::to_string(length));
  }
  if (modality == Modality::kText && !segments_.empty() &&
      segments_.back().modality == Modality::kText) {
    segments_.back().end += length;
  } else {
    if (segments_.size() >= kMaxSegments) {
      throw_invalid_argument("layout segments",
                             "at most " + std::to_string(kMaxSegments) +
                                 " runs of one modality (frames with separators count one each)",
                             "more");
    }
    segments_.push_back(Segment{modality, length_, length_ + length, media, first_frame});
  }
  length_ += length;
}

}  // namespace mmsparse
