#include "plan_equality.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace mmsparse::test {
namespace {

// The host plan's runs without those of count 0, and their offsets.
void drop_empty_runs(const Plan& plan, std::vector<QueryRun>& runs, std::vector<int64_t>& offsets) {
  offsets = {0};
  for (int64_t slot = 0; slot < plan.head_slots(); ++slot) {
    for (int64_t r = plan.head_run_offsets[slot]; r < plan.head_run_offsets[slot + 1]; ++r) {
      if (plan.runs[r].count > 0) runs.push_back(plan.runs[r]);
    }
    offsets.push_back(static_cast<int64_t>(runs.size()));
  }
}

void expect_same_pass(const Plan& decoded, const Plan& host, int64_t pass) {
  SCOPED_TRACE("pass " + std::to_string(pass));
  EXPECT_EQ(decoded.shape, host.shape);
  EXPECT_EQ(decoded.masks, host.masks);
  std::vector<QueryRun> runs;
  std::vector<int64_t> run_offsets;
  drop_empty_runs(host, runs, run_offsets);
  EXPECT_EQ(decoded.head_run_offsets, run_offsets);
  EXPECT_EQ(decoded.runs, runs);
  EXPECT_EQ(decoded.head_tile_offsets, host.head_tile_offsets);
  EXPECT_EQ(decoded.tiles, host.tiles);
  EXPECT_EQ(decoded.tile_masks, host.tile_masks);
  EXPECT_EQ(decoded.tile_span_offsets, host.tile_span_offsets);
  EXPECT_EQ(decoded.spans, host.spans);
  EXPECT_EQ(decoded.tile_strided_offsets, host.tile_strided_offsets);
  EXPECT_EQ(decoded.strided_spans, host.strided_spans);
  EXPECT_EQ(decoded.tile_column_offsets, host.tile_column_offsets);
  EXPECT_EQ(decoded.columns, host.columns);
  const bool reads_tokens = std::any_of(host.masks.begin(), host.masks.end(),
                                        [](const MaskPolicy& m) { return m.needs_token_arrays(); });
  if (reads_tokens) {
    EXPECT_EQ(decoded.token_modality, host.token_modality);
    EXPECT_EQ(decoded.token_media, host.token_media);
  } else {
    EXPECT_TRUE(decoded.token_modality.empty());
    EXPECT_TRUE(decoded.token_media.empty());
  }
}

}  // namespace

void expect_decoded_plan(const Plan& decoded, const Plan& host) {
  ASSERT_EQ(decoded.num_passes(), host.num_passes());
  for (int64_t p = 0; p < host.num_passes(); ++p)
    expect_same_pass(decoded.pass(p), host.pass(p), p);
  EXPECT_EQ(count_plan_pairs(decoded), count_plan_pairs(host));
}

}  // namespace mmsparse::test
