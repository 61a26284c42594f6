// `mmsparse bench` with no flags (tools/cli/bench_default.h, shipped_configs.h): which shipped
// config a workload gets, and the verdict line it ends with.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "bench_default.h"
#include "report.h"
#include "shipped_configs.h"

namespace mmsparse::cli {
namespace {

using ::testing::HasSubstr;

// The file a preset's config at `seq_len` is selected from, or "" for none.
std::string selected(const std::vector<ShippedConfig>& configs, const std::string& preset,
                     int64_t seq_len) {
  const std::optional<ShippedConfig> config = select_shipped_config(configs, preset, seq_len);
  return config ? config->file : "";
}

TEST(ShippedConfigs, TheSearchedLengthOrTheLongestUnscaledOneBelow) {
  const std::vector<ShippedConfig> configs = {
      {"configs/video-4096.json", "{}"},   {"configs/video-131072.json", "{}"},
      {"configs/video-262144.json", "{}"}, {"configs/video-1m-131072.json", "{}"},
      {"configs/video-abc.json", "{}"},    {"configs/video-65536.txt", "{}"}};
  EXPECT_EQ(selected(configs, "video", 4096), "configs/video-4096.json");
  // Below 128K windows and budgets scale with length: only the length searched.
  EXPECT_EQ(selected(configs, "video", 8192), "");
  EXPECT_EQ(selected(configs, "video", 65536), "");
  EXPECT_EQ(selected(configs, "video", 131072), "configs/video-131072.json");
  EXPECT_EQ(selected(configs, "video", 200000), "configs/video-131072.json");
  EXPECT_EQ(selected(configs, "video", 1048576), "configs/video-262144.json");
  // Another preset's file (a preset name that extends this one) is not this preset's.
  EXPECT_EQ(selected(configs, "video-1m", 1048576), "configs/video-1m-131072.json");
  EXPECT_EQ(selected(configs, "image", 131072), "");
  EXPECT_EQ(shipped_config_file("video", 4096), "configs/video-4096.json");
}

TEST(ShippedConfigs, TheCpuDefaultsConfigIsCompiledIn) {
  const std::optional<ShippedConfig> config =
      select_shipped_config(shipped_configs(), "video-qwen2.5vl-128k", 4096);
  ASSERT_TRUE(config.has_value());
  const PatternConfig parsed = PatternConfig::from_json(config->json);
  ASSERT_TRUE(parsed.search.has_value());
  // Searched on another seed than the bench's (0), at the length it is shipped for.
  EXPECT_THAT(parsed.search->calibration, HasSubstr("seed 1,"));
  EXPECT_EQ(parsed.search->seq_len, 4096);
  EXPECT_EQ(parsed.layer_specs(0, 28).size(), 28u);
}

HeadReport head(double recall, double needle_kept) {
  HeadReport report;
  report.accuracy = HeadAccuracy{recall, recall, 0.0, 0.0};
  NeedleCoverage needles;
  needles.needles = 2;
  needles.needle_mass_kept = {needle_kept, 1.0};
  needles.needle_dense_mass = {0.5, 0.5};
  report.needles = needles;
  return report;
}

// A layer with dense (1 s), a static run and the config's run, and the tile-oracle bounds.
LayerReport verdict_layer() {
  LayerReport layer;
  layer.dense_seconds = 1.0;
  RunReport baseline;
  baseline.run = {"a-shape", "a-shape:local=128,sink=128", {}};
  baseline.attention_seconds = 0.125;
  baseline.heads = {head(0.6, 0.0), head(0.7, 0.0)};
  RunReport config;
  config.run = {"mminference", "configs/x.json layer 0", {}};
  config.index_seconds = 0.05;
  config.attention_seconds = 0.25;
  config.heads = {head(0.96, 1.0), head(0.98, 1.0)};
  layer.runs = {baseline, config};
  layer.oracle_bounds = {10.0, 4.0};
  return layer;
}

TEST(DefaultVerdict, StatesSpeedupRecallNeedlesAndTheBoundShare) {
  const LayerReport layer = verdict_layer();
  DefaultConfig config;
  config.file = "configs/x.json";
  // 1 s / (0.05 + 0.25) s = 3.33x; 3.33 / 4 = 83.3% of the bound.
  EXPECT_EQ(default_verdict_line(layer, 1, config, true),
            "verdict: MMInference config configs/x.json 3.33x dense (index included) at mean "
            "recall 0.9700, needles 2/2 kept, 83.3% of the tile-oracle bound; most accurate "
            "static baseline a-shape 8.00x at recall 0.6500 (GPU)");
  const nlohmann::json json = default_verdict_json(layer, 1, config);
  EXPECT_NEAR(json["speedup"].get<double>(), 1.0 / 0.3, 1e-9);
  EXPECT_NEAR(json["tile_oracle_bound_percent"].get<double>(), 100.0 / 0.3 / 4.0, 1e-9);
  EXPECT_EQ(json["needles_kept"].get<int64_t>(), 2);
  EXPECT_TRUE(json["held_out_seed"].get<bool>());

  config.same_seed = true;
  EXPECT_THAT(default_verdict_line(layer, 1, config, false),
              HasSubstr("(searched on this seed: not a held-out check)"));
  EXPECT_THAT(default_verdict_line(layer, 1, config, false),
              HasSubstr("(CPU reference backend: the oracle's host times, not GPU speed)"));
}

TEST(DefaultVerdict, WithoutAConfigSaysWhyAndNamesTheBaseline) {
  LayerReport layer = verdict_layer();
  layer.runs.pop_back();
  DefaultConfig config;
  config.missing = "no MMInference config is shipped for 'p' at 8 tokens";
  EXPECT_EQ(default_verdict_line(layer, std::nullopt, config, true),
            "verdict: no MMInference config is shipped for 'p' at 8 tokens; static baselines "
            "only; most accurate static baseline a-shape 8.00x at recall 0.6500 (GPU)");
  EXPECT_EQ(default_verdict_json(layer, std::nullopt, config)["missing"], config.missing);
}

}  // namespace
}  // namespace mmsparse::cli
