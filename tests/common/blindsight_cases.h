#pragma once
// Random BlindSight cases for the tests of its device builder (CPU geometry and GPU records):
// multi-image layouts with odd image sizes, adjacent images (no markers, no text between), videos
// whose frames are split by timestamps, optional leading text, one image or a hundred; sinks of the
// Qwen style (sink_percent) or the Gemma 3 style (a list of offsets, images of one size); causal or
// bidirectional; keys in place or through a key order.

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "common/random.h"
#include "mmsparse/layout.h"
#include "mmsparse/patterns.h"

namespace mmsparse::test {

inline constexpr std::array<const char*, 4> kBlindSightTemplates = {
    "blindsight-dense", "blindsight-sink", "blindsight-intra", "blindsight-intra-sink"};

struct BlindSightLayoutCase {
  ModalityLayout layout;
  std::vector<int64_t> sink_offsets;  // Gemma 3 style when not empty
  bool bidirectional = false;
};

// `images` images of sides up to max_side; text runs up to max_text tokens.
inline BlindSightLayoutCase random_blindsight_case(Random& random, int64_t images, int64_t max_side,
                                                   int64_t max_text) {
  BlindSightLayoutCase result;
  const bool fixed = random.bernoulli(0.5);
  const Grid fixed_grid{1, random.uniform_int(1, max_side), random.uniform_int(2, max_side)};
  LayoutBuilder builder;
  if (random.bernoulli(0.7)) builder.text(random.uniform_int(1, max_text));
  for (int64_t i = 0; i < images; ++i) {
    const Grid grid =
        fixed ? fixed_grid
              : Grid{1, random.uniform_int(1, max_side), random.uniform_int(1, max_side)};
    if (!fixed && random.bernoulli(0.1)) {
      builder.video({2, grid.h, grid.w}, random.uniform_int(0, 3));
    } else {
      builder.image(grid, random.bernoulli(0.6));  // no markers: adjacent images
    }
    if (random.bernoulli(0.5)) builder.text(random.uniform_int(1, max_text));
  }
  if (random.bernoulli(0.8)) builder.text(random.uniform_int(1, max_text));
  result.layout = builder.build();
  if (fixed) {
    for (int64_t offset = 0; offset < fixed_grid.tokens(); ++offset) {
      if (random.bernoulli(0.1)) result.sink_offsets.push_back(offset);
    }
  }
  result.bidirectional = random.bernoulli(0.5);
  return result;
}

// Where a sparse template's spec has its image tiles read keys: a random value of `permute` (-1
// or 1: through a key order, unmasked for bidirectional tiles; 0: in place), or in place
// (permute=0, the plans the device builder writes).
enum class KeyPlacement { kRandom, kInPlace };

// A spec of template `name` for the case: its style's switch, the key placement and, for sink
// templates, a random sink_percent and the case's sink list.
inline PatternSpec blindsight_spec(Random& random, const BlindSightLayoutCase& test_case,
                                   const std::string& name,
                                   KeyPlacement placement = KeyPlacement::kRandom) {
  PatternSpec spec{name, {{"bidirectional", test_case.bidirectional ? 1 : 0}}};
  if (name == "blindsight-sink" || name == "blindsight-intra-sink") {
    spec.params["sink_percent"] = random.uniform_int(1, 30);
    spec.lists["sinks"] = test_case.sink_offsets;
  }
  if (name != "blindsight-dense") {
    spec.params["permute"] = placement == KeyPlacement::kInPlace ? 0 : random.uniform_int(-1, 1);
  }
  return spec;
}

}  // namespace mmsparse::test
