// Converters to and from MInference's vertical-slash index and FlexAttention's block lists.

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "common/random.h"
#include "common/errors.h"
#include "mmsparse/plan.h"
#include "mmsparse/status.h"

namespace mmsparse {
namespace {

using testing::expect_error;

constexpr int kRandomTrials = 20;
constexpr int64_t kMInferenceBlock = 64;

int64_t uniform(std::mt19937_64& rng, int64_t lo, int64_t hi) {
  return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
}

void expect_same_masks(const Plan& expected, const Plan& actual) {
  ASSERT_EQ(expected.head_slots(), actual.head_slots());
  for (int64_t slot = 0; slot < expected.head_slots(); ++slot) {
    EXPECT_EQ(materialize_mask(expected, slot), materialize_mask(actual, slot))
        << "head slot " << slot;
  }
}

PlanShape random_shape(std::mt19937_64& rng, int64_t tile_rows) {
  PlanShape shape;
  shape.batch = uniform(rng, 1, 2);
  shape.heads = uniform(rng, 1, 3);
  shape.q_len = uniform(rng, 1, 300);
  shape.kv_len = shape.q_len + uniform(rng, 0, 100);
  shape.tile_rows = tile_rows;
  return shape;
}

// Like MInference's converted index: per 64-row tile, slash bands at unaligned starts, vertical
// columns left of them, causal mask; some tiles absent.
Plan random_vertical_slash_plan(std::mt19937_64& rng) {
  const PlanShape shape = random_shape(rng, kMInferenceBlock);
  PlanBuilder builder(shape);
  for (int64_t slot = 0; slot < shape.head_slots(); ++slot) {
    builder.begin_head();
    for (int64_t begin = 0; begin < shape.q_len; begin += kMInferenceBlock) {
      if (std::bernoulli_distribution(0.1)(rng)) continue;
      const int64_t end = std::min(shape.q_len, begin + kMInferenceBlock);
      builder.begin_tile(begin, end);
      std::vector<int64_t> cuts(2 * uniform(rng, 0, 3));
      for (int64_t& cut : cuts) cut = uniform(rng, 0, shape.kv_len);
      std::sort(cuts.begin(), cuts.end());
      std::vector<uint8_t> in_span(shape.kv_len, 0);
      for (size_t i = 0; i < cuts.size(); i += 2) {
        builder.add_span(cuts[i], cuts[i + 1]);
        std::fill(in_span.begin() + cuts[i], in_span.begin() + cuts[i + 1], 1);
      }
      for (int64_t key = 0; key < shape.kv_len; ++key) {
        if (!in_span[key] && std::bernoulli_distribution(0.05)(rng)) builder.add_column(key);
      }
    }
  }
  return builder.finish();
}

// Tiles of block_q rows whose spans are whole key blocks of block_k, one mask for every tile.
Plan random_block_plan(std::mt19937_64& rng, int64_t block_q, int64_t block_k,
                       const MaskPolicy& mask) {
  const PlanShape shape = random_shape(rng, block_q);
  PlanBuilder builder(shape);
  const int64_t kv_blocks = (shape.kv_len + block_k - 1) / block_k;
  for (int64_t slot = 0; slot < shape.head_slots(); ++slot) {
    builder.begin_head();
    for (int64_t begin = 0; begin < shape.q_len; begin += block_q) {
      builder.begin_tile(begin, std::min(shape.q_len, begin + block_q), mask);
      for (int64_t kb = 0; kb < kv_blocks; ++kb) {
        if (std::bernoulli_distribution(0.5)(rng)) {
          builder.add_span(kb * block_k, std::min(shape.kv_len, (kb + 1) * block_k));
        }
      }
    }
  }
  return builder.finish();
}

std::vector<int32_t> listed(const std::vector<int32_t>& counts, const std::vector<int32_t>& indices,
                            int64_t list, int64_t width) {
  return {indices.begin() + list * width, indices.begin() + list * width + counts[list]};
}

// --- MInference ------------------------------------------------------------------------------

TEST(MInferenceIndex, RoundTripKeepsTheMask) {
  test::Random random;
  SCOPED_TRACE(random.trace());
  std::mt19937_64& rng = random.engine();
  for (int trial = 0; trial < kRandomTrials; ++trial) {
    const Plan plan = random_vertical_slash_plan(rng);
    SCOPED_TRACE(plan.summary());
    const MInferenceIndex index = to_minference_index(plan);
    EXPECT_EQ(index.num_blocks, (plan.shape.q_len + kMInferenceBlock - 1) / kMInferenceBlock);
    // Every key block is whole inside the keys (no clipping was needed).
    for (size_t row = 0; row < index.block_count.size(); ++row) {
      for (int32_t b = 0; b < index.block_count[row]; ++b) {
        EXPECT_LE(index.block_offset[row * index.max_blocks + b] + kMInferenceBlock,
                  plan.shape.kv_len);
      }
    }
    expect_same_masks(plan, from_minference_index(index, plan.shape.q_len, plan.shape.kv_len));
  }
}

TEST(MInferenceIndex, SplitsSpansIntoBlocksAndColumns) {
  PlanBuilder builder({.q_len = 100, .kv_len = 200, .tile_rows = 64});
  builder.begin_head();
  builder.begin_tile(0, 64);
  builder.add_span(3, 150);  // two blocks at 3 and 67, then 19 keys left over
  builder.add_column(160);
  builder.add_column(1);
  builder.begin_tile(64, 100);
  const MInferenceIndex index = to_minference_index(builder.finish());
  EXPECT_EQ(index.num_blocks, 2);
  EXPECT_EQ(index.max_blocks, 2);
  EXPECT_EQ(index.max_columns, 21);
  EXPECT_EQ(index.block_count, (std::vector<int32_t>{2, 0}));
  EXPECT_EQ(index.column_count, (std::vector<int32_t>{21, 0}));
  EXPECT_EQ(index.block_offset, (std::vector<int32_t>{3, 67, 0, 0}));
  std::vector<int32_t> columns = {1};
  for (int32_t key = 131; key < 150; ++key) columns.push_back(key);
  columns.push_back(160);
  EXPECT_EQ(std::vector<int32_t>(index.column_index.begin(), index.column_index.begin() + 21),
            columns);
}

TEST(MInferenceIndex, RejectsPlansItCannotCarry) {
  PlanBuilder permuted({.q_len = 4, .kv_len = 4, .tile_rows = 4});
  permuted.begin_head({{3, 1, 1}, {0, 3, 1}});
  expect_error([&] { (void)to_minference_index(permuted.finish()); }, ErrorCode::kUnsupported,
               {"to_minference_index", "head slot 0", "permuted"});
  PlanBuilder unaligned({.q_len = 70, .kv_len = 70, .tile_rows = 64});
  unaligned.begin_head();
  unaligned.begin_tile(0, 60);
  expect_error([&] { (void)to_minference_index(unaligned.finish()); }, ErrorCode::kUnsupported,
               {"tile 0 of head slot 0", "not a block of 64 rows"});
  PlanBuilder windowed({.q_len = 4, .kv_len = 4, .tile_rows = 4});
  windowed.begin_head();
  windowed.begin_tile(0, 4, {.window = 2});
  expect_error([&] { (void)to_minference_index(windowed.finish()); }, ErrorCode::kUnsupported,
               {"causal"});
}

TEST(MInferenceIndex, RejectsMalformedIndex) {
  MInferenceIndex index;
  index.num_blocks = 2;
  index.max_blocks = 1;
  index.max_columns = 1;
  index.block_count = {1, 0};
  index.column_count = {0, 1};
  index.block_offset = {10, 0};
  index.column_index = {0, 5};
  EXPECT_NO_THROW((void)from_minference_index(index, 100, 120));
  expect_error([&] { (void)from_minference_index(index, 200, 120); }, ErrorCode::kInvalidArgument,
               {"MInferenceIndex.num_blocks"});
  MInferenceIndex bad = index;
  bad.block_offset[0] = 120;
  expect_error([&] { (void)from_minference_index(bad, 100, 120); }, ErrorCode::kInvalidArgument,
               {"MInferenceIndex.block_offset", "head slot 0, block 0"});
  bad = index;
  bad.column_index[1] = -3;
  expect_error([&] { (void)from_minference_index(bad, 100, 120); }, ErrorCode::kInvalidArgument,
               {"MInferenceIndex.column_index", "block 1"});
  bad = index;
  bad.block_count[1] = 2;
  expect_error([&] { (void)from_minference_index(bad, 100, 120); }, ErrorCode::kInvalidArgument,
               {"MInferenceIndex.block_count", "max_blocks = 1"});
  bad = index;
  bad.column_index.pop_back();
  expect_error([&] { (void)from_minference_index(bad, 100, 120); }, ErrorCode::kInvalidArgument,
               {"MInferenceIndex.column_index", "expected 2 entries"});
}

// --- Block lists -----------------------------------------------------------------------------

TEST(BlockLists, RoundTripOfBlockAlignedPlansKeepsTheMask) {
  test::Random random;
  SCOPED_TRACE(random.trace());
  std::mt19937_64& rng = random.engine();
  for (int trial = 0; trial < kRandomTrials; ++trial) {
    const int64_t block_q = 8 << uniform(rng, 0, 2);
    const int64_t block_k = 8 << uniform(rng, 0, 2);
    // Causal plans, then windowed ones whose partial blocks stand for the window policy.
    const MaskPolicy mask = trial % 2 == 0 ? MaskPolicy{}
                                           : MaskPolicy{.window = uniform(rng, 1, 60),
                                                        .window_sink = uniform(rng, 0, 20)};
    const Plan plan = random_block_plan(rng, block_q, block_k, mask);
    SCOPED_TRACE(plan.summary() + " block_q=" + std::to_string(block_q) +
                 " block_k=" + std::to_string(block_k));
    const BlockLists lists = to_block_lists(plan, block_q, block_k);
    expect_same_masks(plan, from_block_lists(lists, plan.shape.q_len, plan.shape.kv_len, mask));
  }
}

TEST(BlockLists, ClassifiesFullAndPartialBlocks) {
  // Causal, q_len 8, kv_len 10 (query i sees keys <= i + 2), blocks of 4 × 4; the second tile
  // leaves key 9 out, so kv block 2 there is partial though the diagonal would make it full.
  PlanBuilder builder({.q_len = 8, .kv_len = 10, .tile_rows = 4});
  builder.begin_head();
  builder.begin_tile(0, 4);
  builder.add_span(0, 10);
  builder.begin_tile(4, 8);
  builder.add_span(0, 9);
  const Plan plan = builder.finish();
  const BlockLists lists = to_block_lists(plan, 4, 4);
  EXPECT_EQ(lists.num_q_blocks, 2);
  EXPECT_EQ(lists.num_kv_blocks, 3);
  // q block 0 (aligned 2..5): kv block 0 partial (query 0 sees 0..2), kv block 1 partial.
  EXPECT_EQ(listed(lists.kv_num_blocks, lists.kv_indices, 0, 3), (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(listed(lists.full_kv_num_blocks, lists.full_kv_indices, 0, 3),
            (std::vector<int32_t>{}));
  // q block 1 (aligned 6..9): kv block 0 full, kv block 1 partial (query 4 misses key 7), kv
  // block 2 = keys 8, 9 partial.
  EXPECT_EQ(listed(lists.kv_num_blocks, lists.kv_indices, 1, 3), (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(listed(lists.full_kv_num_blocks, lists.full_kv_indices, 1, 3),
            (std::vector<int32_t>{0}));

  // Dense causal with kv_len 16 (offset 8): q block 0 (aligned 8..11) sees kv blocks 0, 1 whole
  // and block 2 in part; q block 1 (aligned 12..15) sees blocks 0..2 whole and block 3 in part.
  PlanBuilder dense({.q_len = 8, .kv_len = 16, .tile_rows = 4});
  dense.begin_head();
  dense.begin_tile(0, 4);
  dense.add_span(0, 16);
  dense.begin_tile(4, 8);
  dense.add_span(0, 16);
  const BlockLists dense_lists = to_block_lists(dense.finish(), 4, 4);
  EXPECT_EQ(listed(dense_lists.full_kv_num_blocks, dense_lists.full_kv_indices, 0, 4),
            (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(listed(dense_lists.kv_num_blocks, dense_lists.kv_indices, 0, 4),
            (std::vector<int32_t>{2}));
  EXPECT_EQ(listed(dense_lists.full_kv_num_blocks, dense_lists.full_kv_indices, 1, 4),
            (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(listed(dense_lists.kv_num_blocks, dense_lists.kv_indices, 1, 4),
            (std::vector<int32_t>{3}));
}

TEST(BlockLists, RejectsListsAPlanCannotCarry) {
  BlockLists lists;
  lists.block_q = 4;
  lists.block_k = 4;
  lists.num_q_blocks = 1;
  lists.num_kv_blocks = 2;
  lists.kv_num_blocks = {0};
  lists.kv_indices = {0, 0};
  lists.full_kv_num_blocks = {1};
  lists.full_kv_indices = {1, 0};  // keys 4..7 "full" for queries 0..3: a causal mask cuts them
  expect_error([&] { (void)from_block_lists(lists, 4, 8); }, ErrorCode::kInvalidArgument,
               {"BlockLists.full_kv_indices", "key block 1"});
  lists.full_kv_indices = {0, 0};
  EXPECT_NO_THROW((void)from_block_lists(lists, 4, 8));
  expect_error([&] { (void)from_block_lists(lists, 4, 9); }, ErrorCode::kInvalidArgument,
               {"BlockLists.num_kv_blocks"});
  expect_error([&] { (void)from_block_lists(lists, 4, 8, {.same_media = true}); },
               ErrorCode::kInvalidArgument, {"partial_mask"});
  lists.kv_num_blocks = {3};
  expect_error([&] { (void)from_block_lists(lists, 4, 8); }, ErrorCode::kInvalidArgument,
               {"BlockLists.kv_num_blocks"});
}

}  // namespace
}  // namespace mmsparse
