// Masks that read tokens (same-media, modality pairs, bidirectional attention inside media items)
// on the wgmma kernel: every plan here must run on it (the test fails otherwise), against the fp64
// oracle and the CPU reference, on fresh random inputs, outputs poisoned before the run, odd
// lengths, GQA ratios, tiles of 64 and 128 rows, bfloat16 and float16, span-only plans (the span
// instantiations) and plans with gathered keys (the gather instantiations), head_dim 128 and 256.
// Plans with lattice records fall back to the mma.sync kernel (refused at head_dim 256, which it
// does not serve). Bidirectional images also run on the mma.sync kernel (what head_dim 64 takes),
// whose chunk classification lifts them separately.

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "attention_harness.h"
#include "common/errors.h"
#include "common/random.h"
#include "cuda/runtime/engine.h"
#include "device_buffer.h"
#include "mmsparse/attention.h"
#include "mmsparse/layout.h"
#include "mmsparse/patterns.h"
#include "mmsparse/plan.h"
#include "mmsparse/status.h"
#include "plan_generators.h"

namespace mmsparse::test {
namespace {

constexpr std::array<int64_t, 4> kGroups = {1, 2, 4, 7};  // GQA ratios
// Gemma 3 shapes in miniature: images of a few hundred tokens between text, so that one image's
// tokens span several 128-key chunks and query tiles.
constexpr Grid kLargeImage{1, 12, 14};
constexpr Grid kSmallImage{1, 5, 7};
constexpr int64_t kMaxLeadingText = 40;
constexpr int64_t kMiddleText = 23;
constexpr int64_t kMaxTrailingText = 70;
constexpr int64_t kMaxWindow = 150;
constexpr int64_t kMaxQueryShortfall = 90;  // kv_len - q_len of a prefill after a cached prefix

// Which keys a plan lists: all of them as one span, or the first part as a span and the rest as
// gathered columns (some left out), which takes the gather instantiations.
enum class KeyLists { kSpans, kSpansAndColumns };

class GpuTokenMasks : public ::testing::TestWithParam<KernelConfig> {
 protected:
  // Runs the plan, which must be served by the kernel the size asks for, and checks it against
  // the oracles.
  static void check_on_kernel(Random& random, const Plan& plan, const AttentionInputs& inputs,
                              const ProblemSize& size) {
    const OperandLayout out_layout = random_layout(random);
    SCOPED_TRACE(describe(size) + " out=" + layout_name(out_layout) + " plan: " + plan.summary());
    const std::vector<cuda::DevicePlan> passes = cuda::upload_passes(plan, nullptr);
    ASSERT_EQ(runs_on_wgmma(passes, size), size.kernel == cuda::AttentionKernel::kWgmma)
        << "token masks must run on the kernel asked for";
    expect_matches_oracle(plan, inputs, size, run_gpu(passes, inputs, size, out_layout));
  }

  static PlanShape plan_shape(const ProblemSize& size) {
    PlanShape shape;
    shape.heads = size.q_heads();
    shape.q_len = size.q_len;
    shape.kv_len = size.kv_len;
    shape.tile_rows = size.tile_rows;
    return shape;
  }

  // Every tile under `policy`, over every key (KeyLists), the layout's tokens attached.
  static Plan whole_plan(Random& random, const PlanShape& shape, const MaskPolicy& policy,
                         KeyLists lists, const ModalityLayout& layout) {
    constexpr double kColumnProbability = 0.8;
    PlanBuilder builder(shape);
    for (int64_t slot = 0; slot < shape.head_slots(); ++slot) {
      builder.begin_head();
      for (int64_t begin = 0; begin < shape.q_len; begin += shape.tile_rows) {
        builder.begin_tile(begin, std::min(shape.q_len, begin + shape.tile_rows), policy);
        if (lists == KeyLists::kSpans) {
          builder.add_span(0, shape.kv_len);
          continue;
        }
        const int64_t span_end = random.uniform_int(0, shape.kv_len / 2);
        builder.add_span(0, span_end);
        for (int64_t key = span_end; key < shape.kv_len; ++key) {
          if (random.bernoulli(kColumnProbability)) builder.add_column(key);
        }
      }
    }
    builder.attach_layout(layout);
    return builder.finish();
  }

  static void check_bidirectional_images(const KernelConfig& config);
};

// Text, a large image (markers around it), text, a small image without markers, text.
ModalityLayout gemma_layout(Random& random) {
  return LayoutBuilder()
      .text(random.uniform_int(1, kMaxLeadingText))
      .image(kLargeImage, /*markers=*/true)
      .text(kMiddleText)
      .image(kSmallImage, /*markers=*/false)
      .text(random.uniform_int(1, kMaxTrailingText))
      .build();
}

// A problem over a Gemma-like layout: kv_len is the layout's length (never a multiple of 64),
// q_len the same or shorter (a prefill after cached keys) or longer (queries before every key).
ProblemSize gemma_problem(Random& random, const KernelConfig& config, const ModalityLayout& layout,
                          int64_t group) {
  ProblemSize size = random_problem(random, config, 1, group);
  size.kv_len = layout.length();
  if (size.kv_len % 64 == 0) ++size.kv_len;  // the layout then ends in text: add a token
  switch (random.uniform_int(0, 2)) {
    case 0:
      size.q_len = size.kv_len;
      break;
    case 1:
      size.q_len = size.kv_len - random.uniform_int(1, kMaxQueryShortfall);
      break;
    default:
      size.q_len = size.kv_len + random.uniform_int(1, kMaxQueryShortfall);
      break;
  }
  if (size.q_len % 64 == 0) ++size.q_len;
  return size;
}

// The layout with one more text token when gemma_problem lengthened kv_len.
ModalityLayout fit_layout(const ModalityLayout& layout, int64_t length) {
  if (layout.length() == length) return layout;
  std::vector<Segment> segments = layout.segments();
  segments.back().end += length - layout.length();
  return ModalityLayout(segments, layout.media());
}

// One-token images (with their markers and a text token: kOneTokenRunLength tokens each) that
// mixed_layout fits after its media (kMixedLayoutMedia tokens with the text around them) in
// `length` tokens, at most kMaxOneTokenRuns.
int64_t one_token_runs(int64_t length) {
  constexpr int64_t kMixedLayoutMedia = 66;
  constexpr int64_t kOneTokenRunLength = 4;
  constexpr int64_t kMaxOneTokenRuns = 3;
  return std::clamp<int64_t>((length - kMixedLayoutMedia) / kOneTokenRunLength, 0,
                             kMaxOneTokenRuns);
}

// Random plans of spans, strided spans and columns under every policy mix (same-media and
// modality pairs among positional terms), with permuted query orders and rows in no tile.
TEST_P(GpuTokenMasks, RandomMixedPlans) {
  Random random;
  SCOPED_TRACE(random.trace());
  for (const int64_t group : kGroups) {
    const ProblemSize size = random_problem(random, GetParam(), 2, group);
    const AttentionInputs inputs = random_inputs(random, size);
    const ModalityLayout layout = mixed_layout(random, size.kv_len, one_token_runs(size.kv_len));
    RandomPlanOptions options;
    options.masks = MaskMix::kMixed;
    options.leave_gaps = true;
    options.max_lattice_groups = 0;  // token masks run on the span and gather instantiations
    if (group % 2 == 0) {            // spans alone: the span instantiations
      options.max_strided_spans = 0;
      options.max_columns = 0;
    }
    PlanShape shape = plan_shape(size);
    shape.batch = size.batch;
    check_on_kernel(random, random_plan(random, shape, options, &layout), inputs, size);
  }
}

// One token policy at a time over every key, on spans and on spans with columns.
TEST_P(GpuTokenMasks, SameMediaAndModalityPairs) {
  Random random;
  SCOPED_TRACE(random.trace());
  const uint16_t text_to_text = modality_pair_bit(Modality::kText, Modality::kText);
  const uint16_t media_to_media = modality_pair_bit(Modality::kImage, Modality::kImage) |
                                  modality_pair_bit(Modality::kVideo, Modality::kVideo) |
                                  modality_pair_bit(Modality::kVideo, Modality::kImage);
  const std::vector<MaskPolicy> policies = {
      {.causal = true, .same_media = true},
      {.causal = false, .same_media = true},
      {.causal = true, .modality_pairs = static_cast<uint16_t>(text_to_text | media_to_media)},
      {.causal = false, .window = 60, .window_sink = 4, .modality_pairs = text_to_text},
      {.causal = true, .period = 48, .band = 20, .same_media = true},
      {.causal = true, .min_distance = 9, .modality_pairs = media_to_media},
  };
  for (std::size_t p = 0; p < policies.size(); ++p) {
    SCOPED_TRACE("policy " + std::to_string(p));
    const ProblemSize size = random_problem(random, GetParam(), 1, kGroups[p % kGroups.size()]);
    const AttentionInputs inputs = random_inputs(random, size);
    const ModalityLayout layout = mixed_layout(random, size.kv_len, one_token_runs(size.kv_len));
    for (const KeyLists lists : {KeyLists::kSpans, KeyLists::kSpansAndColumns}) {
      const Plan plan = whole_plan(random, plan_shape(size), policies[p], lists, layout);
      check_on_kernel(random, plan, inputs, size);
    }
  }
}

// Gemma 3: causal, bidirectional inside each image; with a sliding window (its local layers), or
// restricted further by same-media or modality pairs.
void GpuTokenMasks::check_bidirectional_images(const KernelConfig& config) {
  Random random;
  SCOPED_TRACE(random.trace());
  const std::vector<MaskPolicy> policies = {
      {.causal = true, .media_bidirectional = true},
      {.causal = true, .window = random.uniform_int(1, kMaxWindow), .media_bidirectional = true},
      {.causal = true, .same_media = true, .media_bidirectional = true},
      {.causal = true,
       .modality_pairs = static_cast<uint16_t>(
           kAllModalityPairs & ~modality_pair_bit(Modality::kImage, Modality::kText)),
       .media_bidirectional = true},
  };
  for (std::size_t p = 0; p < policies.size(); ++p) {
    SCOPED_TRACE("policy " + std::to_string(p));
    const ModalityLayout drawn = gemma_layout(random);
    const ProblemSize size = gemma_problem(random, config, drawn, kGroups[p % kGroups.size()]);
    const ModalityLayout layout = fit_layout(drawn, size.kv_len);
    const AttentionInputs inputs = random_inputs(random, size);
    for (const KeyLists lists : {KeyLists::kSpans, KeyLists::kSpansAndColumns}) {
      const Plan plan = whole_plan(random, plan_shape(size), policies[p], lists, layout);
      check_on_kernel(random, plan, inputs, size);
    }
  }
}

TEST_P(GpuTokenMasks, BidirectionalImages) { check_bidirectional_images(GetParam()); }

// The mma.sync kernel under the same policies: it never skips a chunk of a bidirectional policy
// (pairs of one image are kept at any distance) and masks it element by element.
class GpuMmaSyncTokenMasks : public GpuTokenMasks {};

TEST_P(GpuMmaSyncTokenMasks, BidirectionalImages) { check_bidirectional_images(GetParam()); }

constexpr auto kWgmma = cuda::AttentionKernel::kWgmma;

// The grid mask's bands (lattice records once uploaded) with every policy restricted to same-media,
// over a layout with one-token images, for `size`.
Plan token_lattice_plan(Random& random, const ProblemSize& size) {
  const char* grid_mask = "grid-mask:sink=8,local=40,period=32,band=6,phases=4,lattice=1";
  PlanShape shape;
  shape.heads = size.q_heads();
  shape.q_len = size.q_len;
  shape.kv_len = size.kv_len;
  Plan plan = build_plan(PatternSpec::parse(grid_mask), shape);
  for (int64_t p = 0; p < plan.num_passes(); ++p) {
    Plan& pass = p == 0 ? plan : plan.extra_passes[static_cast<std::size_t>(p - 1)];
    for (MaskPolicy& policy : pass.masks) policy.same_media = true;
  }
  plan.attach_layout(mixed_layout(random, size.kv_len, one_token_runs(size.kv_len)));
  plan.validate();
  return plan;
}

// A problem of 600-900 queries (odd: no multiple of 64) and a few more keys.
ProblemSize lattice_problem(Random& random, const KernelConfig& config) {
  constexpr int64_t kMinLength = 600;
  constexpr int64_t kMaxLength = 900;
  constexpr int64_t kMaxExtraKeys = 100;
  ProblemSize size = random_problem(random, config, 1, 2);
  size.q_len = random.uniform_int(kMinLength, kMaxLength) | 1;
  size.kv_len = size.q_len + 2 * random.uniform_int(0, kMaxExtraKeys);
  return size;
}

// Expects the engine to refuse the passes on `inputs` with kUnsupported when asked for `kernel`.
void expect_refused(std::span<const cuda::DevicePlan> passes, const AttentionInputs& inputs,
                    const ProblemSize& size, cuda::AttentionKernel kernel) {
  const DeviceOperand q(inputs.q);
  const DeviceOperand k(inputs.k);
  const DeviceOperand v(inputs.v);
  DeviceOperand out(inputs.q);
  DeviceBuffer lse(static_cast<std::size_t>(size.batch * size.q_heads() * size.q_len) *
                   sizeof(float));
  const TensorView lse_view =
      TensorView::contiguous(lse.data(), DType::kFloat32, {size.batch, size.q_heads(), size.q_len},
                             {DeviceType::kCUDA, 0});
  AttentionOptions options;
  options.scale = size.scale;
  const AttentionProblem problem = describe_attention(q.view, k.view, v.view, options);
  cuda::AttentionArgs args =
      cuda::make_attention_args(problem, q.view, k.view, v.view, out.view, lse_view, nullptr);
  args.kernel = kernel;
  EXPECT_EQ(testing::capture_error([&] { cuda::attention_passes(passes, args); }).code(),
            ErrorCode::kUnsupported);
  synchronize_device();
}

bool has_token_lattices(std::span<const cuda::DevicePlan> passes) {
  return std::any_of(passes.begin(), passes.end(), [](const cuda::DevicePlan& pass) {
    return pass.layout().lattice_step > 0 && pass.layout().has_token_info;
  });
}

// Token masks are not compiled into the wgmma kernel's lattice instantiations: a plan whose upload
// has lattice records (the grid mask's bands, every policy restricted to same-media here) runs on
// the mma.sync kernel, correctly, and forcing the wgmma kernel throws kUnsupported.
TEST(GpuTokenMaskFallback, LatticePlansRunOnMmaSync) {
  Random random;
  SCOPED_TRACE(random.trace());
  const KernelConfig config{DType::kBFloat16, cuda::kWgmmaHeadDim, kWgmma, kDefaultTileRows};
  const ProblemSize size = lattice_problem(random, config);
  const AttentionInputs inputs = random_inputs(random, size);
  const Plan plan = token_lattice_plan(random, size);

  const std::vector<cuda::DevicePlan> passes = cuda::upload_passes(plan, nullptr);
  ASSERT_TRUE(has_token_lattices(passes));
  EXPECT_FALSE(runs_on_wgmma(passes, size));
  // run_gpu asks for kAuto where the wgmma kernel does not serve.
  expect_matches_oracle(plan, inputs, size,
                        run_gpu(passes, inputs, size, OperandLayout::kContiguous));
  expect_refused(passes, inputs, size, kWgmma);
}

// At head_dim 256 no kernel serves such a plan (the mma.sync kernel has no head_dim 256): the
// engine refuses it whatever kernel it is asked for.
TEST(GpuTokenMaskFallback, HeadDim256LatticePlansAreRefused) {
  Random random;
  SCOPED_TRACE(random.trace());
  const KernelConfig config{DType::kFloat16, cuda::kWgmmaWideHeadDim, kWgmma, kDefaultTileRows};
  const ProblemSize size = lattice_problem(random, config);
  const AttentionInputs inputs = random_inputs(random, size);
  const std::vector<cuda::DevicePlan> passes =
      cuda::upload_passes(token_lattice_plan(random, size), nullptr);
  ASSERT_TRUE(has_token_lattices(passes));
  EXPECT_FALSE(runs_on_wgmma(passes, size));
  expect_refused(passes, inputs, size, cuda::AttentionKernel::kAuto);
  expect_refused(passes, inputs, size, kWgmma);
}

INSTANTIATE_TEST_SUITE_P(
    Wgmma, GpuTokenMasks,
    ::testing::Values(
        KernelConfig{DType::kBFloat16, 128, kWgmma, cuda::kMaxTileRows},
        KernelConfig{DType::kFloat16, 128, kWgmma, cuda::kMaxTileRows},
        KernelConfig{DType::kBFloat16, 128, kWgmma, kDefaultTileRows},
        KernelConfig{DType::kFloat16, 128, kWgmma, kDefaultTileRows},
        KernelConfig{DType::kBFloat16, cuda::kWgmmaWideHeadDim, kWgmma, cuda::kMaxTileRows},
        KernelConfig{DType::kFloat16, cuda::kWgmmaWideHeadDim, kWgmma, cuda::kMaxTileRows}),
    [](const ::testing::TestParamInfo<KernelConfig>& info) { return config_name(info.param); });

constexpr auto kMmaSync = cuda::AttentionKernel::kMmaSync;

INSTANTIATE_TEST_SUITE_P(Kernels, GpuMmaSyncTokenMasks,
                         ::testing::Values(KernelConfig{DType::kBFloat16, 64, kMmaSync},
                                           KernelConfig{DType::kFloat16, 64, kMmaSync},
                                           KernelConfig{DType::kBFloat16, 128, kMmaSync},
                                           KernelConfig{DType::kFloat16, 128, kMmaSync}),
                         [](const ::testing::TestParamInfo<KernelConfig>& info) {
                           return config_name(info.param);
                         });

}  // namespace
}  // namespace mmsparse::test
