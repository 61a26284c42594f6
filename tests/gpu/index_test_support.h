#pragma once
// What the GPU index builder tests share: the host estimate's scores (the oracle's line scores),
// budgets whose top-k cut is clear (so that the GPU's other summation order cannot reorder the
// lines at the cut), vertical-slash specs, random picks.

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include <cuda_runtime.h>

#include "attention_harness.h"
#include "common/random.h"
#include "mmsparse/attention.h"
#include "mmsparse/layout.h"
#include "mmsparse/patterns.h"
#include "mmsparse/plan.h"

namespace mmsparse::test {

// A cut is clear when the last line kept outscores the first line left out by this relative
// margin: far above the rounding the GPU's other summation order adds (about 1e-6).
inline constexpr double kClearGap = 1e-3;
inline constexpr int kBudgetAttempts = 40;

template <class T, std::size_t N>
const T& pick(Random& random, const std::array<T, N>& choices) {
  return choices[static_cast<std::size_t>(random.uniform_int(0, static_cast<int64_t>(N) - 1))];
}

inline constexpr std::array<int64_t, 2> kTileRows = {64, 128};
inline constexpr std::array<int64_t, 2> kHeadDims = {64, 128};
inline constexpr std::array<DType, 2> kDtypes = {DType::kBFloat16, DType::kFloat16};

struct Gqa {
  int64_t kv_heads;
  int64_t group;
};

// What a test file's random problems range over: its GQA shapes and lengths.
struct ProblemLimits {
  std::span<const Gqa> gqa_shapes;
  int64_t max_query_length;
  int64_t max_extra_keys;
};

// A random problem: odd query lengths (mostly more keys than queries, sometimes fewer), batch 1 or
// 2, one of the limits' GQA shapes, both head dims, dtypes and tile heights.
ProblemSize random_problem(Random& random, const ProblemLimits& limits);

// A random problem for the fp64 oracle check of one kernel configuration: `dtype`, `tile_rows`,
// head_dim 128 (both kernels serve it), at least two query tiles and at least as many keys.
ProblemSize oracle_problem(Random& random, const ProblemLimits& limits, DType dtype,
                           int64_t tile_rows);

// The small problem the error tests build on: 100 queries over 120 keys, 2 KV heads of 2 query
// heads each, head_dim 64.
ProblemSize error_case_size();

// The host estimate's column (vertical) and diagonal (slash) scores (methods/estimate/estimation.h) of the
// last `last_q` queries, all keys as the key space, for the head slots of the query heads `heads`
// of every batch element (all heads when empty), in batch-major order.
struct HostScores {
  std::vector<std::vector<double>> columns;
  std::vector<std::vector<double>> diagonals;
};
HostScores host_scores(const PatternInputs& inputs, const PlanShape& shape, int64_t last_q,
                       const std::vector<int64_t>& heads = {});
// The same with the estimate rows of each of `row_groups` (query positions, ascending), group by
// group: a Q-boundary head's groups.
HostScores host_scores(const PatternInputs& inputs, const PlanShape& shape,
                       const std::vector<std::vector<int64_t>>& row_groups,
                       const std::vector<int64_t>& heads = {});
// The estimate rows of each query group of a Q-boundary head (its last `last_q` rows).
std::vector<std::vector<int64_t>> query_group_rows(const PlanShape& shape,
                                                   const ModalityLayout& layout, int64_t last_q);

// The host estimate's scores of every (query group, key space) pair of a 2D-boundary head (each
// group's last `last_q` rows over one key modality's keys, in its compact coordinates), pair by
// pair in group-major order, for the head slots of `heads` (all when empty).
HostScores two_d_scores(const PatternInputs& inputs, const PlanShape& shape,
                        const ModalityLayout& layout, int64_t last_q,
                        const std::vector<int64_t>& heads = {});

// Whether top_k(scores, budget, forced) of every slot has a clear cut.
bool clear_cut(const std::vector<std::vector<double>>& scores, int64_t budget, int64_t forced);

// A budget (forced lines included) whose cut is clear in every slot: a random one where possible,
// else the forced lines alone.
int64_t clear_budget(Random& random, const std::vector<std::vector<double>>& scores,
                     int64_t forced);

PatternSpec vertical_slash(int64_t vertical, int64_t slash, int64_t sink, int64_t local,
                           int64_t last_q, int64_t boundary);

// Attention through two prepared plans on the same device q, k, v (views of `size`, scale
// size.scale, on `stream`): expects bit-identical O and LSE, as two plans with equal records give.
void expect_identical_attention(const PreparedPlan& first, const PreparedPlan& second,
                                const ProblemSize& size, const TensorView& q, const TensorView& k,
                                const TensorView& v, cudaStream_t stream);

}  // namespace mmsparse::test
