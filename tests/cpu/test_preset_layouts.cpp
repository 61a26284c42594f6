// Layouts of the interleaved presets: where the video of mixed-interleaved ends relative to the
// final question, and the Qwen3-VL-style preset's timestamped frames, at many lengths.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "mmsparse/layout.h"
#include "mmsparse/tools/workload.h"

namespace mmsparse {
namespace {

// Lengths that end the block sequence at every kind of unit (clip, document, image), among them
// 4096 and 20000, where the end marker once fell after a cut document.
constexpr int64_t kLengths[] = {1000,  2048,  3000,  4096,  6000,  8192,
                                12345, 20000, 33333, 50001, 77777, 131072};
// The final question's own tokens beyond the video's last frame: its minimum (32 with the chat
// template's tail) and the end marker, rounded up.
constexpr int64_t kQuestionAllowance = 64;

WorkloadSpec spec_of(const std::string& preset, int64_t seq_len) {
  WorkloadSpec spec;
  spec.preset = preset;
  spec.seq_len = seq_len;
  return spec;
}

// The last segment of `media`.
const Segment& last_segment_of(const ModalityLayout& layout, int32_t media) {
  const auto& segments = layout.segments();
  const auto found = std::find_if(segments.rbegin(), segments.rend(),
                                  [&](const Segment& segment) { return segment.media == media; });
  EXPECT_NE(found, segments.rend());
  return *found;
}

TEST(PresetLayouts, MixedVideoEndsRightBeforeTheQuestionAtEveryLength) {
  for (int64_t seq_len : kLengths) {
    SCOPED_TRACE("seq_len " + std::to_string(seq_len));
    const Workload workload = Workload::create(spec_of("mixed-interleaved", seq_len));
    const ModalityLayout& layout = workload.layout();
    ASSERT_EQ(layout.length(), seq_len);
    const Media& video = layout.media().front();
    ASSERT_EQ(video.modality, Modality::kVideo);
    // The video ends with a frame, its end marker right after it, and the question after that:
    // no document between the video and the question rows.
    EXPECT_EQ(video.end_marker, last_segment_of(layout, 0).end);
    EXPECT_EQ(workload.question_begin(), video.end_marker);
    EXPECT_LT(seq_len - video.end_marker, video.grid.frame_tokens() + kQuestionAllowance);
    for (const Media& media : layout.media()) EXPECT_LT(media.end_marker, video.end_marker + 1);
  }
}

TEST(PresetLayouts, Qwen3TimestampsPrecedeEveryFrameAndVideosDiffer) {
  const PresetInfo* info = nullptr;
  for (const PresetInfo& preset : workload_presets()) {
    if (preset.name == "video-qwen3vl-128k") info = &preset;
  }
  ASSERT_NE(info, nullptr);
  EXPECT_NE(info->description.find("SYNTHETIC"), std::string::npos);
  const Workload workload = Workload::create(spec_of(info->name, 0));
  const ModalityLayout& layout = workload.layout();
  ASSERT_EQ(layout.length(), info->seq_len);

  std::set<int64_t> frame_sizes;
  int64_t videos = 0, images = 0;
  const auto& segments = layout.segments();
  for (int32_t m = 0; m < static_cast<int32_t>(layout.media().size()); ++m) {
    const Media& media = layout.media()[m];
    if (media.modality == Modality::kImage) {
      ++images;
      continue;
    }
    ++videos;
    frame_sizes.insert(media.grid.frame_tokens());
    // One segment per frame, each after text (its timestamp and markers); the text between
    // frames is not of one length, so the frame period is not constant.
    std::vector<const Segment*> frames;
    for (const Segment& segment : segments) {
      if (segment.media == m) frames.push_back(&segment);
    }
    ASSERT_EQ(static_cast<int64_t>(frames.size()), media.grid.t);
    std::set<int64_t> gaps;
    for (std::size_t f = 0; f < frames.size(); ++f) {
      EXPECT_EQ(frames[f]->length(), media.grid.frame_tokens());
      EXPECT_EQ(frames[f]->first_frame, static_cast<int64_t>(f));
      if (f > 0) gaps.insert(frames[f]->begin - frames[f - 1]->end);
    }
    if (media.grid.t > 10) EXPECT_GE(gaps.size(), 2u) << "timestamps of one and two digits";
    for (int64_t gap : gaps) EXPECT_GT(gap, 2) << "vision_end, timestamp, vision_start";
    EXPECT_EQ(media.start_marker + 1, frames.front()->begin);
    EXPECT_EQ(media.end_marker, frames.back()->end);
    EXPECT_GT(media.start_marker, 0);
    EXPECT_EQ(layout.token_types()[media.start_marker - 1], static_cast<uint8_t>(Modality::kText))
        << "the first timestamp";
  }
  EXPECT_GE(videos, 3);
  EXPECT_GE(frame_sizes.size(), 2u);
  EXPECT_GE(images, 2);
  EXPECT_EQ(workload.question_begin(), layout.media().back().end_marker);
}

TEST(PresetLayouts, Qwen3ScalesToAnyLengthAndGenerates) {
  for (int64_t seq_len : kLengths) {
    SCOPED_TRACE("seq_len " + std::to_string(seq_len));
    const Workload workload = Workload::create(spec_of("video-qwen3vl-128k", seq_len));
    const ModalityLayout& layout = workload.layout();
    EXPECT_EQ(layout.length(), seq_len);
    EXPECT_EQ(layout.media().front().modality, Modality::kVideo);
    // Steps fill what images leave: the question is its minimum and less than one step more.
    int64_t largest_step = 0;
    for (const Media& media : layout.media()) {
      if (media.modality == Modality::kVideo) {
        largest_step = std::max(largest_step, media.grid.frame_tokens());
      }
    }
    EXPECT_EQ(workload.question_begin(), layout.media().back().end_marker);
    EXPECT_LT(seq_len - workload.question_begin(), largest_step + kQuestionAllowance);
  }
  WorkloadSpec small = spec_of("video-qwen3vl-128k", 3000);
  small.q_heads = 2;
  small.kv_heads = 1;
  small.head_dim = 16;
  small.needles = 2;
  const Workload workload = Workload::create(small);
  EXPECT_EQ(workload.needles().size(), 2u);
  const Workload::Tensors tensors = workload.materialize(DType::kFloat32);
  EXPECT_EQ(tensors.q.view().shape[1], 3000);
}

}  // namespace
}  // namespace mmsparse
