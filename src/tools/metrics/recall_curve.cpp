// Recall-versus-density curves of pattern families against the token and tile oracles
// (include/mmsparse/tools/recall_curve.h).

#include "mmsparse/tools/recall_curve.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <numeric>
#include <string>
#include <tuple>
#include <vector>

#include "core/parallel.h"
#include "core/plan_coverage.h"
#include "cpu/dot.h"
#include "methods/estimate/estimation.h"
#include "methods/vec/vec.h"
#include "mmsparse/status.h"
#include "mmsparse/tools/metrics.h"
#include "tools/search/scope.h"

namespace mmsparse {
namespace {

constexpr char kVecPattern[] = "vec";
// The oracle counts a target as reached within this relative margin, so that summing the same
// probabilities in another order never makes it look worse than a method it dominates.
constexpr double kTargetSlack = 1e-9;

// One query head as a problem of its own, with the softmax probabilities of its sampled rows.
struct SampledHead {
  detail::HeadTensors tensors;
  TensorView q, k;
  float scale = 0.0f;
  bool causal = true;
  int64_t q_len = 0, kv_len = 0;
  std::vector<int64_t> rows;              // sampled rows that see at least one key
  std::vector<std::vector<float>> probs;  // [rows][visible keys], each row summing to 1
  int64_t pairs = 0;                      // Σ visible keys over the rows

  int64_t visible(int64_t row) const {
    return causal ? std::clamp<int64_t>(row + kv_len - q_len + 1, 0, kv_len) : kv_len;
  }
};

void row_probabilities(const SampledHead& head, int64_t row, std::vector<float>& probs) {
  const int64_t head_dim = head.q.shape[3];
  const float* query = head.tensors.q.data_as<float>() + row * head_dim;
  const float* keys = head.tensors.k.data_as<float>();
  probs.resize(static_cast<std::size_t>(head.visible(row)));
  float max_score = -std::numeric_limits<float>::infinity();
  for (std::size_t key = 0; key < probs.size(); ++key) {
    probs[key] = head.scale * cpu::dot(query, keys + key * head_dim, head_dim);
    max_score = std::max(max_score, probs[key]);
  }
  double sum = 0.0;
  for (float& p : probs) {
    p = std::exp(p - max_score);
    sum += p;
  }
  for (float& p : probs) p = static_cast<float>(p / sum);
}

SampledHead sample_head(const TensorView& q, const TensorView& k, int64_t head,
                        const RecallCurveOptions& options) {
  if (q.ndim != 4 || k.ndim != 4) {
    throw_invalid_argument("q, k", "[batch, len, heads, head_dim] views", "other ranks");
  }
  if (head < 0 || head >= q.shape[2]) {
    throw_invalid_argument("head", "in [0, " + std::to_string(q.shape[2]) + ")",
                           std::to_string(head));
  }
  if (options.sample_rows < 0) {
    throw_invalid_argument("sample_rows", ">= 0 (0 = every row)",
                           std::to_string(options.sample_rows));
  }
  SampledHead sampled;
  sampled.tensors = detail::head_tensors(q, k, k, head);
  sampled.q = detail::as_one_head(sampled.tensors.q);
  sampled.k = detail::as_one_head(sampled.tensors.k);
  sampled.scale =
      options.scale != 0.0f ? options.scale : 1.0f / std::sqrt(static_cast<float>(q.shape[3]));
  sampled.causal = options.causal;
  sampled.q_len = q.shape[1];
  sampled.kv_len = k.shape[1];
  std::vector<int64_t> rows(static_cast<std::size_t>(sampled.q_len));
  std::iota(rows.begin(), rows.end(), int64_t{0});
  if (options.sample_rows > 0) rows = sample_rows(sampled.q_len, options.sample_rows);
  for (int64_t row : rows) {
    if (sampled.visible(row) > 0) sampled.rows.push_back(row);
  }
  sampled.probs.resize(sampled.rows.size());
  detail::parallel_for(
      static_cast<int64_t>(sampled.rows.size()), options.num_threads,
      [&](int64_t n) { row_probabilities(sampled, sampled.rows[n], sampled.probs[n]); });
  for (const std::vector<float>& row : sampled.probs)
    sampled.pairs += static_cast<int64_t>(row.size());
  return sampled;
}

// Kept mass and kept pairs of each sampled row.
struct RowKept {
  std::vector<double> mass;
  std::vector<int64_t> pairs;
};

CurvePoint point_of(const std::string& spec, const RowKept& kept, const SampledHead& head) {
  CurvePoint point;
  point.spec = spec;
  double mass = 0.0;
  int64_t pairs = 0;
  for (std::size_t n = 0; n < kept.mass.size(); ++n) {
    mass += kept.mass[n];
    pairs += kept.pairs[n];
  }
  const auto rows = static_cast<double>(kept.mass.size());
  point.recall = rows > 0 ? mass / rows : 1.0;
  point.density =
      head.pairs > 0 ? static_cast<double>(pairs) / static_cast<double>(head.pairs) : 0.0;
  return point;
}

// Any spec: its one-head plan, read row by row.
CurvePoint plan_point(const PatternSpec& spec, const SampledHead& head,
                      const RecallCurveOptions& options) {
  const PatternInputs inputs{head.q, head.k, head.scale};
  const Plan plan =
      build_plan(spec, {1, 1, head.q_len, head.kv_len, options.tile_rows}, options.layout, &inputs);
  const detail::RowCoverage coverage(plan, 0);
  RowKept kept{std::vector<double>(head.rows.size()), std::vector<int64_t>(head.rows.size())};
  detail::parallel_for(static_cast<int64_t>(head.rows.size()), options.num_threads, [&](int64_t n) {
    const std::vector<float>& probs = head.probs[n];
    const auto visible = static_cast<int64_t>(probs.size());
    coverage.for_each_range(head.rows[n], [&](int64_t begin, int64_t end) {
      for (int64_t key = begin; key < std::min(end, visible); ++key) kept.mass[n] += probs[key];
      kept.pairs[n] += std::max<int64_t>(0, std::min(end, visible) - begin);
    });
  });
  return point_of(spec.to_string(), kept, head);
}

// A sampled row's view of one vec selection: the mass and pairs of its spans (sinks and diagonal,
// which every alpha keeps) and its block's candidates by descending margin with prefix sums.
struct VecRow {
  double span_mass = 0.0;
  int64_t span_pairs = 0;
  std::vector<float> margins;       // descending
  std::vector<double> prefix_mass;  // [candidates + 1]
};

VecRow vec_row(const std::vector<float>& probs, const detail::VecBlock& block,
               std::vector<detail::VecKeyMargin> candidates) {
  VecRow result;
  const auto visible = static_cast<int64_t>(probs.size());
  const auto add_span = [&](int64_t begin, int64_t end) {
    for (int64_t key = begin; key < std::min(end, visible); ++key) result.span_mass += probs[key];
    result.span_pairs += std::max<int64_t>(0, std::min(end, visible) - begin);
  };
  if (block.diagonal_begin <= block.sink_end) {
    add_span(0, std::max(block.sink_end, block.diagonal_end));
  } else {
    add_span(0, block.sink_end);
    add_span(block.diagonal_begin, block.diagonal_end);
  }
  std::stable_sort(candidates.begin(), candidates.end(),
                   [](const detail::VecKeyMargin& a, const detail::VecKeyMargin& b) {
                     return a.margin > b.margin;
                   });
  result.prefix_mass.push_back(0.0);
  for (const detail::VecKeyMargin& candidate : candidates) {
    // Candidates precede the block's diagonal (causal) or are any key (non-causal): all visible.
    const double p = candidate.key < visible ? probs[candidate.key] : 0.0;
    result.margins.push_back(candidate.margin);
    result.prefix_mass.push_back(result.prefix_mass.back() + p);
  }
  return result;
}

// Every vec spec of one (pooling, group, causal, union_tiles) from one selection pass per sampled
// row's vec tile.
std::vector<CurvePoint> vec_points(const std::vector<PatternSpec>& specs, const SampledHead& head,
                                   const RecallCurveOptions& options) {
  const detail::VecParams params = detail::vec_params(specs.front());
  const PlanShape shape{1, 1, head.q_len, head.kv_len, options.tile_rows};
  const PatternInputs inputs{head.q, head.k, head.scale};
  detail::KeyCache cache;
  const detail::HeadOperands operands(inputs, shape, 0, cache);
  std::vector<VecRow> rows(head.rows.size());
  detail::parallel_for(static_cast<int64_t>(head.rows.size()), options.num_threads, [&](int64_t n) {
    // The row's vec tile: its pooled block, or the blocks of its plan tile (vec.h).
    const int64_t tile = head.rows[n] / (detail::vec_tile_blocks(shape, params) * params.pooling);
    rows[n] = vec_row(head.probs[n], detail::vec_tile(shape, params, tile),
                      detail::vec_tile_key_margins(operands, shape, params, tile));
  });
  std::vector<CurvePoint> points;
  for (const PatternSpec& spec : specs) {
    const float log_alpha = detail::vec_params(spec).log_alpha();
    RowKept kept{std::vector<double>(rows.size()), std::vector<int64_t>(rows.size())};
    for (std::size_t n = 0; n < rows.size(); ++n) {
      const std::vector<float>& margins = rows[n].margins;
      // Kept: the candidates with margin >= log(alpha), a prefix of the descending order.
      const auto count = static_cast<std::size_t>(
          std::partition_point(margins.begin(), margins.end(),
                               [&](float margin) { return margin >= log_alpha; }) -
          margins.begin());
      kept.mass[n] = rows[n].span_mass + rows[n].prefix_mass[count];
      kept.pairs[n] = rows[n].span_pairs + static_cast<int64_t>(count);
    }
    points.push_back(point_of(spec.to_string(), kept, head));
  }
  return points;
}

// A family's points in its spec order: vec specs grouped by their selection, the others built.
std::vector<CurvePoint> family_points(const CurveFamily& family, const SampledHead& head,
                                      const RecallCurveOptions& options) {
  std::vector<CurvePoint> points(family.specs.size());
  std::map<std::tuple<int64_t, int64_t, bool, bool>, std::vector<std::size_t>> vec_groups;
  for (std::size_t i = 0; i < family.specs.size(); ++i) {
    const PatternSpec spec = resolve_pattern(family.specs[i], options.layout);
    if (spec.name == kVecPattern && options.vec_from_margins) {
      const detail::VecParams params = detail::vec_params(spec);
      vec_groups[{params.pooling, params.group_tiles, params.causal, params.union_tiles}].push_back(
          i);
    } else {
      points[i] = plan_point(spec, head, options);
    }
  }
  for (const auto& [key, indices] : vec_groups) {
    std::vector<PatternSpec> specs;
    for (std::size_t i : indices) specs.push_back(resolve_pattern(family.specs[i], options.layout));
    const std::vector<CurvePoint> group = vec_points(specs, head, options);
    for (std::size_t j = 0; j < indices.size(); ++j) points[indices[j]] = group[j];
  }
  return points;
}

std::vector<CurvePoint> tile_oracle_points(const SampledHead& head,
                                           const RecallCurveOptions& options) {
  TileMassOptions mass_options;
  mass_options.tile_rows = options.tile_rows;
  mass_options.sample_tiles = options.tile_samples;
  mass_options.scale = head.scale;
  mass_options.num_threads = options.num_threads;
  const TileMass mass = tile_mass(head.q, head.k, TensorView{}, 0, 0, mass_options);
  const TileOracle oracle = tile_oracle(mass, options.oracle_recalls, TileCostUnit::kPairs);
  std::vector<CurvePoint> points;
  for (const TileOracleLevel& level : oracle.levels) {
    points.push_back({"", level.cost_share, level.recall, 0.0});
  }
  return points;
}

void check_recalls(const std::vector<double>& recalls) {
  for (double recall : recalls) {
    if (!(recall > 0.0 && recall <= 1.0)) {
      throw_invalid_argument("oracle_recalls", "values in (0, 1]", std::to_string(recall));
    }
  }
}

}  // namespace

double token_oracle_density(std::span<const float> sorted_mass, int64_t rows, int64_t pairs_sampled,
                            double recall) {
  if (pairs_sampled <= 0) return 0.0;
  const double target = recall * static_cast<double>(rows) * (1.0 - kTargetSlack);
  double mass = 0.0;
  std::size_t taken = 0;
  while (taken < sorted_mass.size() && mass < target) mass += sorted_mass[taken++];
  return static_cast<double>(taken) / static_cast<double>(pairs_sampled);
}

HeadCurves measure_recall_curves(const TensorView& q, const TensorView& k, int64_t head,
                                 std::span<const CurveFamily> families,
                                 const RecallCurveOptions& options) {
  check_recalls(options.oracle_recalls);
  const SampledHead sampled = sample_head(q, k, head, options);
  HeadCurves curves;
  curves.head = head;
  curves.rows_sampled = static_cast<int64_t>(sampled.rows.size());
  curves.pairs_sampled = sampled.pairs;

  std::vector<float> pooled;
  pooled.reserve(static_cast<std::size_t>(sampled.pairs));
  for (const std::vector<float>& row : sampled.probs)
    pooled.insert(pooled.end(), row.begin(), row.end());
  std::sort(pooled.begin(), pooled.end(), std::greater<float>());
  const auto oracle_at = [&](double recall) {
    return token_oracle_density(pooled, curves.rows_sampled, sampled.pairs, recall);
  };
  for (double recall : options.oracle_recalls) {
    curves.token_oracle.push_back({"", oracle_at(recall), recall, 0.0});
  }
  for (const CurveFamily& family : families) {
    FamilyCurve curve{family.name, family_points(family, sampled, options)};
    for (CurvePoint& point : curve.points) point.oracle_density = oracle_at(point.recall);
    curves.families.push_back(std::move(curve));
  }
  if (options.tile_oracle && options.causal)
    curves.tile_oracle = tile_oracle_points(sampled, options);
  return curves;
}

namespace {

// Adds b into the running sum a, point by point; throws when the shapes differ.
void add_points(std::vector<CurvePoint>& sum, const std::vector<CurvePoint>& points) {
  if (sum.size() != points.size()) {
    throw_invalid_argument("heads", "curves with the same points", "different point counts");
  }
  for (std::size_t i = 0; i < points.size(); ++i) {
    sum[i].density += points[i].density;
    sum[i].recall += points[i].recall;
    sum[i].oracle_density += points[i].oracle_density;
  }
}

void divide_points(std::vector<CurvePoint>& points, double count) {
  for (CurvePoint& point : points) {
    point.density /= count;
    point.recall /= count;
    point.oracle_density /= count;
  }
}

}  // namespace

HeadCurves mean_recall_curves(std::span<const HeadCurves> heads) {
  if (heads.empty()) throw_invalid_argument("heads", "at least one head", "none");
  HeadCurves mean = heads.front();
  mean.head = -1;
  for (std::size_t h = 1; h < heads.size(); ++h) {
    const HeadCurves& other = heads[h];
    if (other.families.size() != mean.families.size()) {
      throw_invalid_argument("heads", "curves of the same families", "different families");
    }
    for (std::size_t f = 0; f < mean.families.size(); ++f) {
      add_points(mean.families[f].points, other.families[f].points);
    }
    add_points(mean.token_oracle, other.token_oracle);
    add_points(mean.tile_oracle, other.tile_oracle);
    mean.rows_sampled += other.rows_sampled;
    mean.pairs_sampled += other.pairs_sampled;
  }
  const auto count = static_cast<double>(heads.size());
  for (FamilyCurve& family : mean.families) divide_points(family.points, count);
  divide_points(mean.token_oracle, count);
  divide_points(mean.tile_oracle, count);
  return mean;
}

}  // namespace mmsparse
