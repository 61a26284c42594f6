// Static patterns built on the device (methods/static/static_device.h) against the host path: the
// device buffer must be byte-identical to uploading the host-built plan, attention through the two
// plans must agree bit for bit, and prepare_pattern must serve what prepare_plan(build_plan)
// serves. Also reports host and device build times of a long-context plan.

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "attention_harness.h"
#include "common/random.h"
#include "cuda/runtime/engine.h"
#include "device_buffer.h"
#include "methods/static/static_device.h"
#include "mmsparse/attention.h"
#include "mmsparse/device.h"
#include "mmsparse/layout.h"
#include "mmsparse/patterns.h"
#include "mmsparse/plan.h"
#include "mmsparse/status.h"
#include "plan_generators.h"
#include "stream_test.h"

namespace mmsparse::test {
namespace {

constexpr Device kCuda{DeviceType::kCUDA, 0};
constexpr std::array<int64_t, 2> kTileRows = {64, 128};
constexpr int kRandomShapesPerPattern = 12;
constexpr int64_t kMaxHeads = 4;
constexpr int64_t kMaxQueryLength = 900;
constexpr int64_t kMaxExtraKeys = 400;
// Attention comparison: head_dim 128 so that 128-row span plans run on the wgmma kernel.
constexpr int64_t kAttentionHeadDim = 128;
constexpr int64_t kAttentionKvHeads = 2;
constexpr int64_t kAttentionGroup = 2;
// Timing: a long-context layer of a 7B-class model, median of a few builds after a warm-up.
constexpr int64_t kTimingHeads = 28;
constexpr int64_t kTimingLength = 65536;
constexpr int kTimingRepeats = 5;

enum class Pattern { kDense, kAShape, kTriShape, kSfFixed, kSfStrided };
constexpr std::array<Pattern, 5> kPatterns = {Pattern::kDense, Pattern::kAShape, Pattern::kTriShape,
                                              Pattern::kSfFixed, Pattern::kSfStrided};

// A spec of `pattern` with random parameters: windows, segments and strides below, around and
// above the tile height and the sequence, so that every tiling case appears.
PatternSpec random_spec(Random& random, Pattern pattern, int64_t q_len) {
  const auto length = [&](int64_t low) { return random.uniform_int(low, q_len + 64); };
  switch (pattern) {
    case Pattern::kDense:
      return {"dense", {}};
    case Pattern::kAShape:
      return {"a-shape", {{"sink", length(0)}, {"local", length(1)}}};
    case Pattern::kTriShape:
      return {"tri-shape", {{"sink", length(0)}, {"local", length(1)}, {"bottom", length(0)}}};
    case Pattern::kSfFixed:
      return {
          "sf-fixed",
          {{"segment", random.uniform_int(1, 300)}, {"vline_stride", random.uniform_int(1, 300)}}};
    case Pattern::kSfStrided:
      return {"sf-strided", {{"local", length(1)}, {"stride", random.uniform_int(1, 300)}}};
  }
  return {};
}

// The device buffer of a DevicePlan, downloaded.
std::vector<std::byte> download(const cuda::DevicePlan& plan) {
  std::vector<std::byte> bytes(plan.layout().bytes);
  if (!bytes.empty()) {
    expect_cuda(cudaMemcpy(bytes.data(), plan.data(), bytes.size(), cudaMemcpyDeviceToHost),
                "cudaMemcpy plan to host");
  }
  return bytes;
}

void expect_same_layout(const cuda::DevicePlanLayout& a, const cuda::DevicePlanLayout& b) {
  EXPECT_EQ(a.head_run_offsets, b.head_run_offsets);
  EXPECT_EQ(a.runs, b.runs);
  EXPECT_EQ(a.tiles, b.tiles);
  EXPECT_EQ(a.schedule, b.schedule);
  EXPECT_EQ(a.masks, b.masks);
  EXPECT_EQ(a.spans, b.spans);
  EXPECT_EQ(a.columns, b.columns);
  EXPECT_EQ(a.token_info, b.token_info);
  EXPECT_EQ(a.bytes, b.bytes);
  EXPECT_EQ(a.has_token_info, b.has_token_info);
  EXPECT_EQ(a.lattice_step, b.lattice_step);
  EXPECT_EQ(a.gathers, b.gathers);
  EXPECT_EQ(a.shared_runs, b.shared_runs);
  EXPECT_EQ(a.has_launch_records, b.has_launch_records);
  EXPECT_EQ(a.launch_records, b.launch_records);
}

// The first differing byte, named by section, so that a failure says which array is wrong.
std::string first_difference(const std::vector<std::byte>& a, const std::vector<std::byte>& b,
                             const cuda::DevicePlanLayout& layout) {
  const auto mismatch = std::mismatch(a.begin(), a.end(), b.begin(), b.end());
  if (mismatch.first == a.end() && mismatch.second == b.end()) return "none";
  const auto at = static_cast<std::size_t>(mismatch.first - a.begin());
  const std::array<std::pair<const char*, std::size_t>, 8> sections = {
      {{"head_run_offsets", layout.head_run_offsets},
       {"runs", layout.runs},
       {"tiles", layout.tiles},
       {"schedule", layout.schedule},
       {"masks", layout.masks},
       {"spans", layout.spans},
       {"columns", layout.columns},
       {"token_info", layout.token_info}}};
  const char* name = "head_run_offsets";
  std::size_t start = 0;
  for (const auto& [section, offset] : sections) {
    if (offset <= at) {
      name = section;
      start = offset;
    }
  }
  return "byte " + std::to_string(at) + " (" + name + " + " + std::to_string(at - start) + ")";
}

// Builds `spec` both ways on `stream` and compares everything a DevicePlan holds.
void expect_device_build_matches_upload(const PatternSpec& spec, const PlanShape& shape,
                                        cudaStream_t stream) {
  const Plan host = build_plan(spec, shape);
  SCOPED_TRACE(spec.to_string() + " " + host.summary());
  const cuda::DevicePlan uploaded(host, stream);
  const cuda::DevicePlan built =
      cuda::build_static_plan_on_device(resolve_pattern(spec), shape, stream);
  expect_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  EXPECT_EQ(built.shape(), uploaded.shape());
  EXPECT_EQ(built.num_tiles(), uploaded.num_tiles());
  EXPECT_EQ(built.num_columns(), uploaded.num_columns());
  EXPECT_EQ(built.covers_every_row(), uploaded.covers_every_row());
  expect_same_layout(built.layout(), uploaded.layout());
  // Static patterns write no strided spans: they gather exactly when they list columns.
  EXPECT_EQ(uploaded.layout().gathers, !host.columns.empty());
  const std::vector<std::byte> built_bytes = download(built);
  const std::vector<std::byte> uploaded_bytes = download(uploaded);
  EXPECT_TRUE(built_bytes == uploaded_bytes)
      << "first difference at " << first_difference(built_bytes, uploaded_bytes, uploaded.layout());
}

class GpuPlanBuild : public StreamTest {};

TEST_F(GpuPlanBuild, RandomShapesMatchUploadByteForByte) {
  Random random;
  SCOPED_TRACE(random.trace());
  for (const Pattern pattern : kPatterns) {
    for (int trial = 0; trial < kRandomShapesPerPattern; ++trial) {
      PlanShape shape;
      shape.heads = random.uniform_int(1, kMaxHeads);
      shape.q_len = random.uniform_int(0, kMaxQueryLength / 2) * 2 + 1;  // odd
      // Mostly more keys than queries (a prefix), sometimes fewer (queries before every key).
      shape.kv_len = random.bernoulli(0.8) ? shape.q_len + random.uniform_int(0, kMaxExtraKeys)
                                           : random.uniform_int(0, shape.q_len);
      shape.tile_rows =
          kTileRows[random.uniform_int(0, static_cast<int64_t>(kTileRows.size()) - 1)];
      expect_device_build_matches_upload(random_spec(random, pattern, shape.q_len), shape, stream_);
    }
  }
}

// Empty and degenerate shapes, batches, and parameters at their minimums.
TEST_F(GpuPlanBuild, EdgeShapesMatchUploadByteForByte) {
  const std::vector<PlanShape> shapes = {
      {1, 1, 0, 0, 64},   {1, 2, 0, 17, 64},    {1, 1, 1, 1, 64},     {1, 3, 1, 0, 128},
      {1, 1, 64, 64, 64}, {2, 3, 129, 200, 64}, {1, 2, 300, 45, 128}, {3, 1, 257, 513, 128}};
  const std::vector<std::string> specs = {"dense",
                                          "a-shape:sink=0,local=1",
                                          "a-shape:sink=1000,local=1000",
                                          "tri-shape:sink=0,local=1,bottom=0",
                                          "tri-shape:sink=3,local=5,bottom=100000",
                                          "tri-shape:sink=8,local=40,bottom=64",
                                          "sf-fixed:segment=1,vline_stride=1",
                                          "sf-fixed:segment=64,vline_stride=64",
                                          "sf-fixed:segment=100000,vline_stride=7",
                                          "sf-strided:local=1,stride=1",
                                          "sf-strided:local=1000,stride=63",
                                          "sf-strided:local=17,stride=200"};
  for (const PlanShape& shape : shapes) {
    for (const std::string& spec : specs) {
      expect_device_build_matches_upload(PatternSpec::parse(spec), shape, stream_);
    }
  }
}

TEST_F(GpuPlanBuild, BadParametersThrowLikeTheHostBuild) {
  const PlanShape shape{1, 1, 100, 100, 64};
  const std::vector<PatternSpec> bad_specs = {{"a-shape", {{"sink", -1}, {"local", 4}}},
                                              {"sf-fixed", {{"segment", 0}, {"vline_stride", 4}}},
                                              {"sf-strided", {{"local", 4}, {"stride", 0}}}};
  for (const PatternSpec& spec : bad_specs) {
    SCOPED_TRACE(spec.to_string());
    const PatternSpec resolved = resolve_pattern(spec);
    EXPECT_THROW(build_plan(resolved, shape), Error);
    EXPECT_THROW(cuda::build_static_plan_on_device(resolved, shape, stream_), Error);
  }
  EXPECT_THROW(cuda::build_static_plan_on_device(resolve_pattern(PatternSpec::parse("dense")),
                                                 {1, 1, 100, 100, 0}, stream_),
               Error);
}

// Bit equality of two results of one shape, elements compared as bytes.
void expect_bit_identical(const AttentionResult& a, const AttentionResult& b) {
  const auto same = [](const TensorView& x, const TensorView& y) {
    std::vector<std::byte> bytes_x;
    std::vector<std::byte> bytes_y;
    const std::size_t element = dtype_size(x.dtype);
    for_each_offset(x, [&](int64_t, int64_t offset) {
      const auto* at = static_cast<const std::byte*>(x.data) + offset * element;
      bytes_x.insert(bytes_x.end(), at, at + element);
    });
    for_each_offset(y, [&](int64_t, int64_t offset) {
      const auto* at = static_cast<const std::byte*>(y.data) + offset * element;
      bytes_y.insert(bytes_y.end(), at, at + element);
    });
    return bytes_x == bytes_y;
  };
  EXPECT_TRUE(same(a.out.view, b.out.view)) << "O differs";
  EXPECT_TRUE(same(a.lse.view(), b.lse.view())) << "LSE differs";
}

TEST_F(GpuPlanBuild, AttentionThroughBothPlansAgree) {
  Random random;
  SCOPED_TRACE(random.trace());
  for (const Pattern pattern : kPatterns) {
    for (const int64_t tile_rows : kTileRows) {
      ProblemSize size;
      size.q_len = random.uniform_int(100, 300) * 2 + 1;
      size.kv_len = size.q_len + random.uniform_int(0, 200);
      size.kv_heads = kAttentionKvHeads;
      size.group = kAttentionGroup;
      size.head_dim = kAttentionHeadDim;
      size.scale = 1.0f / std::sqrt(static_cast<float>(kAttentionHeadDim));
      size.kernel = cuda::AttentionKernel::kAuto;
      size.tile_rows = tile_rows;
      const PlanShape shape{1, size.q_heads(), size.q_len, size.kv_len, tile_rows};
      const PatternSpec spec = resolve_pattern(random_spec(random, pattern, size.q_len));
      SCOPED_TRACE(spec.to_string() + " " + describe(size));
      const cuda::DevicePlan uploaded(build_plan(spec, shape), nullptr);
      const cuda::DevicePlan built = cuda::build_static_plan_on_device(spec, shape, nullptr);
      const AttentionInputs inputs = random_inputs(random, size);
      expect_bit_identical(run_gpu(built, inputs, size, OperandLayout::kContiguous),
                           run_gpu(uploaded, inputs, size, OperandLayout::kContiguous));
    }
  }
}

void expect_same_plan(const Plan& a, const Plan& b) {
  EXPECT_EQ(a.shape, b.shape);
  EXPECT_EQ(a.masks, b.masks);
  EXPECT_EQ(a.head_run_offsets, b.head_run_offsets);
  EXPECT_EQ(a.runs, b.runs);
  EXPECT_EQ(a.head_tile_offsets, b.head_tile_offsets);
  EXPECT_EQ(a.tiles, b.tiles);
  EXPECT_EQ(a.tile_masks, b.tile_masks);
  EXPECT_EQ(a.tile_span_offsets, b.tile_span_offsets);
  EXPECT_EQ(a.spans, b.spans);
  EXPECT_EQ(a.tile_column_offsets, b.tile_column_offsets);
  EXPECT_EQ(a.columns, b.columns);
  EXPECT_EQ(a.token_modality, b.token_modality);
  EXPECT_EQ(a.token_media, b.token_media);
}

// prepare_pattern on the device (built there) against prepare_plan(build_plan) on the device, with
// a layout supplying the SF defaults: the same attention, and plan() the host plan.
TEST_F(GpuPlanBuild, PreparePatternMatchesPreparePlan) {
  Random random;
  SCOPED_TRACE(random.trace());
  ProblemSize size;
  size.q_len = 333;
  size.kv_len = 401;
  size.kv_heads = kAttentionKvHeads;
  size.group = kAttentionGroup;
  size.head_dim = kAttentionHeadDim;
  size.scale = 1.0f / std::sqrt(static_cast<float>(kAttentionHeadDim));
  const ModalityLayout layout = mixed_layout(random, size.kv_len);
  const PlanShape shape{1, size.q_heads(), size.q_len, size.kv_len, kDefaultTileRows};
  for (const char* text : {"dense", "a-shape:sink=8,local=40",
                           "tri-shape:sink=8,local=40,bottom=30", "sf-fixed", "sf-strided"}) {
    SCOPED_TRACE(text);
    const PatternSpec spec = PatternSpec::parse(text);
    const Plan host = build_plan(spec, shape, &layout);
    const PreparedPlan expected = prepare_plan(host, kCuda, stream_);
    const PreparedPlan built = prepare_pattern(spec, shape, &layout, kCuda, stream_);
    EXPECT_EQ(device_name(built.device()), device_name(kCuda));
    EXPECT_EQ(built.shape(), shape);

    const AttentionInputs inputs = random_inputs(random, size);
    const DeviceTensor q = DeviceTensor::from_host(inputs.q.view, kCuda);
    const DeviceTensor k = DeviceTensor::from_host(inputs.k.view, kCuda);
    const DeviceTensor v = DeviceTensor::from_host(inputs.v.view, kCuda);
    AttentionOptions options;
    options.scale = size.scale;
    options.stream = stream_;
    std::array<AttentionResult, 2> results = {
        AttentionResult{HostOperand(size.dtype, 1, size.q_len, size.q_heads(), size.head_dim,
                                    OperandLayout::kContiguous),
                        Tensor(DType::kFloat32, {1, size.q_heads(), size.q_len})},
        AttentionResult{HostOperand(size.dtype, 1, size.q_len, size.q_heads(), size.head_dim,
                                    OperandLayout::kContiguous),
                        Tensor(DType::kFloat32, {1, size.q_heads(), size.q_len})}};
    const std::array<const PreparedPlan*, 2> plans = {&built, &expected};
    for (std::size_t p = 0; p < plans.size(); ++p) {
      DeviceTensor out(size.dtype, {1, size.q_len, size.q_heads(), size.head_dim}, kCuda);
      DeviceTensor lse(DType::kFloat32, {1, size.q_heads(), size.q_len}, kCuda);
      attention_planned(*plans[p], q.view(), k.view(), v.view(), out.view(), lse.view(), options);
      expect_cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
      out.copy_to_host(results[p].out.view);
      lse.copy_to_host(results[p].lse.view());
    }
    expect_bit_identical(results[0], results[1]);
    expect_same_plan(built.plan(), host);  // built on the host on first use
  }
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

// Milliseconds from the first host call until the plan is on the device, median of repeats after
// a warm-up (which also pays CUB's and the pool's first-use costs).
template <class Build>
double build_milliseconds(cudaStream_t stream, Build&& build) {
  std::vector<double> times;
  for (int repeat = 0; repeat <= kTimingRepeats; ++repeat) {
    const auto start = std::chrono::steady_clock::now();
    const cuda::DevicePlan plan = build();
    expect_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    const auto stop = std::chrono::steady_clock::now();
    if (repeat > 0)
      times.push_back(std::chrono::duration<double, std::milli>(stop - start).count());
  }
  return median(times);
}

// Not a pass/fail test: records host-built + upload against device-built times (ctest keeps the
// properties, and the numbers are printed), after checking the big plans agree.
TEST_F(GpuPlanBuild, HostVersusDeviceBuildTime) {
  const PlanShape span_shape{1, kTimingHeads, kTimingLength, kTimingLength, cuda::kMaxTileRows};
  const PlanShape column_shape{1, kTimingHeads, kTimingLength, kTimingLength, kDefaultTileRows};
  for (const char* text : {"dense", "a-shape", "tri-shape", "sf-fixed", "sf-strided"}) {
    const PatternSpec spec = resolve_pattern(PatternSpec::parse(text));
    const PlanShape& shape = spec.name == "sf-fixed" ? column_shape : span_shape;
    expect_device_build_matches_upload(spec, shape, stream_);
    const double host_ms = build_milliseconds(
        stream_, [&] { return cuda::DevicePlan(build_plan(spec, shape), stream_); });
    const double device_ms = build_milliseconds(
        stream_, [&] { return cuda::build_static_plan_on_device(spec, shape, stream_); });
    std::printf(
        "[plan build] %-40s heads=%lld len=%lld tile_rows=%lld: host build + upload "
        "%.3f ms, device build %.3f ms (%.1fx)\n",
        spec.to_string().c_str(), static_cast<long long>(shape.heads),
        static_cast<long long>(shape.q_len), static_cast<long long>(shape.tile_rows), host_ms,
        device_ms, host_ms / device_ms);
    RecordProperty(std::string(text) + "_host_ms", std::to_string(host_ms));
    RecordProperty(std::string(text) + "_device_ms", std::to_string(device_ms));
  }
}

}  // namespace
}  // namespace mmsparse::test
