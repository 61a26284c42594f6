#pragma once
// Helpers shared by the dynamic-pattern tests: random layouts of an exact length, one head of a
// workload as its own problem, and recall measured exactly on sampled rows.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "common/random.h"
#include "core/plan_coverage.h"
#include "cpu/dot.h"
#include "mmsparse/layout.h"
#include "mmsparse/plan.h"
#include "mmsparse/tensor.h"
#include "mmsparse/tools/metrics.h"
#include "mmsparse/tools/workload.h"

namespace mmsparse::test {

// A layout of exactly `length` tokens: up to `attempts` times, `add_item(builder)` appends random
// items to a copy of the layout so far, kept only if it still fits; then text for what remains.
template <class AddItem>
ModalityLayout fill_layout(int64_t length, int attempts, AddItem&& add_item) {
  LayoutBuilder builder;
  int64_t used = 0;
  for (int attempt = 0; attempt < attempts && used < length; ++attempt) {
    LayoutBuilder extended = builder;
    add_item(extended);
    const int64_t extended_length = extended.build().length();
    if (extended_length > length) continue;
    builder = extended;
    used = extended_length;
  }
  if (used < length) builder.text(length - used);
  return builder.build();
}

// A random layout of exactly `length` tokens: text, small images and videos whose frames may be
// separated by text, then text for whatever remains.
inline ModalityLayout random_layout(Random& random, int64_t length) {
  constexpr int64_t kMaxSide = 4;
  constexpr int64_t kMaxFrames = 5;
  constexpr int64_t kMaxText = 12;
  constexpr int kAttempts = 30;
  return fill_layout(length, kAttempts, [&](LayoutBuilder& extended) {
    switch (random.uniform_int(0, 2)) {
      case 0:
        extended.text(random.uniform_int(1, kMaxText));
        break;
      case 1:
        extended.image({1, random.uniform_int(1, kMaxSide), random.uniform_int(1, kMaxSide)},
                       random.bernoulli(0.5));
        break;
      default:
        extended.video({random.uniform_int(1, kMaxFrames), random.uniform_int(1, kMaxSide),
                        random.uniform_int(1, kMaxSide)},
                       random.uniform_int(0, 2), random.bernoulli(0.5));
    }
  });
}

// One query head of a workload with its KV head, as a [1, seq, 1, head_dim] fp32 problem.
struct HeadProblem {
  Tensor q, k, v;
};

inline HeadProblem workload_head(const Workload& workload, int64_t head) {
  const WorkloadSpec& spec = workload.spec();
  const int64_t n = workload.seq_len();
  const int64_t dim = spec.head_dim;
  HeadProblem problem{Tensor(DType::kFloat32, {1, n, 1, dim}),
                      Tensor(DType::kFloat32, {1, n, 1, dim}),
                      Tensor(DType::kFloat32, {1, n, 1, dim})};
  std::vector<int64_t> positions(static_cast<std::size_t>(n));
  for (int64_t i = 0; i < n; ++i) positions[i] = i;
  workload.generate_q(head, positions, problem.q.data_as<float>());
  workload.generate_kv(head / (spec.q_heads / spec.kv_heads), problem.k.data_as<float>(),
                       problem.v.data_as<float>());
  return problem;
}

// Recall (exp(LSE_plan - LSE_dense), exact per row) over sampled rows of a one-head plan, and the
// plan's density over all rows. q, k: [1, n, 1, dim] fp32 with q_len == kv_len.
struct Coverage {
  double recall_mean = 0.0;
  double recall_min = 1.0;
  double density = 0.0;
};

inline Coverage measure_coverage(const Plan& plan, const Tensor& q, const Tensor& k,
                                 const std::vector<int64_t>& rows) {
  const int64_t n = plan.shape.q_len;
  const int64_t dim = q.shape()[3];
  const float* queries = q.data_as<float>();
  const float* keys = k.data_as<float>();
  const double scale = 1.0 / std::sqrt(static_cast<double>(dim));
  std::vector<std::vector<std::pair<int64_t, int64_t>>> ranges(static_cast<std::size_t>(n));
  std::vector<uint8_t> sampled(static_cast<std::size_t>(n), 0);
  for (int64_t row : rows) sampled[row] = 1;
  detail::for_each_covered_range(plan, 0, [&](int64_t query, int64_t begin, int64_t end) {
    if (sampled[query]) ranges[query].emplace_back(begin, end);
  });
  const auto logsumexp = [&](int64_t row, const std::vector<std::pair<int64_t, int64_t>>& keep) {
    std::vector<double> logits;
    for (const auto& [begin, end] : keep) {
      for (int64_t key = begin; key < end; ++key) {
        logits.push_back(scale * cpu::dot(queries + row * dim, keys + key * dim, dim));
      }
    }
    if (logits.empty()) return -std::numeric_limits<double>::infinity();
    const double top = *std::max_element(logits.begin(), logits.end());
    double sum = 0.0;
    for (double logit : logits) sum += std::exp(logit - top);
    return top + std::log(sum);
  };
  Coverage coverage;
  for (int64_t row : rows) {
    const double recall = std::exp(logsumexp(row, ranges[row]) - logsumexp(row, {{0, row + 1}}));
    coverage.recall_mean += recall / static_cast<double>(rows.size());
    coverage.recall_min = std::min(coverage.recall_min, recall);
  }
  coverage.density = plan_density(plan, 0);
  return coverage;
}

}  // namespace mmsparse::test
