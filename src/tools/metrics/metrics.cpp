// The accuracy vocabulary of GUIDE §3: recall, output error, NMSE, density, oracle density, FLOPs.

#include "mmsparse/tools/metrics.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "core/parallel.h"
#include "cpu/dot.h"
#include "mmsparse/status.h"
#include "tools/metrics/metric_checks.h"

namespace mmsparse {
namespace {

using detail::check_host;
using detail::check_index;
using detail::check_lse;
using detail::check_rank;
using detail::lse_at;

constexpr double kInfinity = std::numeric_limits<double>::infinity();

// Cumulative sums of sorted probabilities land a few ulps off exact fractions (1/3 + 1/3 + 1/3);
// a key whose inclusion reaches the target within this relative slack counts as reaching it.
constexpr double kRecallSlack = 1e-9;

// Keys row i sees: under bottom-right aligned causal masking, or all of them.
int64_t visible_keys(int64_t row, int64_t q_len, int64_t kv_len, bool causal) {
  return causal ? std::clamp<int64_t>(row + kv_len - q_len + 1, 0, kv_len) : kv_len;
}

// Fewest keys, taken by descending probability, whose softmax mass reaches `recall`.
// scores [n] are the row's logits; they are overwritten.
int64_t keys_to_reach(std::vector<double>& scores, double recall) {
  if (scores.empty()) return 0;
  const double max_score = *std::max_element(scores.begin(), scores.end());
  double total = 0.0;
  for (double& score : scores) {
    score = std::exp(score - max_score);
    total += score;
  }
  std::sort(scores.begin(), scores.end(), std::greater<>());
  const double target = recall * total * (1.0 - kRecallSlack);
  double mass = 0.0;
  for (std::size_t n = 0; n < scores.size(); ++n) {
    mass += scores[n];
    if (mass >= target) return static_cast<int64_t>(n + 1);
  }
  return static_cast<int64_t>(scores.size());
}

}  // namespace

std::vector<double> row_recall(const TensorView& lse_plan, const TensorView& lse_dense,
                               int64_t batch_index, int64_t head) {
  check_lse("lse_plan", lse_plan);
  check_lse("lse_dense", lse_dense);
  if (lse_plan.shape_vector() != lse_dense.shape_vector()) {
    throw_invalid_argument("lse_plan shape", lse_dense.shape_string() + " (the shape of lse_dense)",
                           lse_plan.shape_string());
  }
  check_index("batch_index", batch_index, lse_dense.shape[0]);
  check_index("head", head, lse_dense.shape[1]);
  const int64_t q_len = lse_dense.shape[2];
  std::vector<double> recall(static_cast<std::size_t>(q_len));
  for (int64_t i = 0; i < q_len; ++i) {
    const double dense = lse_at(lse_dense, batch_index, head, i);
    const double plan = lse_at(lse_plan, batch_index, head, i);
    // A row without keys has no mass to recall: exp(-inf - -inf) is undefined, reported as NaN.
    recall[i] =
        dense == -kInfinity ? std::numeric_limits<double>::quiet_NaN() : std::exp(plan - dense);
  }
  return recall;
}

HeadAccuracy compare_head(const TensorView& out_plan, const TensorView& lse_plan,
                          const TensorView& out_dense, const TensorView& lse_dense,
                          int64_t batch_index, int64_t head) {
  check_rank("out_plan", out_plan, 4, "[batch, q_len, q_heads, head_dim]");
  check_rank("out_dense", out_dense, 4, "[batch, q_len, q_heads, head_dim]");
  check_host("out_plan", out_plan);
  check_host("out_dense", out_dense);
  if (out_plan.shape_vector() != out_dense.shape_vector()) {
    throw_invalid_argument("out_plan shape", out_dense.shape_string() + " (the shape of out_dense)",
                           out_plan.shape_string());
  }
  const std::vector<int64_t> lse_shape = {out_dense.shape[0], out_dense.shape[2],
                                          out_dense.shape[1]};
  if (lse_dense.shape_vector() != lse_shape) {
    throw_invalid_argument("lse_dense shape",
                           "[batch, q_heads, q_len] of out_dense = [" +
                               std::to_string(lse_shape[0]) + ", " + std::to_string(lse_shape[1]) +
                               ", " + std::to_string(lse_shape[2]) + "]",
                           lse_dense.shape_string());
  }
  const std::vector<double> recall = row_recall(lse_plan, lse_dense, batch_index, head);

  HeadAccuracy accuracy;
  double recall_sum = 0.0;
  int64_t rows_with_keys = 0;
  accuracy.recall_min = kInfinity;
  for (double value : recall) {
    if (std::isnan(value)) continue;  // rows without keys in the reference
    recall_sum += value;
    ++rows_with_keys;
    accuracy.recall_min = std::min(accuracy.recall_min, value);
  }
  // With no row holding keys there is nothing to miss: recall is 1.
  accuracy.recall_mean = rows_with_keys > 0 ? recall_sum / rows_with_keys : 1.0;
  if (rows_with_keys == 0) accuracy.recall_min = 1.0;

  double error_squares = 0.0;
  double dense_squares = 0.0;
  const int64_t q_len = out_dense.shape[1];
  const int64_t head_dim = out_dense.shape[3];
  for (int64_t i = 0; i < q_len; ++i) {
    for (int64_t d = 0; d < head_dim; ++d) {
      const auto offset = [&](const TensorView& view) {
        return batch_index * view.strides[0] + i * view.strides[1] + head * view.strides[2] +
               d * view.strides[3];
      };
      const double dense = load_float(out_dense, offset(out_dense));
      const double error = load_float(out_plan, offset(out_plan)) - dense;
      error_squares += error * error;
      dense_squares += dense * dense;
    }
  }
  // Relative measures of an all-zero reference: zero error stays 0, any error is infinite.
  const double ratio = error_squares == 0.0
                           ? 0.0
                           : (dense_squares == 0.0 ? kInfinity : error_squares / dense_squares);
  accuracy.output_error = std::sqrt(ratio);
  accuracy.nmse = ratio;  // mean / mean over the same elements: the counts cancel
  return accuracy;
}

int64_t causal_pair_count(int64_t q_len, int64_t kv_len, bool causal) {
  if (q_len < 0) throw_invalid_argument("q_len", ">= 0", std::to_string(q_len));
  if (kv_len < 0) throw_invalid_argument("kv_len", ">= 0", std::to_string(kv_len));
  if (!causal) return q_len * kv_len;
  // Row i sees min(kv_len, i + offset + 1) keys, never more than kv_len since i < q_len.
  const int64_t offset = kv_len - q_len;
  if (offset >= 0) return q_len * offset + q_len * (q_len + 1) / 2;
  return kv_len * (kv_len + 1) / 2;  // the first -offset rows see nothing, the rest 1..kv_len
}

double plan_density(const Plan& plan, int64_t head_slot, bool causal) {
  check_index("head_slot", head_slot, plan.head_slots());
  const int64_t pairs = causal_pair_count(plan.shape.q_len, plan.shape.kv_len, causal);
  if (pairs == 0) return 0.0;
  return static_cast<double>(count_plan_pairs(plan, head_slot)) / static_cast<double>(pairs);
}

double attention_flops(int64_t pairs, int64_t head_dim) {
  // QK^T and PV each take a multiply and an add per pair and dimension.
  constexpr double kFlopsPerPairAndDim = 4.0;
  return kFlopsPerPairAndDim * static_cast<double>(pairs) * static_cast<double>(head_dim);
}

std::vector<int64_t> sample_rows(int64_t q_len, int64_t count) {
  if (q_len < 0) throw_invalid_argument("q_len", ">= 0", std::to_string(q_len));
  if (count < 0) throw_invalid_argument("count", ">= 0", std::to_string(count));
  count = std::min(count, q_len);
  std::vector<int64_t> rows(static_cast<std::size_t>(count));
  // Row n ends the n-th of `count` equal slices; consecutive rows differ by >= 1 as count <= q_len.
  for (int64_t n = 0; n < count; ++n) rows[n] = (n + 1) * q_len / count - 1;
  return rows;
}

OracleDensity oracle_density(const TensorView& q, const TensorView& k, int64_t batch_index,
                             int64_t head, double recall, std::span<const int64_t> rows,
                             float scale, int num_threads, bool causal) {
  check_rank("q", q, 4, "[batch, q_len, q_heads, head_dim]");
  check_rank("k", k, 4, "[batch, kv_len, kv_heads, head_dim]");
  check_host("q", q);
  check_host("k", k);
  if (q.shape[0] != k.shape[0]) {
    throw_invalid_argument("k batch (dimension 0)", std::to_string(q.shape[0]) + " (batch of q)",
                           std::to_string(k.shape[0]));
  }
  if (q.shape[3] != k.shape[3]) {
    throw_invalid_argument("k head_dim (dimension 3)",
                           std::to_string(q.shape[3]) + " (head_dim of q)",
                           std::to_string(k.shape[3]));
  }
  const int64_t q_len = q.shape[1];
  const int64_t q_heads = q.shape[2];
  const int64_t head_dim = q.shape[3];
  const int64_t kv_len = k.shape[1];
  const int64_t kv_heads = k.shape[2];
  if (kv_heads <= 0 || q_heads % kv_heads != 0) {
    throw_invalid_argument("k heads (dimension 2)",
                           "a positive divisor of q_heads = " + std::to_string(q_heads),
                           std::to_string(kv_heads));
  }
  check_index("batch_index", batch_index, q.shape[0]);
  check_index("head", head, q_heads);
  if (!(recall > 0.0 && recall <= 1.0)) {
    throw_invalid_argument("recall", "in (0, 1]", std::to_string(recall));
  }
  if (!std::isfinite(scale)) {
    throw_invalid_argument("scale", "a finite value (0 = 1/sqrt(head_dim))", std::to_string(scale));
  }
  if (num_threads < 0) {
    throw_invalid_argument("num_threads", ">= 0 (0 = hardware concurrency)",
                           std::to_string(num_threads));
  }
  std::vector<int64_t> all_rows;
  if (rows.empty()) {
    all_rows.resize(static_cast<std::size_t>(q_len));
    for (int64_t i = 0; i < q_len; ++i) all_rows[i] = i;
    rows = all_rows;
  }
  for (int64_t row : rows) check_index("rows", row, q_len);

  const float softmax_scale =
      scale != 0.0f ? scale : 1.0f / std::sqrt(static_cast<float>(head_dim));
  const int64_t kv_head = head / (q_heads / kv_heads);
  // The KV head once as contiguous fp32: [kv_len, head_dim].
  std::vector<float> keys(static_cast<std::size_t>(kv_len * head_dim));
  for (int64_t j = 0; j < kv_len; ++j) {
    const int64_t base = batch_index * k.strides[0] + j * k.strides[1] + kv_head * k.strides[2];
    for (int64_t d = 0; d < head_dim; ++d) {
      keys[j * head_dim + d] = load_float(k, base + d * k.strides[3]);
    }
  }

  std::vector<int64_t> needed(rows.size(), 0);
  detail::parallel_for(static_cast<int64_t>(rows.size()), num_threads, [&](int64_t n) {
    const int64_t row = rows[n];
    std::vector<float> query(static_cast<std::size_t>(head_dim));
    const int64_t base = batch_index * q.strides[0] + row * q.strides[1] + head * q.strides[2];
    for (int64_t d = 0; d < head_dim; ++d) query[d] = load_float(q, base + d * q.strides[3]);
    std::vector<double> scores(static_cast<std::size_t>(visible_keys(row, q_len, kv_len, causal)));
    for (std::size_t j = 0; j < scores.size(); ++j) {
      const float* key = keys.data() + j * head_dim;
      scores[j] = static_cast<double>(softmax_scale) * cpu::dot(query.data(), key, head_dim);
    }
    needed[n] = keys_to_reach(scores, recall);
  });

  int64_t needed_total = 0;
  int64_t visible_total = 0;
  for (std::size_t n = 0; n < rows.size(); ++n) {
    needed_total += needed[n];
    visible_total += visible_keys(rows[n], q_len, kv_len, causal);
  }
  OracleDensity result;
  result.rows_sampled = static_cast<int64_t>(rows.size());
  result.density = visible_total > 0 ? static_cast<double>(needed_total) / visible_total : 0.0;
  return result;
}

}  // namespace mmsparse
