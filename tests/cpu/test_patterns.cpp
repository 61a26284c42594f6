// Static patterns against element-wise definitions, plan-driven attention against the masked-dense
// oracle, and the pattern spec and config formats.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "common/masked_oracle.h"
#include "common/random.h"
#include "common/errors.h"
#include "core/engine_chunks.h"
#include "mmsparse/attention.h"
#include "mmsparse/layout.h"
#include "mmsparse/patterns.h"
#include "mmsparse/status.h"

namespace mmsparse {
namespace {

using testing::expect_error;

constexpr int kRandomTrials = 25;
constexpr int64_t kMaxQueries = 300;
constexpr double kTolerance = 1e-5;

int64_t uniform(std::mt19937_64& rng, int64_t lo, int64_t hi) {
  return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
}

// --- Element-wise definitions of the patterns ------------------------------------------------

// keeps(query row, key) for a given shape; `aligned` = row + kv_len - q_len.
using Predicate = std::function<bool(int64_t row, int64_t key)>;

struct Case {
  PatternSpec spec;
  Predicate keeps;
};

Case random_case(std::mt19937_64& rng, const std::string& name, const PlanShape& shape) {
  const int64_t offset = shape.kv_len - shape.q_len;
  if (name == "dense") {
    return {{name, {}}, [=](int64_t i, int64_t k) { return k <= i + offset; }};
  }
  if (name == "full") {  // non-causal: every pair
    return {{name, {}}, [](int64_t, int64_t) { return true; }};
  }
  if (name == "a-shape" || name == "tri-shape") {
    const int64_t sink = uniform(rng, 0, 40);
    const int64_t local = uniform(rng, 1, 100);
    const int64_t bottom = uniform(rng, 0, shape.q_len + 10);
    PatternSpec spec{name, {{"sink", sink}, {"local", local}}};
    const bool tri = name == "tri-shape";
    if (tri) spec.params["bottom"] = bottom;
    return {spec, [=](int64_t i, int64_t k) {
              const int64_t a = i + offset;
              if (k > a) return false;
              if (tri && i >= shape.q_len - bottom) return true;
              return k < sink || a - k < local;
            }};
  }
  if (name == "sf-fixed") {
    const int64_t segment = uniform(rng, 1, 60);
    const int64_t vline = uniform(rng, 1, 60);
    return {{name, {{"segment", segment}, {"vline_stride", vline}}}, [=](int64_t i, int64_t k) {
              const int64_t a = i + offset;
              return k <= a && (k / segment == a / segment || k % vline == 0);
            }};
  }
  if (name == "grid-mask") {
    // The bands as spans, columns or lattices; lattices need a period of whole groups that holds
    // a tile's widened residues (grid_mask.cpp).
    constexpr int64_t kLatticeSlack = 2 * (kLatticeSpans - 1);
    const int64_t keys = uniform(rng, 0, 2);
    const bool lattice = keys == 2;
    const int64_t sink = uniform(rng, 0, 40);
    const int64_t local = uniform(rng, 1, 100);
    const int64_t period = lattice ? kLatticeSpans * uniform(rng, 3, 10) : uniform(rng, 1, 80);
    const int64_t phases =
        uniform(rng, 1, std::min(lattice ? period - kLatticeSlack - 1 : period, shape.tile_rows));
    const int64_t band = uniform(rng, 1, lattice ? period - phases - kLatticeSlack : period);
    return {{name,
             {{"sink", sink},
              {"local", local},
              {"period", period},
              {"band", band},
              {"phases", phases},
              {"columns", keys == 1 ? 1 : 0},
              {"lattice", lattice ? 1 : 0}}},
            [=](int64_t i, int64_t k) {
              const int64_t a = i + offset;
              return k <= a && (k < sink || a - k < local || (a - k) % period < band);
            }};
  }
  // sf-strided: per tile of rows [r0, r1) with aligned ends a0, a1, the local band
  // [a0 - local + 1, a1] and, for each diagonal distance d = m * stride, the band [a0 - d, a1 - d].
  const int64_t local = uniform(rng, 1, 60);
  const int64_t stride = uniform(rng, 1, 70);
  return {{name, {{"local", local}, {"stride", stride}}}, [=](int64_t i, int64_t k) {
            const int64_t a = i + offset;
            if (k > a) return false;
            const int64_t r0 = i / shape.tile_rows * shape.tile_rows;
            const int64_t r1 = std::min(shape.q_len, r0 + shape.tile_rows);
            const int64_t a0 = r0 + offset;
            const int64_t a1 = r1 - 1 + offset;
            if (k >= a0 - local + 1) return true;
            for (int64_t d = stride; a1 - d >= 0; d += stride) {
              if (k >= a0 - d && k <= a1 - d) return true;
            }
            return false;
          }};
}

const std::vector<std::string> kPatternNames = {"dense",    "a-shape",    "tri-shape",
                                                "sf-fixed", "sf-strided", "grid-mask", "full"};

PlanShape random_shape(std::mt19937_64& rng, int64_t batch, int64_t heads) {
  PlanShape shape;
  shape.batch = batch;
  shape.heads = heads;
  shape.q_len = uniform(rng, 1, kMaxQueries);
  shape.kv_len = shape.q_len + uniform(rng, 0, 150);
  shape.tile_rows = 8 << uniform(rng, 0, 3);
  return shape;
}

TEST(StaticPatterns, MasksMatchElementwiseDefinitions) {
  test::Random random;
  SCOPED_TRACE(random.trace());
  std::mt19937_64& rng = random.engine();
  for (int trial = 0; trial < kRandomTrials; ++trial) {
    for (const std::string& name : kPatternNames) {
      const PlanShape shape = random_shape(rng, 1, 1);
      const Case test_case = random_case(rng, name, shape);
      SCOPED_TRACE(test_case.spec.to_string() + " q_len=" + std::to_string(shape.q_len) +
                   " kv_len=" + std::to_string(shape.kv_len) +
                   " tile_rows=" + std::to_string(shape.tile_rows));
      const Plan plan = build_plan(test_case.spec, shape);
      const std::vector<uint8_t> mask = materialize_mask(plan, 0);
      int64_t expected_pairs = 0;
      for (int64_t i = 0; i < shape.q_len; ++i) {
        for (int64_t k = 0; k < shape.kv_len; ++k) {
          const bool expected = test_case.keeps(i, k);
          expected_pairs += expected;
          ASSERT_EQ(mask[i * shape.kv_len + k] != 0, expected) << "query " << i << ", key " << k;
        }
      }
      EXPECT_EQ(count_plan_pairs(plan, 0), expected_pairs);
    }
  }
}

TEST(StaticPatterns, GridMaskPassesAreDisjointAndMatchTheMask) {
  test::Random random;
  SCOPED_TRACE(random.trace());
  std::mt19937_64& rng = random.engine();
  for (int trial = 0; trial < kRandomTrials; ++trial) {
    const PlanShape shape = random_shape(rng, 1, 2);
    const Case test_case = random_case(rng, "grid-mask", shape);
    SCOPED_TRACE(test_case.spec.to_string() + " q_len=" + std::to_string(shape.q_len) + " kv_len=" +
                 std::to_string(shape.kv_len) + " tile_rows=" + std::to_string(shape.tile_rows));
    const Plan plan = build_plan(test_case.spec, shape);
    ASSERT_EQ(plan.num_passes(), 3);
    EXPECT_NO_THROW(check_passes_disjoint(plan));
    for (const Plan& pass :
         {std::cref(plan), std::cref(plan.extra_passes[0]), std::cref(plan.extra_passes[1])}) {
      for (const QueryTile& tile : pass.tiles) EXPECT_LE(tile.end - tile.begin, shape.tile_rows);
    }
    EXPECT_EQ(materialize_mask(plan, 1), materialize_mask(plan, 0));
  }
  // The mask with its defaults (sink 128, local window 1024, a 64-key band every 1024 keys), four
  // periods long.
  constexpr int64_t kPeriods = 4;
  const PlanShape shape{.q_len = kPeriods * 1024, .kv_len = kPeriods * 1024, .tile_rows = 128};
  const Plan plan = build_plan(PatternSpec::parse("grid-mask"), shape);
  EXPECT_NO_THROW(check_passes_disjoint(plan));
  const std::vector<uint8_t> mask = materialize_mask(plan, 0);
  for (int64_t q = 0; q < shape.q_len; q += 7) {
    for (int64_t k = 0; k < shape.kv_len; ++k) {
      const bool expected = k <= q && (k < 128 || q - k < 1024 || (q - k) % 1024 < 64);
      ASSERT_EQ(mask[q * shape.kv_len + k] != 0, expected) << "query " << q << ", key " << k;
    }
  }
}

TEST(StaticPatterns, GridMaskRejectsBadParameters) {
  const PlanShape shape{.q_len = 100, .kv_len = 100, .tile_rows = 16};
  expect_error([&] { build_plan(PatternSpec::parse("grid-mask:period=32,band=40"), shape); },
               ErrorCode::kInvalidArgument, {"grid-mask parameter band", "<= period = 32"});
  expect_error([&] { build_plan(PatternSpec::parse("grid-mask:phases=32"), shape); },
               ErrorCode::kInvalidArgument, {"grid-mask parameter phases", "tile_rows = 16"});
  expect_error([&] { build_plan(PatternSpec::parse("grid-mask:local=0"), shape); },
               ErrorCode::kInvalidArgument, {"grid-mask parameter local", ">= 1"});
  expect_error([&] { build_plan(PatternSpec::parse("grid-mask:columns=2"), shape); },
               ErrorCode::kInvalidArgument, {"grid-mask parameter columns", "0 or 1"});
}

// The bands as lattices: a tile's keys are groups of kLatticeSpans strided spans of the period,
// with consecutive begins and one count, inside the whole periods of kv_len (what the CUDA upload
// copies as boxes), in whole chunks' periods except where a lattice is cut at the last whole
// period. The third pass gathers only the keys no lattice reaches: with a sink of whole groups
// none; with a group straddling the sink, its residues past the sink in the first period. The
// plan keeps the grid-like mask (StaticPatterns above checks it on random parameters).
TEST(StaticPatterns, GridMaskLatticesReachTheWholePeriods) {
  constexpr int64_t kPeriods = 40;
  constexpr int64_t kPeriod = 64;
  constexpr int64_t kPartialPeriod = 37;  // keys past the whole periods
  constexpr int64_t kSink = 12;           // inside the group of residues [8, 16)
  constexpr int64_t kGroupEnd = (kSink / kLatticeSpans + 1) * kLatticeSpans;
  const auto grid_mask = [&](int64_t sink) {
    return PatternSpec::parse("grid-mask:sink=" + std::to_string(sink) + ",local=64,period=" +
                              std::to_string(kPeriod) + ",band=8,phases=8,lattice=1");
  };
  PlanShape shape{.q_len = kPeriods * kPeriod, .kv_len = kPeriods * kPeriod, .tile_rows = 128};
  // A sink of whole groups, in whole periods: every band key is in a lattice.
  EXPECT_EQ(build_plan(grid_mask(kGroupEnd), shape).extra_passes.at(1).num_tiles(), 0);

  shape.q_len = shape.kv_len = kPeriods * kPeriod + kPartialPeriod;
  const Plan plan = build_plan(grid_mask(kSink), shape);
  const Plan& bands = plan.extra_passes.at(0);
  ASSERT_FALSE(bands.strided_spans.empty());
  // The lattices' pass gathers nothing.
  EXPECT_TRUE(bands.columns.empty());
  EXPECT_TRUE(bands.spans.empty());
  const Plan& rest = plan.extra_passes.at(1);
  EXPECT_FALSE(rest.columns.empty());
  EXPECT_TRUE(rest.spans.empty());
  EXPECT_TRUE(rest.strided_spans.empty());
  for (const int32_t key : rest.columns) {
    EXPECT_TRUE(key >= kSink && key < kGroupEnd) << "key " << key;
  }
  int64_t cut_lattices = 0;
  for (int64_t t = 0; t < bands.num_tiles(); ++t) {
    const int64_t first = bands.tile_strided_offsets[t];
    const int64_t last = bands.tile_strided_offsets[t + 1];
    ASSERT_EQ((last - first) % kLatticeSpans, 0) << "tile " << t;
    for (int64_t s = first; s < last; ++s) {
      const StridedSpan& span = bands.strided_spans[s];
      const StridedSpan& lead =
          bands.strided_spans[first + (s - first) / kLatticeSpans * kLatticeSpans];
      EXPECT_EQ(span.step, kPeriod);
      EXPECT_EQ(span.begin, lead.begin + (s - first) % kLatticeSpans);
      EXPECT_EQ(span.count(), lead.count());
      const bool cut = span.begin / kPeriod + span.count() == kPeriods;
      EXPECT_TRUE(span.count() % kLatticePeriodsPerChunk == 0 || cut) << "tile " << t;
      cut_lattices += cut && span.count() % kLatticePeriodsPerChunk != 0 ? 1 : 0;
      EXPECT_LE(span.begin / kPeriod + span.count(), kPeriods);
      EXPECT_LE(span.begin % kPeriod + kLatticeSpans - (s - first) % kLatticeSpans, kPeriod);
    }
  }
  EXPECT_GT(cut_lattices, 0);  // the case the kernels' partial lattice chunks serve
  // A period that no group of 8 divides keeps the bands as spans, with the same pairs.
  const Plan spans =
      build_plan(PatternSpec::parse("grid-mask:sink=16,local=64,period=60,band=8"), shape);
  EXPECT_TRUE(spans.extra_passes.at(0).strided_spans.empty());
  EXPECT_FALSE(spans.extra_passes.at(0).spans.empty());
  const std::vector<uint8_t> mask = materialize_mask(plan, 0);
  for (int64_t q = 0; q < shape.q_len; q += 5) {
    for (int64_t k = 0; k < shape.kv_len; ++k) {
      const bool expected = k <= q && (k < kSink || q - k < 64 || (q - k) % kPeriod < 8);
      ASSERT_EQ(mask[q * shape.kv_len + k] != 0, expected) << "query " << q << ", key " << k;
    }
  }
}

TEST(StaticPatterns, StridedBandsCoverTheExactLines) {
  // Sparse Transformer's exact strided pattern: (a - k) < local or (a - k) % stride == 0.
  const PlanShape shape{.q_len = 157, .kv_len = 203, .tile_rows = 16};
  const int64_t local = 9;
  const int64_t stride = 23;
  const Plan plan =
      build_plan(PatternSpec{"sf-strided", {{"local", local}, {"stride", stride}}}, shape);
  const std::vector<uint8_t> mask = materialize_mask(plan, 0);
  for (int64_t i = 0; i < shape.q_len; ++i) {
    const int64_t a = i + shape.causal_offset();
    for (int64_t k = 0; k <= a; ++k) {
      if (a - k < local || (a - k) % stride == 0)
        ASSERT_TRUE(mask[i * shape.kv_len + k]) << i << ", " << k;
    }
  }
}

TEST(StaticPatterns, DefaultsFollowTheLayoutsFrameSize) {
  const ModalityLayout layout = LayoutBuilder().text(5).video({4, 3, 5}, 0, false).text(7).build();
  ASSERT_EQ(layout.video_frame_tokens(), 15);
  const PlanShape shape{.q_len = layout.length(), .kv_len = layout.length(), .tile_rows = 16};
  for (const std::string& name : {std::string("sf-fixed"), std::string("sf-strided")}) {
    const Plan from_layout = build_plan(PatternSpec{name, {}}, shape, &layout);
    const PatternSpec explicit_spec =
        name == "sf-fixed" ? PatternSpec{name, {{"segment", 15}, {"vline_stride", 15}}}
                           : PatternSpec{name, {{"local", 15}, {"stride", 15}}};
    EXPECT_EQ(materialize_mask(from_layout, 0),
              materialize_mask(build_plan(explicit_spec, shape), 0));
    const PatternSpec fallback = name == "sf-fixed"
                                     ? PatternSpec{name, {{"segment", 256}, {"vline_stride", 256}}}
                                     : PatternSpec{name, {{"local", 256}, {"stride", 256}}};
    EXPECT_EQ(materialize_mask(build_plan(PatternSpec{name, {}}, shape), 0),
              materialize_mask(build_plan(fallback, shape), 0));
  }
}

TEST(StaticPatterns, ResolveFillsEveryDefaultAndKeepsGivenValues) {
  const ModalityLayout layout = LayoutBuilder().text(5).video({3, 4, 6}).text(7).build();
  const PatternSpec fixed = resolve_pattern(PatternSpec::parse("sf-fixed:segment=10"), &layout);
  EXPECT_EQ(fixed.params.at("segment"), 10);
  EXPECT_EQ(fixed.params.at("vline_stride"), 24);  // the video's 4 x 6 tokens per frame
  const PatternSpec tri = resolve_pattern(PatternSpec::parse("tri-shape:local=512"));
  EXPECT_EQ(tri.to_string(), "tri-shape:bottom=128,local=512,sink=128");
  EXPECT_TRUE(resolve_pattern(PatternSpec::parse("dense")).params.empty());
  EXPECT_THROW(resolve_pattern(PatternSpec::parse("sf-strided:width=3")), Error);
  EXPECT_THROW(resolve_pattern(PatternSpec::parse("mesh")), Error);
}

TEST(StaticPatterns, EveryDefaultSpecBuilds) {
  const PlanShape shape{.batch = 2, .heads = 3, .q_len = 77, .kv_len = 90, .tile_rows = 32};
  std::vector<PatternInfo> static_infos;
  for (const PatternInfo& info : known_patterns()) {
    if (!info.dynamic) static_infos.push_back(info);  // dynamic ones: test_dynamic_patterns
  }
  ASSERT_EQ(static_infos.size(), kPatternNames.size() + 4);  // + BlindSight's (test_blindsight)
  for (const PatternInfo& info : static_infos) {
    SCOPED_TRACE(info.default_spec);
    EXPECT_FALSE(info.description.empty());
    const Plan plan = build_plan(PatternSpec::parse(info.default_spec), shape);
    EXPECT_EQ(plan.head_slots(), 6);
    EXPECT_NO_THROW(plan.validate());
  }
}

TEST(StaticPatterns, PerHeadSpecs) {
  const PlanShape shape{.batch = 2, .heads = 2, .q_len = 40, .kv_len = 50, .tile_rows = 16};
  const std::vector<PatternSpec> specs = {{"dense", {}}, {"a-shape", {{"sink", 2}, {"local", 5}}}};
  const Plan plan = build_plan(specs, shape);
  for (int64_t slot = 0; slot < shape.head_slots(); ++slot) {
    EXPECT_EQ(materialize_mask(plan, slot),
              materialize_mask(
                  build_plan(specs[slot % 2], {.q_len = 40, .kv_len = 50, .tile_rows = 16}), 0));
  }
  expect_error(
      [&] {
        (void)build_plan(std::vector<PatternSpec>(3, PatternSpec{"dense", {}}), shape);
      },
      ErrorCode::kInvalidArgument, {"specs", "heads = 2", "got 3"});
}

TEST(StaticPatterns, RejectsBadParameters) {
  const PlanShape shape{.q_len = 10, .kv_len = 10};
  auto build = [&](const std::string& text) {
    return [=] { (void)build_plan(PatternSpec::parse(text), shape); };
  };
  expect_error(build("a-shape:local=0"), ErrorCode::kInvalidArgument,
               {"a-shape parameter local", ">= 1", "got 0"});
  expect_error(build("a-shape:sink=-1"), ErrorCode::kInvalidArgument,
               {"a-shape parameter sink", ">= 0"});
  expect_error(build("tri-shape:bottom=-5"), ErrorCode::kInvalidArgument,
               {"tri-shape parameter bottom"});
  expect_error(build("sf-fixed:segment=0"), ErrorCode::kInvalidArgument,
               {"sf-fixed parameter segment"});
  expect_error(build("sf-fixed:vline_stride=0"), ErrorCode::kInvalidArgument,
               {"sf-fixed parameter vline_stride"});
  expect_error(build("sf-strided:stride=0"), ErrorCode::kInvalidArgument,
               {"sf-strided parameter stride"});
  expect_error(build("a-shape:width=3"), ErrorCode::kInvalidArgument,
               {"a-shape", "local, sink", "\"width\""});
  expect_error(build("dense:sink=1"), ErrorCode::kInvalidArgument, {"dense", "none", "\"sink\""});
  expect_error(build("b-shape"), ErrorCode::kInvalidArgument,
               {"pattern", "dense, a-shape, tri-shape, sf-fixed, sf-strided", "\"b-shape\""});
}

// --- Plan-driven attention against the masked-dense oracle ------------------------------------

void fill_random(Tensor& tensor, std::mt19937_64& rng) {
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  float* data = tensor.data_as<float>();
  for (int64_t i = 0; i < tensor.numel(); ++i) data[i] = value(rng);
}

TEST(PlannedAttention, EqualsMaskedDenseOracleForEveryStaticPattern) {
  test::Random random;
  SCOPED_TRACE(random.trace());
  std::mt19937_64& rng = random.engine();
  const std::vector<int64_t> group_sizes = {1, 2, 4, 7};
  int trial = 0;
  for (const std::string& name : kPatternNames) {
    for (int64_t group : group_sizes) {
      for (int64_t batch : {1, 2}) {
        const int64_t kv_heads = uniform(rng, 1, 2);
        const int64_t q_heads = kv_heads * group;
        const int64_t head_dim = 4 << uniform(rng, 0, 3);
        // A batch-1 plan serves every batch element; a batch-2 plan has a slot per element.
        const int64_t plan_batch = batch == 2 && (trial++ % 2 == 0) ? 2 : 1;
        const PlanShape shape = random_shape(rng, plan_batch, q_heads);
        const Case test_case = random_case(rng, name, shape);
        SCOPED_TRACE(
            test_case.spec.to_string() + " batch=" + std::to_string(batch) +
            " plan_batch=" + std::to_string(plan_batch) + " q_heads=" + std::to_string(q_heads) +
            " kv_heads=" + std::to_string(kv_heads) + " head_dim=" + std::to_string(head_dim) +
            " q_len=" + std::to_string(shape.q_len) + " kv_len=" + std::to_string(shape.kv_len) +
            " tile_rows=" + std::to_string(shape.tile_rows));
        const Plan plan = build_plan(test_case.spec, shape);

        Tensor q(DType::kFloat32, {batch, shape.q_len, q_heads, head_dim});
        Tensor k(DType::kFloat32, {batch, shape.kv_len, kv_heads, head_dim});
        Tensor v(DType::kFloat32, {batch, shape.kv_len, kv_heads, head_dim});
        for (Tensor* tensor : {&q, &k, &v}) fill_random(*tensor, rng);
        ASSERT_NO_FATAL_FAILURE(
            test::expect_plan_equals_masked_oracle(plan, q.view(), k.view(), v.view(), kTolerance));
      }
    }
  }
}

// --- PatternSpec ---------------------------------------------------------------------------

TEST(PatternSpec, ParseAndPrintRoundTrip) {
  test::Random random;
  SCOPED_TRACE(random.trace());
  std::mt19937_64& rng = random.engine();
  const std::vector<std::string> keys = {"sink",    "local",        "bottom",
                                         "segment", "vline_stride", "stride"};
  for (int trial = 0; trial < kRandomTrials; ++trial) {
    PatternSpec spec{kPatternNames[uniform(rng, 0, kPatternNames.size() - 1)], {}};
    for (int64_t n = uniform(rng, 0, 3); n > 0; --n) {
      spec.params[keys[uniform(rng, 0, keys.size() - 1)]] =
          uniform(rng, -1'000'000'000'000, 1'000'000'000'000);
    }
    const PatternSpec parsed = PatternSpec::parse(spec.to_string());
    EXPECT_EQ(parsed.name, spec.name);
    EXPECT_EQ(parsed.params, spec.params) << spec.to_string();
  }
  const PatternSpec spaced = PatternSpec::parse("  a-shape : sink = 64 , local=2048 ");
  EXPECT_EQ(spaced.to_string(), "a-shape:local=2048,sink=64");
  EXPECT_EQ(spaced.param("sink", 1), 64);
  EXPECT_EQ(spaced.param("bottom", 7), 7);
  EXPECT_EQ(PatternSpec::parse("dense").to_string(), "dense");
}

TEST(PatternSpec, ParseErrorsNameTheBadPart) {
  auto parse = [](std::string text) { return [text] { (void)PatternSpec::parse(text); }; };
  expect_error(parse(""), ErrorCode::kParseError, {"pattern name", "got \"\""});
  expect_error(parse(":sink=1"), ErrorCode::kParseError, {"pattern name"});
  expect_error(parse("a shape"), ErrorCode::kParseError, {"got \"a shape\""});
  expect_error(parse("a-shape:"), ErrorCode::kParseError, {"key=value parameters after ':'"});
  expect_error(parse("a-shape:sink"), ErrorCode::kParseError, {"expected key=value, got \"sink\""});
  expect_error(parse("a-shape:sink=1,"), ErrorCode::kParseError, {"expected key=value, got \"\""});
  expect_error(parse("a-shape:=3"), ErrorCode::kParseError, {"parameter name", "got \"\""});
  expect_error(parse("a-shape:sink=abc"), ErrorCode::kParseError,
               {"parameter sink", "integer", "\"abc\""});
  expect_error(parse("a-shape:sink=1.5"), ErrorCode::kParseError, {"parameter sink", "\"1.5\""});
  expect_error(parse("a-shape:sink=99999999999999999999"), ErrorCode::kParseError,
               {"parameter sink"});
  expect_error(parse("a-shape:sink=1,sink=2"), ErrorCode::kParseError,
               {"parameter sink given twice"});
}

// --- PatternConfig -------------------------------------------------------------------------

TEST(PatternConfig, JsonRoundTrip) {
  test::Random random;
  SCOPED_TRACE(random.trace());
  std::mt19937_64& rng = random.engine();
  auto random_spec = [&] {
    PatternSpec spec{kPatternNames[uniform(rng, 0, kPatternNames.size() - 1)], {}};
    if (spec.name != "dense")
      spec.params[spec.name == "sf-fixed" ? "segment" : "local"] = uniform(rng, 1, 9000);
    return spec;
  };
  for (int trial = 0; trial < kRandomTrials; ++trial) {
    PatternConfig config;
    config.default_spec = random_spec();
    for (int64_t n = uniform(rng, 0, 4); n > 0; --n)
      config.layer_defaults[uniform(rng, 0, 40)] = random_spec();
    for (int64_t n = uniform(rng, 0, 8); n > 0; --n)
      config.head_specs[uniform(rng, 0, 40)][uniform(rng, 0, 27)] = random_spec();
    const std::string json = config.to_json();
    const PatternConfig parsed = PatternConfig::from_json(json);
    EXPECT_EQ(parsed.to_json(), json);
    for (int64_t layer = 0; layer <= 40; ++layer) {
      const std::vector<PatternSpec> expected = config.layer_specs(layer, 28);
      const std::vector<PatternSpec> actual = parsed.layer_specs(layer, 28);
      for (int64_t head = 0; head < 28; ++head)
        ASSERT_EQ(actual[head].to_string(), expected[head].to_string());
    }
  }
}

TEST(PatternConfig, LayerSpecsResolveHeadThenLayerThenDefault) {
  const PatternConfig config = PatternConfig::from_json(R"({
    "schema_version": 1, "default": "a-shape",
    "layers": {"0": {"default": "dense", "heads": {"3": "sf-strided:local=512,stride=512"}},
               "2": {"heads": {"1": "tri-shape"}}}})");
  const std::vector<PatternSpec> layer0 = config.layer_specs(0, 4);
  EXPECT_EQ(layer0[0].to_string(), "dense");
  EXPECT_EQ(layer0[3].to_string(), "sf-strided:local=512,stride=512");
  const std::vector<PatternSpec> layer2 = config.layer_specs(2, 2);
  EXPECT_EQ(layer2[0].to_string(), "a-shape");
  EXPECT_EQ(layer2[1].to_string(), "tri-shape");
  EXPECT_EQ(config.layer_specs(1, 1)[0].to_string(), "a-shape");
  expect_error([&] { (void)config.layer_specs(0, 3); }, ErrorCode::kInvalidArgument,
               {"layers.0.heads", "< 3", "got 3"});
  EXPECT_EQ(PatternConfig::from_json(R"({"schema_version": 1})").layer_specs(5, 1)[0].to_string(),
            "dense");
}

TEST(PatternConfig, ErrorsNameTheBadKey) {
  auto load = [](std::string text) { return [text] { (void)PatternConfig::from_json(text); }; };
  expect_error(load("{"), ErrorCode::kParseError, {"pattern config: invalid JSON"});
  expect_error(load("[]"), ErrorCode::kParseError, {"expected a JSON object"});
  expect_error(load(R"({"default": "dense"})"), ErrorCode::kParseError,
               {"schema_version", "missing"});
  expect_error(load(R"({"schema_version": 3})"), ErrorCode::kParseError,
               {"schema_version", "expected 1 to 2, got 3"});
  expect_error(load(R"({"schema_version": "1"})"), ErrorCode::kParseError,
               {"schema_version", "got \"1\""});
  expect_error(load(R"({"schema_version": 1, "defaults": "dense"})"), ErrorCode::kParseError,
               {"defaults", "unknown key"});
  expect_error(load(R"({"schema_version": 1, "default": "b-shape"})"), ErrorCode::kParseError,
               {"default", "unknown pattern \"b-shape\"", "a-shape"});
  expect_error(load(R"({"schema_version": 1, "default": 3})"), ErrorCode::kParseError,
               {"default", "pattern spec string"});
  expect_error(load(R"({"schema_version": 1, "layers": {"x": {}}})"), ErrorCode::kParseError,
               {"layers.x", "layer index", "\"x\""});
  expect_error(load(R"({"schema_version": 1, "layers": {"0": {"heads": {"-1": "dense"}}}})"),
               ErrorCode::kParseError, {"layers.0.heads.-1", "head index"});
  expect_error(load(R"({"schema_version": 1, "layers": {"0": {"heads": {"2": "a-shape:sink"}}}})"),
               ErrorCode::kParseError, {"layers.0.heads.2", "key=value"});
  expect_error(load(R"({"schema_version": 1, "layers": {"0": {"heads": {"2": "mesh"}}}})"),
               ErrorCode::kParseError, {"layers.0.heads.2", "unknown pattern \"mesh\""});
  expect_error(load(R"({"schema_version": 1, "layers": {"0": {"head": {}}}})"),
               ErrorCode::kParseError, {"layers.0.head", "unknown key"});
}

}  // namespace
}  // namespace mmsparse
