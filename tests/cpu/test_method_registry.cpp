// The method registry (src/methods/registry.h): every entry resolves its defaults, names the
// parameters it scales with the sequence length, and owns a device builder exactly in CUDA builds
// (docs/adding-a-method.md). MMSPARSE_TEST_WITH_CUDA tells which build this is.

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "methods/blindsight/blindsight.h"
#include "methods/device_builder.h"
#include "methods/grid/grid.h"
#include "methods/registry.h"
#include "methods/static/static_patterns.h"
#include "methods/vec/vec.h"
#include "methods/vertical_slash/vertical_slash.h"
#include "mmsparse/layout.h"
#include "mmsparse/patterns.h"

namespace mmsparse {
namespace {

// Without a video the SF patterns default to this many tokens per frame (registry.cpp).
constexpr int64_t kDefaultTokensPerFrame = 256;

TEST(MethodRegistry, ListsEveryEntryOnceInTheOrderOfKnownPatterns) {
  const std::vector<const detail::PatternEntry*>& entries = detail::pattern_entries();
  const std::vector<PatternInfo>& known = known_patterns();
  ASSERT_EQ(entries.size(), known.size());
  for (std::size_t i = 0; i < entries.size(); ++i) {
    EXPECT_EQ(entries[i]->info.name, known[i].name);
    EXPECT_EQ(detail::find_pattern_entry(known[i].name), entries[i]);
  }
  EXPECT_EQ(detail::find_pattern_entry("no-such-pattern"), nullptr);
  EXPECT_EQ(detail::find_pattern_entry("vertical-slash"), &detail::vertical_slash_entry());
  EXPECT_EQ(detail::find_pattern_entry("grid"), &detail::grid_entry());
  EXPECT_EQ(detail::find_pattern_entry("grid-mask"), &detail::grid_mask_entry());
  EXPECT_EQ(detail::find_pattern_entry("sf-fixed"),
            &detail::static_pattern_entry(detail::StaticPattern::kSfFixed));
}

TEST(MethodRegistry, EveryEntryResolvesItsDefaults) {
  const Grid frames{4, 8, 16};
  const ModalityLayout video = LayoutBuilder().text(32).video(frames).text(16).build();
  for (const detail::PatternEntry* entry : detail::pattern_entries()) {
    SCOPED_TRACE(entry->info.name);
    const PatternSpec bare{entry->info.name, {}};
    EXPECT_EQ(resolve_pattern(bare).params, entry->defaults(kDefaultTokensPerFrame));
    EXPECT_EQ(resolve_pattern(bare, &video).params, entry->defaults(frames.frame_tokens()));
    // The listed default spec is a spec of the entry, with known parameters only.
    const PatternSpec listed = PatternSpec::parse(entry->info.default_spec);
    EXPECT_EQ(listed.name, entry->info.name);
    EXPECT_NO_THROW((void)resolve_pattern(listed));
    EXPECT_EQ(is_dynamic(bare), entry->info.dynamic);
    EXPECT_TRUE(entry->passes == 1 ? entry->build != nullptr : entry->build_passes != nullptr);
  }
}

TEST(MethodRegistry, LengthScaledParametersAreParametersOfTheirPattern) {
  for (const PatternInfo& info : known_patterns()) {
    const PatternSpec resolved = resolve_pattern(PatternSpec{info.name, {}});
    for (const LengthScaledParam& param : info.length_scaled) {
      SCOPED_TRACE(info.name + " " + param.key);
      EXPECT_EQ(resolved.params.count(param.key), 1u);
      if (!param.minimum_param.empty()) EXPECT_EQ(resolved.params.count(param.minimum_param), 1u);
    }
  }
}

// build_plan builds a static head once per spec and copies it into later head slots
// (detail::StaticHeads): the plan must equal one built head slot by head slot
// (append_pattern_head), field for field, for every static pattern of one pass, BlindSight's
// templates in place and through key orders (causal and bidirectional) included, mixed across the
// heads of a batch of two, with two specs of one pattern sharing a key order.
TEST(MethodRegistry, StaticHeadsBuiltOnceEqualHeadsBuiltPerSlot) {
  const ModalityLayout layout = LayoutBuilder()
                                    .text(37)
                                    .image({1, 6, 10})
                                    .text(5)
                                    .image({1, 4, 7}, false)
                                    .image({1, 8, 8})
                                    .text(21)
                                    .video({3, 4, 6}, 2)
                                    .text(9)
                                    .build();
  std::vector<PatternSpec> specs;
  for (const detail::PatternEntry* entry : detail::pattern_entries()) {
    if (entry->info.dynamic || entry->passes != 1) continue;
    specs.push_back(resolve_pattern(PatternSpec::parse(entry->info.default_spec), &layout));
  }
  for (const char* text : {"blindsight-sink:permute=0", "blindsight-intra:permute=1",
                           "blindsight-intra-sink:bidirectional=1",
                           "blindsight-sink:bidirectional=1,permute=0,sinks=[1/3]",
                           "blindsight-dense:bidirectional=1"}) {
    specs.push_back(resolve_pattern(PatternSpec::parse(text), &layout));
  }
  const auto count = static_cast<int64_t>(specs.size());
  const int64_t heads = 2 * count;
  for (const int64_t tile_rows : {int64_t{16}, int64_t{64}}) {
    SCOPED_TRACE("tile_rows " + std::to_string(tile_rows));
    const PlanShape shape{.batch = 2, .heads = heads, .q_len = layout.length() - 11,
                          .kv_len = layout.length(), .tile_rows = tile_rows};
    // Each spec on two heads, the second pass over the specs shifted by one, so that a spec's
    // copies follow other specs' heads.
    std::vector<PatternSpec> per_head;
    for (int64_t h = 0; h < heads; ++h) {
      per_head.push_back(specs[static_cast<std::size_t>(h % 2 == 0 ? h / 2 : (h / 2 + 1) % count)]);
    }
    const Plan cached = build_plan(per_head, shape, &layout);
    PlanBuilder builder(shape);
    for (int64_t slot = 0; slot < shape.head_slots(); ++slot) {
      append_pattern_head(builder, per_head[static_cast<std::size_t>(slot % heads)], shape,
                          &layout, nullptr, slot);
    }
    const Plan rebuilt = builder.finish();
    EXPECT_EQ(cached.masks, rebuilt.masks);
    EXPECT_EQ(cached.head_run_offsets, rebuilt.head_run_offsets);
    EXPECT_EQ(cached.runs, rebuilt.runs);
    EXPECT_EQ(cached.head_tile_offsets, rebuilt.head_tile_offsets);
    EXPECT_EQ(cached.tiles, rebuilt.tiles);
    EXPECT_EQ(cached.tile_masks, rebuilt.tile_masks);
    EXPECT_EQ(cached.tile_span_offsets, rebuilt.tile_span_offsets);
    EXPECT_EQ(cached.spans, rebuilt.spans);
    EXPECT_EQ(cached.tile_strided_offsets, rebuilt.tile_strided_offsets);
    EXPECT_EQ(cached.strided_spans, rebuilt.strided_spans);
    EXPECT_EQ(cached.tile_column_offsets, rebuilt.tile_column_offsets);
    EXPECT_EQ(cached.columns, rebuilt.columns);
    EXPECT_EQ(cached.key_orders, rebuilt.key_orders);
    EXPECT_EQ(cached.tile_key_orders, rebuilt.tile_key_orders);
    EXPECT_EQ(cached.token_modality, rebuilt.token_modality);
    EXPECT_EQ(cached.token_media, rebuilt.token_media);
    EXPECT_FALSE(cached.key_orders.empty());
    EXPECT_FALSE(cached.token_media.empty());
    EXPECT_FALSE(cached.runs.empty());
  }
}

#if MMSPARSE_TEST_WITH_CUDA
// Each device file's RegisteredDeviceBuilder attached its builder to its entries during static
// initialisation, and the link kept those objects although this test references none of their
// symbols (mmsparse::cuda links the mmsparse_cuda library whole).
TEST(MethodRegistry, CudaBuildsAttachTheMethodsDeviceBuilders) {
  for (detail::StaticPattern pattern : detail::kStaticPatterns) {
    const detail::DeviceBuilder* builder = detail::static_pattern_entry(pattern).device;
    ASSERT_NE(builder, nullptr) << detail::static_pattern_entry(pattern).info.name;
    EXPECT_FALSE(builder->estimates());
    EXPECT_TRUE(builder->replicates_one_head());
  }
  for (const detail::PatternEntry* entry :
       {&detail::vertical_slash_entry(), &detail::grid_entry(), &detail::vec_entry()}) {
    ASSERT_NE(entry->device, nullptr) << entry->info.name;
    EXPECT_TRUE(entry->device->estimates());
    EXPECT_FALSE(entry->device->replicates_one_head());
  }
  for (detail::BlindSightMask mask : detail::kBlindSightMasks) {
    const detail::DeviceBuilder* builder = detail::blindsight_entry(mask).device;
    ASSERT_NE(builder, nullptr) << detail::blindsight_entry(mask).info.name;
    EXPECT_FALSE(builder->estimates());
    EXPECT_TRUE(builder->replicates_one_head());
  }
  EXPECT_EQ(detail::grid_mask_entry().device, nullptr);  // built on the host only
}

// Heads go to their entry's builder; estimating builders only with device q and k at hand.
TEST(MethodRegistry, CudaBuildsRouteHeadsToTheirBuilders) {
  const PlanShape shape{1, 4, 512, 512, 64};
  const auto route = [&](const std::string& text, bool device_inputs) {
    return detail::device_builder_for(resolve_pattern(PatternSpec::parse(text)), shape, nullptr,
                                      device_inputs);
  };
  const detail::DeviceBuilder* dense =
      detail::static_pattern_entry(detail::StaticPattern::kDense).device;
  EXPECT_EQ(route("dense", false), dense);
  EXPECT_EQ(route("a-shape", true), dense);  // one builder serves every static pattern
  EXPECT_EQ(route("vertical-slash", false), nullptr);
  EXPECT_EQ(route("vertical-slash", true), detail::vertical_slash_entry().device);
  EXPECT_EQ(route("grid", false), nullptr);
  EXPECT_EQ(route("grid", true), detail::grid_entry().device);
  EXPECT_EQ(route("grid-mask", true), nullptr);
  EXPECT_EQ(route("vec", false), nullptr);
  EXPECT_EQ(route("vec", true), detail::vec_entry().device);
  EXPECT_EQ(route("vec:pooling=128", true), nullptr);  // blocks taller than the shape's tiles
  EXPECT_EQ(route("blindsight-intra-sink", false),
            detail::blindsight_entry(detail::BlindSightMask::kIntraSink).device);
}
#else
TEST(MethodRegistry, CpuOnlyBuildsHaveNoDeviceBuilders) {
  for (const detail::PatternEntry* entry : detail::pattern_entries()) {
    EXPECT_EQ(entry->device, nullptr) << entry->info.name;
  }
}
#endif

}  // namespace
}  // namespace mmsparse
