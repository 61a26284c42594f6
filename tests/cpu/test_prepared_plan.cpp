// The plan/run split on the CPU backend: a plan prepared once computes exactly what the host plan
// computes, on every call, and every misuse names what is wrong. In a build without the CUDA
// engine, the device entry points (device.h, prepare_plan for a CUDA device) say that there is
// none.

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "common/compare.h"
#include "common/errors.h"
#include "common/random.h"
#include "cpu/attention_helpers.h"
#include "gpu/plan_generators.h"
#include "mmsparse/attention.h"
#include "mmsparse/build_info.h"
#include "mmsparse/device.h"
#include "mmsparse/patterns.h"
#include "mmsparse/plan.h"
#include "mmsparse/status.h"

namespace mmsparse {
namespace {

using test::Operand;
using test::Random;
using testing::expect_error;

constexpr Device kCpu{DeviceType::kCPU, 0};
constexpr Device kCuda{DeviceType::kCUDA, 0};

constexpr int64_t kBatch = 2;
constexpr int64_t kKvHeads = 2;
constexpr int64_t kHeadDim = 36;  // not a multiple of the 8 dot-product lanes: exercises the tail
constexpr std::array<int64_t, 3> kGroups = {1, 4, 7};  // GQA ratios, 7 being the awkward one
// mixed_layout needs at least 66 keys (64 media tokens and text on both sides); these lengths keep
// kv_len above that even when it is shorter than q_len.
constexpr int64_t kMinQueryLength = 90;
constexpr int64_t kMaxQueryLength = 170;
constexpr int64_t kMaxExtraKeys = 50;
constexpr int64_t kMaxFewerKeys = 20;
constexpr int64_t kMinTileRows = 3;  // random plans also use short, uneven tiles
constexpr double kRandomScaleProbability = 0.5;
constexpr double kMinScale = 0.05;
constexpr double kMaxScale = 0.4;

// The static patterns of the paper's Table 2, at parameters that fit these short sequences.
constexpr std::array<const char*, 5> kPatternSpecs = {
    "dense", "a-shape:sink=8,local=40", "tri-shape:sink=8,local=40,bottom=30",
    "sf-fixed:segment=48,vline_stride=32", "sf-strided:local=40,stride=24"};

std::string label(DType dtype) { return "dtype=" + std::string(dtype_name(dtype)); }

int64_t random_group(Random& random) {
  return kGroups[static_cast<std::size_t>(random.uniform_int(0, kGroups.size() - 1))];
}

// Either the default scale (0 = 1/sqrt(head_dim)) or a random explicit one.
AttentionOptions random_options(Random& random) {
  AttentionOptions options;
  if (random.bernoulli(kRandomScaleProbability)) {
    options.scale = static_cast<float>(random.uniform(kMinScale, kMaxScale));
  }
  return options;
}

struct Inputs {
  Operand q;  // [batch, q_len, q_heads, head_dim]
  Operand k;  // [batch, kv_len, kv_heads, head_dim]
  Operand v;
};

// Fresh N(0, 1) inputs, each in a random layout (contiguous or head-major).
Inputs random_inputs(Random& random, DType dtype, int64_t q_len, int64_t kv_len, int64_t q_heads) {
  return {
      test::random_operand(random, dtype, kBatch, q_len, q_heads, kHeadDim, random.bernoulli(0.5)),
      test::random_operand(random, dtype, kBatch, kv_len, kKvHeads, kHeadDim,
                           random.bernoulli(0.5)),
      test::random_operand(random, dtype, kBatch, kv_len, kKvHeads, kHeadDim,
                           random.bernoulli(0.5))};
}

struct Result {
  Operand out;  // poisoned with NaN first, so an unwritten element can never compare equal
  Tensor lse;
};

Result poisoned_result(const Inputs& inputs, bool strided) {
  const TensorView& q = inputs.q.view;
  return {test::poisoned_output(q.dtype, q.shape[0], q.shape[1], q.shape[2], q.shape[3], strided),
          test::poisoned_lse(q.shape[0], q.shape[2], q.shape[1])};
}

// Equality element by element, bit for bit up to the representation as double (which is exact
// for every floating dtype): a NaN never passes, and the sign of zero counts.
void expect_identical(const TensorView& actual, const TensorView& expected, const char* what) {
  const std::vector<double> a = test::to_doubles(actual);
  const std::vector<double> e = test::to_doubles(expected);
  ASSERT_EQ(a.size(), e.size()) << what;
  int64_t differing = 0;
  std::size_t first = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a[i] == e[i] && std::signbit(a[i]) == std::signbit(e[i])) continue;
    if (differing++ == 0) first = i;
  }
  EXPECT_EQ(differing, 0) << what << " differs in " << differing << " of " << a.size()
                          << " elements, first at " << first << ": " << a[first] << " vs "
                          << e[first] << " (" << test::compare(actual, expected) << ")";
}

// Runs the host plan and the plan prepared once for the CPU on the same inputs; the results must
// be identical. The prepared run writes a differently laid out output, so that equality cannot
// come from sharing a buffer.
void expect_prepared_equals_host(const Plan& plan, const PreparedPlan& prepared,
                                 const Inputs& inputs, const AttentionOptions& options) {
  const Result host = poisoned_result(inputs, false);
  attention_planned(plan, inputs.q.view, inputs.k.view, inputs.v.view, host.out.view,
                    host.lse.view(), options);
  const Result ours = poisoned_result(inputs, true);
  attention_planned(prepared, inputs.q.view, inputs.k.view, inputs.v.view, ours.out.view,
                    ours.lse.view(), options);
  expect_identical(ours.out.view, host.out.view, "O");
  expect_identical(ours.lse.view(), host.lse.view(), "LSE");
}

// prepare_plan keeps the plan it was given and the device it was asked for.
void expect_prepared_holds(const PreparedPlan& prepared, const Plan& plan) {
  EXPECT_EQ(device_name(prepared.device()), device_name(kCpu));
  EXPECT_EQ(prepared.plan().shape, plan.shape);
  EXPECT_EQ(prepared.plan().summary(), plan.summary());
}

// --- Equality with the host plan ---------------------------------------------------------------

TEST(PreparedPlan, StaticPatternsEqualTheHostPlan) {
  Random random;
  SCOPED_TRACE(random.trace());
  for (const DType dtype : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
    const int64_t q_heads = kKvHeads * random_group(random);
    const int64_t q_len = test::random_length(random, kMinQueryLength, kMaxQueryLength);
    const int64_t kv_len = q_len + random.uniform_int(1, kMaxExtraKeys);
    SCOPED_TRACE(label(dtype) + " q_heads=" + std::to_string(q_heads) +
                 " q_len=" + std::to_string(q_len) + " kv_len=" + std::to_string(kv_len));
    PlanShape shape;
    shape.heads = q_heads;
    shape.q_len = q_len;
    shape.kv_len = kv_len;
    // The SF patterns take their frame stride from the layout's video.
    const ModalityLayout layout = test::mixed_layout(random, kv_len);
    const Inputs inputs = random_inputs(random, dtype, q_len, kv_len, q_heads);
    const AttentionOptions options = random_options(random);

    std::vector<PatternSpec> per_head;  // every pattern somewhere: heads differ in one plan
    for (int64_t head = 0; head < q_heads; ++head) {
      per_head.push_back(PatternSpec::parse(kPatternSpecs[head % kPatternSpecs.size()]));
    }
    std::vector<std::pair<std::string, Plan>> plans;
    for (const char* spec : kPatternSpecs) {
      plans.emplace_back(spec, build_plan(PatternSpec::parse(spec), shape, &layout));
    }
    plans.emplace_back("one pattern per head", build_plan(per_head, shape, &layout));
    for (const auto& [name, plan] : plans) {
      SCOPED_TRACE(name + ": " + plan.summary());
      const PreparedPlan prepared = prepare_plan(plan, kCpu);
      expect_prepared_holds(prepared, plan);
      expect_prepared_equals_host(plan, prepared, inputs, options);
    }
  }
}

// prepare_pattern on the CPU is prepare_plan(build_plan): the same plan, the same results.
TEST(PreparedPlan, PreparePatternEqualsPreparePlanOfTheBuiltPlan) {
  Random random;
  SCOPED_TRACE(random.trace());
  PlanShape shape;
  shape.heads = kKvHeads * random_group(random);
  shape.q_len = test::random_length(random, kMinQueryLength, kMaxQueryLength);
  shape.kv_len = shape.q_len + random.uniform_int(1, kMaxExtraKeys);
  const ModalityLayout layout = test::mixed_layout(random, shape.kv_len);  // SF defaults
  const Inputs inputs =
      random_inputs(random, DType::kFloat32, shape.q_len, shape.kv_len, shape.heads);
  for (const char* text : kPatternSpecs) {
    const PatternSpec spec = PatternSpec::parse(text);
    const Plan plan = build_plan(spec, shape, &layout);
    SCOPED_TRACE(std::string(text) + ": " + plan.summary());
    const PreparedPlan prepared = prepare_pattern(spec, shape, &layout, kCpu);
    expect_prepared_holds(prepared, plan);
    EXPECT_EQ(prepared.shape(), shape);
    EXPECT_EQ(prepared.plan().tiles, plan.tiles);
    EXPECT_EQ(prepared.plan().spans, plan.spans);
    EXPECT_EQ(prepared.plan().columns, plan.columns);
    EXPECT_EQ(prepared.plan().masks, plan.masks);
    expect_prepared_equals_host(plan, prepared, inputs, random_options(random));
  }
  // Dynamic patterns estimate from inputs; without them prepare_pattern throws naming them.
  EXPECT_THROW((void)prepare_pattern(PatternSpec::parse("vertical-slash"), shape, &layout, kCpu),
               Error);
}

// Random plans (permuted query orders, uneven tiles, rows in no tile, gathered columns, every mask
// policy with token arrays), broadcast over the batch or one per batch element, with more keys
// than queries and fewer (rows without keys). One preparation serves several calls.
TEST(PreparedPlan, RandomPlansEqualTheHostPlanOnEveryCall) {
  Random random;
  SCOPED_TRACE(random.trace());
  constexpr int kCalls = 2;
  for (const DType dtype : {DType::kFloat32, DType::kBFloat16}) {
    for (const bool per_batch : {false, true}) {
      const int64_t q_heads = kKvHeads * random_group(random);
      const int64_t q_len = test::random_length(random, kMinQueryLength, kMaxQueryLength);
      for (const int64_t kv_len : {q_len + random.uniform_int(1, kMaxExtraKeys),
                                   q_len - random.uniform_int(1, kMaxFewerKeys)}) {
        PlanShape shape;
        shape.batch = per_batch ? kBatch : 1;
        shape.heads = q_heads;
        shape.q_len = q_len;
        shape.kv_len = kv_len;
        shape.tile_rows = random.uniform_int(kMinTileRows, kDefaultTileRows);
        const ModalityLayout layout = test::mixed_layout(random, kv_len);
        test::RandomPlanOptions plan_options;
        plan_options.leave_gaps = true;
        plan_options.masks = test::MaskMix::kMixed;
        const Plan plan = test::random_plan(random, shape, plan_options, &layout);
        SCOPED_TRACE(label(dtype) + " kv_len=" + std::to_string(kv_len) +
                     " tile_rows=" + std::to_string(shape.tile_rows) + " plan: " + plan.summary());
        const PreparedPlan prepared = prepare_plan(plan, kCpu);
        expect_prepared_holds(prepared, plan);
        for (int call = 0; call < kCalls; ++call) {
          SCOPED_TRACE("call " + std::to_string(call));
          const Inputs inputs = random_inputs(random, dtype, q_len, kv_len, q_heads);
          expect_prepared_equals_host(plan, prepared, inputs, random_options(random));
        }
      }
    }
  }
}

TEST(PreparedPlan, MovesKeepThePreparedState) {
  Random random;
  SCOPED_TRACE(random.trace());
  const int64_t q_len = test::random_length(random, kMinQueryLength, kMaxQueryLength);
  const int64_t kv_len = q_len + random.uniform_int(1, kMaxExtraKeys);
  const int64_t q_heads = kKvHeads * random_group(random);
  const Plan plan = test::dense_plan(q_heads, q_len, kv_len, true);
  const Inputs inputs = random_inputs(random, DType::kBFloat16, q_len, kv_len, q_heads);

  PreparedPlan constructed(prepare_plan(plan, kCpu));
  expect_prepared_holds(constructed, plan);
  expect_prepared_equals_host(plan, constructed, inputs, {});
  PreparedPlan assigned;
  assigned = std::move(constructed);
  expect_prepared_holds(assigned, plan);
  expect_prepared_equals_host(plan, assigned, inputs, {});
}

// --- Errors ------------------------------------------------------------------------------------

// Fixed small odd sizes: the checks run before any arithmetic.
constexpr int64_t kQLen = 13;
constexpr int64_t kKvLen = 21;
constexpr int64_t kHeads = 4;
constexpr int64_t kDim = 8;
constexpr int64_t kTileRows = 8;

// Valid fp32 tensors of the given sizes, outputs poisoned so that a write would show.
struct Problem {
  Problem(int64_t batch, int64_t q_len, int64_t kv_len, int64_t heads)
      : q(DType::kFloat32, {batch, q_len, heads, kDim}),
        k(DType::kFloat32, {batch, kv_len, kKvHeads, kDim}),
        v(DType::kFloat32, {batch, kv_len, kKvHeads, kDim}),
        out(test::poisoned_output(DType::kFloat32, batch, q_len, heads, kDim, false)),
        lse(test::poisoned_lse(batch, heads, q_len)),
        views{q.view(), k.view(), v.view(), out.view, lse.view()} {}

  // Every view claims `device` (the memory stays on the host: nothing may touch it).
  void claim(Device device) {
    for (TensorView& view : views) view.device = device;
  }
  void run(const PreparedPlan& prepared) const {
    attention_planned(prepared, views[0], views[1], views[2], views[3], views[4]);
  }
  bool outputs_untouched() const {
    const auto is_nan = [](double value) { return std::isnan(value); };
    const std::vector<double> o = test::to_doubles(out.view);
    const std::vector<double> l = test::to_doubles(lse.view());
    return std::all_of(o.begin(), o.end(), is_nan) && std::all_of(l.begin(), l.end(), is_nan);
  }

  Tensor q, k, v;
  Operand out;
  Tensor lse;
  std::array<TensorView, 5> views;  // q, k, v, out, lse
};

// One head slot per query head; two tiles, the first with a span and a gathered column.
Plan small_plan(int64_t batch = 1) {
  PlanShape shape;
  shape.batch = batch;
  shape.heads = kHeads;
  shape.q_len = kQLen;
  shape.kv_len = kKvLen;
  shape.tile_rows = kTileRows;
  constexpr int64_t kSpanEnd = 10;
  constexpr int64_t kColumn = 15;
  PlanBuilder builder(shape);
  for (int64_t slot = 0; slot < shape.head_slots(); ++slot) {
    builder.begin_head();
    builder.begin_tile(0, kTileRows);
    builder.add_span(0, kSpanEnd);
    builder.add_column(kColumn);
    builder.begin_tile(kTileRows, kQLen);
    builder.add_span(0, kKvLen);
  }
  return builder.finish();
}

TEST(PreparedPlanErrors, EmptyPreparedPlanIsRejected) {
  const PreparedPlan empty;
  expect_error([&] { (void)empty.plan(); }, ErrorCode::kInvalidArgument,
               {"PreparedPlan", "prepare_plan"});
  const Problem problem(1, kQLen, kKvLen, kHeads);
  expect_error([&] { problem.run(empty); }, ErrorCode::kInvalidArgument, {"PreparedPlan"});
  EXPECT_TRUE(problem.outputs_untouched());
}

TEST(PreparedPlanErrors, TensorsOfAnotherShapeAreRejected) {
  const PreparedPlan prepared = prepare_plan(small_plan(), kCpu);
  const PreparedPlan per_batch = prepare_plan(small_plan(kBatch), kCpu);
  ASSERT_NO_THROW(Problem(1, kQLen, kKvLen, kHeads).run(prepared));
  ASSERT_NO_THROW(Problem(kBatch, kQLen, kKvLen, kHeads).run(per_batch));

  struct Case {
    const char* fragment;
    const PreparedPlan& prepared;
    Problem problem;
  };
  const Case cases[] = {
      {"plan heads", prepared, Problem(1, kQLen, kKvLen, kHeads + kKvHeads)},
      {"plan q_len", prepared, Problem(1, kQLen + 1, kKvLen, kHeads)},
      {"plan kv_len", prepared, Problem(1, kQLen, kKvLen - 1, kHeads)},
      {"plan batch", per_batch, Problem(kBatch + 1, kQLen, kKvLen, kHeads)},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.fragment);
    expect_error([&] { c.problem.run(c.prepared); }, ErrorCode::kInvalidArgument, {c.fragment});
    EXPECT_TRUE(c.problem.outputs_untouched());
  }
}

// Checked before the backend is chosen, so the answer is the same with or without CUDA.
TEST(PreparedPlanErrors, PlanPreparedForTheCpuRejectsTensorsOnADevice) {
  const PreparedPlan prepared = prepare_plan(small_plan(), kCpu);
  Problem problem(1, kQLen, kKvLen, kHeads);
  problem.claim(kCuda);
  expect_error([&] { problem.run(prepared); }, ErrorCode::kInvalidArgument,
               {"prepared plan device", device_name(kCuda), device_name(kCpu)});
  EXPECT_TRUE(problem.outputs_untouched());
}

TEST(PreparedPlanErrors, PrepareValidatesThePlan) {
  ASSERT_NO_THROW(small_plan().validate());
  struct Corruption {
    const char* field;
    std::function<void(Plan&)> apply;
  };
  const Corruption corruptions[] = {
      {"plan.shape.tile_rows", [](Plan& plan) { plan.shape.tile_rows = 0; }},
      {"plan.head_tile_offsets", [](Plan& plan) { plan.head_tile_offsets.pop_back(); }},
      {"plan.runs",
       [](Plan& plan) {  // head slot 0 visits one query too few
         plan.runs = {{0, kQLen - 1, 1}};
         plan.head_run_offsets.assign(plan.head_run_offsets.size(), 1);
         plan.head_run_offsets.front() = 0;
       }},
      {"plan.tiles", [](Plan& plan) { plan.tiles.back().end = kQLen + 1; }},
      {"plan.tile_masks",
       [](Plan& plan) { plan.tile_masks.front() = static_cast<int32_t>(plan.masks.size()); }},
      {"plan.spans", [](Plan& plan) { plan.spans.front().end = kKvLen + 1; }},
      {"plan.columns", [](Plan& plan) { plan.columns.front() = plan.spans.front().begin; }},
      {"plan.token_modality", [](Plan& plan) { plan.masks.front().same_media = true; }},
  };
  for (const Corruption& corruption : corruptions) {
    SCOPED_TRACE(corruption.field);
    Plan plan = small_plan();
    corruption.apply(plan);
    expect_error([&] { (void)prepare_plan(std::move(plan), kCpu); }, ErrorCode::kInvalidArgument,
                 {corruption.field});
  }
}

// --- Builds without the CUDA engine ------------------------------------------------------------

bool has_cuda_engine() {
  const std::vector<std::string> backends = build_info().backends;
  return std::find(backends.begin(), backends.end(), "cuda-sm90a") != backends.end();
}

constexpr const char* kNoCudaEngine = "no CUDA engine";
constexpr const char* kCudaBuildSkip =
    "this build has the CUDA engine; tests/gpu/test_gpu_public_api.cpp covers device.h there";

TEST(PreparedPlanWithoutCuda, DeviceEntryPointsSayThereIsNoCudaEngine) {
  if (has_cuda_engine()) GTEST_SKIP() << kCudaBuildSkip;
  const std::vector<int64_t> shape = {3, 5};
  expect_error([&] { [[maybe_unused]] const DeviceTensor tensor(DType::kBFloat16, shape, kCuda); },
               ErrorCode::kUnsupported, {"DeviceTensor", kNoCudaEngine});
  const Tensor host(DType::kFloat32, shape);
  expect_error([&] { (void)DeviceTensor::from_host(host.view(), kCuda); }, ErrorCode::kUnsupported,
               {"DeviceTensor", kNoCudaEngine});
  expect_error([&] { synchronize(kCuda); }, ErrorCode::kUnsupported,
               {"synchronize", kNoCudaEngine});
  int runs = 0;
  constexpr int kWarmup = 1;
  constexpr int kRepeats = 3;
  expect_error([&] { (void)median_device_milliseconds([&] { ++runs; }, kWarmup, kRepeats, kCuda); },
               ErrorCode::kUnsupported, {"median_device_milliseconds", kNoCudaEngine});
  EXPECT_EQ(runs, 0) << "work ran although nothing could time it";
}

TEST(PreparedPlanWithoutCuda, PreparingForACudaDeviceIsUnsupported) {
  if (has_cuda_engine()) GTEST_SKIP() << kCudaBuildSkip;
  expect_error([&] { (void)prepare_plan(small_plan(), kCuda); }, ErrorCode::kUnsupported,
               {"prepare_plan", device_name(kCuda), "CUDA engine"});
  expect_error(
      [&] {
        (void)prepare_pattern(PatternSpec::parse("dense"), small_plan().shape, nullptr, kCuda);
      },
      ErrorCode::kUnsupported, {"prepare_plan", device_name(kCuda), "CUDA engine"});
}

}  // namespace
}  // namespace mmsparse
