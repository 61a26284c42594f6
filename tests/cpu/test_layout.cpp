// Modality layouts: from token types (Qwen2.5-VL / Qwen3-VL shapes), the builder, random layouts'
// JSON round trip, and validation errors that name the offending field (test_layout_json.cpp has
// the JSON forms).

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "common/random.h"
#include "common/errors.h"
#include "mmsparse/layout.h"
#include "mmsparse/status.h"

namespace mmsparse {
namespace {

using testing::capture_error;

using ::testing::HasSubstr;

constexpr auto kText = Modality::kText;
constexpr auto kImage = Modality::kImage;
constexpr auto kVideo = Modality::kVideo;

void append(std::vector<uint8_t>& types, Modality modality, int64_t count) {
  types.insert(types.end(), static_cast<std::size_t>(count), static_cast<uint8_t>(modality));
}

std::vector<Grid> grids_of(const ModalityLayout& layout, Modality modality) {
  std::vector<Grid> grids;
  for (const Media& media : layout.media()) {
    if (media.modality == modality) grids.push_back(media.grid);
  }
  return grids;
}

ModalityLayout from_types_like(const ModalityLayout& layout) {
  return ModalityLayout::from_token_types(layout.token_types(), grids_of(layout, kImage),
                                          grids_of(layout, kVideo));
}

std::vector<Media> without_markers(std::vector<Media> media) {
  for (Media& item : media) item.start_marker = item.end_marker = -1;
  return media;
}

Grid random_grid(test::Random& random, Modality modality) {
  constexpr int64_t kMaxFrames = 5;
  constexpr int64_t kMaxSide = 5;
  return Grid{modality == kImage ? 1 : random.uniform_int(1, kMaxFrames),
              random.uniform_int(1, kMaxSide), random.uniform_int(1, kMaxSide)};
}

// Text, images and videos in random order, with and without markers and timestamp separators.
ModalityLayout random_layout(test::Random& random) {
  constexpr int64_t kMaxItems = 8;
  constexpr int64_t kMaxText = 12;
  constexpr int64_t kMaxSeparator = 4;
  LayoutBuilder builder;
  const int64_t items = random.uniform_int(1, kMaxItems);
  for (int64_t i = 0; i < items; ++i) {
    switch (random.uniform_int(0, kNumModalities - 1)) {
      case 0: builder.text(random.uniform_int(1, kMaxText)); break;
      case 1: builder.image(random_grid(random, kImage), random.bernoulli(0.5)); break;
      default:
        builder.video(random_grid(random, kVideo), random.uniform_int(0, kMaxSeparator),
                      random.bernoulli(0.5));
    }
  }
  return builder.build();
}

void expect_token_arrays_consistent(const ModalityLayout& layout) {
  const std::vector<uint8_t> types = layout.token_types();
  const std::vector<int32_t> media = layout.token_media();
  const std::vector<int64_t> frames = layout.token_frames();
  ASSERT_EQ(types.size(), static_cast<std::size_t>(layout.length()));
  for (const Segment& segment : layout.segments()) {
    for (int64_t i = segment.begin; i < segment.end; ++i) {
      ASSERT_EQ(types[i], static_cast<uint8_t>(segment.modality)) << "token " << i;
      ASSERT_EQ(media[i], segment.media) << "token " << i;
      const int64_t expected_frame =
          segment.modality == kVideo
              ? segment.first_frame +
                    (i - segment.begin) / layout.media()[segment.media].grid.frame_tokens()
              : -1;
      ASSERT_EQ(frames[i], expected_frame) << "token " << i;
    }
  }
}

TEST(LayoutFromTokenTypes, Qwen25VideoIsOneContiguousSegment) {
  test::Random random;
  SCOPED_TRACE(random.trace());
  const Grid grid = random_grid(random, kVideo);
  const int64_t prompt = random.uniform_int(1, 20);
  const int64_t question = random.uniform_int(1, 20);
  // "<prompt> <vision_start> t × h × w video tokens <vision_end> <question>"
  std::vector<uint8_t> types;
  append(types, kText, prompt + 1);
  append(types, kVideo, grid.tokens());
  append(types, kText, 1 + question);
  const std::vector<Grid> videos{grid};
  const ModalityLayout layout = ModalityLayout::from_token_types(types, {}, videos);

  const int64_t video_begin = prompt + 1;
  const int64_t video_end = video_begin + grid.tokens();
  const std::vector<Segment> expected{{kText, 0, video_begin, -1, 0},
                                      {kVideo, video_begin, video_end, 0, 0},
                                      {kText, video_end, video_end + 1 + question, -1, 0}};
  EXPECT_EQ(layout.segments(), expected);
  EXPECT_EQ(layout.media(), (std::vector<Media>{{kVideo, grid, -1, -1}}));
  EXPECT_EQ(layout.token_types(), types);
  EXPECT_EQ(layout.video_frame_tokens(), grid.h * grid.w);
  EXPECT_TRUE(layout.is_mixed());
  const std::vector<int64_t> frames = layout.token_frames();
  EXPECT_EQ(frames[video_begin], 0);
  EXPECT_EQ(frames[video_end - 1], grid.t - 1);
  expect_token_arrays_consistent(layout);

  // The builder describes the same sequence, and knows where the markers are.
  const ModalityLayout built = LayoutBuilder().text(prompt).video(grid).text(question).build();
  EXPECT_EQ(built.segments(), layout.segments());
  EXPECT_EQ(built.media()[0].start_marker, prompt);
  EXPECT_EQ(built.media()[0].end_marker, video_end);
}

TEST(LayoutFromTokenTypes, Qwen3VideoContinuesAcrossTimestampText) {
  test::Random random;
  SCOPED_TRACE(random.trace());
  const Grid grid{random.uniform_int(2, 6), random.uniform_int(1, 5), random.uniform_int(1, 5)};
  constexpr int64_t kMaxTimestampTokens = 5;
  // Per temporal step: "<t seconds> <vision_start> frame tokens <vision_end>"; timestamps vary
  // in length, so the frame period is not fixed.
  std::vector<uint8_t> types;
  std::vector<int64_t> frame_begins;
  append(types, kText, random.uniform_int(1, 10));
  for (int64_t frame = 0; frame < grid.t; ++frame) {
    append(types, kText, random.uniform_int(1, kMaxTimestampTokens) + 1);
    frame_begins.push_back(static_cast<int64_t>(types.size()));
    append(types, kVideo, grid.frame_tokens());
    append(types, kText, 1);
  }
  const std::vector<Grid> videos{grid};
  const ModalityLayout layout = ModalityLayout::from_token_types(types, {}, videos);

  ASSERT_EQ(layout.media().size(), 1u);
  std::vector<Segment> video_segments;
  for (const Segment& segment : layout.segments()) {
    if (segment.modality == kVideo) video_segments.push_back(segment);
  }
  ASSERT_EQ(video_segments.size(), static_cast<std::size_t>(grid.t));
  for (int64_t frame = 0; frame < grid.t; ++frame) {
    const Segment& segment = video_segments[frame];
    EXPECT_EQ(segment.begin, frame_begins[frame]);
    EXPECT_EQ(segment.length(), grid.frame_tokens());
    EXPECT_EQ(segment.media, 0);
    EXPECT_EQ(segment.first_frame, frame);
  }
  EXPECT_EQ(layout.token_types(), types);
  expect_token_arrays_consistent(layout);
}

TEST(LayoutFromTokenTypes, SeveralImagesWithTextBetween) {
  test::Random random;
  SCOPED_TRACE(random.trace());
  const int64_t count = random.uniform_int(2, 6);
  std::vector<Grid> grids;
  std::vector<int64_t> begins;
  std::vector<uint8_t> types;
  for (int64_t i = 0; i < count; ++i) {
    grids.push_back(random_grid(random, kImage));
    append(types, kText, random.uniform_int(1, 6));
    begins.push_back(static_cast<int64_t>(types.size()));
    append(types, kImage, grids.back().tokens());
  }
  const ModalityLayout layout = ModalityLayout::from_token_types(types, grids, {});
  ASSERT_EQ(layout.media().size(), static_cast<std::size_t>(count));
  ASSERT_EQ(layout.segments().size(), static_cast<std::size_t>(2 * count));
  for (int64_t i = 0; i < count; ++i) {
    EXPECT_EQ(layout.media()[i], (Media{kImage, grids[i], -1, -1}));
    EXPECT_EQ(
        layout.segments()[2 * i + 1],
        (Segment{kImage, begins[i], begins[i] + grids[i].tokens(), static_cast<int32_t>(i), 0}));
  }
  EXPECT_EQ(layout.video_frame_tokens(), 0);
  expect_token_arrays_consistent(layout);
}

TEST(LayoutFromTokenTypes, AdjacentMediaAreSplitByTheirGrids) {
  test::Random random;
  SCOPED_TRACE(random.trace());
  for (Modality modality : {kImage, kVideo}) {
    const std::vector<Grid> grids{random_grid(random, modality), random_grid(random, modality),
                                  random_grid(random, modality)};
    std::vector<uint8_t> types;
    append(types, kText, 1);
    for (const Grid& grid : grids) append(types, modality, grid.tokens());
    const std::vector<Grid> none;
    const ModalityLayout layout = ModalityLayout::from_token_types(
        types, modality == kImage ? grids : none, modality == kVideo ? grids : none);
    ASSERT_EQ(layout.segments().size(), grids.size() + 1);
    int64_t begin = 1;
    for (std::size_t i = 0; i < grids.size(); ++i) {
      const Segment& segment = layout.segments()[i + 1];
      EXPECT_EQ(segment,
                (Segment{modality, begin, begin + grids[i].tokens(), static_cast<int32_t>(i), 0}));
      begin = segment.end;
    }
  }
}

TEST(LayoutFromTokenTypes, InterleavedTextVideoAndImages) {
  test::Random random;
  SCOPED_TRACE(random.trace());
  const Grid image_a = random_grid(random, kImage);
  const Grid image_b = random_grid(random, kImage);
  const Grid video_a{2, random.uniform_int(1, 4), random.uniform_int(1, 4)};
  const Grid video_b = random_grid(random, kVideo);
  std::vector<uint8_t> types;
  append(types, kText, 3);
  append(types, kImage, image_a.tokens());
  append(types, kText, 2);
  append(types, kVideo, video_a.frame_tokens());
  append(types, kText, 4);  // timestamp between the two frames of video_a
  append(types, kVideo, video_a.frame_tokens());
  append(types, kText, 2);
  append(types, kImage, image_b.tokens());
  append(types, kVideo, video_b.tokens());  // directly after the image
  append(types, kText, 5);
  const std::vector<Grid> images{image_a, image_b};
  const std::vector<Grid> videos{video_a, video_b};
  const ModalityLayout layout = ModalityLayout::from_token_types(types, images, videos);

  const std::vector<Media> expected_media{{kImage, image_a, -1, -1},
                                          {kVideo, video_a, -1, -1},
                                          {kImage, image_b, -1, -1},
                                          {kVideo, video_b, -1, -1}};
  EXPECT_EQ(layout.media(), expected_media);
  std::vector<int32_t> segment_media;
  std::vector<int64_t> first_frames;
  for (const Segment& segment : layout.segments()) {
    segment_media.push_back(segment.media);
    first_frames.push_back(segment.first_frame);
  }
  EXPECT_EQ(segment_media, (std::vector<int32_t>{-1, 0, -1, 1, -1, 1, -1, 2, 3, -1}));
  EXPECT_EQ(first_frames, (std::vector<int64_t>{0, 0, 0, 0, 0, 1, 0, 0, 0, 0}));
  EXPECT_EQ(layout.video_frame_tokens(), video_a.frame_tokens());
  EXPECT_TRUE(layout.is_mixed());
  expect_token_arrays_consistent(layout);
}

// MM-NIAH-style: one video whose clips are interrupted by documents and images.
TEST(LayoutFromTokenTypes, VideoContinuesAcrossImagesAndText) {
  test::Random random;
  SCOPED_TRACE(random.trace());
  const Grid video{4, random.uniform_int(1, 4), random.uniform_int(1, 4)};
  const Grid image = random_grid(random, kImage);
  const int64_t document = random.uniform_int(1, 9);
  const int64_t clip = 2 * video.frame_tokens();
  const int64_t image_begin = 1 + clip + document;
  const int64_t second_clip = image_begin + image.tokens() + document;
  std::vector<uint8_t> types;
  append(types, kText, 1);
  append(types, kVideo, clip);
  append(types, kText, document);
  append(types, kImage, image.tokens());
  append(types, kText, document);
  append(types, kVideo, clip);
  append(types, kText, 1);
  const std::vector<Grid> images{image};
  const std::vector<Grid> videos{video};
  const ModalityLayout layout = ModalityLayout::from_token_types(types, images, videos);

  const std::vector<Segment> expected{{kText, 0, 1, -1, 0},
                                      {kVideo, 1, 1 + clip, 0, 0},
                                      {kText, 1 + clip, image_begin, -1, 0},
                                      {kImage, image_begin, image_begin + image.tokens(), 1, 0},
                                      {kText, image_begin + image.tokens(), second_clip, -1, 0},
                                      {kVideo, second_clip, second_clip + clip, 0, 2},
                                      {kText, second_clip + clip, second_clip + clip + 1, -1, 0}};
  EXPECT_EQ(layout.segments(), expected);
  EXPECT_EQ(layout.media(), (std::vector<Media>{{kVideo, video, -1, -1}, {kImage, image, -1, -1}}));
  EXPECT_EQ(ModalityLayout::from_json(layout.to_json()), layout);
  expect_token_arrays_consistent(layout);
}

TEST(LayoutFromTokenTypes, RandomBuiltLayoutsAreRecovered) {
  test::Random random;
  SCOPED_TRACE(random.trace());
  constexpr int kLayouts = 200;
  for (int i = 0; i < kLayouts; ++i) {
    const ModalityLayout built = random_layout(random);
    SCOPED_TRACE(built.to_json());
    const ModalityLayout recovered = from_types_like(built);
    ASSERT_EQ(recovered.segments(), built.segments());
    ASSERT_EQ(recovered.media(), without_markers(built.media()));
    expect_token_arrays_consistent(built);
  }
}

TEST(LayoutFromTokenTypes, ErrorsNameTheTokenOrMedia) {
  // text 2, video frame 0, text 1 (timestamp), video frames 1-2, text 1; video grid [3, 2, 2].
  const std::vector<Grid> grid{{3, 2, 2}};
  std::vector<uint8_t> good;
  append(good, kText, 2);
  append(good, kVideo, 4);
  append(good, kText, 1);
  append(good, kVideo, 8);
  append(good, kText, 1);
  ASSERT_NO_THROW(ModalityLayout::from_token_types(good, {}, grid));

  struct Case {
    std::string name;
    std::function<void()> call;
    std::string message;
  };
  const std::vector<Grid> none;
  const std::vector<Grid> image_2x2{{1, 2, 2}};
  const std::vector<Case> cases{
      {"unknown type code",
       [&] {
         std::vector<uint8_t> types = good;
         types[3] = 7;
         ModalityLayout::from_token_types(types, {}, grid);
       },
       "token_types[3]: expected 0 (text), 1 (image) or 2 (video), got 7"},
      {"too few video grids", [&] { ModalityLayout::from_token_types(good, {}, none); },
       "video_grids: expected a grid for video[0] starting at token 2, got 0 grids"},
      {"too many video grids",
       [&] {
         const std::vector<Grid> two{{3, 2, 2}, {1, 1, 1}};
         ModalityLayout::from_token_types(good, {}, two);
       },
       "video_grids: expected 1 grids (one per video in token_types), got 2"},
      {"too many image grids", [&] { ModalityLayout::from_token_types(good, image_2x2, grid); },
       "image_grids: expected 0 grids (one per image in token_types), got 1"},
      {"video shorter than its grid",
       [&] {
         const std::vector<Grid> longer{{4, 2, 2}};
         ModalityLayout::from_token_types(good, {}, longer);
       },
       "video[0] tokens: expected 16 (grid [4, 2, 2]), got 12 before the end of the sequence"},
      {"video split inside a frame",
       [&] {
         std::vector<uint8_t> types = good;
         types[5] = static_cast<uint8_t>(kText);
         ModalityLayout::from_token_types(types, {}, grid);
       },
       "video[0] tokens: expected whole frames of 4 tokens (grid [3, 2, 2]), got 3 video tokens"},
      {"image run shorter than its grid",
       [&] {
         std::vector<uint8_t> types;
         append(types, kImage, 4);
         const std::vector<Grid> bigger{{1, 2, 3}};
         ModalityLayout::from_token_types(types, bigger, {});
       },
       "image[0] tokens: expected 6 (grid [1, 2, 3]), got 4 image tokens in [0, 4)"},
      {"image run longer than its grids",
       [&] {
         std::vector<uint8_t> types;
         append(types, kImage, 6);
         ModalityLayout::from_token_types(types, image_2x2, {});
       },
       "image_grids: expected a grid for image[1] starting at token 4, got 1 grids"},
      {"image grid with frames",
       [&] {
         const std::vector<Grid> bad{{2, 2, 2}};
         ModalityLayout::from_token_types(good, bad, grid);
       },
       "image_grids[0]: expected t = 1 for an image, got [2, 2, 2]"},
      {"non-positive video grid",
       [&] {
         const std::vector<Grid> bad{{3, 0, 2}};
         ModalityLayout::from_token_types(good, {}, bad);
       },
       "video_grids[0]: expected positive extents [t, h, w], got [3, 0, 2]"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const Error error = capture_error(c.call);
    EXPECT_EQ(error.code(), ErrorCode::kInvalidArgument);
    EXPECT_THAT(error.what(), HasSubstr(c.message));
  }
}

// A valid layout to break one field at a time: video [3, 2, 2] with a timestamp between frames 0
// and 1, and markers.
struct Parts {
  std::vector<Segment> segments{{kText, 0, 2, -1, 0},
                                {kVideo, 2, 6, 0, 0},
                                {kText, 6, 7, -1, 0},
                                {kVideo, 7, 15, 0, 1},
                                {kText, 15, 16, -1, 0}};
  std::vector<Media> media{{kVideo, Grid{3, 2, 2}, 1, 15}};
};

// Text, image [1, 2, 2] with markers, text.
Parts image_parts() {
  Parts parts;
  parts.segments = {{kText, 0, 1, -1, 0}, {kImage, 1, 5, 0, 0}, {kText, 5, 6, -1, 0}};
  parts.media = {{kImage, Grid{1, 2, 2}, 0, 5}};
  return parts;
}

TEST(LayoutValidation, ErrorsNameTheField) {
  ASSERT_NO_THROW(ModalityLayout(Parts{}.segments, Parts{}.media));
  ASSERT_NO_THROW(ModalityLayout(image_parts().segments, image_parts().media));
  struct Case {
    std::string name;
    std::function<void(Parts&)> breaks;
    std::string message;
  };
  const std::vector<Case> cases{
      {"not from 0", [](Parts& p) { p.segments[0].begin = 1; },
       "segments[0].begin: expected 0 (segments sorted and contiguous from 0), got 1"},
      {"gap", [](Parts& p) { p.segments[1].begin = 3; }, "segments[1].begin: expected 2"},
      {"unsorted", [](Parts& p) { std::swap(p.segments[1], p.segments[2]); },
       "segments[1].begin: expected 2"},
      {"empty segment",
       [](Parts& p) {
         p.segments.insert(p.segments.begin() + 1, Segment{kVideo, 2, 2, 0, 0});
       },
       "segments[1].end: expected > begin 2 (segments are non-empty), got 2"},
      {"not maximal",
       [](Parts& p) {
         p.segments[0].end = 1;
         p.segments.insert(p.segments.begin() + 1, Segment{kText, 1, 2, -1, 0});
       },
       "segments[1]: expected a different modality or media than segments[0]"},
      {"text with media", [](Parts& p) { p.segments[0].media = 0; },
       "segments[0].media: expected -1 for text, got 0"},
      {"text with a frame", [](Parts& p) { p.segments[2].first_frame = 1; },
       "segments[2].first_frame: expected 0 for text, got 1"},
      {"media out of range", [](Parts& p) { p.segments[3].media = 1; },
       "segments[3].media: expected an index into 1 media items, got 1"},
      {"negative media", [](Parts& p) { p.segments[1].media = -1; },
       "segments[1].media: expected an index into 1 media items, got -1"},
      {"modality differs from its media", [](Parts& p) { p.segments[1].modality = kImage; },
       "segments[1].modality: expected video like media[0], got image"},
      {"video split inside a frame",
       [](Parts& p) {
         p.segments[1].end = 5;
         p.segments[2].begin = 5;
       },
       "segments[1].length: expected whole frames: a multiple of 4 tokens of media[0], got 3"},
      {"frames out of order", [](Parts& p) { p.segments[3].first_frame = 2; },
       "segments[3].first_frame: expected 1 (frames continue in order), got 2"},
      {"video tokens differ from its grid", [](Parts& p) { p.media[0].grid.t = 4; },
       "media[0] tokens: expected 16 (grid [4, 2, 2]), got 12"},
      {"non-positive grid", [](Parts& p) { p.media[0].grid.h = 0; },
       "media[0].grid: expected positive extents [t, h, w], got [3, 0, 2]"},
      {"overflowing grid",
       [](Parts& p) {
         p.media[0].grid = {1 << 30, 1 << 30, 1 << 30};
       },
       "media[0].grid: expected a token count that fits in 64 bits"},
      {"text media", [](Parts& p) { p.media[0].modality = kText; },
       "media[0].modality: expected image or video, got text"},
      {"unused media",
       [](Parts& p) {
         p.media.push_back(Media{kImage, Grid{1, 1, 3}, -1, -1});
       },
       "media[1] tokens: expected 3 (grid [1, 1, 3]), got 0"},
      {"start marker outside", [](Parts& p) { p.media[0].start_marker = 16; },
       "media[0].start_marker: expected -1 or a position in [0, 16), got 16"},
      {"negative end marker", [](Parts& p) { p.media[0].end_marker = -2; },
       "media[0].end_marker: expected -1 or a position in [0, 16), got -2"},
      {"marker on a video token", [](Parts& p) { p.media[0].end_marker = 3; },
       "media[0].end_marker: expected the position of a text token, got video token at 3"},
      {"start marker after the media begins", [](Parts& p) { p.media[0].start_marker = 6; },
       "media[0].start_marker: expected a position before the media's first token 2, got 6"},
      {"end marker before the media ends", [](Parts& p) { p.media[0].end_marker = 6; },
       "media[0].end_marker: expected a position after the media's last token 14, got 6"},
      {"image with frames",
       [](Parts& p) {
         p = image_parts();
         p.media[0].grid.t = 2;
       },
       "media[0].grid: expected t = 1 for an image, got [2, 2, 2]"},
      {"image tokens differ from its grid",
       [](Parts& p) {
         p = image_parts();
         p.media[0].grid.w = 3;
       },
       "media[0] tokens: expected 6 (grid [1, 2, 3]), got 4"},
      {"image in two segments",
       [](Parts& p) {
         p = image_parts();
         p.segments = {{kText, 0, 1, -1, 0},
                       {kImage, 1, 3, 0, 0},
                       {kText, 3, 4, -1, 0},
                       {kImage, 4, 6, 0, 0},
                       {kText, 6, 7, -1, 0}};
         p.media[0].end_marker = 6;
       },
       "segments[3]: expected one segment per image (media[0] already began at 1)"},
      {"media numbered out of order",
       [](Parts& p) {
         p = image_parts();
         p.segments[1].media = 1;
         p.segments.push_back(Segment{kImage, 6, 10, 0, 0});
         p.media.push_back(p.media[0]);
       },
       "segments[1].media: expected at most 0 (media are numbered in order of first appearance), "
       "got 1"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Parts parts;
    c.breaks(parts);
    const Error error = capture_error([&] { ModalityLayout(parts.segments, parts.media); });
    EXPECT_EQ(error.code(), ErrorCode::kInvalidArgument);
    EXPECT_THAT(error.what(), HasSubstr(c.message));
  }
}

TEST(LayoutBuilder, MarkersAndFrameSeparators) {
  const ModalityLayout layout =
      LayoutBuilder().text(3).video(Grid{3, 2, 2}, 2).text(1).image(Grid{1, 1, 2}, false).build();
  const std::vector<Segment> expected{{kText, 0, 4, -1, 0},   {kVideo, 4, 8, 0, 0},
                                      {kText, 8, 10, -1, 0},  {kVideo, 10, 14, 0, 1},
                                      {kText, 14, 16, -1, 0}, {kVideo, 16, 20, 0, 2},
                                      {kText, 20, 22, -1, 0}, {kImage, 22, 24, 1, 0}};
  EXPECT_EQ(layout.segments(), expected);
  EXPECT_EQ(layout.media(),
            (std::vector<Media>{{kVideo, Grid{3, 2, 2}, 3, 20}, {kImage, Grid{1, 1, 2}, -1, -1}}));
  EXPECT_EQ(layout.length(), 24);
}

TEST(LayoutBuilder, RejectsBadArguments) {
  Error error = capture_error([] { LayoutBuilder().text(0); });
  EXPECT_THAT(error.what(), HasSubstr("text length: expected > 0, got 0"));
  error = capture_error([] { LayoutBuilder().video(Grid{2, 2, 2}, -1); });
  EXPECT_THAT(error.what(), HasSubstr("frame_separator: expected >= 0, got -1"));
  error = capture_error([] { LayoutBuilder().video(Grid{2, 1, 1}).image(Grid{3, 2, 2}); });
  EXPECT_THAT(error.what(), HasSubstr("media[1].grid: expected t = 1 for an image, got [3, 2, 2]"));
  EXPECT_EQ(error.code(), ErrorCode::kInvalidArgument);
}

TEST(ModalityLayout, TokenArraysOfASmallLayout) {
  const ModalityLayout layout =
      LayoutBuilder().text(1).image(Grid{1, 1, 2}, false).video(Grid{2, 1, 1}, 1, false).build();
  EXPECT_EQ(layout.token_types(), (std::vector<uint8_t>{0, 1, 1, 2, 0, 2}));
  EXPECT_EQ(layout.token_media(), (std::vector<int32_t>{-1, 0, 0, 1, -1, 1}));
  EXPECT_EQ(layout.token_frames(), (std::vector<int64_t>{-1, -1, -1, 0, -1, 1}));
  EXPECT_EQ(layout.video_frame_tokens(), 1);
}

TEST(ModalityLayout, TextOnlyAndEmpty) {
  const ModalityLayout text = ModalityLayout::text_only(5);
  EXPECT_EQ(text.segments(), (std::vector<Segment>{{kText, 0, 5, -1, 0}}));
  EXPECT_FALSE(text.is_mixed());
  EXPECT_EQ(text.video_frame_tokens(), 0);
  EXPECT_EQ(text.token_frames(), std::vector<int64_t>(5, -1));
  EXPECT_TRUE(ModalityLayout::text_only(0).empty());
  EXPECT_EQ(ModalityLayout::text_only(0), ModalityLayout());
  EXPECT_FALSE(ModalityLayout().is_mixed());
  EXPECT_FALSE(LayoutBuilder().video(Grid{2, 2, 2}, 0, false).build().is_mixed());
  const Error error = capture_error([] { ModalityLayout::text_only(-1); });
  EXPECT_THAT(error.what(), HasSubstr("length: expected >= 0, got -1"));
  EXPECT_EQ(modality_name(kText), "text");
  EXPECT_EQ(modality_name(kImage), "image");
  EXPECT_EQ(modality_name(kVideo), "video");
}

TEST(LayoutJson, RandomLayoutsRoundTripExactly) {
  test::Random random;
  SCOPED_TRACE(random.trace());
  constexpr int kLayouts = 200;
  for (int i = 0; i < kLayouts; ++i) {
    const ModalityLayout layout = random_layout(random);
    const std::string json = layout.to_json();
    SCOPED_TRACE(json);
    const ModalityLayout read = ModalityLayout::from_json(json);
    ASSERT_EQ(read, layout);
    ASSERT_EQ(read.to_json(), json);
    ASSERT_EQ(ModalityLayout::from_json(from_types_like(layout).to_json()),
              from_types_like(layout));
  }
}

}  // namespace
}  // namespace mmsparse
