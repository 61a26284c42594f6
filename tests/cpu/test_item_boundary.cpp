// The item boundary (boundary=4) and per-item sinks (item_sinks): groups and key spaces on a
// hand-built layout, the sink keys, and the recall of grid heads on layouts whose frame period is
// not constant (text of varying length between frames, two videos of different frame sizes), on a
// hand-planted grid head and on the SYNTHETIC video-qwen3vl-128k preset scaled down. Plans against
// the masked-dense oracle and parameter errors: test_dynamic_patterns.cpp.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "common/random.h"
#include "cpu/dynamic_helpers.h"
#include "methods/estimate/modality_boundary.h"
#include "mmsparse/patterns.h"
#include "mmsparse/tools/metrics.h"
#include "mmsparse/tools/workload.h"

namespace mmsparse {
namespace {

using detail::IndexRange;

constexpr int64_t kSampledRows = 128;

// Text 3, a video of 2 frames of 2 x 2 with 3 text tokens between them, text 2, an image of
// 1 x 3, text 4: token types spelled out.
ModalityLayout small_layout() {
  const std::vector<uint8_t> types = {0, 0, 0, 2, 2, 2, 2, 0, 0, 0, 2, 2,
                                      2, 2, 0, 0, 1, 1, 1, 0, 0, 0, 0};
  const std::vector<Grid> images = {{1, 1, 3}};
  const std::vector<Grid> videos = {{2, 2, 2}};
  return ModalityLayout::from_token_types(types, images, videos);
}

TEST(ItemBoundary, GroupsAreTheTextRowsAndEachMediaItemOverItsOwnTokens) {
  const ModalityLayout layout = small_layout();
  const int64_t n = layout.length();
  const PlanShape shape{.q_len = n, .kv_len = n};
  const auto groups = detail::query_groups(PatternSpec::parse("grid:boundary=4"), shape, &layout);
  ASSERT_EQ(groups.size(), 3u);
  // Text: its rows, all keys.
  EXPECT_EQ(groups[0].rows, (std::vector<IndexRange>{{0, 3}, {7, 10}, {14, 16}, {19, 23}}));
  ASSERT_EQ(groups[0].key_spaces.size(), 1u);
  EXPECT_TRUE(groups[0].key_spaces[0].is_identity());
  // The video: both frames' rows; its own tokens back to back, then every other key.
  EXPECT_EQ(groups[1].rows, (std::vector<IndexRange>{{3, 7}, {10, 14}}));
  ASSERT_EQ(groups[1].key_spaces.size(), 2u);
  EXPECT_EQ(groups[1].primary, 0u);
  EXPECT_EQ(groups[1].key_spaces[0].ranges(), (std::vector<IndexRange>{{3, 7}, {10, 14}}));
  EXPECT_EQ(groups[1].key_spaces[1].ranges(), (std::vector<IndexRange>{{0, 3}, {7, 10}, {14, n}}));
  // Its second frame's first token is compact key 4: a frame period of 4 in its own space.
  EXPECT_EQ(groups[1].key_spaces[0].frontier(10), 5);
  EXPECT_EQ(groups[2].rows, (std::vector<IndexRange>{{16, 19}}));
  EXPECT_EQ(groups[2].key_spaces[0].ranges(), (std::vector<IndexRange>{{16, 19}}));

  // With kv_len > q_len the rows shift by the causal offset; keys before the queries drop out.
  const PlanShape shorter{.q_len = n - 12, .kv_len = n};
  const auto tail = detail::query_groups(PatternSpec::parse("grid:boundary=4"), shorter, &layout);
  ASSERT_EQ(tail.size(), 3u);
  EXPECT_EQ(tail[1].rows, (std::vector<IndexRange>{{0, 2}}));  // the video's keys 12, 13
  EXPECT_EQ(tail[1].key_spaces[0].ranges(), (std::vector<IndexRange>{{3, 7}, {10, 14}}));
}

TEST(ItemBoundary, ItemSinkKeysAreTheFirstTokensOfEveryFrameAndTheTextBefore) {
  const ModalityLayout layout = small_layout();
  EXPECT_EQ(detail::item_sink_keys(layout, 0), std::vector<int64_t>{});
  // Frame 0 at 3 (text 2 before), frame 1 at 10 (text 9 before), the image at 16 (text 15).
  EXPECT_EQ(detail::item_sink_keys(layout, 1), (std::vector<int64_t>{2, 3, 9, 10, 15, 16}));
  EXPECT_EQ(detail::item_sink_keys(layout, 2),
            (std::vector<int64_t>{2, 3, 4, 9, 10, 11, 15, 16, 17}));
  // More than a frame holds: every token of it.
  EXPECT_EQ(detail::item_sink_keys(layout, 9).size(), 3u + 4 + 4 + 3);
  // Frames back to back (no text between): only the first frame has a text token before it.
  const ModalityLayout contiguous = LayoutBuilder().text(2).video({3, 1, 2}, 0, false).build();
  EXPECT_EQ(detail::item_sink_keys(contiguous, 1), (std::vector<int64_t>{1, 2, 4, 6}));
}

TEST(ItemBoundary, ItemSinksAreReadByEveryTileThatSeesThem) {
  const ModalityLayout layout = small_layout();
  const int64_t n = layout.length();
  test::Random random;
  const Tensor q = random.normal_tensor(DType::kFloat32, {1, n, 1, 8});
  const Tensor k = random.normal_tensor(DType::kFloat32, {1, n, 1, 8});
  const PatternInputs inputs{q.view(), k.view()};
  const PlanShape shape{.q_len = n, .kv_len = n, .tile_rows = 4};
  const std::vector<int64_t> sinks = detail::item_sink_keys(layout, 1);
  for (const char* text : {"vertical-slash:vertical=0,slash=0,sink=0,local=0,item_sinks=1",
                           "grid:stride=2,sink=0,local=0,slash=1,hline=0,vline=0,item_sinks=1",
                           "grid:boundary=4,item_sinks=1"}) {
    SCOPED_TRACE(text);
    const Plan plan = build_plan(PatternSpec::parse(text), shape, &layout, &inputs);
    ASSERT_NO_THROW(plan.validate());
    const std::vector<uint8_t> mask = materialize_mask(plan, 0);
    for (int64_t row = 0; row < n; ++row) {
      for (int64_t key : sinks) {
        if (key <= row) EXPECT_EQ(mask[row * n + key], 1) << "row " << row << " key " << key;
      }
    }
  }
}

// The GPU index builders convert item-boundary heads and heads with item sinks with the Q/2D
// grid conversion, which writes a lattice as strided spans cut range by range
// (LatticeKeys::kStridedSpansInRanges); the host writes those heads so too, so that the plans stay
// equal record for record. An item sink on a line is read once: through the strided span, not
// again as a column (which validate() rejects).
TEST(ItemBoundary, GridLatticesAreStridedSpansWithTheItemBoundaryOrItemSinks) {
  constexpr int64_t kFrames = 24;
  constexpr int64_t kItemSinks = 2;
  const ModalityLayout layout = LayoutBuilder().text(40).video({kFrames, 8, 8}, 3).text(60).build();
  const int64_t n = layout.length();
  test::Random random;
  const Tensor q = random.normal_tensor(DType::kFloat32, {1, n, 1, 8});
  const Tensor k = random.normal_tensor(DType::kFloat32, {1, n, 1, 8});
  const PatternInputs inputs{q.view(), k.view()};
  const PlanShape shape{.q_len = n, .kv_len = n};
  // Vertical lines every 2 keys: far more lattice keys per tile than a strided span gathers, and
  // half of the item sinks lie on them.
  const std::string lines = "grid:stride=2,hline=0,vline=1,slash=0,sink=0,local=0";
  const std::vector<int64_t> sinks = detail::item_sink_keys(layout, kItemSinks);
  const auto check = [&](const std::string& text, bool with_sinks) {
    SCOPED_TRACE(text);
    const Plan plan = build_plan(PatternSpec::parse(text), shape, &layout, &inputs);
    ASSERT_NO_THROW(plan.validate());
    EXPECT_GT(plan.strided_spans.size(), 0u);
    if (!with_sinks) return;
    int64_t sinks_on_lines = 0;  // (tile, sink) pairs read through a strided span
    for (std::size_t t = 0; t < plan.tiles.size(); ++t) {
      for (int64_t i = plan.tile_strided_offsets[t]; i < plan.tile_strided_offsets[t + 1]; ++i) {
        const StridedSpan& span = plan.strided_spans[static_cast<std::size_t>(i)];
        sinks_on_lines += std::count_if(sinks.begin(), sinks.end(), [&](int64_t key) {
          return key >= span.begin && key < span.end && (key - span.begin) % span.step == 0;
        });
      }
    }
    EXPECT_GT(sinks_on_lines, 0) << "no item sink lies on a strided span";
  };
  check(lines, false);
  check(lines + ",boundary=4", false);
  check(lines + ",item_sinks=" + std::to_string(kItemSinks), true);
  check(lines + ",boundary=4,item_sinks=" + std::to_string(kItemSinks), true);
}

// --- Recall on layouts without a constant frame period ------------------------------------------

// A layout with text of 2..9 tokens between frames, a video of 8 frames of 6 x 8, an image, and
// a video of 10 frames of 5 x 6; each media token's item and location.
struct PlantedLayout {
  ModalityLayout layout;
  std::vector<int64_t> location;  // [tokens] item * kLocations + row * w + col, -1 for text
};
constexpr int64_t kLocations = 64;  // more than any frame of the layout holds

PlantedLayout planted_layout(test::Random& random) {
  std::vector<uint8_t> types;
  PlantedLayout planted;
  const auto text = [&](int64_t count) {
    types.insert(types.end(), static_cast<std::size_t>(count), 0);
    planted.location.insert(planted.location.end(), static_cast<std::size_t>(count), -1);
  };
  int64_t item = 0;
  const auto media = [&](uint8_t type, Grid grid) {
    for (int64_t frame = 0; frame < grid.t; ++frame) {
      text(random.uniform_int(2, 9));  // a timestamp of varying length
      for (int64_t token = 0; token < grid.frame_tokens(); ++token) {
        types.push_back(type);
        planted.location.push_back(item * kLocations + token);
      }
    }
    ++item;
  };
  const Grid first{8, 6, 8}, image{1, 5, 5}, second{10, 5, 6};
  text(20);
  media(2, first);
  media(1, image);
  media(2, second);
  text(40);
  planted.layout = ModalityLayout::from_token_types(types, std::vector<Grid>{image},
                                                    std::vector<Grid>{first, second});
  return planted;
}

// A grid head: a media query's logit on a key of the same item and location is about kGain, on
// other keys (unit norm) about kGain / sqrt(dim) noise; text queries and keys are random.
test::HeadProblem planted_grid_head(test::Random& random, const PlantedLayout& planted) {
  constexpr int64_t kDim = 32;
  constexpr float kGain = 10.0f;     // logit units on a matching key
  constexpr float kKeyNoise = 0.1f;  // per dimension, on unit identity vectors
  const int64_t n = planted.layout.length();
  test::HeadProblem problem{Tensor(DType::kFloat32, {1, n, 1, kDim}),
                            Tensor(DType::kFloat32, {1, n, 1, kDim}),
                            Tensor(DType::kFloat32, {1, n, 1, kDim})};
  const Tensor identities = random.normal_tensor(DType::kFloat32, {3 * kLocations, kDim});
  const Tensor text = random.normal_tensor(DType::kFloat32, {2 * n, kDim});
  const float query_scale = kGain * std::sqrt(static_cast<float>(kDim));
  const float* id = identities.data_as<float>();
  for (int64_t token = 0; token < n; ++token) {
    const int64_t location = planted.location[token];
    float* q = problem.q.data_as<float>() + token * kDim;
    float* k = problem.k.data_as<float>() + token * kDim;
    float* v = problem.v.data_as<float>() + token * kDim;
    const float* unit = id + std::max<int64_t>(location, 0) * kDim;
    double norm = 0.0;
    for (int64_t d = 0; d < kDim; ++d) norm += unit[d] * unit[d];
    const auto inverse = static_cast<float>(1.0 / std::sqrt(norm));
    for (int64_t d = 0; d < kDim; ++d) {
      const float noise = text.data_as<float>()[token * kDim + d];
      if (location < 0) {
        q[d] = noise;
        // About unit norm, as the identity keys: text keys do not outweigh a frame's.
        k[d] = text.data_as<float>()[(n + token) * kDim + d] / std::sqrt(static_cast<float>(kDim));
      } else {
        q[d] = query_scale * unit[d] * inverse;
        k[d] = unit[d] * inverse + kKeyNoise * noise / std::sqrt(static_cast<float>(kDim));
      }
      v[d] = noise;
    }
  }
  return problem;
}

test::Coverage planted_coverage(const std::string& spec, const PlantedLayout& planted,
                                const test::HeadProblem& problem,
                                const std::vector<int64_t>& rows) {
  const int64_t n = planted.layout.length();
  const PatternInputs inputs{problem.q.view(), problem.k.view()};
  const Plan plan =
      build_plan(PatternSpec::parse(spec), {.q_len = n, .kv_len = n}, &planted.layout, &inputs);
  return test::measure_coverage(plan, problem.q, problem.k, rows);
}

TEST(ItemBoundaryRecall, PlantedGridHeadOnVaryingFramePeriodsAndTwoFrameSizes) {
  test::Random random;
  SCOPED_TRACE(random.trace());
  const PlantedLayout planted = planted_layout(random);
  const test::HeadProblem problem = planted_grid_head(random, planted);
  // The grid's rows: the media tokens after each item's first frame.
  std::vector<int64_t> rows;
  for (int64_t token = 0; token < planted.layout.length(); ++token) {
    if (planted.location[token] >= 0 && token % 3 == 0) rows.push_back(token);
  }
  std::printf("hand-planted grid head, %ld tokens, %zu media rows sampled\n",
              planted.layout.length(), rows.size());
  std::vector<test::Coverage> modes;
  for (const char* spec :
       {"grid:boundary=0", "grid:boundary=2", "grid:boundary=3", "grid:boundary=4"}) {
    modes.push_back(planted_coverage(spec, planted, problem, rows));
    std::printf("  %-18s density %6.2f%%  recall %.4f (min %.4f)\n", spec,
                100.0 * modes.back().density, modes.back().recall_mean, modes.back().recall_min);
  }
  constexpr double kHighRecall = 0.95;
  EXPECT_GE(modes[3].recall_mean, kHighRecall);
  for (int mode = 0; mode < 3; ++mode) EXPECT_GT(modes[3].recall_mean, modes[mode].recall_mean);
}

TEST(ItemBoundaryRecall, GridHeadsOfTheQwen3VlPresetScaledDown) {
  // Two videos (16 x 28 and 12 x 20 tokens per frame) and an image between them.
  constexpr int64_t kSeqLen = 28672;
  WorkloadSpec spec;
  spec.preset = "video-qwen3vl-128k";
  spec.seq_len = kSeqLen;
  spec.q_heads = 4;
  spec.kv_heads = 1;
  spec.head_behaviour = HeadBehaviour::kGrid;
  const Workload workload = Workload::create(spec);
  const int64_t n = workload.seq_len();
  const std::vector<int64_t> rows = sample_rows(n, kSampledRows);
  std::printf("SYNTHETIC %s, %ld tokens, %zu media items, every head grid\n",
              workload.spec().preset.c_str(), n, workload.layout().media().size());
  const std::vector<std::string> specs = {"grid:boundary=0", "grid:boundary=3", "grid:boundary=4",
                                          "grid:boundary=4,item_sinks=1"};
  std::vector<double> mean(specs.size(), 0.0);
  for (int64_t head = 0; head < workload.spec().q_heads; ++head) {
    const test::HeadProblem problem = test::workload_head(workload, head);
    const PatternInputs inputs{problem.q.view(), problem.k.view()};
    std::printf(" head %ld\n", head);
    std::vector<double> recall;
    for (std::size_t s = 0; s < specs.size(); ++s) {
      const Plan plan = build_plan(PatternSpec::parse(specs[s]), {.q_len = n, .kv_len = n},
                                   &workload.layout(), &inputs);
      const test::Coverage coverage = test::measure_coverage(plan, problem.q, problem.k, rows);
      std::printf("  %-30s density %6.2f%%  recall %.4f (min %.4f)\n", specs[s].c_str(),
                  100.0 * coverage.density, coverage.recall_mean, coverage.recall_min);
      recall.push_back(coverage.recall_mean);
      mean[s] += coverage.recall_mean / static_cast<double>(workload.spec().q_heads);
    }
    EXPECT_GT(recall[2], recall[0]) << "SYNTHETIC grid head " << head;
    EXPECT_GT(recall[2], recall[1]) << "SYNTHETIC grid head " << head;
  }
  for (std::size_t s = 0; s < specs.size(); ++s) {
    std::printf(" mean recall %-30s %.4f\n", specs[s].c_str(), mean[s]);
  }
  // Measured 0.862 (none), 0.885 (2D) and 0.951 (item boundary): each video's own stride.
  constexpr double kHighRecall = 0.94;
  constexpr double kGain = 0.05;
  EXPECT_GE(mean[2], kHighRecall);
  EXPECT_GE(mean[2], std::max(mean[0], mean[1]) + kGain);
  EXPECT_GE(mean[3], mean[2]);
}

}  // namespace
}  // namespace mmsparse
