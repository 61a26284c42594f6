// The SYNTHETIC multi-image model that plants BlindSight's head types (blindsight_workload.h).

#include "mmsparse/tools/blindsight_workload.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "mmsparse/status.h"

namespace mmsparse {

namespace {

// Share of layers whose heads are mostly sparse (Fig. 3: about 60% for Qwen-type models), and in
// such a layer the shares of heads of its dominant type and of dense heads (the rest take another
// sparse type).
constexpr double kSparseLayerShare = 0.6;
constexpr double kDominantHeadShare = 0.7;
constexpr double kDenseHeadShareInSparseLayer = 0.15;
// Sparse layers' dominant types in turn: intra+sink most often, as in the paper's Qwen models.
constexpr HeadType kSparseLayerTypes[] = {HeadType::kIntraSink, HeadType::kIntra,
                                          HeadType::kIntraSink, HeadType::kSink};

// Prompt layouts (scaled down from the paper's 1280..5120 tokens per Qwen image and Gemma 3's 256).
constexpr int64_t kMinImages = 3;
constexpr int64_t kMaxImages = 7;
constexpr int64_t kMinQwenSide = 4;
constexpr int64_t kMaxQwenSide = 12;
constexpr Grid kGemmaImage{1, 8, 8};
constexpr int64_t kMinLeadingText = 8;
constexpr int64_t kMaxLeadingText = 40;
constexpr int64_t kMaxTextBetweenImages = 12;
constexpr int64_t kMinQuestion = 8;
constexpr int64_t kMaxQuestion = 32;
constexpr int64_t kSinkPercent = 10;

// Logits (after the softmax scale) of a query's signal on the keys carrying it, and the noise of
// every component.
constexpr double kSignalLogit = 10.0;
constexpr double kNoise = 0.3;

uint64_t mix(uint64_t a, uint64_t b) {
  // splitmix64 of the pair: independent streams per (model, prompt, layer, head).
  uint64_t z = a * 0x9E3779B97F4A7C15ull + b + 0x632BE59BD9B4E019ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

using Vector = std::vector<double>;

// `count` unit vectors of `dim` dimensions, orthonormal while count <= dim (Gram-Schmidt), so
// that images' and sinks' directions do not leak into each other.
std::vector<Vector> directions(std::mt19937_64& rng, int64_t count, int64_t dim) {
  std::normal_distribution<double> normal;
  std::vector<Vector> result;
  for (int64_t i = 0; i < count; ++i) {
    Vector v(static_cast<std::size_t>(dim));
    for (double& x : v) x = normal(rng);
    if (i < dim) {
      for (const Vector& u : result) {
        const double dot = std::inner_product(v.begin(), v.end(), u.begin(), 0.0);
        for (int64_t d = 0; d < dim; ++d) v[d] -= dot * u[d];
      }
    }
    const double norm = std::sqrt(std::inner_product(v.begin(), v.end(), v.begin(), 0.0));
    for (double& x : v) x /= norm;
    result.push_back(std::move(v));
  }
  return result;
}

// Per-token facts of a layout: image index (-1 text), offset inside the image, the image's size,
// whether the token is one of its image's sinks.
struct Tokens {
  std::vector<int32_t> image;
  std::vector<int64_t> offset;
  std::vector<int64_t> image_size;
  std::vector<uint8_t> sink;
  std::vector<int64_t> sinks_before;  // sink tokens of earlier images than the token's
};

Tokens read_tokens(const ModalityLayout& layout, const ImageStyle& style) {
  Tokens tokens;
  tokens.image = layout.token_media();
  const std::size_t length = tokens.image.size();
  tokens.offset.assign(length, 0);
  tokens.sink.assign(length, 0);
  tokens.sinks_before.assign(length, 0);
  std::vector<int64_t> sizes(layout.media().size(), 0);
  for (std::size_t i = 0; i < length; ++i) {
    if (tokens.image[i] >= 0) tokens.offset[i] = sizes[tokens.image[i]]++;
  }
  tokens.image_size.assign(length, 0);
  int64_t sinks_seen = 0;
  int32_t current = -1;
  int64_t sinks_of_current = 0;
  for (std::size_t i = 0; i < length; ++i) {
    const int32_t image = tokens.image[i];
    if (image < 0) continue;
    if (image != current) {
      sinks_seen += sinks_of_current;
      current = image;
      sinks_of_current = 0;
    }
    const int64_t size = sizes[image];
    tokens.image_size[i] = size;
    const int64_t offset = tokens.offset[i];
    const bool sink =
        style.sink_offsets.empty()
            ? offset * 100 < size * style.sink_percent
            : std::binary_search(style.sink_offsets.begin(), style.sink_offsets.end(), offset);
    tokens.sink[i] = sink ? 1 : 0;
    sinks_of_current += sink ? 1 : 0;
    tokens.sinks_before[i] = sinks_seen;
  }
  return tokens;
}

}  // namespace

const std::vector<BlindSightPresetInfo>& blindsight_presets() {
  static const std::vector<BlindSightPresetInfo> presets = {
      {"blindsight-qwen",
       "SYNTHETIC BlindSight model, Qwen style: images of 16 to 144 tokens, causal, sinks the "
       "first 10% of each image",
       BlindSightStyle::kQwen},
      {"blindsight-gemma3",
       "SYNTHETIC BlindSight model, Gemma 3 style: 64-token images, bidirectional inside images, "
       "sinks at fixed interior offsets",
       BlindSightStyle::kGemma3},
  };
  return presets;
}

BlindSightStyle blindsight_preset_style(std::string_view name, const std::string& argument) {
  std::string names;
  for (const BlindSightPresetInfo& preset : blindsight_presets()) {
    if (preset.name == name) return preset.style;
    if (!names.empty()) names += ", ";
    names += preset.name;
  }
  throw_invalid_argument(argument, "one of " + names, std::string("'").append(name).append("'"));
}

BlindSightModel::BlindSightModel(const BlindSightModelSpec& spec) : spec_(spec) {
  if (spec.layers < 1) throw_invalid_argument("layers", ">= 1", std::to_string(spec.layers));
  if (spec.heads < 1) throw_invalid_argument("heads", ">= 1", std::to_string(spec.heads));
  if (spec.head_dim < 2) throw_invalid_argument("head_dim", ">= 2", std::to_string(spec.head_dim));
  if (!(spec.flip_rate >= 0.0 && spec.flip_rate <= 1.0)) {
    throw_invalid_argument("flip_rate", "0 to 1", std::to_string(spec.flip_rate));
  }
  std::mt19937_64 rng(mix(spec.seed, 0));
  std::uniform_real_distribution<double> uniform;
  if (spec.style == BlindSightStyle::kGemma3) {
    style_.bidirectional = true;
    // App. C: the top 10% sink offsets, here planted.
    std::vector<int64_t> offsets(static_cast<std::size_t>(kGemmaImage.tokens()));
    std::iota(offsets.begin(), offsets.end(), 0);
    std::shuffle(offsets.begin(), offsets.end(), rng);
    offsets.resize(static_cast<std::size_t>((kGemmaImage.tokens() * kSinkPercent + 99) / 100));
    std::sort(offsets.begin(), offsets.end());
    style_.sink_offsets = offsets;
  }
  style_.sink_percent = kSinkPercent;
  std::vector<int64_t> layer_order(static_cast<std::size_t>(spec.layers));
  std::iota(layer_order.begin(), layer_order.end(), 0);
  std::shuffle(layer_order.begin(), layer_order.end(), rng);
  const auto sparse_layers = static_cast<int64_t>(std::lround(kSparseLayerShare * spec.layers));
  planted_.assign(static_cast<std::size_t>(spec.layers * spec.heads), HeadType::kDense);
  for (int64_t rank = 0; rank < sparse_layers; ++rank) {
    const int64_t layer = layer_order[rank];
    const HeadType dominant = kSparseLayerTypes[rank % std::size(kSparseLayerTypes)];
    for (int64_t head = 0; head < spec.heads; ++head) {
      const double draw = uniform(rng);
      HeadType type = dominant;
      if (draw >= kDominantHeadShare + kDenseHeadShareInSparseLayer) {
        type = kSparseLayerTypes[(rank + 1) % std::size(kSparseLayerTypes)];
      } else if (draw >= kDominantHeadShare) {
        type = HeadType::kDense;
      }
      planted_[layer * spec.heads + head] = type;
    }
  }
}

HeadType BlindSightModel::planted(int64_t layer, int64_t head) const {
  if (layer < 0 || layer >= spec_.layers || head < 0 || head >= spec_.heads) {
    throw_invalid_argument(
        "layer, head",
        "layer < " + std::to_string(spec_.layers) + ", head < " + std::to_string(spec_.heads),
        std::to_string(layer) + ", " + std::to_string(head));
  }
  return planted_[layer * spec_.heads + head];
}

ModalityLayout BlindSightModel::prompt_layout(uint64_t prompt) const {
  std::mt19937_64 rng(mix(mix(spec_.seed, 1), prompt));
  const auto draw = [&](int64_t low, int64_t high) {
    return std::uniform_int_distribution<int64_t>(low, high)(rng);
  };
  LayoutBuilder builder;
  builder.text(draw(kMinLeadingText, kMaxLeadingText));
  const int64_t images = draw(kMinImages, kMaxImages);
  for (int64_t i = 0; i < images; ++i) {
    const Grid grid =
        spec_.style == BlindSightStyle::kGemma3
            ? kGemmaImage
            : Grid{1, draw(kMinQwenSide, kMaxQwenSide), draw(kMinQwenSide, kMaxQwenSide)};
    builder.image(grid);
    const int64_t text = draw(0, kMaxTextBetweenImages);
    if (text > 0 && i + 1 < images) builder.text(text);
  }
  builder.text(draw(kMinQuestion, kMaxQuestion));
  return builder.build();
}

BlindSightModel::LayerTensors BlindSightModel::layer(uint64_t prompt, int64_t layer) const {
  const ModalityLayout layout = prompt_layout(prompt);
  const Tokens tokens = read_tokens(layout, style_);
  const int64_t seq = layout.length();
  const int64_t heads = spec_.heads;
  const int64_t dim = spec_.head_dim;
  LayerTensors tensors{Tensor(DType::kFloat32, {1, seq, heads, dim}),
                       Tensor(DType::kFloat32, {1, seq, heads, dim}),
                       Tensor(DType::kFloat32, {1, seq, heads, dim})};
  const double scale = 1.0 / std::sqrt(static_cast<double>(dim));
  // Keys carry their signal with amplitude key_amplitude; a query reaches logit L on them with
  // amplitude L / (key_amplitude · scale).
  const double key_amplitude = std::sqrt(kSignalLogit / scale);
  const auto query_amplitude = [&](double logit) { return logit / (key_amplitude * scale); };
  const auto images = static_cast<int64_t>(layout.media().size());
  for (int64_t head = 0; head < heads; ++head) {
    std::mt19937_64 rng(mix(mix(mix(spec_.seed, 2), prompt), layer * heads + head));
    std::normal_distribution<double> noise(0.0, kNoise);
    std::normal_distribution<double> normal;
    std::uniform_real_distribution<double> uniform;
    const HeadType type = uniform(rng) < spec_.flip_rate ? HeadType::kDense : planted(layer, head);
    const std::vector<Vector> dirs = directions(rng, images + 1, dim);
    const Vector& sink_dir = dirs[images];
    Vector query(static_cast<std::size_t>(dim));
    for (int64_t i = 0; i < seq; ++i) {
      const int32_t image = tokens.image[i];
      std::fill(query.begin(), query.end(), 0.0);
      const auto add = [&](const Vector& direction, double amplitude) {
        for (int64_t d = 0; d < dim; ++d) query[d] += amplitude * direction[d];
      };
      if (image >= 0) {
        const double signal = query_amplitude(kSignalLogit);
        if (type == HeadType::kSink) add(sink_dir, signal);
        if (type == HeadType::kIntra || type == HeadType::kIntraSink) add(dirs[image], signal);
        if (type == HeadType::kIntraSink) {
          // Own image and the earlier images' sinks about equally weighted.
          const int64_t own = style_.bidirectional ? tokens.image_size[i] : tokens.offset[i] + 1;
          const int64_t others = tokens.sinks_before[i];
          const double balance =
              others > 0 ? std::log(static_cast<double>(own) / static_cast<double>(others)) : 0.0;
          add(sink_dir, query_amplitude(kSignalLogit + balance));
        }
        if (type == HeadType::kDense && image > 0) {
          add(dirs[std::uniform_int_distribution<int32_t>(0, image - 1)(rng)], signal);
        }
      }
      float* q = tensors.q.data_as<float>() + (i * heads + head) * dim;
      float* k = tensors.k.data_as<float>() + (i * heads + head) * dim;
      float* v = tensors.v.data_as<float>() + (i * heads + head) * dim;
      const Vector* key_signal =
          image < 0 ? nullptr : (tokens.sink[i] != 0 ? &sink_dir : &dirs[image]);
      for (int64_t d = 0; d < dim; ++d) {
        q[d] = static_cast<float>(query[d] + noise(rng));
        k[d] =
            static_cast<float>((key_signal ? key_amplitude * (*key_signal)[d] : 0.0) + noise(rng));
        v[d] = static_cast<float>(normal(rng));
      }
    }
  }
  return tensors;
}

}  // namespace mmsparse
