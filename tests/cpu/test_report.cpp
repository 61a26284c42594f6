// The CLI's runtime report (tools/cli/report.h, layers.h): layer selection, needle tasks in file
// metadata, per-layer measurement on SYNTHETIC workloads and the JSON every run writes.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "common/errors.h"
#include "layers.h"
#include "mmsparse/attention.h"
#include "mmsparse/tools/workload.h"
#include "report.h"

namespace mmsparse::cli {
namespace {

using ::testing::ElementsAre;
using testing::expect_error;

TEST(LayerSelection, ParsesAllAndLists) {
  EXPECT_TRUE(parse_layer_selection("all").all);
  const LayerSelection list = parse_layer_selection("3,0,5");
  EXPECT_FALSE(list.all);
  EXPECT_THAT(list.layers, ElementsAre(3, 0, 5));
  for (const char* bad : {"", "1,,2", "-1", "x", "1,2,", "2 "}) {
    SCOPED_TRACE(bad);
    expect_error([&] { parse_layer_selection(bad); }, ErrorCode::kInvalidArgument,
                 {"--layers: expected all, or layer indices >= 0"});
  }
  expect_error([] { parse_layer_selection("1,2,1"); }, ErrorCode::kInvalidArgument,
               {"--layers: expected each layer once", "layer 1 twice"});
}

TEST(LayerSelection, ConfigAndFileLayers) {
  const PatternConfig config = PatternConfig::from_json(
      R"({"schema_version": 1, "default": "dense",
          "layers": {"5": {"default": "a-shape"}, "2": {"heads": {"0": "dense"}}}})");
  EXPECT_THAT(config_layers(config), ElementsAre(2, 5));

  TensorFile file;
  for (const char* name : {"q", "layers.7.q", "layers.7.k", "layers.10.q", "layers.x.q",
                           "layers.3.qq", "layers.4.k"}) {
    file.tensors.emplace(name, Tensor(DType::kFloat32, {1}));
  }
  EXPECT_THAT(tensor_file_layers(file), ElementsAre(7, 10));
  EXPECT_EQ(layer_tensor_prefix(7), "layers.7.");
  EXPECT_EQ(synthetic_layer_seed(10, 3), 13u);
}

TEST(NeedleMetadata, SharedKeysAndLayerOverrides) {
  TensorFile file;
  file.metadata[kNeedlesMetadataKey] = needles_metadata(90, {10, 20}, {{3, {30, 40, 50}}});
  const NeedleTask shared = needle_task_from_metadata(file, -1, 100);
  EXPECT_THAT(shared.keys, ElementsAre(10, 20));
  ASSERT_EQ(shared.rows.size(), 10u);
  EXPECT_EQ(shared.rows.front(), 90);
  EXPECT_EQ(shared.rows.back(), 99);
  EXPECT_THAT(needle_task_from_metadata(file, 1, 100).keys, ElementsAre(10, 20));
  EXPECT_THAT(needle_task_from_metadata(file, 3, 100).keys, ElementsAre(30, 40, 50));
  EXPECT_TRUE(needle_task_from_metadata(TensorFile{}, 0, 100).empty());

  expect_error([&] { needle_task_from_metadata(file, -1, 90); }, ErrorCode::kInvalidArgument,
               {"mmsparse.needles question_begin: expected in [0, q_len = 90)", "got 90"});
  file.metadata[kNeedlesMetadataKey] = R"({"keys": [1]})";
  expect_error([&] { needle_task_from_metadata(file, -1, 100); }, ErrorCode::kParseError,
               {"mmsparse.needles: expected JSON"});
}

// One synthetic layer measured the way `bench` measures it.
struct MeasuredLayer {
  LayerReport report;
  NeedleTask needles;
};

MeasuredLayer measure_layer(int64_t layer, const PatternRun& run) {
  WorkloadSpec spec;
  spec.seq_len = 1024;
  spec.q_heads = 4;
  spec.kv_heads = 2;
  spec.head_dim = 32;
  spec.needles = 3;
  spec.seed = synthetic_layer_seed(0, layer);
  const Workload workload = Workload::create(spec);
  const Workload::Tensors tensors = workload.materialize(DType::kFloat32);
  const int64_t n = workload.seq_len();
  Executor executor(/*gpu=*/false, /*threads=*/1, TimingFlags{});
  executor.set_inputs(tensors.q.view(), tensors.k.view(), tensors.v.view());

  MeasuredLayer measured;
  measured.report.layer = layer;
  measured.report.source = "SYNTHETIC seed " + std::to_string(spec.seed);
  Tensor dense_out(DType::kFloat32, {1, n, spec.q_heads, spec.head_dim});
  Tensor dense_lse(DType::kFloat32, {1, spec.q_heads, n});
  measured.report.dense_seconds = executor.run(
      executor.prepare(executor.build({PatternSpec{"dense", {}}}, {1, spec.q_heads, n, n}, nullptr,
                                      nullptr, spec.head_dim)),
      dense_out.view(), dense_lse.view());
  measured.report.dense_pairs = causal_pair_count(n, n) * spec.q_heads;
  measured.needles = workload_needle_task(workload);
  const TensorView out_view = dense_out.view(), lse_view = dense_lse.view();
  const LayerInputs inputs{tensors.q.view(), tensors.k.view(), &workload.layout(), 1,
                           &out_view,        &lse_view,        &measured.needles,  {}};
  Tensor out(DType::kFloat32, {1, n, spec.q_heads, spec.head_dim});
  Tensor lse(DType::kFloat32, {1, spec.q_heads, n});
  measured.report.runs.push_back(measure_run(executor, run, inputs, out.view(), lse.view()));
  return measured;
}

// A needle is kept when the heads, pooled, keep >= 95% of its dense attention: a head that barely
// reads it (a local head) does not decide, where "covered" counts the fewest over heads.
// The pair counts the bench reports for a plan the GPU built from static specs, one head slot per
// spec, are the whole host plan's.
TEST(Report, StaticSlotPairsAreThePlansPairs) {
  const ModalityLayout layout =
      LayoutBuilder().text(40).image({1, 12, 13}).image({1, 9, 7}, false).text(30).build();
  const PlanShape shape{2, 4, layout.length() - 17, layout.length(), kDefaultTileRows};
  std::vector<PatternSpec> specs;
  for (const char* text : {"blindsight-intra-sink:bidirectional=1", "blindsight-sink",
                           "a-shape:sink=16,local=64", "blindsight-sink"}) {
    specs.push_back(resolve_pattern(PatternSpec::parse(text), &layout));
  }
  EXPECT_EQ(static_slot_pairs(specs, shape, &layout),
            count_plan_pairs(build_plan(specs, shape, &layout)));
  const std::vector<PatternSpec> one = {specs[1]};
  EXPECT_EQ(static_slot_pairs(one, shape, &layout),
            count_plan_pairs(build_plan(one, shape, &layout)));
}

TEST(Report, NeedlesKeptPoolEachNeedlesAttentionOverHeads) {
  const auto head_with = [](std::vector<uint8_t> covered, std::vector<double> mass_kept,
                            std::vector<double> dense_mass) {
    HeadReport head;
    NeedleCoverage needles;
    needles.needles = static_cast<int64_t>(covered.size());
    needles.needle_covered = covered;
    needles.covered = std::count(covered.begin(), covered.end(), uint8_t{1});
    needles.needle_mass_kept = std::move(mass_kept);
    needles.needle_dense_mass = std::move(dense_mass);
    head.needles = needles;
    return head;
  };
  const double nan = std::numeric_limits<double>::quiet_NaN();
  RunReport run;
  // Needle 0: the retrieval head reads it (0.5) and keeps it; the local head reads it faintly
  // (0.01) and misses it: 0.5 / 0.51 = 98% kept. Needle 1: the retrieval head keeps half of its
  // 0.2; the local head never reads it (NaN share): 50% kept.
  run.heads.push_back(head_with({1, 0}, {1.0, 0.5}, {0.5, 0.2}));
  run.heads.push_back(head_with({0, 0}, {0.0, nan}, {0.01, 0.0}));
  const RunSummary summary = summarize(run);
  EXPECT_EQ(summary.needles, 2);
  EXPECT_EQ(summary.needles_covered, 0) << "the local head covers neither";
  EXPECT_EQ(summary.needles_kept, 1);
  EXPECT_EQ(needle_verdict(summary), "1/2") << "the one verdict is the pooled mass measure";
  // Without a dense reference there is no mass, and no verdict (not the per-head coverage).
  RunSummary without_dense = summary;
  without_dense.needle_mass_measured = false;
  EXPECT_EQ(needle_verdict(without_dense), "-");
  EXPECT_EQ(needle_verdict(RunSummary{}), "-");
}

TEST(Report, LayersDifferAndJsonCarriesEveryField) {
  const PatternSpec spec = PatternSpec::parse("vertical-slash:vertical=64,slash=128");
  const PatternRun run{"vertical-slash", spec.to_string(), {spec}};
  const MeasuredLayer first = measure_layer(0, run);
  const MeasuredLayer second = measure_layer(1, run);
  // Synthetic layers differ by seed: different needles and a different estimated plan.
  EXPECT_NE(first.needles.keys, second.needles.keys);
  EXPECT_NE(first.report.runs[0].computed_pairs, second.report.runs[0].computed_pairs);

  const RunReport& measured = first.report.runs[0];
  ASSERT_EQ(measured.heads.size(), 4u);
  const RunSummary summary = summarize(measured);
  int64_t fewest = 3;
  for (const HeadReport& head : measured.heads) {
    ASSERT_TRUE(head.accuracy.has_value());
    ASSERT_TRUE(head.needles.has_value());
    EXPECT_EQ(head.needles->needles, 3);
    fewest = std::min(fewest, head.needles->covered);
    EXPECT_GT(head.index_seconds, 0.0);
  }
  EXPECT_EQ(summary.needles, 3);
  EXPECT_EQ(summary.needles_covered, fewest);
  EXPECT_GE(summary.needle_mass_kept, 0.0);
  EXPECT_LE(summary.needle_mass_kept, 1.0);
  EXPECT_GE(summary.needles_kept, 0);
  EXPECT_LE(summary.needles_kept, 3);

  const nlohmann::json json = layers_json({first.report, second.report}, 32);
  ASSERT_EQ(json.at("layers").size(), 2u);
  EXPECT_EQ(json["layers"][1]["layer"], 1);
  for (const nlohmann::json& layer : json["layers"]) {
    EXPECT_TRUE(layer.at("dense").contains("attention_ms"));
    const nlohmann::json& pattern = layer.at("patterns").at(0);
    for (const char* field :
         {"pattern", "spec", "density", "recall_mean", "recall_min", "output_error", "index_ms",
          "attention_ms", "speedup", "computed_pairs", "tflops", "throughput_vs_dense"}) {
      EXPECT_TRUE(pattern.contains(field)) << field;
    }
    const double dense_tflops = layer["dense"]["tflops"];
    const double tflops = pattern["tflops"];
    EXPECT_NEAR(pattern["throughput_vs_dense"].get<double>(), tflops / dense_tflops,
                1e-9 * tflops / dense_tflops);
    EXPECT_EQ(pattern.at("needles").at("count"), 3);
    EXPECT_TRUE(pattern.at("needles").contains("covered_min"));
    EXPECT_TRUE(pattern.at("needles").contains("mass_kept"));
    ASSERT_EQ(pattern.at("heads").size(), 4u);
    for (const nlohmann::json& head : pattern["heads"]) {
      for (const char* field : {"head", "spec", "density", "index_ms", "recall_mean", "recall_min",
                                "output_error", "needles"}) {
        EXPECT_TRUE(head.contains(field)) << field;
      }
      EXPECT_EQ(head["needles"]["covered_each"].size(), 3u);
      EXPECT_EQ(head["needles"]["mass_kept_each"].size(), 3u);
    }
  }
  // The whole model: times summed over layers, speedup against the summed dense time.
  const nlohmann::json& total = json.at("model").at("patterns").at(0);
  const double index_ms = total.at("index_ms"), attention_ms = total.at("attention_ms");
  const double dense_ms = json["model"].at("dense_ms");
  EXPECT_NEAR(index_ms,
              1000.0 * (first.report.runs[0].index_seconds + second.report.runs[0].index_seconds),
              1e-9);
  EXPECT_NEAR(dense_ms, 1000.0 * (*first.report.dense_seconds + *second.report.dense_seconds),
              1e-9);
  EXPECT_NEAR(total.at("speedup").get<double>(), dense_ms / (index_ms + attention_ms), 1e-9);
}

}  // namespace
}  // namespace mmsparse::cli
