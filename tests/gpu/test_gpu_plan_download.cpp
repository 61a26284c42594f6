// Host copies of device plans (cuda/runtime/plan_download.h; PreparedPlan::plan() for plans
// estimated on the GPU) against the host builder, their oracle. The download decodes the device
// records into the plan the host builder makes for the same selection, so, record for record
// (plan_equality.h: up to runs of count 0 and unread token arrays, which the records do not carry
// and which change no pair), on random inputs, odd sizes, GQA 1 to 7 and batch 1 or 2:
//  * uploads of random host plans (permuted orders, spans, strided spans, lattice groups the
//    upload merges, columns, every mask policy with token arrays) and of the grid mask (two passes
//    of lattices) download to the plan uploaded;
//  * prepare_pattern's device builds of vec, vertical-slash (boundary none/K, budgets with clear
//    top-k cuts) and grid (fixed-stride slash lines, and a planted grid the host search chooses
//    clearly) download to build_plan's plan from host inputs;
//  * a per-head config mixing static, vertical-slash, grid, vec heads built on the GPU and vec
//    heads built on the host downloads to build_plan's plan of the same specs;
// and the metrics the CLI reads from it (count_plan_pairs, needle coverage) agree. plan() is built
// once and shared by concurrent callers.

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "attention_harness.h"
#include "common/random.h"
#include "cuda/runtime/engine.h"
#include "cuda/runtime/plan_download.h"
#include "device_buffer.h"
#include "grid_inputs.h"
#include "index_test_support.h"
#include "methods/estimate/index_builders.h"
#include "methods/vec/vec_device.h"
#include "mmsparse/attention.h"
#include "mmsparse/patterns.h"
#include "mmsparse/plan.h"
#include "mmsparse/tools/metrics.h"
#include "plan_equality.h"
#include "plan_generators.h"
#include "stream_test.h"

namespace mmsparse::test {
namespace {

constexpr Device kCuda{DeviceType::kCUDA, 0};
constexpr int kRandomTrials = 12;
// GQA ratios 1, 2, 4 and 7, one to three KV heads.
constexpr std::array<Gqa, 5> kGqaShapes = {{{1, 1}, {3, 1}, {2, 2}, {1, 4}, {2, 7}}};
constexpr ProblemLimits kLimits{kGqaShapes, 600, 300};
constexpr int64_t kMaxSink = 40;
constexpr int64_t kMaxLocal = 130;
constexpr int64_t kMaxLastQueries = 150;
constexpr int64_t kMaxFixedStride = 200;
constexpr int64_t kNeedles = 24;
constexpr int64_t kNeedleRows = 8;
constexpr int kConcurrentCallers = 4;

PlanShape plan_shape(const ProblemSize& size) {
  return {size.batch, size.q_heads(), size.q_len, size.kv_len, size.tile_rows};
}

// Every pass's mask table, as the device buffers number them.
std::vector<std::vector<MaskPolicy>> pass_masks(const Plan& plan) {
  std::vector<std::vector<MaskPolicy>> masks;
  for (int64_t p = 0; p < plan.num_passes(); ++p) masks.push_back(plan.pass(p).masks);
  return masks;
}

// count_plan_pairs (inside expect_decoded_plan) and, slot by slot, the coverage of needles (keys
// every querying row sees causally) by a block of consecutive rows, as the CLI report reads them.
void expect_same_metrics(const Plan& downloaded, const Plan& host, Random& random) {
  expect_decoded_plan(downloaded, host);
  const PlanShape& shape = host.shape;
  const int64_t first_row = random.uniform_int(0, shape.q_len - 1);
  const int64_t last_visible = std::min(first_row + shape.causal_offset(), shape.kv_len - 1);
  if (last_visible < 0) return;  // no key every row sees
  std::vector<int64_t> rows, keys;
  for (int64_t row = first_row; row < std::min(shape.q_len, first_row + kNeedleRows); ++row) {
    rows.push_back(row);
  }
  for (int64_t n = 0; n < kNeedles; ++n) keys.push_back(random.uniform_int(0, last_visible));
  for (int64_t slot = 0; slot < host.head_slots(); ++slot) {
    const NeedleCoverage a = needle_coverage(downloaded, slot, keys, rows);
    const NeedleCoverage b = needle_coverage(host, slot, keys, rows);
    EXPECT_EQ(a.covered, b.covered) << "head slot " << slot;
    EXPECT_EQ(a.needle_covered, b.needle_covered) << "head slot " << slot;
  }
}

// The prepared plan's host copy (downloaded on first use) against build_plan from host inputs.
struct Prepared {
  PreparedPlan plan;
  Plan host;
};

class GpuPlanDownload : public StreamTest {
 protected:
  // prepare_pattern of one spec from device copies of the inputs.
  Prepared prepare_one(const PatternSpec& spec, const ProblemSize& size,
                       const AttentionInputs& inputs) {
    const PlanShape shape = plan_shape(size);
    const PatternInputs host_inputs{inputs.q.view, inputs.k.view, size.scale};
    const DeviceOperand q(inputs.q);
    const DeviceOperand k(inputs.k);
    const PatternInputs device_inputs{q.view, k.view, size.scale};
    Prepared prepared{prepare_pattern(spec, shape, nullptr, kCuda, stream_, &device_inputs),
                      build_plan(spec, shape, nullptr, &host_inputs)};
    // q and k are freed on return: the build must have read them.
    expect_cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
    return prepared;
  }
};

TEST_F(GpuPlanDownload, UploadedPlansDownloadToThemselves) {
  Random random;
  SCOPED_TRACE(random.trace());
  int64_t lattice_plans = 0;
  for (int trial = 0; trial < 2 * kRandomTrials; ++trial) {
    const int64_t q_len = random.uniform_int(1, 500);
    const int64_t kv_len = std::max<int64_t>(q_len + random.uniform_int(-30, 300), 70);
    const PlanShape shape{random.uniform_int(1, 2), random.uniform_int(1, 7), q_len, kv_len,
                          random.bernoulli(0.5) ? 64 : 128};
    RandomPlanOptions options;
    options.leave_gaps = random.bernoulli(0.3);
    const bool tokens = random.bernoulli(0.4);
    options.masks = tokens ? MaskMix::kMixed : MaskMix::kPositional;
    options.max_lattice_groups = random.uniform_int(0, 2);
    const ModalityLayout layout = mixed_layout(random, kv_len);
    const Plan plan = random_plan(random, shape, options, tokens ? &layout : nullptr);
    SCOPED_TRACE(plan.summary());
    const std::vector<cuda::DevicePlan> passes = cuda::upload_passes(plan, stream_);
    lattice_plans += passes.front().layout().lattice_step > 0 ? 1 : 0;
    expect_same_metrics(cuda::download_plan(passes, pass_masks(plan), kCuda), plan, random);
  }
  // The grid mask with lattices: two passes, the second of lattices alone.
  const PlanShape shape{1, 3, 700, 811, 64};
  const Plan grid_mask = build_plan(
      PatternSpec::parse("grid-mask:sink=8,local=40,period=32,band=6,phases=4,lattice=1"), shape);
  ASSERT_GT(grid_mask.num_passes(), 1);
  const std::vector<cuda::DevicePlan> passes = cuda::upload_passes(grid_mask, stream_);
  for (const cuda::DevicePlan& pass : passes) lattice_plans += pass.layout().lattice_step > 0;
  expect_same_metrics(cuda::download_plan(passes, pass_masks(grid_mask), kCuda), grid_mask, random);
  EXPECT_GT(lattice_plans, 0) << "no upload held a lattice: the expansion went untested";
}

// Pooling up to the tile height (the GPU builds those; union tiles by default), causal or not,
// alphas whose selection no rounding can change: every candidate or none (the GPU's tensor-core
// scores may flip keys within rounding of other thresholds; test_gpu_vec.cpp checks those against
// the bound).
PatternSpec random_vec_spec(Random& random, int64_t tile_rows) {
  constexpr std::array<int64_t, 4> kPoolings = {16, 24, 48, 64};
  constexpr std::array<int64_t, 2> kAlphas = {0, 2000000};
  return {"vec",
          {{"pooling", std::min(tile_rows, pick(random, kPoolings))},
           {"group", random.uniform_int(1, 16)},
           {"alpha_ppm", pick(random, kAlphas)},
           {"causal", random.uniform_int(0, 1)}}};
}

TEST_F(GpuPlanDownload, VecDownloadsTheHostPlan) {
  Random random;
  SCOPED_TRACE(random.trace());
  // Keys past a tile's sinks and diagonal (pooling + the tile's rows at most: a union tile's
  // diagonal spans its blocks').
  int64_t selected_keys = 0;
  for (int trial = 0; trial < kRandomTrials; ++trial) {
    ProblemSize size = random_problem(random, kLimits);
    size.kv_len = std::max<int64_t>(size.kv_len, 1);  // the GPU builds vec heads with keys
    const AttentionInputs inputs = random_inputs(random, size);
    const PatternSpec spec = random_vec_spec(random, size.tile_rows);
    SCOPED_TRACE(spec.to_string() + " " + describe(size));
    ASSERT_TRUE(cuda::builds_vec_on_device(resolve_pattern(spec), plan_shape(size)));
    const Prepared prepared = prepare_one(spec, size, inputs);
    expect_same_metrics(prepared.plan.plan(), prepared.host, random);
    const Plan& host = prepared.host;
    for (int64_t t = 0; t < host.num_tiles(); ++t) {
      int64_t keys = host.tile_column_offsets[t + 1] - host.tile_column_offsets[t];
      for (int64_t s = host.tile_span_offsets[t]; s < host.tile_span_offsets[t + 1]; ++s) {
        keys += host.spans[s].end - host.spans[s].begin;
      }
      const int64_t fixed = spec.params.at("pooling") + host.tiles[t].end - host.tiles[t].begin;
      selected_keys += std::max<int64_t>(0, keys - fixed);
    }
  }
  EXPECT_GT(selected_keys, 0) << "no trial selected a key: the selection went untested";
}

TEST_F(GpuPlanDownload, VerticalSlashDownloadsTheHostPlan) {
  Random random;
  SCOPED_TRACE(random.trace());
  for (int trial = 0; trial < kRandomTrials; ++trial) {
    ProblemSize size = random_problem(random, kLimits);
    const AttentionInputs inputs = random_inputs(random, size);
    const PatternInputs host_inputs{inputs.q.view, inputs.k.view, size.scale};
    const int64_t sink = random.uniform_int(0, kMaxSink);
    const int64_t local = random.uniform_int(0, kMaxLocal);
    const int64_t last_q = random.bernoulli(0.5) ? 64 : random.uniform_int(1, kMaxLastQueries);
    const HostScores scores = host_scores(host_inputs, plan_shape(size), last_q);
    const PatternSpec spec = vertical_slash(clear_budget(random, scores.columns, sink),
                                            clear_budget(random, scores.diagonals, local), sink,
                                            local, last_q, random.uniform_int(0, 1));
    SCOPED_TRACE(spec.to_string() + " " + describe(size));
    const Prepared prepared = prepare_one(spec, size, inputs);
    expect_same_metrics(prepared.plan.plan(), prepared.host, random);
  }
}

// Grid heads the GPU builds (boundary none or K): slash lines at a fixed stride (no search, nothing
// rounding could flip), and the searched spec on a planted grid where the host search chose
// clearly on every head slot.
TEST_F(GpuPlanDownload, GridDownloadsTheHostPlan) {
  Random random;
  SCOPED_TRACE(random.trace());
  int64_t searched = 0;
  for (int trial = 0; trial < kRandomTrials; ++trial) {
    ProblemSize size = random_problem(random, kLimits);
    size.kv_len = std::max<int64_t>(size.kv_len, 1);  // keys to plant the grid in
    AttentionInputs inputs = random_inputs(random, size);
    const int64_t stride = random.uniform_int(3, size.head_dim - 2);
    plant_grid(random, inputs, size, stride, random.uniform_int(0, stride - 1));
    const int64_t last_q = random.bernoulli(0.5) ? 64 : random.uniform_int(1, kMaxLastQueries);
    PatternSpec spec = grid(0, stride + random.uniform_int(0, 8), random.uniform_int(0, 1),
                            random.uniform_int(0, 1), 1, random.uniform_int(0, kMaxSink),
                            random.uniform_int(0, kMaxLocal), last_q, random.uniform_int(0, 1));
    const PatternInputs host_inputs{inputs.q.view, inputs.k.view, size.scale};
    if (host_grid_search(resolve_pattern(spec), plan_shape(size), host_inputs).all_clear()) {
      ++searched;
    } else {
      spec = grid(random.uniform_int(2, kMaxFixedStride), stride, 0, 0, 1,
                  random.uniform_int(0, kMaxSink), random.uniform_int(0, kMaxLocal), last_q,
                  random.uniform_int(0, 1));
    }
    SCOPED_TRACE(spec.to_string() + " " + describe(size));
    ASSERT_TRUE(cuda::builds_grid_on_device(resolve_pattern(spec), plan_shape(size), nullptr));
    const Prepared prepared = prepare_one(spec, size, inputs);
    expect_same_metrics(prepared.plan.plan(), prepared.host, random);
  }
  RecordProperty("searched_grid_trials", std::to_string(searched));
}

// One head of each kind in turn (GQA groups split across kinds): static, vertical-slash and grid
// estimated on the GPU, vec on the GPU (pooling within the tile) and on the host (pooling past
// the tile height, from host inputs).
std::vector<PatternSpec> mixed_specs(Random& random, const ProblemSize& size,
                                     const AttentionInputs& inputs) {
  const int64_t heads = size.q_heads();
  const int64_t last_q = random.bernoulli(0.5) ? 64 : random.uniform_int(1, kMaxLastQueries);
  const int64_t first_kind = random.uniform_int(0, 4);
  std::vector<int64_t> estimated;
  std::vector<PatternSpec> specs(static_cast<std::size_t>(heads));
  const PatternSpec a_shape{"a-shape",
                            {{"sink", random.uniform_int(0, kMaxSink)},
                             {"local", random.uniform_int(1, size.q_len + 64)}}};
  const PatternSpec device_grid =
      grid(random.uniform_int(2, kMaxFixedStride), 8, 0, 0, 1, random.uniform_int(0, kMaxSink),
           random.uniform_int(0, kMaxLocal), last_q, 0);
  const PatternSpec device_vec = random_vec_spec(random, size.tile_rows);
  PatternSpec host_vec = random_vec_spec(random, size.tile_rows);
  host_vec.params["pooling"] = size.tile_rows + 8;
  for (int64_t h = 0; h < heads; ++h) {
    switch ((first_kind + h) % 5) {
      case 0:
        specs[h] = a_shape;
        break;
      case 1:
        estimated.push_back(h);
        break;
      case 2:
        specs[h] = device_grid;
        break;
      case 3:
        specs[h] = device_vec;
        break;
      default:
        specs[h] = host_vec;
        break;
    }
  }
  if (!estimated.empty()) {
    const PatternInputs host_inputs{inputs.q.view, inputs.k.view, size.scale};
    const int64_t sink = random.uniform_int(0, kMaxSink);
    const int64_t local = random.uniform_int(0, kMaxLocal);
    const HostScores scores = host_scores(host_inputs, plan_shape(size), last_q, estimated);
    const PatternSpec spec =
        vertical_slash(clear_budget(random, scores.columns, sink),
                       clear_budget(random, scores.diagonals, local), sink, local, last_q, 0);
    for (const int64_t h : estimated) specs[h] = spec;
  }
  return specs;
}

TEST_F(GpuPlanDownload, MixedConfigDownloadsTheHostPlan) {
  Random random;
  SCOPED_TRACE(random.trace());
  int64_t host_heads = 0;
  for (int trial = 0; trial < kRandomTrials; ++trial) {
    ProblemSize size = random_problem(random, kLimits);
    size.kv_len = std::max<int64_t>(size.kv_len, 1);
    const AttentionInputs inputs = random_inputs(random, size);
    const std::vector<PatternSpec> specs = mixed_specs(random, size, inputs);
    std::string text = describe(size) + " specs:";
    for (const PatternSpec& spec : specs) {
      text += ' ';
      text += spec.to_string();
    }
    SCOPED_TRACE(text);
    const PlanShape shape = plan_shape(size);
    const PatternInputs host_inputs{inputs.q.view, inputs.k.view, size.scale};
    const DeviceOperand q(inputs.q);
    const DeviceOperand k(inputs.k);
    const PatternInputs device_inputs{q.view, k.view, size.scale};
    const PreparedPlan prepared =
        prepare_pattern(specs, shape, nullptr, kCuda, stream_, &device_inputs, &host_inputs);
    for (const HeadBuildTime& head : prepared.build_times().heads) host_heads += !head.on_device;
    expect_same_metrics(prepared.plan(), build_plan(specs, shape, nullptr, &host_inputs), random);
  }
  EXPECT_GT(host_heads, 0) << "no head was built on the host: the uploaded part went untested";
}

// Concurrent first calls share one download.
TEST_F(GpuPlanDownload, PlanIsDownloadedOnceForConcurrentCallers) {
  Random random;
  SCOPED_TRACE(random.trace());
  ProblemSize size = random_problem(random, kLimits);
  size.q_len = 257;
  size.kv_len = 301;
  const AttentionInputs inputs = random_inputs(random, size);
  const Prepared prepared = prepare_one(random_vec_spec(random, size.tile_rows), size, inputs);
  std::array<const Plan*, kConcurrentCallers> seen{};
  std::vector<std::thread> callers;
  for (int c = 0; c < kConcurrentCallers; ++c) {
    callers.emplace_back([&, c] { seen[c] = &prepared.plan.plan(); });
  }
  for (std::thread& caller : callers) caller.join();
  for (const Plan* plan : seen) EXPECT_EQ(plan, seen.front());
  expect_decoded_plan(*seen.front(), prepared.host);
}

}  // namespace
}  // namespace mmsparse::test
