// How the search scores a candidate's rows: the stratified sample's estimate of the all-row recall
// and its standard error (the error bars cover the truth on most seeds), and every row scored on
// a device (here the CPU reference) against a census of the same rows, for a whole-sequence scope
// and a cross-modality one (whose restriction to a modality pair the device path computes from a
// key-indicator column of V).

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/errors.h"
#include "cpu/search_helpers.h"
#include "mmsparse/tools/search.h"
#include "mmsparse/tools/workload.h"
#include "tools/search/scope.h"

namespace mmsparse {
namespace {

using detail::kAllModalities;
using detail::modality_bit;
using detail::Scope;

constexpr int64_t kSeqLen = 4096;
constexpr int64_t kTileRows = 64;
// A static and a dynamic candidate that leave part of the rows' mass out at this length.
constexpr const char* kCandidates[] = {"a-shape:sink=16,local=64",
                                       "vertical-slash:vertical=64,slash=128"};

struct Calibration {
  Workload workload;
  Workload::Tensors tensors;
  detail::HeadTensors head;
};

Calibration calibration(HeadBehaviour behaviour) {
  WorkloadSpec spec = test::small_video_workload();
  spec.seq_len = kSeqLen;
  Workload workload = Workload::create(spec);
  Workload::Tensors tensors = workload.materialize(DType::kFloat32);
  int64_t q_head = 0;
  while (workload.behaviour(q_head) != behaviour) ++q_head;
  detail::HeadTensors head =
      detail::head_tensors(tensors.q.view(), tensors.k.view(), tensors.v.view(), q_head);
  return {std::move(workload), std::move(tensors), std::move(head)};
}

detail::Accuracy score(Scope& scope, const std::string& spec) {
  const std::optional<detail::BuiltCandidate> candidate = scope.build(PatternSpec::parse(spec));
  EXPECT_TRUE(candidate.has_value()) << spec;
  return scope.score(*candidate);
}

Scope whole_sequence(const Calibration& input, const SearchOptions& options) {
  return Scope("full", input.head, input.workload.layout(), kAllModalities, kAllModalities,
               kAllModalities, kTileRows, options);
}

// The rows' mean recall as the search estimates it on 20 fixed seeds, against the recall over
// every row: the interval estimate ± 2 standard errors (nominal 95%) must hold the truth on at
// least 16 of the 20 seeds, and the estimates' mean must lie within 3 of its own standard errors
// (rms SE / sqrt(20)) of the truth (no bias). The old evenly spread sample plus every segment's
// last rows, counted like the others, over-read the recall.
TEST(SearchRows, StratifiedSampleErrorBarsCoverTheAllRowRecall) {
  constexpr int kSeeds = 20;
  constexpr int kMinCovered = 16;
  constexpr double kMarginSe = 2.0;
  constexpr double kBiasSe = 3.0;
  const Calibration input = calibration(HeadBehaviour::kGrid);
  SearchOptions all_rows;
  all_rows.score_device = Device{};
  Scope census = whole_sequence(input, all_rows);
  for (const char* spec : kCandidates) {
    const double truth = score(census, spec).recall;
    ASSERT_LT(truth, 0.99) << spec << ": the candidate must leave mass out for the test to bite";
    int covered = 0;
    double estimate_sum = 0.0, variance_sum = 0.0;
    for (int seed = 0; seed < kSeeds; ++seed) {
      SearchOptions sampled;
      sampled.sample_seed = static_cast<uint64_t>(seed);
      Scope scope = whole_sequence(input, sampled);
      const detail::Accuracy accuracy = score(scope, spec);
      EXPECT_GT(accuracy.recall_se, 0.0) << spec << " seed " << seed;
      if (std::abs(accuracy.recall - truth) <= kMarginSe * accuracy.recall_se) ++covered;
      estimate_sum += accuracy.recall;
      variance_sum += accuracy.recall_se * accuracy.recall_se;
    }
    EXPECT_GE(covered, kMinCovered) << spec << ": truth " << truth;
    const double mean_estimate = estimate_sum / kSeeds;
    const double standard_error_of_mean = std::sqrt(variance_sum / kSeeds / kSeeds);
    EXPECT_LE(std::abs(mean_estimate - truth), kBiasSe * standard_error_of_mean)
        << spec << ": mean estimate " << mean_estimate << ", truth " << truth;
  }
}

// A sample of more blocks than rows is a census: every row once, no standard error. The device
// path (every row, prepared plans, the key-indicator restriction) must agree with it.
void expect_all_rows_match_census(const Calibration& input, detail::ModalitySet kept,
                                  detail::ModalitySet query, detail::ModalitySet keys,
                                  bool restricted) {
  SearchOptions census_options;
  census_options.sample_rows = kSeqLen;
  census_options.segment_tail_rows = 0;
  SearchOptions device_options;
  device_options.score_device = Device{};
  Scope census("census", input.head, input.workload.layout(), kept, query, keys, kTileRows,
               census_options);
  Scope device("device", input.head, input.workload.layout(), kept, query, keys, kTileRows,
               device_options);
  ASSERT_TRUE(census.has_rows());
  ASSERT_TRUE(device.has_rows());
  for (const char* spec : kCandidates) {
    const detail::Accuracy expected = score(census, spec);
    const detail::Accuracy got = score(device, spec);
    EXPECT_EQ(expected.recall_se, 0.0) << spec;
    EXPECT_EQ(got.recall_se, 0.0) << spec;
    EXPECT_NEAR(got.recall, expected.recall, 1e-5) << spec;
    // A restricted scope's output error leaves V's first column out (the indicator's place).
    if (!restricted) EXPECT_NEAR(got.output_error, expected.output_error, 1e-4) << spec;
    // (Rounding alone where the candidate covers every pair of the scope.)
    constexpr double kRelativeError = 0.1, kRoundingError = 1e-6;
    if (restricted) {
      EXPECT_NEAR(got.output_error, expected.output_error,
                  kRelativeError * expected.output_error + kRoundingError)
          << spec;
    }
  }
}

TEST(SearchRows, EveryRowOnADeviceMatchesACensusOnTheWholeSequence) {
  const Calibration input = calibration(HeadBehaviour::kVertical);
  expect_all_rows_match_census(input, kAllModalities, kAllModalities, kAllModalities, false);
}

TEST(SearchRows, EveryRowOnADeviceMatchesACensusOnAModalityPair) {
  const Calibration input = calibration(HeadBehaviour::kVertical);
  const detail::ModalitySet video = modality_bit(Modality::kVideo);
  const detail::ModalitySet text = modality_bit(Modality::kText);
  // Text rows (the question) against video keys, and video rows against text keys.
  expect_all_rows_match_census(input, text | video, text, video, true);
  expect_all_rows_match_census(input, text | video, video, text, true);
}

TEST(SearchRows, WeightedMeanStandardErrorOfPairedBlocks) {
  // Two pairs of blocks of 10 rows, and a census row: totals 10·y per block.
  const std::vector<double> values = {0.5, 0.7, 0.9, 0.9, 1.0};
  const std::vector<detail::RowWeight> weights = {{10, 0}, {10, 0}, {10, 1}, {10, 1}, {1, -1}};
  const detail::WeightedMean mean = detail::weighted_mean(values, weights);
  EXPECT_NEAR(mean.mean, (5.0 + 7.0 + 9.0 + 9.0 + 1.0) / 41.0, 1e-12);
  // Pair 0: (5 - 7)² = 4; pair 1: 0.
  EXPECT_NEAR(mean.standard_error, std::sqrt(4.0) / 41.0, 1e-12);
}

TEST(SearchRows, NegativeMarginIsRefused) {
  const Calibration input = calibration(HeadBehaviour::kLocal);
  SearchOptions options;
  options.recall_margin_se = -1.0;
  auto cost = make_modelled_cost();
  testing::expect_error(
      [&] {
        (void)search_layer(input.tensors.q.view(), input.tensors.k.view(), input.tensors.v.view(),
                           input.workload.layout(), *cost, options);
      },
      ErrorCode::kInvalidArgument, {"recall_margin_se", ">= 0"});
}

}  // namespace
}  // namespace mmsparse
