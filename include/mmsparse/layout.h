#pragma once
// The modality layout of a token sequence: which tokens are text, image or video, and the grids
// of the media. Patterns read it (frame strides, modality boundaries, same-image masks); workloads
// produce it; files carry it as JSON in their metadata.
//
// Token-type codes follow transformers' mm_token_type_ids: 0 text, 1 image, 2 video.

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace mmsparse {

enum class Modality : uint8_t { kText = 0, kImage = 1, kVideo = 2 };
inline constexpr int kNumModalities = 3;

std::string_view modality_name(Modality modality);  // "text", "image", "video"

// A media item's token grid after spatial merging: t frames (1 for images) of h × w tokens.
struct Grid {
  int64_t t = 1;
  int64_t h = 1;
  int64_t w = 1;
  int64_t frame_tokens() const { return h * w; }
  int64_t tokens() const { return t * h * w; }
  bool operator==(const Grid&) const = default;
};

// One image or video. Its tokens may be split over several segments (a video whose frames are
// separated by timestamp text, as Qwen3-VL emits them).
struct Media {
  Modality modality = Modality::kImage;
  Grid grid{};
  int64_t start_marker = -1;  // position of its vision_start token, -1 if none
  int64_t end_marker = -1;    // position of its vision_end token, -1 if none
  bool operator==(const Media&) const = default;
};

// A maximal run of tokens of one modality belonging to at most one media item.
struct Segment {
  Modality modality = Modality::kText;
  int64_t begin = 0;        // first token position
  int64_t end = 0;          // one past the last
  int32_t media = -1;       // index into media(); -1 for text
  int64_t first_frame = 0;  // frame index of `begin` within its video (0 for images and text)
  int64_t length() const { return end - begin; }
  bool operator==(const Segment&) const = default;
};

class ModalityLayout {
 public:
  ModalityLayout() = default;

  // Validates and takes explicit segments and media (segments sorted, contiguous from 0).
  ModalityLayout(std::vector<Segment> segments, std::vector<Media> media);

  static ModalityLayout text_only(int64_t length);

  // From per-token type codes (0 text, 1 image, 2 video) and the grids of the images and videos in
  // order of appearance (like image_grid_thw / video_grid_thw, after merging). A video's tokens may
  // be interrupted by text (timestamps) or images; its frames continue across the interruption. Token counts
  // must agree exactly with the grids.
  static ModalityLayout from_token_types(std::span<const uint8_t> token_types,
                                         std::span<const Grid> image_grids,
                                         std::span<const Grid> video_grids);

  // Two JSON forms are accepted:
  //  compact: {"segments": [{"type": "text", "length": 20},
  //                         {"type": "image", "grid": [1, 16, 16], "markers": true},
  //                         {"type": "video", "grid": [64, 12, 20], "frame_separator": 3,
  //                          "markers": true}]}
  //  explicit (what to_json writes): {"length": N, "media": [...], "segments": [...]}
  static ModalityLayout from_json(const std::string& json_text);
  std::string to_json() const;

  int64_t length() const { return length_; }
  const std::vector<Segment>& segments() const { return segments_; }
  const std::vector<Media>& media() const { return media_; }
  bool empty() const { return length_ == 0; }
  bool is_mixed() const;  // more than one modality present

  // Per-token arrays of length length().
  std::vector<uint8_t> token_types() const;  // Modality codes
  std::vector<int32_t> token_media() const;  // media index or -1
  std::vector<int64_t> token_frames() const;  // frame index inside its video, -1 outside video

  // Tokens per frame of the first video (the grid stride most patterns use); 0 if no video.
  int64_t video_frame_tokens() const;

  bool operator==(const ModalityLayout&) const = default;

 private:
  int64_t length_ = 0;
  std::vector<Segment> segments_;
  std::vector<Media> media_;
};

// Appends segments in sequence order; build() validates.
class LayoutBuilder {
 public:
  LayoutBuilder& text(int64_t length);
  // markers: surround the image with one vision_start and one vision_end text token.
  LayoutBuilder& image(Grid grid, bool markers = true);
  // frame_separator: text tokens (timestamps) before every frame after the first.
  LayoutBuilder& video(Grid grid, int64_t frame_separator = 0, bool markers = true);
  ModalityLayout build() const;

 private:
  std::vector<Segment> segments_;
  std::vector<Media> media_;
  int64_t length_ = 0;
  void push(Modality modality, int64_t length, int32_t media, int64_t first_frame);
};

}  // namespace mmsparse
