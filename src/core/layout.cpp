#include "mmsparse/layout.h"

#include <algorithm>
#include <array>
#include <iterator>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>

#include "mmsparse/status.h"

namespace mmsparse {

namespace {

using Json = nlohmann::json;

constexpr std::array<Modality, kNumModalities> kModalities{Modality::kText, Modality::kImage,
                                                           Modality::kVideo};
constexpr int64_t kNoMarker = -1;
constexpr int32_t kNoMedia = -1;
constexpr int64_t kNoFrame = -1;
// Marker tokens (vision_start / vision_end) are single text tokens.
constexpr int64_t kMarkerTokens = 1;

// Strings are built by appending: GCC 12 warns falsely (-Wrestrict) on "[" + std::to_string(x).
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

// Positive extents, t = 1 for images, and a token count that cannot overflow (grids come from
// files and JSON, so they are untrusted).
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

Json grid_json(const Grid& grid) { return Json::array({grid.t, grid.h, grid.w}); }

[[noreturn]] void throw_json_error(std::string_view field, std::string_view expected,
                                   std::string_view got) {
  std::string message = "layout JSON: ";
  message.append(field).append(": expected ").append(expected).append(", got ").append(got);
  throw Error(ErrorCode::kParseError, message);
}

const Json* find_key(const Json& object, std::string_view key) {
  const auto found = object.find(key);
  return found == object.end() ? nullptr : &*found;
}

// The path of a key inside `field`; top-level keys ("" field) are named alone.
std::string child(const std::string& field, std::string_view key) {
  return field.empty() ? std::string(key) : field + "." + std::string(key);
}

const Json& require_key(const Json& object, std::string_view key, const std::string& field) {
  const Json* value = find_key(object, key);
  if (value == nullptr) throw_json_error(child(field, key), "a value", "none");
  return *value;
}

void reject_unknown_keys(const Json& object, std::initializer_list<std::string_view> allowed,
                         const std::string& field) {
  for (const auto& item : object.items()) {
    if (std::find(allowed.begin(), allowed.end(), item.key()) == allowed.end()) {
      std::string names;
      for (std::string_view name : allowed) names.append(names.empty() ? "" : ", ").append(name);
      throw_json_error(field, "only the keys " + names, "unknown key '" + item.key() + "'");
    }
  }
}

int64_t read_int(const Json& value, const std::string& field) {
  const bool fits =
      value.is_number_integer() &&
      (!value.is_number_unsigned() ||
       value.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()));
  if (!fits) throw_json_error(field, "a 64-bit integer", value.dump());
  return value.get<int64_t>();
}

int64_t read_int(const Json& object, std::string_view key, const std::string& field,
                 std::optional<int64_t> fallback = std::nullopt) {
  const Json* value = find_key(object, key);
  if (value == nullptr && fallback) return *fallback;
  if (value == nullptr) throw_json_error(child(field, key), "a value", "none");
  return read_int(*value, child(field, key));
}

bool read_bool(const Json& object, std::string_view key, const std::string& field, bool fallback) {
  const Json* value = find_key(object, key);
  if (value == nullptr) return fallback;
  if (!value->is_boolean()) throw_json_error(child(field, key), "true or false", value->dump());
  return value->get<bool>();
}

Grid read_grid(const Json& object, const std::string& field) {
  const Json& value = require_key(object, "grid", field);
  if (!value.is_array() || value.size() != 3) {
    throw_json_error(field + ".grid", "an array [t, h, w]", value.dump());
  }
  return Grid{read_int(value[0], field + ".grid[0]"), read_int(value[1], field + ".grid[1]"),
              read_int(value[2], field + ".grid[2]")};
}

Modality read_modality(const Json& object, const std::string& field) {
  const Json& value = require_key(object, "type", field);
  if (value.is_string()) {
    for (Modality modality : kModalities) {
      if (modality_name(modality) == value.get<std::string>()) return modality;
    }
  }
  throw_json_error(field + ".type", "\"text\", \"image\" or \"video\"", value.dump());
}

const Json& require_array(const Json& object, std::string_view key) {
  const Json& value = require_key(object, key, "");
  if (!value.is_array()) throw_json_error(key, "an array", value.dump());
  return value;
}

const Json& require_object_item(const Json& array, std::size_t index, std::string_view name) {
  if (!array[index].is_object()) {
    throw_json_error(indexed(name, index), "an object", array[index].dump());
  }
  return array[index];
}

ModalityLayout compact_from_json(const Json& root) {
  reject_unknown_keys(root, {"segments"}, "layout");
  const Json& items = require_array(root, "segments");
  LayoutBuilder builder;
  for (std::size_t i = 0; i < items.size(); ++i) {
    const Json& item = require_object_item(items, i, "segments");
    const std::string field = indexed("segments", i);
    switch (read_modality(item, field)) {
      case Modality::kText:
        reject_unknown_keys(item, {"type", "length"}, field);
        builder.text(read_int(item, "length", field));
        break;
      case Modality::kImage:
        reject_unknown_keys(item, {"type", "grid", "markers"}, field);
        builder.image(read_grid(item, field), read_bool(item, "markers", field, true));
        break;
      case Modality::kVideo:
        reject_unknown_keys(item, {"type", "grid", "frame_separator", "markers"}, field);
        builder.video(read_grid(item, field), read_int(item, "frame_separator", field, 0),
                      read_bool(item, "markers", field, true));
        break;
    }
  }
  return builder.build();
}

ModalityLayout explicit_from_json(const Json& root) {
  reject_unknown_keys(root, {"length", "media", "segments"}, "layout");
  const Json& media_items = require_array(root, "media");
  std::vector<Media> media;
  for (std::size_t m = 0; m < media_items.size(); ++m) {
    const Json& item = require_object_item(media_items, m, "media");
    const std::string field = indexed("media", m);
    reject_unknown_keys(item, {"type", "grid", "start_marker", "end_marker"}, field);
    media.push_back(Media{read_modality(item, field), read_grid(item, field),
                          read_int(item, "start_marker", field, kNoMarker),
                          read_int(item, "end_marker", field, kNoMarker)});
  }
  const Json& segment_items = require_array(root, "segments");
  std::vector<Segment> segments;
  for (std::size_t i = 0; i < segment_items.size(); ++i) {
    const Json& item = require_object_item(segment_items, i, "segments");
    const std::string field = indexed("segments", i);
    reject_unknown_keys(item, {"type", "begin", "end", "media", "first_frame"}, field);
    const int64_t media_index = read_int(item, "media", field, kNoMedia);
    if (media_index < kNoMedia || media_index > std::numeric_limits<int32_t>::max()) {
      throw_json_error(field + ".media", "-1 or a media index", std::to_string(media_index));
    }
    segments.push_back(Segment{read_modality(item, field), read_int(item, "begin", field),
                               read_int(item, "end", field), static_cast<int32_t>(media_index),
                               read_int(item, "first_frame", field, 0)});
  }
  ModalityLayout layout(std::move(segments), std::move(media));
  const int64_t length = read_int(root, "length", "");
  if (length != layout.length()) {
    throw_json_error("length", std::to_string(layout.length()) + " (the end of the last segment)",
                     std::to_string(length));
  }
  return layout;
}

// Splits token-type runs into media items by their grids, in order of appearance.
class TokenTypeParser {
 public:
  TokenTypeParser(std::span<const Grid> image_grids, std::span<const Grid> video_grids)
      : image_grids_(image_grids), video_grids_(video_grids) {
    for (std::size_t k = 0; k < image_grids.size(); ++k) {
      validate_grid(image_grids[k], Modality::kImage, indexed("image_grids", k));
    }
    for (std::size_t k = 0; k < video_grids.size(); ++k) {
      validate_grid(video_grids[k], Modality::kVideo, indexed("video_grids", k));
    }
  }

  void add_run(Modality modality, int64_t begin, int64_t end) {
    if (modality == Modality::kText) {
      segments_.push_back(Segment{Modality::kText, begin, end, kNoMedia, 0});
      return;
    }
    if (modality == Modality::kImage) {
      add_images(begin, end);
    } else {
      add_video_tokens(begin, end);
    }
  }

  ModalityLayout finish(int64_t length) {
    require_no_open_video(length);
    require_all_used(next_image_, image_grids_.size(), "image_grids", "image");
    require_all_used(next_video_, video_grids_.size(), "video_grids", "video");
    return ModalityLayout(std::move(segments_), std::move(media_));
  }

 private:
  std::span<const Grid> image_grids_;
  std::span<const Grid> video_grids_;
  std::size_t next_image_ = 0;
  std::size_t next_video_ = 0;
  int64_t open_video_frames_ = 0;  // frames of video next_video_ - 1 seen so far; 0: none open
  int32_t open_video_media_ = kNoMedia;  // its index in media_
  std::vector<Segment> segments_;
  std::vector<Media> media_;

  static const Grid& next_grid(std::span<const Grid> grids, std::size_t index,
                               std::string_view grids_name, std::string_view item_name,
                               int64_t position) {
    if (index >= grids.size()) {
      throw_invalid_argument(grids_name,
                             "a grid for " + indexed(item_name, index) + " starting at token " +
                                 std::to_string(position),
                             std::to_string(grids.size()) + " grids");
    }
    return grids[index];
  }

  int32_t add_media(Modality modality, const Grid& grid) {
    media_.push_back(Media{modality, grid, kNoMarker, kNoMarker});
    return static_cast<int32_t>(media_.size() - 1);
  }

  // Consecutive images with no text between them are told apart by their grid sizes.
  void add_images(int64_t begin, int64_t end) {
    for (int64_t position = begin; position < end;) {
      const Grid& grid = next_grid(image_grids_, next_image_, "image_grids", "image", position);
      const int64_t tokens = grid.tokens();
      if (tokens > end - position) {
        throw_invalid_argument(
            indexed("image", next_image_) + " tokens",
            std::to_string(tokens) + " (grid " + grid_string(grid) + ")",
            std::to_string(end - position) + " image tokens in " + range_string(position, end));
      }
      segments_.push_back(Segment{Modality::kImage, position, position + tokens,
                                  add_media(Modality::kImage, grid), 0});
      ++next_image_;
      position += tokens;
    }
  }

  // A video may be interrupted between frames, by text (timestamps) or by images: its next video
  // tokens continue it. So two videos are told apart only by their grids.
  void add_video_tokens(int64_t begin, int64_t end) {
    for (int64_t position = begin; position < end;) {
      if (open_video_frames_ == 0) {  // opens the next video
        const Grid& grid = next_grid(video_grids_, next_video_, "video_grids", "video", position);
        open_video_media_ = add_media(Modality::kVideo, grid);
        ++next_video_;
      }
      const std::size_t video = next_video_ - 1;
      const Grid& grid = video_grids_[video];
      const int64_t left = (grid.t - open_video_frames_) * grid.frame_tokens();
      const int64_t tokens = std::min(left, end - position);
      if (tokens % grid.frame_tokens() != 0) {
        throw_invalid_argument(indexed("video", video) + " tokens",
                               "whole frames of " + std::to_string(grid.frame_tokens()) +
                                   " tokens (grid " + grid_string(grid) + ")",
                               std::to_string(tokens) + " video tokens in " +
                                   range_string(position, position + tokens));
      }
      segments_.push_back(Segment{Modality::kVideo, position, position + tokens, open_video_media_,
                                  open_video_frames_});
      open_video_frames_ += tokens / grid.frame_tokens();
      if (open_video_frames_ == grid.t) open_video_frames_ = 0;
      position += tokens;
    }
  }

  void require_no_open_video(int64_t length) const {
    if (open_video_frames_ == 0) return;
    const std::size_t video = next_video_ - 1;
    const Grid& grid = video_grids_[video];
    throw_invalid_argument(indexed("video", video) + " tokens",
                           std::to_string(grid.tokens()) + " (grid " + grid_string(grid) + ")",
                           std::to_string(open_video_frames_ * grid.frame_tokens()) +
                               " before the end of the sequence at " + std::to_string(length));
  }

  static void require_all_used(std::size_t used, std::size_t given, std::string_view grids_name,
                               std::string_view item_name) {
    if (used != given) {
      throw_invalid_argument(
          grids_name,
          std::to_string(used) + " grids (one per " + std::string(item_name) + " in token_types)",
          std::to_string(given));
    }
  }
};

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

ModalityLayout ModalityLayout::from_token_types(std::span<const uint8_t> token_types,
                                                std::span<const Grid> image_grids,
                                                std::span<const Grid> video_grids) {
  const int64_t length = static_cast<int64_t>(token_types.size());
  // Codes first, so that a bad code is reported as such rather than as a run that does not fit.
  for (int64_t position = 0; position < length; ++position) {
    if (token_types[position] >= kNumModalities) {
      throw_invalid_argument(indexed("token_types", position), "0 (text), 1 (image) or 2 (video)",
                             std::to_string(token_types[position]));
    }
  }
  TokenTypeParser parser(image_grids, video_grids);
  int64_t run_begin = 0;
  for (int64_t position = 0; position < length; ++position) {
    const bool run_ends =
        position + 1 == length || token_types[position + 1] != token_types[position];
    if (run_ends) {
      parser.add_run(static_cast<Modality>(token_types[position]), run_begin, position + 1);
      run_begin = position + 1;
    }
  }
  return parser.finish(length);
}

ModalityLayout ModalityLayout::from_json(const std::string& json_text) {
  Json root;
  try {
    root = Json::parse(json_text);
  } catch (const Json::parse_error& error) {
    throw_json_error("layout", "valid JSON", error.what());
  }
  if (!root.is_object()) throw_json_error("layout", "a JSON object", root.type_name());
  // Semantic errors (from the constructor or the builder) are parse errors of this text.
  try {
    const bool is_explicit = root.contains("media") || root.contains("length");
    return is_explicit ? explicit_from_json(root) : compact_from_json(root);
  } catch (const Error& error) {
    if (error.code() != ErrorCode::kInvalidArgument) throw;
    throw Error(ErrorCode::kParseError, std::string("layout JSON: ") + error.what());
  }
}

std::string ModalityLayout::to_json() const {
  Json media = Json::array();
  for (const Media& item : media_) {
    media.push_back({{"type", modality_name(item.modality)},
                     {"grid", grid_json(item.grid)},
                     {"start_marker", item.start_marker},
                     {"end_marker", item.end_marker}});
  }
  Json segments = Json::array();
  for (const Segment& segment : segments_) {
    segments.push_back({{"type", modality_name(segment.modality)},
                        {"begin", segment.begin},
                        {"end", segment.end},
                        {"media", segment.media},
                        {"first_frame", segment.first_frame}});
  }
  return Json{{"length", length_}, {"media", media}, {"segments", segments}}.dump();
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
    segments_.push_back(Segment{modality, length_, length_ + length, media, first_frame});
  }
  length_ += length;
}

}  // namespace mmsparse
