#pragma once
// Bounds shared by the merge tests (engine level and public API): how far the device merge may be
// from the CPU merge_partials.

#include "mmsparse/tensor.h"

namespace mmsparse::test {

inline constexpr double kEmptyPartProbability = 0.2;  // a part with no keys for a row: LSE -inf
inline constexpr float kLseSpread = 3.0f;  // LSEs of parts differ by a few units, as real ones do
inline constexpr double kMergeRelative = 1e-5;  // float32 exp/log differences, host vs device
inline constexpr double kMergeAbsolute = 1e-6;

// One unit in the last place of a stored merged element, relative.
inline double relative_rounding(DType dtype) {
  constexpr double kBFloat16Epsilon = 1.0 / 128;  // 2^-7: 8 significant bits
  constexpr double kFloat16Epsilon = 1.0 / 1024;  // 2^-10: 11 significant bits
  switch (dtype) {
    case DType::kBFloat16:
      return kBFloat16Epsilon;
    case DType::kFloat16:
      return kFloat16Epsilon;
    default:
      return kMergeRelative;
  }
}

}  // namespace mmsparse::test
