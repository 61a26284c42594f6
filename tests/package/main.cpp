// Dense attention on host tensors through an installed mmsparse, checked against a count of the
// tools library: the causal rows of a one-head problem attend to 1 + 2 + ... + kLen keys.

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>

#include "mmsparse/mmsparse.h"
#include "mmsparse/tools/metrics.h"

int main() {
  using mmsparse::DType;
  using mmsparse::Tensor;
  constexpr int64_t kLen = 16;
  constexpr int64_t kHeadDim = 8;
  // All-zero queries and keys spread each row's weight evenly over its keys, so with values of 1
  // the output is 1 and the log-sum-exp of row i is log(i + 1).
  Tensor q(DType::kFloat32, {1, kLen, 1, kHeadDim});
  Tensor kv(DType::kFloat32, {1, kLen, 1, kHeadDim});
  Tensor v(DType::kFloat32, {1, kLen, 1, kHeadDim});
  Tensor out(DType::kFloat32, {1, kLen, 1, kHeadDim});
  Tensor lse(DType::kFloat32, {1, 1, kLen});
  float* values = v.data_as<float>();
  for (int64_t i = 0; i < kLen * kHeadDim; ++i) values[i] = 1.0f;
  mmsparse::attention_dense(q.view(), kv.view(), v.view(), out.view(), lse.view());

  int64_t pairs = 0;
  const float* lses = lse.data_as<float>();
  constexpr double kTolerance = 1e-5;
  for (int64_t row = 0; row < kLen; ++row) {
    const double keys = std::exp(static_cast<double>(lses[row]));
    pairs += std::llround(keys);
    if (std::abs(out.data_as<float>()[row * kHeadDim] - 1.0f) > kTolerance) {
      std::fprintf(stderr, "out[%lld] is not 1\n", static_cast<long long>(row));
      return 1;
    }
  }
  const int64_t expected = mmsparse::causal_pair_count(kLen, kLen);
  if (pairs != expected) {
    std::fprintf(stderr, "causal pairs: expected %lld, got %lld\n",
                 static_cast<long long>(expected), static_cast<long long>(pairs));
    return 1;
  }
  const mmsparse::BuildInfo info = mmsparse::build_info();
  std::string backends;
  for (const std::string& name : info.backends) backends += " " + name;
  std::printf("mmsparse %s package consumer: dense attention OK (%lld pairs); backends:%s\n",
              info.version.c_str(), static_cast<long long>(pairs), backends.c_str());
  return 0;
}
