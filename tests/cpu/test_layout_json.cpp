// Modality layouts in JSON: the compact and explicit forms read as the builder builds, to_json
// writes the explicit form, and errors name the field. (Random layouts' round trip is in
// test_layout.cpp, beside the random layouts.)

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "common/errors.h"
#include "common/random.h"
#include "mmsparse/layout.h"
#include "mmsparse/status.h"

namespace mmsparse {
namespace {

using testing::capture_error;
using ::testing::HasSubstr;

TEST(LayoutJson, CompactFormMatchesTheBuilder) {
  const std::string json = R"({"segments": [{"type": "text", "length": 20},
      {"type": "image", "grid": [1, 16, 16], "markers": true},
      {"type": "video", "grid": [64, 12, 20], "frame_separator": 3, "markers": true}]})";
  const ModalityLayout expected = LayoutBuilder()
                                      .text(20)
                                      .image(Grid{1, 16, 16}, true)
                                      .video(Grid{64, 12, 20}, 3, true)
                                      .build();
  EXPECT_EQ(ModalityLayout::from_json(json), expected);
}

TEST(LayoutJson, CompactDefaultsMatchTheBuilder) {
  const std::string json = R"({"segments": [{"type": "image", "grid": [1, 2, 3]},
      {"type": "video", "grid": [2, 2, 2]},
      {"type": "video", "grid": [2, 1, 1], "markers": false}]})";
  const ModalityLayout expected = LayoutBuilder()
                                      .image(Grid{1, 2, 3})
                                      .video(Grid{2, 2, 2})
                                      .video(Grid{2, 1, 1}, 0, false)
                                      .build();
  EXPECT_EQ(ModalityLayout::from_json(json), expected);
}

TEST(LayoutJson, ExplicitFormIsRead) {
  const std::string json = R"({"length": 9,
      "media": [{"type": "video", "grid": [2, 1, 2], "start_marker": 0, "end_marker": 8}],
      "segments": [{"type": "text", "begin": 0, "end": 1},
                   {"type": "video", "begin": 1, "end": 3, "media": 0},
                   {"type": "text", "begin": 3, "end": 6},
                   {"type": "video", "begin": 6, "end": 8, "media": 0, "first_frame": 1},
                   {"type": "text", "begin": 8, "end": 9}]})";
  const ModalityLayout layout = ModalityLayout::from_json(json);
  EXPECT_EQ(layout, LayoutBuilder().video(Grid{2, 1, 2}, 3).build());
}

TEST(LayoutJson, ToJsonWritesTheExplicitForm) {
  const ModalityLayout layout = LayoutBuilder().text(2).image(Grid{1, 1, 2}).build();
  EXPECT_EQ(layout.to_json(),
            R"({"length":6,"media":[{"end_marker":5,"grid":[1,1,2],"start_marker":2,)"
            R"("type":"image"}],"segments":[{"begin":0,"end":3,"first_frame":0,"media":-1,)"
            R"("type":"text"},{"begin":3,"end":5,"first_frame":0,"media":0,"type":"image"},)"
            R"({"begin":5,"end":6,"first_frame":0,"media":-1,"type":"text"}]})");
  EXPECT_EQ(ModalityLayout().to_json(), R"({"length":0,"media":[],"segments":[]})");
  EXPECT_EQ(ModalityLayout::from_json(ModalityLayout().to_json()), ModalityLayout());
}

TEST(LayoutJson, ErrorsNameTheField) {
  struct Case {
    std::string name;
    std::string json;
    std::string message;
  };
  const std::vector<Case> cases{
      {"bad syntax", R"({"segments": [)", "layout JSON: layout: expected valid JSON"},
      {"not an object", "[1, 2]", "layout: expected a JSON object, got array"},
      {"no segments", "{}", "segments: expected a value, got none"},
      {"segments not an array", R"({"segments": 3})", "segments: expected an array, got 3"},
      {"segment not an object", R"({"segments": [3]})", "segments[0]: expected an object, got 3"},
      {"unknown type", R"({"segments": [{"type": "audio", "length": 3}]})",
       R"(segments[0].type: expected "text", "image" or "video", got "audio")"},
      {"missing type", R"({"segments": [{"length": 3}]})",
       "segments[0].type: expected a value, got none"},
      {"fractional length", R"({"segments": [{"type": "text", "length": 2.5}]})",
       "segments[0].length: expected a 64-bit integer, got 2.5"},
      {"string length", R"({"segments": [{"type": "text", "length": "2"}]})",
       R"(segments[0].length: expected a 64-bit integer, got "2")"},
      {"huge length", R"({"segments": [{"type": "text", "length": 18446744073709551615}]})",
       "segments[0].length: expected a 64-bit integer"},
      {"unknown key", R"({"segments": [{"type": "text", "lenght": 3}]})",
       "segments[0]: expected only the keys type, length, got unknown key 'lenght'"},
      {"short grid", R"({"segments": [{"type": "image", "grid": [16, 16]}]})",
       "segments[0].grid: expected an array [t, h, w], got [16,16]"},
      {"grid with a string", R"({"segments": [{"type": "image", "grid": [1, "a", 2]}]})",
       R"(segments[0].grid[1]: expected a 64-bit integer, got "a")"},
      {"markers not a bool",
       R"({"segments": [{"type": "image", "grid": [1, 1, 1], "markers": 1}]})",
       "segments[0].markers: expected true or false, got 1"},
      {"negative separator",
       R"({"segments": [{"type": "video", "grid": [2, 1, 1], "frame_separator": -1}]})",
       "frame_separator: expected >= 0, got -1"},
      {"empty text", R"({"segments": [{"type": "text", "length": 0}]})",
       "text length: expected > 0, got 0"},
      {"image with frames", R"({"segments": [{"type": "image", "grid": [2, 1, 1]}]})",
       "media[0].grid: expected t = 1 for an image, got [2, 1, 1]"},
      {"explicit length differs",
       R"({"length": 5, "media": [], "segments": [{"type": "text", "begin": 0, "end": 4}]})",
       "length: expected 4 (the end of the last segment), got 5"},
      {"explicit segments not contiguous",
       R"({"length": 5, "media": [], "segments": [{"type": "text", "begin": 0, "end": 2},
           {"type": "text", "begin": 3, "end": 5}]})",
       "segments[1].begin: expected 2 (segments sorted and contiguous from 0), got 3"},
      {"explicit media index out of range",
       R"({"length": 1, "media": [], "segments": [{"type": "image", "begin": 0, "end": 1,
           "media": 4294967296}]})",
       "segments[0].media: expected -1 or a media index, got 4294967296"},
      {"explicit media without grid",
       R"({"length": 0, "media": [{"type": "image"}], "segments": []})",
       "media[0].grid: expected a value, got none"},
      {"explicit unknown key", R"({"length": 0, "media": [], "segments": [], "extra": 1})",
       "layout: expected only the keys length, media, segments, got unknown key 'extra'"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const Error error = capture_error([&] { ModalityLayout::from_json(c.json); });
    EXPECT_EQ(error.code(), ErrorCode::kParseError);
    EXPECT_THAT(error.what(), HasSubstr(c.message));
    EXPECT_THAT(error.what(), HasSubstr("layout JSON: "));
  }
}

}  // namespace
}  // namespace mmsparse
