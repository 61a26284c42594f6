// Needle coverage (metrics.h): which needle pairs a plan computes for a question's rows, and how
// much of the needles' dense attention probability it keeps.

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "tools/metrics/metric_checks.h"
#include "core/plan_coverage.h"
#include "cpu/dot.h"
#include "mmsparse/tools/metrics.h"
#include "mmsparse/status.h"

namespace mmsparse {
namespace {

using detail::check_host;
using detail::check_index;
using detail::check_lse;
using detail::check_rank;

// [needles × rows] 1 where the plan computes the pair (rows[r], needle_keys[n]).
std::vector<uint8_t> kept_pairs(const Plan& plan, int64_t head_slot,
                                std::span<const int64_t> needle_keys,
                                std::span<const int64_t> query_rows) {
  const std::size_t rows = query_rows.size();
  std::vector<uint8_t> kept(needle_keys.size() * rows, 0);
  const detail::RowCoverage coverage(plan, head_slot);
  for (std::size_t r = 0; r < rows; ++r) {
    coverage.for_each_range(query_rows[r], [&](int64_t begin, int64_t end) {
      for (std::size_t n = 0; n < needle_keys.size(); ++n) {
        if (needle_keys[n] >= begin && needle_keys[n] < end) kept[n * rows + r] = 1;
      }
    });
  }
  return kept;
}

void check_dense_inputs(const Plan& plan, int64_t head_slot, const NeedleDenseInputs& dense) {
  check_rank("dense.q", dense.q, 4, "[batch, q_len, q_heads, head_dim]");
  check_rank("dense.k", dense.k, 4, "[batch, kv_len, kv_heads, head_dim]");
  check_host("dense.q", dense.q);
  check_host("dense.k", dense.k);
  check_lse("dense.lse_dense", dense.lse_dense);
  const PlanShape& shape = plan.shape;
  const std::vector<int64_t> q_expected = {dense.q.shape[0], shape.q_len, shape.heads,
                                           dense.q.shape[3]};
  if (dense.q.shape_vector() != q_expected) {
    throw_invalid_argument("dense.q shape",
                           "[batch, q_len = " + std::to_string(shape.q_len) +
                               ", q_heads = " + std::to_string(shape.heads) +
                               ", head_dim] (the plan's)",
                           dense.q.shape_string());
  }
  const int64_t batch = dense.q.shape[0];
  const int64_t kv_heads = dense.k.shape[2];
  if (dense.k.shape[0] != batch || dense.k.shape[1] != shape.kv_len || kv_heads <= 0 ||
      shape.heads % kv_heads != 0 || dense.k.shape[3] != dense.q.shape[3]) {
    std::string expected = "[batch = ";
    expected += std::to_string(batch) + ", kv_len = " + std::to_string(shape.kv_len) +
                ", kv_heads dividing " + std::to_string(shape.heads) + ", head_dim = " +
                std::to_string(dense.q.shape[3]) + "]";
    throw_invalid_argument("dense.k shape", expected, dense.k.shape_string());
  }
  const std::vector<int64_t> lse_expected = {batch, shape.heads, shape.q_len};
  if (dense.lse_dense.shape_vector() != lse_expected) {
    throw_invalid_argument("dense.lse_dense shape", "[batch, q_heads, q_len] of dense.q",
                           dense.lse_dense.shape_string());
  }
  check_index("dense.batch_index", dense.batch_index, batch);
  // A plan of batch 1 serves every batch element; otherwise the slot names its element.
  const int64_t slot_batch = head_slot / shape.heads;
  if (shape.batch != 1 && slot_batch != dense.batch_index) {
    throw_invalid_argument("dense.batch_index",
                           std::to_string(slot_batch) + " (the batch element of head_slot " +
                               std::to_string(head_slot) + ")",
                           std::to_string(dense.batch_index));
  }
  if (!std::isfinite(dense.scale)) {
    throw_invalid_argument("dense.scale", "a finite value (0 = 1/sqrt(head_dim))",
                           std::to_string(dense.scale));
  }
}

// One head's vector at `position` of a [batch, seq, heads, head_dim] view, as fp32.
std::vector<float> load_row(const TensorView& view, int64_t batch_index, int64_t position,
                            int64_t head) {
  const int64_t head_dim = view.shape[3];
  std::vector<float> row(static_cast<std::size_t>(head_dim));
  const int64_t base =
      batch_index * view.strides[0] + position * view.strides[1] + head * view.strides[2];
  for (int64_t d = 0; d < head_dim; ++d) row[d] = load_float(view, base + d * view.strides[3]);
  return row;
}

// Fills the mass measure: p(i, n) = exp(scale · q_i · k_n − LSE_dense(i)), with the same fp32
// inner product as the reference backend that produced LSE_dense.
void add_mass(const Plan& plan, int64_t head_slot, std::span<const int64_t> needle_keys,
              std::span<const int64_t> query_rows, const std::vector<uint8_t>& kept,
              const NeedleDenseInputs& dense, NeedleCoverage& coverage) {
  const int64_t heads = plan.shape.heads;
  const int64_t head = head_slot % heads;
  const int64_t kv_head = head / (heads / dense.k.shape[2]);
  const int64_t head_dim = dense.q.shape[3];
  const double scale = dense.scale != 0.0f
                           ? dense.scale
                           : 1.0 / std::sqrt(static_cast<double>(head_dim));
  std::vector<std::vector<float>> needle_vectors;
  for (int64_t key : needle_keys) {
    needle_vectors.push_back(load_row(dense.k, dense.batch_index, key, kv_head));
  }
  const std::size_t rows = query_rows.size();
  const std::size_t needles = needle_keys.size();
  std::vector<double> kept_sum(needles, 0.0), dense_sum(needles, 0.0);
  for (std::size_t r = 0; r < rows; ++r) {
    const int64_t row = query_rows[r];
    const double lse = detail::lse_at(dense.lse_dense, dense.batch_index, head, row);
    // Every querying row sees the needles, so its dense LSE is finite unless the inputs disagree.
    if (!std::isfinite(lse)) {
      throw_invalid_argument("dense.lse_dense",
                             "finite values on the querying rows (they see the needles)",
                             std::to_string(lse) + " at row " + std::to_string(row));
    }
    const std::vector<float> query = load_row(dense.q, dense.batch_index, row, head);
    for (std::size_t n = 0; n < needles; ++n) {
      const float score = cpu::dot(query.data(), needle_vectors[n].data(), head_dim);
      const double probability = std::exp(scale * score - lse);
      dense_sum[n] += probability;
      if (kept[n * rows + r] != 0) kept_sum[n] += probability;
    }
  }
  coverage.needle_mass_kept.resize(needles);
  coverage.needle_dense_mass.resize(needles);
  for (std::size_t n = 0; n < needles; ++n) {
    coverage.needle_mass_kept[n] = dense_sum[n] > 0.0
                                       ? kept_sum[n] / dense_sum[n]
                                       : std::numeric_limits<double>::quiet_NaN();
    coverage.needle_dense_mass[n] =
        rows > 0 ? dense_sum[n] / static_cast<double>(rows) : std::numeric_limits<double>::quiet_NaN();
    coverage.kept_probability += kept_sum[n];
    coverage.dense_probability += dense_sum[n];
  }
  if (coverage.dense_probability > 0.0) {
    coverage.mass_kept = coverage.kept_probability / coverage.dense_probability;
  }
}

}  // namespace

NeedleCoverage needle_coverage(const Plan& plan, int64_t head_slot,
                               std::span<const int64_t> needle_keys,
                               std::span<const int64_t> query_rows,
                               const NeedleDenseInputs* dense) {
  plan.validate();
  check_index("head_slot", head_slot, plan.head_slots());
  for (int64_t row : query_rows) check_index("query_rows", row, plan.shape.q_len);
  for (int64_t key : needle_keys) check_index("needle_keys", key, plan.shape.kv_len);
  if (!query_rows.empty() && !needle_keys.empty()) {
    const int64_t first_row = *std::min_element(query_rows.begin(), query_rows.end());
    const int64_t last_visible = first_row + plan.shape.causal_offset();
    const int64_t last_key = *std::max_element(needle_keys.begin(), needle_keys.end());
    if (last_key > last_visible) {
      throw_invalid_argument("needle_keys",
                             "keys every querying row sees causally (<= " +
                                 std::to_string(last_visible) + " for row " +
                                 std::to_string(first_row) + ")",
                             std::to_string(last_key));
    }
  }
  if (dense != nullptr) check_dense_inputs(plan, head_slot, *dense);

  const std::vector<uint8_t> kept = kept_pairs(plan, head_slot, needle_keys, query_rows);
  NeedleCoverage coverage;
  coverage.needles = static_cast<int64_t>(needle_keys.size());
  const std::size_t rows = query_rows.size();
  for (std::size_t n = 0; n < needle_keys.size(); ++n) {
    const auto begin = kept.begin() + static_cast<std::ptrdiff_t>(n * rows);
    const bool every_row = std::all_of(begin, begin + static_cast<std::ptrdiff_t>(rows),
                                       [](uint8_t pair) { return pair != 0; });
    coverage.needle_covered.push_back(every_row ? 1 : 0);
    coverage.covered += every_row ? 1 : 0;
  }
  if (dense != nullptr) {
    add_mass(plan, head_slot, needle_keys, query_rows, kept, *dense, coverage);
  } else {
    coverage.needle_mass_kept.assign(needle_keys.size(), std::numeric_limits<double>::quiet_NaN());
    coverage.needle_dense_mass.assign(needle_keys.size(), std::numeric_limits<double>::quiet_NaN());
  }
  return coverage;
}

}  // namespace mmsparse
