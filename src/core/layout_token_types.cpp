#include <algorithm>
#include <span>
#include <utility>
#include <vector>

#include "core/layout_internal.h"
#include "mmsparse/layout.h"
#include "mmsparse/status.h"

namespace mmsparse {

using detail::grid_string;
using detail::indexed;
using detail::kNoMarker;
using detail::kNoMedia;
using detail::range_string;
using detail::validate_grid;

namespace {

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

}  // namespace mmsparse
