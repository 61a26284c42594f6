#pragma once
// What the GPU index builder suites (test_gpu_index_builders.cpp, test_gpu_grid_builders.cpp)
// share: their random problems' limits, edge shapes, interleaved layouts for the Q and 2D
// boundaries, edge layouts and the test fixture.

#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <functional>
#include <vector>

#include "attention_harness.h"
#include "common/random.h"
#include "index_test_support.h"
#include "methods/estimate/index_kernels.h"
#include "mmsparse/layout.h"
#include "mmsparse/plan.h"
#include "mmsparse/tensor.h"
#include "stream_test.h"

namespace mmsparse::test {

inline constexpr Device kCuda{DeviceType::kCUDA, 0};
inline constexpr int kRandomTrials = 24;
inline constexpr int64_t kMaxQueryLength = 600;
inline constexpr int64_t kMaxExtraKeys = 300;
inline constexpr int64_t kMaxSink = 40;
inline constexpr int64_t kMaxLocal = 130;
inline constexpr int64_t kMaxLastQueries = 150;
inline constexpr std::array<Gqa, 4> kGqaShapes = {{{1, 1}, {2, 2}, {1, 7}, {2, 7}}};
inline constexpr ProblemLimits kLimits{kGqaShapes, kMaxQueryLength, kMaxExtraKeys};

// An edge case's lengths and tile height, with a random GQA ratio, head dim and dtype.
struct EdgeShape {
  int64_t batch, q_len, kv_len, tile_rows;
};

inline ProblemSize edge_size(Random& random, const EdgeShape& edge) {
  ProblemSize size;
  size.batch = edge.batch;
  const Gqa gqa = pick(random, kGqaShapes);
  size.kv_heads = gqa.kv_heads;
  size.group = gqa.group;
  size.head_dim = pick(random, kHeadDims);
  size.dtype = pick(random, kDtypes);
  size.q_len = edge.q_len;
  size.kv_len = edge.kv_len;
  size.tile_rows = edge.tile_rows;
  size.scale = 1.0f / std::sqrt(static_cast<float>(size.head_dim));
  return size;
}

inline PlanShape plan_shape(const ProblemSize& size) {
  return {size.batch, size.q_heads(), size.q_len, size.kv_len, size.tile_rows};
}

class GpuIndexBuild : public StreamTest {};

// An interleaved layout of `length` tokens: text runs of 1 to kMaxTextRun tokens between images
// and videos of small random grids (0 to 2 separator tokens between frames), so that every
// modality has many short, odd runs among the last queries.
inline constexpr int64_t kMaxTextRun = 12;
inline constexpr int64_t kMaxGridSide = 4;
inline constexpr int64_t kMaxFrames = 3;
inline constexpr int64_t kMaxFrameSeparator = 2;

inline ModalityLayout interleaved_layout(Random& random, int64_t length) {
  LayoutBuilder builder;
  int64_t left = length;
  while (left > 0) {
    const int64_t text = std::min(left, random.uniform_int(1, kMaxTextRun));
    builder.text(text);
    left -= text;
    const bool video = random.bernoulli(0.5);
    const Grid grid{video ? random.uniform_int(1, kMaxFrames) : 1,
                    random.uniform_int(1, kMaxGridSide), random.uniform_int(1, kMaxGridSide)};
    const int64_t separator = video ? random.uniform_int(0, kMaxFrameSeparator) : 0;
    LayoutBuilder media;
    if (video) {
      media.video(grid, separator);
    } else {
      media.image(grid);
    }
    const int64_t tokens = media.build().length();
    if (tokens >= left) continue;  // no room: text fills the rest
    if (video) {
      builder.video(grid, separator);
    } else {
      builder.image(grid);
    }
    left -= tokens;
  }
  return builder.build();
}

// A Q-boundary problem: more keys than queries (every query has a token) and an interleaved layout.
struct QueryBoundaryProblem {
  ProblemSize size;
  ModalityLayout layout;
  int64_t last_q = 0;
};

inline QueryBoundaryProblem query_boundary_problem(Random& random, ProblemSize size) {
  size.kv_len = std::max(size.kv_len, size.q_len);
  const int64_t last_q = random.bernoulli(0.5) ? 64 : random.uniform_int(1, kMaxLastQueries);
  return {size, interleaved_layout(random, size.kv_len), last_q};
}

// Whether the GPU estimate takes every query group's rows (at most kMaxEstimateSegments runs).
inline bool groups_fit(const QueryBoundaryProblem& problem) {
  for (const std::vector<int64_t>& rows :
       query_group_rows(plan_shape(problem.size), problem.layout, problem.last_q)) {
    if (!cuda::index::fits_estimate(rows)) return false;
  }
  return true;
}

// Layouts of one modality, text then a video, and a video then text (of `length` tokens): key
// spaces that include the identity (one range from key 0), media first and media last.
inline std::vector<std::function<ModalityLayout(int64_t)>> edge_layouts() {
  const Grid frame{1, 4, 4};
  const int64_t frame_tokens = frame.tokens();
  const auto text_then_video = [frame, frame_tokens](int64_t length) {
    const int64_t text = std::max<int64_t>(1, length / 3);
    const int64_t frames = (length - text) / frame_tokens;
    LayoutBuilder builder;
    builder.text(text);
    if (frames > 0) builder.video({frames, frame.h, frame.w}, 0, false);
    if (length - text - frames * frame_tokens > 0)
      builder.text(length - text - frames * frame_tokens);
    return builder.build();
  };
  const auto video_then_text = [frame, frame_tokens](int64_t length) {
    const int64_t frames = length / 2 / frame_tokens;
    LayoutBuilder builder;
    if (frames > 0) builder.video({frames, frame.h, frame.w}, 0, false);
    if (length - frames * frame_tokens > 0) builder.text(length - frames * frame_tokens);
    return builder.build();
  };
  return {[](int64_t length) { return ModalityLayout::text_only(length); }, text_then_video,
          video_then_text};
}

}  // namespace mmsparse::test
