// The wgmma kernel with persistent CTAs on a dynamic tile queue (cuda::CtaSchedule::kPersistent,
// cuda/attention/sm90/persistent.cuh) against the fp64 oracle and the CPU reference, and bit for
// bit against the kernel of one CTA per tile, which computes every tile the same way: BlindSight's
// templates on random multi-image layouts (odd image sizes, a hundred tiny images, one image, text
// and image tiles mixed; Qwen and Gemma 3 sinks, causal and bidirectional), random plans with
// permuted query orders, uncovered rows, gathered columns, strided spans and every mask, plans of
// spans only (dense, tri-shape; run on the gathered-key instantiation), GQA ratios, q_len <
// kv_len, broadcast batches, bfloat16 and float16; grids of one partial round of CTAs to many
// rounds; passes merged by LSE. Repeated launches on one stream (the queue's counter is reset by
// each launch's last claim), one counter per stream. Then the refusals. Every test that claims
// persistent CTAs asks for them through AttentionArgs::schedule (kPersistent refuses where they
// are not compiled, so none falls back silently) or asserts that its plans are compiled for them.

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "attention_harness.h"
#include "common/blindsight_cases.h"
#include "common/random.h"
#include "cuda/attention/tile_queue.h"
#include "cuda/runtime/device_query.h"
#include "cuda/runtime/engine.h"
#include "mmsparse/layout.h"
#include "mmsparse/patterns.h"
#include "mmsparse/plan.h"
#include "mmsparse/status.h"
#include "plan_generators.h"
#include "tensor_bits.h"

namespace mmsparse::test {
namespace {

constexpr std::array<int64_t, 4> kGroups = {1, 2, 4, 7};  // GQA ratios
constexpr int64_t kMaxSide = 12;                          // image sides (tokens)
constexpr int64_t kTinySide = 3;
constexpr int64_t kMaxImages = 8;
constexpr int64_t kHundredImages = 100;
constexpr int64_t kMaxText = 30;
constexpr int64_t kMaxQueryShortfall = 90;
// More (tile, batch element) items than an H100's 132 SMs take in two rounds, so that every CTA
// claims tiles from the queue and CTAs run different numbers of tiles.
constexpr int64_t kManyRoundsKvHeads = 4;
constexpr int64_t kManyRoundsGroup = 7;
constexpr int64_t kManyRoundsBatch = 3;
constexpr int64_t kManyRoundsImages = 10;
// A tri-shape plan's sink and local window and its dense bottom rows, in tokens.
constexpr int64_t kTriShapeSink = 13;
constexpr int64_t kTriShapeLocal = 70;
constexpr int64_t kTriShapeBottom = 45;
// The grid mask's bands as lattice records (its second pass), on a layout long enough for them.
constexpr const char* kLatticeGridMask =
    "grid-mask:sink=8,local=40,period=32,band=6,phases=4,lattice=1";
constexpr int64_t kLatticeLength = 700;

constexpr int64_t kSmallHeadDim = 64;  // the mma.sync kernel's; no persistent CTAs there
constexpr auto kPersistent = cuda::CtaSchedule::kPersistent;
constexpr auto kOneTilePerCta = cuda::CtaSchedule::kOneTilePerCta;

// The persistent kernel's plans: head_dim 128, tiles of two consumer warpgroups.
KernelConfig persistent_config(DType dtype) {
  return {dtype, cuda::kWgmmaHeadDim, cuda::AttentionKernel::kWgmma, cuda::kMaxTileRows};
}

ProblemSize case_problem(Random& random, DType dtype, int64_t group, int64_t kv_len,
                         int64_t batch = 1) {
  ProblemSize size = random_problem(random, persistent_config(dtype), batch, group);
  size.kv_len = kv_len;
  size.q_len = random.bernoulli(0.5)
                   ? kv_len
                   : std::max<int64_t>(1, kv_len - random.uniform_int(1, kMaxQueryShortfall));
  return size;
}

PlanShape plan_shape(const ProblemSize& size) {
  return {.heads = size.q_heads(),
          .q_len = size.q_len,
          .kv_len = size.kv_len,
          .tile_rows = size.tile_rows};
}

// One BlindSight template per query head, in turn from a random first.
Plan blindsight_plan(Random& random, const BlindSightLayoutCase& test_case,
                     const PlanShape& shape) {
  std::vector<PatternSpec> specs;
  const int64_t first = random.uniform_int(0, 3);
  for (int64_t head = 0; head < shape.heads; ++head) {
    specs.push_back(blindsight_spec(
        random, test_case, kBlindSightTemplates[(first + head) % kBlindSightTemplates.size()]));
  }
  return build_plan(specs, shape, &test_case.layout);
}

// The persistent kernel's result and the one-tile kernel's, which must be equal bit for bit.
AttentionResult run_both_schedules(const std::vector<cuda::DevicePlan>& passes,
                                   const AttentionInputs& inputs, ProblemSize size,
                                   OperandLayout out_layout) {
  EXPECT_TRUE(runs_on_wgmma(passes, size)) << "the persistent kernel is a wgmma kernel";
  size.schedule = kPersistent;
  AttentionResult persistent = run_gpu(passes, inputs, size, out_layout);
  size.schedule = kOneTilePerCta;
  const AttentionResult one_tile = run_gpu(passes, inputs, size, out_layout);
  EXPECT_EQ(differing_elements(persistent.out.view, one_tile.out.view), 0) << "O";
  EXPECT_EQ(differing_elements(persistent.lse.view(), one_tile.lse.view()), 0) << "LSE";
  return persistent;
}

void expect_persistent_matches(Random& random, const Plan& plan, const ProblemSize& size,
                               bool with_oracle = true) {
  SCOPED_TRACE(describe(size) + " plan " + plan.summary());
  const AttentionInputs inputs = random_inputs(random, size);
  const std::vector<cuda::DevicePlan> passes = cuda::upload_passes(plan, nullptr);
  const AttentionResult persistent =
      run_both_schedules(passes, inputs, size, random_layout(random));
  if (with_oracle) expect_matches_oracle(plan, inputs, size, persistent);
}

// An environment variable set for a scope, unset after it (the tests run in one process).
class ScopedVariable {
 public:
  ScopedVariable(const char* name, const char* value) : name_(name) {
    EXPECT_EQ(setenv(name, value, 1), 0);
  }
  ~ScopedVariable() { unsetenv(name_); }
  ScopedVariable(const ScopedVariable&) = delete;
  ScopedVariable& operator=(const ScopedVariable&) = delete;

 private:
  const char* name_;
};

class GpuPersistentSchedule : public ::testing::TestWithParam<DType> {};

TEST_P(GpuPersistentSchedule, BlindSightTemplates) {
  Random random;
  SCOPED_TRACE(random.trace());
  for (const int64_t group : kGroups) {
    const BlindSightLayoutCase test_case =
        random_blindsight_case(random, random.uniform_int(1, kMaxImages), kMaxSide, kMaxText);
    SCOPED_TRACE("layout " + test_case.layout.to_json());
    const ProblemSize size = case_problem(random, GetParam(), group, test_case.layout.length());
    expect_persistent_matches(random, blindsight_plan(random, test_case, plan_shape(size)), size);
  }
}

// Many tiles of few keys each (the case the persistent kernel is for) and many gathered sinks.
TEST_P(GpuPersistentSchedule, AHundredTinyImages) {
  Random random;
  SCOPED_TRACE(random.trace());
  const BlindSightLayoutCase test_case =
      random_blindsight_case(random, kHundredImages, kTinySide, kMaxText);
  SCOPED_TRACE("layout " + test_case.layout.to_json());
  const ProblemSize size = case_problem(random, GetParam(), 2, test_case.layout.length());
  expect_persistent_matches(random, blindsight_plan(random, test_case, plan_shape(size)), size);
}

TEST_P(GpuPersistentSchedule, OneImage) {
  Random random;
  SCOPED_TRACE(random.trace());
  for (const int64_t group : {1, 4}) {
    const BlindSightLayoutCase test_case = random_blindsight_case(random, 1, kMaxSide, kMaxText);
    SCOPED_TRACE("layout " + test_case.layout.to_json());
    const ProblemSize size = case_problem(random, GetParam(), group, test_case.layout.length());
    expect_persistent_matches(random, blindsight_plan(random, test_case, plan_shape(size)), size);
  }
}

// Random plans: permuted query orders, rows in no tile, spans of any alignment, strided spans and
// columns, positional masks and masks that read tokens (the token instantiation).
TEST_P(GpuPersistentSchedule, RandomPlans) {
  Random random;
  SCOPED_TRACE(random.trace());
  int64_t gathering_plans = 0;
  for (const MaskMix masks : {MaskMix::kPositional, MaskMix::kMixed}) {
    for (const int64_t group : {1, 3}) {
      const ProblemSize size = random_problem(random, persistent_config(GetParam()), 2, group);
      const ModalityLayout layout = mixed_layout(random, size.kv_len);
      RandomPlanOptions options;
      options.leave_gaps = random.bernoulli(0.5);
      options.masks = masks;
      options.max_columns = 200;
      const Plan plan = random_plan(random, plan_shape(size), options, &layout);
      expect_persistent_matches(random, plan, size);
      if (cuda::DevicePlan(plan, nullptr).layout().gathers) ++gathering_plans;
    }
  }
  EXPECT_GT(gathering_plans, 0) << "no random plan gathered keys: the gathers never ran persistent";
}

// Plans of spans only: dense (causal and not: 128-row tiles of every length) and tri-shape's sink
// and window spans over dense bottom rows in tiles of uneven sizes. They run on the gathered-key
// instantiation, every chunk a tensor copy, and must equal the spans-only kernel of one CTA per
// tile bit for bit.
TEST_P(GpuPersistentSchedule, SpanOnlyPlans) {
  Random random;
  SCOPED_TRACE(random.trace());
  for (const int64_t group : {1, 4}) {
    const ProblemSize size = random_problem(random, persistent_config(GetParam()), 1, group);
    const PlanShape shape = plan_shape(size);
    for (const Plan& plan :
         {dense_plan(shape, true), dense_plan(shape, false),
          tri_shape_plan(shape, kTriShapeSink, kTriShapeLocal, kTriShapeBottom)}) {
      ASSERT_FALSE(cuda::DevicePlan(plan, nullptr).layout().gathers) << plan.summary();
      expect_persistent_matches(random, plan, size);
    }
  }
}

// Two passes merged by LSE: a random plan's spans and strided spans, then its columns, both on
// persistent CTAs, the columns merging into the first pass's rows (the resumed rows at the
// positions the producer looked up). The schedule comes from the environment, which falls back to
// one CTA per tile where persistent CTAs are not compiled: the passes are asserted to be plans
// they are compiled for (no lattice records; head_dim 128 and 128-row tiles by construction).
TEST_P(GpuPersistentSchedule, PassesAccumulate) {
  Random random;
  SCOPED_TRACE(random.trace());
  int64_t gathering_plans = 0;
  for (const int64_t group : {1, 4, 7}) {
    const ProblemSize size = random_problem(random, persistent_config(GetParam()), 1, group);
    const ModalityLayout layout = mixed_layout(random, size.kv_len);
    RandomPlanOptions options;
    options.leave_gaps = random.bernoulli(0.5);
    options.masks = MaskMix::kMixed;
    options.max_columns = 200;
    const Plan whole = random_plan(random, plan_shape(size), options, &layout);
    Plan plan = split_plan(whole, true);
    add_pass(plan, split_plan(whole, false));
    const std::vector<cuda::DevicePlan> passes = cuda::upload_passes(plan, nullptr);
    for (const cuda::DevicePlan& pass : passes) ASSERT_EQ(pass.layout().lattice_step, 0);
    if (!passes.back().layout().gathers) continue;
    ++gathering_plans;
    SCOPED_TRACE(describe(size) + " plan " + plan.summary());
    const AttentionInputs inputs = random_inputs(random, size);
    const OperandLayout out_layout = random_layout(random);
    const auto run_with = [&](const char* schedule) {
      const ScopedVariable variable("MMSPARSE_CTA_SCHEDULE", schedule);
      return run_gpu(passes, inputs, size, out_layout);
    };
    const AttentionResult persistent = run_with("persistent");
    const AttentionResult one_tile = run_with("tile");
    EXPECT_EQ(differing_elements(persistent.out.view, one_tile.out.view), 0) << "O";
    EXPECT_EQ(differing_elements(persistent.lse.view(), one_tile.lse.view()), 0) << "LSE";
    expect_matches_oracle(plan, inputs, size, persistent);
  }
  EXPECT_GT(gathering_plans, 0) << "no plan gathered keys: the persistent kernel never ran";
}

// Several rounds of CTAs over a broadcast batch and 28 heads: bit for bit the one-tile kernel's
// result (which the other suites hold to the oracle; a dense fp64 oracle of this size is slow).
TEST_P(GpuPersistentSchedule, ManyRounds) {
  Random random;
  SCOPED_TRACE(random.trace());
  const BlindSightLayoutCase test_case =
      random_blindsight_case(random, kManyRoundsImages, kMaxSide, kMaxText);
  SCOPED_TRACE("layout " + test_case.layout.to_json());
  ProblemSize size = case_problem(random, GetParam(), kManyRoundsGroup, test_case.layout.length(),
                                  kManyRoundsBatch);
  size.kv_heads = kManyRoundsKvHeads;
  const Plan plan = blindsight_plan(random, test_case, plan_shape(size));
  const std::vector<GpuInfo> gpus = cuda::list_gpus();
  ASSERT_FALSE(gpus.empty());
  EXPECT_GT(plan.num_tiles() * size.batch, 2 * gpus.front().multiprocessors)
      << "fewer than three rounds of CTAs";
  expect_persistent_matches(random, plan, size, /*with_oracle=*/false);
}

// The same launch three times on one stream: each must find the queue's counter at zero (the
// previous launch's last claim reset it); a counter left at the launch's claims would hand every
// CTA of the next launch an item past the last after its first tile, leaving rows unwritten. A
// broadcast batch just large enough for more items than SMs (every CTA claims from the queue), so
// that the sanitizers run it in seconds.
TEST_P(GpuPersistentSchedule, RepeatedLaunchesOnOneStream) {
  Random random;
  SCOPED_TRACE(random.trace());
  const BlindSightLayoutCase test_case =
      random_blindsight_case(random, kManyRoundsImages, kMaxSide, kMaxText);
  SCOPED_TRACE("layout " + test_case.layout.to_json());
  ProblemSize size = case_problem(random, GetParam(), kManyRoundsGroup, test_case.layout.length());
  size.kv_heads = kManyRoundsKvHeads;
  const Plan plan = blindsight_plan(random, test_case, plan_shape(size));
  const std::vector<GpuInfo> gpus = cuda::list_gpus();
  ASSERT_FALSE(gpus.empty());
  ASSERT_GT(plan.num_tiles(), 0);
  size.batch = gpus.front().multiprocessors / plan.num_tiles() + 1;
  const AttentionInputs inputs = random_inputs(random, size);
  const std::vector<cuda::DevicePlan> passes = cuda::upload_passes(plan, nullptr);
  const OperandLayout out_layout = random_layout(random);
  const AttentionResult one_tile = run_gpu(passes, inputs, size, out_layout);
  size.schedule = kPersistent;
  constexpr int kLaunches = 3;
  for (int launch = 0; launch < kLaunches; ++launch) {
    SCOPED_TRACE("launch " + std::to_string(launch));
    const AttentionResult persistent = run_gpu(passes, inputs, size, out_layout);
    EXPECT_EQ(differing_elements(persistent.out.view, one_tile.out.view), 0) << "O";
    EXPECT_EQ(differing_elements(persistent.lse.view(), one_tile.lse.view()), 0) << "LSE";
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, GpuPersistentSchedule,
                         ::testing::Values(DType::kBFloat16, DType::kFloat16),
                         [](const ::testing::TestParamInfo<DType>& info) {
                           return std::string(dtype_name(info.param));
                         });

// One counter per stream, the same one for every launch on a stream.
TEST(GpuPersistentScheduleQueue, OneCounterPerStream) {
  cudaStream_t first = nullptr;
  cudaStream_t second = nullptr;
  ASSERT_EQ(cudaStreamCreate(&first), cudaSuccess);
  ASSERT_EQ(cudaStreamCreate(&second), cudaSuccess);
  uint32_t* const first_counter = cuda::tile_queue_counter(first);
  EXPECT_NE(first_counter, nullptr);
  EXPECT_EQ(cuda::tile_queue_counter(first), first_counter);
  EXPECT_NE(cuda::tile_queue_counter(second), first_counter);
  EXPECT_NE(cuda::tile_queue_counter(nullptr), first_counter);
  uint32_t value = 1;
  ASSERT_EQ(cudaMemcpyAsync(&value, first_counter, sizeof(value), cudaMemcpyDeviceToHost, first),
            cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(first), cudaSuccess);
  EXPECT_EQ(value, 0u) << "a stream's counter starts at zero";
  EXPECT_EQ(cudaStreamDestroy(first), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(second), cudaSuccess);
}

// kAuto's choice (resolved_cta_schedule; the rule in cuda/attention/engine.cu): persistent CTAs for
// many short tiles beside a few long ones that gather keys (BlindSight's image and text tiles in
// place, where they measured a gain), one CTA per tile for the same templates through key orders
// (spans only, where they measured a loss), for dense (the longest tile twice the mean), for
// uniform short tiles (A-shape), for fewer items than SMs and under MMSPARSE_CTA_SCHEDULE=tile.
TEST(GpuPersistentScheduleAuto, PersistentWhereItMeasuredAGain) {
  constexpr int64_t kImageSide = 32;  // 1024 tokens, 8 chunks an image
  // Text before each image, not a whole number of chunks, so that image tiles in place gather its
  // remainder as columns.
  constexpr int64_t kLeadingText = 100;
  constexpr int64_t kText = 256;  // two text tiles after the images, reading every key
  constexpr int64_t kManyImages = 15;
  constexpr int64_t kFewImages = 3;
  constexpr int64_t kHeads = 28;  // items: tiles × heads, well above any H100's or H200's SMs
  const auto resolved = [&](const std::string& pattern, int64_t images, int64_t heads) {
    LayoutBuilder builder;
    for (int64_t i = 0; i < images; ++i) {
      builder.text(kLeadingText).image({1, kImageSide, kImageSide}, false);
    }
    const ModalityLayout layout = builder.text(kText).build();
    const PlanShape shape{.heads = heads,
                          .q_len = layout.length(),
                          .kv_len = layout.length(),
                          .tile_rows = cuda::kMaxTileRows};
    const PatternSpec spec = resolve_pattern(PatternSpec::parse(pattern), &layout);
    const Plan host_plan = build_plan(spec, shape, &layout);
    const cuda::DevicePlan plan(host_plan, nullptr);
    cuda::AttentionArgs args;
    args.dtype = DType::kBFloat16;
    args.batch = 1;
    args.q_len = shape.q_len;
    args.kv_len = shape.kv_len;
    args.q_heads = heads;
    args.kv_heads = heads;
    args.head_dim = cuda::kWgmmaHeadDim;
    args.kernel = cuda::AttentionKernel::kWgmma;
    return std::pair(cuda::resolved_cta_schedule(plan, args), host_plan.key_orders.empty());
  };
  const auto schedule = [&](const std::string& pattern, int64_t images, int64_t heads) {
    return resolved(pattern, images, heads).first;
  };
  for (const char* in_place : {"blindsight-intra:permute=0", "blindsight-sink:permute=0",
                               "blindsight-intra-sink:permute=0"}) {
    const auto [chosen, keys_in_place] = resolved(in_place, kManyImages, kHeads);
    EXPECT_TRUE(keys_in_place) << in_place;
    EXPECT_EQ(chosen, kPersistent) << in_place;
  }
  for (const char* ordered :
       {"blindsight-intra", "blindsight-sink:permute=1", "blindsight-intra-sink"}) {
    const auto [chosen, keys_in_place] = resolved(ordered, kManyImages, kHeads);
    EXPECT_FALSE(keys_in_place) << ordered << " built without a key order";
    EXPECT_EQ(chosen, kOneTilePerCta) << ordered;
  }
  EXPECT_EQ(schedule("dense", kManyImages, kHeads), kOneTilePerCta);
  EXPECT_EQ(schedule("a-shape:sink=128,local=1024", kManyImages, kHeads), kOneTilePerCta);
  EXPECT_EQ(schedule("blindsight-intra:permute=0", kFewImages, 1), kOneTilePerCta)
      << "fewer items than SMs";
  const ScopedVariable tile("MMSPARSE_CTA_SCHEDULE", "tile");
  EXPECT_EQ(schedule("blindsight-intra:permute=0", kManyImages, kHeads), kOneTilePerCta);
}

// kPersistent where it is not compiled: lattice records, tiles of one consumer warpgroup, head_dim
// 256 and 64; and a bad override in the environment.
TEST(GpuPersistentScheduleRefusals, NamesWhatIsMissing) {
  Random random;
  const auto expect_refused = [&](const Plan& plan, ProblemSize size, ErrorCode code,
                                  const std::string& named) {
    size.schedule = kPersistent;
    const AttentionInputs inputs = random_inputs(random, size);
    const std::vector<cuda::DevicePlan> passes = cuda::upload_passes(plan, nullptr);
    try {
      run_gpu(passes, inputs, size, OperandLayout::kContiguous);
      ADD_FAILURE() << "expected a refusal naming " << named;
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), code) << error.what();
      EXPECT_NE(std::string(error.what()).find(named), std::string::npos) << error.what();
    }
  };
  ProblemSize size = random_problem(random, persistent_config(DType::kBFloat16), 1, 2);
  size.q_len = kLatticeLength;
  size.kv_len = kLatticeLength;
  const Plan bands = build_plan(PatternSpec::parse(kLatticeGridMask), plan_shape(size));
  const std::vector<cuda::DevicePlan> band_passes = cuda::upload_passes(bands, nullptr);
  ASSERT_TRUE(std::any_of(band_passes.begin(), band_passes.end(), [](const auto& pass) {
    return pass.layout().lattice_step > 0;
  })) << "the grid mask's bands uploaded without lattice records";
  expect_refused(bands, size, ErrorCode::kUnsupported, "lattice records yes");

  const BlindSightLayoutCase test_case = random_blindsight_case(random, 3, kMaxSide, kMaxText);
  ProblemSize narrow = case_problem(random, DType::kBFloat16, 2, test_case.layout.length());
  narrow.tile_rows = cuda::kMmaSyncTileRows;
  expect_refused(blindsight_plan(random, test_case, plan_shape(narrow)), narrow,
                 ErrorCode::kUnsupported, "tile_rows 64");
  ProblemSize wide = case_problem(random, DType::kBFloat16, 2, test_case.layout.length());
  wide.head_dim = cuda::kWgmmaWideHeadDim;
  expect_refused(blindsight_plan(random, test_case, plan_shape(wide)), wide,
                 ErrorCode::kUnsupported, "head_dim 256");
  ProblemSize small = case_problem(random, DType::kBFloat16, 2, test_case.layout.length());
  small.head_dim = kSmallHeadDim;
  small.tile_rows = cuda::kMmaSyncTileRows;  // the tiles the mma.sync kernel runs
  expect_refused(blindsight_plan(random, test_case, plan_shape(small)), small,
                 ErrorCode::kUnsupported, "head_dim " + std::to_string(kSmallHeadDim));

  const ScopedVariable variable("MMSPARSE_CTA_SCHEDULE", "sometimes");
  ProblemSize automatic = case_problem(random, DType::kBFloat16, 2, test_case.layout.length());
  const Plan plan = blindsight_plan(random, test_case, plan_shape(automatic));
  const AttentionInputs inputs = random_inputs(random, automatic);
  const std::vector<cuda::DevicePlan> passes = cuda::upload_passes(plan, nullptr);
  try {
    run_gpu(passes, inputs, automatic, OperandLayout::kContiguous);
    ADD_FAILURE() << "expected MMSPARSE_CTA_SCHEDULE=sometimes to be refused";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kInvalidArgument) << error.what();
    EXPECT_NE(std::string(error.what()).find("MMSPARSE_CTA_SCHEDULE"), std::string::npos);
  }
}

}  // namespace
}  // namespace mmsparse::test
