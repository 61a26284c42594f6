// The item boundary (boundary=4) and per-item sinks on grids of a few thousand tokens, against
// the host builder record for record (item_build_checks.h): short strides whose lattice pieces
// become strided spans with item sinks on them, the searched mixed-interleaved config's 2D-boundary
// heads, and the image length at which one residue first makes a strided span. Apart from
// test_gpu_item_builders.cpp, whose problems hold a few hundred tokens, because these need lengths
// at which a lattice piece reaches kGatherChunkKeys keys, or the config's layouts.

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "attention_harness.h"
#include "common/random.h"
#include "core/engine_chunks.h"
#include "cuda/runtime/engine.h"
#include "grid_inputs.h"
#include "index_build_cases.h"
#include "item_build_checks.h"
#include "methods/estimate/modality_boundary.h"
#include "methods/grid/grid.h"
#include "mmsparse/layout.h"
#include "mmsparse/patterns.h"
#include "mmsparse/plan.h"
#include "mmsparse/tools/workload.h"

namespace mmsparse::test {
namespace {

// (tile, item sink) pairs of `plan` whose sink lies on one of the tile's strided spans.
int64_t sinks_on_strided_spans(const Plan& plan, const std::vector<int64_t>& sinks) {
  int64_t count = 0;
  for (std::size_t t = 0; t < plan.tiles.size(); ++t) {
    for (int64_t i = plan.tile_strided_offsets[t]; i < plan.tile_strided_offsets[t + 1]; ++i) {
      const StridedSpan& span = plan.strided_spans[static_cast<std::size_t>(i)];
      count += std::count_if(sinks.begin(), sinks.end(), [&](int64_t key) {
        return key >= span.begin && key < span.end && (key - span.begin) % span.step == 0;
      });
    }
  }
  return count;
}

// Item-boundary grids and grids with item sinks at a few thousand tokens and short strides, where
// the lines' pieces between spans are strided spans (LatticeKeys::kStridedSpansInRanges) and item
// sinks lie on them: the device plan equals the host plan record for record (a sink on a strided
// span is read through it, not listed again as a column), on odd lengths and GQA 1, 4 and 7; the
// item boundary with and without sinks, and sinks under boundaries 0-3.
TEST_F(GpuIndexBuild, ItemGridStridedSpansMatchTheHostOnLongLayouts) {
  constexpr int kTrials = 9;
  constexpr int64_t kMaxShortStride = 7;
  constexpr int64_t kMaxWindow = 9;  // local: windows narrower and wider than the strides
  constexpr int64_t kMaxLastQ = 16;  // at most 16 estimate runs: every group fits the estimate
  // Few items (the grid's query groups), frames of 16 to 256 tokens.
  constexpr ItemLayoutLimits kLongLayout{6, 2 * kMaxItemFrames, 4, 16};
  Random random;
  SCOPED_TRACE(random.trace());
  int built = 0;
  int64_t strided_spans = 0;
  int64_t sinks_on_lines = 0;
  for (int trial = 0; trial < kTrials; ++trial) {
    ProblemSize size = random_problem(random, kItemLimits);
    size.q_len = random.uniform_int(1500, 4500) | 1;
    size.kv_len = size.q_len + random.uniform_int(0, kMaxExtraKeys);
    const QueryBoundaryProblem problem{size, item_layout(random, size.kv_len, kLongLayout),
                                       random.uniform_int(1, kMaxLastQ)};
    const AttentionInputs inputs = grid_trial_inputs(random, size);
    // By trial: sinks under boundary 0-3, the item boundary alone, the item boundary with sinks.
    const int64_t boundary = trial % 3 == 0 ? random.uniform_int(0, 3) : kItemBoundary;
    const int64_t item_sinks = trial % 3 == 1 ? 0 : random.uniform_int(1, kMaxItemSinks);
    // Vertical lines with sinks, so that some sinks lie on a lattice.
    const int64_t hline = random.uniform_int(0, 1);
    const int64_t vline = item_sinks > 0 ? 1 : random.uniform_int(0, 1);
    const int64_t slash = hline == 0 && vline == 0 ? 1 : random.uniform_int(0, 1);
    const int64_t stride = random.bernoulli(0.25) ? 0 : random.uniform_int(2, kMaxShortStride);
    PatternSpec spec =
        grid(stride, kMaxShortStride, hline, vline, slash, random.uniform_int(0, kMaxSink),
             random.uniform_int(0, kMaxWindow), problem.last_q, boundary);
    spec.params["item_sinks"] = item_sinks;
    Plan host;
    if (expect_item_grid(spec, problem, inputs, stream_, nullptr, &host) < 0) continue;
    ++built;
    strided_spans += static_cast<int64_t>(host.strided_spans.size());
    sinks_on_lines +=
        sinks_on_strided_spans(host, detail::item_sink_keys(problem.layout, item_sinks));
  }
  EXPECT_GT(built, kTrials / 2) << "too few trials' groups fit the GPU estimate";
  EXPECT_GT(strided_spans, 0) << "no trial's lines made a strided span";
  EXPECT_GT(sinks_on_lines, 0) << "no item sink lay on a strided span";
}

// The searched 128K mixed-interleaved config's grid heads (2D boundary, one sink per frame and
// item, a fixed frame-like stride, no windows) on the SYNTHETIC preset's layout scaled to a few
// thousand tokens, 4 query heads over 1 KV head and 7 over 1: up to three query groups over three
// key spaces, 9 pairs of different sizes one after another in one scratch, plans sized by the
// residue-key bound of the lattice columns. Record for record against the host, and with a
// window and the searched stride for the other regimes.
TEST_F(GpuIndexBuild, ItemSinkTwoDGridMatchesTheHostOnMixedInterleaved) {
  // Two query groups (text, video) at 6001 tokens, three (text, image, video) beyond.
  constexpr std::array<int64_t, 3> kLengths = {6001, 16001, 24001};
  constexpr std::array<int64_t, 2> kGroups = {4, 7};
  constexpr int64_t kSearchedConfigStride = 448;
  constexpr int64_t kMaxSearchedStride = 256;  // the host's search stays quick
  constexpr int64_t kConfigSink = 30;
  constexpr int64_t kWindow = 5;
  constexpr int64_t kConfigLastQ = 64;
  constexpr int64_t kTwoD = 3;
  Random random;
  SCOPED_TRACE(random.trace());
  int built = 0;
  for (std::size_t trial = 0; trial < kLengths.size() * kGroups.size(); ++trial) {
    WorkloadSpec workload_spec;
    workload_spec.preset = "mixed-interleaved";
    workload_spec.seq_len = kLengths[trial % kLengths.size()];
    workload_spec.q_heads = 1;
    workload_spec.kv_heads = 1;
    const Workload workload = Workload::create(workload_spec);
    ProblemSize size;
    size.q_len = workload.seq_len();
    size.kv_len = workload.seq_len();
    size.group = kGroups[trial / kLengths.size()];
    size.head_dim = 128;
    size.tile_rows = 128;  // the H100's tile height at head dim 128
    size.kernel = cuda::AttentionKernel::kAuto;
    size.scale = 1.0f / std::sqrt(static_cast<float>(size.head_dim));
    const QueryBoundaryProblem problem{size, workload.layout(), kConfigLastQ};
    const AttentionInputs inputs = grid_trial_inputs(random, size);
    // The config's spec first, then a window (one span per row) or a searched stride.
    const auto regime = static_cast<int64_t>((trial + trial / kLengths.size()) % 3);
    const int64_t stride = regime == 2 ? 0 : kSearchedConfigStride;
    // Slash lines only (hline 0, vline 0, slash 1), as in the config.
    PatternSpec spec = grid(stride, regime == 2 ? kMaxSearchedStride : kSearchedConfigStride, 0, 0,
                            1, kConfigSink, regime == 1 ? kWindow : 0, kConfigLastQ, kTwoD);
    spec.params["item_sinks"] = 1;
    if (expect_item_grid(spec, problem, inputs, stream_) < 0) continue;
    ++built;
  }
  EXPECT_EQ(built, static_cast<int>(kLengths.size() * kGroups.size()))
      << "the config's grid heads must build on the GPU";
}

// The 2D- and item-boundary grid without windows at the length where one residue of an image's
// keys first makes a strided span: an image of (kGatherChunkKeys - 1) * stride + delta tokens
// (delta -1, 0, 1) between short text runs, so the text rows after it hold every image key and
// the image's last rows nearly all; a second, small image gives the space a second range. The
// conversion skips strided-span work where no range of a space is long enough for a piece of
// kGatherChunkKeys keys: record for record against the host, on plans with strided spans and
// without (on an H100 the host's first strided span came at delta -1 or 0, by the item's phase).
// The options fix the lines (grid_lines_fixed: the build skips the estimate), so every pair's
// lines must be {stride, 0}. GQA 1, 4 and 7, with and without item sinks.
TEST_F(GpuIndexBuild, GridBoundaryStridedSpanThresholdMatchesTheHost) {
  constexpr std::array<int64_t, 2> kStrides = {3, 5};
  constexpr std::array<int64_t, 3> kDeltas = {-1, 0, 1};
  constexpr std::array<int64_t, 2> kBoundaries = {3, kItemBoundary};  // 2D, item
  constexpr std::array<int64_t, 3> kGroups = {1, 4, 7};
  constexpr int64_t kLastQ = 64;
  Random random;
  SCOPED_TRACE(random.trace());
  int built = 0;
  int trial = 0;
  int with_strided = 0;
  int without_strided = 0;
  for (const int64_t stride : kStrides) {
    for (const int64_t delta : kDeltas) {
      for (const int64_t boundary : kBoundaries) {
        ++trial;
        const int64_t image_tokens = (kGatherChunkKeys - 1) * stride + delta;
        // Text runs shorter than image_tokens - 1 keep the text space's pieces short.
        const ModalityLayout layout = LayoutBuilder()
                                          .text(random.uniform_int(20, 120) | 1)
                                          .image({1, 1, image_tokens}, false)
                                          .text(random.uniform_int(130, 250))
                                          .image({1, 4, 4}, random.bernoulli(0.5))
                                          .text(random.uniform_int(90, 200))
                                          .build();
        ProblemSize size;
        size.q_len = layout.length();
        size.kv_len = layout.length();
        size.group = kGroups[static_cast<std::size_t>(trial) % kGroups.size()];
        size.head_dim = 128;
        size.tile_rows = 128;
        size.kernel = cuda::AttentionKernel::kAuto;
        size.scale = 1.0f / std::sqrt(static_cast<float>(size.head_dim));
        const QueryBoundaryProblem problem{size, layout, kLastQ};
        const AttentionInputs inputs = grid_trial_inputs(random, size);
        // Slash lines only, no sink and no windows: the lattice of a text row's image phase
        // starts at key 0 and runs over the whole image.
        PatternSpec spec = grid(stride, stride, 0, 0, 1, 0, 0, kLastQ, boundary);
        spec.params["item_sinks"] = (trial / 2) % 2;
        SCOPED_TRACE(spec.to_string() + " " + describe(size) + " layout " + layout.to_json());
        ItemGridBuilt device;
        Plan host;
        if (expect_item_grid(spec, problem, inputs, stream_, &device, &host) < 0) continue;
        ++built;
        for (const detail::GridLines& lines : device.lines) {
          EXPECT_EQ(lines.stride, stride);
          EXPECT_EQ(lines.phase, 0);
        }
        (host.strided_spans.empty() ? without_strided : with_strided) += 1;
      }
    }
  }
  EXPECT_EQ(built, trial) << "every trial's groups must fit the GPU estimate";
  // Both sides of the skip: plans with and without strided spans (where exactly the host starts
  // cutting them depends on the item's phase, not only on delta).
  EXPECT_GT(with_strided, 0) << "no trial's host plan had strided spans";
  EXPECT_GT(without_strided, 0) << "every trial's host plan had strided spans";
}

}  // namespace
}  // namespace mmsparse::test
