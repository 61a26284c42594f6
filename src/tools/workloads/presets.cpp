// Preset layouts: Qwen2.5-VL-like token sequences for the synthetic workloads.
//
// A preset is a recipe of units: the system prompt, video frames (one temporal step of merged
// tokens each), images with captions, text documents, the final question. A requested length is
// met exactly: whole units are added while they fit, and the remainder goes to text the recipe can
// stretch (the final question of the video presets, the captions of the multi-image preset, the
// last document — or the question — of the mixed preset). docs/workloads.md lists what each preset
// looks like at its own length and how it scales.

#include "tools/workloads/presets.h"

#include <algorithm>
#include <array>
#include <functional>
#include <string>
#include <vector>

#include "mmsparse/status.h"
#include "mmsparse/tools/workload.h"

namespace mmsparse {
namespace {

// Qwen2.5-VL's chat template before the user content ("<|im_start|>system\nYou are a helpful
// assistant.<|im_end|>\n<|im_start|>user\n") is about 20 tokens.
constexpr int64_t kSystemPromptTokens = 20;
// The shortest final question, with the template's "<|im_end|>\n<|im_start|>assistant\n" tail.
constexpr int64_t kMinQuestionTokens = 32;
// MM-NIAH's counting tasks plant several needles; four keeps each in its own stretch of media.
constexpr int64_t kMixedPresetNeedles = 4;
// One vision_start and one vision_end token around every media item.
constexpr int64_t kMarkerPair = 2;
constexpr int64_t kMarkerTokens = 1;
// The lengths the presets are named after.
constexpr int64_t kLength128k = 131072;
constexpr int64_t kLength1m = 1048576;
// Requests beyond this are refused: every generated tensor is linear in the length, and at 16M
// tokens one head of fp32 rows already takes 8 GiB.
constexpr int64_t kMaxSeqLen = int64_t{1} << 24;

// One temporal step of 448×784-px frames: Qwen2.5-VL merges 2 frames × 28×28 px into one token,
// so a step is 16×28 tokens.
constexpr Grid kVideoStep128k{1, 16, 28};
// Hour-long videos are sampled at lower resolution to fit Qwen2.5-VL's total pixel budget:
// 336×560 px, 12×20 tokens per step.
constexpr Grid kVideoStep1m{1, 12, 20};

// BlindSight runs Qwen with 1280..5120 tokens per image; a cycle of sizes and aspect ratios in
// that range (mean about 2870 tokens).
constexpr std::array<Grid, 6> kImageGrids{
    {{1, 32, 40}, {1, 48, 64}, {1, 36, 48}, {1, 64, 80}, {1, 56, 56}, {1, 40, 72}}};
// "Picture 3:" label and newline before every image.
constexpr int64_t kImageCaptionTokens = 8;
// With fewer images the preset would not be multi-image: short requests shrink the grids instead.
constexpr int64_t kMinImages = 4;
// Grids shrink by halving until this side length; smaller images have no spatial structure.
constexpr int64_t kMinImageSide = 4;

// MM-NIAH-style mixing: clips of one video, text documents after every clip, an image after every
// third document. Documents cycle through lengths so that text is about 25% of the tokens.
constexpr int64_t kMixedClipSteps = 8;
constexpr std::array<int64_t, 4> kMixedDocuments{1024, 1792, 768, 1536};
constexpr int64_t kMixedImageEvery = 3;
constexpr Grid kMixedImage{1, 32, 32};

[[noreturn]] void throw_too_short(std::string_view preset, int64_t minimum, int64_t seq_len) {
  throw_invalid_argument("seq_len",
                         ">= " + std::to_string(minimum) + " for preset '" + std::string(preset) +
                             "' (its smallest form)",
                         std::to_string(seq_len));
}

// System prompt, one video of as many steps as fit, the question taking the rest.
ModalityLayout video_layout(std::string_view preset, Grid step, int64_t seq_len) {
  const int64_t fixed = kSystemPromptTokens + kMarkerPair + kMinQuestionTokens;
  const int64_t steps = (seq_len - fixed) / step.frame_tokens();
  if (seq_len < fixed || steps < 1) throw_too_short(preset, fixed + step.frame_tokens(), seq_len);
  const int64_t question =
      seq_len - kSystemPromptTokens - kMarkerPair - steps * step.frame_tokens();
  return LayoutBuilder()
      .text(kSystemPromptTokens)
      .video(Grid{steps, step.h, step.w})
      .text(question)
      .build();
}

// The image grids that fit in `budget` tokens (with captions and markers), taken from the cycle
// with every side divided by `shrink`.
std::vector<Grid> images_that_fit(int64_t budget, int64_t shrink, int64_t& used) {
  std::vector<Grid> grids;
  used = 0;
  for (std::size_t i = 0;; ++i) {
    const Grid& base = kImageGrids[i % kImageGrids.size()];
    const Grid grid{1, std::max(kMinImageSide, base.h / shrink),
                    std::max(kMinImageSide, base.w / shrink)};
    const int64_t cost = kImageCaptionTokens + kMarkerPair + grid.tokens();
    if (used + cost > budget) return grids;
    grids.push_back(grid);
    used += cost;
  }
}

// BlindSight-style: system prompt, captioned images, the question. The remainder is spread over
// the captions (and the question) so that the images keep their sizes.
ModalityLayout multi_image_layout(std::string_view preset, int64_t seq_len) {
  const int64_t budget = seq_len - kSystemPromptTokens - kMinQuestionTokens;
  // Once every side is at its minimum, halving further changes nothing.
  int64_t max_shrink = 1;
  for (const Grid& grid : kImageGrids) {
    while (std::max(grid.h, grid.w) / max_shrink > kMinImageSide) max_shrink *= 2;
  }
  std::vector<Grid> grids;
  int64_t used = 0;
  for (int64_t shrink = 1; shrink <= max_shrink; shrink *= 2) {
    grids = images_that_fit(budget, shrink, used);
    if (static_cast<int64_t>(grids.size()) >= kMinImages) break;
  }
  if (grids.empty()) {
    throw_too_short(preset,
                    kSystemPromptTokens + kMinQuestionTokens + kImageCaptionTokens + kMarkerPair +
                        kMinImageSide * kMinImageSide,
                    seq_len);
  }
  const int64_t count = static_cast<int64_t>(grids.size());
  const int64_t remainder = budget - used;
  LayoutBuilder builder;
  builder.text(kSystemPromptTokens);
  for (const Grid& grid : grids) builder.text(kImageCaptionTokens + remainder / count).image(grid);
  return builder.text(kMinQuestionTokens + remainder % count).build();
}

// Explicit segments for what LayoutBuilder cannot express: one video whose frames are interrupted
// by documents and images.
class SegmentWriter {
 public:
  int64_t length() const { return length_; }

  void text(int64_t length) {
    if (!segments_.empty() && segments_.back().modality == Modality::kText) {
      segments_.back().end += length;
    } else {
      segments_.push_back(Segment{Modality::kText, length_, length_ + length, -1, 0});
    }
    length_ += length;
  }

  // A video whose grid.t grows with every frame appended; its start marker comes first.
  int32_t begin_video(Grid step) {
    media_.push_back(Media{Modality::kVideo, Grid{0, step.h, step.w}, length_, -1});
    text(kMarkerTokens);
    return static_cast<int32_t>(media_.size() - 1);
  }

  void frame(int32_t video) {
    Media& media = media_[video];
    const bool continues = !segments_.empty() && segments_.back().media == video;
    if (continues) {
      segments_.back().end += media.grid.frame_tokens();
    } else {
      segments_.push_back(Segment{Modality::kVideo, length_, length_ + media.grid.frame_tokens(),
                                  video, media.grid.t});
    }
    length_ += media.grid.frame_tokens();
    ++media.grid.t;
  }

  void end_video(int32_t video) {
    media_[video].end_marker = length_;
    text(kMarkerTokens);
  }

  void image(Grid grid) {
    const auto index = static_cast<int32_t>(media_.size());
    media_.push_back(Media{Modality::kImage, grid, length_, -1});
    text(kMarkerTokens);
    segments_.push_back(Segment{Modality::kImage, length_, length_ + grid.tokens(), index, 0});
    length_ += grid.tokens();
    media_[index].end_marker = length_;
    text(kMarkerTokens);
  }

  ModalityLayout build() const { return ModalityLayout(segments_, media_); }

 private:
  std::vector<Segment> segments_;
  std::vector<Media> media_;
  int64_t length_ = 0;
};

// MM-NIAH-style: one long video interrupted, clip by clip, by text documents and captioned images
// (about 25% text). Blocks are appended while they fit whole; then frames fill what is left, so the
// video always ends with a frame and its end marker opens the final question: no document may
// sit between the video and the question, whose rows a needle task reads.
ModalityLayout mixed_layout(std::string_view preset, int64_t seq_len) {
  const Grid step = kVideoStep128k;
  const int64_t tail = kMarkerTokens + kMinQuestionTokens;  // video end marker, question
  const int64_t minimum = kSystemPromptTokens + kMarkerTokens + step.frame_tokens() + tail;
  if (seq_len < minimum) throw_too_short(preset, minimum, seq_len);
  SegmentWriter writer;
  writer.text(kSystemPromptTokens);
  const int32_t video = writer.begin_video(step);
  // While blocks are appended, room for the final frame is kept.
  const auto space = [&] { return seq_len - tail - step.frame_tokens() - writer.length(); };
  // Appends block `block`: a clip, a document, every third time an image. False once full.
  const auto append_block = [&](int64_t block) {
    for (int64_t s = 0; s < kMixedClipSteps; ++s) {
      if (space() < step.frame_tokens()) return false;
      writer.frame(video);
    }
    const int64_t document = kMixedDocuments[block % kMixedDocuments.size()];
    if (space() < document) return false;
    writer.text(document);
    if (block % kMixedImageEvery == kMixedImageEvery - 1) {
      if (space() < kImageCaptionTokens + kMarkerPair + kMixedImage.tokens()) return false;
      writer.text(kImageCaptionTokens);
      writer.image(kMixedImage);
    }
    return true;
  };
  for (int64_t block = 0; append_block(block); ++block) {
  }
  // The final frames: the one kept for, and every other that fits.
  while (seq_len - tail - writer.length() >= step.frame_tokens()) writer.frame(video);
  writer.end_video(video);
  writer.text(seq_len - writer.length());
  return writer.build();
}

// Qwen3-VL-style video: every temporal step is preceded by its timestamp as text, "<t seconds>"
// (Qwen3-VL's textual time encoding), and wrapped in its own vision_start / vision_end, so the
// frame period is not constant: the timestamp's token count grows with its digits. Several
// videos of different frame sizes (each with its own timeline) alternate with captioned images.
// Timestamp "<12.0 seconds>": '<', the digits, '.0', ' seconds', '>'.
constexpr int64_t kTimestampBaseTokens = 4;
// Qwen3-VL samples 2 fps and merges 2 frames into one temporal step: one step per second.
constexpr int64_t kSecondsPerStep = 1;
// Frame sizes of the videos, cycled: 448x784 px, 336x560 px, 640x768 px (16x28, 12x20, 20x24).
constexpr std::array<Grid, 3> kQwen3VideoSteps{{{1, 16, 28}, {1, 12, 20}, {1, 20, 24}}};
// Steps per video (fewer in the last one when the length runs out).
constexpr int64_t kQwen3StepsPerVideo = 48;

int64_t timestamp_tokens(int64_t seconds) {
  int64_t digits = 1;
  for (int64_t rest = seconds / 10; rest > 0; rest /= 10) ++digits;
  return kTimestampBaseTokens + digits;
}

// Appends a video of up to `steps` timestamped steps while `space()` allows, with its markers;
// false when not even its first step fits (then nothing is written).
bool append_timestamped_video(SegmentWriter& writer, Grid step, int64_t steps,
                              const std::function<int64_t()>& space) {
  // A step: timestamp, vision_start, frame, vision_end.
  const auto step_cost = [&](int64_t t) {
    return timestamp_tokens(t * kSecondsPerStep) + kMarkerPair + step.frame_tokens();
  };
  if (space() < step_cost(0)) return false;
  writer.text(timestamp_tokens(0));
  const int32_t video = writer.begin_video(step);
  writer.frame(video);
  // The open step's vision_end is owed: a further step must leave room for it.
  for (int64_t t = 1; t < steps && space() >= step_cost(t) + kMarkerTokens; ++t) {
    writer.text(kMarkerTokens + timestamp_tokens(t * kSecondsPerStep) + kMarkerTokens);
    writer.frame(video);
  }
  writer.end_video(video);
  return true;
}

// SYNTHETIC Qwen3-VL-like prompt: system text, then videos (timestamped steps, frame sizes cycled)
// each followed by a captioned image where it fits, while a video's first step fits; the last
// video is cut to the steps that fit; the question takes the rest (less than one step more).
ModalityLayout qwen3_video_layout(std::string_view preset, int64_t seq_len) {
  const Grid first = kQwen3VideoSteps[0];
  const int64_t minimum = kSystemPromptTokens + timestamp_tokens(0) + kMarkerPair +
                          first.frame_tokens() + kMinQuestionTokens;
  if (seq_len < minimum) throw_too_short(preset, minimum, seq_len);
  SegmentWriter writer;
  writer.text(kSystemPromptTokens);
  const auto space = [&] { return seq_len - kMinQuestionTokens - writer.length(); };
  for (std::size_t unit = 0;; ++unit) {
    const Grid step = kQwen3VideoSteps[unit % kQwen3VideoSteps.size()];
    if (!append_timestamped_video(writer, step, kQwen3StepsPerVideo, space)) break;
    // An image that does not fit is left out: the next video's steps fill the space instead, so
    // that the question stays short.
    const Grid& image = kImageGrids[unit % kImageGrids.size()];
    if (space() < kImageCaptionTokens + kMarkerPair + image.tokens()) continue;
    writer.text(kImageCaptionTokens);
    writer.image(image);
  }
  writer.text(seq_len - writer.length());
  return writer.build();
}

// SYNTHETIC video DiT (Wan2.1, HunyuanVideo): full attention over latent frames × h × w patch
// tokens, no text in front and no vision markers. 720p (1280×720 px) through the causal VAE
// (8× spatial, 4× temporal after the first frame) and 2×2 patches is 45×80 tokens per latent
// frame; Wan2.1 generates 81 frames (21 latent), HunyuanVideo 129 (33 latent).
constexpr Grid kDitFrame720p{1, 45, 80};
constexpr int64_t kWanLatentFrames = 21;      // 21 × 3600 = 75600 tokens
constexpr int64_t kHunyuanLatentFrames = 33;  // 33 × 3600 = 118800 tokens
constexpr int64_t kWanHeads = 40;             // Wan2.1-14B: 40 heads of 128, no GQA
constexpr int64_t kHunyuanHeads = 24;         // HunyuanVideo: 24 heads of 128, no GQA
// Scaled-down requests halve the frame's sides until this many frames fit, so that a short
// sequence keeps temporal structure (cross-frame heads need frames to look across).
constexpr int64_t kMinDitFrames = 8;

// As many frames of `frame` (sides halved while fewer than kMinDitFrames fit, down to
// kMinImageSide) as fit in seq_len; the remainder (less than one frame) is text after the video,
// as HunyuanVideo's MMDiT appends its prompt tokens to the sequence. At a preset's own length
// there is no remainder.
ModalityLayout dit_layout(std::string_view preset, Grid frame, int64_t seq_len) {
  while (seq_len / frame.frame_tokens() < kMinDitFrames &&
         std::max(frame.h, frame.w) > kMinImageSide) {
    frame = Grid{1, std::max(kMinImageSide, frame.h / 2), std::max(kMinImageSide, frame.w / 2)};
  }
  const int64_t frames = seq_len / frame.frame_tokens();
  if (frames < kMinDitFrames) {
    throw_too_short(preset, kMinDitFrames * frame.frame_tokens(), seq_len);
  }
  LayoutBuilder builder;
  builder.video(Grid{frames, frame.h, frame.w}, /*frame_separator=*/0, /*markers=*/false);
  const int64_t prompt = seq_len - frames * frame.frame_tokens();
  if (prompt > 0) builder.text(prompt);
  return builder.build();
}

struct Preset {
  PresetInfo info;
  std::function<ModalityLayout(std::string_view, int64_t)> build;  // (name, seq_len)
};

const std::vector<Preset>& presets() {
  static const std::vector<Preset> kPresets{
      {{"video-qwen2.5vl-128k",
        "Qwen2.5-VL-like video prompt: system text, one video of 292 steps x 16x28 tokens "
        "(448x784 px, 584 frames), question",
        kLength128k},
       [](std::string_view name, int64_t n) { return video_layout(name, kVideoStep128k, n); }},
      {{"video-qwen2.5vl-1m",
        "Qwen2.5-VL-like hour-long video: system text, 4368 steps x 12x20 tokens (336x560 px), "
        "question",
        kLength1m},
       [](std::string_view name, int64_t n) { return video_layout(name, kVideoStep1m, n); }},
      {{"multi-image",
        "BlindSight-style multi-image prompt: 45 captioned images of 1280..5120 tokens, question",
        kLength128k},
       multi_image_layout},
      {{"mixed-interleaved",
        "MM-NIAH-style: one video (16x28 tokens per step) interrupted every 8 steps by text "
        "documents and every third time by an image; about 25% text; a needle task",
        kLength128k, kMixedPresetNeedles},
       mixed_layout},
      {{"video-qwen3vl-128k",
        "SYNTHETIC Qwen3-VL-like prompt: videos of 48 steps (16x28, 12x20, 20x24 tokens), each "
        "step after its '<t seconds>' timestamp text and in its own vision markers (no constant "
        "frame period), each video followed by a captioned image; a needle task",
        kLength128k, kMixedPresetNeedles},
       qwen3_video_layout},
      {{"dit-wan2.1-76k",
        "SYNTHETIC Wan2.1-like video DiT, full (non-causal) attention: 21 latent frames x 45x80 "
        "tokens (720p, 81 frames), 40 heads",
        kWanLatentFrames * kDitFrame720p.frame_tokens(), 0, /*causal=*/false, kWanHeads, kWanHeads},
       [](std::string_view name, int64_t n) { return dit_layout(name, kDitFrame720p, n); }},
      {{"dit-hunyuan-119k",
        "SYNTHETIC HunyuanVideo-like video DiT, full (non-causal) attention: 33 latent frames x "
        "45x80 tokens (720p, 129 frames), 24 heads; the prompt's tokens left out",
        kHunyuanLatentFrames * kDitFrame720p.frame_tokens(), 0, /*causal=*/false, kHunyuanHeads,
        kHunyuanHeads},
       [](std::string_view name, int64_t n) { return dit_layout(name, kDitFrame720p, n); }},
  };
  return kPresets;
}

}  // namespace

const std::vector<PresetInfo>& workload_presets() {
  static const std::vector<PresetInfo> kInfos = [] {
    std::vector<PresetInfo> infos;
    for (const Preset& preset : presets()) infos.push_back(preset.info);
    return infos;
  }();
  return kInfos;
}

namespace detail {

ModalityLayout build_preset_layout(std::string_view name, int64_t seq_len) {
  if (seq_len < 0 || seq_len > kMaxSeqLen) {
    throw_invalid_argument("seq_len",
                           std::string("in [0, ")
                               .append(std::to_string(kMaxSeqLen))
                               .append("] (0: the preset's length)"),
                           std::to_string(seq_len));
  }
  std::string known;
  for (const Preset& preset : presets()) {
    if (preset.info.name == name) {
      return preset.build(name, seq_len == 0 ? preset.info.seq_len : seq_len);
    }
    known.append(known.empty() ? "" : ", ").append(preset.info.name);
  }
  throw_invalid_argument("preset", "one of " + known, std::string("'").append(name).append("'"));
}

}  // namespace detail
}  // namespace mmsparse
