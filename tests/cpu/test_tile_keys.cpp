// TileKeys' lattice modes (methods/estimate/tile_keys.h): whatever a tile adds — ranges, lattices
// and columns in key spaces of one or several original ranges — every mode writes the same key
// set, once each, and attention over the plan equals the masked-dense oracle on that set. The
// range-local mode (the Q/2D-boundary grid's strided spans) keeps each range's lattice pieces
// apart and lists far fewer columns than listing every line key would.

#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <vector>

#include "common/random.h"
#include "common/tile_keys.h"
#include "methods/estimate/estimation.h"
#include "methods/estimate/tile_keys.h"
#include "mmsparse/attention.h"
#include "mmsparse/plan.h"

namespace mmsparse {
namespace {

using detail::KeySpace;
using detail::LatticeKeys;
using detail::TileKeys;

constexpr LatticeKeys kModes[] = {LatticeKeys::kStridedSpans, LatticeKeys::kStridedSpansInRanges};
constexpr int kTrials = 40;
constexpr double kTolerance = 1e-5;

// What one tile adds, in one space's compact coordinates.
struct Addition {
  enum Kind { kRange, kLattice, kColumn } kind;
  std::size_t space;
  int64_t begin, end, step;
};

// The tile's original keys, listed independently of TileKeys.
std::set<int64_t> expected_keys(const std::vector<KeySpace>& spaces,
                                const std::vector<Addition>& additions) {
  std::set<int64_t> keys;
  for (const Addition& add : additions) {
    const KeySpace& space = spaces[add.space];
    const int64_t step = add.kind == Addition::kRange ? 1 : add.step;
    const int64_t end = add.kind == Addition::kColumn ? add.begin + 1 : add.end;
    for (int64_t key = add.begin; key < end; key += step) keys.insert(space.original(key));
  }
  return keys;
}

void add_to(TileKeys& keys, const std::vector<KeySpace>& spaces,
            const std::vector<Addition>& additions) {
  for (const Addition& add : additions) {
    keys.use_space(spaces[add.space]);
    if (add.kind == Addition::kRange) keys.add_range(add.begin, add.end);
    if (add.kind == Addition::kLattice) keys.add_lattice(add.begin, add.end, add.step);
    if (add.kind == Addition::kColumn) keys.add_column(add.begin);
  }
}

// Key spaces over [0, kv_len): all keys, or the alternating ranges of two modalities cut at
// random points (a 2D boundary's spaces).
std::vector<KeySpace> random_spaces(test::Random& random, int64_t kv_len) {
  if (random.bernoulli(0.3)) return {KeySpace::all_keys(kv_len)};
  std::vector<int64_t> cuts = {0, kv_len};
  const int64_t pieces = random.uniform_int(2, 6);
  while (static_cast<int64_t>(cuts.size()) < pieces + 1) {
    const int64_t cut = random.uniform_int(1, kv_len - 1);
    if (std::find(cuts.begin(), cuts.end(), cut) == cuts.end()) cuts.push_back(cut);
  }
  std::sort(cuts.begin(), cuts.end());
  std::vector<detail::IndexRange> ranges[2];
  for (std::size_t p = 0; p + 1 < cuts.size(); ++p) ranges[p % 2].push_back({cuts[p], cuts[p + 1]});
  return {KeySpace(ranges[0]), KeySpace(ranges[1])};
}

std::vector<Addition> random_additions(test::Random& random, const std::vector<KeySpace>& spaces) {
  std::vector<Addition> additions;
  // Grid-like: a few steps shared by several lattices (a phase tile's slash and vline residues
  // in each space), windows and sinks as ranges, lone columns.
  const int64_t stride = random.uniform_int(2, 9);
  const int64_t count = random.uniform_int(1, 8);
  for (int64_t i = 0; i < count; ++i) {
    const std::size_t s = static_cast<std::size_t>(random.uniform_int(0, spaces.size() - 1));
    const int64_t size = spaces[s].size();
    const int64_t begin = random.uniform_int(0, size - 1);
    const int64_t end = random.uniform_int(begin + 1, size);
    const int64_t kind = random.uniform_int(0, 5);
    if (kind <= 2) {
      const int64_t step = random.bernoulli(0.7) ? stride : random.uniform_int(2, 12);
      additions.push_back({Addition::kLattice, s, begin, end, step});
    } else if (kind <= 4) {
      additions.push_back({Addition::kRange, s, begin, std::min(end, begin + 40), 1});
    } else {
      additions.push_back({Addition::kColumn, s, begin, begin + 1, 1});
    }
  }
  return additions;
}

// The tile's original keys that lattices and columns add outside every range: what listing each
// lattice key by key as a column would list.
std::set<int64_t> keys_outside_ranges(const std::vector<KeySpace>& spaces,
                                      const std::vector<Addition>& additions) {
  std::set<int64_t> keys = expected_keys(spaces, additions);
  for (const Addition& add : additions) {
    if (add.kind != Addition::kRange) continue;
    for (int64_t key = add.begin; key < add.end; ++key) keys.erase(spaces[add.space].original(key));
  }
  return keys;
}

// Each mode's plan of the tiles (one row each, no causal mask) holds each expected key once.
TEST(TileKeys, EveryLatticeModeWritesEachTileKeyOnce) {
  test::Random random;
  SCOPED_TRACE(random.trace());
  for (int trial = 0; trial < kTrials; ++trial) {
    const int64_t kv_len = random.uniform_int(200, 3000);
    const int64_t tiles = random.uniform_int(1, 4);
    const std::vector<KeySpace> spaces = random_spaces(random, kv_len);
    std::vector<std::vector<Addition>> additions;
    for (int64_t t = 0; t < tiles; ++t) additions.push_back(random_additions(random, spaces));
    int64_t columns[std::size(kModes)] = {};
    int64_t listed_as_columns = 0;
    for (int64_t t = 0; t < tiles; ++t) {
      listed_as_columns += static_cast<int64_t>(keys_outside_ranges(spaces, additions[t]).size());
    }
    for (std::size_t m = 0; m < std::size(kModes); ++m) {
      PlanBuilder builder(
          {.batch = 1, .heads = 1, .q_len = tiles, .kv_len = kv_len, .tile_rows = 1});
      builder.begin_head();
      TileKeys keys(kModes[m]);
      for (int64_t t = 0; t < tiles; ++t) {
        builder.begin_tile(t, t + 1, {.causal = false});
        add_to(keys, spaces, additions[t]);
        keys.write(builder);
      }
      const Plan plan = builder.finish();  // validates: no key twice within a tile
      for (int64_t t = 0; t < tiles; ++t) {
        std::vector<int64_t> listed = testing::listed_tile_keys(plan, t);
        std::sort(listed.begin(), listed.end());
        const std::set<int64_t> expected = expected_keys(spaces, additions[t]);
        ASSERT_EQ(listed, std::vector<int64_t>(expected.begin(), expected.end()))
            << "trial " << trial << " mode " << m << " tile " << t;
      }
      columns[m] = static_cast<int64_t>(plan.columns.size());
    }
    EXPECT_LE(columns[1], listed_as_columns)
        << "the range-local mode lists no more columns than listing every line key would";
  }
}

// A lattice in one space that ends where another space's lattice of the same step and residue
// begins (they touch across a range boundary): kStridedSpans joins them, the range-local mode keeps
// each range's pieces (200 keys: one strided span of 128 and 72 columns; 100 keys: columns).
TEST(TileKeys, RangeLocalLatticesDoNotJoinAcrossRanges) {
  const std::vector<KeySpace> spaces = {KeySpace({{0, 400}, {600, 1000}}), KeySpace({{400, 600}})};
  const std::vector<Addition> additions = {{Addition::kLattice, 0, 0, 400, 2},
                                           {Addition::kLattice, 1, 0, 200, 2}};
  const auto plan_of = [&](LatticeKeys mode) {
    PlanBuilder builder({.batch = 1, .heads = 1, .q_len = 1, .kv_len = 1000, .tile_rows = 1});
    builder.begin_head();
    TileKeys keys(mode);
    builder.begin_tile(0, 1, {.causal = false});
    add_to(keys, spaces, additions);
    keys.write(builder);
    return builder.finish();
  };
  // Keys 0, 2, ..., 398 (first space) and 400, ..., 598 (second). Joined: one lattice of 300 keys,
  // a strided span of 256 and 44 columns; range-local: 128 + 72 columns, then 100 columns.
  const Plan joined = plan_of(LatticeKeys::kStridedSpans);
  EXPECT_EQ(joined.strided_spans, (std::vector<StridedSpan>{{0, 510 + 1, 2}}));
  EXPECT_EQ(joined.columns.size(), 44u);
  const Plan ranged = plan_of(LatticeKeys::kStridedSpansInRanges);
  EXPECT_EQ(ranged.strided_spans, (std::vector<StridedSpan>{{0, 254 + 1, 2}}));
  EXPECT_EQ(ranged.columns.size(), 72u + 100u);
  std::vector<int64_t> joined_keys = testing::listed_tile_keys(joined, 0);
  std::vector<int64_t> ranged_keys = testing::listed_tile_keys(ranged, 0);
  std::sort(joined_keys.begin(), joined_keys.end());
  std::sort(ranged_keys.begin(), ranged_keys.end());
  EXPECT_EQ(joined_keys, ranged_keys);
}

// Attention over the range-local plan equals the masked-dense oracle on the expected key sets
// (built without TileKeys), for tiles of several rows.
TEST(TileKeys, RangeLocalPlanMatchesTheMaskedOracle) {
  test::Random random;
  SCOPED_TRACE(random.trace());
  constexpr int64_t kHeadDim = 16;
  for (int trial = 0; trial < kTrials / 4; ++trial) {
    const int64_t kv_len = random.uniform_int(300, 1200);
    const int64_t tiles = random.uniform_int(1, 3);
    const int64_t tile_rows = random.uniform_int(1, 5);
    const int64_t q_len = tiles * tile_rows;
    const std::vector<KeySpace> spaces = random_spaces(random, kv_len);
    PlanBuilder builder(
        {.batch = 1, .heads = 1, .q_len = q_len, .kv_len = kv_len, .tile_rows = tile_rows});
    builder.begin_head();
    TileKeys keys(LatticeKeys::kStridedSpansInRanges);
    Tensor mask(DType::kUInt8, {1, 1, q_len, kv_len});
    std::fill_n(mask.data_as<uint8_t>(), mask.numel(), uint8_t{0});
    for (int64_t t = 0; t < tiles; ++t) {
      const std::vector<Addition> additions = random_additions(random, spaces);
      builder.begin_tile(t * tile_rows, (t + 1) * tile_rows, {.causal = false});
      add_to(keys, spaces, additions);
      keys.write(builder);
      for (int64_t key : expected_keys(spaces, additions)) {
        for (int64_t row = t * tile_rows; row < (t + 1) * tile_rows; ++row) {
          mask.data_as<uint8_t>()[row * kv_len + key] = 1;
        }
      }
    }
    const Plan plan = builder.finish();
    Tensor q(DType::kFloat32, {1, q_len, 1, kHeadDim});
    Tensor k(DType::kFloat32, {1, kv_len, 1, kHeadDim});
    Tensor v(DType::kFloat32, {1, kv_len, 1, kHeadDim});
    random.fill_normal(q.view());
    random.fill_normal(k.view());
    random.fill_normal(v.view());
    Tensor out_plan(DType::kFloat32, {1, q_len, 1, kHeadDim});
    Tensor out_mask(DType::kFloat32, {1, q_len, 1, kHeadDim});
    Tensor lse_plan(DType::kFloat32, {1, 1, q_len}), lse_mask(DType::kFloat32, {1, 1, q_len});
    attention_planned(plan, q.view(), k.view(), v.view(), out_plan.view(), lse_plan.view());
    attention_masked(q.view(), k.view(), v.view(), mask.view(), out_mask.view(), lse_mask.view());
    for (int64_t i = 0; i < out_plan.numel(); ++i) {
      ASSERT_NEAR(out_plan.data_as<float>()[i], out_mask.data_as<float>()[i], kTolerance)
          << "trial " << trial << " out element " << i;
    }
    for (int64_t i = 0; i < q_len; ++i) {
      ASSERT_NEAR(lse_plan.data_as<float>()[i], lse_mask.data_as<float>()[i], kTolerance)
          << "trial " << trial << " row " << i;
    }
  }
}

}  // namespace
}  // namespace mmsparse
