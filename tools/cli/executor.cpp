#include "executor.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "cli_common.h"
#include "mmsparse/build_info.h"
#include "mmsparse/status.h"

namespace mmsparse::cli {

namespace {
constexpr double kMillisecondsPerSecond = 1000.0;

// The upper median of at least one value.
double median(std::vector<double>& values) {
  std::nth_element(values.begin(), values.begin() + values.size() / 2, values.end());
  return values[values.size() / 2];
}
}  // namespace

Executor::Executor(bool gpu, int threads, TimingFlags timing)
    : gpu_(gpu),
      device_(gpu ? Device{DeviceType::kCUDA, 0} : Device{}),
      timing_(timing.for_device(gpu)) {
  options_.num_threads = threads;
}

void Executor::set_inputs(const TensorView& q, const TensorView& k, const TensorView& v) {
  if (!gpu_) {
    q_ = q;
    k_ = k;
    v_ = v;
    return;
  }
  device_q_.emplace(DeviceTensor::from_host(q, device_));
  device_k_.emplace(DeviceTensor::from_host(k, device_));
  device_v_.emplace(DeviceTensor::from_host(v, device_));
  q_ = device_q_->view();
  k_ = device_k_->view();
  v_ = device_v_->view();
}

Plan Executor::build(const std::vector<PatternSpec>& specs, PlanShape shape,
                     const ModalityLayout* layout, const PatternInputs* inputs,
                     int64_t head_dim, std::vector<double>* head_seconds) const {
  std::vector<double> discarded;
  std::vector<double>& timings = head_seconds != nullptr ? *head_seconds : discarded;
  shape.tile_rows = preferred_tile_rows(device_, head_dim);
  Plan plan = build_plan_timed(specs, shape, layout, inputs, timings);
  const bool token_masks = std::any_of(plan.masks.begin(), plan.masks.end(),
                                       [](const MaskPolicy& mask) { return mask.needs_token_arrays(); });
  if (!token_masks || shape.tile_rows == kDefaultTileRows) return plan;
  shape.tile_rows = kDefaultTileRows;
  return build_plan_timed(specs, shape, layout, inputs, timings);
}

PreparedPlan Executor::prepare(Plan plan) const {
  PreparedPlan prepared = prepare_plan(std::move(plan), device_);
  if (gpu_) synchronize(device_);  // so that a caller's host clock covers the upload
  return prepared;
}

Executor::PatternPlan Executor::prepare_pattern_plan(const PatternSpec& spec, PlanShape shape,
                                                     const ModalityLayout* layout,
                                                     const PatternInputs& host_inputs,
                                                     int64_t head_dim) const {
  shape.tile_rows = preferred_tile_rows(device_, head_dim);
  PatternPlan result;
  const PatternInputs device_inputs{q_, k_, host_inputs.scale};
  try {
    result.prepared = prepare_pattern(spec, shape, layout, device_, nullptr, &device_inputs);
    result.built_on_device = true;
    result.estimated_on_device = any_dynamic({spec});
  } catch (const Error& error) {
    // A dynamic pattern the GPU does not estimate yet (prepare_pattern says so): host build.
    if (error.code() != ErrorCode::kUnsupported) throw;
    result.prepared = prepare_pattern(spec, shape, layout, device_, nullptr, &host_inputs);
  }
  synchronize(device_);
  return result;
}

namespace {

// What a static plan depends on: the spec, the shape and the layout (and the head dim where the
// tile height follows it).
std::string static_plan_key(const PatternSpec& spec, const PlanShape& shape,
                            const ModalityLayout* layout, int64_t head_dim) {
  return spec.to_string() + "|" + std::to_string(shape.batch) + "x" + std::to_string(shape.heads) +
         "x" + std::to_string(shape.q_len) + "x" + std::to_string(shape.kv_len) + "|t" +
         std::to_string(shape.tile_rows) + "|d" + std::to_string(head_dim) + "|" +
         (layout != nullptr ? layout->to_json() : std::string());
}

}  // namespace

int64_t Executor::static_slot_pair_count(const PatternSpec& spec, const PlanShape& one_slot,
                                         const ModalityLayout* layout) {
  const std::string key = static_plan_key(spec, one_slot, layout, 0);
  if (const auto found = static_slot_pairs_.find(key); found != static_slot_pairs_.end()) {
    return found->second;
  }
  const int64_t pairs = count_plan_pairs(build_plan(spec, one_slot, layout), 0);
  static_slot_pairs_.emplace(key, pairs);
  return pairs;
}

Executor::StaticPlan Executor::static_plan(const PatternSpec& spec, PlanShape shape,
                                           const ModalityLayout* layout, int64_t head_dim) {
  const std::string key = static_plan_key(spec, shape, layout, head_dim);
  if (const auto found = static_plans_.find(key); found != static_plans_.end()) {
    StaticPlan reused = found->second;
    reused.reused = true;
    return reused;
  }
  StaticPlan built;
  const auto start = std::chrono::steady_clock::now();
  if (gpu_) {
    const PatternInputs no_inputs{};
    PatternPlan plan = prepare_pattern_plan(spec, shape, layout, no_inputs, head_dim);
    built.built_on_device = plan.built_on_device;
    built.prepared = std::make_shared<const PreparedPlan>(std::move(plan.prepared));
  } else {
    built.prepared = std::make_shared<const PreparedPlan>(
        prepare(build({spec}, shape, layout, nullptr, head_dim)));
  }
  built.build_seconds = seconds_since(start);
  static_plans_.emplace(key, built);
  return built;
}

Executor::ConfigPlan Executor::prepare_config_plan(const std::vector<PatternSpec>& specs,
                                                   PlanShape shape, const ModalityLayout* layout,
                                                   const PatternInputs& host_inputs,
                                                   int64_t head_dim) const {
  shape.tile_rows = preferred_tile_rows(device_, head_dim);
  const PatternInputs device_inputs{q_, k_, host_inputs.scale};
  ConfigPlan result;
  result.prepared =
      prepare_pattern(specs, shape, layout, device_, nullptr, &device_inputs, &host_inputs);
  result.times = result.prepared.build_times();  // waits for the build
  synchronize(device_);
  return result;
}

double Executor::median_build_seconds(const std::function<void()>& build) const {
  for (int i = 0; i < timing_.warmup; ++i) build();
  std::vector<double> seconds;
  for (int i = 0; i < timing_.repeats; ++i) {
    const auto start = std::chrono::steady_clock::now();
    build();
    seconds.push_back(seconds_since(start));
  }
  return median(seconds);
}

double Executor::run(const PreparedPlan& plan, const TensorView& out, const TensorView& lse) {
  if (!gpu_) {
    for (int i = 0; i < timing_.warmup; ++i) attention_planned(plan, q_, k_, v_, out, lse, options_);
    std::vector<double> seconds;
    for (int i = 0; i < timing_.repeats; ++i) {
      const auto start = std::chrono::steady_clock::now();
      attention_planned(plan, q_, k_, v_, out, lse, options_);
      seconds.push_back(seconds_since(start));
    }
    return median(seconds);
  }
  DeviceTensor device_out(out.dtype, out.shape_vector(), device_);
  DeviceTensor device_lse(lse.dtype, lse.shape_vector(), device_);
  const double milliseconds = median_device_milliseconds(
      [&] {
        attention_planned(plan, q_, k_, v_, device_out.view(), device_lse.view(), options_);
      },
      timing_.warmup, timing_.repeats, device_);
  device_out.copy_to_host(out);
  device_lse.copy_to_host(lse);
  return milliseconds / kMillisecondsPerSecond;
}

std::string Executor::device_label() const {
  if (!gpu_) return "cpu (reference backend)";
  for (const GpuInfo& gpu : visible_gpus()) {
    if (gpu.index == device_.index) return device_name(device_) + " " + gpu.name;
  }
  return device_name(device_);
}

}  // namespace mmsparse::cli
