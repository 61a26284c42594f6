// VecAttention's offline search: per-head alpha by bisection, the dynamic program over heads
// (include/mmsparse/tools/vec_search.h).

#include "mmsparse/tools/vec_search.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
#include <string>

#include "core/parallel.h"
#include "methods/estimate/estimation.h"
#include "methods/vec/vec.h"
#include "mmsparse/plan.h"
#include "mmsparse/status.h"
#include "mmsparse/tools/metrics.h"
#include "tools/search/scope.h"

namespace mmsparse {

namespace {

constexpr char kAlphaParam[] = "alpha_ppm";
// Above alpha = 1 no key passes: the sparsest plan, sinks and diagonals only.
constexpr int64_t kNoKeysAlpha = detail::kVecAlphaUnit + 1;

// One query head as a problem of its own: [1, n, 1, head_dim] fp32 views over HeadTensors.
struct HeadProblem {
  detail::HeadTensors tensors;
  TensorView q, k, v;
  float scale = 0.0f;
};

// Row `row`'s log-sum-exp over `keys` (natural log, in double). q, k: [n, head_dim] rows.
double row_lse(const float* query, const float* keys, int64_t head_dim, float scale,
               const std::vector<int64_t>& key_list) {
  if (key_list.empty()) return -std::numeric_limits<double>::infinity();
  std::vector<double> logits;
  logits.reserve(key_list.size());
  for (int64_t key : key_list) {
    double dot = 0.0;
    for (int64_t d = 0; d < head_dim; ++d) dot += double{query[d]} * keys[key * head_dim + d];
    logits.push_back(dot * scale);
  }
  const double max_logit = *std::max_element(logits.begin(), logits.end());
  double sum = 0.0;
  for (double logit : logits) sum += std::exp(logit - max_logit);
  return max_logit + std::log(sum);
}

// Pairs of [begin, end) that a row seeing keys [0, visible) computes.
int64_t visible_pairs(int64_t begin, int64_t end, int64_t visible) {
  return std::max<int64_t>(0, std::min(end, visible) - begin);
}

// Measures alphas on one head. The selection margins (score - running maximum, vec.h) do not
// depend on alpha, so they are computed once per head and every alpha's plan is read from them: a
// vec tile (one pooled block, or the blocks of a plan tile: vec.h) keeps its candidates whose
// largest margin over its blocks is >= log(alpha), and its sinks and diagonal always. The
// pairs and keys are exactly those of the vec plan build_plan would give (a test compares them);
// a bisection of 30 alphas then costs one selection pass instead of 30 plan builds.
class HeadScorer {
 public:
  HeadScorer(const HeadProblem& problem, const VecSearchOptions& options, const PatternSpec& base)
      : problem_(problem),
        params_(detail::vec_params(base)),
        shape_{1, 1, problem.q.shape[1], problem.k.shape[1], options.tile_rows} {
    const int64_t q_len = shape_.q_len;
    const int64_t kv_len = shape_.kv_len;
    rows_ = sample_rows(q_len, options.sample_rows);
    dense_lse_.resize(rows_.size());
    detail::parallel_for(static_cast<int64_t>(rows_.size()), 0, [&](int64_t i) {
      std::vector<int64_t> all(static_cast<std::size_t>(visible(rows_[i])));
      std::iota(all.begin(), all.end(), int64_t{0});
      dense_lse_[i] = lse(rows_[i], all);
    });
    pairs_ = causal_pair_count(q_len, kv_len, params_.causal);
    select_once();
  }

  VecSample score(int64_t alpha_ppm) const {
    detail::VecParams params = params_;
    params.alpha_ppm = alpha_ppm;
    const float log_alpha = params.log_alpha();
    int64_t computed = 0;
    for (std::size_t b = 0; b < tiles_.size(); ++b) {
      const std::vector<float>& margins = tiles_[b].sorted_margins;
      const auto kept = std::partition_point(margins.begin(), margins.end(),
                                             [&](float margin) { return margin >= log_alpha; }) -
                        margins.begin();
      computed += tiles_[b].span_pairs + tiles_[b].rows * static_cast<int64_t>(kept);
    }
    // Each sampled row's recall in parallel, summed in row order (the same sum on any threads).
    std::vector<double> row_recall(rows_.size(), 0.0);
    detail::parallel_for(static_cast<int64_t>(rows_.size()), 0, [&](int64_t i) {
      if (std::isinf(dense_lse_[i])) return;  // sees no key: nothing to recall
      std::vector<int64_t> keys = span_keys(rows_[i]);
      for (const detail::VecKeyMargin& candidate : row_candidates_[i]) {
        if (candidate.margin >= log_alpha) keys.push_back(candidate.key);
      }
      row_recall[i] = std::exp(lse(rows_[i], keys) - dense_lse_[i]);
    });
    double recall = 0.0;
    int64_t counted = 0;
    for (std::size_t i = 0; i < rows_.size(); ++i) {
      if (std::isinf(dense_lse_[i])) continue;
      recall += row_recall[i];
      ++counted;
    }
    const double density = pairs_ > 0 ? static_cast<double>(computed) / pairs_ : 0.0;
    return {alpha_ppm, density, counted > 0 ? recall / counted : 1.0};
  }

 private:
  struct Tile {
    int64_t rows = 0;
    int64_t span_pairs = 0;             // the sinks' and diagonal's pairs over the tile's rows
    std::vector<float> sorted_margins;  // descending
  };

  int64_t visible(int64_t row) const {
    return params_.causal ? std::clamp<int64_t>(row + shape_.causal_offset() + 1, 0, shape_.kv_len)
                          : shape_.kv_len;
  }

  // The spans of a vec tile as the plan writes them (one span where they touch).
  std::vector<std::pair<int64_t, int64_t>> spans(const detail::VecBlock& block) const {
    if (block.diagonal_begin <= block.sink_end) {
      return {{0, std::max(block.sink_end, block.diagonal_end)}};
    }
    return {{0, block.sink_end}, {block.diagonal_begin, block.diagonal_end}};
  }

  std::vector<int64_t> span_keys(int64_t row) const {
    std::vector<int64_t> keys;
    for (const auto& [begin, end] : spans(row_tile(row))) {
      for (int64_t key = begin; key < std::min(end, visible(row)); ++key) keys.push_back(key);
    }
    return keys;
  }

  void select_once() {
    const PatternInputs inputs{problem_.q, problem_.k, problem_.scale};
    detail::KeyCache cache;
    const detail::HeadOperands operands(inputs, shape_, 0, cache);
    tiles_.resize(static_cast<std::size_t>(detail::vec_tile_count(shape_, params_)));
    detail::parallel_for(static_cast<int64_t>(tiles_.size()), 0, [&](int64_t t) {
      const detail::VecBlock tile = detail::vec_tile(shape_, params_, t);
      Tile& entry = tiles_[t];
      entry.rows = tile.row_end - tile.row_begin;
      for (int64_t row = tile.row_begin; row < tile.row_end; ++row) {
        for (const auto& [begin, end] : spans(tile)) {
          entry.span_pairs += visible_pairs(begin, end, visible(row));
        }
      }
      const std::vector<detail::VecKeyMargin> margins =
          detail::vec_tile_key_margins(operands, shape_, params_, t);
      for (const detail::VecKeyMargin& candidate : margins) {
        entry.sorted_margins.push_back(candidate.margin);
      }
      std::sort(entry.sorted_margins.begin(), entry.sorted_margins.end(), std::greater<float>());
    });
    for (int64_t row : rows_) {
      row_candidates_.push_back(
          detail::vec_tile_key_margins(operands, shape_, params_, row_tile_index(row)));
    }
  }

  // The vec tile (vec.h: whole pooled blocks) holding `row`, and its index.
  int64_t row_tile_index(int64_t row) const {
    return row / (detail::vec_tile_blocks(shape_, params_) * params_.pooling);
  }
  detail::VecBlock row_tile(int64_t row) const {
    return detail::vec_tile(shape_, params_, row_tile_index(row));
  }

  double lse(int64_t row, const std::vector<int64_t>& keys) const {
    const int64_t head_dim = problem_.q.shape[3];
    return row_lse(problem_.tensors.q.data_as<float>() + row * head_dim,
                   problem_.tensors.k.data_as<float>(), head_dim, problem_.scale, keys);
  }

  const HeadProblem& problem_;
  detail::VecParams params_;
  PlanShape shape_;
  std::vector<int64_t> rows_;
  std::vector<double> dense_lse_;
  int64_t pairs_ = 0;
  std::vector<Tile> tiles_;
  std::vector<std::vector<detail::VecKeyMargin>> row_candidates_;  // per sampled row
};

}  // namespace

namespace {

PatternSpec checked_base(const VecSearchOptions& options) {
  const PatternSpec base = resolve_pattern(options.base);
  if (base.name != "vec") {
    throw_invalid_argument("VecSearchOptions base", "a vec spec", base.to_string());
  }
  if (options.extra_ratio <= 0.0 || options.extra_ratio >= 1.0) {
    throw_invalid_argument("VecSearchOptions extra_ratio", "in (0, 1)",
                           std::to_string(options.extra_ratio));
  }
  if (options.target_recall <= 0.0 || options.target_recall > 1.0) {
    throw_invalid_argument("VecSearchOptions target_recall", "in (0, 1]",
                           std::to_string(options.target_recall));
  }
  return base;
}

HeadProblem head_problem(const TensorView& q, const TensorView& k, const TensorView& v,
                         int64_t head, float scale) {
  HeadProblem problem{detail::head_tensors(q, k, v, head), {}, {}, {}, scale};
  problem.q = detail::as_one_head(problem.tensors.q);
  problem.k = detail::as_one_head(problem.tensors.k);
  problem.v = detail::as_one_head(problem.tensors.v);
  if (problem.scale == 0.0f) {
    problem.scale = 1.0f / std::sqrt(static_cast<float>(problem.q.shape[3]));
  }
  return problem;
}

}  // namespace

VecSample score_vec_alpha(const TensorView& q, const TensorView& k, const TensorView& v,
                          int64_t head, const VecSearchOptions& options, int64_t alpha_ppm) {
  const PatternSpec base = checked_base(options);
  const HeadProblem problem = head_problem(q, k, v, head, options.scale);
  return HeadScorer(problem, options, base).score(alpha_ppm);
}

VecHeadSearch search_vec_head(const TensorView& q, const TensorView& k, const TensorView& v,
                              int64_t head, const VecSearchOptions& options) {
  const PatternSpec base = checked_base(options);
  const HeadProblem problem = head_problem(q, k, v, head, options.scale);
  const HeadScorer scorer(problem, options, base);
  VecHeadSearch search;
  // Recall falls as alpha grows; keep [reached, missed) around the largest alpha at the target.
  int64_t reached = 0;
  int64_t missed = kNoKeysAlpha;
  search.samples.push_back(scorer.score(reached));
  search.samples.push_back(scorer.score(missed));
  if (search.samples.back().recall >= options.target_recall) reached = missed;
  for (int step = 0; step < options.iterations && missed - reached > 1; ++step) {
    const int64_t middle = reached + (missed - reached) / 2;
    search.samples.push_back(scorer.score(middle));
    if (search.samples.back().recall >= options.target_recall) {
      reached = middle;
    } else {
      missed = middle;
    }
  }
  search.alpha_ppm = reached;
  double extra = static_cast<double>(reached);
  for (int k = 0; k < options.extra_samples; ++k) {
    extra *= options.extra_ratio;
    const auto alpha = static_cast<int64_t>(extra);
    const bool seen = std::any_of(search.samples.begin(), search.samples.end(),
                                  [&](const VecSample& s) { return s.alpha_ppm == alpha; });
    if (!seen) search.samples.push_back(scorer.score(alpha));
  }
  std::sort(search.samples.begin(), search.samples.end(),
            [](const VecSample& a, const VecSample& b) { return a.alpha_ppm < b.alpha_ppm; });
  return search;
}

std::vector<std::size_t> allocate_vec_heads(const std::vector<std::vector<VecSample>>& heads,
                                            double max_mean_density, int64_t density_steps) {
  if (density_steps < 1) {
    throw_invalid_argument("density_steps", ">= 1", std::to_string(density_steps));
  }
  const auto count = static_cast<int64_t>(heads.size());
  const auto budget = static_cast<int64_t>(
      std::floor(max_mean_density * static_cast<double>(density_steps * count) + 1e-9));
  const auto units = [&](const VecSample& sample) {
    return static_cast<int64_t>(std::ceil(sample.density * density_steps - 1e-9));
  };
  constexpr double kNone = -std::numeric_limits<double>::infinity();
  // best[c]: the most summed recall of the heads so far at total density units c.
  std::vector<double> best(static_cast<std::size_t>(std::max<int64_t>(budget, 0) + 1), kNone);
  if (budget >= 0) best[0] = 0.0;
  std::vector<std::vector<int32_t>> choice(heads.size());
  for (std::size_t h = 0; h < heads.size(); ++h) {
    if (heads[h].empty()) throw_invalid_argument("heads", "samples for every head", "none");
    std::vector<double> next(best.size(), kNone);
    choice[h].assign(best.size(), -1);
    for (std::size_t c = 0; c < best.size(); ++c) {
      if (best[c] == kNone) continue;
      for (std::size_t s = 0; s < heads[h].size(); ++s) {
        const std::size_t total = c + static_cast<std::size_t>(units(heads[h][s]));
        if (total >= best.size()) continue;
        const double recall = best[c] + heads[h][s].recall;
        if (recall > next[total]) {
          next[total] = recall;
          choice[h][total] = static_cast<int32_t>(s);
        }
      }
    }
    best = std::move(next);
  }
  const auto end = std::max_element(best.begin(), best.end());
  if (best.empty() || *end == kNone) {
    throw_invalid_argument("max_mean_density", "at least the mean of the heads' sparsest samples",
                           std::to_string(max_mean_density));
  }
  std::vector<std::size_t> chosen(heads.size());
  auto total = static_cast<std::size_t>(end - best.begin());
  for (std::size_t h = heads.size(); h-- > 0;) {
    chosen[h] = static_cast<std::size_t>(choice[h][total]);
    total -= static_cast<std::size_t>(units(heads[h][chosen[h]]));
  }
  return chosen;
}

void add_vec_heads(PatternConfig& config, int64_t layer, const VecSearchOptions& options,
                   const std::vector<std::vector<VecSample>>& heads,
                   const std::vector<std::size_t>& chosen, std::span<const int64_t> head_ids) {
  if (chosen.size() != heads.size()) {
    throw_invalid_argument("chosen", std::to_string(heads.size()) + " choices (one per head)",
                           std::to_string(chosen.size()));
  }
  if (!head_ids.empty() && head_ids.size() != heads.size()) {
    throw_invalid_argument("head_ids", std::to_string(heads.size()) + " ids (one per head)",
                           std::to_string(head_ids.size()));
  }
  const PatternSpec base = resolve_pattern(options.base);
  for (std::size_t h = 0; h < heads.size(); ++h) {
    PatternSpec spec = base;
    spec.params[kAlphaParam] = heads[h].at(chosen[h]).alpha_ppm;
    config.head_specs[layer][head_ids.empty() ? static_cast<int64_t>(h) : head_ids[h]] = spec;
  }
}

}  // namespace mmsparse
