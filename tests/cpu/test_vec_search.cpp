// VecAttention's offline search (mmsparse/tools/vec_search.h): the bisection finds the largest
// alpha at the recall target on samples whose recall and density fall as alpha grows; the dynamic
// program equals a brute-force allocation; alphas calibrated on one SYNTHETIC seed hold their
// recall on another seed; the config mixes vec heads with MMInference heads and builds.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/errors.h"
#include "common/random.h"
#include "mmsparse/patterns.h"
#include "mmsparse/status.h"
#include "mmsparse/tools/metrics.h"
#include "mmsparse/tools/recall_curve.h"
#include "mmsparse/tools/search.h"
#include "mmsparse/tools/vec_search.h"
#include "mmsparse/tools/workload.h"

namespace mmsparse {
namespace {

using testing::expect_error;

constexpr int64_t kCalibrationLength = 1024;
constexpr int64_t kHeads = 4;
constexpr int64_t kKvHeads = 2;
constexpr int64_t kHeadDim = 32;
constexpr double kTarget = 0.9;
// Out of sample, a head's recall at its calibrated alpha may fall this far below its calibration
// recall.
constexpr double kOutOfSampleSlack = 0.08;

Workload synthetic(uint64_t seed) {
  WorkloadSpec spec;
  spec.seq_len = kCalibrationLength;
  spec.q_heads = kHeads;
  spec.kv_heads = kKvHeads;
  spec.head_dim = kHeadDim;
  spec.seed = seed;
  return Workload::create(spec);
}

VecSearchOptions options() {
  VecSearchOptions result;
  result.base = PatternSpec::parse("vec:pooling=64,group=16");
  result.target_recall = kTarget;
  return result;
}

TEST(VecSearch, BisectionFindsTheLargestAlphaAtTheTarget) {
  const Workload workload = synthetic(0);
  const Workload::Tensors tensors = workload.materialize(DType::kFloat32);
  for (int64_t head = 0; head < kHeads; ++head) {
    SCOPED_TRACE("head " + std::to_string(head));
    const VecHeadSearch search =
        search_vec_head(tensors.q.view(), tensors.k.view(), tensors.v.view(), head, options());
    ASSERT_GE(search.samples.size(), 3u);
    EXPECT_EQ(search.samples.front().alpha_ppm, 0);
    EXPECT_NEAR(search.samples.front().recall, 1.0, 1e-9);  // alpha 0 keeps every key
    for (std::size_t i = 1; i < search.samples.size(); ++i) {
      EXPECT_LE(search.samples[i].recall, search.samples[i - 1].recall + 1e-12);
      EXPECT_LE(search.samples[i].density, search.samples[i - 1].density);
    }
    // The found alpha reaches the target and the next integer alpha, also sampled, does not.
    bool found = false;
    for (std::size_t i = 0; i + 1 < search.samples.size(); ++i) {
      if (search.samples[i].alpha_ppm != search.alpha_ppm) continue;
      found = true;
      EXPECT_GE(search.samples[i].recall, kTarget);
      EXPECT_EQ(search.samples[i + 1].alpha_ppm, search.alpha_ppm + 1);
      EXPECT_LT(search.samples[i + 1].recall, kTarget);
    }
    EXPECT_TRUE(found);
  }
}

// Every combination of samples, for a handful of heads.
double brute_force(const std::vector<std::vector<VecSample>>& heads, double max_mean) {
  double best = -1.0;
  std::function<void(std::size_t, double, double)> visit = [&](std::size_t h, double density,
                                                               double recall) {
    if (h == heads.size()) {
      if (density <= max_mean * heads.size() + 1e-9) best = std::max(best, recall);
      return;
    }
    for (const VecSample& sample : heads[h]) {
      visit(h + 1, density + sample.density, recall + sample.recall);
    }
  };
  visit(0, 0.0, 0.0);
  return best;
}

TEST(VecSearch, DynamicProgramEqualsBruteForce) {
  test::Random random;
  SCOPED_TRACE(random.trace());
  constexpr int64_t kSteps = 50;
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<std::vector<VecSample>> heads(static_cast<std::size_t>(random.uniform_int(1, 5)));
    for (auto& samples : heads) {
      const auto count = random.uniform_int(1, 4);
      for (int64_t s = 0; s < count; ++s) {
        // Densities on the DP's grid, so rounding cannot change the answer.
        samples.push_back({s, static_cast<double>(random.uniform_int(0, kSteps)) / kSteps,
                           random.uniform(0.0, 1.0)});
      }
    }
    const double max_mean = static_cast<double>(random.uniform_int(0, kSteps)) / kSteps;
    const double expected = brute_force(heads, max_mean);
    if (expected < 0.0) {
      expect_error([&] { (void)allocate_vec_heads(heads, max_mean, kSteps); },
                   ErrorCode::kInvalidArgument, {"max_mean_density"});
      continue;
    }
    const std::vector<std::size_t> chosen = allocate_vec_heads(heads, max_mean, kSteps);
    double density = 0.0, recall = 0.0;
    for (std::size_t h = 0; h < heads.size(); ++h) {
      density += heads[h][chosen[h]].density;
      recall += heads[h][chosen[h]].recall;
    }
    EXPECT_LE(density, max_mean * heads.size() + 1e-9);
    EXPECT_NEAR(recall, expected, 1e-9);
  }
}

// Calibrate on seed 0 (bisection, then the DP at the mean density the bisection's alphas give),
// judge on seed 1: every head's recall at its chosen alpha stays near its calibration recall, and
// the config,
// with one head given to an MMInference pattern, round-trips and builds.
TEST(VecSearch, CalibratedAlphasHoldOutOfSampleInAMixedConfig) {
  const Workload calibration = synthetic(0);
  const Workload::Tensors tensors = calibration.materialize(DType::kFloat32);
  std::vector<std::vector<VecSample>> heads;
  double target_density = 0.0;
  for (int64_t head = 0; head < kHeads; ++head) {
    const VecHeadSearch search =
        search_vec_head(tensors.q.view(), tensors.k.view(), tensors.v.view(), head, options());
    for (const VecSample& sample : search.samples) {
      if (sample.alpha_ppm == search.alpha_ppm) target_density += sample.density / kHeads;
    }
    heads.push_back(search.samples);
  }
  const std::vector<std::size_t> chosen = allocate_vec_heads(heads, target_density);
  double calibrated_recall = 0.0;
  for (std::size_t h = 0; h < heads.size(); ++h) {
    calibrated_recall += heads[h][chosen[h]].recall / kHeads;
  }
  EXPECT_GE(calibrated_recall, kTarget - 1e-9);  // the bisection's own choice is feasible

  PatternConfig config;
  add_vec_heads(config, 0, options(), heads, chosen);
  config.head_specs[0][kHeads - 1] = PatternSpec::parse("vertical-slash:vertical=100,slash=200");
  const PatternConfig read = PatternConfig::from_json(config.to_json());
  const std::vector<PatternSpec> specs = read.layer_specs(0, kHeads);

  const Workload held_out = synthetic(1);
  const Workload::Tensors other = held_out.materialize(DType::kFloat32);
  for (int64_t head = 0; head + 1 < kHeads; ++head) {
    SCOPED_TRACE("head " + std::to_string(head) + " " + specs[head].to_string());
    EXPECT_EQ(specs[head].name, "vec");
    VecSearchOptions fixed = options();
    fixed.base = specs[head];
    const VecSample sample = score_vec_alpha(other.q.view(), other.k.view(), other.v.view(), head,
                                             fixed, specs[head].params.at("alpha_ppm"));
    EXPECT_GE(sample.recall, heads[head][chosen[head]].recall - kOutOfSampleSlack);
    EXPECT_LT(sample.density, 1.0);
  }
  const PatternInputs inputs{other.q.view(), other.k.view()};
  const PlanShape shape{1, kHeads, kCalibrationLength, kCalibrationLength, kDefaultTileRows};
  const Plan plan = build_plan(specs, shape, nullptr, &inputs);
  EXPECT_EQ(plan.head_slots(), kHeads);
}

// `mmsparse search --vec-alphas`: vec candidates join Table 3's space as a family of their own,
// are scored in every stage beside grid, A-shape and vertical-slash, and reach stage 3; the
// modelled index cost counts the pooled blocks against every key.
TEST(VecSearch, MixedSearchScoresVecCandidatesBesideMMInference) {
  const Workload workload = synthetic(0);
  const Workload::Tensors tensors = workload.materialize(DType::kFloat32);
  const std::unique_ptr<CostModel> cost = make_modelled_cost();
  SearchOptions search_options;
  search_options.num_threads = 1;
  search_options.vec_alphas = {600000, 1000001};
  // A budget vec's 64-row tiles fit at this short length (a sink, a diagonal and a column chunk
  // per tile, modelled); the default one is a few chunks per 128 rows.
  search_options.budget_spec = "a-shape:sink=128,local=65536";
  const std::vector<int64_t> heads = {0, 1};
  const LayerSearchResult result =
      search_layer(tensors.q.view(), tensors.k.view(), tensors.v.view(), workload.layout(), *cost,
                   search_options, heads);
  int64_t vec_in_space = 0;
  for (const PatternSpec& spec : result.space) vec_in_space += spec.name == "vec";
  EXPECT_EQ(vec_in_space, 2);
  for (const HeadSearchResult& head : result.heads) {
    SCOPED_TRACE("head " + std::to_string(head.q_head) + " chose " + head.chosen.spec.to_string());
    bool vec_in_inter = false;
    for (const ScopeSearch& scope : head.scopes) {
      if (scope.stage != "inter") continue;
      for (const CandidateScore& score : scope.scored) {
        if (score.spec.name != "vec") continue;
        vec_in_inter = true;
        EXPECT_GT(score.recall, 0.0);
        EXPECT_LE(score.recall, 1.0 + 1e-9);
      }
    }
    EXPECT_TRUE(vec_in_inter);
  }
  const PlanShape shape{1, 1, 1000, 1000, 128};
  const ModalityLayout text = ModalityLayout::text_only(1000);
  const TensorView none;
  const std::unique_ptr<CostInputs> inputs = cost->prepare(none, none, none);
  // 16 pooled blocks of 64 (one 128-row chunk) against 8 key chunks.
  EXPECT_EQ(cost->index_cost(PatternSpec::parse("vec:pooling=64"), shape, text, 0.0f, *inputs), 8);
}

// Non-causal (a SYNTHETIC video DiT): alpha 0 keeps every pair, so its density over all pairs and
// its recall against full attention are 1 (against causal dense the density would read 2 and the
// recall exceed 1); alphas calibrated on seed 0 hold their recall on seed 1, at the density
// build_plan's own plan has over all pairs.
TEST(VecSearch, NonCausalDitAlphasHoldOutOfSample) {
  constexpr int64_t kDitLength = 1760;  // 8 frames of 11×20 tokens
  const auto dit = [](uint64_t seed) {
    WorkloadSpec spec;
    spec.preset = "dit-wan2.1-76k";
    spec.seq_len = kDitLength;
    spec.q_heads = kHeads;
    spec.head_dim = kHeadDim;
    spec.seed = seed;
    return Workload::create(spec);
  };
  VecSearchOptions non_causal = options();
  non_causal.base = PatternSpec::parse("vec:pooling=64,group=16,causal=0");
  const Workload calibration = dit(0);
  ASSERT_FALSE(calibration.causal());
  const Workload::Tensors tensors = calibration.materialize(DType::kFloat32);
  const Workload::Tensors other = dit(1).materialize(DType::kFloat32);
  for (int64_t head = 0; head < kHeads; ++head) {
    SCOPED_TRACE("head " + std::to_string(head));
    const VecSample every_key =
        score_vec_alpha(tensors.q.view(), tensors.k.view(), tensors.v.view(), head, non_causal, 0);
    EXPECT_NEAR(every_key.density, 1.0, 1e-12);
    EXPECT_NEAR(every_key.recall, 1.0, 1e-6);

    const VecHeadSearch search =
        search_vec_head(tensors.q.view(), tensors.k.view(), tensors.v.view(), head, non_causal);
    double calibrated_recall = 0.0;
    for (const VecSample& sample : search.samples) {
      if (sample.alpha_ppm == search.alpha_ppm) calibrated_recall = sample.recall;
    }
    EXPECT_GE(calibrated_recall, kTarget - 1e-9);
    const VecSample held_out = score_vec_alpha(other.q.view(), other.k.view(), other.v.view(), head,
                                               non_causal, search.alpha_ppm);
    EXPECT_GE(held_out.recall, calibrated_recall - kOutOfSampleSlack);

    PatternSpec spec = non_causal.base;
    spec.params["alpha_ppm"] = search.alpha_ppm;
    const PatternInputs inputs{other.q.view(), other.k.view()};
    const Plan plan =
        build_plan(spec, {1, kHeads, kDitLength, kDitLength, kDefaultTileRows}, nullptr, &inputs);
    EXPECT_NEAR(held_out.density, plan_density(plan, head, /*causal=*/false), 1e-12);
    EXPECT_LE(held_out.density, 1.0);
  }
}

TEST(VecSearch, BadOptionsAreNamed) {
  const Workload workload = synthetic(0);
  const Workload::Tensors tensors = workload.materialize(DType::kFloat32);
  VecSearchOptions bad = options();
  bad.base = PatternSpec::parse("dense");
  expect_error(
      [&] { (void)search_vec_head(tensors.q.view(), tensors.k.view(), tensors.v.view(), 0, bad); },
      ErrorCode::kInvalidArgument, {"VecSearchOptions base", "a vec spec"});
  bad = options();
  bad.target_recall = 1.5;
  expect_error(
      [&] { (void)search_vec_head(tensors.q.view(), tensors.k.view(), tensors.v.view(), 0, bad); },
      ErrorCode::kInvalidArgument, {"target_recall"});
  expect_error([&] { (void)allocate_vec_heads({{}}, 0.5); }, ErrorCode::kInvalidArgument,
               {"heads"});
}

// search-vec's default bound: the mean of any chosen samples' densities plus one DP step per head
// always admits those samples, whatever the densities (off the DP's grid, small as at 128K).
TEST(VecSearch, MeanDensityPlusOneStepAdmitsTheChoices) {
  test::Random random;
  SCOPED_TRACE(random.trace());
  constexpr int64_t kSteps = 2000;
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<std::vector<VecSample>> heads(static_cast<std::size_t>(random.uniform_int(1, 30)));
    double mean = 0.0;
    double chosen_recall = 0.0;
    for (auto& samples : heads) {
      for (int64_t s = 0; s < 3; ++s) {
        samples.push_back({s, random.uniform(0.0, 0.05), random.uniform(0.0, 1.0)});
      }
      mean += samples[1].density / static_cast<double>(heads.size());
      chosen_recall += samples[1].recall;
    }
    const std::vector<std::size_t> picked = allocate_vec_heads(heads, mean + 1.0 / kSteps, kSteps);
    double recall = 0.0;
    for (std::size_t h = 0; h < heads.size(); ++h) recall += heads[h][picked[h]].recall;
    EXPECT_GE(recall, chosen_recall - 1e-12) << "trial " << trial;
  }
}

// The scorer reads every alpha's plan from selection margins computed once; its pairs must be
// exactly those of the built plan, and its recall the plan's on the same rows.
TEST(VecSearch, ScoresEqualTheBuiltPlans) {
  WorkloadSpec spec;
  spec.seq_len = 1000;  // the last pooled block is shorter
  spec.q_heads = kHeads;
  spec.kv_heads = kKvHeads;
  spec.head_dim = kHeadDim;
  spec.seed = 11;
  const Workload::Tensors tensors = Workload::create(spec).materialize(DType::kFloat32);
  const PatternInputs inputs{tensors.q.view(), tensors.k.view()};
  // Tiles of 64 rows: one block per tile; of 128 (the CUDA engine's): the union of two blocks.
  for (const char* base : {"vec:pooling=64,group=16", "vec:pooling=48,group=2,causal=0",
                           "vec:pooling=64,group=16,union_tiles=0"}) {
    for (const int64_t tile_rows : {int64_t{64}, int64_t{128}}) {
      VecSearchOptions search = options();
      search.base = PatternSpec::parse(base);
      search.tile_rows = tile_rows;
      const bool causal = search.base.param("causal", 1) == 1;
      for (const int64_t alpha : {int64_t{0}, int64_t{100000}, int64_t{500000}, int64_t{1000001}}) {
        PatternSpec vec = resolve_pattern(search.base);
        vec.params["alpha_ppm"] = alpha;
        const Plan plan =
            build_plan(vec, {1, kHeads, spec.seq_len, spec.seq_len, tile_rows}, nullptr, &inputs);
        const CurveFamily family{"vec", {vec}};
        RecallCurveOptions curve;
        curve.sample_rows = search.sample_rows;
        curve.causal = causal;
        curve.vec_from_margins = false;  // measured on the built plan
        curve.tile_rows = tile_rows;
        for (int64_t head = 0; head < kHeads; ++head) {
          SCOPED_TRACE(std::string(base) + " alpha " + std::to_string(alpha) + " head " +
                       std::to_string(head));
          const VecSample sample = score_vec_alpha(tensors.q.view(), tensors.k.view(),
                                                   tensors.v.view(), head, search, alpha);
          EXPECT_EQ(sample.density,
                    static_cast<double>(count_plan_pairs(plan, head)) /
                        static_cast<double>(causal_pair_count(spec.seq_len, spec.seq_len, causal)));
          const HeadCurves measured = measure_recall_curves(tensors.q.view(), tensors.k.view(),
                                                            head, std::span(&family, 1), curve);
          EXPECT_NEAR(sample.recall, measured.families[0].points[0].recall, 1e-5);
        }
      }
    }
  }
}

}  // namespace
}  // namespace mmsparse
