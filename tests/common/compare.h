#pragma once
// Error measures between an actual and an expected result, for tests:
//   max_abs   max |a - e|
//   relative  ||a - e||_2 / ||e||_2   (0 when both are zero)
//   nmse      mean((a - e)^2) / mean(e^2), the BlindSight / ggml measure
// Equal infinities (e.g. LSE = -inf on rows with no keys) count as equal; a NaN or an infinity on
// one side only makes every measure +inf, so such a test always fails.
//
//   auto diff = mmsparse::test::compare(out.view(), expected);   // expected: fp64, row-major
//   EXPECT_LE(diff.max_abs, bound) << diff;

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <ostream>
#include <span>
#include <vector>

#include "common/random.h"
#include "mmsparse/tensor.h"

namespace mmsparse::test {

struct Difference {
  double max_abs = 0.0;
  double relative = 0.0;
  double nmse = 0.0;
  int64_t count = 0;       // elements compared
  int64_t mismatches = 0;  // NaNs, or infinities not matched by an equal infinity
};

inline std::ostream& operator<<(std::ostream& out, const Difference& d) {
  return out << "max_abs=" << d.max_abs << " relative=" << d.relative << " nmse=" << d.nmse
             << " count=" << d.count << " mismatches=" << d.mismatches;
}

// Elements of a host view of a floating dtype (any strides), in row-major order, as doubles.
inline std::vector<double> to_doubles(const TensorView& view) {
  std::vector<double> values(static_cast<std::size_t>(view.numel()));
  for_each_offset(view, [&](int64_t linear, int64_t offset) {
    values[static_cast<std::size_t>(linear)] = load_float(view, offset);
  });
  return values;
}

// What a comparison of differently shaped or sized results reports: a certain failure.
inline Difference size_mismatch(int64_t count) {
  constexpr double kInfinity = std::numeric_limits<double>::infinity();
  return {kInfinity, kInfinity, kInfinity, count, std::max<int64_t>(count, 1)};
}

inline Difference compare(std::span<const double> actual, std::span<const double> expected) {
  constexpr double kInfinity = std::numeric_limits<double>::infinity();
  if (actual.size() != expected.size()) return size_mismatch(static_cast<int64_t>(expected.size()));
  Difference d;
  d.count = static_cast<int64_t>(expected.size());
  double error_squares = 0.0;
  double expected_squares = 0.0;
  for (std::size_t i = 0; i < expected.size(); ++i) {
    const double a = actual[i];
    const double e = expected[i];
    if (std::isinf(a) && a == e) continue;
    if (!std::isfinite(a) || !std::isfinite(e)) {
      ++d.mismatches;
      continue;
    }
    const double error = a - e;
    d.max_abs = std::max(d.max_abs, std::abs(error));
    error_squares += error * error;
    expected_squares += e * e;
  }
  if (d.mismatches > 0) {
    d.max_abs = d.relative = d.nmse = kInfinity;
    return d;
  }
  // With an all-zero expectation, any error is infinitely relative, none is zero.
  const auto ratio = [](double numerator, double denominator) {
    if (numerator == 0.0) return 0.0;
    return denominator == 0.0 ? kInfinity : numerator / denominator;
  };
  d.relative = std::sqrt(ratio(error_squares, expected_squares));
  d.nmse = ratio(error_squares, expected_squares);  // the element counts cancel in the means
  return d;
}

inline Difference compare(const TensorView& actual, std::span<const double> expected) {
  const std::vector<double> values = to_doubles(actual);
  return compare(std::span<const double>(values), expected);
}

inline Difference compare(const TensorView& actual, const TensorView& expected) {
  if (actual.shape_vector() != expected.shape_vector()) return size_mismatch(expected.numel());
  const std::vector<double> expected_values = to_doubles(expected);
  return compare(actual, std::span<const double>(expected_values));
}

inline double max_abs_diff(const TensorView& actual, const TensorView& expected) {
  return compare(actual, expected).max_abs;
}
inline double relative_error(const TensorView& actual, const TensorView& expected) {
  return compare(actual, expected).relative;
}
inline double nmse(const TensorView& actual, const TensorView& expected) {
  return compare(actual, expected).nmse;
}

}  // namespace mmsparse::test
