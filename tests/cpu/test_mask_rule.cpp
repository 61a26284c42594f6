// The one mask rule (core/mask_rule.h) against a brute-force definition of every policy term, for
// host positions (int64, MaskPolicy) and device widths (int32, a record like the kernels'); the
// coverage that plans derive from it as key ranges (count_plan_pairs, for_each_covered_range)
// against the rule applied key by key (materialize_mask); and bidirectional attention inside media
// items (Gemma 3) through the CPU reference.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "common/masked_oracle.h"
#include "common/random.h"
#include "core/mask_rule.h"
#include "core/plan_coverage.h"
#include "mmsparse/attention.h"
#include "mmsparse/layout.h"
#include "mmsparse/plan.h"
#include "mmsparse/status.h"
#include "mmsparse/tensor.h"

namespace mmsparse {
namespace {

constexpr int kTrials = 300;
constexpr int64_t kMaxPositions = 40;
constexpr int64_t kMaxSegment = 9;

// The kernels' MaskRecord in its widths (cuda/runtime/plan_view.cuh is a CUDA header).
struct DevicePolicy {
  int32_t causal;
  int32_t window;
  int32_t window_sink;
  int32_t min_distance;
  int32_t period;
  int32_t band;
  int32_t same_media;
  uint32_t modality_pairs;
  int32_t needs_tokens;
  int32_t media_bidirectional;
  bool needs_token_arrays() const { return needs_tokens != 0; }
};

DevicePolicy device_policy(const MaskPolicy& policy) {
  return {policy.causal,
          static_cast<int32_t>(policy.window),
          static_cast<int32_t>(policy.window_sink),
          static_cast<int32_t>(policy.min_distance),
          static_cast<int32_t>(policy.period),
          static_cast<int32_t>(policy.band),
          policy.same_media,
          policy.modality_pairs,
          policy.needs_token_arrays(),
          policy.media_bidirectional};
}

// A policy of random terms; bidirectional media only where validate() allows it.
MaskPolicy random_policy(test::Random& random, int64_t length) {
  MaskPolicy policy;
  policy.causal = random.bernoulli(0.7);
  if (random.bernoulli(0.4)) {
    policy.window = random.uniform_int(1, length);
    policy.window_sink = random.uniform_int(0, 6);
  }
  const bool bidirectional = random.bernoulli(0.3);
  if (bidirectional) {
    policy.media_bidirectional = true;
  } else {
    if (random.bernoulli(0.3)) policy.min_distance = random.uniform_int(1, 8);
    if (policy.causal && random.bernoulli(0.3)) {
      policy.period = random.uniform_int(1, 12);
      policy.band = random.uniform_int(1, policy.period);
    }
  }
  policy.same_media = random.bernoulli(0.3);
  if (random.bernoulli(0.4)) {
    policy.modality_pairs = static_cast<uint16_t>(random.uniform_int(1, kAllModalityPairs));
  }
  return policy;
}

// Each term as its plain-language definition, over media indices and modalities.
bool brute_force_keeps(const MaskPolicy& policy, int64_t aligned, int64_t key, bool query_has_token,
                       int32_t query_media, int query_modality, int32_t key_media,
                       int key_modality) {
  const int64_t distance = aligned - key;
  bool positions = true;
  if (policy.causal && key > aligned) positions = false;
  if (policy.window > 0 && key >= policy.window_sink && distance >= policy.window) {
    positions = false;
  }
  if (policy.min_distance > 0 && distance < policy.min_distance) positions = false;  // 0: none
  if (policy.period > 0) {
    bool in_band = false;  // some period j >= 0 holds the distance in [j·period, j·period + band)
    for (int64_t start = 0; start <= distance; start += policy.period) {
      in_band = in_band || (distance >= start && distance < start + policy.band);
    }
    if (!in_band) positions = false;
  }
  const bool reads_tokens =
      policy.same_media || policy.media_bidirectional || policy.modality_pairs != kAllModalityPairs;
  if (!reads_tokens) return positions;
  if (!query_has_token) return false;
  const bool one_media = query_media != -1 && query_media == key_media;
  if (!positions && !(policy.media_bidirectional && one_media)) return false;
  if (policy.same_media && !one_media) return false;
  return (policy.modality_pairs & modality_pair_bit(static_cast<Modality>(query_modality),
                                                    static_cast<Modality>(key_modality))) != 0;
}

TEST(MaskRule, EqualsBruteForceForEveryTerm) {
  test::Random random;
  SCOPED_TRACE(random.trace());
  for (int trial = 0; trial < kTrials; ++trial) {
    const int64_t length = random.uniform_int(1, kMaxPositions);
    const MaskPolicy policy = random_policy(random, length);
    const DevicePolicy record = device_policy(policy);
    std::vector<int32_t> media(static_cast<std::size_t>(length));
    std::vector<int> modality(media.size());
    for (std::size_t i = 0; i < media.size(); ++i) {
      modality[i] = static_cast<int>(random.uniform_int(0, kNumModalities - 1));
      media[i] = modality[i] == 0 ? -1 : static_cast<int32_t>(random.uniform_int(0, 2));
    }
    // Aligned positions below 0 stand for queries before every key (kv_len < q_len).
    for (int64_t aligned = -2; aligned < length; ++aligned) {
      const bool has_token = aligned >= 0;
      const int32_t query_media = has_token ? media[aligned] : -1;
      const int query_modality = has_token ? modality[aligned] : 0;
      const int32_t query_token =
          has_token ? mask_rule::pack_token(query_media, query_modality) : mask_rule::kNoToken;
      for (int64_t key = 0; key < length; ++key) {
        const int32_t key_token = mask_rule::pack_token(media[key], modality[key]);
        const bool expected = brute_force_keeps(policy, aligned, key, has_token, query_media,
                                                query_modality, media[key], modality[key]);
        ASSERT_EQ(mask_rule::keeps(policy, aligned, key, query_token, key_token), expected)
            << "trial " << trial << " aligned " << aligned << " key " << key;
        ASSERT_EQ(mask_rule::keeps(record, static_cast<int32_t>(aligned), static_cast<int32_t>(key),
                                   query_token, key_token),
                  expected)
            << "device widths, trial " << trial << " aligned " << aligned << " key " << key;
      }
    }
  }
}

TEST(MaskRule, TokensRoundTrip) {
  for (int32_t media = -1; media < 5; ++media) {
    for (int modality = 0; modality < kNumModalities; ++modality) {
      const int32_t token = mask_rule::pack_token(media, modality);
      EXPECT_NE(token, mask_rule::kNoToken);
      EXPECT_EQ(mask_rule::token_media(token), media);
      EXPECT_EQ(mask_rule::token_modality(token), modality);
    }
  }
}

// A random layout of text, images and videos (frames interrupted by text) of `length` tokens.
ModalityLayout random_layout(test::Random& random, int64_t length) {
  LayoutBuilder builder;
  int64_t built = 0;
  while (built < length) {
    const int64_t left = length - built;
    const double kind = random.uniform();
    if (kind < 0.4 || left < 4) {
      const int64_t tokens = random.uniform_int(1, std::min(left, kMaxSegment));
      builder.text(tokens);
      built += tokens;
    } else if (kind < 0.8) {
      const Grid grid{1, random.uniform_int(1, 2), random.uniform_int(1, (left - 2) / 2)};
      const bool markers = random.bernoulli(0.5);
      builder.image(grid, markers);
      built += grid.tokens() + (markers ? 2 : 0);
    } else {
      const Grid grid{2, 1, random.uniform_int(1, (left - 1) / 2)};
      builder.video(grid, /*frame_separator=*/1, /*markers=*/false);
      built += grid.tokens() + 1;
    }
  }
  return builder.build();
}

// A plan of one pass: random tiles over random spans, strided spans and columns, each under one of
// a few random policies.
Plan random_plan(test::Random& random, int64_t q_len, int64_t kv_len,
                 const ModalityLayout& layout) {
  PlanShape shape;
  shape.heads = 2;
  shape.q_len = q_len;
  shape.kv_len = kv_len;
  shape.tile_rows = random.uniform_int(1, 16);
  std::vector<MaskPolicy> policies;
  for (int p = 0; p < 4; ++p) policies.push_back(random_policy(random, kv_len));
  PlanBuilder builder(shape);
  for (int64_t head = 0; head < shape.heads; ++head) {
    builder.begin_head();
    for (int64_t begin = 0; begin < q_len;) {
      const int64_t end = std::min(q_len, begin + random.uniform_int(1, shape.tile_rows));
      builder.begin_tile(begin, end, policies[random.uniform_int(0, policies.size() - 1)]);
      for (int64_t key = random.uniform_int(0, 3); key < kv_len;) {
        const int64_t piece_end = std::min(kv_len, key + random.uniform_int(1, 10));
        const double kind = random.uniform();
        if (kind < 0.4) {
          builder.add_span(key, piece_end);
        } else if (kind < 0.7) {
          builder.add_strided_span(key, piece_end, random.uniform_int(2, 4));
        } else {
          for (int64_t column = key; column < piece_end; ++column) {
            if (random.bernoulli(0.4)) builder.add_column(column);
          }
        }
        key = piece_end + random.uniform_int(0, 2);
      }
      begin = end;
    }
  }
  builder.attach_layout(layout);
  return builder.finish();
}

// Key ranges (count_plan_pairs, for_each_covered_range) agree with the rule key by key
// (materialize_mask).
TEST(MaskRule, CoverageRangesFollowTheRule) {
  test::Random random;
  SCOPED_TRACE(random.trace());
  for (int trial = 0; trial < kTrials / 3; ++trial) {
    const int64_t kv_len = random.uniform_int(8, kMaxPositions * 2);
    const int64_t q_len = std::max<int64_t>(1, kv_len + random.uniform_int(-6, 6));
    const Plan plan = random_plan(random, q_len, kv_len, random_layout(random, kv_len));
    for (int64_t slot = 0; slot < plan.head_slots(); ++slot) {
      const std::vector<uint8_t> by_rule = materialize_mask(plan, slot);
      std::vector<uint8_t> by_ranges(by_rule.size(), 0);
      int64_t range_pairs = 0;
      detail::for_each_covered_range(plan, slot, [&](int64_t query, int64_t begin, int64_t end) {
        for (int64_t key = begin; key < end; ++key) ++by_ranges[query * kv_len + key];
        range_pairs += end - begin;
      });
      ASSERT_EQ(by_ranges, by_rule)
          << "trial " << trial << " slot " << slot << " " << plan.summary();
      int64_t rule_pairs = 0;
      for (uint8_t kept : by_rule) rule_pairs += kept;
      ASSERT_EQ(count_plan_pairs(plan, slot), rule_pairs) << "trial " << trial;
      ASSERT_EQ(range_pairs, rule_pairs);
    }
  }
}

TEST(MaskRule, BidirectionalMediaNeedsNoMinDistanceOrPeriod) {
  const ModalityLayout layout = LayoutBuilder().text(4).image({1, 2, 2}, false).text(4).build();
  const int64_t kv_len = layout.length();
  for (const MaskPolicy& policy :
       {MaskPolicy{.min_distance = 2, .media_bidirectional = true},
        MaskPolicy{.period = 4, .band = 2, .media_bidirectional = true}}) {
    PlanBuilder builder(PlanShape{.q_len = kv_len, .kv_len = kv_len});
    builder.begin_head();
    builder.begin_tile(0, kv_len, policy);
    builder.add_span(0, kv_len);
    builder.attach_layout(layout);
    EXPECT_THROW(builder.finish(), Error);
  }
}

// Gemma 3's mask: causal, and bidirectional inside each image; with a sliding window, the image
// pairs stay whatever the window says.
TEST(MaskRule, BidirectionalImagesOverCausalText) {
  const ModalityLayout layout = LayoutBuilder()
                                    .text(5)
                                    .image({1, 3, 4}, /*markers=*/true)
                                    .text(6)
                                    .image({1, 2, 3}, /*markers=*/false)
                                    .text(3)
                                    .build();
  const int64_t kv_len = layout.length();
  const std::vector<int32_t> media = layout.token_media();
  for (const int64_t window : {int64_t{0}, int64_t{5}}) {
    for (const int64_t q_len : {kv_len, kv_len - 9}) {
      SCOPED_TRACE("window " + std::to_string(window) + " q_len " + std::to_string(q_len));
      const MaskPolicy policy{.causal = true, .window = window, .media_bidirectional = true};
      PlanShape shape{.heads = 2, .q_len = q_len, .kv_len = kv_len, .tile_rows = 8};
      PlanBuilder builder(shape);
      for (int64_t head = 0; head < shape.heads; ++head) {
        builder.begin_head();
        for (int64_t begin = 0; begin < q_len; begin += shape.tile_rows) {
          builder.begin_tile(begin, std::min(q_len, begin + shape.tile_rows), policy);
          builder.add_span(0, kv_len);
        }
      }
      builder.attach_layout(layout);
      const Plan plan = builder.finish();

      std::vector<uint8_t> expected(static_cast<std::size_t>(q_len * kv_len), 0);
      for (int64_t query = 0; query < q_len; ++query) {
        const int64_t aligned = query + kv_len - q_len;
        for (int64_t key = 0; key < kv_len; ++key) {
          const bool causal = key <= aligned && (window == 0 || aligned - key < window);
          const bool one_image = media[aligned] >= 0 && media[aligned] == media[key];
          expected[query * kv_len + key] = causal || one_image ? 1 : 0;
        }
      }
      EXPECT_EQ(materialize_mask(plan, 0), expected);
      EXPECT_EQ(materialize_mask(plan, 1), expected);

      test::Random random;
      SCOPED_TRACE(random.trace());
      constexpr int64_t kHeadDim = 8;
      Tensor q = random.normal_tensor(DType::kFloat32, {1, q_len, 2, kHeadDim});
      Tensor k = random.normal_tensor(DType::kFloat32, {1, kv_len, 2, kHeadDim});
      Tensor v = random.normal_tensor(DType::kFloat32, {1, kv_len, 2, kHeadDim});
      constexpr double kTolerance = 1e-5;
      test::expect_plan_equals_masked_oracle(plan, q.view(), k.view(), v.view(), kTolerance);
    }
  }
}

}  // namespace
}  // namespace mmsparse
