#pragma once
// Runs prepared plans on the CPU reference backend or the CUDA engine for the CLI, timing them the
// way each device needs: one host-clock run on the CPU, a warmed-up median of device-event runs on
// the GPU. Results always come back to host tensors for the metrics.

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "mmsparse/attention.h"
#include "mmsparse/device.h"
#include "mmsparse/patterns.h"
#include "mmsparse/tensor.h"

namespace mmsparse::cli {

// --warmup and --repeats. The GPU defaults apply on the GPU; the CPU reference runs each
// measurement once unless the user gives a count, because one CPU run can take minutes.
struct TimingFlags {
  static constexpr int kCpuDefaultWarmup = 0;
  static constexpr int kCpuDefaultRepeats = 1;
  int warmup = 2;
  int repeats = 5;
  bool warmup_given = false;  // set by add_timing_options' parse callbacks
  bool repeats_given = false;
  // The counts a measurement on this device uses.
  TimingFlags for_device(bool gpu) const {
    if (gpu) return *this;
    TimingFlags cpu = *this;
    if (!warmup_given) cpu.warmup = kCpuDefaultWarmup;
    if (!repeats_given) cpu.repeats = kCpuDefaultRepeats;
    return cpu;
  }
};

class Executor {
 public:
  Executor(bool gpu, int threads, TimingFlags timing);

  // q [batch, q_len, q_heads, d], k/v [batch, kv_len, kv_heads, d] host tensors; copied to the GPU
  // when running there.
  void set_inputs(const TensorView& q, const TensorView& k, const TensorView& v);

  // Builds the plan with the tile height this device runs fastest (preferred_tile_rows), falling
  // back to kDefaultTileRows for plans with token masks; shape.tile_rows is ignored. With
  // head_seconds, each head slot's host build time (of the plan returned) goes there.
  Plan build(const std::vector<PatternSpec>& specs, PlanShape shape, const ModalityLayout* layout,
             const PatternInputs* inputs, int64_t head_dim,
             std::vector<double>* head_seconds = nullptr) const;
  PreparedPlan prepare(Plan plan) const;
  // One spec for every head, prepared the way the device builds it fastest: on a GPU through
  // prepare_pattern, where kernels build static patterns and estimate vertical-slash (boundary
  // none/K/Q) and grid (none/K) from the device tensors with no host plan; other patterns are
  // built on the host from the host tensors and uploaded. Synchronised, so that a caller's host
  // clock covers the build.
  // Returns the plan, whether kernels built it, and whether it was estimated on the GPU (then its
  // host copy, PreparedPlan::plan(), is a download of the device records).
  struct PatternPlan {
    PreparedPlan prepared;
    bool built_on_device = false;
    bool estimated_on_device = false;
  };
  PatternPlan prepare_pattern_plan(const PatternSpec& spec, PlanShape shape,
                                   const ModalityLayout* layout, const PatternInputs& host_inputs,
                                   int64_t head_dim) const;
  // A static pattern's plan (one spec for every head; no inputs read), built once per spec, shape
  // and layout and then reused: nothing else changes it, so a serving loop builds it once per
  // shape, not per layer or call, and neither does the CLI per timed run or layer. On a GPU
  // kernels build it where the pattern has a device builder, else the host does and uploads it.
  struct StaticPlan {
    std::shared_ptr<const PreparedPlan> prepared;
    double build_seconds = 0.0;  // the build that made it: host clock, synchronised
    bool built_on_device = false;
    bool reused = false;  // an earlier call built it
  };
  StaticPlan static_plan(const PatternSpec& spec, PlanShape shape, const ModalityLayout* layout,
                         int64_t head_dim);
  // The pairs one head slot of `shape` computes under static `spec`, counted on a host plan of
  // that one slot, once per spec, shape and layout: every layer of a run reuses it (at 300K tokens
  // one BlindSight slot's host plan takes over a second).
  int64_t static_slot_pair_count(const PatternSpec& spec, const PlanShape& one_slot,
                                 const ModalityLayout* layout);
  // A spec per head (a config layer) on a GPU, through prepare_pattern's per-head form: heads the
  // GPU builds from the device tensors, the others (grid, vertical-slash with boundary Q/2D) on
  // the host from `host_inputs`, concatenated into one plan on the device. Synchronised; `times`
  // says which heads were built where and how long each builder took (GPU events, host clock).
  struct ConfigPlan {
    PreparedPlan prepared;
    PlanBuildTimes times;
  };
  ConfigPlan prepare_config_plan(const std::vector<PatternSpec>& specs, PlanShape shape,
                                 const ModalityLayout* layout, const PatternInputs& host_inputs,
                                 int64_t head_dim) const;
  // A GPU plan build timed like attention: warm-up builds first (lazy module loading, the memory
  // pool's first mapping: costs a serving loop pays once, not per layer), then the median host
  // clock of the timed builds, each ending in its synchronisation. `build` keeps what it built
  // last. Returns seconds.
  double median_build_seconds(const std::function<void()>& build) const;
  // Attention over the prepared plan; out/lse are host tensors of the right shape. Returns
  // seconds (the median over repeats on the GPU).
  double run(const PreparedPlan& plan, const TensorView& out, const TensorView& lse);

  // AttentionOptions::on_progress for the runs that follow (the CPU reference backend reports).
  void set_attention_progress(std::function<void(double)> on_progress) {
    options_.on_progress = std::move(on_progress);
  }

  bool gpu() const { return gpu_; }
  Device device() const { return device_; }
  // The inputs of set_inputs where the runs read them: device views on the GPU, else the host ones.
  const TensorView& run_q() const { return q_; }
  const TensorView& run_k() const { return k_; }
  std::string device_label() const;

 private:
  bool gpu_;
  Device device_;
  AttentionOptions options_;
  TimingFlags timing_;
  TensorView q_, k_, v_;
  std::optional<DeviceTensor> device_q_, device_k_, device_v_;
  std::map<std::string, StaticPlan> static_plans_;     // by spec, shape and layout
  std::map<std::string, int64_t> static_slot_pairs_;  // likewise
};

}  // namespace mmsparse::cli
