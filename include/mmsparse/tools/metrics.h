#pragma once
// The accuracy vocabulary (GUIDE §3), one definition for every tool.
//   recall (row)      exp(LSE_plan - LSE_dense): share of the true softmax mass the plan covers
//   output error      ||O_plan - O_dense|| / ||O_dense|| per head
//   NMSE              mean((O_plan - O_dense)^2) / mean(O_dense^2) per head (BlindSight)
//   density           computed pairs / causal pairs
//   oracle density    fewest pairs (true top entries per row) reaching a recall target / causal pairs
//   FLOPs             4 · computed pairs · head_dim
//   needle coverage   needles whose pair with every querying row the plan computes, and the share
//                     of the needles' dense attention probability the plan keeps (below)

#include <cstdint>
#include <limits>
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

// --- Needle coverage (V-NIAH / MM-NIAH-style retrieval) ---------------------------------------
// A needle is a key that a question's queries must read. For one head slot, needle keys n and the
// querying rows R (query positions, e.g. the final question's rows):
//   covered(n)     the plan computes the pair (i, n), after its mask policy, for every row i in R;
//   p(i, n)        exp(scale · q_i · k_n − LSE_dense(i)), row i's dense softmax probability on n;
//   mass kept(n)   Σ_{i∈R} [pair (i, n) computed] · p(i, n) / Σ_{i∈R} p(i, n): the share of the
//                  needle's dense attention that the plan keeps (NaN when every p(i, n) is 0);
//   dense mass(n)  mean over R of p(i, n): how strongly the head reads the needle at all.
// The head's mass kept pools every needle: Σ_n Σ_i kept p / Σ_n Σ_i p. A needle must be visible to
// every querying row under causal masking (key <= row + kv_len − q_len).
struct NeedleCoverage {
  int64_t needles = 0;
  int64_t covered = 0;
  std::vector<uint8_t> needle_covered;  // [needles] 1 = covered(n)
  // Filled when dense inputs are given (NaN otherwise):
  std::vector<double> needle_mass_kept;   // [needles]
  std::vector<double> needle_dense_mass;  // [needles]
  double mass_kept = std::numeric_limits<double>::quiet_NaN();
  // The pooled sums behind mass_kept, so that callers can pool over heads too.
  double kept_probability = 0.0;
  double dense_probability = 0.0;
};

// What the mass measure reads: host views, any strides, bf16 / fp16 / fp32.
//   q [batch, q_len, q_heads, head_dim], k [batch, kv_len, kv_heads, head_dim] (GQA as in
//   attention.h), lse_dense [batch, q_heads, q_len] fp32 from dense attention with `scale`.
struct NeedleDenseInputs {
  TensorView q;
  TensorView k;
  TensorView lse_dense;
  int64_t batch_index = 0;
  float scale = 0.0f;  // 0 means 1/sqrt(head_dim)
};

// Coverage of `needle_keys` by head slot `head_slot` (batch element × heads + query head) of the
// plan for `query_rows`; with `dense`, also the mass measure for the slot's query head, batch
// element dense->batch_index (a plan of batch 1 serves every batch element).
NeedleCoverage needle_coverage(const Plan& plan, int64_t head_slot,
                               std::span<const int64_t> needle_keys,
                               std::span<const int64_t> query_rows,
                               const NeedleDenseInputs* dense = nullptr);

}  // namespace mmsparse
