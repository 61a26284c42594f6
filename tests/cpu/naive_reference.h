#pragma once
// The independent fp64 attention the CPU reference is checked against (written here, not with the
// library's code), the naive input-precision implementation that sets the kernel accuracy bar, and
// the shapes the reference suites share.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/compare.h"
#include "common/random.h"
#include "mmsparse/tensor.h"

namespace mmsparse::test {

// FlashAttention-3's kernel check: error vs fp64 <= 2 × the error of a naive implementation in the
// input precision + this epsilon.
constexpr double kKernelEpsilon = 1e-6;
// LSE is computed in fp32 from the exact inputs in every dtype: only fp32 rounding of a sum of
// O(100) terms of magnitude ~10 separates it from fp64.
constexpr double kLseTolerance = 2e-5;
constexpr int64_t kBatch = 2;
constexpr int64_t kKvHeads = 2;
constexpr int64_t kHeadDim = 36;  // not a multiple of the 8 dot-product lanes: exercises the tail

// Which (batch, head, query, key) pairs an attention computes.
using KeepPair = std::function<bool(int64_t b, int64_t h, int64_t i, int64_t j)>;

struct Reference {
  std::vector<double> out;  // [batch, q_len, q_heads, head_dim]
  std::vector<double> lse;  // [batch, q_heads, q_len]
};

enum class Precision {
  kExact,  // fp64 throughout
  kNaive,  // a plain implementation in the input dtype: scores, probabilities and output rounded
           // to the dtype, sums in fp32 (FlashAttention-3's "pt" reference)
};

// A host view's elements as fp64 in row-major order, indexed [a, b, c, d].
class Elements {
 public:
  explicit Elements(const TensorView& view)
      : values_(test::to_doubles(view)), shape_(view.shape_vector()) {}
  double operator()(int64_t a, int64_t b, int64_t c, int64_t d) const {
    return values_[((a * shape_[1] + b) * shape_[2] + c) * shape_[3] + d];
  }

 private:
  std::vector<double> values_;
  std::vector<int64_t> shape_;
};

inline Reference naive_attention(const TensorView& q_view, const TensorView& k_view,
                                 const TensorView& v_view, double scale, const KeepPair& keep,
                                 Precision precision) {
  const Elements q(q_view), k(k_view), v(v_view);
  const int64_t batch = q_view.shape[0], q_len = q_view.shape[1], q_heads = q_view.shape[2];
  const int64_t dim = q_view.shape[3], kv_len = k_view.shape[1], group = q_heads / k_view.shape[2];
  const bool exact = precision == Precision::kExact;
  const auto round = [&](double value) { return exact ? value : round_to_dtype(q_view.dtype, static_cast<float>(value)); };
  Reference result{std::vector<double>(q_view.numel(), 0.0),
                   std::vector<double>(batch * q_heads * q_len, test::kNegativeInfinity)};
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t h = 0; h < q_heads; ++h) {
      for (int64_t i = 0; i < q_len; ++i) {
        std::vector<int64_t> keys;
        std::vector<double> scores;
        for (int64_t j = 0; j < kv_len; ++j) {
          if (!keep(b, h, i, j)) continue;
          double dot = 0.0;
          float dot_single = 0.0f;
          for (int64_t d = 0; d < dim; ++d) {
            const double product = q(b, i, h, d) * k(b, j, h / group, d);
            dot += product;
            dot_single += static_cast<float>(product);
          }
          keys.push_back(j);
          scores.push_back(exact ? scale * dot : round(static_cast<float>(scale) * dot_single));
        }
        if (keys.empty()) continue;
        const double max_score = *std::max_element(scores.begin(), scores.end());
        double sum = 0.0;
        float sum_single = 0.0f;
        for (double& score : scores) {
          score = std::exp(score - max_score);
          sum += score;
          sum_single += static_cast<float>(score);
        }
        if (!exact) sum = sum_single;
        result.lse[(b * q_heads + h) * q_len + i] = max_score + std::log(sum);
        for (int64_t d = 0; d < dim; ++d) {
          double accumulator = 0.0;
          float accumulator_single = 0.0f;
          for (std::size_t n = 0; n < keys.size(); ++n) {
            const double term = round(scores[n] / sum) * v(b, keys[n], h / group, d);
            accumulator += term;
            accumulator_single += static_cast<float>(term);
          }
          result.out[((b * q_len + i) * q_heads + h) * dim + d] =
              exact ? accumulator : round(accumulator_single);
        }
      }
    }
  }
  return result;
}

// Checks O by the kernel rule and LSE against fp64 at fp32 precision.
inline void expect_kernel_accuracy(const TensorView& out, const TensorView& lse,
                                   const Reference& exact, const Reference& naive) {
  const test::Difference baseline = compare(naive.out, exact.out);
  ASSERT_EQ(baseline.mismatches, 0) << "the naive implementation itself failed: " << baseline;
  const test::Difference ours = compare(out, exact.out);
  EXPECT_LE(ours.max_abs, 2.0 * baseline.max_abs + kKernelEpsilon)
      << "O: ours " << ours << "; naive " << baseline;
  const test::Difference lse_difference = compare(lse, exact.lse);
  EXPECT_LE(lse_difference.max_abs, kLseTolerance) << "LSE: " << lse_difference;
}

inline std::string dtype_label(DType dtype) { return std::string(dtype_name(dtype)); }

}  // namespace mmsparse::test
