#pragma once
// A SYNTHETIC multi-image model that plants BlindSight's structure (docs/blindsight.md), for the
// characterisation and aggregation to recover: every head of every layer has a planted type
// (dense, sink, intra-image, intra-image+sink) in proportions like the paper's Fig. 3 (about 60% of
// the layers sparse, a few dense heads among them), and every prompt is a random multi-image
// layout whose Q, K, V make each head attend as its type says:
//   sink keys      carry one direction that sink and intra+sink heads' image queries read;
//   image keys     carry their image's own direction, which intra and intra+sink heads' queries
//                  of that image read (intra+sink balanced so that own image and the other
//                  images' sinks each hold about half the mass);
//   dense heads    read an earlier image's interior, which no sparse template keeps;
//   text queries   spread over every key (all templates keep their rows whole).
// On a share of the prompts (flip_rate) a head reads densely instead: the prompt-to-prompt
// variation Alg. 2 aggregates over. Two styles: Qwen (images of varied sizes, causal, sinks the
// first 10% of each image) and Gemma 3 (images of one size, bidirectional inside images, sinks at
// fixed interior offsets). Nothing here is a real model's tensors; every figure quoted on it says
// SYNTHETIC.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "mmsparse/layout.h"
#include "mmsparse/tensor.h"
#include "mmsparse/tools/characterise.h"

namespace mmsparse {

enum class BlindSightStyle : uint8_t { kQwen, kGemma3 };

struct BlindSightModelSpec {
  BlindSightStyle style = BlindSightStyle::kQwen;
  int64_t layers = 6;
  int64_t heads = 4;  // query heads, each with its own KV head
  int64_t head_dim = 64;
  uint64_t seed = 0;        // the model: planted types and Gemma 3 sink offsets
  double flip_rate = 0.05;  // share of (prompt, layer, head) that read densely on that prompt
};

struct BlindSightPresetInfo {
  std::string name;  // "blindsight-qwen", "blindsight-gemma3"
  std::string description;
  BlindSightStyle style;
};
const std::vector<BlindSightPresetInfo>& blindsight_presets();
// The preset's style; throws Error(kInvalidArgument) naming `argument` and the presets.
BlindSightStyle blindsight_preset_style(std::string_view name, const std::string& argument);

class BlindSightModel {
 public:
  explicit BlindSightModel(const BlindSightModelSpec& spec);  // throws naming bad sizes

  const BlindSightModelSpec& spec() const { return spec_; }
  HeadType planted(int64_t layer, int64_t head) const;
  // The templates' parameters this model's images need (Gemma 3: its planted sink offsets).
  const ImageStyle& image_style() const { return style_; }

  // Prompt `prompt`'s layout: text, 3 to 7 images with markers, text of 0 to 12 tokens between
  // them, a question; a few hundred to about 1,500 tokens.
  ModalityLayout prompt_layout(uint64_t prompt) const;

  struct LayerTensors {
    Tensor q, k, v;  // [1, seq, heads, head_dim] fp32
  };
  // The layer's tensors on prompt `prompt` (whose layout is prompt_layout(prompt)).
  LayerTensors layer(uint64_t prompt, int64_t layer) const;

 private:
  BlindSightModelSpec spec_;
  ImageStyle style_;
  std::vector<HeadType> planted_;  // [layers × heads]
};

}  // namespace mmsparse
