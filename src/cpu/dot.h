#pragma once
// The inner product of the CPU backend, shared by the reference attention and the metrics.

#include <cstdint>

namespace mmsparse::cpu {

// Independent partial sums let -O2 vectorise the dot product, which it may not do to a single
// running sum because that would reassociate floating-point additions.
inline constexpr int kDotLanes = 8;

inline float dot(const float* a, const float* b, int64_t n) {  // a, b [n]
  float partial[kDotLanes] = {};
  int64_t i = 0;
  for (; i + kDotLanes <= n; i += kDotLanes) {
    for (int lane = 0; lane < kDotLanes; ++lane) partial[lane] += a[i + lane] * b[i + lane];
  }
  float sum = 0.0f;
  for (; i < n; ++i) sum += a[i] * b[i];
  for (float value : partial) sum += value;
  return sum;
}

}  // namespace mmsparse::cpu
