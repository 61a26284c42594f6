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
// Plans: query tiles never mix text with image rows nor two images (a tile has one key set);
// contiguous key runs of at least kGatherChunkKeys are spans and shorter ones (sinks, the text
// between images) gathered columns, which the engines pack into full key chunks: the paper's
// sink packing by key permutation (App. L) without moving memory.

#include "methods/registry.h"

namespace mmsparse::detail {

// The four templates, in the order known_patterns() lists them.
enum class BlindSightMask : int32_t { kDense, kSink, kIntra, kIntraSink };
inline constexpr BlindSightMask kBlindSightMasks[] = {BlindSightMask::kDense, BlindSightMask::kSink,
                                                      BlindSightMask::kIntra,
                                                      BlindSightMask::kIntraSink};

PatternEntry& blindsight_entry(BlindSightMask mask);

}  // namespace mmsparse::detail
