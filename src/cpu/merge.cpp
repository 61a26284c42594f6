// The CPU reference of merge_partials: combines (O, LSE) results computed over disjoint key sets.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "core/parallel.h"
#include "cpu/reference_attention.h"

namespace mmsparse::cpu {

void merge_partials(std::span<const TensorView> outs, std::span<const TensorView> lses,
                    const TensorView& out, const TensorView& lse, int num_threads) {
  constexpr float kNegativeInfinity = -std::numeric_limits<float>::infinity();
  const int64_t batch = out.shape[0];
  const int64_t q_len = out.shape[1];
  const int64_t heads = out.shape[2];
  const int64_t head_dim = out.shape[3];
  const auto lse_offset = [](const TensorView& view, int64_t b, int64_t h, int64_t i) {
    return b * view.strides[0] + h * view.strides[1] + i * view.strides[2];
  };
  const auto out_offset = [](const TensorView& view, int64_t b, int64_t i, int64_t h) {
    return b * view.strides[0] + i * view.strides[1] + h * view.strides[2];
  };

  detail::parallel_for(batch * q_len, num_threads, [&](int64_t item) {
    const int64_t b = item / q_len;
    const int64_t i = item % q_len;
    std::vector<float> weights(outs.size());
    std::vector<float> merged(static_cast<std::size_t>(head_dim));
    for (int64_t h = 0; h < heads; ++h) {
      // Weights relative to the largest LSE, so no exp overflows and the largest part weighs 1.
      float max_lse = kNegativeInfinity;
      for (const TensorView& part : lses) {
        max_lse = std::max(max_lse, part.data_as<const float>()[lse_offset(part, b, h, i)]);
      }
      std::fill(merged.begin(), merged.end(), 0.0f);
      float merged_lse = kNegativeInfinity;
      if (max_lse != kNegativeInfinity) {
        float sum = 0.0f;
        for (std::size_t p = 0; p < lses.size(); ++p) {
          const float part_lse = lses[p].data_as<const float>()[lse_offset(lses[p], b, h, i)];
          weights[p] = std::exp(part_lse - max_lse);
          sum += weights[p];
        }
        for (std::size_t p = 0; p < outs.size(); ++p) {
          // A part without keys contributes nothing, whatever its O holds.
          if (weights[p] == 0.0f) continue;
          const float share = weights[p] / sum;
          const int64_t row = out_offset(outs[p], b, i, h);
          for (int64_t d = 0; d < head_dim; ++d) {
            merged[d] += share * load_float(outs[p], row + d * outs[p].strides[3]);
          }
        }
        merged_lse = max_lse + std::log(sum);
      }
      const int64_t row = out_offset(out, b, i, h);
      for (int64_t d = 0; d < head_dim; ++d) store_float(out, row + d * out.strides[3], merged[d]);
      lse.data_as<float>()[lse_offset(lse, b, h, i)] = merged_lse;
    }
  });
}

}  // namespace mmsparse::cpu
