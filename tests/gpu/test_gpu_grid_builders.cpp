// The grid estimated on the GPU (methods/grid) against the host: the stride and phase the GPU
// finds equal the host search's wherever the host's best candidate is clear, and the plan equals
// the host plan of the lines the GPU found, record for record, with and without a Q/2D boundary;
// attention through the device-built plan matches the fp64 oracle; bad parameters name the
// argument.

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "attention_harness.h"
#include "common/errors.h"
#include "common/random.h"
#include "cuda/runtime/engine.h"
#include "methods/estimate/index_builders.h"
#include "methods/estimate/index_kernels.h"
#include "device_buffer.h"
#include "mmsparse/attention.h"
#include "mmsparse/layout.h"
#include "mmsparse/patterns.h"
#include "mmsparse/plan.h"
#include "mmsparse/status.h"
#include "mmsparse/tools/workload.h"
#include "methods/estimate/estimation.h"
#include "methods/grid/grid.h"
#include "methods/estimate/modality_boundary.h"
#include "methods/registry.h"
#include "grid_inputs.h"
#include "index_build_cases.h"
#include "index_test_support.h"
#include "plan_records.h"
#include "stream_test.h"

namespace mmsparse::test {
namespace {

using testing::expect_error;

// --- Grid ----------------------------------------------------------------------------------------

constexpr int64_t kMaxFixedStride = 700;
constexpr int64_t kMaxSearchedStride = 300;
constexpr int64_t kMinPlantedStride = 3;
// A planted grid the default search must find, as tests/cpu/test_dynamic_patterns.cpp plants it.
constexpr int64_t kMinSearchedPlantedStride = 5;
constexpr int64_t kMaxPlantedStride = 40;
constexpr int64_t kPlantedPeriods = 12;  // query rows of a planted grid, in strides at least
constexpr int64_t kSyntheticLength = 8192;

// The device build and the lines it chose per head slot, and per (group, space) pair with a Q/2D
// boundary ([pairs, slots]; none without query rows).
struct GridBuilt {
  cuda::DevicePlan plan;
  std::vector<detail::GridLines> lines;
};

GridBuilt build_grid_on_device(const PatternSpec& resolved, const PlanShape& shape,
                               const TensorView& q_host, const TensorView& k_host, float scale,
                               cudaStream_t stream, const ModalityLayout* layout = nullptr) {
  HostOperand q(q_host.dtype, q_host.shape[0], q_host.shape[1], q_host.shape[2], q_host.shape[3],
                OperandLayout::kContiguous);
  HostOperand k(k_host.dtype, k_host.shape[0], k_host.shape[1], k_host.shape[2], k_host.shape[3],
                OperandLayout::kContiguous);
  copy_tensor(q_host, q.view);
  copy_tensor(k_host, k.view);
  const DeviceOperand q_device(q);
  const DeviceOperand k_device(k);
  const auto entries =
      static_cast<std::size_t>(shape.head_slots() * cuda::grid_selections(resolved, shape, layout));
  DeviceBuffer chosen(entries * sizeof(detail::GridLines));
  GridBuilt built;
  built.plan = cuda::build_grid_plan_on_device(
      resolved, shape, layout,
      cuda::make_estimate_operands(resolved.name, {q_device.view, k_device.view, scale}, shape),
      stream, static_cast<detail::GridLines*>(chosen.data()));
  expect_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  if (shape.q_len > 0) {
    built.lines.resize(entries);
    chosen.download(built.lines.data());
  }
  return built;
}

// Random grid parameters: searched (small max_stride, so odd sizes reach the keys / 4 cap) or a
// fixed stride, which may exceed every key; any line set; sink and local windows of every regime
// (none, narrower and wider than the stride).
PatternSpec random_grid_spec(Random& random) {
  const int64_t stride = random.bernoulli(0.3) ? random.uniform_int(2, kMaxFixedStride) : 0;
  int64_t hline = random.uniform_int(0, 1);
  int64_t vline = random.uniform_int(0, 1);
  const int64_t slash = hline == 0 && vline == 0 ? 1 : random.uniform_int(0, 1);
  const int64_t local =
      random.bernoulli(0.5) ? random.uniform_int(0, 2) : random.uniform_int(0, kMaxLocal);
  const int64_t last_q = random.bernoulli(0.5) ? 64 : random.uniform_int(1, kMaxLastQueries);
  return grid(stride, random.uniform_int(2, kMaxSearchedStride), hline, vline, slash,
              random.uniform_int(0, kMaxSink), local, last_q, random.uniform_int(0, 1));
}

// One trial: the device build, the host search and the host plan of the device's lines.
// Returns how many head slots had a clear host choice (compared with the device's).
int64_t check_grid(const PatternSpec& spec, const ProblemSize& size, const AttentionInputs& inputs,
                   cudaStream_t stream, GridBuilt* keep = nullptr, Plan* keep_host = nullptr) {
  const PatternSpec resolved = resolve_pattern(spec);
  const PlanShape shape = plan_shape(size);
  const PatternInputs host_inputs{inputs.q.view, inputs.k.view, size.scale};
  GridBuilt built =
      build_grid_on_device(resolved, shape, inputs.q.view, inputs.k.view, size.scale, stream);
  int64_t clear = 0;
  std::vector<detail::GridLines> lines = built.lines;
  if (shape.q_len > 0) {
    clear = expect_clear_lines_equal(host_grid_search(resolved, shape, host_inputs), lines);
  } else {
    lines.assign(static_cast<std::size_t>(shape.head_slots()), {});
  }
  Plan host = host_grid_plan(resolved, shape, host_inputs, lines);
  SCOPED_TRACE(host.summary());
  expect_same_grid_records(built.plan, host, stream);
  if (keep != nullptr) *keep = std::move(built);
  if (keep_host != nullptr) *keep_host = std::move(host);
  return clear;
}

TEST_F(GpuIndexBuild, GridMatchesTheHostOnRandomInputs) {
  Random random;
  SCOPED_TRACE(random.trace());
  int64_t clear = 0;
  for (int trial = 0; trial < kRandomTrials; ++trial) {
    const ProblemSize size = random_problem(random, kLimits);
    AttentionInputs inputs = random_inputs(random, size);
    // Half the trials carry a planted grid, so that the search has a clear answer to find.
    if (random.bernoulli(0.5)) {
      const int64_t stride = random.uniform_int(kMinPlantedStride, size.head_dim - 2);
      plant_grid(random, inputs, size, stride, random.uniform_int(0, stride - 1));
    }
    const PatternSpec spec = random_grid_spec(random);
    SCOPED_TRACE(spec.to_string() + " " + describe(size));
    clear += check_grid(spec, size, inputs, stream_);
  }
  EXPECT_GT(clear, 0) << "no trial had a clear host choice to compare";
}

// Empty and degenerate shapes; fixed strides beyond every key; every line set.
TEST_F(GpuIndexBuild, GridEdgeShapesMatchTheHost) {
  Random random;
  SCOPED_TRACE(random.trace());
  const std::vector<EdgeShape> edges = {{1, 0, 0, 64},     {1, 0, 17, 64},     {1, 1, 1, 64},
                                        {1, 5, 0, 64},     {2, 64, 64, 64},    {1, 300, 45, 128},
                                        {2, 129, 200, 64}, {1, 257, 513, 128}, {1, 7, 9, 64}};
  const std::vector<PatternSpec> specs = {
      grid(0, 1024, 1, 1, 1, 30, 1, 64, 0),        // the default
      grid(0, 2, 0, 0, 1, 0, 0, 1, 1),             // slash lines only, one candidate
      grid(3, 1024, 1, 0, 0, 0, 5, 64, 0),         // hline only, local wider than the stride
      grid(5000, 1024, 0, 1, 1, 100, 200, 64, 0),  // a stride beyond every key
      grid(0, 1024, 1, 1, 1, 1000, 0, 64, 0),      // the sink covers everything
      grid(0, 1024, 0, 1, 1, 30, 0, 300, 0),       // more estimate rows than a block's threads
  };
  for (const EdgeShape& edge : edges) {
    const ProblemSize size = edge_size(random, edge);
    const AttentionInputs inputs = random_inputs(random, size);
    for (const PatternSpec& spec : specs) {
      SCOPED_TRACE(spec.to_string() + " " + describe(size));
      check_grid(spec, size, inputs, stream_);
    }
  }
}

// A planted grid is found like the host finds it, and the full host build (its own search)
// equals the device plan; prepare_pattern with device inputs computes what the host plan computes,
// bit for bit.
TEST_F(GpuIndexBuild, GridFindsAPlantedGridAndServesPreparePattern) {
  Random random;
  SCOPED_TRACE(random.trace());
  constexpr int kPlantedTrials = 6;
  for (int trial = 0; trial < kPlantedTrials; ++trial) {
    ProblemSize size;
    size.batch = random.uniform_int(1, 2);
    const Gqa gqa = pick(random, kGqaShapes);
    size.kv_heads = gqa.kv_heads;
    size.group = gqa.group;
    size.head_dim = pick(random, kHeadDims);
    size.dtype = pick(random, kDtypes);
    // The engine runs 128-row tiles on the wgmma kernel only, which takes head_dim 128.
    size.tile_rows =
        size.head_dim == kHeadDims.back() ? pick(random, kTileRows) : kTileRows.front();
    size.scale = 1.0f / std::sqrt(static_cast<float>(size.head_dim));
    const int64_t stride = random.uniform_int(kMinSearchedPlantedStride, kMaxPlantedStride);
    const int64_t phase = random.uniform_int(0, stride - 1);
    // Long enough that lines lie beyond the default sink (30) and local window (1); odd.
    const int64_t shortest = kPlantedPeriods * stride;
    size.q_len = random.uniform_int(shortest, shortest + kMaxExtraKeys) | 1;
    size.kv_len = size.q_len + random.uniform_int(0, kMaxExtraKeys);
    AttentionInputs inputs = random_inputs(random, size);
    plant_grid(random, inputs, size, stride, phase);
    const PatternSpec spec = PatternSpec::parse("grid");
    SCOPED_TRACE(describe(size) + ", stride " + std::to_string(stride) + ", phase " +
                 std::to_string(phase));
    GridBuilt built;
    check_grid(spec, size, inputs, stream_, &built);
    for (const detail::GridLines& lines : built.lines) {
      EXPECT_EQ(lines.stride, stride);
      EXPECT_EQ(lines.phase, phase);
    }
    const PlanShape shape = plan_shape(size);
    const PatternInputs host_inputs{inputs.q.view, inputs.k.view, size.scale};
    const Plan host = build_plan(spec, shape, nullptr, &host_inputs);
    expect_same_grid_records(built.plan, host, stream_);

    const DeviceOperand q(inputs.q);
    const DeviceOperand k(inputs.k);
    const DeviceOperand v(inputs.v);
    const PatternInputs device_inputs{q.view, k.view, size.scale};
    const PreparedPlan expected = prepare_plan(host, kCuda, stream_);
    const PreparedPlan prepared =
        prepare_pattern(spec, shape, nullptr, kCuda, stream_, &device_inputs);
    expect_identical_attention(prepared, expected, size, q.view, k.view, v.view, stream_);
  }
}

// SYNTHETIC video-qwen2.5vl-128k scaled to 8192 tokens (16 × 28 = 448 tokens per frame), up to the
// end of the video so that the estimate rows are video rows: every grid head finds the frame
// stride on the GPU, as the host does (tests/cpu/test_dynamic_patterns.cpp), and the plan of all
// 28 heads over 4 KV heads equals the host's.
TEST_F(GpuIndexBuild, GridFindsTheFrameStrideOfSyntheticVideoGridHeads) {
  WorkloadSpec spec;
  spec.seq_len = kSyntheticLength;
  const Workload workload = Workload::create(spec);
  const int64_t frame_tokens = workload.layout().video_frame_tokens();
  int64_t video_end = 0;
  for (const Segment& segment : workload.layout().segments()) {
    if (segment.modality == Modality::kVideo) video_end = segment.end;
  }
  const Workload::Tensors tensors = workload.materialize(DType::kBFloat16);
  TensorView q = tensors.q.view();
  TensorView k = tensors.k.view();
  q.shape[1] = video_end;
  k.shape[1] = video_end;
  const int64_t heads = q.shape[2];
  const int64_t head_dim = q.shape[3];
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  for (const int64_t tile_rows : kTileRows) {
    const PlanShape shape{1, heads, video_end, video_end, tile_rows};
    const PatternSpec resolved = resolve_pattern(PatternSpec::parse("grid"));
    const GridBuilt built = build_grid_on_device(resolved, shape, q, k, scale, stream_);
    const PatternInputs host_inputs{q, k, scale};
    const HostGridSearch search = host_grid_search(resolved, shape, host_inputs);
    int grid_heads = 0;
    for (int64_t head = 0; head < heads; ++head) {
      if (search.clear(static_cast<std::size_t>(head))) {
        EXPECT_EQ(built.lines[head].stride, search.lines[head].stride) << "head " << head;
        EXPECT_EQ(built.lines[head].phase, search.lines[head].phase) << "head " << head;
      }
      if (workload.behaviour(head) != HeadBehaviour::kGrid) continue;
      ++grid_heads;
      EXPECT_EQ(built.lines[head].stride, frame_tokens) << "SYNTHETIC grid head " << head;
    }
    EXPECT_GT(grid_heads, 0);
    expect_same_grid_records(built.plan, host_grid_plan(resolved, shape, host_inputs, built.lines),
                             stream_);
  }
}

// Attention through the device-built grid plan (empty capacity tiles included) against the fp64
// oracle of the host plan, on both kernels' tile heights.
TEST_F(GpuIndexBuild, GridAttentionThroughTheDevicePlanMatchesTheOracle) {
  Random random;
  SCOPED_TRACE(random.trace());
  for (const DType dtype : kDtypes) {
    for (const int64_t tile_rows : kTileRows) {
      const ProblemSize size = oracle_problem(random, kLimits, dtype, tile_rows);
      AttentionInputs inputs = random_inputs(random, size);
      const int64_t stride = random.uniform_int(kMinPlantedStride, size.head_dim - 2);
      plant_grid(random, inputs, size, stride, random.uniform_int(0, stride - 1));
      const PatternSpec spec = random_grid_spec(random);
      SCOPED_TRACE(spec.to_string() + " " + describe(size));
      GridBuilt built;
      Plan host;
      check_grid(spec, size, inputs, stream_, &built, &host);
      const AttentionResult gpu = run_gpu(built.plan, inputs, size, random_layout(random));
      expect_matches_oracle(host, inputs, size, gpu);
    }
  }
}

// --- Grid with a Q/2D boundary ------------------------------------------------------------------

// One Q/2D-boundary grid trial. Where the groups' last rows fit the estimate: the device build,
// the host search of every (group, space) pair and head slot (lines compared where the host's
// choice is clear) and the host plan of the device's lines, record for record; returns how many
// searches were clear. Where they do not fit: the spec is routed to the host and the device build
// says why; returns -1.
int64_t check_grouped_grid(const PatternSpec& spec, const QueryBoundaryProblem& problem,
                           const AttentionInputs& inputs, cudaStream_t stream,
                           GridBuilt* keep = nullptr, Plan* keep_host = nullptr) {
  const PatternSpec resolved = resolve_pattern(spec);
  const PlanShape shape = plan_shape(problem.size);
  const float scale = problem.size.scale;
  QueryBoundaryProblem estimated = problem;
  estimated.last_q = resolved.params.at("last_q");
  if (!groups_fit(estimated)) {
    EXPECT_FALSE(cuda::builds_grid_on_device(resolved, shape, &problem.layout));
    expect_error(
        [&] {
          (void)build_grid_on_device(resolved, shape, inputs.q.view, inputs.k.view, scale, stream,
                                     &problem.layout);
        },
        ErrorCode::kUnsupported, {"grid parameter last_q", "runs"});
    return -1;
  }
  EXPECT_TRUE(cuda::builds_grid_on_device(resolved, shape, &problem.layout));
  const PatternInputs host_inputs{inputs.q.view, inputs.k.view, scale};
  GridBuilt built = build_grid_on_device(resolved, shape, inputs.q.view, inputs.k.view, scale,
                                         stream, &problem.layout);
  const int64_t clear = expect_grouped_grid_matches_host(
      resolved, shape, host_inputs, problem.layout, built.plan, built.lines, stream, keep_host);
  if (keep != nullptr) *keep = std::move(built);
  return clear;
}

// Inputs for a grid trial: random, or with a planted grid half of the time.
AttentionInputs grid_trial_inputs(Random& random, const ProblemSize& size) {
  AttentionInputs inputs = random_inputs(random, size);
  if (random.bernoulli(0.5)) {
    const int64_t stride = random.uniform_int(kMinPlantedStride, size.head_dim - 2);
    plant_grid(random, inputs, size, stride, random.uniform_int(0, stride - 1));
  }
  return inputs;
}

PatternSpec random_grid_spec(Random& random, detail::BoundaryMode mode) {
  PatternSpec spec = random_grid_spec(random);
  spec.params["boundary"] = static_cast<int64_t>(mode);
  return spec;
}

// check_grouped_grid on random interleaved layouts (runs of 1-12 text tokens between small images
// and videos), every GQA shape, head dim, dtype and tile height, every line set and window regime;
// some trials must build on the device and some searches be clear.
void expect_grouped_grids_on_interleaved_layouts(detail::BoundaryMode mode, cudaStream_t stream) {
  Random random;
  SCOPED_TRACE(random.trace());
  int built = 0;
  int64_t clear = 0;
  for (int trial = 0; trial < kRandomTrials; ++trial) {
    const QueryBoundaryProblem problem =
        query_boundary_problem(random, random_problem(random, kLimits));
    const AttentionInputs inputs = grid_trial_inputs(random, problem.size);
    const PatternSpec spec = random_grid_spec(random, mode);
    SCOPED_TRACE(spec.to_string() + " " + describe(problem.size) + " layout " +
                 problem.layout.to_json());
    const int64_t trial_clear = check_grouped_grid(spec, problem, inputs, stream);
    if (trial_clear < 0) continue;
    ++built;
    clear += trial_clear;
  }
  EXPECT_GT(built, 0) << "no trial's groups fit the GPU estimate";
  EXPECT_GT(clear, 0) << "no search had a clear host choice to compare";
}

// Q-boundary grid (MMInference Alg. 1 within Alg. 2): each query modality searched from its own
// last rows, its rows arranged phase by phase across its runs of rows.
TEST_F(GpuIndexBuild, GridQueryBoundaryMatchesTheHostOnInterleavedLayouts) {
  expect_grouped_grids_on_interleaved_layouts(detail::BoundaryMode::kQuery, stream_);
}

// 2D-boundary grid (Alg. 1 within Alg. 3): each (query modality, key modality) pair searched in
// the compact coordinates of its keys; a tile reads every pair of its group.
TEST_F(GpuIndexBuild, GridTwoDBoundaryMatchesTheHostOnInterleavedLayouts) {
  expect_grouped_grids_on_interleaved_layouts(detail::BoundaryMode::kTwoD, stream_);
}

// One modality, media first and media last, for both modes; and the default spec (searched
// strides up to 1024, slash and vline on, local 1) on them.
TEST_F(GpuIndexBuild, GridBoundaryEdgeLayoutsMatchTheHost) {
  Random random;
  SCOPED_TRACE(random.trace());
  for (const detail::BoundaryMode mode :
       {detail::BoundaryMode::kQuery, detail::BoundaryMode::kTwoD}) {
    for (const auto& make_layout : edge_layouts()) {
      for (int trial = 0; trial < 2; ++trial) {
        QueryBoundaryProblem problem =
            query_boundary_problem(random, random_problem(random, kLimits));
        if (problem.size.kv_len == 0) continue;
        problem.layout = make_layout(problem.size.kv_len);
        const AttentionInputs inputs = grid_trial_inputs(random, problem.size);
        PatternSpec spec = trial == 0 ? random_grid_spec(random, mode) : PatternSpec::parse("grid");
        spec.params["boundary"] = static_cast<int64_t>(mode);
        SCOPED_TRACE(spec.to_string() + " " + describe(problem.size) + " layout " +
                     problem.layout.to_json());
        (void)check_grouped_grid(spec, problem, inputs, stream_);
      }
    }
  }
}

// Attention through Q/2D-boundary grid plans (permuted query order across runs of rows, empty
// capacity tiles) against the fp64 oracle of the host plan, on both kernels' tile heights.
TEST_F(GpuIndexBuild, GridBoundaryAttentionMatchesTheOracle) {
  Random random;
  SCOPED_TRACE(random.trace());
  for (const detail::BoundaryMode mode :
       {detail::BoundaryMode::kQuery, detail::BoundaryMode::kTwoD}) {
    for (const DType dtype : kDtypes) {
      for (const int64_t tile_rows : kTileRows) {
        QueryBoundaryProblem problem =
            query_boundary_problem(random, oracle_problem(random, kLimits, dtype, tile_rows));
        problem.last_q = std::min<int64_t>(problem.last_q, 64);
        if (!groups_fit(problem)) {
          problem.layout = LayoutBuilder().text(problem.size.kv_len).build();
        }
        const AttentionInputs inputs = grid_trial_inputs(random, problem.size);
        PatternSpec spec = random_grid_spec(random, mode);
        spec.params["last_q"] = problem.last_q;
        SCOPED_TRACE(spec.to_string() + " " + describe(problem.size));
        GridBuilt built;
        Plan host;
        ASSERT_GE(check_grouped_grid(spec, problem, inputs, stream_, &built, &host), 0);
        const AttentionResult gpu =
            run_gpu(built.plan, inputs, problem.size, random_layout(random));
        expect_matches_oracle(host, inputs, problem.size, gpu);
      }
    }
  }
}

// A layout where a Q/2D-boundary tile's gaps between spans hold 128 keys of a residue and more,
// in one range or across several: text runs of up to 300 tokens between videos (frames of 4-8 ×
// 4-8 tokens, 0 or 1 timestamp token between frames) and images. Frames of many tokens keep each
// group's last 64 rows in few runs, within the GPU estimate's limit. `frame_tokens`: the first
// video's tokens per frame.
ModalityLayout long_interleaved_layout(Random& random, int64_t length, int64_t& frame_tokens) {
  constexpr int64_t kMaxTextRun = 300;
  constexpr int kAttempts = 12;
  LayoutBuilder builder;
  int64_t used = 0;
  frame_tokens = 0;
  for (int attempt = 0; attempt < kAttempts && used < length; ++attempt) {
    LayoutBuilder extended = builder;
    extended.text(random.uniform_int(1, kMaxTextRun));
    const Grid frame{random.uniform_int(2, 12), random.uniform_int(4, 8), random.uniform_int(4, 8)};
    const bool video = random.bernoulli(0.7);
    if (video) {
      extended.video(frame, random.uniform_int(0, 1), random.bernoulli(0.5));
    } else {
      extended.image({1, frame.h, frame.w}, random.bernoulli(0.5));
    }
    const int64_t extended_length = extended.build().length();
    if (extended_length > length) continue;
    builder = extended;
    used = extended_length;
    if (video && frame_tokens == 0) frame_tokens = frame.h * frame.w;
  }
  if (used < length) builder.text(length - used);
  if (frame_tokens == 0) frame_tokens = kMinPlantedStride;
  return builder.build();
}

// Q/2D-boundary grid heads at a few thousand tokens, where their lines' pieces between spans are
// strided spans (LatticeKeys::kStridedSpansInRanges): the device records equal the host plan's,
// record for record, on odd lengths, GQA 1, 4 and 7, both modes, at the first video's frame
// stride, at short strides (every residue a long lattice) and at searched strides over planted
// grids; the first trial's attention through the device plan matches the fp64 oracle.
TEST_F(GpuIndexBuild, GridBoundaryStridedSpansMatchTheHostOnLongLayouts) {
  Random random;
  SCOPED_TRACE(random.trace());
  constexpr int kTrials = 12;
  constexpr std::array<Gqa, 3> kGqa = {{{1, 1}, {1, 4}, {1, 7}}};
  constexpr int64_t kMaxShortStride = 7;
  constexpr int64_t kMaxWindow = 9;  // local: windows narrower and wider than the strides
  int built = 0;
  int64_t strided_spans = 0;
  for (int trial = 0; trial < kTrials; ++trial) {
    const bool oracle = trial == 0;
    ProblemSize size;
    // GQA shape by trial / 3 and stride kind by trial % 3 (below): every pair of them.
    const Gqa& gqa = kGqa[static_cast<std::size_t>(trial / 3) % kGqa.size()];
    size.kv_heads = gqa.kv_heads;
    size.group = gqa.group;
    size.head_dim = pick(random, kHeadDims);
    size.dtype = pick(random, kDtypes);
    // Odd lengths; the oracle's trial short enough for the fp64 reference.
    size.q_len = (oracle ? random.uniform_int(900, 1300) : random.uniform_int(1500, 4500)) | 1;
    size.kv_len = size.q_len + random.uniform_int(0, kMaxExtraKeys);
    size.tile_rows =
        size.head_dim == kHeadDims.back() ? pick(random, kTileRows) : kTileRows.front();
    // The engine's own choice of kernel: 128-row tiles run only on the wgmma kernel.
    size.kernel = cuda::AttentionKernel::kAuto;
    size.scale = 1.0f / std::sqrt(static_cast<float>(size.head_dim));
    int64_t frame_tokens = 0;
    const QueryBoundaryProblem problem{
        size, long_interleaved_layout(random, size.kv_len, frame_tokens), 64};
    AttentionInputs inputs = random_inputs(random, size);
    int64_t stride = 0;
    int64_t max_stride = kMaxShortStride;
    switch (oracle ? 1 : trial % 3) {
      case 0:
        stride = frame_tokens;
        break;
      case 1:
        stride = random.uniform_int(2, kMaxShortStride);
        break;
      default: {
        const int64_t planted = random.uniform_int(kMinPlantedStride, kMaxPlantedStride);
        plant_grid(random, inputs, size, planted, random.uniform_int(0, planted - 1));
        max_stride = planted + kMaxShortStride;
      }
    }
    int64_t lines = 0;
    while (lines == 0) lines = random.uniform_int(1, 7);  // hline, vline, slash bits, not all 0
    const auto mode = trial % 2 == 0 ? detail::BoundaryMode::kQuery : detail::BoundaryMode::kTwoD;
    const PatternSpec spec =
        grid(stride, max_stride, lines & 1, (lines >> 1) & 1, (lines >> 2) & 1,
             random.uniform_int(0, kMaxSink), random.uniform_int(0, kMaxWindow), problem.last_q,
             static_cast<int64_t>(mode));
    SCOPED_TRACE(spec.to_string() + " " + describe(size) + " layout " + problem.layout.to_json());
    GridBuilt device;
    Plan host;
    if (check_grouped_grid(spec, problem, inputs, stream_, &device, &host) < 0) continue;
    ++built;
    strided_spans += static_cast<int64_t>(host.strided_spans.size());
    if (oracle) {
      const AttentionResult gpu = run_gpu(device.plan, inputs, size, random_layout(random));
      expect_matches_oracle(host, inputs, size, gpu);
    }
  }
  EXPECT_GT(built, kTrials / 2) << "too few trials' groups fit the GPU estimate";
  EXPECT_GT(strided_spans, 0) << "no trial's lines made a strided span";
}

TEST_F(GpuIndexBuild, GridBadParametersNameTheArgument) {
  Random random;
  const ProblemSize size = error_case_size();
  const AttentionInputs inputs = random_inputs(random, size);
  const DeviceOperand q(inputs.q);
  const DeviceOperand k(inputs.k);
  const PlanShape shape = plan_shape(size);
  const cuda::EstimateOperands good = cuda::make_estimate_operands("grid", {q.view, k.view}, shape);
  const auto build = [&](const char* text) {
    (void)cuda::build_grid_plan_on_device(resolve_pattern(PatternSpec::parse(text)), shape, nullptr,
                                          good, stream_);
  };
  expect_error([&] { build("grid:boundary=2"); }, ErrorCode::kInvalidArgument,
               {"grid parameter boundary", "a modality layout"});
  expect_error([&] { build("grid:stride=1"); }, ErrorCode::kInvalidArgument,
               {"grid parameter stride", "1"});
  expect_error([&] { build("grid:hline=0,vline=0,slash=0"); }, ErrorCode::kInvalidArgument,
               {"grid parameters hline, vline, slash"});
  // Checked before any kernel reads the operands, so a longer shape needs no longer inputs.
  expect_error(
      [&] {
        (void)cuda::build_grid_plan_on_device(
            resolve_pattern(PatternSpec::parse("grid:last_q=2000")), {1, 4, 2000, 2000, 64},
            nullptr, good, stream_);
      },
      ErrorCode::kUnsupported, {"grid parameter last_q", "2000"});
  expect_error(
      [&] {
        (void)cuda::build_grid_plan_on_device(resolve_pattern(PatternSpec::parse("vertical-slash")),
                                              shape, nullptr, good, stream_);
      },
      ErrorCode::kUnsupported, {"build_grid_plan_on_device pattern", "vertical-slash"});
  const auto spec_of = [](const char* text) { return resolve_pattern(PatternSpec::parse(text)); };
  EXPECT_TRUE(cuda::builds_grid_on_device(spec_of("grid:boundary=1"), shape, nullptr));
  // Without a layout the build reports the missing layout.
  EXPECT_TRUE(cuda::builds_grid_on_device(spec_of("grid:boundary=2"), shape, nullptr));
  PlanShape tall = shape;
  tall.tile_rows = 256;
  const ModalityLayout text = ModalityLayout::text_only(size.kv_len);
  EXPECT_FALSE(cuda::builds_grid_on_device(spec_of("grid:boundary=3"), tall, &text));
  EXPECT_FALSE(cuda::builds_dynamic_on_device(spec_of("grid"), shape, nullptr));
}

}  // namespace
}  // namespace mmsparse::test
