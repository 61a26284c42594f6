// Gemma 3's sink offsets from data (App. C), SinkOffsetTally in mmsparse/tools/characterise.h.

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "mmsparse/status.h"
#include "mmsparse/tools/characterise.h"

namespace mmsparse {

namespace {

// Per token: its image (-1 for text), its offset inside the image and where the image begins.
struct ImageTokens {
  std::vector<int32_t> image;
  std::vector<int64_t> offset;
  std::vector<int64_t> image_begin;  // [images] first token position
  int64_t image_tokens = 0;          // the one size every image has
};

ImageTokens read_images(const ModalityLayout& layout) {
  ImageTokens tokens{layout.token_media(), {}, {}, 0};
  tokens.offset.assign(tokens.image.size(), 0);
  std::vector<int64_t> sizes(layout.media().size(), 0);
  tokens.image_begin.assign(layout.media().size(), -1);
  for (std::size_t i = 0; i < tokens.image.size(); ++i) {
    const int32_t image = tokens.image[i];
    if (image < 0) continue;
    if (tokens.image_begin[image] < 0) tokens.image_begin[image] = static_cast<int64_t>(i);
    tokens.offset[i] = sizes[image]++;
  }
  for (std::size_t g = 0; g < sizes.size(); ++g) {
    if (sizes[g] != sizes.front()) {
      throw_invalid_argument("layout", "images of one size for sink offsets (Gemma 3)",
                             "image 0 of " + std::to_string(sizes.front()) + " tokens, image " +
                                 std::to_string(g) + " of " + std::to_string(sizes[g]));
    }
  }
  tokens.image_tokens = sizes.empty() ? 0 : sizes.front();
  return tokens;
}

// The `count` highest-scoring indices (ties to the lower index), ascending.
std::vector<int64_t> top_indices(const std::vector<double>& scores, int64_t count) {
  std::vector<int64_t> order(scores.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return scores[a] > scores[b]; });
  order.resize(static_cast<std::size_t>(std::min<int64_t>(count, std::ssize(order))));
  std::sort(order.begin(), order.end());
  return order;
}

// The attention one head's image queries put on keys of earlier images, summed per offset:
// q [1, seq, q_heads, dim], k [1, seq, kv_heads, dim], softmax under the model's dense mask.
std::vector<double> inter_image_attention(const TensorView& q, const TensorView& k, int64_t head,
                                          int64_t kv_head, const ImageTokens& tokens,
                                          bool bidirectional) {
  const int64_t seq = q.shape[1];
  const int64_t dim = q.shape[3];
  const double scale = 1.0 / std::sqrt(static_cast<double>(dim));
  std::vector<float> keys(static_cast<std::size_t>(seq * dim));
  for (int64_t j = 0; j < seq; ++j) {
    for (int64_t d = 0; d < dim; ++d) {
      keys[j * dim + d] =
          load_float(k, j * k.strides[1] + kv_head * k.strides[2] + d * k.strides[3]);
    }
  }
  std::vector<double> scores(static_cast<std::size_t>(tokens.image_tokens), 0.0);
  std::vector<double> logits(static_cast<std::size_t>(seq));
  std::vector<float> query(static_cast<std::size_t>(dim));
  for (int64_t i = 0; i < seq; ++i) {
    const int32_t image = tokens.image[i];
    if (image <= 0) continue;  // text, or the first image: no earlier image to attend to
    for (int64_t d = 0; d < dim; ++d) {
      query[d] = load_float(q, i * q.strides[1] + head * q.strides[2] + d * q.strides[3]);
    }
    const int64_t end = bidirectional ? tokens.image_begin[image] + tokens.image_tokens : i + 1;
    double max_logit = -std::numeric_limits<double>::infinity();
    for (int64_t j = 0; j < end; ++j) {
      logits[j] = scale * std::inner_product(query.begin(), query.end(), &keys[j * dim], 0.0);
      max_logit = std::max(max_logit, logits[j]);
    }
    double total = 0.0;
    for (int64_t j = 0; j < end; ++j) total += std::exp(logits[j] - max_logit);
    for (int64_t j = 0; j < tokens.image_begin[image]; ++j) {
      if (tokens.image[j] < 0) continue;
      scores[tokens.offset[j]] += std::exp(logits[j] - max_logit) / total;
    }
  }
  return scores;
}

}  // namespace

void SinkOffsetTally::add_layer(const TensorView& q, const TensorView& k,
                                const ModalityLayout& layout, bool bidirectional) {
  if (q.ndim != 4 || k.ndim != 4 || q.shape[0] != 1 || layout.length() != q.shape[1]) {
    throw_invalid_argument(
        "q, k, layout", "q [1, seq, heads, dim], k [1, seq, kv_heads, dim], layout of seq tokens",
        "a layout of " + std::to_string(layout.length()) + " tokens");
  }
  const ImageTokens tokens = read_images(layout);
  if (tokens.image_begin.size() < 2) return;  // no image has an earlier one
  if (image_tokens_ == 0) {
    image_tokens_ = tokens.image_tokens;
    counts_.assign(static_cast<std::size_t>(image_tokens_), 0);
  } else if (image_tokens_ != tokens.image_tokens) {
    throw_invalid_argument(
        "layout",
        "images of " + std::to_string(image_tokens_) + " tokens, as in the prompts tallied before",
        std::to_string(tokens.image_tokens));
  }
  const int64_t heads = q.shape[2];
  const int64_t group = heads / k.shape[2];
  const auto per_head = static_cast<int64_t>(std::ceil(fraction_ * image_tokens_));
  for (int64_t head = 0; head < heads; ++head) {
    const std::vector<double> scores =
        inter_image_attention(q, k, head, head / group, tokens, bidirectional);
    for (int64_t offset : top_indices(scores, per_head)) ++counts_[offset];
  }
}

std::vector<int64_t> SinkOffsetTally::offsets() const {
  const std::vector<double> counts(counts_.begin(), counts_.end());
  return top_indices(counts, static_cast<int64_t>(std::ceil(fraction_ * image_tokens_)));
}

}  // namespace mmsparse
