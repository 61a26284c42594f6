// BlindSight's characterisation (Alg. 1), aggregation (Alg. 2), config and FLOPs statistics
// (mmsparse/tools/characterise.h), and their recovery of the head types the SYNTHETIC model
// (mmsparse/tools/blindsight_workload.h) plants, over 20 prompts of different layouts.

#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <iomanip>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "common/errors.h"
#include "mmsparse/patterns.h"
#include "mmsparse/tools/blindsight_workload.h"
#include "mmsparse/tools/characterise.h"

namespace mmsparse {
namespace {

using testing::expect_error;

constexpr int64_t kPrompts = 20;

std::size_t index_of(HeadType type) { return static_cast<std::size_t>(type); }

TEST(Characterise, AggregationFollowsAlgorithm2) {
  const AggregationThresholds paper;  // 0.25 / 0.60 / 0.60
  // Fractions of dense, sink, intra, intra-sink.
  EXPECT_EQ(aggregate_head({0.30, 0.70, 0.0, 0.0}, paper), HeadType::kDense);
  EXPECT_EQ(aggregate_head({0.25, 0.75, 0.0, 0.0}, paper), HeadType::kSink);
  EXPECT_EQ(aggregate_head({0.0, 0.30, 0.65, 0.05}, paper), HeadType::kIntra);
  EXPECT_EQ(aggregate_head({0.0, 0.50, 0.50, 0.0}, paper), HeadType::kIntraSink);
  EXPECT_EQ(aggregate_head({0.1, 0.0, 0.0, 0.9}, paper), HeadType::kIntraSink);
  HeadTypeTally tally;
  for (int i = 0; i < 3; ++i) tally.add(2, 1, HeadType::kIntra);
  tally.add(2, 1, HeadType::kDense);
  EXPECT_EQ(tally.fractions(2, 1), (std::array<double, kHeadTypes>{0.25, 0.0, 0.75, 0.0}));
  EXPECT_EQ(tally.aggregate(paper).at(2).at(1), HeadType::kIntra);
  expect_error([&] { (void)tally.fractions(2, 0); }, ErrorCode::kInvalidArgument,
               {"layer 2 head 0"});
}

TEST(Characterise, AlphaSchedules) {
  const AlphaSchedule fixed = parse_alpha_schedule("0.1", "--alpha");
  EXPECT_DOUBLE_EQ(fixed.at(0, 10), 0.1);
  EXPECT_DOUBLE_EQ(fixed.at(9, 10), 0.1);
  const AlphaSchedule gemma = parse_alpha_schedule("0.005:0.195", "--alpha");
  EXPECT_DOUBLE_EQ(gemma.at(0, 48), 0.005);
  EXPECT_DOUBLE_EQ(gemma.at(24, 48), 0.005 + 0.19 / 2);
  for (const char* bad : {"", "x", "0", "-1", "0.1:", ":0.2", "0.1:nan"}) {
    expect_error([&] { (void)parse_alpha_schedule(bad, "--alpha"); }, ErrorCode::kInvalidArgument,
                 {"--alpha", "first:last"});
  }
}

TEST(Characterise, TemplateSpecsAndQuartiles) {
  const ImageStyle qwen;
  EXPECT_EQ(head_type_spec(HeadType::kDense, qwen).to_string(), "dense");
  EXPECT_EQ(head_type_spec(HeadType::kIntraSink, qwen).to_string(),
            "blindsight-intra-sink:bidirectional=0,permute=-1,sink_percent=10,sinks=[]");
  const ImageStyle gemma{10, {3, 9}, true};
  EXPECT_EQ(head_type_spec(HeadType::kDense, gemma).to_string(),
            "blindsight-dense:bidirectional=1");
  EXPECT_EQ(head_type_spec(HeadType::kSink, gemma).to_string(),
            "blindsight-sink:bidirectional=1,permute=-1,sink_percent=10,sinks=[3/9]");
  for (HeadType type : kAllHeadTypes) {
    HeadType back = HeadType::kDense;
    ASSERT_TRUE(head_type_of(head_type_spec(type, gemma), back));
    EXPECT_EQ(back, type);
  }
  HeadType unused = HeadType::kDense;
  EXPECT_FALSE(head_type_of(PatternSpec{"a-shape", {}}, unused));
  const Quartiles q = quartiles({4.0, 1.0, 3.0, 2.0, 5.0});
  EXPECT_DOUBLE_EQ(q.q1, 2.0);
  EXPECT_DOUBLE_EQ(q.median, 3.0);
  EXPECT_DOUBLE_EQ(q.q3, 4.0);
  expect_error([] { (void)quartiles({}); }, ErrorCode::kInvalidArgument, {"values"});
}

// Causal configs keep their BlindSight heads in place (their plans are built per call, in-place
// heads on the GPU); bidirectional ones keep the key order, as the templates' default.
TEST(Characterise, CausalConfigHeadsReadTheirKeysInPlace) {
  const std::map<int64_t, std::map<int64_t, HeadType>> types = {
      {0, {{0, HeadType::kIntraSink}, {1, HeadType::kDense}, {2, HeadType::kIntra}}}};
  const std::vector<PatternSpec> qwen = blindsight_config(types, ImageStyle{}).layer_specs(0, 3);
  EXPECT_EQ(qwen[0].to_string(),
            "blindsight-intra-sink:bidirectional=0,permute=0,sink_percent=10,sinks=[]");
  EXPECT_EQ(qwen[1].to_string(), "dense");
  EXPECT_EQ(qwen[2].to_string(), "blindsight-intra:bidirectional=0,permute=0");
  const PatternConfig gemma = blindsight_config(types, ImageStyle{10, {3, 9}, true});
  EXPECT_EQ(gemma.default_spec.to_string(), "blindsight-dense:bidirectional=1");
  EXPECT_EQ(gemma.layer_specs(0, 3)[1].to_string(), "blindsight-dense:bidirectional=1");
  EXPECT_EQ(gemma.layer_specs(0, 3)[2].to_string(), "blindsight-intra:bidirectional=1,permute=-1");
  // Either style, either way on request (--key-orders on / off).
  EXPECT_EQ(blindsight_config(types, ImageStyle{}, ConfigKeyOrders::kAlways)
                .layer_specs(0, 3)[2]
                .to_string(),
            "blindsight-intra:bidirectional=0,permute=-1");
  EXPECT_EQ(blindsight_config(types, ImageStyle{10, {3, 9}, true}, ConfigKeyOrders::kNever)
                .layer_specs(0, 3)[0]
                .to_string(),
            "blindsight-intra-sink:bidirectional=1,permute=0,sink_percent=10,sinks=[3/9]");
}

// Characterises every prompt, aggregates, prints the confusion table (planted rows, recovered
// columns) and returns the share of heads recovered.
double recover(const BlindSightModel& model, const AlphaSchedule& alpha, PatternConfig& config) {
  const BlindSightModelSpec& spec = model.spec();
  HeadTypeTally tally;
  for (uint64_t prompt = 0; prompt < kPrompts; ++prompt) {
    const ModalityLayout layout = model.prompt_layout(prompt);
    for (int64_t layer = 0; layer < spec.layers; ++layer) {
      const BlindSightModel::LayerTensors tensors = model.layer(prompt, layer);
      const std::vector<HeadCharacterisation> heads =
          characterise_layer(tensors.q.view(), tensors.k.view(), tensors.v.view(), layout,
                             model.image_style(), alpha.at(layer, spec.layers));
      for (int64_t head = 0; head < spec.heads; ++head) tally.add(layer, head, heads[head].type);
    }
  }
  const auto types = tally.aggregate(AggregationThresholds{});
  config = blindsight_config(types, model.image_style());
  std::array<std::array<int, kHeadTypes>, kHeadTypes> confusion{};
  int matched = 0;
  for (int64_t layer = 0; layer < spec.layers; ++layer) {
    for (int64_t head = 0; head < spec.heads; ++head) {
      const HeadType planted = model.planted(layer, head);
      const HeadType found = types.at(layer).at(head);
      ++confusion[index_of(planted)][index_of(found)];
      matched += planted == found;
    }
  }
  std::cout << "SYNTHETIC confusion (rows planted, columns recovered), " << kPrompts
            << " prompts:\n"
            << std::setw(12) << "";
  for (HeadType type : kAllHeadTypes) std::cout << std::setw(12) << head_type_name(type);
  std::cout << "\n";
  for (HeadType planted : kAllHeadTypes) {
    std::cout << std::setw(12) << head_type_name(planted);
    for (HeadType found : kAllHeadTypes) {
      std::cout << std::setw(12) << confusion[index_of(planted)][index_of(found)];
    }
    std::cout << "\n";
  }
  return static_cast<double>(matched) / static_cast<double>(spec.layers * spec.heads);
}

// At least this share of the planted heads must come back (the flips make some prompts dense).
constexpr double kMinRecovered = 0.9;

TEST(Characterise, RecoversThePlantedTypesQwenStyle) {
  const BlindSightModel model({.style = BlindSightStyle::kQwen, .head_dim = 32, .seed = 7});
  PatternConfig config;
  EXPECT_GE(recover(model, AlphaSchedule{}, config), kMinRecovered);
  // The config builds on other prompts, saves FLOPs there, and survives its JSON.
  const PatternConfig again = PatternConfig::from_json(config.to_json());
  EXPECT_EQ(again.layer_specs(3, 4), config.layer_specs(3, 4));
  std::vector<double> savings;
  for (uint64_t prompt = kPrompts; prompt < kPrompts + 8; ++prompt) {
    savings.push_back(flops_reduction(config, model.prompt_layout(prompt), model.spec().layers,
                                      model.spec().heads, model.image_style()));
  }
  const Quartiles q = quartiles(savings);
  EXPECT_GT(q.q1, 0.0);
  EXPECT_LT(q.q3, 1.0);
  // All dense saves nothing.
  EXPECT_DOUBLE_EQ(
      flops_reduction(PatternConfig{}, model.prompt_layout(0), 2, 2, model.image_style()), 0.0);
}

TEST(Characterise, RecoversThePlantedTypesGemma3Style) {
  const BlindSightModel model({.style = BlindSightStyle::kGemma3, .head_dim = 32, .seed = 11});
  EXPECT_TRUE(model.image_style().bidirectional);
  EXPECT_FALSE(model.image_style().sink_offsets.empty());
  PatternConfig config;
  EXPECT_GE(recover(model, parse_alpha_schedule("0.05:0.15", "alpha"), config), kMinRecovered);
  EXPECT_EQ(config.default_spec.to_string(), "blindsight-dense:bidirectional=1");
}

// App. C on the SYNTHETIC Gemma 3 model: the most frequent sink offsets are the planted ones.
TEST(Characterise, FindsTheGemma3SinkOffsets) {
  constexpr uint64_t kSinkPrompts = 8;
  const BlindSightModel model({.style = BlindSightStyle::kGemma3, .head_dim = 32, .seed = 11});
  SinkOffsetTally tally;
  for (uint64_t prompt = 0; prompt < kSinkPrompts; ++prompt) {
    const ModalityLayout layout = model.prompt_layout(prompt);
    for (int64_t layer = 0; layer < model.spec().layers; ++layer) {
      const BlindSightModel::LayerTensors tensors = model.layer(prompt, layer);
      tally.add_layer(tensors.q.view(), tensors.k.view(), layout, true);
    }
  }
  EXPECT_EQ(tally.offsets(), model.image_style().sink_offsets);
  // Qwen-style images differ in size: no fixed offsets.
  const BlindSightModel qwen({.layers = 1, .heads = 1, .head_dim = 8});
  const BlindSightModel::LayerTensors tensors = qwen.layer(0, 0);
  expect_error(
      [&] { tally.add_layer(tensors.q.view(), tensors.k.view(), qwen.prompt_layout(0), false); },
      ErrorCode::kInvalidArgument, {"layout", "images of one size"});
}

TEST(Characterise, BadInputsAreNamedErrors) {
  expect_error([] { (void)BlindSightModel({.layers = 0}); }, ErrorCode::kInvalidArgument,
               {"layers", ">= 1"});
  expect_error([] { (void)blindsight_preset_style("nope", "--preset"); },
               ErrorCode::kInvalidArgument, {"--preset", "blindsight-qwen, blindsight-gemma3"});
  const BlindSightModel model({.layers = 1, .heads = 2, .head_dim = 8});
  const BlindSightModel::LayerTensors tensors = model.layer(0, 0);
  expect_error(
      [&] {
        (void)characterise_layer(tensors.q.view(), tensors.k.view(), tensors.v.view(),
                                 ModalityLayout::text_only(3), model.image_style(), 0.1);
      },
      ErrorCode::kInvalidArgument, {"layout", "q's sequence"});
}

}  // namespace
}  // namespace mmsparse
