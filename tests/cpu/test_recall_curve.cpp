// Recall-versus-density curves (mmsparse/tools/recall_curve.h): the token oracle's curve lies on
// or left of every method's point and no random pair set with fewer pairs reaches its recall; the
// families' curves are monotone in their parameter; vec points from selection margins equal those
// of the built plans; the mean over heads and the plot.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "common/errors.h"
#include "mmsparse/patterns.h"
#include "mmsparse/status.h"
#include "mmsparse/tools/recall_curve.h"
#include "mmsparse/tools/workload.h"

namespace mmsparse {
namespace {

using testing::expect_error;

constexpr int64_t kLength = 1024;
constexpr int64_t kHeads = 4;
constexpr int64_t kKvHeads = 2;
constexpr int64_t kHeadDim = 32;
constexpr double kExact = 1e-12;

Workload::Tensors synthetic(uint64_t seed = 0, int64_t length = kLength) {
  WorkloadSpec spec;
  spec.seq_len = length;
  spec.q_heads = kHeads;
  spec.kv_heads = kKvHeads;
  spec.head_dim = kHeadDim;
  spec.seed = seed;
  return Workload::create(spec).materialize(DType::kFloat32);
}

CurveFamily family(const std::string& name, const std::vector<std::string>& texts) {
  CurveFamily result{name, {}};
  for (const std::string& text : texts) {
    result.specs.push_back(resolve_pattern(PatternSpec::parse(text)));
  }
  return result;
}

// Each family's parameter rises along its specs: vec keeps fewer keys, the others more.
std::vector<CurveFamily> families() {
  return {
      family("vec", {"vec:alpha_ppm=0", "vec:alpha_ppm=50000", "vec:alpha_ppm=200000",
                     "vec:alpha_ppm=500000", "vec:alpha_ppm=900000", "vec:alpha_ppm=1000001"}),
      family("vec-pool32", {"vec:alpha_ppm=100000,pooling=32", "vec:alpha_ppm=400000,pooling=32"}),
      family("vertical-slash", {"vertical-slash:vertical=30,slash=100,sink=30,local=100",
                                "vertical-slash:vertical=60,slash=200,sink=30,local=100",
                                "vertical-slash:vertical=200,slash=400,sink=30,local=100"}),
      family("a-shape", {"a-shape:sink=64,local=32", "a-shape:sink=64,local=128",
                         "a-shape:sink=64,local=512"})};
}

TEST(RecallCurve, TokenOracleDominatesEveryMethod) {
  const Workload::Tensors tensors = synthetic();
  const std::vector<CurveFamily> sweeps = families();
  for (const int64_t rows : {int64_t{0}, int64_t{96}}) {
    RecallCurveOptions options;
    options.sample_rows = rows;
    for (int64_t head = 0; head < kHeads; ++head) {
      SCOPED_TRACE("head " + std::to_string(head) + ", rows " + std::to_string(rows));
      const HeadCurves curves =
          measure_recall_curves(tensors.q.view(), tensors.k.view(), head, sweeps, options);
      EXPECT_EQ(curves.rows_sampled, rows == 0 ? kLength : rows);
      for (const FamilyCurve& curve : curves.families) {
        for (const CurvePoint& point : curve.points) {
          SCOPED_TRACE(point.spec);
          EXPECT_GT(point.oracle_density, 0.0);
          EXPECT_LE(point.oracle_density, point.density + kExact);
        }
      }
      // The oracle's curve rises with recall, and reaches recall 1 only with every pair.
      for (std::size_t i = 1; i < curves.token_oracle.size(); ++i) {
        EXPECT_LE(curves.token_oracle[i - 1].density, curves.token_oracle[i].density);
      }
      ASSERT_EQ(curves.tile_oracle.size(), options.oracle_recalls.size());
      for (std::size_t i = 0; i < curves.tile_oracle.size(); ++i) {
        // Whole tiles can only need more pairs than single pairs.
        EXPECT_GE(curves.tile_oracle[i].density + kExact, curves.token_oracle[i].density);
        if (i > 0) EXPECT_LE(curves.tile_oracle[i - 1].density, curves.tile_oracle[i].density);
      }
    }
  }
}

// The oracle from its definition: no set of fewer pairs (here random ones, and each row's own
// best keys, a per-row oracle) reaches the recall it reaches with its count.
TEST(RecallCurve, NoPairSetWithFewerPairsReachesTheOracleRecall) {
  constexpr int64_t kRows = 40, kKeys = 40;
  std::mt19937 random(7);
  std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
  std::vector<std::vector<float>> probs(kRows, std::vector<float>(kKeys));
  std::vector<float> pooled;
  for (auto& row : probs) {
    float sum = 0.0f;
    for (float& p : row) sum += (p = std::pow(uniform(random), 8.0f));
    for (float& p : row) p /= sum;
    pooled.insert(pooled.end(), row.begin(), row.end());
  }
  std::sort(pooled.begin(), pooled.end(), std::greater<float>());
  const int64_t pairs = kRows * kKeys;
  for (int trial = 0; trial < 200; ++trial) {
    // A random set: each row keeps its own best k_i keys (a per-row rule) or random keys.
    double mass = 0.0;
    int64_t count = 0;
    for (auto row : probs) {
      const auto keep = static_cast<std::size_t>(random() % (kKeys + 1));
      if (trial % 2 == 0)
        std::sort(row.begin(), row.end(), std::greater<float>());
      else
        std::shuffle(row.begin(), row.end(), random);
      for (std::size_t j = 0; j < keep; ++j) mass += row[j];
      count += static_cast<int64_t>(keep);
    }
    const double recall = mass / kRows;
    if (recall <= 0.0) continue;
    const double oracle = token_oracle_density(pooled, kRows, pairs, recall);
    EXPECT_LE(oracle * pairs, static_cast<double>(count) + kExact) << "trial " << trial;
  }
  // Exactly the pairs the target needs, counted from the largest: two rows, six pairs.
  const std::vector<float> two_rows = {0.75f, 0.5f, 0.25f, 0.25f, 0.125f, 0.125f};
  EXPECT_DOUBLE_EQ(token_oracle_density(two_rows, 2, 6, 0.625), 2.0 / 6.0);
  EXPECT_DOUBLE_EQ(token_oracle_density(two_rows, 2, 6, 0.75), 3.0 / 6.0);
  EXPECT_DOUBLE_EQ(token_oracle_density(two_rows, 2, 6, 1.0), 1.0);
}

TEST(RecallCurve, FamiliesAreMonotoneInTheirParameter) {
  const Workload::Tensors tensors = synthetic(3);
  const std::vector<CurveFamily> sweeps = families();
  for (int64_t head = 0; head < kHeads; ++head) {
    SCOPED_TRACE("head " + std::to_string(head));
    const HeadCurves curves =
        measure_recall_curves(tensors.q.view(), tensors.k.view(), head, sweeps);
    for (const FamilyCurve& curve : curves.families) {
      // vec's kept sets shrink as alpha grows (nested: the margins do not depend on it); A-shape's
      // and vertical-slash's grow with their windows and budgets.
      const double sign = curve.name.starts_with("vec") ? -1.0 : 1.0;
      for (std::size_t i = 1; i < curve.points.size(); ++i) {
        SCOPED_TRACE(curve.points[i].spec);
        EXPECT_GE(sign * (curve.points[i].density - curve.points[i - 1].density), -kExact);
        EXPECT_GE(sign * (curve.points[i].recall - curve.points[i - 1].recall), -kExact);
      }
    }
    // alpha 0 keeps every candidate: the plan is dense, recall 1.
    EXPECT_NEAR(curves.families[0].points.front().density, 1.0, kExact);
    EXPECT_NEAR(curves.families[0].points.front().recall, 1.0, 1e-5);
  }
}

TEST(RecallCurve, VecPointsFromMarginsEqualTheBuiltPlans) {
  const Workload::Tensors tensors = synthetic(5, 1000);  // a last block shorter than the pooling
  // Both tile modes in one family: each its own selection pass.
  const std::vector<CurveFamily> sweeps = {
      families()[0], families()[1],
      family("vec-tiles", {"vec:alpha_ppm=200000,union_tiles=0", "vec:alpha_ppm=200000"})};
  RecallCurveOptions from_margins;
  from_margins.sample_rows = 0;
  RecallCurveOptions from_plans = from_margins;
  from_plans.vec_from_margins = false;
  for (const bool causal : {true, false}) {
    from_margins.causal = from_plans.causal = causal;
    // 128-row tiles (the CUDA engine's) union the blocks of pooling 32 and 64; 64-row, of 32.
    from_margins.tile_rows = from_plans.tile_rows = causal ? 128 : 64;
    std::vector<CurveFamily> specs = sweeps;
    for (CurveFamily& sweep : specs) {
      for (PatternSpec& spec : sweep.specs) spec.params["causal"] = causal ? 1 : 0;
    }
    for (const int64_t head : {int64_t{0}, int64_t{3}}) {
      SCOPED_TRACE("head " + std::to_string(head) + (causal ? " causal" : " non-causal"));
      const HeadCurves a =
          measure_recall_curves(tensors.q.view(), tensors.k.view(), head, specs, from_margins);
      const HeadCurves b =
          measure_recall_curves(tensors.q.view(), tensors.k.view(), head, specs, from_plans);
      for (std::size_t f = 0; f < a.families.size(); ++f) {
        for (std::size_t i = 0; i < a.families[f].points.size(); ++i) {
          SCOPED_TRACE(a.families[f].points[i].spec);
          EXPECT_EQ(a.families[f].points[i].density, b.families[f].points[i].density);
          EXPECT_NEAR(a.families[f].points[i].recall, b.families[f].points[i].recall, 1e-9);
        }
      }
      EXPECT_TRUE(a.tile_oracle.empty() != causal);  // the tile oracle is causal only
    }
  }
}

TEST(RecallCurve, MeanOverHeadsAndPlot) {
  const Workload::Tensors tensors = synthetic();
  const std::vector<CurveFamily> sweeps = families();
  std::vector<HeadCurves> heads;
  for (int64_t head = 0; head < 2; ++head) {
    heads.push_back(measure_recall_curves(tensors.q.view(), tensors.k.view(), head, sweeps));
  }
  const HeadCurves mean = mean_recall_curves(heads);
  ASSERT_EQ(mean.families.size(), sweeps.size());
  const CurvePoint& point = mean.families[2].points[1];
  EXPECT_NEAR(point.density,
              (heads[0].families[2].points[1].density + heads[1].families[2].points[1].density) / 2,
              kExact);
  EXPECT_EQ(point.spec, heads[0].families[2].points[1].spec);

  CurvePlotOptions plot;
  plot.title = "test";
  const Image image = render_recall_curves(mean, plot);
  EXPECT_EQ(image.width, plot.width);
  EXPECT_EQ(image.height, plot.height);
  const auto coloured = std::count_if(image.rgb.begin(), image.rgb.end(),
                                      [](uint8_t channel) { return channel != 255; });
  EXPECT_GT(coloured, 0);

  std::vector<HeadCurves> mismatched = {heads[0], heads[1]};
  mismatched[1].families.pop_back();
  expect_error([&] { mean_recall_curves(mismatched); }, ErrorCode::kInvalidArgument, {"heads"});
  expect_error(
      [&] {
        render_recall_curves(mean, {10, 10, ""});
      },
      ErrorCode::kInvalidArgument, {"width"});
  expect_error([&] { measure_recall_curves(tensors.q.view(), tensors.k.view(), kHeads, sweeps); },
               ErrorCode::kInvalidArgument, {"head"});
  RecallCurveOptions bad;
  bad.oracle_recalls = {0.5, 1.5};
  expect_error([&] { measure_recall_curves(tensors.q.view(), tensors.k.view(), 0, sweeps, bad); },
               ErrorCode::kInvalidArgument, {"oracle_recalls"});
}

}  // namespace
}  // namespace mmsparse
