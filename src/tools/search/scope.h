#pragma once
// What one stage of the search scores on (MMInference Alg. 4): the tokens of one modality
// (intra-modality), of a (query modality, key modality) pair (cross-modality), or the whole
// sequence (inter-modality), as a problem of its own for one query head, with its sampled query
// rows and their dense reference. Candidates are built on the scope's tokens and layout, so
// dynamic patterns estimate from the scope's own last queries.

#include <cstdint>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "mmsparse/attention.h"
#include "mmsparse/layout.h"
#include "mmsparse/patterns.h"
#include "mmsparse/plan.h"
#include "mmsparse/tools/search.h"
#include "mmsparse/tensor.h"
#include "tools/search/all_rows.h"

namespace mmsparse::detail {

// One query head of the layer and its KV head, as contiguous fp32.
struct HeadTensors {
  Tensor q;  // [seq_len, head_dim]
  Tensor k;  // [seq_len, head_dim]
  Tensor v;  // [seq_len, head_dim]
};
HeadTensors head_tensors(const TensorView& q, const TensorView& k, const TensorView& v,
                         int64_t q_head);
// Rows [n, head_dim] (a HeadTensors member) as a one-head attention input [1, n, 1, head_dim].
TensorView as_one_head(const Tensor& rows);

// Bit m set: modality m.
using ModalitySet = uint8_t;
constexpr ModalitySet modality_bit(Modality modality) {
  return static_cast<ModalitySet>(1u << static_cast<int>(modality));
}
inline constexpr ModalitySet kAllModalities = (1u << kNumModalities) - 1;

// A candidate on a scope: its host plan (sampled-row scoring, modelled cost), or its plan prepared
// on the scoring device (SearchOptions::score_device: built there, scored over every row).
struct BuiltCandidate {
  std::optional<Plan> plan;
  std::optional<PreparedPlan> prepared;
};

class Scope {
 public:
  // The tokens of `kept` modalities, scoring the rows of `query` modalities against keys of `keys`
  // modalities (pairs outside query × keys are masked out of both the candidate and the dense
  // reference). Rows that see no key of `keys` have nothing to recall and are left out. With
  // options.score_device every other query row is scored on that device (AllRowsScorer; its work
  // holds `device_mutex` when given, so that it never runs beside a measured cost's timing).
  // Otherwise a stratified sample: the last options.segment_tail_rows of each query segment, all
  // of them, and one row drawn at random (options.sample_seed) from each of options.sample_rows
  // equal blocks of the other query rows; each scored row stands for its block, so the estimate
  // is unbiased for the mean over all rows and comes with its standard error.
  Scope(std::string name, const HeadTensors& head, const ModalityLayout& layout, ModalitySet kept,
        ModalitySet query, ModalitySet keys, int64_t tile_rows, const SearchOptions& options,
        std::recursive_mutex* device_mutex = nullptr);

  const std::string& name() const { return name_; }
  bool is_full() const { return is_full_; }       // every token kept and every pair scored
  bool has_rows() const;  // false: nothing here to score
  const ModalityLayout& layout() const { return layout_; }
  PlanShape shape() const;

  // The candidate's plan on the scope's tokens; empty when the pattern cannot be built there
  // (too few tokens for its parameters, a boundary mode on a single modality, ...).
  std::optional<BuiltCandidate> build(const PatternSpec& spec) const;
  // Recall (with its standard error; 0 when every row is scored) and output error of the
  // candidate on the scored rows, against dense.
  Accuracy score(const BuiltCandidate& candidate);
  // The cost of running the candidate (built by build()) on the scope's tokens. The scope's inputs
  // are prepared for `model` on the first call; every call must pass the same model.
  // A finite `limit` lets a cost far over it be a quicker reading (cost_prepared_within).
  double cost(const BuiltCandidate& candidate, CostModel& model,
              double limit = std::numeric_limits<double>::infinity());
  // The cost of building the spec's plan from the scope's q and k (CostModel::index_cost).
  double index_cost(const PatternSpec& spec, CostModel& model);

 private:
  std::string name_;
  ModalityLayout layout_;
  bool is_full_ = false;
  uint16_t modality_pairs_ = kAllModalityPairs;
  int64_t tile_rows_ = kDefaultTileRows;
  float scale_ = 0.0f;
  int num_threads_ = 0;
  std::recursive_mutex* device_mutex_ = nullptr;
  bool device_work_ = false;  // candidates are built and scored on a GPU
  Tensor q_, k_, v_;             // [1, tokens, 1, head_dim] fp32
  std::vector<int64_t> rows_;    // scored rows (scope positions), ascending
  std::vector<RowWeight> weights_;  // [rows]: the query rows each scored row stands for
  std::vector<float> dense_lse_;  // [rows]
  std::vector<float> dense_out_;  // [rows, head_dim]
  std::unique_ptr<AllRowsScorer> all_rows_;  // with SearchOptions::score_device
  Tensor out_, lse_;             // scratch for attention: [1, tokens, 1, head_dim], [1, 1, tokens]
  // q_, k_, v_ prepared for the cost model (device copies for a measured cost); declared last, so
  // destroyed before the tensors it was prepared from.
  std::unique_ptr<CostInputs> cost_inputs_;

  // The plan's coverage of the sampled rows only: one single-row tile per row, holding the keys
  // of the row's tile in `plan`, restricted to the scored modality pairs.
  Plan sampled_rows_plan(const Plan& plan) const;
  const CostInputs& cost_inputs(CostModel& model);
  void attend(const Plan& plan);
  // The stratified sample of the query rows (tail: which end a query segment) into rows_ and
  // weights_.
  void sample(const std::vector<int64_t>& query_rows, const std::vector<bool>& tail,
              const SearchOptions& options);
  // The device mutex, held while the device works for this scope; empty without one.
  std::optional<std::lock_guard<std::recursive_mutex>> hold() const;
};

}  // namespace mmsparse::detail
