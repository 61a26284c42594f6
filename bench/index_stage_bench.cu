// Times one grid spec's GPU index build stage by stage, on a SYNTHETIC preset's layout and its
// device q and k (bf16): the host's planning (host clock), the plan buffer's allocation, each
// stage of index::build_grid (events recorded between stages on the build's stream, through
// index::StageMarks), and the whole build_grid_plan_on_device as `mmsparse bench` times it (less
// the host's wait). Device stages are stream time, median of repeats after a warm-up, with
// mmsparse's memory pool (device_pool.h) set to return freed memory to the system at every
// synchronisation (so each build maps its buffers anew) and set to keep it (its default, what the
// CLI bench measures). Then
// the plan's capacities against the records the real tiles hold.
//
//   mmsparse_index_stage_bench <preset> <seq_len> <q_heads> <kv_heads> <grid spec>
//   e.g. mmsparse_index_stage_bench mixed-interleaved 131072 4 1 \
//          'grid:boundary=3,item_sinks=1,last_q=64,local=0,sink=30,slash=1,stride=448,vline=0'

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
#include <map>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "bench_support.h"
#include "cuda/common/device_pool.h"
#include "cuda/runtime/engine.h"
#include "cuda/runtime/plan_view.cuh"
#include "methods/estimate/index_builders.h"
#include "methods/estimate/index_kernels.h"
#include "mmsparse/attention.h"
#include "mmsparse/patterns.h"
#include "mmsparse/tools/workload.h"

namespace {

namespace cuda = mmsparse::cuda;
using mmsparse::bench::check;
using mmsparse::bench::DeviceCopy;
using mmsparse::bench::median;
using mmsparse::DType;

constexpr int kWarmups = 1;
constexpr int kRepeats = 5;
constexpr double kMegabyte = 1e6;
constexpr int kArguments = 6;

// An event per mark on the build's stream; the stages' milliseconds once the stream is done.
class EventMarks final : public cuda::index::StageMarks {
 public:
  explicit EventMarks(cudaStream_t stream) { stages_.push_back({"start", record(stream)}); }
  ~EventMarks() override {
    for (const Stage& stage : stages_) cudaEventDestroy(stage.event);
  }
  EventMarks(const EventMarks&) = delete;
  EventMarks& operator=(const EventMarks&) = delete;
  void mark(const char* stage, cudaStream_t stream) override {
    stages_.push_back({stage, record(stream)});
  }
  // Each stage's name and milliseconds since the mark before it (after the stream is done).
  std::vector<std::pair<std::string, double>> stage_milliseconds() const {
    std::vector<std::pair<std::string, double>> result;
    for (std::size_t i = 1; i < stages_.size(); ++i) {
      float milliseconds = 0.0f;
      check(cudaEventElapsedTime(&milliseconds, stages_[i - 1].event, stages_[i].event),
            "cudaEventElapsedTime");
      result.emplace_back(stages_[i].name, milliseconds);
    }
    return result;
  }

 private:
  struct Stage {
    std::string name;
    cudaEvent_t event;
  };
  static cudaEvent_t record(cudaStream_t stream) {
    cudaEvent_t event = nullptr;
    check(cudaEventCreate(&event), "cudaEventCreate");
    check(cudaEventRecord(event, stream), "cudaEventRecord");
    return event;
  }
  std::vector<Stage> stages_;
};

// The plan buffer of `build` as build_grid_plan_on_device lays it out.
cuda::DevicePlanLayout grid_plan_layout(const cuda::index::GridBuild& build) {
  const int64_t tiles = build.tiles();
  return cuda::plan_layout({build.shape.head_slots(), build.runs(), tiles, tiles > 0 ? 1 : 0,
                            build.span_capacity, build.column_capacity});
}

cuda::index::PlanSections plan_sections(void* buffer, const cuda::DevicePlanLayout& layout) {
  auto* base = static_cast<std::byte*>(buffer);
  cuda::index::PlanSections sections;
  sections.head_run_offsets = reinterpret_cast<int64_t*>(base + layout.head_run_offsets);
  sections.runs = reinterpret_cast<cuda::RunRecord*>(base + layout.runs);
  sections.tiles = reinterpret_cast<cuda::TileRecord*>(base + layout.tiles);
  sections.schedule = reinterpret_cast<int32_t*>(base + layout.schedule);
  sections.masks = reinterpret_cast<cuda::MaskRecord*>(base + layout.masks);
  sections.spans = reinterpret_cast<cuda::SpanRecord*>(base + layout.spans);
  sections.columns = reinterpret_cast<int32_t*>(base + layout.columns);
  return sections;
}

void set_pool_release(cudaMemPool_t pool, uint64_t threshold) {
  check(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold),
        "cudaMemPoolSetAttribute");
}

// Per stage: the median milliseconds over the repeats (stages in build order).
using StageTable = std::vector<std::pair<std::string, double>>;

// `run` (which queues work on `stream` and marks stages in the marks it gets) repeated, each
// repeat synchronised (so a pool with release threshold 0 gives its memory back in between).
StageTable time_stages(cudaStream_t stream,
                       const std::function<void(cuda::index::StageMarks&)>& run) {
  std::map<std::string, std::vector<double>> samples;
  std::vector<std::string> order;
  for (int r = 0; r < kWarmups + kRepeats; ++r) {
    EventMarks marks(stream);
    run(marks);
    check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    if (r < kWarmups) continue;
    for (const auto& [stage, milliseconds] : marks.stage_milliseconds()) {
      if (samples[stage].empty()) order.push_back(stage);
      samples[stage].push_back(milliseconds);
    }
  }
  StageTable table;
  for (const std::string& stage : order) table.emplace_back(stage, median(samples[stage]));
  return table;
}

// The records the real tiles of `plan` hold (the rest of the capacity is unused).
void print_capacities(const cuda::index::GridBuild& build, const cuda::DevicePlan& plan) {
  const cuda::DevicePlanLayout& layout = plan.layout();
  std::vector<cuda::TileRecord> tiles(static_cast<std::size_t>(plan.num_tiles()));
  check(cudaMemcpy(tiles.data(), static_cast<const std::byte*>(plan.data()) + layout.tiles,
                   tiles.size() * sizeof(cuda::TileRecord), cudaMemcpyDeviceToHost),
        "cudaMemcpy tiles");
  int64_t spans = 0, columns = 0, real_tiles = 0;
  for (const cuda::TileRecord& tile : tiles) {
    spans += tile.span_end - tile.span_begin;
    columns += tile.column_end - tile.column_begin;
    real_tiles += tile.end > tile.begin ? 1 : 0;
  }
  std::printf(
      "capacities: plan buffer %.1f MB; tiles %lld (real %lld), spans %lld (real %lld), "
      "columns %lld (real %lld); groups %zu, (group, space) pairs %zu, item sinks %zu\n",
      static_cast<double>(layout.bytes) / kMegabyte, static_cast<long long>(build.tiles()),
      static_cast<long long>(real_tiles), static_cast<long long>(build.span_capacity),
      static_cast<long long>(spans), static_cast<long long>(build.column_capacity),
      static_cast<long long>(columns), build.groups.size(), build.selections.size(),
      build.sink_keys.size());
}

void print_table(const char* title, const StageTable& fresh, const StageTable& kept) {
  std::printf("%-34s %12s %12s\n", title, "fresh pool", "kept pool");
  double fresh_total = 0.0, kept_total = 0.0;
  for (std::size_t i = 0; i < fresh.size(); ++i) {
    const double kept_ms = i < kept.size() ? kept[i].second : 0.0;
    std::printf("  %-32s %12.3f %12.3f\n", fresh[i].first.c_str(), fresh[i].second, kept_ms);
    fresh_total += fresh[i].second;
    kept_total += kept_ms;
  }
  std::printf("  %-32s %12.3f %12.3f\n", "sum", fresh_total, kept_total);
}

void run(const mmsparse::WorkloadSpec& workload_spec, const std::string& spec_text) {
  const mmsparse::Workload workload = mmsparse::Workload::create(workload_spec);
  const mmsparse::ModalityLayout& layout = workload.layout();
  const mmsparse::PatternSpec spec =
      mmsparse::resolve_pattern(mmsparse::PatternSpec::parse(spec_text), &layout);
  if (spec.name != "grid") {
    throw std::invalid_argument("spec: a grid spec (the stages are build_grid's), got " +
                                spec.to_string());
  }
  const mmsparse::Workload::Tensors tensors = workload.materialize(DType::kBFloat16);
  const DeviceCopy q(tensors.q);
  const DeviceCopy k(tensors.k);
  const mmsparse::Device gpu{mmsparse::DeviceType::kCUDA, 0};
  mmsparse::TensorView q_view = tensors.q.view();
  mmsparse::TensorView k_view = tensors.k.view();
  q_view.data = q.data;
  q_view.device = gpu;
  k_view.data = k.data;
  k_view.device = gpu;
  const int64_t length = workload.seq_len();
  const int64_t heads = tensors.q.shape()[2];
  const mmsparse::PlanShape shape{1, heads, length, length,
                                  mmsparse::preferred_tile_rows(gpu, tensors.q.shape()[3])};
  const cuda::EstimateOperands operands =
      cuda::make_estimate_operands(spec.name, {q_view, k_view, 0.0f}, shape);
  cudaStream_t stream;
  check(cudaStreamCreate(&stream), "cudaStreamCreate");
  // mmsparse's own pool (device_pool.h), from which plans and scratch are allocated.
  cudaMemPool_t pool = cuda::memory_pool(0);

  std::vector<double> plan_seconds;
  cuda::index::GridBuild build;
  for (int r = 0; r < kWarmups + kRepeats; ++r) {
    const auto start = std::chrono::steady_clock::now();
    build = cuda::index::plan_grid(spec, shape, &layout);
    plan_seconds.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
            .count());
  }
  const cuda::DevicePlanLayout plan_layout = grid_plan_layout(build);
  std::printf(
      "mmsparse_index_stage_bench: SYNTHETIC %s, %lld tokens, %lld q heads / %lld kv heads, "
      "tile rows %lld, bf16; %s\nhost plan_grid: %.3f ms (median; the config build plans a grid "
      "section twice: device_builder_for, then the build)\n",
      workload.spec().preset.c_str(), static_cast<long long>(length), static_cast<long long>(heads),
      static_cast<long long>(tensors.k.shape()[2]), static_cast<long long>(shape.tile_rows),
      spec.to_string().c_str(), median(plan_seconds));

  cuda::DevicePlan plan;
  const auto staged_build = [&](cuda::index::StageMarks& marks) {
    plan.release(stream);
    plan = cuda::DevicePlan::for_builder(shape, plan_layout, build.tiles(), build.column_capacity,
                                         true, plan_layout.spans, stream);
    marks.mark("plan buffer (alloc + header)", stream);
    cuda::index::build_grid(build, operands, plan_sections(plan.builder_data(), plan_layout),
                            nullptr, stream, &marks);
  };
  const auto whole_build = [&](cuda::index::StageMarks& marks) {
    plan.release(stream);
    plan = cuda::build_grid_plan_on_device(spec, shape, &layout, operands, stream);
    marks.mark("build_grid_plan_on_device", stream);
  };
  set_pool_release(pool, 0);
  const StageTable fresh = time_stages(stream, staged_build);
  const StageTable fresh_whole = time_stages(stream, whole_build);
  set_pool_release(pool, std::numeric_limits<uint64_t>::max());
  const StageTable kept = time_stages(stream, staged_build);
  const StageTable kept_whole = time_stages(stream, whole_build);
  set_pool_release(pool, 0);
  print_table("stage (stream ms, median)", fresh, kept);
  print_table("whole build (stream ms, median)", fresh_whole, kept_whole);
  print_capacities(build, plan);
  plan.release(stream);
  check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  cudaStreamDestroy(stream);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != kArguments) {
    std::fprintf(
        stderr,
        "usage: %s <preset> <seq_len> <q_heads> <kv_heads> <grid spec>\n"
        "  e.g. %s mixed-interleaved 131072 4 1 'grid:boundary=3,item_sinks=1,stride=448'\n",
        argv[0], argv[0]);
    return 2;
  }
  try {
    mmsparse::WorkloadSpec workload_spec;
    workload_spec.preset = argv[1];
    workload_spec.seq_len = std::atoll(argv[2]);
    workload_spec.q_heads = std::atoll(argv[3]);
    workload_spec.kv_heads = std::atoll(argv[4]);
    run(workload_spec, argv[5]);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "mmsparse_index_stage_bench failed: %s\n", error.what());
    return 1;
  }
  return 0;
}
