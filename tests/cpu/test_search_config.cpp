// The searched config's JSON (round trip, plans built like bench's config, version 1 and bad search
// fields) and the calibration file the search reads.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/errors.h"
#include "common/random.h"
#include "cpu/search_helpers.h"
#include "mmsparse/attention.h"
#include "mmsparse/build_info.h"
#include "mmsparse/patterns.h"
#include "mmsparse/tools/io.h"
#include "mmsparse/tools/search.h"
#include "mmsparse/tools/workload.h"

namespace mmsparse {
namespace {

using test::small_video_workload;
using testing::expect_error;

PatternConfig searched_config() {
  PatternConfig config;
  config.search = SearchProvenance{"SYNTHETIC preset video-qwen2.5vl-1m, seq_len 8192, seed 0",
                                   "2026-11-23T10:04:05Z",
                                   "0.1.0",
                                   "modelled",
                                   "key chunks",
                                   "",
                                   "a-shape:local=256,sink=1024",
                                   649.0};
  config.head_specs[0][1] = PatternSpec::parse(
      "grid:boundary=0,hline=0,last_q=64,local=0,max_stride=1024,sink=30,slash=1,stride=240,vline=0");
  config.head_specs[0][0] = PatternSpec::parse("a-shape:local=256,sink=128");
  config.head_scores[0][1] = {0.9851, 0.0237, 480.0};
  config.head_scores[0][0] = {0.9976, 0.0031, 250.0};
  return config;
}

TEST(SearchConfig, RoundTripsAndBuildsPlansLikeBenchConfig) {
  const PatternConfig config = searched_config();
  const std::string json = config.to_json();
  EXPECT_NE(json.find("\"schema_version\": 2"), std::string::npos);
  const PatternConfig parsed = PatternConfig::from_json(json);
  EXPECT_EQ(parsed.search, config.search);
  EXPECT_EQ(parsed.head_scores, config.head_scores);
  EXPECT_EQ(parsed.to_json(), json);

  // What `mmsparse bench --config` does with it.
  const Workload workload = Workload::create(small_video_workload());
  const Workload::Tensors tensors = workload.materialize(DType::kBFloat16);
  const PatternInputs inputs{tensors.q.view(), tensors.k.view()};
  const std::vector<PatternSpec> specs = parsed.layer_specs(0, 4);
  EXPECT_EQ(specs[2].name, "dense");  // heads not searched keep the default
  const Plan plan = build_plan(specs, PlanShape{1, 4, 8192, 8192, kDefaultTileRows},
                               &workload.layout(), &inputs);
  EXPECT_EQ(plan.head_slots(), 4);
}

TEST(SearchConfig, ReadsVersion1AndNamesBadSearchFields) {
  const PatternConfig old = PatternConfig::from_json(
      R"({"schema_version": 1, "layers": {"0": {"heads": {"1": "a-shape"}}}})");
  EXPECT_FALSE(old.search.has_value());
  EXPECT_EQ(old.layer_specs(0, 2)[1].name, "a-shape");
  auto load = [](std::string text) { return [text] { (void)PatternConfig::from_json(text); }; };
  expect_error(load(R"({"schema_version": 1, "search": {}})"), ErrorCode::kParseError,
               {"search", "unknown key"});
  std::string json = searched_config().to_json();
  const auto replace = [&](const std::string& from, const std::string& to) {
    std::string text = json;
    text.replace(text.find(from), from.size(), to);
    return text;
  };
  expect_error(load(replace("\"modelled\"", "\"guessed\"")), ErrorCode::kParseError,
               {"search.cost_source", "\"guessed\""});
  expect_error(load(replace("\"budget_cost\"", "\"budget\"")), ErrorCode::kParseError,
               {"search.budget", "unknown key"});
  expect_error(load(replace("\"recall\": 0.9976", "\"recall\": \"high\"")),
               ErrorCode::kParseError, {"layers.0.scores.0.recall", "expected a number"});
  expect_error(load(replace("\"date_utc\"", "\"date_utc_\"")), ErrorCode::kParseError,
               {"search.date_utc_", "unknown key"});
}

TEST(CalibrationFile, ReadsLayersAndNamesMissingOrMisshapenTensors) {
  const ModalityLayout layout = LayoutBuilder().text(8).image({1, 2, 2}).text(4).build();
  const int64_t seq_len = layout.length();
  const Tensor qkv(DType::kFloat32, {1, seq_len, 2, 8});
  const Tensor wrong(DType::kFloat32, {1, seq_len + 1, 2, 8});
  const std::string path =
      (std::filesystem::temp_directory_path() / "mmsparse_test_calibration.safetensors").string();
  const std::map<std::string, std::string> metadata = {{kLayoutMetadataKey, layout.to_json()}};
  const auto read_layers = [&](const std::map<std::string, TensorView>& tensors,
                               const std::map<std::string, std::string>& meta) {
    write_safetensors(path, tensors, meta);
    return calibration_layers(read_safetensors(path), path);
  };

  const std::vector<CalibrationLayer> layers =
      read_layers({{"layers.0.q", qkv.view()}, {"layers.0.k", qkv.view()},
                   {"layers.0.v", qkv.view()}, {"layers.12.q", qkv.view()},
                   {"layers.12.k", qkv.view()}, {"layers.12.v", qkv.view()}},
                  metadata);
  ASSERT_EQ(layers.size(), 2u);
  EXPECT_EQ(layers[0].layer, 0);
  EXPECT_EQ(layers[1].layer, 12);
  const std::vector<CalibrationLayer> plain =
      read_layers({{"q", qkv.view()}, {"k", qkv.view()}, {"v", qkv.view()}}, metadata);
  ASSERT_EQ(plain.size(), 1u);
  EXPECT_EQ(plain[0].layer, 0);

  expect_error([&] { (void)read_layers({{"layers.3.q", qkv.view()}, {"layers.3.v", qkv.view()}},
                                       metadata); },
               ErrorCode::kInvalidArgument, {path, "'layers.3.k'", "missing"});
  expect_error([&] { (void)read_layers({{"layers.0.q", qkv.view()}, {"layers.0.k", wrong.view()},
                                        {"layers.0.v", qkv.view()}},
                                       metadata); },
               ErrorCode::kInvalidArgument,
               {"'layers.0.k'", "[1, " + std::to_string(seq_len), "got [1, " + std::to_string(seq_len + 1)});
  expect_error([&] { (void)read_layers({{"q", qkv.view()}}, {}); }, ErrorCode::kInvalidArgument,
               {"mmsparse.layout", "none"});
  expect_error([&] { (void)read_layers({{"weights", qkv.view()}}, metadata); },
               ErrorCode::kInvalidArgument, {"layers.<L>.q", "none"});
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace mmsparse
