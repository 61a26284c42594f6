// The tile oracle against brute force: block sums from the full probability matrix, and the
// fewest tiles found by trying every set of tiles on inputs small enough to enumerate.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "common/random.h"
#include "cpu/attention_helpers.h"
#include "mmsparse/attention.h"
#include "mmsparse/status.h"
#include "mmsparse/tools/metrics.h"

namespace mmsparse {
namespace {

using test::Operand;
using test::Random;

// Scores of N(0, 1) inputs at head_dim 16 spread enough that tiles differ in mass by orders.
constexpr int64_t kHeadDim = 16;
constexpr double kMassTolerance = 1e-5;  // fp32 dot products against fp64 ones
// The oracle's masses (fp32 scores) and the brute force's (fp64) differ by ~1e-7, which moves the
// fractional last tile's share by that over the tile's mass: a small part of a pair.
constexpr double kFractionalSlack = 0.05;

struct Inputs {
  Operand q, k, v;
  Tensor lse;  // [batch, heads, q_len] from dense attention
};

Inputs make_inputs(Random& random, int64_t q_len, int64_t kv_len, int64_t heads, int64_t kv_heads) {
  Inputs inputs{test::random_operand(random, DType::kFloat32, 1, q_len, heads, kHeadDim, false),
                test::random_operand(random, DType::kFloat32, 1, kv_len, kv_heads, kHeadDim, true),
                test::random_operand(random, DType::kFloat32, 1, kv_len, kv_heads, kHeadDim, false),
                test::poisoned_lse(1, heads, q_len)};
  Operand out = test::poisoned_output(DType::kFloat32, 1, q_len, heads, kHeadDim, false);
  attention_dense(inputs.q.view, inputs.k.view, inputs.v.view, out.view, inputs.lse.view());
  return inputs;
}

// Row i's dense probabilities [q_len][kv_len] in fp64, its own softmax (0 beyond causal keys).
std::vector<std::vector<double>> probabilities(const Inputs& inputs, int64_t head) {
  const TensorView& q = inputs.q.view;
  const TensorView& k = inputs.k.view;
  const int64_t q_len = q.shape[1], kv_len = k.shape[1];
  const int64_t kv_head = head / (q.shape[2] / k.shape[2]);
  const double scale = 1.0 / std::sqrt(static_cast<double>(kHeadDim));
  std::vector<std::vector<double>> p(q_len, std::vector<double>(kv_len, 0.0));
  for (int64_t i = 0; i < q_len; ++i) {
    const int64_t visible = std::clamp<int64_t>(i + kv_len - q_len + 1, 0, kv_len);
    double total = 0.0;
    for (int64_t j = 0; j < visible; ++j) {
      double score = 0.0;
      for (int64_t d = 0; d < kHeadDim; ++d) {
        score += static_cast<double>(
                     load_float(q, i * q.strides[1] + head * q.strides[2] + d * q.strides[3])) *
                 load_float(k, j * k.strides[1] + kv_head * k.strides[2] + d * k.strides[3]);
      }
      p[i][j] = std::exp(score * scale);
      total += p[i][j];
    }
    for (int64_t j = 0; j < visible; ++j) p[i][j] /= total;
  }
  return p;
}

struct Tile {
  int64_t tile, chunk;
  int64_t pairs;
};

// Tiles holding a causal pair, with their pair counts.
std::vector<Tile> causal_tiles(const std::vector<std::vector<double>>& p, int64_t q_len,
                               int64_t kv_len, int64_t rows, int64_t keys) {
  std::vector<Tile> tiles;
  for (int64_t t = 0; t * rows < q_len; ++t) {
    for (int64_t c = 0; c * keys < kv_len; ++c) {
      int64_t pairs = 0;
      for (int64_t i = t * rows; i < std::min(q_len, (t + 1) * rows); ++i) {
        const int64_t visible = std::clamp<int64_t>(i + kv_len - q_len + 1, 0, kv_len);
        pairs += std::max<int64_t>(0, std::min(visible, (c + 1) * keys) - c * keys);
      }
      if (pairs > 0) tiles.push_back({t, c, pairs});
    }
  }
  (void)p;
  return tiles;
}

// Mean over rows of the mass a set of tiles covers, from the probability matrix directly.
double mean_recall(const std::vector<std::vector<double>>& p, const std::vector<Tile>& tiles,
                   uint32_t subset, int64_t rows, int64_t keys) {
  double sum = 0.0;
  for (std::size_t i = 0; i < p.size(); ++i) {
    for (std::size_t n = 0; n < tiles.size(); ++n) {
      if ((subset >> n & 1u) == 0 || static_cast<int64_t>(i) / rows != tiles[n].tile) continue;
      for (int64_t j = tiles[n].chunk * keys;
           j < std::min<int64_t>(p[i].size(), (tiles[n].chunk + 1) * keys); ++j) {
        sum += p[i][j];
      }
    }
  }
  return sum / static_cast<double>(p.size());
}

TEST(TileOracle, BlockSumsMatchTheProbabilityMatrix) {
  Random random;
  SCOPED_TRACE(random.trace());
  const int64_t q_len = test::random_length(random, 40, 150);
  const int64_t kv_len = q_len + random.uniform_int(0, 37);
  const Inputs inputs = make_inputs(random, q_len, kv_len, 4, 2);
  TileMassOptions options;
  options.tile_rows = 16;
  options.chunk_keys = 24;
  for (int64_t head = 0; head < 4; ++head) {
    const TileMass mass =
        tile_mass(inputs.q.view, inputs.k.view, inputs.lse.view(), 0, head, options);
    const auto p = probabilities(inputs, head);
    // Without the dense LSE each row's own LSE is computed: the same sums.
    const TileMass own_lse =
        tile_mass(inputs.q.view, inputs.k.view, TensorView{}, 0, head, options);
    ASSERT_EQ(own_lse.mass.size(), mass.mass.size());
    for (std::size_t n = 0; n < mass.mass.size(); ++n) {
      EXPECT_NEAR(own_lse.mass[n], mass.mass[n], kMassTolerance);
    }
    ASSERT_EQ(mass.query_tiles, (q_len + 15) / 16);
    ASSERT_EQ(mass.key_chunks, (kv_len + 23) / 24);
    ASSERT_EQ(static_cast<int64_t>(mass.sampled.size()), mass.query_tiles);
    for (int64_t t = 0; t < mass.query_tiles; ++t) {
      for (int64_t c = 0; c < mass.key_chunks; ++c) {
        double expected = 0.0;
        for (int64_t i = t * 16; i < std::min(q_len, (t + 1) * 16); ++i) {
          for (int64_t j = c * 24; j < std::min(kv_len, (c + 1) * 24); ++j) expected += p[i][j];
        }
        EXPECT_NEAR(mass.mass[t * mass.key_chunks + c], expected, kMassTolerance)
            << "head " << head << " tile " << t << " chunk " << c;
      }
    }
  }
}

// Every subset of at most 20 causal tiles: the fewest reaching r (unit cost) and the cheapest in
// pairs, against the greedy answer.
TEST(TileOracle, GreedyIsTheFewestTilesAndBoundsThePairCost) {
  Random random;
  SCOPED_TRACE(random.trace());
  constexpr int64_t kRows = 4, kKeys = 5;
  const int64_t q_len = random.uniform_int(13, 19);
  const int64_t kv_len = q_len + random.uniform_int(0, 3);
  const Inputs inputs = make_inputs(random, q_len, kv_len, 2, 1);
  TileMassOptions options;
  options.tile_rows = kRows;
  options.chunk_keys = kKeys;
  for (int64_t head = 0; head < 2; ++head) {
    const auto p = probabilities(inputs, head);
    const std::vector<Tile> tiles = causal_tiles(p, q_len, kv_len, kRows, kKeys);
    ASSERT_LE(tiles.size(), 20u);
    const TileMass mass =
        tile_mass(inputs.q.view, inputs.k.view, inputs.lse.view(), 0, head, options);
    const std::vector<double> recalls = {0.5, 0.9, 0.95, 0.98};
    const TileOracle by_tiles = tile_oracle(mass, recalls, TileCostUnit::kTiles);
    const TileOracle by_pairs = tile_oracle(mass, recalls, TileCostUnit::kPairs);
    ASSERT_EQ(by_tiles.causal_tiles, static_cast<int64_t>(tiles.size()));
    int64_t dense_pairs = 0;
    for (const Tile& tile : tiles) dense_pairs += tile.pairs;
    for (std::size_t level = 0; level < recalls.size(); ++level) {
      int64_t fewest = std::numeric_limits<int64_t>::max();
      int64_t cheapest = std::numeric_limits<int64_t>::max();
      for (uint32_t subset = 0; subset < (1u << tiles.size()); ++subset) {
        // The same slack as the oracle: the full set reaches every r whatever the rounding.
        if (mean_recall(p, tiles, subset, kRows, kKeys) < recalls[level] * (1.0 - 1e-9)) continue;
        int64_t pairs = 0;
        for (std::size_t n = 0; n < tiles.size(); ++n) pairs += (subset >> n & 1u) * tiles[n].pairs;
        fewest = std::min<int64_t>(fewest, __builtin_popcount(subset));
        cheapest = std::min(cheapest, pairs);
      }
      SCOPED_TRACE("head " + std::to_string(head) + " recall " + std::to_string(recalls[level]));
      EXPECT_EQ(by_tiles.levels[level].tiles, fewest);
      // The fractional cost is a lower bound on every set's cost, within one tile of the greedy.
      const double pair_cost = by_pairs.levels[level].cost_share * dense_pairs;
      EXPECT_LE(pair_cost, cheapest + kFractionalSlack);
      EXPECT_GT(pair_cost, cheapest - kRows * kKeys - kFractionalSlack);
      EXPECT_LE(by_tiles.levels[level].cost_share * tiles.size(), fewest + 1e-9);
      EXPECT_GT(by_tiles.levels[level].cost_share * tiles.size(), fewest - 1.0);
      EXPECT_DOUBLE_EQ(by_tiles.levels[level].cost_share_stderr, 0.0);
    }
  }
}

TEST(TileOracle, SampledTilesEstimateTheFullOracleWithinTheirError) {
  Random random(20261127);  // a fixed input: the check is statistical
  const int64_t q_len = 1031;
  const Inputs inputs = make_inputs(random, q_len, q_len, 1, 1);
  TileMassOptions options;
  options.tile_rows = 16;
  options.chunk_keys = 32;
  const std::vector<double> recalls(std::begin(kTileOracleRecalls), std::end(kTileOracleRecalls));
  const TileOracle full = tile_oracle(
      tile_mass(inputs.q.view, inputs.k.view, inputs.lse.view(), 0, 0, options), recalls);
  options.sample_tiles = 24;
  const TileMass sampled_mass =
      tile_mass(inputs.q.view, inputs.k.view, inputs.lse.view(), 0, 0, options);
  EXPECT_EQ(sampled_mass.sampled.back(), sampled_mass.query_tiles - 1);
  const TileOracle sampled = tile_oracle(sampled_mass, recalls);
  EXPECT_EQ(sampled.sampled_tiles, 24);
  EXPECT_EQ(sampled.query_tiles, full.query_tiles);
  for (std::size_t level = 0; level < recalls.size(); ++level) {
    const TileOracleLevel& estimate = sampled.levels[level];
    EXPECT_GT(estimate.cost_share_stderr, 0.0);
    EXPECT_NEAR(estimate.cost_share, full.levels[level].cost_share,
                4.0 * estimate.cost_share_stderr + 0.01);
  }
}

TEST(TileOracle, SpeedupBoundAndBadArguments) {
  EXPECT_DOUBLE_EQ(tile_oracle_speedup_bound(0.25), 4.0);
  EXPECT_DOUBLE_EQ(tile_oracle_speedup_bound(0.25, 0.5), 2.0);
  EXPECT_THROW(tile_oracle_speedup_bound(0.25, 0.0), Error);
  Random random;
  const Inputs inputs = make_inputs(random, 33, 33, 2, 2);
  TileMassOptions options;
  options.tile_rows = 0;
  EXPECT_THROW(tile_mass(inputs.q.view, inputs.k.view, inputs.lse.view(), 0, 0, options), Error);
  options.tile_rows = 8;
  EXPECT_THROW(tile_mass(inputs.q.view, inputs.k.view, inputs.lse.view(), 0, 2, options), Error);
  const TileMass mass = tile_mass(inputs.q.view, inputs.k.view, inputs.lse.view(), 0, 1, options);
  const std::vector<double> bad = {1.5};
  EXPECT_THROW(tile_oracle(mass, bad), Error);
  const std::vector<double> all = {1.0};
  // Recall 1 takes every tile with mass; its cost share is at most 1.
  EXPECT_LE(tile_oracle(mass, all).levels[0].cost_share, 1.0 + 1e-12);
}

}  // namespace
}  // namespace mmsparse
