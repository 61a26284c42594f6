#pragma once
// BlindSight's key orders (docs/blindsight.md, "Permuted keys"; the paper's App. L, Fig. 18): the
// physical layout of K and V through which an image tile of a causal sparse template reads its
// keys as a few spans and no gathered columns (Plan::key_orders).
//
// An order has two kinds of regions. The shared region holds, from slot 0 and in original order,
// the keys every image query may read: text, and for templates with sinks every image's sinks.
// Then, each from a fresh 128-key boundary (kGatherChunkKeys), one region per image with the keys
// only its own queries read (intra: all its tokens; intra+sink: those that are not sinks), placed
// so that a key's slot is its offset inside the image modulo 128 at the region's first key
// (padding before it). One order per template family and layout: the sink template reads the
// shared region of the intra+sink order, so that a layer mixing sink, intra and intra+sink heads
// copies K and V into two orders, not three. An image tile with rows at aligned positions
// [first, last] then reads a prefix of the shared region (keys <= last) and a prefix of its
// image's region (keys <= last): in both, original positions ascend, so each prefix is one span
// wherever its last consecutive run starts at or before `first` + 1, so that the keys before it,
// which the kernels position through one shift per span (Plan::key_orders), stay visible to every
// row (always for the Qwen-style sinks, a prefix of each image; Gemma-style sink lists inside the
// tile's rows split it).
//
// A bidirectional (Gemma 3) image tile reads the same order: its keys are those of a causal tile
// at the image's last token (the image's sinks after the tile's rows lie in the shared region
// right after the keys before them, except across text inside a video), every one visible to
// every row, so the tile is unmasked and its spans are plain slot ranges.
//
// The engines cut a span into 128-key chunks from its begin. A span that reaches the tile's rows
// is split where that costs no chunk, so that one chunk starts at the tile's first row and the
// diagonal lies in one chunk as in dense's plans, instead of straddling two.

#include <cstdint>
#include <vector>

#include "methods/blindsight/blindsight.h"

namespace mmsparse::detail {

// Keys [key, key + length) at physical slots [slot, slot + length).
struct OrderedRun {
  int64_t slot = 0;
  int64_t key = 0;
  int64_t length = 0;
};

struct BlindSightKeyOrder {
  std::vector<int32_t> slots;        // [physical slots] original key, or kPaddingKey
  std::vector<OrderedRun> shared;    // the shared region's runs, ascending
  std::vector<int64_t> own_offsets;  // [images + 1] into own
  std::vector<OrderedRun> own;       // per image, its region's runs, ascending
};

// A span over physical slots [begin, end).
struct SlotSpan {
  int64_t begin = 0;
  int64_t end = 0;
  bool operator==(const SlotSpan&) const = default;
};

// The order of a sparse template's family (`mask` is not kDense) over `images` (read_layout for
// that mask): sink and intra+sink give the same order.
BlindSightKeyOrder blindsight_key_order(const ImageLayout& images, BlindSightMask mask);

// The spans through `order` (the family's of `mask`) of a causal tile of image `image` whose rows
// lie at aligned positions [first, last]: the shared keys and, for intra templates, the image's
// own keys at or before `last`, each span
// satisfying the key-order rule of Plan::key_orders (its last consecutive run starts at or before
// `first` + 1). Empty when no key is at or before `last`.
std::vector<SlotSpan> permuted_tile_spans(const BlindSightKeyOrder& order, BlindSightMask mask,
                                          int32_t image, int64_t first, int64_t last);

// The spans through `order` (the family's of `mask`) of a bidirectional tile of image `image`
// (`images` read for `mask`) whose last row lies at aligned position `last`: the shared keys at or
// before `last`, the image's sinks after it (sink templates) and, for intra templates, all of the
// image's own keys, adjacent slots merged. Every such key is visible to every row of the tile
// (text and sinks before the image, the image itself bidirectionally), so the tile takes the
// unmasked policy and its spans need not ascend in original positions (Plan::key_orders).
std::vector<SlotSpan> bidirectional_tile_spans(const BlindSightKeyOrder& order,
                                               const ImageLayout& images, BlindSightMask mask,
                                               int32_t image, int64_t last);

}  // namespace mmsparse::detail
