#include "index_test_support.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <functional>

#include "device_buffer.h"
#include "methods/estimate/estimation.h"
#include "methods/estimate/modality_boundary.h"

namespace mmsparse::test {

ProblemSize random_problem(Random& random, const ProblemLimits& limits) {
  ProblemSize size;
  size.batch = random.uniform_int(1, 2);
  const Gqa& gqa = limits.gqa_shapes[static_cast<std::size_t>(
      random.uniform_int(0, static_cast<int64_t>(limits.gqa_shapes.size()) - 1))];
  size.kv_heads = gqa.kv_heads;
  size.group = gqa.group;
  size.head_dim = pick(random, kHeadDims);
  size.dtype = pick(random, kDtypes);
  size.q_len = random.uniform_int(0, limits.max_query_length / 2) * 2 + 1;
  size.kv_len = random.bernoulli(0.8) ? size.q_len + random.uniform_int(0, limits.max_extra_keys)
                                      : random.uniform_int(0, size.q_len);
  size.tile_rows = pick(random, kTileRows);
  size.scale = 1.0f / std::sqrt(static_cast<float>(size.head_dim));
  size.kernel = cuda::AttentionKernel::kAuto;
  return size;
}

ProblemSize oracle_problem(Random& random, const ProblemLimits& limits, DType dtype,
                           int64_t tile_rows) {
  ProblemSize size = random_problem(random, limits);
  size.dtype = dtype;
  size.tile_rows = tile_rows;
  size.head_dim = kHeadDims.back();
  size.scale = 1.0f / std::sqrt(static_cast<float>(size.head_dim));
  size.q_len = std::max<int64_t>(size.q_len, 2 * tile_rows + 1);
  size.kv_len = size.q_len + random.uniform_int(0, limits.max_extra_keys);
  return size;
}

ProblemSize error_case_size() {
  ProblemSize size;
  size.q_len = 100;
  size.kv_len = 120;
  size.kv_heads = 2;
  size.group = 2;
  size.head_dim = 64;
  return size;
}

HostScores host_scores(const PatternInputs& inputs, const PlanShape& shape, int64_t last_q,
                       const std::vector<int64_t>& heads) {
  std::vector<int64_t> rows;
  for (int64_t row = std::max<int64_t>(0, shape.q_len - last_q); row < shape.q_len; ++row) {
    rows.push_back(row);
  }
  return host_scores(inputs, shape, std::vector<std::vector<int64_t>>{rows}, heads);
}

namespace {

// The query heads `heads`, or all of them when empty.
std::vector<int64_t> selected_heads(const PlanShape& shape, const std::vector<int64_t>& heads) {
  std::vector<int64_t> selected = heads;
  if (selected.empty()) {
    for (int64_t head = 0; head < shape.heads; ++head) selected.push_back(head);
  }
  return selected;
}

// Appends the scores of the estimate rows `rows` over `space` for every batch element and head.
void append_scores(const PatternInputs& inputs, const PlanShape& shape,
                   const std::vector<int64_t>& rows, const detail::KeySpace& space,
                   const std::vector<int64_t>& heads, detail::KeyCache& cache, HostScores& scores) {
  for (int64_t b = 0; b < shape.batch; ++b) {
    for (const int64_t head : heads) {
      const detail::HeadOperands operands(inputs, shape, b * shape.heads + head, cache);
      const detail::Estimate estimate =
          detail::estimate_last_queries(operands, rows, space, shape.causal_offset());
      scores.columns.push_back(estimate.column_sums());
      scores.diagonals.push_back(estimate.diagonal_sums());
    }
  }
}

}  // namespace

HostScores host_scores(const PatternInputs& inputs, const PlanShape& shape,
                       const std::vector<std::vector<int64_t>>& row_groups,
                       const std::vector<int64_t>& heads) {
  const std::vector<int64_t> selected = selected_heads(shape, heads);
  const detail::KeySpace keys = detail::KeySpace::all_keys(shape.kv_len);
  detail::KeyCache cache;
  HostScores scores;
  for (const std::vector<int64_t>& rows : row_groups) {
    append_scores(inputs, shape, rows, keys, selected, cache, scores);
  }
  return scores;
}

std::vector<std::vector<int64_t>> query_group_rows(const PlanShape& shape,
                                                   const ModalityLayout& layout, int64_t last_q) {
  const PatternSpec spec = resolve_pattern(
      vertical_slash(0, 0, 0, 0, last_q, static_cast<int64_t>(detail::BoundaryMode::kQuery)));
  std::vector<std::vector<int64_t>> rows;
  for (const detail::QueryGroup& group : detail::query_groups(spec, shape, &layout)) {
    rows.push_back(group.last_rows(last_q));
  }
  return rows;
}

HostScores two_d_scores(const PatternInputs& inputs, const PlanShape& shape,
                        const ModalityLayout& layout, int64_t last_q,
                        const std::vector<int64_t>& heads) {
  const std::vector<int64_t> selected = selected_heads(shape, heads);
  const PatternSpec spec = resolve_pattern(
      vertical_slash(0, 0, 0, 0, last_q, static_cast<int64_t>(detail::BoundaryMode::kTwoD)));
  detail::KeyCache cache;
  HostScores scores;
  for (const detail::QueryGroup& group : detail::query_groups(spec, shape, &layout)) {
    const std::vector<int64_t> rows = group.last_rows(last_q);
    for (const detail::KeySpace& space : group.key_spaces) {
      append_scores(inputs, shape, rows, space, selected, cache, scores);
    }
  }
  return scores;
}

bool clear_cut(const std::vector<std::vector<double>>& scores, int64_t budget, int64_t forced) {
  for (const std::vector<double>& slot : scores) {
    const auto size = static_cast<int64_t>(slot.size());
    const int64_t kept = std::min(forced, size);
    const int64_t needed = std::clamp(budget, kept, size) - kept;
    if (needed == 0 || needed == size - kept) continue;
    std::vector<double> rest(slot.begin() + kept, slot.end());
    std::sort(rest.begin(), rest.end(), std::greater<>());
    if (rest[needed - 1] - rest[needed] <= kClearGap * rest[needed - 1]) return false;
  }
  return true;
}

int64_t clear_budget(Random& random, const std::vector<std::vector<double>>& scores,
                     int64_t forced) {
  const int64_t size = scores.empty() ? 0 : static_cast<int64_t>(scores.front().size());
  constexpr int64_t kBeyondEveryLine = 8;
  for (int attempt = 0; attempt < kBudgetAttempts; ++attempt) {
    const int64_t budget = random.uniform_int(forced, std::max(forced, size + kBeyondEveryLine));
    if (clear_cut(scores, budget, forced)) return budget;
  }
  return forced;
}

PatternSpec vertical_slash(int64_t vertical, int64_t slash, int64_t sink, int64_t local,
                           int64_t last_q, int64_t boundary) {
  return {"vertical-slash",
          {{"vertical", vertical},
           {"slash", slash},
           {"sink", sink},
           {"local", local},
           {"last_q", last_q},
           {"boundary", boundary}}};
}

void expect_identical_attention(const PreparedPlan& first, const PreparedPlan& second,
                                const ProblemSize& size, const TensorView& q, const TensorView& k,
                                const TensorView& v, cudaStream_t stream) {
  constexpr Device kCuda{DeviceType::kCUDA, 0};
  AttentionOptions options;
  options.scale = size.scale;
  options.stream = stream;
  std::vector<std::vector<std::byte>> outs;
  std::vector<std::vector<std::byte>> lses;
  for (const PreparedPlan* prepared : {&first, &second}) {
    HostOperand out_host(size.dtype, size.batch, size.q_len, size.q_heads(), size.head_dim,
                         OperandLayout::kContiguous);
    DeviceOperand out(out_host);
    DeviceBuffer lse(static_cast<std::size_t>(size.batch * size.q_heads() * size.q_len) *
                     sizeof(float));
    out.buffer.poison();
    lse.poison();
    const TensorView lse_view = TensorView::contiguous(
        lse.data(), DType::kFloat32, {size.batch, size.q_heads(), size.q_len}, kCuda);
    attention_planned(*prepared, q, k, v, out.view, lse_view, options);
    expect_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    outs.emplace_back(out.buffer.bytes());
    out.buffer.download(outs.back().data());
    lses.emplace_back(lse.bytes());
    lse.download(lses.back().data());
  }
  EXPECT_TRUE(outs[0] == outs[1]) << "O differs";
  EXPECT_TRUE(lses[0] == lses[1]) << "LSE differs";
}

}  // namespace mmsparse::test
