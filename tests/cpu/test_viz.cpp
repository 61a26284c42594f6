// Attention pictures: pooled plan masks against pooled materialize_mask, pooled maps against a
// brute-force softmax, recall against the planned attention, and the PNG on disk.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#define STB_IMAGE_STATIC
#define STB_IMAGE_IMPLEMENTATION
#include <stb_image.h>

#include "common/errors.h"
#include "common/random.h"
#include "cpu/attention_helpers.h"
#include "mmsparse/attention.h"
#include "mmsparse/tools/metrics.h"
#include "mmsparse/patterns.h"
#include "mmsparse/tools/viz.h"
#include "tools/viz/attention_map.h"

namespace mmsparse {
namespace {

using test::Random;
using testing::expect_error;

constexpr int64_t kHeadDim = 16;
// Probabilities are fp32; sums over a few hundred keys stay within a few 1e-7 relative.
constexpr double kProbabilityTolerance = 1e-5;

// The 0/1 mask of a head slot mean-pooled the slow way, from materialize_mask; grid row i holds
// the query order[i] (position i when order is empty).
PooledGrid brute_force_mask(const Plan& plan, int64_t head_slot, int64_t cells,
                            const std::vector<int64_t>& order = {}) {
  const std::vector<uint8_t> mask = materialize_mask(plan, head_slot);
  PooledGrid grid = viz::make_grid(plan.shape.q_len, plan.shape.kv_len, cells);
  for (int64_t r = 0; r < grid.rows; ++r) {
    for (int64_t c = 0; c < grid.cols; ++c) {
      int64_t covered = 0;
      for (int64_t i = grid.row_begin(r); i < grid.row_begin(r + 1); ++i) {
        const int64_t query = order.empty() ? i : order[i];
        for (int64_t key = grid.col_begin(c); key < grid.col_begin(c + 1); ++key) {
          covered += mask[query * plan.shape.kv_len + key];
        }
      }
      grid.values[r * grid.cols + c] =
          static_cast<double>(covered) / static_cast<double>(grid.cell_pairs(r, c));
    }
  }
  return grid;
}

// A one-head plan whose query order interleaves even and odd positions (as a grid head's phases
// do), with a window and the first keys in every tile.
Plan permuted_plan(int64_t length) {
  const int64_t half = length / 2;
  PlanBuilder builder({1, 1, length, length, kDefaultTileRows});
  builder.begin_head({{0, length - half, 2}, {1, half, 2}});
  constexpr int64_t kWindow = 40;
  constexpr int64_t kSinks = 4;
  for (int64_t begin = 0; begin < length; begin += kDefaultTileRows) {
    builder.begin_tile(begin, std::min(length, begin + kDefaultTileRows),
                       MaskPolicy{.window = kWindow, .window_sink = kSinks});
    builder.add_span(0, length);
  }
  return builder.finish();
}

struct HeadInputs {
  Tensor q, k;
};

HeadInputs random_inputs(Random& random, int64_t q_len, int64_t kv_len, int64_t q_heads = 1,
                         int64_t kv_heads = 1) {
  return {random.normal_tensor(DType::kFloat32, {1, q_len, q_heads, kHeadDim}),
          random.normal_tensor(DType::kFloat32, {1, kv_len, kv_heads, kHeadDim})};
}

// Softmax probabilities of one causal row, in double: [kv_len], 0 above the diagonal.
std::vector<double> row_probabilities(const TensorView& q, const TensorView& k, int64_t head,
                                      int64_t kv_head, int64_t query) {
  const int64_t kv_len = k.shape[1];
  const int64_t visible = std::min(kv_len, query + kv_len - q.shape[1] + 1);
  const double scale = 1.0 / std::sqrt(static_cast<double>(kHeadDim));
  std::vector<double> p(static_cast<std::size_t>(kv_len), 0.0);
  double max_score = -INFINITY;
  for (int64_t key = 0; key < visible; ++key) {
    double score = 0.0;
    for (int64_t d = 0; d < kHeadDim; ++d) {
      score += load_float(q, query * q.strides[1] + head * q.strides[2] + d) *
               load_float(k, key * k.strides[1] + kv_head * k.strides[2] + d);
    }
    p[key] = scale * score;
    max_score = std::max(max_score, p[key]);
  }
  double sum = 0.0;
  for (int64_t key = 0; key < visible; ++key) sum += (p[key] = std::exp(p[key] - max_score));
  for (int64_t key = 0; key < visible; ++key) p[key] /= sum;
  return p;
}

// The causal softmax of q head `head` (KV head `kv_head`) pooled the slow way; `keep` (a
// materialized mask) restricts it when not null; grid row i holds the query order[i] (position i
// when order is empty).
PooledGrid brute_force_map(const TensorView& q, const TensorView& k, int64_t head, int64_t kv_head,
                           int64_t cells, PoolMode mode, const std::vector<uint8_t>* keep,
                           const std::vector<int64_t>& order = {}) {
  const int64_t q_len = q.shape[1];
  const int64_t kv_len = k.shape[1];
  PooledGrid grid = viz::make_grid(q_len, kv_len, cells);
  for (int64_t i = 0; i < q_len; ++i) {
    const int64_t query = order.empty() ? i : order[i];
    const std::vector<double> p = row_probabilities(q, k, head, kv_head, query);
    const int64_t r = viz::row_split(grid).cell_of(i);
    for (int64_t key = 0; key < kv_len; ++key) {
      const double value = keep == nullptr || (*keep)[query * kv_len + key] ? p[key] : 0.0;
      double& cell = grid.values[r * grid.cols + viz::col_split(grid).cell_of(key)];
      cell = mode == PoolMode::kMax ? std::max(cell, value) : cell + value;
    }
  }
  if (mode == PoolMode::kMean) {
    for (int64_t r = 0; r < grid.rows; ++r) {
      for (int64_t c = 0; c < grid.cols; ++c) {
        grid.values[r * grid.cols + c] /= static_cast<double>(grid.cell_pairs(r, c));
      }
    }
  }
  return grid;
}

void expect_near_grids(const PooledGrid& actual, const PooledGrid& expected) {
  ASSERT_EQ(actual.rows, expected.rows);
  ASSERT_EQ(actual.cols, expected.cols);
  for (std::size_t i = 0; i < expected.values.size(); ++i) {
    EXPECT_NEAR(actual.values[i], expected.values[i], kProbabilityTolerance) << "cell " << i;
  }
}

TEST(CellSplit, CellOfInvertsBegin) {
  for (int64_t length : {1, 7, 64, 100, 1000}) {
    for (int64_t cells : {int64_t{1}, int64_t{3}, std::min<int64_t>(length, 37), length}) {
      if (cells > length) continue;
      const viz::CellSplit split{length, cells};
      for (int64_t position = 0; position < length; ++position) {
        const int64_t cell = split.cell_of(position);
        ASSERT_LE(split.begin(cell), position) << length << " " << cells << " " << position;
        ASSERT_LT(position, split.begin(cell + 1)) << length << " " << cells << " " << position;
      }
    }
  }
}

TEST(PlanMask, PooledFromRangesEqualsPooledMaterializedMask) {
  const ModalityLayout layout = LayoutBuilder().text(30).video({4, 6, 8}).text(40).build();
  const int64_t length = layout.length();  // 264
  const PlanShape shape{1, 1, length, length, kDefaultTileRows};
  for (const std::string& text : {"dense", "a-shape:sink=8,local=32", "tri-shape:sink=4,local=24,bottom=20",
                                  "sf-fixed:segment=48,vline_stride=48",
                                  "sf-strided:local=32,stride=48"}) {
    SCOPED_TRACE(text);
    const Plan plan = build_plan(resolve_pattern(PatternSpec::parse(text), &layout), shape, &layout);
    for (int64_t cells : {int64_t{1}, int64_t{37}, int64_t{64}, length, 2 * length}) {
      SCOPED_TRACE(cells);
      const PooledGrid pooled = pool_plan_mask(plan, 0, cells);
      const PooledGrid expected = brute_force_mask(plan, 0, cells);
      ASSERT_EQ(pooled.rows, expected.rows);
      ASSERT_EQ(pooled.cols, expected.cols);
      EXPECT_EQ(pooled.values, expected.values);  // exact: the same integer counts, divided alike
    }
  }
}

TEST(PlanMask, BottomRightAlignedAndTokenMasksPoolExactly) {
  const ModalityLayout layout = LayoutBuilder().text(20).image({1, 6, 6}).text(30).image({1, 4, 8}).build();
  const int64_t kv_len = layout.length();
  const int64_t q_len = kv_len - 25;
  PlanBuilder builder({1, 1, q_len, kv_len, kDefaultTileRows});
  builder.attach_layout(layout);
  builder.begin_head();
  for (int64_t begin = 0; begin < q_len; begin += kDefaultTileRows) {
    builder.begin_tile(begin, std::min(q_len, begin + kDefaultTileRows),
                       MaskPolicy{.same_media = begin % 2 == 0});
    builder.add_span(3, kv_len - 7);
    builder.add_column(1);
  }
  const Plan plan = builder.finish();
  for (int64_t cells : {int64_t{9}, int64_t{50}}) {
    EXPECT_EQ(pool_plan_mask(plan, 0, cells).values, brute_force_mask(plan, 0, cells).values);
  }
}

TEST(PlanMask, QueryOrderRowsFollowThePlanOrder) {
  const Plan plan = permuted_plan(203);
  const std::vector<int64_t> order = plan.query_order(0);
  for (int64_t cells : {int64_t{16}, int64_t{203}}) {
    EXPECT_EQ(pool_plan_mask(plan, 0, cells, RowOrder::kQueryOrder).values,
              brute_force_mask(plan, 0, cells, order).values);
    EXPECT_EQ(pool_plan_mask(plan, 0, cells, RowOrder::kPositions).values,
              brute_force_mask(plan, 0, cells).values);
  }
}

TEST(AttentionMaps, MeanPooledRowsCarryTheRowsMass) {
  Random random;
  SCOPED_TRACE(random.trace());
  const int64_t length = 211;
  const HeadInputs inputs = random_inputs(random, length, length);
  const Plan plan = build_plan(PatternSpec::parse("a-shape:sink=4,local=32"), {1, 1, length, length});
  AttentionMapOptions options;
  options.pool = PoolMode::kMean;
  for (int64_t cells : {int64_t{17}, int64_t{64}, length}) {
    SCOPED_TRACE(cells);
    options.cells = cells;
    const HeadAttentionMaps maps =
        pool_attention_maps(inputs.q.view(), inputs.k.view(), 0, 0, plan, 0, options);
    const PooledGrid& grid = maps.attention;
    for (int64_t r = 0; r < grid.rows; ++r) {
      // A cell's mean times its key count, summed over the row of cells, is the mean row mass: 1.
      double mass = 0.0;
      for (int64_t c = 0; c < grid.cols; ++c) {
        mass += grid.at(r, c) * static_cast<double>(grid.col_begin(c + 1) - grid.col_begin(c));
      }
      EXPECT_NEAR(mass, 1.0, kProbabilityTolerance) << "row " << r;
    }
  }
}

TEST(AttentionMaps, PooledMapsMatchBruteForceSoftmax) {
  Random random;
  SCOPED_TRACE(random.trace());
  // GQA (head 3 reads KV head 1) and kv_len > q_len (bottom-right aligned causal mask).
  const int64_t q_len = 90, kv_len = 120, cells = 23;
  const HeadInputs inputs = random_inputs(random, q_len, kv_len, 4, 2);
  const TensorView q = inputs.q.view();
  const TensorView k = inputs.k.view();
  const Plan plan =
      build_plan(PatternSpec::parse("a-shape:sink=4,local=16"), {1, 4, q_len, kv_len});
  const std::vector<uint8_t> mask = materialize_mask(plan, 3);
  for (PoolMode mode : {PoolMode::kMax, PoolMode::kMean}) {
    SCOPED_TRACE(pool_mode_name(mode));
    AttentionMapOptions options;
    options.cells = cells;
    options.pool = mode;
    const HeadAttentionMaps maps = pool_attention_maps(q, k, 0, 3, plan, 3, options);
    expect_near_grids(maps.attention, brute_force_map(q, k, 3, 1, cells, mode, nullptr));
    expect_near_grids(maps.kept, brute_force_map(q, k, 3, 1, cells, mode, &mask));
    for (std::size_t i = 0; i < maps.kept.values.size(); ++i) {
      EXPECT_LE(maps.kept.values[i], maps.attention.values[i]);
    }
  }
}

TEST(AttentionMaps, RecallMatchesThePlannedAttention) {
  Random random;
  SCOPED_TRACE(random.trace());
  const int64_t length = 160;
  const HeadInputs inputs = random_inputs(random, length, length);
  const Tensor v = random.normal_tensor(DType::kFloat32, {1, length, 1, kHeadDim});
  const Plan plan = build_plan(PatternSpec::parse("a-shape:sink=8,local=24"), {1, 1, length, length});
  const HeadAttentionMaps maps =
      pool_attention_maps(inputs.q.view(), inputs.k.view(), 0, 0, plan, 0, {.cells = 40});

  Tensor out(DType::kFloat32, {1, length, 1, kHeadDim});
  Tensor lse_plan(DType::kFloat32, {1, 1, length});
  Tensor lse_dense(DType::kFloat32, {1, 1, length});
  attention_planned(plan, inputs.q.view(), inputs.k.view(), v.view(), out.view(), lse_plan.view());
  attention_dense(inputs.q.view(), inputs.k.view(), v.view(), out.view(), lse_dense.view());
  const std::vector<double> recall = row_recall(lse_plan.view(), lse_dense.view(), 0, 0);
  double sum = 0.0;
  for (double value : recall) sum += value;
  EXPECT_NEAR(maps.recall_mean, sum / static_cast<double>(recall.size()), kProbabilityTolerance);
  EXPECT_NEAR(maps.recall_min, *std::min_element(recall.begin(), recall.end()),
              kProbabilityTolerance);
  EXPECT_DOUBLE_EQ(maps.density, plan_density(plan, 0));
  EXPECT_TRUE(maps.query_order.empty());
  EXPECT_TRUE(maps.attention_permuted.empty());
  EXPECT_TRUE(maps.mask_permuted.empty());

  const Plan dense = build_plan(PatternSpec::parse("dense"), {1, 1, length, length});
  const HeadAttentionMaps full =
      pool_attention_maps(inputs.q.view(), inputs.k.view(), 0, 0, dense, 0, {.cells = 40});
  EXPECT_EQ(full.kept.values, full.attention.values);
  EXPECT_NEAR(full.recall_mean, 1.0, kProbabilityTolerance);
  EXPECT_NEAR(full.recall_min, 1.0, kProbabilityTolerance);
}

TEST(AttentionMaps, PermutedPlanAddsRowsInQueryOrder) {
  Random random;
  SCOPED_TRACE(random.trace());
  const int64_t length = 150, cells = 30;
  const HeadInputs inputs = random_inputs(random, length, length);
  const Plan plan = permuted_plan(length);
  for (PoolMode mode : {PoolMode::kMax, PoolMode::kMean}) {
    SCOPED_TRACE(pool_mode_name(mode));
    AttentionMapOptions options;
    options.cells = cells;
    options.pool = mode;
    options.num_threads = 3;  // rows of the permuted grid gather queries from every work item
    const HeadAttentionMaps maps =
        pool_attention_maps(inputs.q.view(), inputs.k.view(), 0, 0, plan, 0, options);
    EXPECT_EQ(maps.query_order, plan.query_order(0));
    EXPECT_EQ(maps.mask_permuted.values,
              pool_plan_mask(plan, 0, cells, RowOrder::kQueryOrder).values);
    expect_near_grids(maps.attention_permuted,
                      brute_force_map(inputs.q.view(), inputs.k.view(), 0, 0, cells, mode, nullptr,
                                      maps.query_order));
  }
}

TEST(Picture, PngHasThePicturesSizeAndPixels) {
  Random random;
  SCOPED_TRACE(random.trace());
  const ModalityLayout layout = LayoutBuilder().text(20).video({3, 4, 6}).text(28).build();
  const int64_t length = layout.length();
  const HeadInputs inputs = random_inputs(random, length, length);
  const Plan plain = build_plan(PatternSpec::parse("a-shape:sink=4,local=16"), {1, 1, length, length});
  const Plan permuted = permuted_plan(length);
  constexpr int64_t kPanel = 64;
  PictureOptions picture{.panel_size = kPanel, .title = "test picture", .layout = &layout};

  const Image three = render_attention_picture(
      pool_attention_maps(inputs.q.view(), inputs.k.view(), 0, 0, plain, 0, {.cells = 32}), picture);
  const Image five = render_attention_picture(
      pool_attention_maps(inputs.q.view(), inputs.k.view(), 0, 0, permuted, 0, {.cells = 32}),
      picture);
  EXPECT_GT(three.height, kPanel);  // plus title, captions and legend (which may wrap)
  EXPECT_GT(five.height, kPanel);
  EXPECT_GT(three.width, 3 * kPanel);
  EXPECT_GT(five.width, three.width + 2 * kPanel);  // two more panels
  EXPECT_EQ(three.rgb.size(), static_cast<std::size_t>(three.width * three.height * 3));

  const std::filesystem::path path =
      std::filesystem::temp_directory_path() / ("mmsparse_test_viz_" + std::to_string(random.seed()) + ".png");
  write_png(path.string(), five);
  int width = 0, height = 0, channels = 0;
  stbi_uc* pixels = stbi_load(path.string().c_str(), &width, &height, &channels, 3);
  ASSERT_NE(pixels, nullptr) << stbi_failure_reason();
  EXPECT_EQ(width, five.width);
  EXPECT_EQ(height, five.height);
  EXPECT_EQ(channels, 3);
  EXPECT_TRUE(std::equal(five.rgb.begin(), five.rgb.end(), pixels));  // PNG is lossless
  stbi_image_free(pixels);
  std::filesystem::remove(path);
}

TEST(Picture, ColourScaleIsViridisOverTheLogRange) {
  EXPECT_EQ(viz::viridis(0.0), (viz::Rgb{68, 1, 84}));
  EXPECT_EQ(viz::viridis(1.0), (viz::Rgb{253, 231, 37}));
  EXPECT_EQ(viz::viridis(-1.0), viz::viridis(0.0));
  const viz::LogScale scale{-4.0, 0.0};
  EXPECT_DOUBLE_EQ(scale.position(1.0), 1.0);
  EXPECT_DOUBLE_EQ(scale.position(1e-2), 0.5);
  EXPECT_DOUBLE_EQ(scale.position(1e-9), 0.0);
  EXPECT_DOUBLE_EQ(scale.position(0.0), 0.0);
}

TEST(VizErrors, NameTheArgument) {
  Random random;
  SCOPED_TRACE(random.trace());
  const int64_t length = 64;
  const HeadInputs inputs = random_inputs(random, length, length, 2, 1);
  const Plan plan = build_plan(PatternSpec::parse("dense"), {1, 2, length, length});
  const TensorView q = inputs.q.view();
  const TensorView k = inputs.k.view();
  expect_error([&] { pool_attention_maps(q, k, 0, 2, plan, 0); }, ErrorCode::kInvalidArgument,
               {"head", "[0, 2)", "got 2"});
  expect_error([&] { pool_attention_maps(q, k, 1, 0, plan, 0); }, ErrorCode::kInvalidArgument,
               {"batch_index"});
  expect_error([&] { pool_attention_maps(q, k, 0, 0, plan, 5); }, ErrorCode::kInvalidArgument,
               {"head_slot", "got 5"});
  expect_error([&] { pool_attention_maps(q, k, 0, 0, plan, 0, {.cells = 0}); },
               ErrorCode::kInvalidArgument, {"cells", ">= 1", "got 0"});
  expect_error([&] { pool_plan_mask(plan, 0, 0); }, ErrorCode::kInvalidArgument, {"cells"});
  const Plan shorter = build_plan(PatternSpec::parse("dense"), {1, 2, length - 1, length});
  expect_error([&] { pool_attention_maps(q, k, 0, 0, shorter, 0); }, ErrorCode::kInvalidArgument,
               {"plan shape", "q_len 64"});

  const HeadAttentionMaps maps = pool_attention_maps(q, k, 0, 0, plan, 0, {.cells = 8});
  expect_error([&] { render_attention_picture(maps, {.panel_size = 0}); },
               ErrorCode::kInvalidArgument, {"panel_size"});
  const ModalityLayout wrong = ModalityLayout::text_only(length + 1);
  expect_error([&] { render_attention_picture(maps, {.layout = &wrong}); },
               ErrorCode::kInvalidArgument, {"layout length"});
  const std::string missing = "/nonexistent-mmsparse-dir/picture.png";
  expect_error([&] { write_png(missing, render_attention_picture(maps, {.panel_size = 8})); },
               ErrorCode::kIoError, {"png", missing});
  expect_error([&] { pool_mode_from_name("median"); }, ErrorCode::kParseError, {"median"});
}

}  // namespace
}  // namespace mmsparse

namespace mmsparse {
namespace {

// VecAttention's selected vectors: a panel beside the attention map whose pixels, one per (query,
// key) pair, are lit exactly where the plan gathers the key for the query's block (its columns;
// selected runs long enough to be spans are not drawn there), read back from the PNG on disk.
TEST(Picture, VecSelectedVectorsMatchThePlanPixelForPixel) {
  Random random;
  constexpr int64_t kLength = 200;  // a last block shorter than the pooling
  const HeadInputs inputs = random_inputs(random, kLength, kLength);
  const PatternInputs pattern_inputs{inputs.q.view(), inputs.k.view()};
  // A high alpha keeps few keys, in short runs: gathered columns rather than spans (vec.h).
  const Plan plan = build_plan(PatternSpec::parse("vec:alpha_ppm=900000,pooling=16,group=2"),
                               {1, 1, kLength, kLength, 16}, nullptr, &pattern_inputs);
  AttentionMapOptions options{.cells = kLength, .gathered_columns = true};
  const HeadAttentionMaps maps =
      pool_attention_maps(inputs.q.view(), inputs.k.view(), 0, 0, plan, 0, options);
  ASSERT_FALSE(maps.columns.empty());
  EXPECT_TRUE(pool_attention_maps(inputs.q.view(), inputs.k.view(), 0, 0, plan, 0, {.cells = 8})
                  .columns.empty());  // only when asked

  // The selected pairs from the plan's records: each tile's columns for each of its rows.
  std::vector<uint8_t> selected(static_cast<std::size_t>(kLength * kLength), 0);
  int64_t selected_pairs = 0;
  for (int64_t t = plan.head_tile_offsets[0]; t < plan.head_tile_offsets[1]; ++t) {
    for (int64_t row = plan.tiles[t].begin; row < plan.tiles[t].end; ++row) {
      for (int64_t c = plan.tile_column_offsets[t]; c < plan.tile_column_offsets[t + 1]; ++c) {
        selected[row * kLength + plan.columns[c]] = 1;
        ++selected_pairs;
      }
    }
  }
  ASSERT_GT(selected_pairs, 0);

  const Image image = render_attention_picture(maps, {.panel_size = kLength, .title = "vec"});
  ASSERT_EQ(image.panels.size(), 4u);  // attention, selected vectors, mask, kept
  const ImagePanel& panel = image.panels[1];
  EXPECT_TRUE(panel.caption.starts_with("selected vectors"));
  ASSERT_EQ(panel.size, kLength);
  const std::filesystem::path path =
      std::filesystem::temp_directory_path() /
      ("mmsparse_test_viz_vec_" + std::to_string(random.seed()) + ".png");
  write_png(path.string(), image);
  int width = 0, height = 0, channels = 0;
  stbi_uc* pixels = stbi_load(path.string().c_str(), &width, &height, &channels, 3);
  ASSERT_NE(pixels, nullptr) << stbi_failure_reason();
  ASSERT_EQ(width, image.width);
  const stbi_uc* background = &pixels[(panel.y * width + panel.x + kLength - 1) * 3];  // above
  int64_t lit = 0, mismatches = 0;
  for (int64_t query = 0; query < kLength; ++query) {
    for (int64_t key = 0; key < kLength; ++key) {
      const stbi_uc* pixel = &pixels[((panel.y + query) * width + panel.x + key) * 3];
      const bool white = pixel[0] == 255 && pixel[1] == 255 && pixel[2] == 255;
      const bool grey = std::equal(pixel, pixel + 3, background);
      const bool on = !white && !grey;
      lit += on ? 1 : 0;
      mismatches += on != (selected[query * kLength + key] == 1) ? 1 : 0;
      EXPECT_EQ(grey, key > query) << "query " << query << " key " << key;
    }
  }
  stbi_image_free(pixels);
  std::filesystem::remove(path);
  EXPECT_EQ(mismatches, 0);
  EXPECT_EQ(lit, selected_pairs);
}

}  // namespace
}  // namespace mmsparse
