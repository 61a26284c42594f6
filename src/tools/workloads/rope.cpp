#include "tools/workloads/rope.h"

#include <algorithm>
#include <cmath>

namespace mmsparse::detail {

namespace {

// Qwen2.5-VL's rope_theta.
constexpr double kRopeTheta = 1.0e6;

}  // namespace

int64_t segment_rope_starts(const ModalityLayout& layout, std::vector<int64_t>& starts) {
  starts.clear();
  int64_t counter = 0;
  for (const Segment& segment : layout.segments()) {
    starts.push_back(counter);
    if (segment.modality == Modality::kText) {
      counter += segment.length();
    } else {
      const Grid& grid = layout.media()[segment.media].grid;
      const int64_t frames = segment.length() / grid.frame_tokens();
      const int64_t t_extent =
          segment.modality == Modality::kVideo ? (frames - 1) * kTemporalIdsPerStep : 0;
      counter += std::max({t_extent, grid.h - 1, grid.w - 1}) + 1;
    }
  }
  return std::max<int64_t>(counter, 1);
}

void fill_rope_tables(int64_t pairs, int64_t max_id, std::vector<float>& fine_cos,
                      std::vector<float>& fine_sin, std::vector<float>& coarse_cos,
                      std::vector<float>& coarse_sin) {
  const int64_t coarse_count = max_id / kRopeFineSpan + 1;
  std::vector<double> inverse_frequency(static_cast<std::size_t>(pairs));
  for (int64_t p = 0; p < pairs; ++p) {
    const double exponent = -static_cast<double>(p) / static_cast<double>(pairs);
    inverse_frequency[p] = std::pow(kRopeTheta, exponent);
  }
  const auto fill = [&](int64_t count, int64_t step, std::vector<float>& cos_table,
                        std::vector<float>& sin_table) {
    cos_table.resize(static_cast<std::size_t>(count * pairs));
    sin_table.resize(cos_table.size());
    for (int64_t i = 0; i < count; ++i) {
      for (int64_t p = 0; p < pairs; ++p) {
        const double angle = static_cast<double>(i * step) * inverse_frequency[p];
        cos_table[i * pairs + p] = static_cast<float>(std::cos(angle));
        sin_table[i * pairs + p] = static_cast<float>(std::sin(angle));
      }
    }
  };
  fill(kRopeFineSpan, 1, fine_cos, fine_sin);
  fill(coarse_count, kRopeFineSpan, coarse_cos, coarse_sin);
}

}  // namespace mmsparse::detail
