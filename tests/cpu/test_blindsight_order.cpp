// BlindSight's key orders and the spans of its permuted image tiles
// (src/methods/blindsight/blindsight_order.h) on random layouts (odd sizes, adjacent images,
// videos split by timestamps, one image, a hundred images, both sink styles), for every tile of
// every row range an image tile may have: each order maps every key once at most, the shared keys
// first and every image's own keys from a 128-key boundary at their offset inside the image; a
// tile's spans read exactly the keys its template allows at or before its last row, never padding,
// obey the key-order rule, and are few (two per region for Qwen-style sinks) with the diagonal in
// one chunk where a tile of 128 rows allows it.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "common/blindsight_cases.h"
#include "common/random.h"
#include "core/engine_chunks.h"
#include "methods/blindsight/blindsight.h"
#include "methods/blindsight/blindsight_order.h"
#include "mmsparse/patterns.h"
#include "mmsparse/plan.h"

namespace mmsparse {
namespace {

using detail::BlindSightKeyOrder;
using detail::BlindSightMask;
using detail::ImageLayout;
using detail::SlotSpan;
using test::BlindSightLayoutCase;
using test::Random;

constexpr std::array<BlindSightMask, 3> kSparseMasks = {
    BlindSightMask::kSink, BlindSightMask::kIntra, BlindSightMask::kIntraSink};
constexpr std::array<const char*, 3> kSparseNames = {"blindsight-sink", "blindsight-intra",
                                                     "blindsight-intra-sink"};

// Whether an image query of `image` may read `key` (causality aside), from per-token facts.
bool allowed(const ImageLayout& images, const std::vector<uint8_t>& sink, BlindSightMask mask,
             int32_t image, int64_t key) {
  const int32_t media = images.token_media[key];
  if (media < 0) return true;
  if (detail::uses_sinks(mask) && sink[key] != 0) return true;
  return detail::uses_intra(mask) && media == image;
}

std::vector<uint8_t> sink_flags(const ImageLayout& images) {
  std::vector<uint8_t> sink(images.token_media.size(), 0);
  for (const std::vector<detail::KeyRange>& ranges : images.sinks) {
    for (const detail::KeyRange& range : ranges) {
      for (int64_t key = range.begin; key < range.end; ++key) sink[key] = 1;
    }
  }
  return sink;
}

// The order maps keys once, the shared keys (text and sinks) in order from slot 0, then each
// image's own keys (intra: its tokens; sink and intra+sink, one family: its non-sinks) ascending,
// the first at slot ≡ its offset in the image (mod 128) after a 128-key boundary past the
// previous region.
void expect_order_layout(const ImageLayout& images, const std::vector<uint8_t>& sink,
                         BlindSightMask mask, const BlindSightKeyOrder& order) {
  const auto kv_len = static_cast<int64_t>(images.token_media.size());
  std::vector<int32_t> seen(kv_len, 0);
  for (const int32_t key : order.slots) {
    if (key == kPaddingKey) continue;
    ASSERT_GE(key, 0);
    ASSERT_LT(key, kv_len);
    ASSERT_EQ(seen[key]++, 0) << "key " << key << " mapped twice";
  }
  int64_t slot = 0;
  for (int64_t key = 0; key < kv_len; ++key) {
    if (images.token_media[key] >= 0 && !(detail::uses_sinks(mask) && sink[key] != 0)) continue;
    ASSERT_EQ(order.slots[slot++], key) << "the shared region holds every shared key in order";
  }
  for (std::size_t image = 0; image < images.segments.size(); ++image) {
    std::vector<int64_t> own;
    int64_t offset = 0, first_offset = -1;
    for (const detail::KeyRange& segment : images.segments[image]) {
      for (int64_t key = segment.begin; key < segment.end; ++key, ++offset) {
        // The sink template shares the intra+sink order: every image's non-sinks.
        if (detail::uses_sinks(mask) && sink[key] != 0) continue;
        if (first_offset < 0) first_offset = offset;
        own.push_back(key);
      }
    }
    if (own.empty()) continue;
    const int64_t previous_end = slot;
    const int64_t base = (slot + kGatherChunkKeys - 1) / kGatherChunkKeys * kGatherChunkKeys;
    slot = base + first_offset % kGatherChunkKeys;
    for (int64_t k = previous_end; k < slot; ++k) {
      ASSERT_EQ(order.slots[k], kPaddingKey) << "padding before image " << image;
    }
    for (const int64_t key : own) ASSERT_EQ(order.slots[slot++], key) << "image " << image;
  }
  EXPECT_EQ(static_cast<int64_t>(order.slots.size()), slot);
}

int64_t chunks_holding_keys_from(const BlindSightKeyOrder& order, const SlotSpan& span,
                                 int64_t first) {
  int64_t chunks = 0;
  for (int64_t begin = span.begin; begin < span.end; begin += kGatherChunkKeys) {
    const int64_t end = std::min(span.end, begin + kGatherChunkKeys);
    chunks += order.slots[end - 1] >= first ? 1 : 0;
  }
  return chunks;
}

// One tile: its keys are exactly the allowed keys at or before `last`; each span covers no
// padding, has ascending keys and obeys the rule; spans are few; the diagonal in one chunk.
void expect_tile(const ImageLayout& images, const std::vector<uint8_t>& sink, BlindSightMask mask,
                 bool listed_sinks, const BlindSightKeyOrder& order, int32_t image, int64_t first,
                 int64_t last) {
  SCOPED_TRACE("image " + std::to_string(image) + " rows at " + std::to_string(first) + ".." +
               std::to_string(last));
  const std::vector<SlotSpan> spans = detail::permuted_tile_spans(order, mask, image, first, last);
  std::set<int64_t> read;
  int64_t own_spans = 0;
  for (const SlotSpan& span : spans) {
    ASSERT_LT(span.begin, span.end);
    int64_t run_start = span.end - 1;  // the span's last consecutive run starts here
    while (run_start > span.begin && order.slots[run_start - 1] + 1 == order.slots[run_start]) {
      --run_start;
    }
    // The kernels position slot p at p + shift, the shift anchored at the span's last slot: at
    // or above the key's position, and before the last run at or before every row.
    const int64_t shift = order.slots[span.end - 1] - (span.end - 1);
    for (int64_t slot = span.begin; slot < span.end; ++slot) {
      const int32_t key = order.slots[slot];
      ASSERT_NE(key, kPaddingKey) << "slot " << slot;
      if (slot > span.begin) ASSERT_GT(key, order.slots[slot - 1]) << "slot " << slot;
      ASSERT_GE(slot + shift, key) << "slot " << slot;
      if (slot < run_start) ASSERT_LE(slot + shift, first) << "key-order rule, slot " << slot;
      read.insert(key);
    }
    own_spans += images.token_media[order.slots[span.begin]] == image &&
                         !(detail::uses_sinks(mask) && sink[order.slots[span.begin]] != 0)
                     ? 1
                     : 0;
    // A span holding 128 keys from `first` on (a tile of 128 rows over its own image) holds
    // them in one chunk, as dense's diagonal.
    int64_t from_first = 0;
    for (int64_t slot = span.begin; slot < span.end; ++slot) {
      from_first += order.slots[slot] >= first ? 1 : 0;
    }
    if (from_first == kGatherChunkKeys) {
      EXPECT_EQ(chunks_holding_keys_from(order, span, first), 1);
    }
  }
  std::set<int64_t> expected;
  for (int64_t key = 0; key <= last; ++key) {
    if (allowed(images, sink, mask, image, key)) expected.insert(key);
  }
  EXPECT_EQ(read, expected);
  if (!listed_sinks) {
    EXPECT_LE(static_cast<int64_t>(spans.size()) - own_spans, 2) << "shared region";
    EXPECT_LE(own_spans, 2) << "own region";
  }
}

// Every tile of `tile_rows` from each image segment's first row (and from a row inside it, as
// where q_len < kv_len cuts an image).
void check_layout(Random& random, const BlindSightLayoutCase& test_case, int64_t tile_rows) {
  for (std::size_t m = 0; m < kSparseMasks.size(); ++m) {
    const PatternSpec spec = resolve_pattern(
        test::blindsight_spec(random, test_case, kSparseNames[m]), &test_case.layout);
    SCOPED_TRACE(spec.to_string() + " tile_rows " + std::to_string(tile_rows) + " layout " +
                 test_case.layout.to_json());
    const ImageLayout images = detail::read_layout(test_case.layout, spec, kSparseMasks[m]);
    const std::vector<uint8_t> sink = sink_flags(images);
    const BlindSightKeyOrder order = detail::blindsight_key_order(images, kSparseMasks[m]);
    expect_order_layout(images, sink, kSparseMasks[m], order);
    for (std::size_t image = 0; image < images.segments.size(); ++image) {
      for (const detail::KeyRange& segment : images.segments[image]) {
        const int64_t cut = random.uniform_int(segment.begin, segment.end - 1);
        for (const int64_t start : {segment.begin, cut}) {
          for (int64_t first = start; first < segment.end; first += tile_rows) {
            expect_tile(images, sink, kSparseMasks[m], !test_case.sink_offsets.empty(), order,
                        static_cast<int32_t>(image), first,
                        std::min(segment.end, first + tile_rows) - 1);
          }
        }
      }
    }
  }
}

TEST(BlindSightKeyOrder, TilesReadTheirKeysAsFewSpans) {
  Random random;
  SCOPED_TRACE(random.trace());
  constexpr int kTrials = 20;
  for (int trial = 0; trial < kTrials; ++trial) {
    const bool large = random.bernoulli(0.4);  // images past a key chunk: several tiles each
    BlindSightLayoutCase test_case = test::random_blindsight_case(
        random, random.uniform_int(1, 6), large ? 40 : 12, large ? 300 : 30);
    test_case.bidirectional = false;
    check_layout(random, test_case, large ? kGatherChunkKeys : 8 << random.uniform_int(0, 4));
  }
  BlindSightLayoutCase hundred = test::random_blindsight_case(random, 100, 3, 9);
  hundred.bidirectional = false;
  check_layout(random, hundred, 64);
  BlindSightLayoutCase one;
  one.layout = LayoutBuilder().image({1, 37, 29}, false).build();  // no text at all
  check_layout(random, one, kGatherChunkKeys);
}

// A layout whose numbers can be followed by hand: text, then images of 1600 tokens (160 sinks
// at 10%): the sink template reads one span, intra a text span and its image's span, intra+sink
// a shared span and its image's non-sink keys, split where the diagonal starts a chunk.
TEST(BlindSightKeyOrder, ImagesOfSixteenHundredTokens) {
  const ModalityLayout layout =
      LayoutBuilder().text(40).image({1, 40, 40}, false).image({1, 40, 40}, false).build();
  const auto spans_of = [&](BlindSightMask mask, const char* name, int64_t first) {
    const PatternSpec spec = resolve_pattern(PatternSpec::parse(name), &layout);
    const ImageLayout images = detail::read_layout(layout, spec, mask);
    return detail::permuted_tile_spans(detail::blindsight_key_order(images, mask), mask, 1, first,
                                       first + kGatherChunkKeys - 1);
  };
  // The second image starts at 1640; its tile of rows 1640 + 256 onwards.
  const int64_t first = 1640 + 2 * kGatherChunkKeys;
  // Shared: 40 text keys, 160 sinks of image 0, 160 of image 1: one span of 360 keys.
  EXPECT_EQ(spans_of(BlindSightMask::kSink, "blindsight-sink", first),
            (std::vector<SlotSpan>{{0, 360}}));
  // Text [0, 40) padded to 128; image 0 at [128, 1728), padded to 1792; image 1 from 1792, its
  // keys up to first + 127 (offset 383): [1792, 2176).
  EXPECT_EQ(spans_of(BlindSightMask::kIntra, "blindsight-intra", first),
            (std::vector<SlotSpan>{{0, 40}, {1792, 2176}}));
  // Shared [0, 360) padded to 384; image 0's 1440 non-sinks at 384 + 32 = 416 (offset 160 ≡ 32);
  // image 1's from align(1856) + 32 = 1920 + 32 = 1952, offsets 160..383 at [1952, 2176): split
  // at offset 256 (slot 2048), so that the rows' diagonal is one chunk.
  EXPECT_EQ(spans_of(BlindSightMask::kIntraSink, "blindsight-intra-sink", first),
            (std::vector<SlotSpan>{{0, 360}, {1952, 2048}, {2048, 2176}}));
}

}  // namespace
}  // namespace mmsparse
