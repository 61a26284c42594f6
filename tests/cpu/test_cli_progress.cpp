// The CLI's progress reporter (tools/cli/progress.h) in each mode, and its warnings
// (tools/cli/warnings.h): CPU time estimates, config/input mismatches, low-recall search heads.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>

#include "mmsparse/layout.h"
#include "mmsparse/patterns.h"
#include "mmsparse/status.h"
#include "progress.h"
#include "warnings.h"

namespace mmsparse::cli {
namespace {

// What `write` prints to a temporary stream.
template <class Write>
std::string captured(Write write) {
  std::FILE* stream = std::tmpfile();
  write(stream);
  std::fflush(stream);
  std::string text(static_cast<std::size_t>(std::ftell(stream)), '\0');
  std::rewind(stream);
  const std::size_t read = std::fread(text.data(), 1, text.size(), stream);
  std::fclose(stream);
  text.resize(read);
  return text;
}

void run_two_steps(StepProgress& steps) {
  steps.begin("dense reference", 10.0);
  const auto on_progress = steps.fraction_callback();
  on_progress(0.5);
  on_progress(1.0);
  steps.end("done");
  steps.begin("a-shape");
  steps.update(0.3);
  steps.end();
}

TEST(StepProgress, LinesModePrintsOneLinePerStepWithoutCarriageReturns) {
  const std::string text = captured([](std::FILE* stream) {
    StepProgress steps(ProgressMode::kLines, stream);
    run_two_steps(steps);
  });
  EXPECT_EQ(text.find('\r'), std::string::npos) << text;
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 2) << text;
  EXPECT_NE(text.find("  dense reference: "), std::string::npos) << text;
  EXPECT_NE(text.find("(done)\n"), std::string::npos) << text;
  EXPECT_NE(text.find("  a-shape: "), std::string::npos) << text;
}

TEST(StepProgress, QuietModePrintsNothing) {
  const std::string text = captured([](std::FILE* stream) {
    StepProgress steps(ProgressMode::kQuiet, stream);
    run_two_steps(steps);
  });
  EXPECT_EQ(text, "");
}

TEST(StepProgress, BarModeRedrawsInPlaceWithTheEstimate) {
  const std::string text = captured([](std::FILE* stream) {
    StepProgress steps(ProgressMode::kBar, stream);
    steps.begin("dense reference", 90.0);
    steps.end();
  });
  EXPECT_NE(text.find("\r  dense reference ["), std::string::npos) << text;
  EXPECT_NE(text.find("left (estimate)"), std::string::npos) << text;
  EXPECT_EQ(text.back(), '\n');
}

TEST(StepProgress, FormatsDurations) {
  EXPECT_EQ(format_duration(0.25), "250 ms");
  EXPECT_EQ(format_duration(12.34), "12.3 s");
  EXPECT_EQ(format_duration(250.0), "4 min 10 s");
  EXPECT_EQ(format_duration(5520.0), "1 h 32 min");
}

TEST(CpuEstimate, WarnsAboveAFewMinutesOnly) {
  const CpuRate rate{1e9, "set for the test"};
  EXPECT_DOUBLE_EQ(cpu_seconds(rate, 1'000'000, 128), 0.128);
  const std::string slow = captured([&](std::FILE* stream) {
    warn_if_slow_on_cpu("the dense reference", 5400.0, rate, "use a GPU", stream);
  });
  EXPECT_NE(slow.find("warning: on the CPU the dense reference will take about 1 h 30 min"),
            std::string::npos)
      << slow;
  const std::string fast = captured([&](std::FILE* stream) {
    warn_if_slow_on_cpu("the dense reference", 60.0, rate, "use a GPU", stream);
  });
  EXPECT_EQ(fast, "");
}

TEST(CpuEstimate, ReadsTheRateVariableAndRejectsGarbage) {
  setenv(kCpuRateVariable, "2.5e9", 1);
  EXPECT_DOUBLE_EQ(cpu_rate(1, 64).pair_dims_per_second, 2.5e9);
  setenv(kCpuRateVariable, "fast", 1);
  EXPECT_THROW(cpu_rate(1, 64), Error);
  unsetenv(kCpuRateVariable);
  EXPECT_GT(cpu_rate(1, 64).pair_dims_per_second, 0.0);  // measured
}

PatternConfig searched_config(int64_t seq_len, const ModalityLayout& layout) {
  PatternConfig config;
  config.search = SearchProvenance{"SYNTHETIC preset x, seq_len " + std::to_string(seq_len),
                                   "2026-11-27T12:00:00Z",
                                   "0.1.0",
                                   "modelled",
                                   "key chunks",
                                   "",
                                   "a-shape:sink=128,local=512",
                                   1.0,
                                   seq_len,
                                   layout.to_json()};
  return config;
}

TEST(ConfigMismatch, NamesTheCalibrationLengthAndLayout) {
  const ModalityLayout layout = ModalityLayout::text_only(4096);
  const PatternConfig config = searched_config(4096, layout);
  EXPECT_TRUE(config_mismatch_warnings(config, "--config c.json", 4096, &layout).empty());
  // Another length of the same kind of layout: the length only.
  const ModalityLayout shorter = ModalityLayout::text_only(2048);
  EXPECT_EQ(config_mismatch_warnings(config, "--config c.json", 2048, &shorter).size(), 1u);
  const ModalityLayout with_image({{Modality::kText, 0, 16, -1, 0},
                                   {Modality::kImage, 16, 32, 0, 0},
                                   {Modality::kText, 32, 2048, -1, 0}},
                                  {{Modality::kImage, {1, 4, 4}, -1, -1}});
  const std::vector<std::string> warnings =
      config_mismatch_warnings(config, "--config c.json", 2048, &with_image);
  ASSERT_EQ(warnings.size(), 2u);
  EXPECT_NE(warnings[0].find("--config c.json was searched on 4096 tokens"), std::string::npos)
      << warnings[0];
  EXPECT_NE(warnings[0].find("the input has 2048"), std::string::npos) << warnings[0];
  EXPECT_NE(warnings[1].find("(calibration: text; input: text image[4x4] text)"), std::string::npos)
      << warnings[1];
  // The same length with another layout: the layout only.
  EXPECT_EQ(
      config_mismatch_warnings(searched_config(2048, shorter), "--config c.json", 2048, &with_image)
          .size(),
      1u);
  // The record survives the JSON round trip.
  EXPECT_EQ(PatternConfig::from_json(config.to_json()).search, config.search);
}

TEST(ConfigMismatch, ReadsTheLengthOfOlderRecordsAndIgnoresConfigsWithout) {
  PatternConfig config = searched_config(0, ModalityLayout::text_only(16384));
  config.search->calibration = "SYNTHETIC preset x, seq_len 16384, seed 0";
  config.search->layout.clear();
  EXPECT_EQ(config_calibration_length(config), 16384);
  config.search->calibration = "file calib.safetensors";
  EXPECT_EQ(config_calibration_length(config), std::nullopt);
  EXPECT_TRUE(config_mismatch_warnings(PatternConfig{}, "--config c.json", 8, nullptr).empty());
}

TEST(LowRecallHeads, ThresholdFollowsTheTargetAndTheWarningNamesHeads) {
  EXPECT_DOUBLE_EQ(low_recall_threshold(0.0), kDefaultSearchRecallTarget - kLowRecallMargin);
  EXPECT_DOUBLE_EQ(low_recall_threshold(0.9), 0.9 - kLowRecallMargin);
  EXPECT_EQ(low_recall_warning({}, 0.75, 0.95), "");
  const std::string raised =
      low_recall_warning({{0, 5, "dense", 0.27, true}, {1, 2, "", 0.3, true}}, 0.75, 0.95);
  EXPECT_NE(raised.find("2 head(s)"), std::string::npos) << raised;
  EXPECT_NE(raised.find("layer 0 head 5 (dense, 0.27), layer 1 head 2 (0.30)"), std::string::npos)
      << raised;
  EXPECT_NE(raised.find("raised to dense"), std::string::npos) << raised;
  const std::string kept = low_recall_warning({{0, 5, "dense", 0.27, false}}, 0.75, 0.95);
  EXPECT_NE(kept.find("kept sparse"), std::string::npos) << kept;
}

}  // namespace
}  // namespace mmsparse::cli
