#include <algorithm>
#include <array>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>

#include "core/layout_internal.h"
#include "mmsparse/layout.h"
#include "mmsparse/status.h"

namespace mmsparse {

using detail::indexed;
using detail::kNoMarker;
using detail::kNoMedia;

namespace {

using Json = nlohmann::json;

constexpr std::array<Modality, kNumModalities> kModalities{Modality::kText, Modality::kImage,
                                                           Modality::kVideo};

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

}  // namespace

ModalityLayout ModalityLayout::from_json(const std::string& json_text) {
  Json root;
  try {
    root = Json::parse(json_text);
  } catch (const Json::exception& error) {
    // Not only parse_error: a number beyond double's range ("1e400") throws out_of_range.
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

}  // namespace mmsparse
