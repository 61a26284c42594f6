#include "plan_equality.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
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

// The key orders the device records carry of the host plan's (plan_decode.h): none where no tile
// reads through one, else each order to its last key; per tile its order where it has spans.
void device_key_orders(const Plan& plan, std::vector<std::vector<int32_t>>& orders,
                       std::vector<int32_t>& tile_orders) {
  if (!plan.has_key_orders()) return;
  for (std::vector<int32_t> order : plan.key_orders) {
    while (!order.empty() && order.back() == kPaddingKey) order.pop_back();
    orders.push_back(std::move(order));
  }
  bool any = false;
  for (int64_t t = 0; t < plan.num_tiles(); ++t) {
    const bool has_spans = plan.tile_span_offsets[t + 1] > plan.tile_span_offsets[t];
    tile_orders.push_back(has_spans ? plan.tile_key_order(t) : kKeysInPlace);
    any = any || tile_orders.back() != kKeysInPlace;
  }
  if (!any) tile_orders.clear();
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
  std::vector<std::vector<int32_t>> key_orders;
  std::vector<int32_t> tile_key_orders;
  device_key_orders(host, key_orders, tile_key_orders);
  EXPECT_EQ(decoded.key_orders, key_orders);
  EXPECT_EQ(decoded.tile_key_orders, tile_key_orders);
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
