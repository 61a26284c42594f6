#pragma once
// Seeded random inputs for tests. Every run draws a fresh seed (so repeated runs explore new
// inputs); tests print it with SCOPED_TRACE(random.trace()) so a failure can be replayed by setting
// MMSPARSE_TEST_SEED=<seed> in the environment.
//
//   mmsparse::test::Random random;
//   SCOPED_TRACE(random.trace());
//   mmsparse::Tensor q = random.normal_tensor(mmsparse::DType::kBFloat16, {2, 77, 8, 64});

#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "mmsparse/tensor.h"

namespace mmsparse::test {

// Calls visit(linear_index, element_offset) for every element of `view` in row-major order;
// element_offset honours the view's strides.
template <class Visit>
void for_each_offset(const TensorView& view, Visit visit) {
  const int64_t count = view.numel();
  std::vector<int64_t> index(static_cast<std::size_t>(view.ndim), 0);
  for (int64_t linear = 0; linear < count; ++linear) {
    int64_t offset = 0;
    for (int d = 0; d < view.ndim; ++d) offset += index[d] * view.strides[d];
    visit(linear, offset);
    for (int d = view.ndim - 1; d >= 0; --d) {
      if (++index[d] < view.shape[d]) break;
      index[d] = 0;
    }
  }
}

// An attention operand whose memory is [batch, heads, seq, dim] but whose view is the API's
// [batch, seq, heads, dim]: the usual "transposed" layout of frameworks, i.e. non-contiguous
// strides. Move-only: a copy would leave `view` pointing at the original storage.
struct StridedTensor {
  StridedTensor(DType dtype, int64_t batch, int64_t seq, int64_t heads, int64_t dim)
      : storage(dtype, {batch, heads, seq, dim}), view(storage.view()) {
    view.shape = {batch, seq, heads, dim};
    view.strides = {heads * seq * dim, dim, seq * dim, 1};
  }
  StridedTensor(StridedTensor&&) = default;  // the byte buffer moves, so `view` stays valid
  StridedTensor& operator=(StridedTensor&&) = default;
  StridedTensor(const StridedTensor&) = delete;
  StridedTensor& operator=(const StridedTensor&) = delete;

  Tensor storage;   // [batch, heads, seq, dim]
  TensorView view;  // [batch, seq, heads, dim] over storage
};

class Random {
 public:
  // Seed from MMSPARSE_TEST_SEED when set (to replay a failure), otherwise std::random_device.
  Random() : Random(initial_seed()) {}
  explicit Random(uint64_t seed) : seed_(seed), engine_(seed) {}

  uint64_t seed() const { return seed_; }
  std::string trace() const { return "MMSPARSE_TEST_SEED=" + std::to_string(seed_); }
  std::mt19937_64& engine() { return engine_; }

  float normal(float mean = 0.0f, float stddev = 1.0f) {
    return std::normal_distribution<float>(mean, stddev)(engine_);
  }
  // Uniform integer in [low, high] (both inclusive).
  int64_t uniform_int(int64_t low, int64_t high) {
    return std::uniform_int_distribution<int64_t>(low, high)(engine_);
  }
  double uniform(double low = 0.0, double high = 1.0) {
    return std::uniform_real_distribution<double>(low, high)(engine_);
  }
  bool bernoulli(double probability) { return std::bernoulli_distribution(probability)(engine_); }

  // Fills a host view of a floating dtype (any strides) with N(mean, stddev), rounded to its dtype.
  void fill_normal(const TensorView& view, float mean = 0.0f, float stddev = 1.0f) {
    for_each_offset(
        view, [&](int64_t, int64_t offset) { store_float(view, offset, normal(mean, stddev)); });
  }

  Tensor normal_tensor(DType dtype, std::vector<int64_t> shape, float stddev = 1.0f) {
    Tensor tensor(dtype, std::move(shape));
    fill_normal(tensor.view(), 0.0f, stddev);
    return tensor;
  }

  // [batch, seq, heads, dim] view over [batch, heads, seq, dim] memory, filled with N(0, stddev).
  StridedTensor normal_strided(DType dtype, int64_t batch, int64_t seq, int64_t heads, int64_t dim,
                               float stddev = 1.0f) {
    StridedTensor result(dtype, batch, seq, heads, dim);
    fill_normal(result.view, 0.0f, stddev);
    return result;
  }

 private:
  static uint64_t initial_seed() {
    if (const char* text = std::getenv("MMSPARSE_TEST_SEED")) return std::stoull(text);
    std::random_device device;
    return (static_cast<uint64_t>(device()) << 32) ^ device();
  }

  uint64_t seed_;
  std::mt19937_64 engine_;
};

}  // namespace mmsparse::test
