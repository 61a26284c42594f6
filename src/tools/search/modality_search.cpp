// The three stages of MMInference's modality-aware search (Alg. 4) for one layer, head by head.

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "mmsparse/attention.h"
#include "mmsparse/tools/search.h"
#include "mmsparse/status.h"
#include "core/parallel.h"
#include "tools/search/scope.h"

namespace mmsparse {
namespace {

using detail::modality_bit;
using detail::ModalitySet;
using detail::Scope;

// Scores closer than these are ties: measured on about a hundred sampled rows, smaller gaps are
// noise. Recall decides first, then output error (relative gap), then the lower cost.
constexpr double kRecallTie = 1e-3;
constexpr double kRelativeOutputErrorTie = 0.05;
// The inter-modality modes stage 3 can score: none, Q-boundary, 2D-boundary, item boundary.
// K-boundary (1) builds the same plan as none (docs/dynamic_patterns.md), so it is not scored
// twice.
constexpr int64_t kScoredBoundaryModes[] = {0, 2, 3, 4};
constexpr char kBoundaryParam[] = "boundary";
constexpr char kItemSinksParam[] = "item_sinks";
// The layer recall target's scope: the recall ladder scored on the whole sequence.
constexpr char kRaiseStage[] = "raise";
constexpr char kFullScope[] = "full";

bool better(const CandidateScore& a, const CandidateScore& b) {
  if (std::abs(a.recall - b.recall) > kRecallTie) return a.recall > b.recall;
  const double error_gap = std::abs(a.output_error - b.output_error);
  if (error_gap > kRelativeOutputErrorTie * std::max(a.output_error, b.output_error)) {
    return a.output_error < b.output_error;
  }
  return a.cost < b.cost;
}

bool has_boundary_modes(const PatternSpec& spec) {
  return spec.params.count(kBoundaryParam) != 0;
}

void check_search_inputs(const TensorView& q, const TensorView& k, const TensorView& v,
                         const ModalityLayout& layout, const SearchOptions& options,
                         std::span<const int64_t> q_heads) {
  const AttentionProblem problem = describe_attention(q, k, v, {});
  if (problem.device.type != DeviceType::kCPU) {
    throw_invalid_argument("q", "host tensors (the search scores on the CPU reference)",
                           device_name(problem.device));
  }
  if (problem.batch != 1) {
    throw_invalid_argument("q batch", "1 (one calibration sample)", std::to_string(problem.batch));
  }
  if (problem.kv_len != problem.q_len) {
    throw_invalid_argument("k seq_len", "q's seq_len " + std::to_string(problem.q_len) +
                                            " (prefill)", std::to_string(problem.kv_len));
  }
  if (layout.length() != problem.q_len) {
    throw_invalid_argument("layout length", "q's seq_len " + std::to_string(problem.q_len),
                           std::to_string(layout.length()));
  }
  if (!(options.target_mean_recall >= 0.0 && options.target_mean_recall <= 1.0)) {
    throw_invalid_argument("target_mean_recall", "a value in [0, 1] (0: off)",
                           std::to_string(options.target_mean_recall));
  }
  if (options.boundary_modes.empty()) {
    throw_invalid_argument("boundary_modes", "at least one of 0, 2, 3, 4", "none");
  }
  for (int64_t mode : options.boundary_modes) {
    if (std::find(std::begin(kScoredBoundaryModes), std::end(kScoredBoundaryModes), mode) ==
        std::end(kScoredBoundaryModes)) {
      throw_invalid_argument("boundary_modes",
                             "modes among 0 (none), 2 (Q-boundary), 3 (2D-boundary), 4 (item "
                             "boundary)",
                             std::to_string(mode));
    }
  }
  if (options.item_sinks.empty()) {
    throw_invalid_argument("item_sinks", "at least one count (0: none)", "none");
  }
  for (int64_t count : options.item_sinks) {
    if (count < 0) throw_invalid_argument("item_sinks", "counts >= 0", std::to_string(count));
  }
  if (options.sample_rows < 1) {
    throw_invalid_argument("sample_rows", ">= 1", std::to_string(options.sample_rows));
  }
  if (!(options.recall_margin_se >= 0.0)) {
    throw_invalid_argument("recall_margin_se", ">= 0 (standard errors)",
                           std::to_string(options.recall_margin_se));
  }
  if (options.segment_tail_rows < 0) {
    throw_invalid_argument("segment_tail_rows", ">= 0", std::to_string(options.segment_tail_rows));
  }
  for (int64_t head : q_heads) {
    if (head < 0 || head >= problem.q_heads) {
      throw_invalid_argument("q_heads", "indices in [0, " + std::to_string(problem.q_heads) + ")",
                             std::to_string(head));
    }
  }
}

// Heads are searched in parallel, but a measured cost times kernels on one GPU: concurrent timings
// would measure each other. So one lock serialises the model's calls, and the scopes' device work
// (SearchOptions::score_device: builds, scoring runs) takes the same lock, recursively, so that
// nothing runs on the device beside a timing. Host work (CPU scoring, host builds) runs outside it.
class SerializedCost final : public CostModel {
 public:
  explicit SerializedCost(CostModel& model) : model_(model) {}
  std::unique_ptr<CostInputs> prepare(const TensorView& q, const TensorView& k,
                                      const TensorView& v) override {
    const std::lock_guard<std::recursive_mutex> lock(mutex_);
    return model_.prepare(q, k, v);
  }
  double cost(const Plan& plan, const CostInputs& inputs) override {
    const std::lock_guard<std::recursive_mutex> lock(mutex_);
    return model_.cost(plan, inputs);
  }
  double cost_prepared(const PreparedPlan& prepared, const CostInputs& inputs) override {
    const std::lock_guard<std::recursive_mutex> lock(mutex_);
    return model_.cost_prepared(prepared, inputs);
  }
  double cost_prepared_within(const PreparedPlan& prepared, const CostInputs& inputs,
                              double limit) override {
    const std::lock_guard<std::recursive_mutex> lock(mutex_);
    return model_.cost_prepared_within(prepared, inputs, limit);
  }
  double index_cost(const PatternSpec& spec, const PlanShape& shape, const ModalityLayout& layout,
                    float scale, const CostInputs& inputs) override {
    const std::lock_guard<std::recursive_mutex> lock(mutex_);
    return model_.index_cost(spec, shape, layout, scale, inputs);
  }
  bool measured() const override { return model_.measured(); }
  std::string unit() const override { return model_.unit(); }
  std::string gpu() const override { return model_.gpu(); }
  int64_t tile_rows(int64_t head_dim) const override { return model_.tile_rows(head_dim); }
  std::recursive_mutex& mutex() { return mutex_; }

 private:
  CostModel& model_;
  std::recursive_mutex mutex_;
};

// Static plans depend on the scope's shape and layout alone, which every head shares: their cost
// on a scope is measured once for the layer (the first head to need it) and reused, instead of
// timed again per head (only a measurement's noise differs between heads' timings).
class StaticCostCache {
 public:
  template <class Compute>
  double get(const std::string& scope, const PatternSpec& spec, Compute&& compute) {
    if (is_dynamic(spec)) return compute();
    const std::lock_guard<std::mutex> lock(mutex_);
    const std::string key = scope + "|" + spec.to_string();
    const auto found = costs_.find(key);
    if (found != costs_.end()) return found->second;
    return costs_[key] = compute();
  }

 private:
  std::mutex mutex_;
  std::map<std::string, double> costs_;
};

class HeadSearch {
 public:
  HeadSearch(int64_t q_head, const TensorView& q, const TensorView& k, const TensorView& v,
             const ModalityLayout& layout, SerializedCost& cost_model,
             StaticCostCache& static_costs, const PatternSpec& budget_spec,
             const SearchOptions& options)
      : q_head_(q_head),
        layout_(layout),
        cost_model_(cost_model),
        static_costs_(static_costs),
        budget_spec_(budget_spec),
        options_(options),
        tile_rows_(cost_model.tile_rows(q.shape[3])),
        tensors_(detail::head_tensors(q, k, v, q_head)),
        full_(kFullScope, tensors_, layout, detail::kAllModalities, detail::kAllModalities,
              detail::kAllModalities, tile_rows_, options, &cost_model.mutex()) {}

  HeadSearchResult run(const std::vector<PatternSpec>& space) {
    result_.q_head = q_head_;
    result_.budget_cost = budget_on(full_).value_or(0.0);
    std::vector<Modality> present;
    ModalitySet present_set = 0;
    for (uint8_t type : layout_.token_types()) present_set |= modality_bit(static_cast<Modality>(type));
    for (int code = 0; code < kNumModalities; ++code) {
      if (present_set & modality_bit(static_cast<Modality>(code))) {
        present.push_back(static_cast<Modality>(code));
      }
    }

    // (1) Intra-modality: each modality's tokens alone.
    for (Modality modality : present) {
      const ModalitySet only = modality_bit(modality);
      Scope scope(std::string(modality_name(modality)), tensors_, layout_, only, only, only,
                  tile_rows_, options_, &cost_model_.mutex());
      search_scope(scope, space, "intra");
    }
    // (2) Cross-modality: queries of one modality against keys of another, on the two
    // modalities' tokens.
    for (Modality query : present) {
      for (Modality key : present) {
        if (query == key) continue;
        Scope scope(std::string(modality_name(query)) + "->" + std::string(modality_name(key)),
                    tensors_, layout_, modality_bit(query) | modality_bit(key),
                    modality_bit(query), modality_bit(key), tile_rows_, options_,
                    &cost_model_.mutex());
        search_scope(scope, space, "cross");
      }
    }
    // (3) Inter-modality: the scopes' winners per family, with each boundary mode, on the whole
    // sequence.
    const std::optional<CandidateScore> best =
        search_scope(full_, inter_candidates(), "inter").winner;
    if (!best) {
      choose_dense("no candidate within the budget");
    } else if (best->recall - options_.recall_margin_se * best->recall_se <
               options_.dense_below_recall) {
      choose_dense("best candidate " + best->spec.to_string() + " recalls " +
                   std::to_string(best->recall) + " < dense_below_recall");
    } else {
      result_.chosen = *best;
    }
    result_.over_budget = static_cast<int64_t>(over_budget_.size());
    return result_;
  }

  // Each spec scored and costed on the whole sequence, index included, budget aside; specs that
  // cannot be built there are left out.
  std::vector<CandidateScore> score_on_full_sequence(const std::vector<PatternSpec>& specs) {
    std::vector<CandidateScore> scores;
    for (const PatternSpec& spec : specs) {
      const std::optional<detail::BuiltCandidate> candidate = full_.build(spec);
      if (!candidate) continue;
      const double cost = cost_on(full_, spec, *candidate);
      const detail::Accuracy accuracy = full_.score(*candidate);
      scores.push_back({spec, accuracy.recall, accuracy.recall_se, accuracy.output_error, cost,
                        full_.index_cost(spec, cost_model_)});
    }
    return scores;
  }

  // The index cost of the spec on the whole sequence.
  double index_cost_on_full_sequence(const PatternSpec& spec) {
    return full_.index_cost(spec, cost_model_);
  }

 private:
  int64_t q_head_;
  const ModalityLayout& layout_;
  SerializedCost& cost_model_;
  StaticCostCache& static_costs_;
  const PatternSpec& budget_spec_;
  const SearchOptions& options_;
  int64_t tile_rows_;
  detail::HeadTensors tensors_;
  Scope full_;
  std::set<std::string> over_budget_;
  HeadSearchResult result_;

  // The budget spec's cost on the scope's tokens: candidates compete at comparable cost on the
  // tokens they are scored on (App. C.5), whole sequence or one modality's part of it.
  std::optional<double> budget_on(Scope& scope) {
    const std::optional<detail::BuiltCandidate> candidate = scope.build(budget_spec_);
    if (!candidate) return std::nullopt;
    return cost_on(scope, budget_spec_, *candidate);
  }

  // The candidate's cost on the scope; a static spec's is shared by every head (StaticCostCache).
  // With a `limit` (the scope's budget), a cost far over it may be a quicker reading
  // (CostModel::cost_prepared_within); the budget of a scope is the same for every head, so a
  // shared static cost is read against the same limit.
  double cost_on(Scope& scope, const PatternSpec& spec, const detail::BuiltCandidate& candidate,
                 double limit = std::numeric_limits<double>::infinity()) {
    return static_costs_.get(scope.name(), spec,
                             [&] { return scope.cost(candidate, cost_model_, limit); });
  }

  const ScopeSearch& search_scope(Scope& scope, const std::vector<PatternSpec>& candidates,
                                  const std::string& stage) {
    ScopeSearch& search = result_.scopes.emplace_back();
    search.stage = stage;
    search.scope = scope.name();
    const auto done = [&]() -> const ScopeSearch& {
      if (options_.on_scope_done) options_.on_scope_done(q_head_, search);
      return search;
    };
    // Nothing to score: e.g. no query of the pair sees a key of the pair.
    if (!scope.has_rows()) return done();
    const std::optional<double> budget = scope.is_full() ? result_.budget_cost : budget_on(scope);
    if (!budget) return done();
    search.budget_cost = *budget;
    for (const PatternSpec& spec : candidates) {
      // Before the plan is built: a host-built candidate's build is the slow part.
      if (options_.index_device &&
          !builds_plan_on_device(spec, scope.shape(), &scope.layout(), *options_.index_device)) {
        ++search.host_index;
        continue;
      }
      const std::optional<detail::BuiltCandidate> candidate = scope.build(spec);
      if (!candidate) {
        ++search.not_applicable;
        continue;
      }
      const double cost = cost_on(scope, spec, *candidate, search.budget_cost);
      if (cost > search.budget_cost) {
        ++search.over_budget;
        over_budget_.insert(spec.to_string());
        continue;
      }
      const detail::Accuracy accuracy = scope.score(*candidate);
      search.scored.push_back(
          {spec, accuracy.recall, accuracy.recall_se, accuracy.output_error, cost});
      if (!search.winner || better(search.scored.back(), *search.winner)) {
        search.winner = search.scored.back();
      }
    }
    return done();
  }

  // Each stage 1 and 2 scope's best candidate of each pattern family (grid, a-shape,
  // vertical-slash), each grid / vertical-slash one with every boundary mode when the sequence mixes
  // modalities (with one modality the modes build the same plan). Not only the scope's overall
  // winner: a family that loses on a modality's own tokens can win on the whole sequence, where
  // boundary modes and whole-sequence costs apply (docs/search.md).
  std::vector<PatternSpec> inter_candidates() const {
    std::vector<PatternSpec> candidates;
    std::set<std::string> seen;
    const auto add = [&](const PatternSpec& spec) {
      if (seen.insert(spec.to_string()).second) candidates.push_back(spec);
    };
    std::vector<PatternSpec> winners;
    for (const ScopeSearch& search : result_.scopes) {
      std::map<std::string, const CandidateScore*> family_best;
      for (const CandidateScore& score : search.scored) {
        const CandidateScore*& best = family_best[score.spec.name];
        if (best == nullptr || better(score, *best)) best = &score;
      }
      for (const auto& [family, best] : family_best) winners.push_back(best->spec);
    }
    for (const PatternSpec& winner : winners) {
      if (!has_boundary_modes(winner) || !layout_.is_mixed()) {
        add(winner);
        continue;
      }
      for (int64_t mode : options_.boundary_modes) {
        for (int64_t item_sinks : options_.item_sinks) {
          PatternSpec with_mode = winner;
          with_mode.params[kBoundaryParam] = mode;
          with_mode.params[kItemSinksParam] = item_sinks;
          add(with_mode);
        }
      }
    }
    return candidates;
  }

  void choose_dense(const std::string& reason) {
    const PatternSpec dense{"dense", {}};
    result_.chosen = {dense, 1.0, 0.0, 0.0, cost_on(full_, dense, *full_.build(dense))};
    result_.dense_fallback = true;
    result_.fallback_reason = reason;
  }
};

// A step up the recall ladder costs at least this much (in the cost model's units) when the
// ladder step happens to cost no more than the choice it replaces: such steps go first.
constexpr double kFreeStepCost = 1e-12;

double total_cost(const CandidateScore& score) { return score.cost + score.index_cost; }

// The layer-level recall target (SearchOptions::target_mean_recall): greedy steps up the ladder,
// each time the one with the most recall gained per cost added, over the heads below the target
// (only they can lift the mean by much; their ladders are scored in parallel, once). Costs are
// attention plus index, for the steps and for the choices they would replace: a step of wide line
// budgets that computes nearly every pair costs its index on top of dense's attention, so dense,
// which needs none, wins it.
// Each scored ladder is recorded as a "raise" scope of its head (reported through `on_scope_done`
// as it completes); a raised head's scope names the step taken as its winner.
template <class MakeSearch>
void raise_to_target(std::vector<HeadSearchResult>& heads, double target, double margin_se,
                     int head_workers, const std::vector<PatternSpec>& ladder,
                     MakeSearch&& make_search,
                     const std::function<void(int64_t, const ScopeSearch&)>& on_scope_done) {
  // The target is met when the mean less its margin (the sample's error) reaches it.
  const auto below_target = [&] {
    return mean_recall(heads) - margin_se * mean_recall_se(heads) < target;
  };
  if (!below_target()) return;
  std::vector<std::size_t> below;
  for (std::size_t i = 0; i < heads.size(); ++i) {
    if (heads[i].chosen.recall < target) below.push_back(i);
  }
  std::vector<std::vector<CandidateScore>> steps(below.size());
  detail::parallel_for(std::ssize(below), std::min<int>(head_workers, std::ssize(below)),
                       [&](int64_t i) {
                         HeadSearchResult& head = heads[below[i]];
                         HeadSearch search = make_search(head.q_head);
                         head.chosen.index_cost =
                             search.index_cost_on_full_sequence(head.chosen.spec);
                         steps[i] = search.score_on_full_sequence(ladder);
                         ScopeSearch& scope = head.scopes.emplace_back();
                         scope.stage = kRaiseStage;
                         scope.scope = kFullScope;
                         scope.budget_cost = head.budget_cost;
                         scope.scored = steps[i];
                         scope.not_applicable = std::ssize(ladder) - std::ssize(steps[i]);
                         if (on_scope_done) on_scope_done(head.q_head, scope);
                       });
  while (below_target()) {
    std::optional<std::pair<std::size_t, std::size_t>> best;
    double best_ratio = 0.0;
    for (std::size_t b = 0; b < below.size(); ++b) {
      const CandidateScore& current = heads[below[b]].chosen;
      for (std::size_t s = 0; s < steps[b].size(); ++s) {
        const CandidateScore& step = steps[b][s];
        if (step.recall <= current.recall) continue;
        const double ratio = (step.recall - current.recall) /
                             std::max(total_cost(step) - total_cost(current), kFreeStepCost);
        if (!best || ratio > best_ratio) {
          best = {b, s};
          best_ratio = ratio;
        }
      }
    }
    if (!best) return;  // every ladder is climbed as far as it recalls more
    HeadSearchResult& head = heads[below[best->first]];
    if (!head.within_budget) head.within_budget = head.chosen;
    head.chosen = steps[best->first][best->second];
    head.scopes.back().winner = head.chosen;
  }
}

}  // namespace

double mean_recall(std::span<const HeadSearchResult> heads) {
  double sum = 0.0;
  for (const HeadSearchResult& head : heads) sum += head.chosen.recall;
  return heads.empty() ? 1.0 : sum / static_cast<double>(heads.size());
}

double mean_recall_se(std::span<const HeadSearchResult> heads) {
  double variance = 0.0;
  for (const HeadSearchResult& head : heads) variance += head.chosen.recall_se * head.chosen.recall_se;
  return heads.empty() ? 0.0 : std::sqrt(variance) / static_cast<double>(heads.size());
}

LayerSearchResult search_layer(const TensorView& q, const TensorView& k, const TensorView& v,
                               const ModalityLayout& layout, CostModel& cost_model,
                               const SearchOptions& options, std::span<const int64_t> q_heads) {
  check_search_inputs(q, k, v, layout, options, q_heads);
  std::vector<int64_t> heads(q_heads.begin(), q_heads.end());
  if (heads.empty()) {
    for (int64_t head = 0; head < q.shape[2]; ++head) heads.push_back(head);
  }
  const int64_t seq_len = layout.length();

  LayerSearchResult result;
  // The budget is a static pattern: its plan needs no inputs. Checked here, once, so that a bad
  // budget is reported as such before any head is searched.
  PatternSpec budget_spec;
  try {
    budget_spec = PatternSpec::parse(options.budget_spec);
    // The budget's windows are 128K values like the candidates', and scale with them.
    if (options.scale_to_length) budget_spec = scale_spec_to_length(budget_spec, seq_len);
    budget_spec = resolve_pattern(budget_spec, &layout);
    (void)build_plan(budget_spec, PlanShape{1, 1, seq_len, seq_len, kDefaultTileRows}, &layout);
  } catch (const Error& error) {
    throw_invalid_argument("budget_spec",
                           "a static pattern spec such as " + std::string(kDefaultBudgetSpec),
                           "\"" + options.budget_spec + "\" (" + error.what() + ")");
  }
  result.budget_spec = budget_spec;
  result.space = search_space(layout, seq_len, options.scale_to_length);
  for (const int64_t alpha : options.vec_alphas) {
    result.space.push_back(resolve_pattern(PatternSpec{"vec", {{"alpha_ppm", alpha}}}, &layout));
  }

  // Heads are independent: one per worker, the CPU threads left over shared by each head's
  // reference attention. Results do not depend on the number of threads.
  const int threads = detail::resolve_threads(options.num_threads);
  const int head_workers = static_cast<int>(std::min<int64_t>(threads, std::ssize(heads)));
  SearchOptions head_options = options;
  head_options.num_threads = std::max(1, threads / head_workers);
  std::mutex progress_mutex;
  if (options.on_scope_done) {
    head_options.on_scope_done = [&](int64_t q_head, const ScopeSearch& search) {
      const std::lock_guard<std::mutex> lock(progress_mutex);
      options.on_scope_done(q_head, search);
    };
  }
  SerializedCost serialized_cost(cost_model);
  StaticCostCache static_costs;
  result.heads.resize(heads.size());
  const auto make_search = [&](int64_t q_head) {
    return HeadSearch(q_head, q, k, v, layout, serialized_cost, static_costs, budget_spec,
                      head_options);
  };
  detail::parallel_for(std::ssize(heads), head_workers, [&](int64_t i) {
    result.heads[i] = make_search(heads[i]).run(result.space);
  });
  if (options.target_mean_recall > 0.0) {
    raise_to_target(result.heads, options.target_mean_recall, options.recall_margin_se,
                    head_workers,
                    recall_ladder(seq_len, options.scale_to_length), make_search,
                    head_options.on_scope_done);
  }
  result.budget_cost = result.heads.front().budget_cost;
  return result;
}

}  // namespace mmsparse
