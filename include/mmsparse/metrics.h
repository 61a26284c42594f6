#pragma once
// The accuracy vocabulary (GUIDE §3), one definition for every tool.
//   recall (row)      exp(LSE_plan - LSE_dense): share of the true softmax mass the plan covers
//   output error      ||O_plan - O_dense|| / ||O_dense|| per head
//   NMSE              mean((O_plan - O_dense)^2) / mean(O_dense^2) per head (BlindSight)
//   density           computed pairs / causal pairs
//   oracle density    fewest pairs (true top entries per row) reaching a recall target / causal pairs
//   FLOPs             4 · computed pairs · head_dim

#include <cstdint>
#include <span>
#include <vector>

#include "mmsparse/plan.h"
#include "mmsparse/tensor.h"

namespace mmsparse {

struct HeadAccuracy {
  double recall_mean = 0.0;  // over rows that have at least one key in the dense reference
  double recall_min = 0.0;
  double output_error = 0.0;
  double nmse = 0.0;
};

// out_* [batch, q_len, q_heads, head_dim], lse_* [batch, q_heads, q_len]; host views.
HeadAccuracy compare_head(const TensorView& out_plan, const TensorView& lse_plan,
                          const TensorView& out_dense, const TensorView& lse_dense,
                          int64_t batch_index, int64_t head);
// Per query row; NaN for rows with no keys in the dense reference (nothing to recall).
std::vector<double> row_recall(const TensorView& lse_plan, const TensorView& lse_dense,
                               int64_t batch_index, int64_t head);

// Pairs a causal (or full) attention computes.
int64_t causal_pair_count(int64_t q_len, int64_t kv_len, bool causal = true);
double plan_density(const Plan& plan, int64_t head_slot);
double attention_flops(int64_t pairs, int64_t head_dim);

struct OracleDensity {
  double density = 0.0;       // sum over sampled rows of keys needed / sum of causal keys
  int64_t rows_sampled = 0;
};
// For one query head: the causal rows `rows` (positions in [0, q_len)) of q against all keys of
// the head's KV head. Exact per row; the density is a ratio estimate over the sampled rows (all
// rows when `rows` is empty).
OracleDensity oracle_density(const TensorView& q, const TensorView& k, int64_t batch_index,
                             int64_t head, double recall, std::span<const int64_t> rows = {},
                             float scale = 0.0f, int num_threads = 0);

// Rows spread evenly over [0, q_len), `count` of them, always including the last.
std::vector<int64_t> sample_rows(int64_t q_len, int64_t count);

}  // namespace mmsparse
