// BlindSight's template masks (src/methods/blindsight, docs/blindsight.md) against an oracle
// written here from the paper's definitions (§3.2; App. L, Alg. 3: text queries attend to every
// earlier token; an image query to text keys, plus image sinks for sink heads, plus its own image
// for intra-image heads; all within the model's dense mask, causal or bidirectional inside each
// image as Gemma 3): element by element on random layouts, and attention over the plans against
// masked-dense attention over the oracle's mask; image tiles in place and through key orders
// (permute). Plus the plans' shape (tiles never mix images; in place, short key runs are
// gathered; through an order, a few spans and no columns), list parameters and named errors.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "common/errors.h"
#include "common/random.h"
#include "core/engine_chunks.h"
#include "mmsparse/attention.h"
#include "mmsparse/layout.h"
#include "mmsparse/patterns.h"
#include "mmsparse/plan.h"

namespace mmsparse {
namespace {

using testing::expect_error;

const std::vector<std::string> kMasks = {"dense", "sink", "intra", "intra-sink"};

// The paper's masks from per-token facts: each token's image (-1 for text) and whether it is one
// of its image's sink tokens.
struct Oracle {
  std::vector<int32_t> image;
  std::vector<uint8_t> sink;
  bool bidirectional = false;

  bool keeps(const std::string& mask, int64_t query, int64_t key) const {
    const bool same_image = image[query] >= 0 && image[query] == image[key];
    const bool model_mask = key <= query || (bidirectional && same_image);
    if (!model_mask) return false;
    if (image[query] < 0 || mask == "dense") return true;  // text queries: every earlier token
    const bool text_key = image[key] < 0;
    if (mask == "sink") return text_key || sink[key] != 0;
    if (mask == "intra") return text_key || same_image;
    return text_key || sink[key] != 0 || same_image;  // intra-sink
  }
};

// Sinks as the paper defines them: the first 10% (here `percent`) of each image's tokens,
// rounded up, or the tokens at fixed offsets inside every image.
Oracle make_oracle(const ModalityLayout& layout, int64_t percent,
                   const std::vector<int64_t>& offsets, bool bidirectional) {
  Oracle oracle{layout.token_media(), {}, bidirectional};
  oracle.sink.assign(oracle.image.size(), 0);
  for (int32_t media = 0; media < static_cast<int32_t>(layout.media().size()); ++media) {
    std::vector<int64_t> tokens;
    for (std::size_t i = 0; i < oracle.image.size(); ++i) {
      if (oracle.image[i] == media) tokens.push_back(static_cast<int64_t>(i));
    }
    const auto count = static_cast<int64_t>(tokens.size());
    if (offsets.empty()) {
      for (int64_t i = 0; i * 100 < count * percent; ++i) oracle.sink[tokens[i]] = 1;
    } else {
      for (int64_t offset : offsets) oracle.sink[tokens[offset]] = 1;
    }
  }
  return oracle;
}

struct Case {
  ModalityLayout layout;
  int64_t percent = 10;
  std::vector<int64_t> offsets;  // Gemma 3 style when not empty
  bool bidirectional = false;
  std::string style;
};

// Images of random sizes (or one size, for fixed offsets), text of random lengths including none
// between images (adjacent images), sometimes a video interrupted by timestamps.
Case random_case(test::Random& random, int64_t images, bool fixed_size) {
  Case test_case;
  const Grid fixed{1, random.uniform_int(1, 4), random.uniform_int(2, 5)};
  LayoutBuilder builder;
  if (random.bernoulli(0.7)) builder.text(random.uniform_int(1, 20));
  for (int64_t i = 0; i < images; ++i) {
    const Grid grid =
        fixed_size ? fixed : Grid{1, random.uniform_int(1, 6), random.uniform_int(1, 7)};
    if (!fixed_size && random.bernoulli(0.1)) {
      builder.video({2, grid.h, grid.w}, random.uniform_int(0, 2), random.bernoulli(0.5));
    } else {
      builder.image(grid, random.bernoulli(0.5));
    }
    if (random.bernoulli(0.5)) builder.text(random.uniform_int(1, 9));
  }
  test_case.layout = builder.build();
  if (fixed_size) {
    for (int64_t offset = 0; offset < fixed.tokens(); ++offset) {
      if (random.bernoulli(0.3)) test_case.offsets.push_back(offset);
    }
    if (test_case.offsets.empty()) test_case.offsets.push_back(fixed.tokens() - 1);
  }
  test_case.percent = random.bernoulli(0.5) ? 10 : random.uniform_int(1, 100);
  test_case.bidirectional = random.bernoulli(0.5);
  return test_case;
}

// permute: -1 (the default: a key order where causal), 0 (in place) or 1 (a key order).
constexpr int64_t kPermuteDefault = -1;
constexpr int64_t kInPlace = 0;
constexpr int64_t kPermute = 1;

PatternSpec spec_of(const std::string& mask, const Case& test_case,
                    int64_t permute = kPermuteDefault) {
  PatternSpec spec{"blindsight-" + mask, {{"bidirectional", test_case.bidirectional ? 1 : 0}}};
  if (mask == "sink" || mask == "intra-sink") {
    spec.params["sink_percent"] = test_case.percent;
    spec.lists["sinks"] = test_case.offsets;
  }
  if (mask != "dense") spec.params["permute"] = permute;
  return spec;
}

// The permute values a template takes: in place, the default and 1 (both a key order).
std::vector<int64_t> permute_values(const std::string& mask) {
  if (mask == "dense") return {kPermuteDefault};
  return {kInPlace, kPermuteDefault, kPermute};
}

// The sparse templates' query order: every image row, ascending, then every text row, ascending
// (image rows of one tile are then consecutive positions, and text rows fill whole tiles).
void expect_images_then_text(const Oracle& oracle, int64_t offset,
                             const std::vector<int64_t>& order) {
  std::vector<int64_t> expected;
  for (const bool text : {false, true}) {
    for (int64_t row = 0; row < static_cast<int64_t>(order.size()); ++row) {
      if ((oracle.image[row + offset] < 0) == text) expected.push_back(row);
    }
  }
  EXPECT_EQ(order, expected);
}

// An image tile in place: every key run shorter than a key chunk gathered, whole chunks left of
// its rows.
void expect_in_place_image_tile(const Plan& plan, int64_t t, int64_t first_position) {
  EXPECT_EQ(plan.tile_key_order(t), kKeysInPlace) << "tile " << t;
  for (int64_t s = plan.tile_span_offsets[t]; s < plan.tile_span_offsets[t + 1]; ++s) {
    const int64_t length = plan.spans[s].end - plan.spans[s].begin;
    EXPECT_GE(length, kGatherChunkKeys) << "tile " << t;
    // Left of every row: whole chunks only.
    if (plan.spans[s].end <= first_position) {
      EXPECT_EQ(length % kGatherChunkKeys, 0) << "tile " << t;
    }
  }
}

// An image tile through a key order: spans only, over no padding slot, two per region at most
// (the shared keys, the image's own keys) where the sinks are a prefix of each image. A
// bidirectional tile is unmasked, with one span per region where its image is one segment.
void expect_permuted_image_tile(const Plan& plan, int64_t t, const std::string& mask,
                                bool listed_sinks, bool bidirectional, bool one_segment) {
  const int32_t order = plan.tile_key_order(t);
  const int64_t regions = mask == "sink" ? 1 : 2;
  const int64_t spans = plan.tile_span_offsets[t + 1] - plan.tile_span_offsets[t];
  const MaskPolicy& policy = plan.masks[plan.tile_masks[t]];
  if (bidirectional) {
    EXPECT_EQ(policy, MaskPolicy{.causal = false}) << "tile " << t;
    if (one_segment) EXPECT_LE(spans, regions) << "tile " << t;
  } else {
    EXPECT_EQ(policy, MaskPolicy{}) << "tile " << t;
  }
  ASSERT_NE(order, kKeysInPlace) << "tile " << t;
  EXPECT_EQ(plan.tile_column_offsets[t], plan.tile_column_offsets[t + 1]) << "tile " << t;
  EXPECT_EQ(plan.tile_strided_offsets[t], plan.tile_strided_offsets[t + 1]) << "tile " << t;
  const std::vector<int32_t>& slots = plan.key_orders[order];
  for (int64_t s = plan.tile_span_offsets[t]; s < plan.tile_span_offsets[t + 1]; ++s) {
    for (int64_t slot = plan.spans[s].begin; slot < plan.spans[s].end; ++slot) {
      ASSERT_NE(slots[slot], kPaddingKey) << "tile " << t << " slot " << slot;
    }
  }
  if (!listed_sinks) EXPECT_LE(spans, 2 * regions) << "tile " << t;
}

int64_t segments_of(const ModalityLayout& layout, int32_t image) {
  return std::count_if(layout.segments().begin(), layout.segments().end(),
                       [&](const Segment& segment) { return segment.media == image; });
}

// The plan of one template and key placement equals the oracle pair by pair; tiles hold one image
// or text only, are never empty, text tiles are full but the last and read in place, and image
// tiles read their keys as the placement says.
void check_plan(const Case& test_case, const Oracle& oracle, const std::string& mask,
                int64_t permute, const PlanShape& shape) {
  const ModalityLayout& layout = test_case.layout;
  const int64_t kv_len = shape.kv_len;
  const int64_t q_len = shape.q_len;
  const int64_t offset = kv_len - q_len;
  const PatternSpec spec = spec_of(mask, test_case, permute);
  SCOPED_TRACE(spec.to_string() + " q_len=" + std::to_string(q_len) +
               " tile_rows=" + std::to_string(shape.tile_rows) + " layout " + layout.to_json());
  const Plan plan = build_plan(spec, shape, &layout);
  const std::vector<uint8_t> computed = materialize_mask(plan, 0);
  int64_t pairs = 0;
  for (int64_t row = 0; row < q_len; ++row) {
    for (int64_t key = 0; key < kv_len; ++key) {
      const bool expected = oracle.keeps(mask, row + offset, key);
      pairs += expected;
      ASSERT_EQ(computed[row * kv_len + key] != 0, expected) << "query " << row << " key " << key;
    }
  }
  EXPECT_EQ(count_plan_pairs(plan, 0), pairs);
  const bool permuted = mask != "dense" && permute != kInPlace && !layout.media().empty();
  if (!permuted) EXPECT_FALSE(plan.has_key_orders());
  const std::vector<int64_t> order = plan.query_order(0);
  if (mask != "dense") expect_images_then_text(oracle, offset, order);
  for (int64_t t = 0; t < plan.num_tiles(); ++t) {
    const QueryTile& tile = plan.tiles[t];
    ASSERT_LT(tile.begin, tile.end);
    const bool has_keys = plan.tile_span_offsets[t] < plan.tile_span_offsets[t + 1] ||
                          plan.tile_column_offsets[t] < plan.tile_column_offsets[t + 1];
    EXPECT_TRUE(has_keys) << "tile " << t;
    const int64_t first_row = order[tile.begin];
    const int32_t image = oracle.image[first_row + offset];
    if (mask == "dense") continue;  // the model's mask: uniform tiles
    for (int64_t i = tile.begin; i < tile.end; ++i) {
      ASSERT_EQ(oracle.image[order[i] + offset], image) << "tile " << t << " mixes rows";
    }
    if (image < 0) {
      // Text rows fill whole tiles: only the last text tile (the plan's last tile) is short.
      if (t + 1 < plan.num_tiles()) EXPECT_EQ(tile.end - tile.begin, shape.tile_rows);
      EXPECT_EQ(plan.tile_key_order(t), kKeysInPlace) << "tile " << t;
    } else if (permuted) {
      expect_permuted_image_tile(plan, t, mask, !test_case.offsets.empty(), test_case.bidirectional,
                                 segments_of(layout, image) == 1);
    } else {
      expect_in_place_image_tile(plan, t, first_row + offset);
    }
  }
}

// Every mask and key placement of a case.
void check_case(const Case& test_case, int64_t q_len, int64_t tile_rows) {
  const int64_t kv_len = test_case.layout.length();
  const PlanShape shape{.q_len = q_len, .kv_len = kv_len, .tile_rows = tile_rows};
  const Oracle oracle =
      make_oracle(test_case.layout, test_case.percent, test_case.offsets, test_case.bidirectional);
  for (const std::string& mask : kMasks) {
    for (const int64_t permute : permute_values(mask)) {
      check_plan(test_case, oracle, mask, permute, shape);
    }
  }
}

TEST(BlindSight, MasksEqualThePaperDefinitionsOnRandomLayouts) {
  test::Random random;
  SCOPED_TRACE(random.trace());
  constexpr int kTrials = 12;
  for (int trial = 0; trial < kTrials; ++trial) {
    const bool fixed_size = random.bernoulli(0.4);
    const Case test_case = random_case(random, random.uniform_int(1, 9), fixed_size);
    const int64_t kv_len = test_case.layout.length();
    const int64_t q_len = random.bernoulli(0.7) ? kv_len : random.uniform_int(1, kv_len);
    check_case(test_case, q_len, 8 << random.uniform_int(0, 3));
  }
}

TEST(BlindSight, OneImageAdjacentImagesAndAHundredImages) {
  test::Random random;
  SCOPED_TRACE(random.trace());
  Case one;
  one.layout = LayoutBuilder().image({1, 5, 7}, false).build();  // no text at all
  check_case(one, one.layout.length(), 16);
  Case adjacent;  // images back to back, no markers, no text: a text-free run
  adjacent.layout = LayoutBuilder()
                        .text(3)
                        .image({1, 3, 5}, false)
                        .image({1, 4, 4}, false)
                        .image({1, 1, 1}, false)
                        .text(2)
                        .build();
  adjacent.bidirectional = true;
  check_case(adjacent, adjacent.layout.length(), 8);
  Case sinks_ahead;  // the first rows have no key at all: a causal image before any sink
  sinks_ahead.layout = LayoutBuilder().image({1, 3, 7}, false).text(4).image({1, 3, 7}).build();
  sinks_ahead.offsets = {9, 15};
  check_case(sinks_ahead, sinks_ahead.layout.length(), 4);
  Case hundred = random_case(random, 100, false);
  check_case(hundred, hundred.layout.length(), 64);
  Case hundred_fixed = random_case(random, 100, true);
  hundred_fixed.bidirectional = true;
  check_case(hundred_fixed, hundred_fixed.layout.length(), 32);
}

// In place, key runs left of every row of a tile are spans of whole key chunks and their
// remainders, with the short runs, gathered columns: full chunks (the paper's sink packing).
TEST(BlindSight, KeyRunsFillWholeChunks) {
  const ModalityLayout layout =
      LayoutBuilder().text(40).image({1, 40, 40}).image({1, 10, 10}).image({1, 40, 40}).build();
  const PlanShape shape{.q_len = layout.length(), .kv_len = layout.length(), .tile_rows = 128};
  const Plan plan = build_plan(PatternSpec::parse("blindsight-sink:permute=0"), shape, &layout);
  const int64_t t = plan.num_tiles() - 2;  // the third image's last tile (the end marker follows)
  // Its keys, as runs: text and a start marker then the first sink (41 + 160 = 201 keys); the
  // first image's end marker, a start marker and the second sink (2 + 10); the second image's end
  // marker, a start marker and the third sink (2 + 160). Spans of one chunk each, the rest
  // (73 + 12 + 34) columns.
  std::vector<int64_t> span_lengths;
  for (int64_t s = plan.tile_span_offsets[t]; s < plan.tile_span_offsets[t + 1]; ++s) {
    span_lengths.push_back(plan.spans[s].end - plan.spans[s].begin);
  }
  EXPECT_EQ(span_lengths, (std::vector<int64_t>{kGatherChunkKeys, kGatherChunkKeys}));
  EXPECT_EQ(plan.tile_column_offsets[t + 1] - plan.tile_column_offsets[t], 73 + 12 + 34);
}

// Attention over the plans equals masked-dense attention over the oracle's mask: every template
// in place and through its key order (permute=1; bidirectional tiles unmasked) in one plan, GQA 4.
TEST(BlindSight, PlannedAttentionEqualsMaskedDenseOracle) {
  test::Random random;
  SCOPED_TRACE(random.trace());
  constexpr int64_t kHeads = 8;
  constexpr int64_t kKvHeads = 2;
  constexpr int64_t kDim = 16;
  constexpr double kTolerance = 2e-5;
  for (int trial = 0; trial < 3; ++trial) {
    const Case test_case = random_case(random, random.uniform_int(1, 6), trial == 2);
    const int64_t kv_len = test_case.layout.length();
    const int64_t q_len = trial == 1 ? random.uniform_int(1, kv_len) : kv_len;
    const Oracle oracle = make_oracle(test_case.layout, test_case.percent, test_case.offsets,
                                      test_case.bidirectional);
    const Tensor q = random.normal_tensor(DType::kFloat32, {1, q_len, kHeads, kDim});
    const Tensor k = random.normal_tensor(DType::kFloat32, {1, kv_len, kKvHeads, kDim});
    const Tensor v = random.normal_tensor(DType::kFloat32, {1, kv_len, kKvHeads, kDim});
    std::vector<PatternSpec> specs;
    for (const int64_t permute : {kPermute, kInPlace}) {
      for (const std::string& mask : kMasks) specs.push_back(spec_of(mask, test_case, permute));
    }
    const Plan plan =
        build_plan(specs, {.heads = kHeads, .q_len = q_len, .kv_len = kv_len, .tile_rows = 16},
                   &test_case.layout);
    Tensor mask(DType::kUInt8, {1, kHeads, q_len, kv_len});
    for (int64_t h = 0; h < kHeads; ++h) {
      for (int64_t row = 0; row < q_len; ++row) {
        for (int64_t key = 0; key < kv_len; ++key) {
          mask.data_as<uint8_t>()[(h * q_len + row) * kv_len + key] =
              oracle.keeps(kMasks[h % kMasks.size()], row + kv_len - q_len, key) ? 1 : 0;
        }
      }
    }
    Tensor out_plan(DType::kFloat32, {1, q_len, kHeads, kDim});
    Tensor out_mask(DType::kFloat32, {1, q_len, kHeads, kDim});
    Tensor lse_plan(DType::kFloat32, {1, kHeads, q_len});
    Tensor lse_mask(DType::kFloat32, {1, kHeads, q_len});
    attention_planned(plan, q.view(), k.view(), v.view(), out_plan.view(), lse_plan.view());
    attention_masked(q.view(), k.view(), v.view(), mask.view(), out_mask.view(), lse_mask.view());
    for (int64_t i = 0; i < out_plan.numel(); ++i) {
      const float expected = out_mask.data_as<float>()[i];
      ASSERT_NEAR(out_plan.data_as<float>()[i], expected,
                  kTolerance * std::max(1.0f, std::abs(expected)))
          << "out element " << i;
    }
    for (int64_t i = 0; i < lse_plan.numel(); ++i) {
      const float expected = lse_mask.data_as<float>()[i];
      if (std::isinf(expected)) {
        EXPECT_TRUE(std::isinf(lse_plan.data_as<float>()[i]));
      } else {
        ASSERT_NEAR(lse_plan.data_as<float>()[i], expected,
                    kTolerance * std::max(1.0f, std::abs(expected)));
      }
    }
  }
}

// A per-head config mixing BlindSight heads (through key orders and in place) with dense, A-shape
// and vertical-slash heads, batch 2 and GQA: one plan (prepare_pattern on the CPU too), whose
// orders are deduplicated (one per template family), equal to masked-dense attention over each
// head slot's materialised mask.
TEST(BlindSight, ConfigsMixPermutedHeadsWithOtherPatterns) {
  test::Random random;
  SCOPED_TRACE(random.trace());
  constexpr int64_t kBatch = 2;
  constexpr int64_t kKvHeads = 2;
  constexpr int64_t kDim = 16;
  constexpr double kTolerance = 2e-5;
  const Case test_case = random_case(random, random.uniform_int(2, 6), false);
  const int64_t kv_len = test_case.layout.length();
  const int64_t q_len = random.bernoulli(0.5) ? kv_len : random.uniform_int(1, kv_len);
  const std::vector<PatternSpec> specs = {
      spec_of("sink", test_case),
      spec_of("intra", test_case),
      PatternSpec{"dense", {}},
      PatternSpec{"a-shape", {{"sink", 16}, {"local", 40}}},
      spec_of("intra-sink", test_case),
      spec_of("sink", test_case, kInPlace),
      PatternSpec::parse("vertical-slash:vertical=8,slash=24,last_q=8,sink=4,local=16"),
      spec_of("sink", test_case)};
  const auto heads = static_cast<int64_t>(specs.size());
  const PlanShape shape{
      .batch = kBatch, .heads = heads, .q_len = q_len, .kv_len = kv_len, .tile_rows = 16};
  const Tensor q = random.normal_tensor(DType::kFloat32, {kBatch, q_len, heads, kDim});
  const Tensor k = random.normal_tensor(DType::kFloat32, {kBatch, kv_len, kKvHeads, kDim});
  const Tensor v = random.normal_tensor(DType::kFloat32, {kBatch, kv_len, kKvHeads, kDim});
  const PatternInputs inputs{q.view(), k.view()};
  const PreparedPlan prepared =
      prepare_pattern(specs, shape, &test_case.layout, Device{}, nullptr, &inputs);
  const Plan& plan = prepared.plan();
  SCOPED_TRACE("layout " + test_case.layout.to_json() + " plan " + plan.summary());
  EXPECT_EQ(plan.key_orders.size(), 2u) << "one order per family (sinks, intra), every slot";
  Tensor mask(DType::kUInt8, {kBatch, heads, q_len, kv_len});
  for (int64_t slot = 0; slot < shape.head_slots(); ++slot) {
    const std::vector<uint8_t> slot_mask = materialize_mask(plan, slot);
    std::copy(slot_mask.begin(), slot_mask.end(), mask.data_as<uint8_t>() + slot * q_len * kv_len);
  }
  Tensor out_plan(DType::kFloat32, {kBatch, q_len, heads, kDim});
  Tensor out_mask(DType::kFloat32, {kBatch, q_len, heads, kDim});
  Tensor lse_plan(DType::kFloat32, {kBatch, heads, q_len});
  Tensor lse_mask(DType::kFloat32, {kBatch, heads, q_len});
  attention_planned(prepared, q.view(), k.view(), v.view(), out_plan.view(), lse_plan.view());
  attention_masked(q.view(), k.view(), v.view(), mask.view(), out_mask.view(), lse_mask.view());
  for (int64_t i = 0; i < out_plan.numel(); ++i) {
    const float expected = out_mask.data_as<float>()[i];
    ASSERT_NEAR(out_plan.data_as<float>()[i], expected,
                kTolerance * std::max(1.0f, std::abs(expected)))
        << "out element " << i;
  }
  // The BlindSight heads' slots equal the oracle too (the masks above are the plan's own).
  const Oracle oracle =
      make_oracle(test_case.layout, test_case.percent, {}, test_case.bidirectional);
  const std::vector<uint8_t> first_sink = materialize_mask(plan, 0);
  for (int64_t row = 0; row < q_len; ++row) {
    for (int64_t key = 0; key < kv_len; ++key) {
      ASSERT_EQ(first_sink[row * kv_len + key] != 0,
                oracle.keeps("sink", row + kv_len - q_len, key));
    }
  }
}

// Gemma 3-style heads through key orders (masks reading no tokens) beside in-place ones (the
// lifted mask, which reads them) and other patterns: the plan carries the token arrays and
// validates. A plan of the key-ordered heads alone needs none, until it holds the others' policies
// (as a per-head config's host section does, its masks renumbered to the layer's table): then it
// must take the layout's token arrays to validate.
TEST(BlindSight, BidirectionalHeadsInAndOutOfPlaceShareTheTokenArrays) {
  test::Random random;
  SCOPED_TRACE(random.trace());
  Case test_case = random_case(random, random.uniform_int(2, 6), false);
  test_case.bidirectional = true;
  const int64_t kv_len = test_case.layout.length();
  const int64_t q_len = kv_len;  // every image has its rows: the in-place heads read tokens
  const std::vector<PatternSpec> key_ordered = {
      spec_of("sink", test_case, kPermute), PatternSpec{"dense", {}},
      PatternSpec{"a-shape", {{"sink", 4}, {"local", 24}}}, spec_of("intra-sink", test_case)};
  std::vector<PatternSpec> mixed = key_ordered;
  mixed.push_back(spec_of("sink", test_case, kInPlace));
  mixed.push_back(spec_of("intra", test_case, kInPlace));
  const auto shape_of = [&](const std::vector<PatternSpec>& specs) {
    return PlanShape{.heads = static_cast<int64_t>(specs.size()),
                     .q_len = q_len,
                     .kv_len = kv_len,
                     .tile_rows = 16};
  };
  const Plan plan = build_plan(mixed, shape_of(mixed), &test_case.layout);
  SCOPED_TRACE("layout " + test_case.layout.to_json() + " plan " + plan.summary());
  EXPECT_NO_THROW(plan.validate());
  EXPECT_TRUE(plan.has_key_orders());
  EXPECT_EQ(static_cast<int64_t>(plan.token_media.size()), kv_len);

  Plan ordered = build_plan(key_ordered, shape_of(key_ordered), &test_case.layout);
  EXPECT_NO_THROW(ordered.validate());
  for (const MaskPolicy& mask : plan.masks) {
    if (std::find(ordered.masks.begin(), ordered.masks.end(), mask) == ordered.masks.end()) {
      ordered.masks.push_back(mask);
    }
  }
  ASSERT_TRUE(ordered.token_media.empty()) << "key-ordered heads read no token arrays";
  expect_error([&] { ordered.validate(); }, ErrorCode::kInvalidArgument,
               {"plan.token_modality", "needs token arrays"});
  ordered.attach_layout(test_case.layout);
  EXPECT_NO_THROW(ordered.validate());
}

// A causal workload takes every template in both styles, in place and through key orders: the
// unmasked image tiles of a bidirectional head read past their rows only inside their own image,
// the pairs the in-place lifted mask keeps. Full attention reads other keys past its rows too.
TEST(BlindSight, BidirectionalKeyOrdersAttendCausallyWithBidirectionalMedia) {
  test::Random random;
  SCOPED_TRACE(random.trace());
  const Case test_case = random_case(random, random.uniform_int(2, 6), false);
  const int64_t kv_len = test_case.layout.length();
  const PlanShape shape{.q_len = random.uniform_int(1, kv_len), .kv_len = kv_len, .tile_rows = 16};
  SCOPED_TRACE("layout " + test_case.layout.to_json());
  for (const bool bidirectional : {false, true}) {
    Case style = test_case;
    style.bidirectional = bidirectional;
    for (const std::string& mask : {"sink", "intra", "intra-sink"}) {
      for (const int64_t permute : permute_values(mask)) {
        const PatternSpec spec = spec_of(mask, style, permute);
        EXPECT_TRUE(attends_causally(spec, shape, &style.layout)) << spec.to_string();
      }
    }
  }
  // Every row, so that full attention reads keys past them (the last rows alone would not).
  const PlanShape every_row{.q_len = kv_len, .kv_len = kv_len, .tile_rows = 16};
  EXPECT_FALSE(attends_causally(PatternSpec{"full", {}}, every_row, &test_case.layout));
  EXPECT_FALSE(attends_causally(PatternSpec{"full", {}}, every_row));
}

// Without a layout every token is text: every template is the causal mask.
TEST(BlindSight, WithoutALayoutEveryQueryIsText) {
  const PlanShape shape{.q_len = 50, .kv_len = 70, .tile_rows = 16};
  const std::vector<uint8_t> causal =
      materialize_mask(build_plan(PatternSpec{"dense", {}}, shape), 0);
  for (const std::string& mask : kMasks) {
    EXPECT_EQ(materialize_mask(build_plan(PatternSpec{"blindsight-" + mask, {}}, shape), 0),
              causal);
  }
}

TEST(BlindSight, ListParametersRoundTripAndOtherSpecsAreUnchanged) {
  const PatternSpec spec = PatternSpec::parse("blindsight-sink:bidirectional=1,sinks=[3/17/40]");
  EXPECT_EQ(spec.lists.at("sinks"), (std::vector<int64_t>{3, 17, 40}));
  EXPECT_EQ(spec.to_string(), "blindsight-sink:bidirectional=1,sinks=[3/17/40]");
  EXPECT_EQ(PatternSpec::parse(spec.to_string()), spec);
  EXPECT_EQ(resolve_pattern(spec).to_string(),
            "blindsight-sink:bidirectional=1,permute=-1,sink_percent=10,sinks=[3/17/40]");
  EXPECT_EQ(resolve_pattern(PatternSpec::parse("blindsight-intra-sink")).to_string(),
            "blindsight-intra-sink:bidirectional=0,permute=-1,sink_percent=10,sinks=[]");
  EXPECT_EQ(resolve_pattern(PatternSpec::parse("blindsight-intra")).to_string(),
            "blindsight-intra:bidirectional=0,permute=-1");
  EXPECT_EQ(resolve_pattern(PatternSpec::parse("blindsight-dense")).to_string(),
            "blindsight-dense:bidirectional=0");
  EXPECT_EQ(PatternSpec::parse("blindsight-sink:sinks=[]").lists.at("sinks").size(), 0u);
  EXPECT_EQ(resolve_pattern(PatternSpec::parse("tri-shape:local=512")).to_string(),
            "tri-shape:bottom=128,local=512,sink=128");
  EXPECT_TRUE(resolve_pattern(PatternSpec::parse("a-shape")).lists.empty());
  // Through the per-model config (specs are strings there).
  PatternConfig config;
  config.head_specs[2][5] = spec;
  config.layer_defaults[1] = PatternSpec::parse("blindsight-intra:bidirectional=1");
  const PatternConfig again = PatternConfig::from_json(config.to_json());
  EXPECT_EQ(again.head_specs.at(2).at(5), spec);
  EXPECT_EQ(again.layer_defaults.at(1), config.layer_defaults.at(1));
}

TEST(BlindSight, BadSpecsAndLayoutsAreNamedErrors) {
  const ModalityLayout layout = LayoutBuilder().text(4).image({1, 3, 4}).image({1, 2, 5}).build();
  const PlanShape shape{.q_len = layout.length(), .kv_len = layout.length()};
  const auto build = [&](const std::string& text) {
    return [=] { (void)build_plan(PatternSpec::parse(text), shape, &layout); };
  };
  expect_error(build("blindsight-sink:sink_percent=0"), ErrorCode::kInvalidArgument,
               {"blindsight-sink parameter sink_percent", ">= 1"});
  expect_error(build("blindsight-intra-sink:sink_percent=101"), ErrorCode::kInvalidArgument,
               {"blindsight-intra-sink parameter sink_percent", "1 to 100", "101"});
  expect_error(build("blindsight-sink:sinks=[5/3]"), ErrorCode::kInvalidArgument,
               {"blindsight-sink list sinks", "ascending distinct offsets"});
  expect_error(build("blindsight-sink:sinks=[-1]"), ErrorCode::kInvalidArgument,
               {"blindsight-sink list sinks", ">= 0"});
  expect_error(build("blindsight-sink:sinks=[1/10]"), ErrorCode::kInvalidArgument,
               {"blindsight-sink list sinks", "image 1 has 10 tokens", "got 10"});
  expect_error(build("blindsight-intra:bidirectional=2"), ErrorCode::kInvalidArgument,
               {"blindsight-intra parameter bidirectional", "0 or 1"});
  expect_error(build("blindsight-intra:permute=2"), ErrorCode::kInvalidArgument,
               {"blindsight-intra parameter permute", "-1", "0 (in place) or 1", "got 2"});
  expect_error(build("blindsight-dense:permute=0"), ErrorCode::kInvalidArgument,
               {"blindsight-dense", "parameters bidirectional", "\"permute\""});
  expect_error(build("blindsight-sink:sinks=4"), ErrorCode::kInvalidArgument,
               {"blindsight-sink parameter sinks", "a list such as sinks=[4]"});
  expect_error(build("blindsight-intra:sinks=[1]"), ErrorCode::kInvalidArgument,
               {"blindsight-intra", "list parameters none", "\"sinks\""});
  expect_error([] { (void)PatternSpec::parse("blindsight-sink:sinks=[1/x]"); },
               ErrorCode::kParseError, {"parameter sinks", "expected integers", "\"x\""});
  expect_error([] { (void)PatternSpec::parse("blindsight-sink:sinks=[1/2"); },
               ErrorCode::kParseError, {"parameter sinks", "closed by ']'"});
  expect_error([] { (void)PatternSpec::parse("blindsight-sink:sinks=[1],sinks=2"); },
               ErrorCode::kParseError, {"parameter sinks given twice"});
  expect_error(
      [&] {
        (void)build_plan(PatternSpec::parse("blindsight-intra"),
                         {.q_len = layout.length(), .kv_len = layout.length() + 1}, &layout);
      },
      ErrorCode::kInvalidArgument, {"blindsight-intra layout", "length kv_len"});
  expect_error(
      [&] {
        (void)build_plan(PatternSpec::parse("blindsight-intra"),
                         {.q_len = layout.length() + 2, .kv_len = layout.length()}, &layout);
      },
      ErrorCode::kInvalidArgument, {"blindsight-intra q_len", "<= kv_len"});
}

}  // namespace
}  // namespace mmsparse
