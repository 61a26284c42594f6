// Dynamic patterns (vertical-slash, grid, with the inter-modality boundary modes): plans validate
// and compute what the masked-dense oracle computes on their materialised masks; vertical-slash
// selects the brute-force top-k lines and converts them as documented; boundary modes keep to
// their modalities; bad specs and inputs name the parameter. The grid search has its own tests
// (test_grid_search.cpp).

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <numeric>
#include <string>
#include <vector>

#include "common/errors.h"
#include "common/tile_keys.h"
#include "common/masked_oracle.h"
#include "common/random.h"
#include "cpu/attention_helpers.h"
#include "cpu/dynamic_helpers.h"
#include "mmsparse/attention.h"
#include "mmsparse/patterns.h"
#include "mmsparse/status.h"
#include "methods/estimate/estimation.h"
#include "methods/grid/grid.h"
#include "methods/estimate/tile_keys.h"
#include "methods/vertical_slash/vertical_slash.h"

namespace mmsparse {
namespace {

using testing::expect_error;

constexpr int kRandomTrials = 60;
constexpr double kTolerance = 1e-5;

// --- Random problems ---------------------------------------------------------------------------

struct Problem {
  PlanShape shape;
  int64_t kv_heads = 1;
  int64_t head_dim = 8;
  test::Operand q, k, v;  // views possibly strided, bf16 / fp16 / fp32
  ModalityLayout layout;
  PatternInputs inputs() const { return {q.view, k.view}; }
};

Problem random_problem(test::Random& random, bool boundary) {
  Problem problem;
  PlanShape& shape = problem.shape;
  shape.batch = random.uniform_int(1, 2);
  problem.kv_heads = random.uniform_int(1, 2);
  shape.heads = problem.kv_heads * random.uniform_int(1, 3);
  shape.q_len = test::random_length(random, 1, 150);
  // kv_len < q_len only without boundary modes (those need a token for every query).
  shape.kv_len = boundary || random.bernoulli(0.8)
                     ? shape.q_len + random.uniform_int(0, 60)
                     : random.uniform_int(std::max<int64_t>(1, shape.q_len / 2), shape.q_len);
  shape.tile_rows = int64_t{4} << random.uniform_int(0, 3);
  problem.head_dim = int64_t{4} << random.uniform_int(0, 2);
  const DType dtypes[] = {DType::kFloat32, DType::kBFloat16, DType::kFloat16};
  const DType dtype = dtypes[random.uniform_int(0, 2)];
  const bool strided = random.bernoulli(0.5);
  problem.q = test::random_operand(random, dtype, shape.batch, shape.q_len, shape.heads,
                                   problem.head_dim, strided);
  problem.k = test::random_operand(random, dtype, shape.batch, shape.kv_len, problem.kv_heads,
                                   problem.head_dim, strided);
  problem.v = test::random_operand(random, dtype, shape.batch, shape.kv_len, problem.kv_heads,
                                   problem.head_dim, strided);
  problem.layout = test::random_layout(random, shape.kv_len);
  return problem;
}

PatternSpec random_spec(test::Random& random, const std::string& name, int64_t boundary) {
  const int64_t sink = random.uniform_int(0, 6);
  const int64_t local = random.uniform_int(0, 8);
  PatternSpec spec{name,
                   {{"sink", sink},
                    {"local", local},
                    {"last_q", random.uniform_int(1, 20)},
                    {"item_sinks", random.bernoulli(0.7) ? 0 : random.uniform_int(1, 3)},
                    {"boundary", boundary}}};
  if (name == "vertical-slash") {
    spec.params["vertical"] = sink + random.uniform_int(0, 15);
    spec.params["slash"] = local + random.uniform_int(0, 12);
    return spec;
  }
  spec.params["stride"] = random.bernoulli(0.5) ? 0 : random.uniform_int(2, 12);
  spec.params["max_stride"] = random.uniform_int(2, 40);
  int64_t lines = 0;
  while (lines == 0) lines = random.uniform_int(1, 7);  // hline, vline, slash bits, not all 0
  spec.params["hline"] = lines & 1;
  spec.params["vline"] = (lines >> 1) & 1;
  spec.params["slash"] = (lines >> 2) & 1;
  return spec;
}

// --- Plans against the masked-dense oracle -----------------------------------------------------

void expect_planned_equals_masked(const Plan& plan, const Problem& problem) {
  // Attention in fp32 on contiguous copies: the builders read the original views.
  const Tensor q = to_contiguous(problem.q.view, DType::kFloat32);
  const Tensor k = to_contiguous(problem.k.view, DType::kFloat32);
  const Tensor v = to_contiguous(problem.v.view, DType::kFloat32);
  test::expect_plan_equals_masked_oracle(plan, q.view(), k.view(), v.view(), kTolerance);
}

TEST(DynamicPatterns, PlansValidateAndEqualTheMaskedDenseOracle) {
  test::Random random;
  SCOPED_TRACE(random.trace());
  for (int trial = 0; trial < kRandomTrials; ++trial) {
    const std::string name = random.bernoulli(0.5) ? "vertical-slash" : "grid";
    const int64_t boundary = random.uniform_int(0, 4);
    const Problem problem = random_problem(random, boundary >= 2);
    const PatternSpec spec = random_spec(random, name, boundary);
    const PlanShape& shape = problem.shape;
    SCOPED_TRACE(
        spec.to_string() + " batch=" + std::to_string(shape.batch) +
        " heads=" + std::to_string(shape.heads) + " kv_heads=" + std::to_string(problem.kv_heads) +
        " q_len=" + std::to_string(shape.q_len) + " kv_len=" + std::to_string(shape.kv_len) +
        " tile_rows=" + std::to_string(shape.tile_rows) +
        " dtype=" + std::string(dtype_name(problem.q.view.dtype)));
    const PatternInputs inputs = problem.inputs();
    const Plan plan = build_plan(spec, shape, &problem.layout, &inputs);
    ASSERT_NO_THROW(plan.validate());  // every pair at most once
    expect_planned_equals_masked(plan, problem);
  }
}

TEST(DynamicPatterns, KBoundaryAndSingleModalityBoundariesBuildThePlainPlan) {
  test::Random random;
  SCOPED_TRACE(random.trace());
  for (const std::string name : {"vertical-slash", "grid"}) {
    Problem problem = random_problem(random, true);
    problem.layout = ModalityLayout::text_only(problem.shape.kv_len);
    const PatternInputs inputs = problem.inputs();
    PatternSpec spec = random_spec(random, name, 0);
    const Plan plain = build_plan(spec, problem.shape, &problem.layout, &inputs);
    for (int64_t boundary : {1, 2, 3}) {
      spec.params["boundary"] = boundary;
      const Plan other = build_plan(spec, problem.shape, &problem.layout, &inputs);
      for (int64_t slot = 0; slot < plain.head_slots(); ++slot) {
        EXPECT_EQ(materialize_mask(other, slot), materialize_mask(plain, slot)) << spec.to_string();
      }
    }
  }
}

TEST(DynamicPatterns, EveryDefaultSpecBuildsWithInputs) {
  test::Random random;
  SCOPED_TRACE(random.trace());
  const Problem problem = random_problem(random, true);
  const PatternInputs inputs = problem.inputs();
  for (const PatternInfo& info : known_patterns()) {
    if (!info.dynamic) continue;
    SCOPED_TRACE(info.default_spec);
    EXPECT_FALSE(info.description.empty());
    const Plan plan =
        build_plan(PatternSpec::parse(info.default_spec), problem.shape, nullptr, &inputs);
    EXPECT_EQ(plan.head_slots(), problem.shape.head_slots());
  }
}

// --- Vertical-slash: brute-force top-k and its conversion --------------------------------------

// The estimate computed independently in double: column and diagonal sums of the softmax of the
// last rows over the keys each sees causally.
struct BruteForce {
  std::vector<double> columns, diagonals;
};

BruteForce brute_force_scores(const Tensor& q, const Tensor& k, int64_t q_len, int64_t kv_len,
                              int64_t last_q) {
  const int64_t dim = q.shape()[3];
  const double scale = 1.0 / std::sqrt(static_cast<double>(dim));
  BruteForce scores{std::vector<double>(kv_len, 0.0), std::vector<double>(kv_len, 0.0)};
  for (int64_t row = std::max<int64_t>(0, q_len - last_q); row < q_len; ++row) {
    const int64_t aligned = row + kv_len - q_len;
    std::vector<double> p(static_cast<std::size_t>(aligned + 1));
    for (int64_t key = 0; key <= aligned; ++key) {
      double dot = 0.0;
      for (int64_t d = 0; d < dim; ++d) {
        dot += static_cast<double>(q.data_as<float>()[row * dim + d]) *
               k.data_as<float>()[key * dim + d];
      }
      p[key] = scale * dot;
    }
    const double top = *std::max_element(p.begin(), p.end());
    double sum = 0.0;
    for (double& value : p) sum += value = std::exp(value - top);
    for (int64_t key = 0; key <= aligned; ++key) {
      scores.columns[key] += p[key] / sum;
      scores.diagonals[aligned - key] += p[key] / sum;
    }
  }
  return scores;
}

// Forced indices [0, forced), then the best by score (ties to the lower index); and whether the
// cut is clear (the last chosen and the first left out differ by more than rounding).
std::vector<int64_t> brute_force_top_k(const std::vector<double>& scores, int64_t count,
                                       int64_t forced, bool& clear_cut) {
  constexpr double kRoundingSlack = 1e-5;
  const auto size = static_cast<int64_t>(scores.size());
  std::vector<int64_t> rest;
  for (int64_t i = std::min(forced, size); i < size; ++i) rest.push_back(i);
  std::stable_sort(rest.begin(), rest.end(),
                   [&](int64_t a, int64_t b) { return scores[a] > scores[b]; });
  const int64_t take = std::clamp<int64_t>(count - std::min(forced, size), 0, rest.size());
  clear_cut = take == 0 || take == static_cast<int64_t>(rest.size()) ||
              scores[rest[take - 1]] - scores[rest[take]] >
                  kRoundingSlack * std::max(1.0, scores[rest[take - 1]]);
  std::vector<int64_t> chosen(rest.begin(), rest.begin() + take);
  for (int64_t i = 0; i < std::min(forced, size); ++i) chosen.push_back(i);
  std::sort(chosen.begin(), chosen.end());
  return chosen;
}

TEST(VerticalSlash, SelectsTheBruteForceTopKAndConvertsItToBands) {
  test::Random random;
  SCOPED_TRACE(random.trace());
  int clear_trials = 0;
  for (int trial = 0; trial < kRandomTrials; ++trial) {
    PlanShape full{.q_len = test::random_length(random, 20, 200),
                   .tile_rows = int64_t{8} << random.uniform_int(0, 3)};
    full.kv_len = full.q_len + random.uniform_int(0, 100);
    const int64_t dim = int64_t{8} << random.uniform_int(0, 2);
    const Tensor q = random.normal_tensor(DType::kFloat32, {1, full.q_len, 1, dim});
    const Tensor k = random.normal_tensor(DType::kFloat32, {1, full.kv_len, 1, dim});
    const int64_t sink = random.uniform_int(0, 10), local = random.uniform_int(0, 20);
    const int64_t last_q = random.uniform_int(1, 70);
    const int64_t vertical = sink + random.uniform_int(0, 30);
    const int64_t slash = local + random.uniform_int(0, 30);
    const PatternSpec spec{"vertical-slash",
                           {{"sink", sink},
                            {"local", local},
                            {"last_q", last_q},
                            {"vertical", vertical},
                            {"slash", slash}}};
    SCOPED_TRACE(spec.to_string() + " q_len=" + std::to_string(full.q_len) +
                 " kv_len=" + std::to_string(full.kv_len));

    const BruteForce scores = brute_force_scores(q, k, full.q_len, full.kv_len, last_q);
    bool clear_vertical = false, clear_slash = false;
    const std::vector<int64_t> verticals =
        brute_force_top_k(scores.columns, vertical, sink, clear_vertical);
    const std::vector<int64_t> slashes =
        brute_force_top_k(scores.diagonals, slash, local, clear_slash);
    if (!clear_vertical || !clear_slash) continue;  // a near-tie at the cut: either is right
    ++clear_trials;

    const PatternInputs inputs{q.view(), k.view()};
    detail::KeyCache cache;
    const detail::HeadOperands operands(inputs, full, 0, cache);
    std::vector<int64_t> rows;
    for (int64_t row = std::max<int64_t>(0, full.q_len - last_q); row < full.q_len; ++row) {
      rows.push_back(row);
    }
    const detail::VerticalSlashLines lines = detail::select_vertical_slash(
        detail::estimate_last_queries(operands, rows, detail::KeySpace::all_keys(full.kv_len),
                                      full.causal_offset()),
        vertical, slash, sink, local);
    ASSERT_EQ(lines.verticals, verticals);
    ASSERT_EQ(lines.slashes, slashes);

    // MInference's conversion: per tile of rows with aligned positions [a0, a1], each diagonal d
    // covers keys [a0 - d, a1 - d]; verticals are columns; the causal mask trims every row.
    const Plan plan = build_plan(spec, full, nullptr, &inputs);
    const std::vector<uint8_t> mask = materialize_mask(plan, 0);
    const int64_t offset = full.causal_offset();
    for (int64_t i = 0; i < full.q_len; ++i) {
      const int64_t tile = i / full.tile_rows * full.tile_rows;
      const int64_t a0 = tile + offset;
      const int64_t a1 = std::min(full.q_len, tile + full.tile_rows) - 1 + offset;
      for (int64_t key = 0; key < full.kv_len; ++key) {
        bool expected = std::binary_search(verticals.begin(), verticals.end(), key);
        for (int64_t d : slashes) expected = expected || (key >= a0 - d && key <= a1 - d);
        expected = expected && key <= i + offset;
        ASSERT_EQ(mask[i * full.kv_len + key] != 0, expected) << "query " << i << ", key " << key;
      }
    }
  }
  EXPECT_GT(clear_trials, kRandomTrials / 2);
}

TEST(VerticalSlash, PlainPlansConvertToTheMInferenceIndex) {
  test::Random random;
  SCOPED_TRACE(random.trace());
  const int64_t q_len = test::random_length(random, 100, 300);
  const int64_t kv_len = q_len + random.uniform_int(0, 50);
  const Tensor q = random.normal_tensor(DType::kFloat32, {1, q_len, 2, 16});
  const Tensor k = random.normal_tensor(DType::kFloat32, {1, kv_len, 1, 16});
  const PatternInputs inputs{q.view(), k.view()};
  const Plan plan = build_plan(PatternSpec::parse("vertical-slash:vertical=40,slash=120"),
                               {.heads = 2, .q_len = q_len, .kv_len = kv_len}, nullptr, &inputs);
  const Plan round_trip = from_minference_index(to_minference_index(plan), q_len, kv_len);
  for (int64_t slot = 0; slot < plan.head_slots(); ++slot) {
    EXPECT_EQ(materialize_mask(round_trip, slot), materialize_mask(plan, slot));
  }
}

// --- Boundary modes ------------------------------------------------------------------------------

// The modality of every query row of a head slot's tiles is the tile's first row's.
void expect_single_modality_tiles(const Plan& plan, const ModalityLayout& layout) {
  const std::vector<uint8_t> types = layout.token_types();
  const int64_t offset = plan.shape.causal_offset();
  for (int64_t slot = 0; slot < plan.head_slots(); ++slot) {
    const std::vector<int64_t> order = plan.query_order(slot);
    for (int64_t t = plan.head_tile_offsets[slot]; t < plan.head_tile_offsets[slot + 1]; ++t) {
      const uint8_t first = types[order[plan.tiles[t].begin] + offset];
      for (int64_t i = plan.tiles[t].begin; i < plan.tiles[t].end; ++i) {
        ASSERT_EQ(types[order[i] + offset], first) << "tile " << t << " of slot " << slot;
      }
    }
  }
}

// Rows and keys of one modality, gathered: the compact problem 2D-boundary lays that pair out in.
Tensor gather_rows(const Tensor& tensor, const std::vector<int64_t>& positions) {
  const int64_t dim = tensor.shape()[3];
  Tensor gathered(DType::kFloat32, {1, static_cast<int64_t>(positions.size()), 1, dim});
  for (std::size_t i = 0; i < positions.size(); ++i) {
    std::copy_n(tensor.data_as<float>() + positions[i] * dim, dim,
                gathered.data_as<float>() + static_cast<int64_t>(i) * dim);
  }
  return gathered;
}

TEST(Boundary, TilesNeverStraddleModalitiesAnd2DPairsEqualTheirCompactProblem) {
  test::Random random;
  SCOPED_TRACE(random.trace());
  constexpr int kBoundaryTrials = 12;
  for (int trial = 0; trial < kBoundaryTrials; ++trial) {
    const int64_t n = test::random_length(random, 60, 220);
    const ModalityLayout layout = test::random_layout(random, n);
    const int64_t dim = 16;
    const Tensor q = random.normal_tensor(DType::kFloat32, {1, n, 1, dim});
    const Tensor k = random.normal_tensor(DType::kFloat32, {1, n, 1, dim});
    const PatternInputs inputs{q.view(), k.view()};
    const std::string name = trial % 2 == 0 ? "vertical-slash" : "grid";
    PatternSpec spec = random_spec(random, name, 2);
    spec.params["item_sinks"] = 0;  // the compact problems below have no layout
    SCOPED_TRACE(spec.to_string() + " n=" + std::to_string(n) + " layout " + layout.to_json());
    for (int64_t boundary : {2, 3, 4}) {
      spec.params["boundary"] = boundary;
      expect_single_modality_tiles(
          build_plan(spec, {.q_len = n, .kv_len = n, .tile_rows = 16}, &layout, &inputs), layout);
    }
    // With one-row tiles every row computes exactly its own lines, so the 2D plan restricted to
    // one modality's rows and keys is the plain pattern on that modality's tokens alone, and the
    // item-boundary plan restricted to one media item's tokens is the plain pattern on that item's
    // tokens alone (its frames back to back, whatever text lies between them).
    spec.params["boundary"] = 3;
    const Plan plan = build_plan(spec, {.q_len = n, .kv_len = n, .tile_rows = 1}, &layout, &inputs);
    spec.params["boundary"] = 4;
    const Plan item_plan =
        build_plan(spec, {.q_len = n, .kv_len = n, .tile_rows = 1}, &layout, &inputs);
    const std::vector<uint8_t> types = layout.token_types();
    const std::vector<int32_t> items = layout.token_media();
    for (int part = 0; part < kNumModalities + static_cast<int>(layout.media().size()); ++part) {
      const bool modality = part < kNumModalities;
      const std::vector<uint8_t> mask = materialize_mask(modality ? plan : item_plan, 0);
      std::vector<int64_t> tokens;
      for (int64_t i = 0; i < n; ++i) {
        if (modality ? types[i] == part : items[i] == part - kNumModalities) tokens.push_back(i);
      }
      if (tokens.empty()) continue;
      const auto m = static_cast<int64_t>(tokens.size());
      const Tensor q_m = gather_rows(q, tokens), k_m = gather_rows(k, tokens);
      const PatternInputs compact_inputs{q_m.view(), k_m.view()};
      PatternSpec plain = spec;
      plain.params["boundary"] = 0;
      const std::vector<uint8_t> expected = materialize_mask(
          build_plan(plain, {.q_len = m, .kv_len = m, .tile_rows = 1}, nullptr, &compact_inputs),
          0);
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < m; ++j) {
          ASSERT_EQ(mask[tokens[i] * n + tokens[j]], expected[i * m + j])
              << (modality ? std::string(modality_name(static_cast<Modality>(part)))
                           : "item " + std::to_string(part - kNumModalities))
              << " row " << tokens[i] << ", key " << tokens[j];
        }
      }
    }
  }
}

// A 2D-boundary tile's rows share frontiers in another modality's keys (a text segment's rows all
// see the same video keys), so its slash lines there are single keys: read as columns, not as one
// span (a key chunk on the engine) per line. On the SYNTHETIC interleaved preset that took a tile
// from ~300 spans of 1-3 keys to ~8 spans; the plan's pairs are the same.
TEST(Boundary, TwoDimensionalSlashLinesOfSharedFrontiersAreColumns) {
  WorkloadSpec workload_spec;
  workload_spec.preset = "mixed-interleaved";
  workload_spec.seq_len = 8192;
  workload_spec.q_heads = 1;
  workload_spec.kv_heads = 1;
  const Workload workload = Workload::create(workload_spec);
  const Workload::Tensors tensors = workload.materialize(DType::kFloat32);
  const PatternInputs inputs{tensors.q.view(), tensors.k.view()};
  const PlanShape shape{.q_len = workload.seq_len(), .kv_len = workload.seq_len()};
  const Plan plan =
      build_plan(PatternSpec::parse("vertical-slash:vertical=64,slash=384,boundary=3"), shape,
                 &workload.layout(), &inputs);
  // The fragments the slash lines of shared frontiers made (1-3 keys), and a per-tile span count
  // far below the ~300 they made.
  constexpr int64_t kFragmentKeys = 4;
  constexpr int64_t kMaxSpansPerTile = 32;
  int64_t short_spans = 0;
  for (const KeySpan& span : plan.spans) {
    short_spans += span.end - span.begin < kFragmentKeys ? 1 : 0;
  }
  EXPECT_LT(static_cast<int64_t>(plan.spans.size()),
            kMaxSpansPerTile * static_cast<int64_t>(plan.tiles.size()));
  EXPECT_LT(short_spans * 100, static_cast<int64_t>(plan.spans.size())) << "under 1% of the spans";
  EXPECT_GT(plan.columns.size(), plan.spans.size());
}

// The keys a plan's tile covers, each once (validate() proved them disjoint), ascending.
std::vector<int64_t> tile_key_set(const Plan& plan, int64_t t) {
  std::vector<int64_t> keys = testing::listed_tile_keys(plan, t);
  std::sort(keys.begin(), keys.end());
  return keys;
}

TEST(TileKeys, LatticesAreCutBySpansJoinedAndListedWhereTheyCross) {
  constexpr int64_t kKeys = 2000;
  PlanBuilder builder({.batch = 1, .heads = 1, .q_len = 2, .kv_len = kKeys, .tile_rows = 1});
  builder.begin_head();
  const detail::KeySpace all_keys = detail::KeySpace::all_keys(kKeys);
  detail::TileKeys keys;
  builder.begin_tile(0, 1, {.causal = false});
  keys.use_space(all_keys);
  keys.add_range(300, 340);
  keys.add_lattice(0, 1000, 4);      // multiples of 4 below 1000 ...
  keys.add_lattice(1000, kKeys, 4);  // ... and above: joined
  keys.add_lattice(2, kKeys, 6);     // 2 mod 6: crosses the multiples of 4 (at 8 mod 12)
  keys.add_column(5);
  keys.write(builder);
  // A 2D-boundary space of keys [0, 5) and [20, 1000): compact 0, 3 -> 0, 3, then compact 6, 9,
  // ..., 897 -> 21, 24, ..., 912 (298 keys).
  const detail::KeySpace media({{0, 5}, {20, 1000}});
  builder.begin_tile(1, 2, {.causal = false});
  keys.use_space(media);
  keys.add_lattice(0, 900, 3);
  keys.write(builder);
  const Plan plan = builder.finish();

  // Strided spans hold whole multiples of kGatherChunkKeys: keys 340, 344, ... (415 keys from 340
  // below 2000: 384 of them) and 21, 24, ... (256 of 298); the crossing lattice and the pieces
  // below the span (75 keys) and the rest are columns.
  EXPECT_EQ(plan.spans, (std::vector<KeySpan>{{300, 340}}));
  EXPECT_EQ(plan.strided_spans,
            (std::vector<StridedSpan>{{340, 340 + 383 * 4 + 1, 4}, {21, 21 + 255 * 3 + 1, 3}}));
  EXPECT_EQ(plan.tile_strided_offsets, (std::vector<int64_t>{0, 1, 2}));
  std::vector<int64_t> expected;
  for (int64_t key = 0; key < kKeys; ++key) {
    if ((key >= 300 && key < 340) || key % 4 == 0 || key % 6 == 2 || key == 5) {
      expected.push_back(key);
    }
  }
  EXPECT_EQ(tile_key_set(plan, 0), expected);
  expected = {0, 3};
  for (int64_t key = 21; key <= 912; key += 3) expected.push_back(key);
  EXPECT_EQ(tile_key_set(plan, 1), expected);
  EXPECT_TRUE(
      std::is_sorted(plan.columns.begin(), plan.columns.begin() + plan.tile_column_offsets[1]));
}

// --- Errors
// ---------------------------------------------------------------------------------------

// check_pattern (the CLI's up-front check) throws what build_plan throws for parameters, layouts
// and inputs, and accepts what it builds, without estimating.
TEST(DynamicPatterns, CheckPatternRejectsWhatBuildPlanRejects) {
  test::Random random;
  const PlanShape shape{.heads = 2, .q_len = 30, .kv_len = 40};
  const Tensor q = random.normal_tensor(DType::kFloat32, {1, 30, 2, 8});
  const Tensor k = random.normal_tensor(DType::kFloat32, {1, 40, 1, 8});
  const PatternInputs inputs{q.view(), k.view()};
  auto check = [&](const std::string& text, const PatternInputs* with) {
    return [=] { check_pattern(PatternSpec::parse(text), shape, nullptr, with); };
  };
  const auto invalid = ErrorCode::kInvalidArgument;
  expect_error(check("grid", nullptr), invalid, {"grid inputs", "got none"});
  expect_error(check("vertical-slash:vertical=10", &inputs), invalid,
               {"vertical-slash parameter vertical", ">= sink = 30", "got 10"});
  expect_error(check("grid:stride=1", &inputs), invalid,
               {"grid parameter stride", "0 (search) or >= 2", "got 1"});
  expect_error(check("grid:boundary=2", &inputs), invalid,
               {"grid parameter boundary", "modality layout", "got none"});
  expect_error(check("grid:item_sinks=1", &inputs), invalid,
               {"grid parameter item_sinks", "0 without a modality layout", "got 1"});
  expect_error(check("vec:pooling=0", &inputs), invalid, {"vec parameter pooling"});
  expect_error(check("nosuch", &inputs), invalid, {"pattern", "nosuch"});
  const Tensor short_q = random.normal_tensor(DType::kFloat32, {1, 29, 2, 8});
  const PatternInputs wrong_len{short_q.view(), k.view()};
  expect_error(check("grid", &wrong_len), invalid, {"grid input q q_len", "expected 30"});
  expect_error(check("a-shape:sink=-1", nullptr), invalid, {"a-shape parameter sink"});
  for (const char* text : {"grid", "vertical-slash", "vec", "a-shape", "grid-mask"}) {
    SCOPED_TRACE(text);
    EXPECT_NO_THROW(check_pattern(PatternSpec::parse(text), shape, nullptr, &inputs));
    (void)build_plan(PatternSpec::parse(text), shape, nullptr, &inputs);
  }
}

TEST(DynamicPatterns, BadSpecsAndInputsNameTheParameter) {
  test::Random random;
  const PlanShape shape{.heads = 2, .q_len = 30, .kv_len = 40};
  const Tensor q = random.normal_tensor(DType::kFloat32, {1, 30, 2, 8});
  const Tensor k = random.normal_tensor(DType::kFloat32, {1, 40, 1, 8});
  const PatternInputs inputs{q.view(), k.view()};
  const ModalityLayout layout = LayoutBuilder().text(10).image({1, 4, 5}).text(8).build();
  auto build = [&](const std::string& text, const PatternInputs* with = nullptr,
                   const ModalityLayout* layout_given = nullptr, PlanShape plan_shape = {}) {
    const PlanShape used = plan_shape.q_len == 0 ? shape : plan_shape;
    return [=] { (void)build_plan(PatternSpec::parse(text), used, layout_given, with); };
  };
  const auto invalid = ErrorCode::kInvalidArgument;
  expect_error(build("vertical-slash"), invalid, {"vertical-slash inputs", "PatternInputs"});
  expect_error(build("grid"), invalid, {"grid inputs", "got none"});
  expect_error(build("vertical-slash:vertical=10", &inputs), invalid,
               {"vertical-slash parameter vertical", ">= sink = 30", "got 10"});
  expect_error(build("vertical-slash:slash=50", &inputs), invalid,
               {"vertical-slash parameter slash", ">= local = 100", "got 50"});
  expect_error(build("vertical-slash:last_q=0", &inputs), invalid,
               {"vertical-slash parameter last_q", ">= 1"});
  expect_error(build("vertical-slash:boundary=5", &inputs), invalid,
               {"vertical-slash parameter boundary", "4 (item boundary)", "got 5"});
  expect_error(build("grid:boundary=4", &inputs), invalid,
               {"grid parameter boundary", "modality layout", "got none"});
  expect_error(build("grid:item_sinks=-1", &inputs, &layout), invalid,
               {"grid parameter item_sinks", ">= 0", "got -1"});
  expect_error(build("vertical-slash:item_sinks=2", &inputs), invalid,
               {"vertical-slash parameter item_sinks", "0 without a modality layout", "got 2"});
  expect_error(
      build("grid:item_sinks=1", &inputs, &layout, {.heads = 2, .q_len = 30, .kv_len = 35}),
      invalid, {"grid parameter item_sinks layout", "kv_len = 35", "got 40"});
  expect_error(build("vertical-slash:width=3", &inputs), invalid, {"vertical-slash", "\"width\""});
  expect_error(build("grid:stride=1", &inputs), invalid,
               {"grid parameter stride", "0 (search) or >= 2", "got 1"});
  expect_error(build("grid:max_stride=1", &inputs), invalid, {"grid parameter max_stride"});
  expect_error(build("grid:hline=2", &inputs), invalid, {"grid parameter hline", "0 or 1"});
  expect_error(build("grid:hline=0,vline=0,slash=0", &inputs), invalid,
               {"grid parameters hline, vline, slash", "all 0"});
  expect_error(build("grid:boundary=2", &inputs), invalid,
               {"grid parameter boundary", "modality layout", "got none"});
  expect_error(build("grid:boundary=3", &inputs, &layout, {.heads = 2, .q_len = 30, .kv_len = 35}),
               invalid, {"grid parameter boundary", "kv_len = 35", "got 40"});

  const Tensor short_q = random.normal_tensor(DType::kFloat32, {1, 29, 2, 8});
  const PatternInputs wrong_len{short_q.view(), k.view()};
  expect_error(build("grid", &wrong_len), invalid, {"grid input q q_len", "expected 30"});
  const Tensor ints(DType::kInt32, {1, 30, 2, 8});
  const PatternInputs wrong_dtype{ints.view(), k.view()};
  expect_error(build("vertical-slash", &wrong_dtype), invalid,
               {"vertical-slash input q dtype", "int32"});
  const Tensor three_heads = random.normal_tensor(DType::kFloat32, {1, 40, 3, 8});
  const PatternInputs wrong_heads{q.view(), three_heads.view()};
  expect_error(build("vertical-slash", &wrong_heads), invalid,
               {"vertical-slash input k heads", "divisor", "got 3"});
  const Tensor flat = random.normal_tensor(DType::kFloat32, {30, 2, 8});
  const PatternInputs wrong_rank{flat.view(), k.view()};
  expect_error(build("grid", &wrong_rank), invalid, {"grid input q", "4 dimensions"});
  expect_error(build("grid", &inputs, nullptr, {.batch = 2, .heads = 2, .q_len = 30, .kv_len = 40}),
               invalid, {"grid input q batch", "expected 2", "head slot per batch element"});
  TensorView on_gpu = q.view();
  on_gpu.device = {DeviceType::kCUDA, 0};
  const PatternInputs wrong_device{on_gpu, k.view()};
  expect_error(build("grid", &wrong_device), invalid, {"grid input q device", "cpu"});
}

}  // namespace
}  // namespace mmsparse
