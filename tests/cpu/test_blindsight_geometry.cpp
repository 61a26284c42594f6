// BlindSight's device-builder geometry (src/methods/blindsight/blindsight_geometry.h) against the
// host builder, record for record: a plan written from the geometry the way the kernels write it
// (prefix tiles one span, image tiles their key runs from for_each_key_run, spans then columns)
// equals build_plan's for one head slot, and the geometry's counts, offsets, mask table and
// schedule are the plan's. On random layouts (odd sizes, adjacent images, videos, one image, a
// hundred images, q_len < kv_len, both sink styles, causal and bidirectional, every tile height).

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include "common/blindsight_cases.h"
#include "common/errors.h"
#include "common/random.h"
#include "methods/blindsight/blindsight_geometry.h"
#include "mmsparse/patterns.h"
#include "mmsparse/plan.h"

namespace mmsparse {
namespace {

using detail::BlindSightGeometry;
using detail::BlindSightTile;
using test::BlindSightLayoutCase;
using test::Random;

constexpr std::array<int64_t, 3> kTileRows = {16, 64, 128};

// The plan the kernels write from `geometry`, built through PlanBuilder.
Plan plan_from_geometry(const BlindSightGeometry& geometry, const PlanShape& shape,
                        const ModalityLayout& layout) {
  PlanBuilder builder(shape);
  builder.begin_head(geometry.order);
  for (const BlindSightTile& tile : geometry.tiles) {
    builder.begin_tile(tile.begin, tile.end, geometry.masks[tile.mask]);
    if (tile.image < 0) {
      builder.add_span(0, tile.keys_end);
      continue;
    }
    const int32_t own_begin = geometry.own_offsets[tile.image];
    detail::for_each_key_run(
        geometry.shared.data(), static_cast<int64_t>(geometry.shared.size()),
        geometry.own.data() + own_begin, geometry.own_offsets[tile.image + 1] - own_begin, tile,
        [&](int32_t begin, int32_t end) {
          const int32_t span_end = detail::run_span_end(begin, end, tile.first);
          builder.add_span(begin, span_end);
          for (int32_t key = span_end; key < end; ++key) builder.add_column(key);
        });
  }
  if (geometry.token_masks) builder.attach_layout(layout);
  return builder.finish();
}

std::vector<int64_t> tile_keys(const Plan& plan) {
  std::vector<int64_t> keys(plan.tiles.size(), 0);
  for (std::size_t t = 0; t < plan.tiles.size(); ++t) {
    for (int64_t s = plan.tile_span_offsets[t]; s < plan.tile_span_offsets[t + 1]; ++s) {
      keys[t] += plan.spans[s].end - plan.spans[s].begin;
    }
    keys[t] += plan.tile_column_offsets[t + 1] - plan.tile_column_offsets[t];
  }
  return keys;
}

void expect_geometry_is_the_plan(const PatternSpec& spec, const PlanShape& shape,
                                 const ModalityLayout& layout) {
  SCOPED_TRACE(spec.to_string() + " tile_rows " + std::to_string(shape.tile_rows) + " q_len " +
               std::to_string(shape.q_len) + " layout " + layout.to_json());
  const PatternSpec resolved = resolve_pattern(spec, &layout);
  const Plan host = build_plan(resolved, shape, &layout);
  const BlindSightGeometry geometry = detail::blindsight_geometry(resolved, shape, &layout);
  const Plan written = plan_from_geometry(geometry, shape, layout);
  EXPECT_EQ(written.runs, host.runs);  // the query order
  EXPECT_EQ(written.head_run_offsets, host.head_run_offsets);
  ASSERT_EQ(written.tiles.size(), host.tiles.size());
  for (std::size_t t = 0; t < host.tiles.size(); ++t) {
    EXPECT_EQ(written.tiles[t].begin, host.tiles[t].begin) << "tile " << t;
    EXPECT_EQ(written.tiles[t].end, host.tiles[t].end) << "tile " << t;
  }
  EXPECT_EQ(written.tile_masks, host.tile_masks);
  EXPECT_EQ(written.masks, host.masks);
  EXPECT_EQ(written.tile_span_offsets, host.tile_span_offsets);
  EXPECT_EQ(written.tile_column_offsets, host.tile_column_offsets);
  EXPECT_EQ(written.columns, host.columns);
  ASSERT_EQ(written.spans.size(), host.spans.size());
  for (std::size_t s = 0; s < host.spans.size(); ++s) {
    EXPECT_EQ(written.spans[s].begin, host.spans[s].begin) << "span " << s;
    EXPECT_EQ(written.spans[s].end, host.spans[s].end) << "span " << s;
  }
  // The host attaches the layout to every bidirectional plan in place; the upload reads it only
  // where a mask needs it.
  if (geometry.token_masks) EXPECT_EQ(written.token_media, host.token_media);
  // The counts and offsets the device sizes its buffer and places its records with.
  EXPECT_EQ(geometry.spans, static_cast<int64_t>(host.spans.size()));
  EXPECT_EQ(geometry.columns, static_cast<int64_t>(host.columns.size()));
  const std::vector<int64_t> keys = tile_keys(host);
  int64_t covered = 0;
  for (std::size_t t = 0; t < geometry.tiles.size(); ++t) {
    EXPECT_EQ(geometry.tiles[t].span_at, host.tile_span_offsets[t]) << "tile " << t;
    EXPECT_EQ(geometry.tiles[t].column_at, host.tile_column_offsets[t]) << "tile " << t;
    EXPECT_EQ(geometry.tiles[t].keys, keys[t]) << "tile " << t;
    covered += host.tiles[t].end - host.tiles[t].begin;
  }
  EXPECT_EQ(geometry.covers_every_row, covered == shape.q_len);
  // The upload's heaviest-first order of one head slot: keys descending, then position.
  std::vector<int32_t> expected(keys.size());
  std::iota(expected.begin(), expected.end(), 0);
  std::stable_sort(expected.begin(), expected.end(),
                   [&](int32_t a, int32_t b) { return keys[a] > keys[b]; });
  EXPECT_EQ(geometry.schedule, expected);
  EXPECT_EQ(geometry.token_masks,
            std::any_of(host.masks.begin(), host.masks.end(),
                        [](const MaskPolicy& mask) { return mask.needs_token_arrays(); }));
}

void check_random_cases(Random& random, int64_t images, int64_t max_side, int64_t cases) {
  for (int64_t c = 0; c < cases; ++c) {
    const BlindSightLayoutCase test_case =
        test::random_blindsight_case(random, images, max_side, 40);
    const int64_t kv_len = test_case.layout.length();
    for (const int64_t tile_rows : kTileRows) {
      const int64_t q_len = random.bernoulli(0.5) ? kv_len : random.uniform_int(1, kv_len);
      const PlanShape shape{.heads = 1, .q_len = q_len, .kv_len = kv_len, .tile_rows = tile_rows};
      for (const char* name : test::kBlindSightTemplates) {
        expect_geometry_is_the_plan(
            test::blindsight_spec(random, test_case, name, test::KeyPlacement::kInPlace), shape,
            test_case.layout);
      }
    }
  }
}

TEST(BlindSightGeometry, RandomLayoutsMatchTheHostBuilder) {
  Random random;
  SCOPED_TRACE(random.trace());
  constexpr int64_t kCases = 12;
  for (int64_t c = 0; c < kCases; ++c) {
    check_random_cases(random, random.uniform_int(1, 8), 24, 1);
  }
}

TEST(BlindSightGeometry, OneImageAndAHundredImages) {
  Random random;
  SCOPED_TRACE(random.trace());
  check_random_cases(random, 1, 30, 4);
  check_random_cases(random, 100, 6, 2);
}

// Images of a few thousand tokens, as the multi-image preset has them: runs of whole key chunks
// (spans) with column remainders.
TEST(BlindSightGeometry, LargeImages) {
  Random random;
  SCOPED_TRACE(random.trace());
  check_random_cases(random, 12, 64, 1);
}

TEST(BlindSightGeometry, WithoutImagesEveryTemplateIsCausal) {
  const PlanShape shape{.heads = 1, .q_len = 300, .kv_len = 333, .tile_rows = 64};
  const ModalityLayout text = ModalityLayout::text_only(shape.kv_len);
  for (const char* name : test::kBlindSightTemplates) {
    expect_geometry_is_the_plan(PatternSpec{name, {}}, shape, text);
    const BlindSightGeometry geometry = detail::blindsight_geometry(
        resolve_pattern(PatternSpec{name, {}}, nullptr), shape, nullptr);
    EXPECT_EQ(geometry.masks, std::vector<MaskPolicy>{MaskPolicy{}});
    EXPECT_EQ(geometry.columns, 0);
  }
}

TEST(BlindSightGeometry, ThrowsWhatTheHostBuilderThrows) {
  const ModalityLayout layout = LayoutBuilder().text(10).image({1, 4, 4}).text(5).build();
  const PlanShape shape{.heads = 1, .q_len = layout.length(), .kv_len = layout.length()};
  const PatternSpec outside =
      resolve_pattern(PatternSpec::parse("blindsight-sink:permute=0,sinks=[3/16]"), &layout);
  testing::expect_error([&] { (void)detail::blindsight_geometry(outside, shape, &layout); },
                        ErrorCode::kInvalidArgument, {"blindsight-sink list sinks"});
  const PlanShape longer{.heads = 1, .q_len = 5, .kv_len = layout.length() + 1};
  const PatternSpec intra = resolve_pattern(PatternSpec::parse("blindsight-intra"), &layout);
  testing::expect_error([&] { (void)detail::blindsight_geometry(intra, longer, &layout); },
                        ErrorCode::kInvalidArgument, {"blindsight-intra layout"});
}

// Plans through a key order are the host builder's: the geometry (the device builder's) refuses
// them by name (bidirectional ones too), and takes the same templates in place.
TEST(BlindSightGeometry, RefusesKeyOrders) {
  const ModalityLayout layout = LayoutBuilder().text(10).image({1, 4, 4}).text(5).build();
  const PlanShape shape{.heads = 1, .q_len = layout.length(), .kv_len = layout.length()};
  for (const char* text :
       {"blindsight-sink", "blindsight-intra:permute=1", "blindsight-intra-sink:permute=-1",
        "blindsight-intra:bidirectional=1", "blindsight-sink:bidirectional=1,permute=1"}) {
    const PatternSpec spec = resolve_pattern(PatternSpec::parse(text), &layout);
    testing::expect_error([&] { (void)detail::blindsight_geometry(spec, shape, &layout); },
                          ErrorCode::kUnsupported, {"key order", "permute=0"});
  }
  for (const char* text :
       {"blindsight-sink:permute=0", "blindsight-intra:bidirectional=1,permute=0"}) {
    expect_geometry_is_the_plan(PatternSpec::parse(text), shape, layout);
  }
}

}  // namespace
}  // namespace mmsparse
