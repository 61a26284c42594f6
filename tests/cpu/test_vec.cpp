// VecAttention (vec): the plan's keys equal a naive selection written here from the paper's
// definition (pooled queries, minS against a per-group running maximum, Eq. 3 and Alg. 1), set for
// set, as spans where runs are anchored or long and columns elsewhere; attention over the plan
// equals the masked-dense oracle; the kept set contains the exact row-wise minS set; alpha's
// extremes give every key and only sinks + diagonal; bad specs name the parameter.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "common/errors.h"
#include "common/masked_oracle.h"
#include "common/random.h"
#include "cpu/attention_helpers.h"
#include "methods/vec/vec.h"
#include "mmsparse/patterns.h"
#include "mmsparse/status.h"
#include "mmsparse/tensor.h"

namespace mmsparse {
namespace {

using testing::expect_error;

constexpr int kRandomTrials = 40;
constexpr double kTolerance = 1e-5;
constexpr int64_t kKeyTile = 16;  // B_k
constexpr double kPpm = 1e6;

struct Problem {
  PlanShape shape;
  int64_t kv_heads = 1;
  int64_t head_dim = 8;
  test::Operand q, k, v;
  PatternInputs inputs() const { return {q.view, k.view}; }
};

// GQA ratios 1, 4 and 7; odd lengths; kv_len at, above or below q_len; any dtype and strides.
Problem random_problem(test::Random& random, int64_t max_len, bool any_dtype = true) {
  Problem problem;
  PlanShape& shape = problem.shape;
  constexpr int64_t kGroupSizes[] = {1, 4, 7};
  shape.batch = random.uniform_int(1, 2);
  problem.kv_heads = random.uniform_int(1, 2);
  shape.heads = problem.kv_heads * kGroupSizes[random.uniform_int(0, 2)];
  shape.q_len = test::random_length(random, 1, max_len);
  shape.kv_len = random.bernoulli(0.8)
                     ? shape.q_len + random.uniform_int(0, 40)
                     : random.uniform_int(std::max<int64_t>(1, shape.q_len / 2), shape.q_len);
  shape.tile_rows = int64_t{16} << random.uniform_int(0, 3);
  problem.head_dim = int64_t{4} << random.uniform_int(0, 2);
  const DType dtypes[] = {DType::kFloat32, DType::kBFloat16, DType::kFloat16};
  const DType dtype = any_dtype ? dtypes[random.uniform_int(0, 2)] : DType::kFloat32;
  const bool strided = random.bernoulli(0.5);
  problem.q = test::random_operand(random, dtype, shape.batch, shape.q_len, shape.heads,
                                   problem.head_dim, strided);
  problem.k = test::random_operand(random, dtype, shape.batch, shape.kv_len, problem.kv_heads,
                                   problem.head_dim, strided);
  problem.v = test::random_operand(random, dtype, shape.batch, shape.kv_len, problem.kv_heads,
                                   problem.head_dim, strided);
  return problem;
}

PatternSpec random_spec(test::Random& random) {
  constexpr int64_t kPoolings[] = {8, 13, 32, 64, 128};
  constexpr int64_t kGroups[] = {1, 2, 3, 16};
  constexpr int64_t kAlphas[] = {0, 1, 1000, 100000, 500000, 900000, 1000000, 1500000};
  return {"vec",
          {{"pooling", kPoolings[random.uniform_int(0, 4)]},
           {"group", kGroups[random.uniform_int(0, 3)]},
           {"alpha_ppm", random.bernoulli(0.3) ? random.uniform_int(0, 1000000)
                                               : kAlphas[random.uniform_int(0, 7)]},
           {"causal", random.uniform_int(0, 1)},
           {"union_tiles", random.uniform_int(0, 1)}}};
}

// --- The naive selection, from the paper's definition ------------------------------------------

struct NaiveBlock {
  int64_t row_begin, row_end;
  std::vector<uint8_t> dense;  // [kv_len]: sinks and the diagonal
  std::vector<int64_t> kept;   // selected keys, ascending
  std::vector<int64_t> exact;  // Eq. 3 with one maximum over every candidate, ascending
};

// Block b of head slot `slot`: the mean of its queries scores every candidate key (not a sink, not
// on the diagonal, causal: before the diagonal); key j is kept when s_j - m_j >= log(alpha), m_j
// the largest candidate score of j's group (kGroupKeys keys from a multiple of it) in tiles up to
// j's own. Pooling, scores and comparison in the fp32 arithmetic the method fixes.
NaiveBlock naive_block(const Problem& p, const PatternSpec& spec, int64_t slot, int64_t b) {
  const PlanShape& shape = p.shape;
  const int64_t pooling = spec.params.at("pooling");
  const int64_t group_keys = spec.params.at("group") * kKeyTile;
  const bool causal = spec.params.at("causal") == 1;
  const int64_t alpha_ppm = spec.params.at("alpha_ppm");
  const float log_alpha = alpha_ppm == 0 ? -std::numeric_limits<float>::infinity()
                                         : static_cast<float>(std::log(alpha_ppm / kPpm));
  const int64_t batch = slot / shape.heads, head = slot % shape.heads;
  const int64_t kv_head = head / (shape.heads / p.kv_heads);
  const int64_t offset = shape.kv_len - shape.q_len;
  NaiveBlock block{b * pooling, std::min(shape.q_len, (b + 1) * pooling), {}, {}};
  block.dense.assign(static_cast<std::size_t>(shape.kv_len), 0);
  const TensorView& q = p.q.view;
  const TensorView& k = p.k.view;
  std::vector<float> pooled(static_cast<std::size_t>(p.head_dim), 0.0f);
  for (int64_t r = block.row_begin; r < block.row_end; ++r) {
    for (int64_t d = 0; d < p.head_dim; ++d) {
      pooled[d] += load_float(
          q, batch * q.strides[0] + r * q.strides[1] + head * q.strides[2] + d * q.strides[3]);
    }
  }
  // The mean, rounded to the inputs' dtype (the tensor-core operand on the GPU).
  for (float& value : pooled) {
    value /= static_cast<float>(block.row_end - block.row_begin);
    value = round_to_dtype(q.dtype, value);
  }
  const float scale = 1.0f / std::sqrt(static_cast<float>(p.head_dim));
  std::vector<float> score(static_cast<std::size_t>(shape.kv_len));
  std::vector<uint8_t> candidate(static_cast<std::size_t>(shape.kv_len), 0);
  for (int64_t j = 0; j < shape.kv_len; ++j) {
    const bool sink = j < pooling;
    const bool diagonal = j >= block.row_begin + offset && j < block.row_end + offset;
    block.dense[j] = sink || diagonal;
    candidate[j] = !block.dense[j] && (!causal || j < block.row_begin + offset);
    float sum = 0.0f;
    for (int64_t d = 0; d < p.head_dim; ++d) {
      sum = std::fma(pooled[d],
                     load_float(k, batch * k.strides[0] + j * k.strides[1] +
                                       kv_head * k.strides[2] + d * k.strides[3]),
                     sum);
    }
    score[j] = sum * scale;
  }
  for (int64_t j = 0; j < shape.kv_len; ++j) {
    if (!candidate[j]) continue;
    float m = -std::numeric_limits<float>::infinity();
    const int64_t group_begin = j / group_keys * group_keys;
    const int64_t tile_end = (j / kKeyTile + 1) * kKeyTile;
    for (int64_t i = group_begin; i < std::min(tile_end, shape.kv_len); ++i) {
      if (candidate[i]) m = std::max(m, score[i]);
    }
    if (score[j] - m >= log_alpha) block.kept.push_back(j);
  }
  float row_max = -std::numeric_limits<float>::infinity();
  for (int64_t j = 0; j < shape.kv_len; ++j) {
    if (candidate[j]) row_max = std::max(row_max, score[j]);
  }
  for (int64_t j = 0; j < shape.kv_len; ++j) {
    if (candidate[j] && score[j] - row_max >= log_alpha) block.exact.push_back(j);
  }
  return block;
}

// Pooled blocks per plan tile: with union_tiles, as many whole blocks as the plan's tile holds.
int64_t naive_tile_blocks(const PlanShape& shape, const PatternSpec& spec) {
  const int64_t pooling = spec.params.at("pooling");
  return spec.param("union_tiles", 1) == 1 ? std::max<int64_t>(1, shape.tile_rows / pooling) : 1;
}

// Consecutive blocks as one tile: all their rows, the sinks and diagonals of each (the diagonals
// of consecutive blocks touch: one run), and every key any of them selects that is not dense.
NaiveBlock naive_union(const std::vector<NaiveBlock>& blocks) {
  NaiveBlock tile = blocks.front();
  tile.row_end = blocks.back().row_end;
  tile.exact.clear();
  for (const NaiveBlock& block : blocks) {
    for (std::size_t j = 0; j < tile.dense.size(); ++j) tile.dense[j] |= block.dense[j];
    tile.kept.insert(tile.kept.end(), block.kept.begin(), block.kept.end());
  }
  std::sort(tile.kept.begin(), tile.kept.end());
  tile.kept.erase(std::unique(tile.kept.begin(), tile.kept.end()), tile.kept.end());
  std::erase_if(tile.kept, [&](int64_t key) { return tile.dense[key] != 0; });
  return tile;
}

// The tile's records from the block's keys, written from the rule (not from vec_add_tile_keys):
// walk the keys, cut maximal runs of kept keys (sinks, diagonal, selected); a run with a sink or
// diagonal key, or of at least kVecMinSpanKeys keys, is a span, the rest columns.
struct TileKeys {
  std::vector<std::pair<int64_t, int64_t>> spans;
  std::vector<int64_t> columns;
};
TileKeys naive_tile_keys(const NaiveBlock& block) {
  const auto kv_len = static_cast<int64_t>(block.dense.size());
  std::vector<uint8_t> kept = block.dense;
  for (const int64_t key : block.kept) kept[key] = 1;
  TileKeys tile;
  for (int64_t key = 0; key < kv_len;) {
    if (kept[key] == 0) {
      ++key;
      continue;
    }
    int64_t end = key;
    bool anchored = false;
    for (; end < kv_len && kept[end] != 0; ++end) anchored = anchored || block.dense[end] != 0;
    if (anchored || end - key >= detail::kVecMinSpanKeys) {
      tile.spans.emplace_back(key, end);
    } else {
      for (int64_t j = key; j < end; ++j) tile.columns.push_back(j);
    }
    key = end;
  }
  return tile;
}

// Every tile of the plan: rows inside one block (or one plan tile of whole blocks, their keys'
// union, with union_tiles), its spans and columns those of the naive
// selection's runs (so spans and columns together hold exactly the sinks, the diagonal and the
// naive kept keys); and the materialised mask equals the naive pairs under the mask.
void expect_plan_matches_naive(const Problem& p, const PatternSpec& spec) {
  const PatternInputs inputs = p.inputs();
  const Plan plan = build_plan(spec, p.shape, nullptr, &inputs);
  const PlanShape& shape = p.shape;
  const int64_t pooling = spec.params.at("pooling");
  const bool causal = spec.params.at("causal") == 1;
  const int64_t offset = shape.kv_len - shape.q_len;
  for (int64_t slot = 0; slot < plan.head_slots(); ++slot) {
    SCOPED_TRACE("head slot " + std::to_string(slot));
    std::vector<uint8_t> expected(static_cast<std::size_t>(shape.q_len * shape.kv_len), 0);
    const int64_t blocks = (shape.q_len + pooling - 1) / pooling;
    const int64_t tile_blocks = naive_tile_blocks(shape, spec);
    int64_t tile = plan.head_tile_offsets[slot];
    for (int64_t b = 0; b < blocks; b += tile_blocks) {
      std::vector<NaiveBlock> group;
      for (int64_t g = b; g < std::min(blocks, b + tile_blocks); ++g) {
        group.push_back(naive_block(p, spec, slot, g));
      }
      const NaiveBlock block = naive_union(group);
      for (int64_t row = block.row_begin; row < block.row_end; row += shape.tile_rows, ++tile) {
        ASSERT_LT(tile, plan.head_tile_offsets[slot + 1]);
        EXPECT_EQ(plan.tiles[tile].begin, row);
        EXPECT_EQ(plan.tiles[tile].end, std::min(block.row_end, row + shape.tile_rows));
        const TileKeys expected_keys = naive_tile_keys(block);
        const std::vector<int64_t> columns(
            plan.columns.begin() + plan.tile_column_offsets[tile],
            plan.columns.begin() + plan.tile_column_offsets[tile + 1]);
        ASSERT_EQ(columns, expected_keys.columns) << "block " << b;
        std::vector<std::pair<int64_t, int64_t>> spans;
        for (int64_t s = plan.tile_span_offsets[tile]; s < plan.tile_span_offsets[tile + 1]; ++s) {
          spans.emplace_back(plan.spans[s].begin, plan.spans[s].end);
        }
        ASSERT_EQ(spans, expected_keys.spans) << "block " << b;
        // The keys, as a set: the sinks, the diagonal and the selected keys, each once.
        std::vector<int64_t> keys = columns;
        for (const auto& [begin, end] : spans) {
          for (int64_t j = begin; j < end; ++j) keys.push_back(j);
        }
        std::sort(keys.begin(), keys.end());
        std::vector<int64_t> wanted = block.kept;
        for (int64_t j = 0; j < shape.kv_len; ++j) {
          if (block.dense[j] != 0) wanted.push_back(j);
        }
        std::sort(wanted.begin(), wanted.end());
        ASSERT_EQ(keys, wanted) << "block " << b;
        EXPECT_EQ(plan.masks[plan.tile_masks[tile]].causal, causal);
      }
      for (int64_t r = block.row_begin; r < block.row_end; ++r) {
        for (int64_t j = 0; j < shape.kv_len; ++j) {
          const bool allowed = !causal || j <= r + offset;
          const bool chosen =
              block.dense[j] != 0 || std::binary_search(block.kept.begin(), block.kept.end(), j);
          expected[r * shape.kv_len + j] = allowed && chosen;
        }
      }
    }
    EXPECT_EQ(tile, plan.head_tile_offsets[slot + 1]);
    ASSERT_EQ(materialize_mask(plan, slot), expected);
  }
}

TEST(VecPattern, PlanEqualsNaiveSelectionSetForSet) {
  test::Random random;
  SCOPED_TRACE(random.trace());
  for (int trial = 0; trial < kRandomTrials; ++trial) {
    SCOPED_TRACE("trial " + std::to_string(trial));
    const Problem problem = random_problem(random, 300);
    expect_plan_matches_naive(problem, random_spec(random));
  }
}

TEST(VecPattern, PaperPoolingsOnLongerInputs) {
  test::Random random;
  SCOPED_TRACE(random.trace());
  for (const int64_t pooling : {64, 128}) {
    for (const int64_t causal : {0, 1}) {
      for (const int64_t union_tiles : {0, 1}) {
        Problem problem = random_problem(random, 700);
        problem.shape.tile_rows = 128;  // the CUDA engine's at head_dim 128
        expect_plan_matches_naive(problem, {"vec",
                                            {{"pooling", pooling},
                                             {"group", 16},
                                             {"alpha_ppm", 200000},
                                             {"causal", causal},
                                             {"union_tiles", union_tiles}}});
      }
    }
  }
}

// A tile's keys as a sorted set: its spans' keys and its columns.
std::vector<int64_t> plan_tile_keys(const Plan& plan, int64_t tile) {
  std::vector<int64_t> keys(plan.columns.begin() + plan.tile_column_offsets[tile],
                            plan.columns.begin() + plan.tile_column_offsets[tile + 1]);
  for (int64_t s = plan.tile_span_offsets[tile]; s < plan.tile_span_offsets[tile + 1]; ++s) {
    for (int64_t j = plan.spans[s].begin; j < plan.spans[s].end; ++j) keys.push_back(j);
  }
  std::sort(keys.begin(), keys.end());
  return keys;
}

// At the CUDA engine's 128-row tiles, a union tile holds tile_rows / pooling whole blocks (the last
// tile what is left, odd lengths included) and its keys are those of its blocks' per-block tiles
// plus, at most, the rest of its own diagonal: each row computes every pair it computed alone.
TEST(VecPattern, UnionTilesHoldEveryBlocksKeys) {
  test::Random random;
  SCOPED_TRACE(random.trace());
  constexpr int64_t kPlanTileRows = 128;
  for (int trial = 0; trial < kRandomTrials / 2; ++trial) {
    SCOPED_TRACE("trial " + std::to_string(trial));
    Problem p = random_problem(random, 600);
    p.shape.tile_rows = kPlanTileRows;
    PatternSpec spec = random_spec(random);
    const int64_t pooling = int64_t{16} << random.uniform_int(0, 2);  // 16, 32 or 64
    spec.params["pooling"] = pooling;
    spec.params["union_tiles"] = 0;
    const PatternInputs inputs = p.inputs();
    const Plan blocks = build_plan(spec, p.shape, nullptr, &inputs);
    spec.params["union_tiles"] = 1;
    const Plan tiles = build_plan(spec, p.shape, nullptr, &inputs);
    const int64_t tile_blocks = kPlanTileRows / pooling;
    const int64_t offset = p.shape.kv_len - p.shape.q_len;
    for (int64_t slot = 0; slot < tiles.head_slots(); ++slot) {
      const int64_t first_block = blocks.head_tile_offsets[slot];
      const int64_t block_count = blocks.head_tile_offsets[slot + 1] - first_block;
      const int64_t first_tile = tiles.head_tile_offsets[slot];
      ASSERT_EQ(tiles.head_tile_offsets[slot + 1] - first_tile,
                (block_count + tile_blocks - 1) / tile_blocks);
      for (int64_t t = 0; first_tile + t < tiles.head_tile_offsets[slot + 1]; ++t) {
        const QueryTile& tile = tiles.tiles[first_tile + t];
        EXPECT_EQ(tile.begin, t * kPlanTileRows);
        EXPECT_EQ(tile.end, std::min(p.shape.q_len, (t + 1) * kPlanTileRows));
        const std::vector<int64_t> keys = plan_tile_keys(tiles, first_tile + t);
        std::vector<int64_t> joined;
        for (int64_t b = t * tile_blocks; b < std::min(block_count, (t + 1) * tile_blocks); ++b) {
          const std::vector<int64_t> own = plan_tile_keys(blocks, first_block + b);
          ASSERT_TRUE(std::includes(keys.begin(), keys.end(), own.begin(), own.end()));
          joined.insert(joined.end(), own.begin(), own.end());
        }
        std::sort(joined.begin(), joined.end());
        for (const int64_t key : keys) {
          if (std::binary_search(joined.begin(), joined.end(), key)) continue;
          EXPECT_GE(key, tile.begin + offset) << "an added key outside the tile's diagonal";
          EXPECT_LT(key, tile.end + offset) << "an added key outside the tile's diagonal";
        }
      }
      const std::vector<uint8_t> alone = materialize_mask(blocks, slot);
      const std::vector<uint8_t> joint = materialize_mask(tiles, slot);
      for (std::size_t pair = 0; pair < alone.size(); ++pair) ASSERT_LE(alone[pair], joint[pair]);
    }
  }
}

// A block that fills (or overfills) the plan's tile has no neighbour to share it: both modes build
// the same plan.
TEST(VecPattern, UnionTilesChangeNothingWhenABlockFillsATile) {
  test::Random random;
  SCOPED_TRACE(random.trace());
  for (const int64_t pooling : {64, 128}) {
    for (const int64_t causal : {0, 1}) {
      Problem p = random_problem(random, 500);
      p.shape.tile_rows = 64;
      const PatternInputs inputs = p.inputs();
      PatternSpec spec{"vec", {{"pooling", pooling}, {"alpha_ppm", 300000}, {"causal", causal}}};
      spec.params["union_tiles"] = 0;
      const Plan blocks = build_plan(spec, p.shape, nullptr, &inputs);
      spec.params["union_tiles"] = 1;
      const Plan tiles = build_plan(spec, p.shape, nullptr, &inputs);
      ASSERT_EQ(tiles.tiles.size(), blocks.tiles.size());
      for (std::size_t t = 0; t < tiles.tiles.size(); ++t) {
        EXPECT_EQ(tiles.tiles[t].begin, blocks.tiles[t].begin);
        EXPECT_EQ(tiles.tiles[t].end, blocks.tiles[t].end);
        EXPECT_EQ(plan_tile_keys(tiles, static_cast<int64_t>(t)),
                  plan_tile_keys(blocks, static_cast<int64_t>(t)));
      }
      EXPECT_EQ(tiles.columns, blocks.columns);
    }
  }
}

TEST(VecPattern, PlannedAttentionEqualsMaskedOracle) {
  test::Random random;
  SCOPED_TRACE(random.trace());
  for (int trial = 0; trial < kRandomTrials / 2; ++trial) {
    SCOPED_TRACE("trial " + std::to_string(trial));
    const Problem problem = random_problem(random, 200, /*any_dtype=*/false);
    const PatternInputs inputs = problem.inputs();
    const Plan plan = build_plan(random_spec(random), problem.shape, nullptr, &inputs);
    check_passes_disjoint(plan);
    test::expect_plan_equals_masked_oracle(plan, problem.q.view, problem.k.view, problem.v.view,
                                           kTolerance);
  }
}

// The running maximum never exceeds the row maximum, so every key of the exact minS set (one
// maximum over all candidates, Eq. 3) is kept; with one group covering every key and alpha
// below 1, some kept keys lie outside it on random inputs (the superset is strict in general).
TEST(VecPattern, KeepsTheExactMinSSet) {
  test::Random random;
  SCOPED_TRACE(random.trace());
  int64_t extra_keys = 0;
  for (int trial = 0; trial < kRandomTrials / 2; ++trial) {
    const Problem p = random_problem(random, 300);
    PatternSpec spec = random_spec(random);
    spec.params["alpha_ppm"] = random.uniform_int(1, 999999);
    const int64_t pooling = spec.params.at("pooling");
    for (int64_t slot = 0; slot < p.shape.head_slots(); ++slot) {
      for (int64_t b = 0; b * pooling < p.shape.q_len; ++b) {
        const NaiveBlock block = naive_block(p, spec, slot, b);
        EXPECT_TRUE(std::includes(block.kept.begin(), block.kept.end(), block.exact.begin(),
                                  block.exact.end()));
        extra_keys += static_cast<int64_t>(block.kept.size() - block.exact.size());
      }
    }
  }
  EXPECT_GT(extra_keys, 0);
}

// alpha 0 keeps every key a row may see (the plan is dense); alpha above 1 keeps no column.
TEST(VecPattern, AlphaExtremes) {
  test::Random random;
  SCOPED_TRACE(random.trace());
  for (int trial = 0; trial < kRandomTrials / 4; ++trial) {
    const Problem p = random_problem(random, 300);
    const PatternInputs inputs = p.inputs();
    for (const int64_t causal : {0, 1}) {
      const Plan all = build_plan(PatternSpec{"vec", {{"alpha_ppm", 0}, {"causal", causal}}},
                                  p.shape, nullptr, &inputs);
      const int64_t offset = p.shape.kv_len - p.shape.q_len;
      for (int64_t slot = 0; slot < all.head_slots(); ++slot) {
        const std::vector<uint8_t> mask = materialize_mask(all, slot);
        for (int64_t r = 0; r < p.shape.q_len; ++r) {
          for (int64_t j = 0; j < p.shape.kv_len; ++j) {
            ASSERT_EQ(mask[r * p.shape.kv_len + j], causal == 0 || j <= r + offset)
                << "row " << r << " key " << j;
          }
        }
      }
      const Plan none = build_plan(PatternSpec{"vec", {{"alpha_ppm", 1000001}, {"causal", causal}}},
                                   p.shape, nullptr, &inputs);
      EXPECT_TRUE(none.columns.empty());
      // Every candidate kept: each tile's keys are one run holding the sinks, so one span.
      EXPECT_TRUE(all.columns.empty());
      for (int64_t t = 0; t < all.num_tiles(); ++t) {
        EXPECT_LE(all.tile_span_offsets[t + 1] - all.tile_span_offsets[t], 1) << "tile " << t;
      }
    }
  }
}

// The representation's edges, on a block chosen by hand: a run one key short of kVecMinSpanKeys
// stays columns, one of exactly kVecMinSpanKeys becomes a span, runs touching the sinks or the
// diagonal (from either side: non-causal) merge into their span whatever their length.
TEST(VecPattern, RunsBecomeSpansAtTheThresholdOrNextToSinksAndDiagonal) {
  constexpr int64_t kLen = 1000;
  constexpr int64_t kSinks = 16;
  const PlanShape shape{1, 1, kLen, kLen, 64};
  detail::VecBlock block;
  block.row_begin = 600;
  block.row_end = 664;
  block.sink_end = kSinks;
  block.diagonal_begin = 600;
  block.diagonal_end = 664;
  block.candidate_end = kLen;  // non-causal
  const int64_t short_run = detail::kVecMinSpanKeys - 1;
  std::vector<int64_t> selected;
  const auto select = [&](int64_t begin, int64_t end) {
    for (int64_t key = begin; key < end; ++key) selected.push_back(key);
  };
  select(kSinks, kSinks + 3);                              // touches the sinks
  select(100, 100 + short_run);                            // columns
  select(300, 300 + detail::kVecMinSpanKeys);              // a span of its own
  select(block.diagonal_begin - 2, block.diagonal_begin);  // touches the diagonal's start
  select(block.diagonal_end, block.diagonal_end + 1);      // and its end
  select(900, 905);                                        // columns
  PlanBuilder builder(shape);
  builder.begin_head();
  builder.begin_tile(block.row_begin, block.row_end, MaskPolicy{false});
  detail::vec_add_tile_keys(builder, block, selected);
  const Plan plan = builder.finish();
  const std::vector<KeySpan>& spans = plan.spans;
  const std::vector<KeySpan> expected_spans = {
      {0, kSinks + 3},
      {300, static_cast<int32_t>(300 + detail::kVecMinSpanKeys)},
      {static_cast<int32_t>(block.diagonal_begin - 2),
       static_cast<int32_t>(block.diagonal_end + 1)}};
  EXPECT_EQ(spans, expected_spans);
  std::vector<int32_t> expected_columns;
  for (int64_t key = 100; key < 100 + short_run; ++key) {
    expected_columns.push_back(static_cast<int32_t>(key));
  }
  for (int32_t key = 900; key < 905; ++key) expected_columns.push_back(key);
  EXPECT_EQ(plan.columns, expected_columns);
}

TEST(VecPattern, BadParametersAndInputsAreNamed) {
  test::Random random;
  const Problem p = random_problem(random, 100);
  const PatternInputs inputs = p.inputs();
  const auto build = [&](const std::string& key, int64_t value) {
    return [&, key, value] {
      build_plan(PatternSpec{"vec", {{key, value}}}, p.shape, nullptr, &inputs);
    };
  };
  expect_error(build("pooling", 0), ErrorCode::kInvalidArgument, {"vec parameter pooling", ">= 1"});
  expect_error(build("group", 0), ErrorCode::kInvalidArgument, {"vec parameter group", ">= 1"});
  expect_error(build("alpha_ppm", -1), ErrorCode::kInvalidArgument,
               {"vec parameter alpha_ppm", ">= 0"});
  expect_error(build("causal", 2), ErrorCode::kInvalidArgument, {"vec parameter causal", "0 or 1"});
  expect_error(build("union_tiles", 2), ErrorCode::kInvalidArgument,
               {"vec parameter union_tiles", "0 or 1"});
  expect_error(build("alpha", 1), ErrorCode::kInvalidArgument, {"vec", "alpha_ppm", "\"alpha\""});
  expect_error(
      [&] {
        build_plan(PatternSpec{"vec", {}}, p.shape);
      },
      ErrorCode::kInvalidArgument, {"vec inputs"});
}

TEST(VecPattern, SpecParsesAndIsDynamic) {
  const PatternSpec spec = PatternSpec::parse("vec:alpha_ppm=250000,pooling=128,causal=0");
  EXPECT_TRUE(is_dynamic(spec));
  const PatternSpec resolved = resolve_pattern(spec);
  EXPECT_EQ(resolved.params.at("alpha_ppm"), 250000);
  EXPECT_EQ(resolved.params.at("pooling"), 128);
  EXPECT_EQ(resolved.params.at("group"), 16);
  EXPECT_EQ(resolved.params.at("causal"), 0);
}

}  // namespace
}  // namespace mmsparse
