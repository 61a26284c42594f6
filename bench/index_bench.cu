// Times the GPU index builders (methods/estimate/index_builders.h) against attention over the plan
// they build: vertical-slash, the grid head (every head as a grid head) and VecAttention's
// selection (methods/vec/vec_device.h) at three alphas with pooled blocks of 64 and of 128 queries
// (the paper's two settings; 128 on 128-row tiles only, as the device builds blocks no taller than
// a tile), estimated from device Q and K for every head slot, then the engine (kernel
// auto-selected) on that plan. bf16, the SYNTHETIC workload "video-qwen2.5vl-128k" (28 query heads
// over 4 KV heads unless given, head_dim 128; docs/workloads.md). Index milliseconds are stream
// time from the build call to its last kernel (allocation, estimate, top-k, conversion, schedule
// sort), median of repeats after a warm-up, twice: with mmsparse's memory pool (device_pool.h) set
// to return freed memory to the system at every synchronisation (so each build maps its buffers
// anew), and set to keep it (release threshold unlimited, its default, what a caching allocator
// does across layers). The estimate and top-k stages are also timed alone; the rest is the
// conversion, the schedule sort and the allocations. Attention is timed likewise, L2 flushed before
// each run. "read density" is tile rows × keys each tile reads over the causal pairs: an upper
// bound of the computed density (rows skip the keys beyond their diagonal). For the grid,
// "estimate" includes storing the softmax rows and top-k reads "-" (the search and conversion are
// the rest of the index time); a line after each grid row gives the strides found (grid heads of
// the workload marked *), the plan buffer (sized for every candidate stride) and the columns the
// real tiles hold. A line after each vec row gives the selection's phases (stream milliseconds
// between events, median of the repeats, with the kept pool; VecBuildTimes names them).
//
//   mmsparse_index_bench [seq_len] [patterns] [q_heads] [kv_heads] [seed]
//     default 131072, every pattern ("vertical-slash", "grid", "vec" or a comma-separated list),
//     the preset's heads, seed 0; e.g. `131072 vec,vertical-slash 4 1 1` (vec-bench.sh's shape)

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "bench_support.h"
#include "cuda/common/device_pool.h"
#include "cuda/runtime/engine.h"
#include "cuda/runtime/plan_view.cuh"
#include "methods/estimate/index_builders.h"
#include "methods/estimate/index_kernels.h"
#include "methods/vec/vec_device.h"
#include "mmsparse/attention.h"
#include "mmsparse/patterns.h"
#include "mmsparse/tools/workload.h"

namespace {

namespace cuda = mmsparse::cuda;
using mmsparse::bench::check;
using mmsparse::bench::DeviceCopy;
using mmsparse::bench::median;
using mmsparse::DType;

constexpr int64_t kDefaultLength = 131072;
constexpr int kWarmups = 1;
constexpr int kRepeats = 5;
constexpr std::size_t kFlushBytes = std::size_t{256} << 20;  // several times the 50 MB L2
constexpr int64_t kTileRowChoices[] = {64, 128};
constexpr const char* kSpecs[] = {"vertical-slash",
                                  "vertical-slash:vertical=200,slash=1200",
                                  "grid",
                                  "vec:alpha_ppm=30000",
                                  "vec:alpha_ppm=100000",
                                  "vec:alpha_ppm=300000",
                                  "vec:alpha_ppm=30000,pooling=128",
                                  "vec:alpha_ppm=100000,pooling=128",
                                  "vec:alpha_ppm=300000,pooling=128"};
constexpr char kGrid[] = "grid";
constexpr char kVec[] = "vec";
constexpr double kMegabyte = 1e6;

std::string format_milliseconds(double milliseconds) {
  char text[32];
  std::snprintf(text, sizeof(text), "%9.3f", milliseconds);
  return text;
}

// Median stream milliseconds of `run` over the repeats, `before` (untimed) ahead of each.
double median_milliseconds(cudaStream_t stream, const std::function<void()>& before,
                           const std::function<void()>& run) {
  cudaEvent_t start;
  cudaEvent_t stop;
  check(cudaEventCreate(&start), "cudaEventCreate");
  check(cudaEventCreate(&stop), "cudaEventCreate");
  std::vector<float> samples;
  for (int r = 0; r < kWarmups + kRepeats; ++r) {
    before();
    check(cudaEventRecord(start, stream), "cudaEventRecord");
    run();
    check(cudaEventRecord(stop, stream), "cudaEventRecord");
    check(cudaEventSynchronize(stop), "cudaEventSynchronize");
    float milliseconds = 0.0f;
    check(cudaEventElapsedTime(&milliseconds, start, stop), "cudaEventElapsedTime");
    if (r >= kWarmups) samples.push_back(milliseconds);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return median(samples);
}

// Device scratch of the estimate and selection stages, timed alone.
struct StageScratch {
  std::vector<std::unique_ptr<DeviceCopy>> arrays;
  template <class T>
  T* add(int64_t count) {
    arrays.push_back(std::make_unique<DeviceCopy>(static_cast<std::size_t>(count) * sizeof(T)));
    return static_cast<T*>(arrays.back()->data);
  }
};

struct PlanReads {
  double pairs = 0.0;   // tile rows × keys read, over all tiles
  int64_t columns = 0;  // gathered keys the tiles hold
};

// What the plan's tiles read, from its records.
PlanReads read_pairs(const cuda::DevicePlan& plan) {
  const cuda::DevicePlanLayout& layout = plan.layout();
  std::vector<cuda::TileRecord> tiles(static_cast<std::size_t>(plan.num_tiles()));
  const auto* base = static_cast<const std::byte*>(plan.data());
  check(cudaMemcpy(tiles.data(), base + layout.tiles, tiles.size() * sizeof(cuda::TileRecord),
                   cudaMemcpyDeviceToHost),
        "cudaMemcpy tiles");
  int64_t spans = 0;
  for (const cuda::TileRecord& tile : tiles) spans = std::max(spans, tile.span_end);
  std::vector<cuda::SpanRecord> span_records(static_cast<std::size_t>(spans));
  check(cudaMemcpy(span_records.data(), base + layout.spans,
                   span_records.size() * sizeof(cuda::SpanRecord), cudaMemcpyDeviceToHost),
        "cudaMemcpy spans");
  PlanReads reads;
  for (const cuda::TileRecord& tile : tiles) {
    int64_t keys = tile.column_end - tile.column_begin;
    reads.columns += tile.column_end - tile.column_begin;
    for (int64_t s = tile.span_begin; s < tile.span_end; ++s) {
      keys += cuda::range_keys(span_records[s]);
    }
    reads.pairs += static_cast<double>(keys) * (tile.end - tile.begin);
  }
  return reads;
}

// The estimate and the vertical-slash selection alone, on scratch of their own; the grid's
// estimate also stores the softmax rows, and its search is not timed alone (select stays 0).
void time_stages(const mmsparse::PatternSpec& spec, const mmsparse::PlanShape& shape,
                 const cuda::EstimateOperands& operands, cudaStream_t stream,
                 double& estimate_milliseconds, double& select_milliseconds) {
  const bool grid = spec.name == kGrid;
  const mmsparse::PatternSpec& selection_spec =
      grid ? mmsparse::resolve_pattern(mmsparse::PatternSpec::parse("vertical-slash")) : spec;
  const cuda::index::VerticalSlashBuild build =
      cuda::index::plan_vertical_slash(selection_spec, shape, nullptr);
  const int64_t last_q = grid ? cuda::index::plan_grid(spec, shape, nullptr).last_q : build.last_q;
  const cuda::index::EstimateExtents extents = cuda::index::estimate_extents(operands, last_q);
  StageScratch scratch;
  cuda::ScratchLayout estimate_layout;
  const cuda::index::EstimateRegions regions =
      cuda::index::add_estimate_regions(estimate_layout, extents, grid);
  const cuda::index::EstimateScratch estimate = cuda::index::estimate_scratch(
      scratch.add<std::byte>(static_cast<int64_t>(estimate_layout.bytes())), regions);
  // A selection of `budget` lines (`forced` always kept) from each slot's `scores`.
  const auto selection = [&](const double* scores, int64_t budget, int64_t forced) {
    const int64_t capacity = std::min(budget, extents.scores);
    return cuda::index::LineSelection{scores,
                                      extents.scores,
                                      budget,
                                      forced,
                                      scratch.add<int32_t>(extents.slots * capacity),
                                      capacity,
                                      scratch.add<int32_t>(extents.slots)};
  };
  const cuda::index::LineSelection vertical_selection =
      selection(estimate.column_sums, build.vertical, build.sink);
  const cuda::index::LineSelection slash_selection =
      selection(estimate.diagonal_sums, build.slash, build.local);
  const auto nothing = [] {};
  estimate_milliseconds = median_milliseconds(
      stream, nothing, [&] { cuda::index::launch_estimate(operands, extents, estimate, stream); });
  if (grid) return;
  select_milliseconds = median_milliseconds(stream, nothing, [&] {
    cuda::index::launch_select_lines(vertical_selection, slash_selection, extents.slots, stream);
  });
}

// Index build times of one spec and shape, the last build left in `plan`: with the memory pool
// releasing its memory after every build (fresh) and keeping it (kept), and the host's time to
// queue the kept build.
struct BuildTimes {
  double fresh_milliseconds = 0.0;
  double kept_milliseconds = 0.0;
  double host_milliseconds = 0.0;
};

BuildTimes time_builds(const mmsparse::PatternSpec& spec, const mmsparse::PlanShape& shape,
                       const cuda::EstimateOperands& operands, const DeviceCopy& chosen,
                       cudaMemPool_t pool, cudaStream_t stream, cuda::DevicePlan& plan) {
  const bool grid = spec.name == kGrid;
  BuildTimes times;
  const auto time_build = [&] {
    return median_milliseconds(
        stream, [&] { plan.release(stream); },
        [&] {
          const auto host_start = std::chrono::steady_clock::now();
          if (grid) {
            plan = cuda::build_grid_plan_on_device(
                spec, shape, nullptr, operands, stream,
                static_cast<mmsparse::detail::GridLines*>(chosen.data));
          } else if (spec.name == kVec) {
            plan = cuda::build_vec_plan_on_device(spec, shape, operands, stream);
          } else {
            plan = cuda::build_dynamic_plan_on_device(spec, shape, nullptr, operands, stream);
          }
          times.host_milliseconds = std::chrono::duration<double, std::milli>(
                                        std::chrono::steady_clock::now() - host_start)
                                        .count();
        });
  };
  uint64_t release_threshold = 0;
  check(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &release_threshold),
        "cudaMemPoolSetAttribute");
  times.fresh_milliseconds = time_build();
  release_threshold = std::numeric_limits<uint64_t>::max();
  check(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &release_threshold),
        "cudaMemPoolSetAttribute");
  times.kept_milliseconds = time_build();
  return times;
}

// The vec selection's phases (VecBuildTimes), each the median over the repeats after the warm-ups,
// on the memory pool as the caller left it, and the score pass that ran (MMSPARSE_VEC_SCORE).
void print_vec_phases(const mmsparse::PatternSpec& spec, const mmsparse::PlanShape& shape,
                      const cuda::EstimateOperands& operands, cudaStream_t stream,
                      const char* pool_name) {
  std::vector<cuda::VecBuildTimes> samples;
  for (int r = 0; r < kWarmups + kRepeats; ++r) {
    cuda::VecBuildTimes times;
    cuda::DevicePlan plan = cuda::build_vec_plan_on_device(spec, shape, operands, stream, &times);
    plan.release(stream);
    check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    if (r >= kWarmups) samples.push_back(times);
  }
  const auto phase = [&](float cuda::VecBuildTimes::*field) {
    std::vector<float> values;
    for (const cuda::VecBuildTimes& sample : samples) values.push_back(sample.*field);
    return median(values);
  };
  std::printf(
      "    phases (%s pool) [%s score pass]: scratch %.3f  pool %.3f  score %.3f  count %.3f  "
      "offsets %.3f  host %.3f  records %.3f  write %.3f  schedule %.3f  = %.3f ms\n",
      pool_name, cuda::vec_score_pass_name(samples.front().score_pass), phase(&cuda::VecBuildTimes::scratch), phase(&cuda::VecBuildTimes::pool),
      phase(&cuda::VecBuildTimes::score), phase(&cuda::VecBuildTimes::count),
      phase(&cuda::VecBuildTimes::offsets), phase(&cuda::VecBuildTimes::host),
      phase(&cuda::VecBuildTimes::records), phase(&cuda::VecBuildTimes::write),
      phase(&cuda::VecBuildTimes::schedule), phase(&cuda::VecBuildTimes::total));
}

// The strides the grid build chose per head (* marks the workload's grid heads) and the plan
// buffer's size against the columns it really holds.
void print_grid_strides(const mmsparse::Workload& workload, int64_t q_heads,
                        const DeviceCopy& chosen, const cuda::DevicePlan& plan,
                        const PlanReads& reads) {
  std::vector<mmsparse::detail::GridLines> lines(static_cast<std::size_t>(q_heads));
  check(cudaMemcpy(lines.data(), chosen.data, chosen.bytes, cudaMemcpyDeviceToHost),
        "cudaMemcpy strides");
  std::string strides;
  for (int64_t head = 0; head < q_heads; ++head) {
    const bool grid_head = workload.behaviour(head) == mmsparse::HeadBehaviour::kGrid;
    strides += (head > 0 ? " " : "") + std::to_string(lines[head].stride) + (grid_head ? "*" : "");
  }
  std::printf(
      "    strides: %s\n    plan buffer %.1f MB (column capacity over the candidate "
      "strides %.1f MB), real columns %.1f MB\n",
      strides.c_str(), static_cast<double>(plan.layout().bytes) / kMegabyte,
      static_cast<double>(plan.num_columns() * sizeof(int32_t)) / kMegabyte,
      static_cast<double>(reads.columns * sizeof(int32_t)) / kMegabyte);
}

// The device, the workload (q [1, length, q_heads, head_dim], k and v with kv_heads) and the
// table's header.
void print_header(const mmsparse::Workload& workload, int64_t length, double generate_seconds,
                  const mmsparse::Workload::Tensors& tensors) {
  const int64_t q_heads = tensors.q.shape()[2];
  const int64_t kv_heads = tensors.k.shape()[2];
  const int64_t head_dim = tensors.q.shape()[3];
  cudaDeviceProp properties{};
  check(cudaGetDeviceProperties(&properties, 0), "cudaGetDeviceProperties");
  std::printf(
      "mmsparse_index_bench on %s: SYNTHETIC %s at %lld tokens (generated in %.1f s), bf16, %lld q "
      "heads / %lld kv heads, d%lld; median of %d after %d warm-up(s)\n",
      properties.name, workload.spec().preset.c_str(), static_cast<long long>(length),
      generate_seconds, static_cast<long long>(q_heads), static_cast<long long>(kv_heads),
      static_cast<long long>(head_dim), kRepeats, kWarmups);
  std::printf("%-40s %4s | %9s %9s %9s %9s %7s | %9s | %6s | %s\n", "spec", "rows", "index ms",
              "kept pool", "estimate", "top-k", "host ms", "attn ms", "index%", "read density");
}

// The command line: the length, the patterns to run (empty: all) and the workload's heads and seed.
struct BenchOptions {
  int64_t length = kDefaultLength;
  std::string only;  // comma-separated pattern names
  int64_t q_heads = 0;
  int64_t kv_heads = 0;
  uint64_t seed = 0;

  bool runs(const std::string& name) const {
    return only.empty() || ("," + only + ",").find("," + name + ",") != std::string::npos;
  }
};

// The vec selection's phases with the kept pool, then with the pool releasing its memory.
void print_vec_phase_lines(const mmsparse::PatternSpec& spec, const mmsparse::PlanShape& shape,
                           const cuda::EstimateOperands& operands, cudaMemPool_t pool,
                           cudaStream_t stream) {
  uint64_t release_threshold = std::numeric_limits<uint64_t>::max();
  check(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &release_threshold),
        "cudaMemPoolSetAttribute");
  print_vec_phases(spec, shape, operands, stream, "kept");
  release_threshold = 0;
  check(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &release_threshold),
        "cudaMemPoolSetAttribute");
  print_vec_phases(spec, shape, operands, stream, "fresh");
}

void run(const BenchOptions& options) {
  const int64_t length = options.length;
  mmsparse::WorkloadSpec workload_spec;
  workload_spec.seq_len = length;
  workload_spec.q_heads = options.q_heads;
  workload_spec.kv_heads = options.kv_heads;
  workload_spec.seed = options.seed;
  const auto generate_start = std::chrono::steady_clock::now();
  const mmsparse::Workload workload = mmsparse::Workload::create(workload_spec);
  const mmsparse::Workload::Tensors tensors = workload.materialize(DType::kBFloat16);
  const double generate_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - generate_start).count();
  const int64_t q_heads = tensors.q.shape()[2];
  const DeviceCopy q(tensors.q);
  const DeviceCopy k(tensors.k);
  const DeviceCopy v(tensors.v);
  const DeviceCopy out(tensors.q.nbytes());
  const DeviceCopy lse(static_cast<std::size_t>(q_heads * length) * sizeof(float));
  const DeviceCopy flush(kFlushBytes);
  cudaStream_t stream;
  check(cudaStreamCreate(&stream), "cudaStreamCreate");

  // Device views of the workload's tensors; the engine's own argument builder reads them.
  const mmsparse::Device gpu{mmsparse::DeviceType::kCUDA, 0};
  const auto on_device = [&](mmsparse::TensorView view, void* data) {
    view.data = data;
    view.device = gpu;
    return view;
  };
  const mmsparse::TensorView q_view = on_device(tensors.q.view(), q.data);
  const mmsparse::TensorView k_view = on_device(tensors.k.view(), k.data);
  const mmsparse::TensorView v_view = on_device(tensors.v.view(), v.data);
  const mmsparse::TensorView out_view = on_device(tensors.q.view(), out.data);
  const mmsparse::TensorView lse_view =
      mmsparse::TensorView::contiguous(lse.data, DType::kFloat32, {1, q_heads, length}, gpu);
  cuda::AttentionArgs args =
      cuda::make_attention_args(mmsparse::describe_attention(q_view, k_view, v_view, {}), q_view,
                                k_view, v_view, out_view, lse_view, stream);

  print_header(workload, length, generate_seconds, tensors);
  const double causal_pairs =
      static_cast<double>(q_heads) * static_cast<double>(length) * (length + 1) / 2.0;
  // mmsparse's own pool (device_pool.h), from which plans and scratch are allocated.
  cudaMemPool_t pool = cuda::memory_pool(0);
  for (const char* text : kSpecs) {
    const mmsparse::PatternSpec spec =
        mmsparse::resolve_pattern(mmsparse::PatternSpec::parse(text));
    if (!options.runs(spec.name)) continue;
    const bool grid = spec.name == kGrid;
    const bool vec = spec.name == kVec;
    const DeviceCopy chosen(static_cast<std::size_t>(q_heads) *
                            sizeof(mmsparse::detail::GridLines));
    for (const int64_t tile_rows : kTileRowChoices) {
      // vec builds blocks taller than the plan's tiles on the host only (vec_device.h).
      if (vec && spec.param("pooling", 0) > tile_rows) continue;
      const mmsparse::PlanShape shape{1, q_heads, length, length, tile_rows};
      const cuda::EstimateOperands operands =
          cuda::make_estimate_operands(spec.name, {q_view, k_view, args.scale}, shape);
      cuda::DevicePlan plan;
      const BuildTimes build = time_builds(spec, shape, operands, chosen, pool, stream, plan);
      const double fresh_milliseconds = build.fresh_milliseconds;
      const double kept_milliseconds = build.kept_milliseconds;
      const double host_milliseconds = build.host_milliseconds;

      double estimate_milliseconds = 0.0;
      double select_milliseconds = 0.0;
      if (!vec) {
        time_stages(spec, shape, operands, stream, estimate_milliseconds, select_milliseconds);
      }

      const double attention_milliseconds = median_milliseconds(
          stream,
          [&] { check(cudaMemsetAsync(flush.data, 0, flush.bytes, stream), "cudaMemsetAsync"); },
          [&] { cuda::attention_planned(plan, args); });
      const PlanReads reads = read_pairs(plan);
      const std::string none = std::string(8, ' ') + "-";
      const std::string stage_columns =
          (vec ? none : format_milliseconds(estimate_milliseconds)) + " " +
          (grid || vec ? none : format_milliseconds(select_milliseconds));
      std::printf("%-40s %4lld | %9.3f %9.3f %s %7.3f | %9.3f | %5.1f%% | %.2f%%\n", text,
                  static_cast<long long>(tile_rows), fresh_milliseconds, kept_milliseconds,
                  stage_columns.c_str(), host_milliseconds, attention_milliseconds,
                  100.0 * kept_milliseconds / (kept_milliseconds + attention_milliseconds),
                  100.0 * reads.pairs / causal_pairs);
      if (grid) print_grid_strides(workload, q_heads, chosen, plan, reads);
      if (vec) print_vec_phase_lines(spec, shape, operands, pool, stream);
      std::fflush(stdout);
    }
  }
  check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  cudaStreamDestroy(stream);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    BenchOptions options;
    if (argc > 1) options.length = std::atoll(argv[1]);
    if (argc > 2) options.only = argv[2];
    if (argc > 3) options.q_heads = std::atoll(argv[3]);
    if (argc > 4) options.kv_heads = std::atoll(argv[4]);
    if (argc > 5) options.seed = std::strtoull(argv[5], nullptr, 10);
    run(options);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "mmsparse_index_bench failed: %s\n", error.what());
    return 1;
  }
  return 0;
}
