// Recall of the dynamic patterns on SYNTHETIC workloads (docs/workloads.md): the grid against
// vertical-slash at equal density on grid heads of a video, and the boundary modes against plain
// vertical-slash on the mixed-interleaved preset. Recall is exact per row (exp(LSE_plan -
// LSE_dense)) on sampled rows; density counts every row. The tests print their tables.

#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "cpu/dynamic_helpers.h"
#include "mmsparse/patterns.h"
#include "mmsparse/tools/metrics.h"
#include "mmsparse/tools/workload.h"

namespace mmsparse {
namespace {

using test::Coverage;

constexpr int64_t kSampledRows = 128;

Coverage plan_coverage(const std::string& spec, const Workload& workload,
                       const test::HeadProblem& problem, const std::vector<int64_t>& rows) {
  const int64_t n = workload.seq_len();
  const PatternInputs inputs{problem.q.view(), problem.k.view()};
  const Plan plan = build_plan(PatternSpec::parse(spec), {.heads = 1, .q_len = n, .kv_len = n},
                               &workload.layout(), &inputs);
  return test::measure_coverage(plan, problem.q, problem.k, rows);
}

void print_row(const std::string& label, const std::string& spec, const Coverage& coverage) {
  std::printf("  %-27s %-62s density %6.2f%%  recall %.4f (min %.4f)\n", label.c_str(),
              spec.c_str(), 100.0 * coverage.density, coverage.recall_mean, coverage.recall_min);
}

}  // namespace

// The smallest budget of a vertical-slash family (sinks, the diagonal, `budget` verticals beyond
// the sinks and `budget` slash lines) whose coverage reaches `enough`; budgets double.
template <class Enough>
Coverage vertical_slash_until(const Enough& enough, const Workload& workload,
                              const test::HeadProblem& problem, const std::vector<int64_t>& rows,
                              std::string& spec) {
  Coverage coverage;
  for (int64_t budget = 1; budget < workload.seq_len(); budget *= 2) {
    spec = "vertical-slash:sink=30,local=1,vertical=" + std::to_string(30 + budget) +
           ",slash=" + std::to_string(budget) + ",boundary=2";
    coverage = plan_coverage(spec, workload, problem, rows);
    if (enough(coverage)) break;
  }
  return coverage;
}

TEST(DynamicRecall, GridBeatsVerticalSlashAtEqualDensityOnGridHeads) {
  constexpr int64_t kSeqLen = 8192;
  WorkloadSpec spec;  // video-qwen2.5vl-128k scaled: 18 frames of 16 x 28 tokens, 28 heads
  spec.seq_len = kSeqLen;
  const Workload workload = Workload::create(spec);
  const std::vector<int64_t> rows = sample_rows(workload.seq_len(), kSampledRows);
  std::printf(
      "SYNTHETIC %s, %ld tokens, grid heads; Q-boundary (the video's estimate from its own "
      "last queries)\n",
      workload.spec().preset.c_str(), workload.seq_len());
  for (int64_t head = 0; head < workload.spec().q_heads; ++head) {
    if (workload.behaviour(head) != HeadBehaviour::kGrid) continue;
    const test::HeadProblem problem = test::workload_head(workload, head);
    const std::string grid_spec = "grid:boundary=2";
    const Coverage grid = plan_coverage(grid_spec, workload, problem, rows);
    std::string vs_spec, matching_spec;
    const Coverage vs =
        vertical_slash_until([&](const Coverage& c) { return c.density >= grid.density; }, workload,
                             problem, rows, vs_spec);
    const Coverage matching =
        vertical_slash_until([&](const Coverage& c) { return c.recall_mean >= grid.recall_mean; },
                             workload, problem, rows, matching_spec);
    std::printf(" head %ld\n", head);
    print_row("grid", grid_spec, grid);
    print_row("vertical-slash, >= density", vs_spec, vs);
    print_row("vertical-slash, >= recall", matching_spec, matching);
    EXPECT_GE(vs.density, grid.density);
    EXPECT_GT(grid.recall_mean, vs.recall_mean) << "SYNTHETIC grid head " << head;
  }
}

TEST(DynamicRecall, BoundaryModesKeepRecallOnMixedInterleaved) {
  constexpr int64_t kSeqLen = 16384;
  WorkloadSpec spec;
  spec.preset = "mixed-interleaved";
  spec.seq_len = kSeqLen;
  spec.q_heads = 4;  // one head of each behaviour: local, grid, vertical, dense
  spec.kv_heads = 4;
  const Workload workload = Workload::create(spec);
  const std::vector<int64_t> rows = sample_rows(workload.seq_len(), kSampledRows);
  // MInference's 1000 verticals and 6096 slashes at 128K, scaled to the length.
  const std::string budget = "vertical=125,slash=762";
  std::printf("SYNTHETIC %s, %ld tokens, %zu segments; vertical-slash %s\n",
              workload.spec().preset.c_str(), workload.seq_len(),
              workload.layout().segments().size(), budget.c_str());
  for (int64_t head = 0; head < workload.spec().q_heads; ++head) {
    const HeadBehaviour behaviour = workload.behaviour(head);
    const test::HeadProblem problem = test::workload_head(workload, head);
    std::printf(" head %ld (%s)\n", head, std::string(head_behaviour_name(behaviour)).c_str());
    std::vector<Coverage> modes;
    for (const std::string boundary : {"0", "2", "3"}) {
      const std::string text = "vertical-slash:" + budget + ",boundary=" + boundary;
      modes.push_back(plan_coverage(text, workload, problem, rows));
      print_row(boundary == "0"   ? "plain"
                : boundary == "2" ? "Q-boundary"
                                  : "2D-boundary",
                text, modes.back());
    }
    // Structured heads (local and grid) are where the final question's estimate fails the video.
    if (behaviour == HeadBehaviour::kLocal || behaviour == HeadBehaviour::kGrid) {
      EXPECT_GT(modes[1].recall_mean, modes[0].recall_mean)
          << "Q-boundary, SYNTHETIC head " << head;
      EXPECT_GT(modes[2].recall_mean, modes[0].recall_mean)
          << "2D-boundary, SYNTHETIC head " << head;
    }
  }
}

}  // namespace mmsparse
