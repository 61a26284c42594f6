#pragma once
// BlindSight's template masks for multi-image prompts (docs/blindsight.md): static patterns whose
// plans follow from the modality layout alone. Every media item (image, or a whole video) is one
// "image". A text query attends to every earlier token (the model's dense mask); an image query of
// image g attends, within the model's dense mask, to the keys its head type allows:
//   blindsight-dense       every key (the model's own mask: Gemma 3 needs it, dense does not
//                          lift images to bidirectional)
//   blindsight-sink        text keys and every image's sink keys
//   blindsight-intra       text keys and image g's keys
//   blindsight-intra-sink  text keys, every image's sink keys and image g's keys
// The model's dense mask is causal, and with bidirectional=1 also keeps every pair inside one image
// (Gemma 3). Sinks: the first ceil(sink_percent% of its tokens) of each image (Qwen), or, when the
// list `sinks` is given, the tokens at those offsets inside each image (Gemma 3, App. C).
//
// Plans: query tiles never mix text with image rows nor two images (a tile has one key set). The
// query order puts every image row first and every text row after them, both ascending, so that
// text rows, a few dozen between images, fill whole tiles instead of one short tile per gap (each
// reads every key before it). Sparse templates read an image tile's keys through a key order
// (permutes_keys, blindsight_order.h: the paper's permutation of K and V, App. L, Fig. 18) as a
// few spans, bidirectional ones unmasked; with permute=0, in place: contiguous key runs of at
// least kGatherChunkKeys are spans and shorter ones (sinks, the text between images) gathered
// columns, which the engines pack into full key chunks (the packing without moving memory).

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "methods/registry.h"
#include "mmsparse/layout.h"
#include "mmsparse/plan.h"

namespace mmsparse::detail {

// The four templates, in the order known_patterns() lists them.
enum class BlindSightMask : int32_t { kDense, kSink, kIntra, kIntraSink };
inline constexpr BlindSightMask kBlindSightMasks[] = {BlindSightMask::kDense, BlindSightMask::kSink,
                                                      BlindSightMask::kIntra,
                                                      BlindSightMask::kIntraSink};

PatternEntry& blindsight_entry(BlindSightMask mask);

// The template a resolved spec of one of the four entries names.
BlindSightMask blindsight_mask_of(const PatternSpec& resolved_spec);
inline bool uses_sinks(BlindSightMask mask) {
  return mask == BlindSightMask::kSink || mask == BlindSightMask::kIntraSink;
}
inline bool uses_intra(BlindSightMask mask) {
  return mask == BlindSightMask::kIntra || mask == BlindSightMask::kIntraSink;
}

struct KeyRange {
  int64_t begin = 0;
  int64_t end = 0;
};

// The layout as the templates read it (the host builder and the device builder's geometry,
// blindsight_geometry.h).
struct ImageLayout {
  std::vector<int32_t> token_media;             // [kv_len] media index, -1 for text
  std::vector<std::vector<KeyRange>> segments;  // per image: its token ranges, ascending
  std::vector<std::vector<KeyRange>> sinks;     // per image: its sink keys as ranges, ascending
  // Runs of the keys every image query may read: text, and every image's sinks for masks with
  // sinks. Ascending, disjoint.
  std::vector<KeyRange> shared;
};

// The templates' key-order switch and its values: the default (a key order where the template
// reads one), in place, a key order.
inline const std::string kPermuteParam = "permute";
inline constexpr int64_t kPermuteDefault = -1;
inline constexpr int64_t kKeepInPlace = 0;
inline constexpr int64_t kPermuteAlways = 1;

// Whether a head of `resolved_spec` over `layout` reads its image tiles' keys through a key order
// (blindsight_order.h) rather than in place: a sparse template over a layout with images
// and permute not 0 (-1, the default, or 1). Causal image tiles then read their keys under the
// causal mask; bidirectional ones read only keys every row of the tile sees (earlier text and
// sinks, the image's own keys), unmasked. permute=0 keeps every tile in place.
bool permutes_keys(const PatternSpec& resolved_spec, const ModalityLayout* layout);

// What build_plan checks of a BlindSight head before building it: the layout's length (kv_len),
// q_len <= kv_len, the bidirectional switch and, for templates with sinks, the sink parameters.
// Returns the bidirectional switch.
bool check_blindsight_head(const PatternSpec& resolved_spec, const HeadContext& context);
// The query order of a sparse template's head slot: the rows whose aligned token (row +
// causal_offset) is an image's, ascending, then the text rows, ascending, as maximal runs of step
// 1; empty where that is the identity order. `token_media`: [kv_len] media index, -1 for text.
std::vector<QueryRun> images_then_text_order(std::span<const int32_t> token_media,
                                             const PlanShape& shape);
// Reads the layout; throws naming the sink list when an offset lies outside an image.
ImageLayout read_layout(const ModalityLayout& layout, const PatternSpec& resolved_spec,
                        BlindSightMask mask);

}  // namespace mmsparse::detail
