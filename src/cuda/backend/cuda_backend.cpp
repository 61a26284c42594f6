// The CUDA engine (sm_90a) behind the Backend interface (src/core/backend.h). It registers itself
// at static initialisation, so this object must be linked whole: mmsparse::cuda links the
// mmsparse_cuda library so. Plain C++: the engine's host interfaces carry no CUDA types.

#include <algorithm>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "core/backend.h"
#include "cuda/runtime/config_builder.h"
#include "cuda/runtime/device_memory.h"
#include "cuda/runtime/device_query.h"
#include "cuda/runtime/engine.h"
#include "cuda/runtime/plan_download.h"
#include "cuda/tools/tile_mass.h"
#include "methods/device_builder.h"
#include "methods/estimate/index_builders.h"
#include "mmsparse/status.h"

namespace mmsparse::cuda {
namespace {

// A prepared plan on the GPU.
class CudaPreparedState final : public PreparedState {
 public:
  std::vector<DevicePlan> device_passes;                // the device copy, one entry per pass
  std::shared_ptr<const ConfigBuildTimer> build_timer;  // per-head configs on the device
  // Of a plan built on the device: each pass's mask table (its records clamp what the policies
  // say) and the device, for download_plan; empty for uploads of host plans.
  std::vector<std::vector<MaskPolicy>> pass_masks;
  Device device{};
};

const CudaPreparedState& cuda_state(const PreparedState& state) {
  // The entry points hand a backend only the states it made (the prepared plan's device type).
  return static_cast<const CudaPreparedState&>(state);
}

BuiltPattern built_pattern(std::unique_ptr<CudaPreparedState> state) {
  BuiltPattern built;
  built.state = std::move(state);
  return built;
}

// Dense attention as a plan for the engine: one span per tile, to the diagonal when causal.
Plan dense_plan(const AttentionProblem& problem) {
  const int64_t tile_rows = preferred_tile_rows(problem.device, problem.head_dim);
  PlanBuilder builder({1, problem.q_heads, problem.q_len, problem.kv_len, tile_rows});
  const MaskPolicy mask{.causal = problem.causal};
  for (int64_t head = 0; head < problem.q_heads; ++head) {
    builder.begin_head();
    for (int64_t begin = 0; begin < problem.q_len; begin += tile_rows) {
      const int64_t end = std::min(problem.q_len, begin + tile_rows);
      const int64_t keys_end =
          problem.causal
              ? std::clamp<int64_t>(end - 1 + problem.causal_offset() + 1, 0, problem.kv_len)
              : problem.kv_len;
      builder.begin_tile(begin, end, mask);
      builder.add_span(0, keys_end);
    }
  }
  return builder.finish();
}

// One spec for every head slot, built by its method's device builder (methods/device_builder.h):
// static patterns by kernels, dynamic ones estimated by kernels from device inputs; std::nullopt
// for the host builders.
std::optional<BuiltPattern> build_pattern_on_device(const PatternSpec& resolved,
                                                    const PlanShape& shape,
                                                    const ModalityLayout* layout, Device device,
                                                    void* stream, const PatternInputs* inputs) {
  const bool device_inputs = inputs != nullptr && cuda::inputs_on_device(*inputs);
  const detail::DeviceBuilder* builder =
      detail::device_builder_for(resolved, shape, layout, device_inputs);
  if (builder == nullptr) {
    if (!device_inputs) return std::nullopt;
    throw Error(ErrorCode::kUnsupported,
                "prepare_pattern: " + resolved.to_string() +
                    " is not built on the GPU (vertical-slash and grid heads are, unless a "
                    "Q/2D/item-boundary query group's last rows form more than 16 runs, a grid "
                    "head has item_sinks > 0 without a boundary, or more than 31 media items "
                    "under an item boundary; vec heads whose pooling fits the tile height are); "
                    "pass host inputs to build it on the host");
  }
  std::optional<cuda::EstimateOperands> operands;
  if (builder->estimates()) operands = cuda::make_estimate_operands(resolved.name, *inputs, shape);
  auto state = std::make_unique<CudaPreparedState>();
  state->device_passes.push_back(
      builder->build(resolved, shape, layout, operands ? &*operands : nullptr, stream).plan);
  state->pass_masks.push_back(builder->mask_policies_for_layout(resolved, shape, layout));
  state->device = device;
  return built_pattern(std::move(state));
}

// One spec per head slot: every head built where the config builder builds it (kernels for
// static heads and for dynamic heads with device inputs, the host for the others), concatenated
// on the GPU.
BuiltPattern build_config_on_device(const std::vector<PatternSpec>& resolved,
                                    const PlanShape& shape, const ModalityLayout* layout,
                                    Device device, void* stream, const PatternInputs* inputs,
                                    const PatternInputs* host_inputs) {
  const bool device_inputs = inputs != nullptr && cuda::inputs_on_device(*inputs);
  std::optional<cuda::EstimateOperands> operands;
  const auto estimated =
      std::find_if(resolved.begin(), resolved.end(), [&](const PatternSpec& spec) {
        const detail::DeviceBuilder* builder =
            detail::device_builder_for(spec, shape, layout, device_inputs);
        return builder != nullptr && builder->estimates();
      });
  // Errors in the inputs name the first head's pattern that estimates from them.
  if (estimated != resolved.end()) {
    operands = cuda::make_estimate_operands(estimated->name, *inputs, shape);
  }
  cuda::ConfigInputs config_inputs;
  config_inputs.layout = layout;
  config_inputs.device = operands ? &*operands : nullptr;
  config_inputs.host = device_inputs ? host_inputs : inputs;
  cuda::ConfigBuild build =
      cuda::build_config_plan_on_device(resolved, shape, config_inputs, stream);
  auto state = std::make_unique<CudaPreparedState>();
  state->device_passes.push_back(std::move(build.plan));
  state->build_timer = std::move(build.timer);
  state->pass_masks.push_back(std::move(build.masks));
  state->device = device;
  return built_pattern(std::move(state));
}

class CudaBackend final : public Backend {
 public:
  std::string name() const override { return "cuda-sm90a"; }

  void describe(BuildInfo& info) const override {
    info.cuda_enabled = true;
    info.cuda_version = cuda::toolkit_version();
  }

  std::vector<GpuInfo> visible_gpus() const override { return cuda::list_gpus(); }

  int64_t preferred_tile_rows(int64_t head_dim) const override {
    // The wgmma kernel's two consumer warpgroups; at head_dim 256 it compiles no other.
    const bool wgmma = head_dim == cuda::kWgmmaHeadDim || head_dim == cuda::kWgmmaWideHeadDim;
    return wgmma ? cuda::kMaxTileRows : kDefaultTileRows;
  }

  void attention_dense(const AttentionProblem& problem, const TensorView& q, const TensorView& k,
                       const TensorView& v, const TensorView& out, const TensorView& lse,
                       const AttentionOptions& options) override {
    cuda::attention_planned(dense_plan(problem),
                            cuda::make_attention_args(problem, q, k, v, out, lse, options.stream));
  }

  void attention_planned(const AttentionProblem& problem, const Plan& plan, const TensorView& q,
                         const TensorView& k, const TensorView& v, const TensorView& out,
                         const TensorView& lse, const AttentionOptions& options) override {
    // The upload validates the plan.
    cuda::attention_planned(plan,
                            cuda::make_attention_args(problem, q, k, v, out, lse, options.stream));
  }

  void attention_prepared(const AttentionProblem& problem, const PreparedPlan&,
                          const PreparedState& state, const TensorView& q, const TensorView& k,
                          const TensorView& v, const TensorView& out, const TensorView& lse,
                          const AttentionOptions& options) override {
    cuda::attention_passes(cuda_state(state).device_passes,
                           cuda::make_attention_args(problem, q, k, v, out, lse, options.stream));
  }

  void merge_partials(std::span<const TensorView> outs, std::span<const TensorView> lses,
                      const TensorView& out, const TensorView& lse,
                      const AttentionOptions& options) override {
    const std::vector<cuda::MergePart> parts = cuda::make_merge_parts(outs, lses);
    cuda::merge_partials(cuda::make_merge_args(parts, out, lse, options.stream));
  }

  void tile_mass(const TensorView& q, const TensorView& k, const TensorView& lse,
                 int64_t batch_index, int64_t head, float scale, int64_t tile_rows,
                 int64_t chunk_keys, std::span<const int64_t> tiles, std::span<double> mass,
                 void* stream) override {
    cuda::TileMassArgs args;
    args.device_index = q.device.index;
    args.dtype = q.dtype;
    args.q_len = q.shape[1];
    args.kv_len = k.shape[1];
    args.q_heads = q.shape[2];
    args.kv_heads = k.shape[2];
    args.head_dim = q.shape[3];
    args.scale = scale;
    args.batch_index = batch_index;
    args.head = head;
    args.tile_rows = tile_rows;
    args.chunk_keys = chunk_keys;
    args.q = q.data;
    args.q_strides = {q.strides[0], q.strides[1], q.strides[2], q.strides[3]};
    args.k = k.data;
    args.k_strides = {k.strides[0], k.strides[1], k.strides[2], k.strides[3]};
    args.lse = lse.data_as<const float>();
    args.lse_strides = {lse.strides[0], lse.strides[1], lse.strides[2]};
    args.stream = stream;
    cuda::tile_mass(args, tiles, mass);
  }

  std::unique_ptr<PreparedState> prepare_plan(const Plan& plan, Device, void* stream) override {
    auto state = std::make_unique<CudaPreparedState>();
    // The upload validates the plan.
    state->device_passes = cuda::upload_passes(plan, stream);
    return state;
  }

  bool builds_pattern(const PatternSpec& resolved, const PlanShape& shape,
                      const ModalityLayout* layout) const override {
    return detail::device_builder_for(resolved, shape, layout, /*device_inputs=*/true) != nullptr;
  }

  std::optional<BuiltPattern> prepare_pattern(const PatternSpec& resolved, const PlanShape& shape,
                                              const ModalityLayout* layout, Device device,
                                              void* stream, const PatternInputs* inputs) override {
    return build_pattern_on_device(resolved, shape, layout, device, stream, inputs);
  }

  std::optional<BuiltPattern> prepare_pattern(const std::vector<PatternSpec>& resolved,
                                              const PlanShape& shape, const ModalityLayout* layout,
                                              Device device, void* stream,
                                              const PatternInputs* inputs,
                                              const PatternInputs* host_inputs) override {
    return build_config_on_device(resolved, shape, layout, device, stream, inputs, host_inputs);
  }

  std::optional<PlanBuildTimes> build_times(const PreparedState& state) const override {
    const CudaPreparedState& prepared = cuda_state(state);
    if (!prepared.build_timer) return std::nullopt;
    return cuda::config_build_times(*prepared.build_timer);
  }

  std::optional<Plan> download_plan(const PreparedState& state) const override {
    const CudaPreparedState& prepared = cuda_state(state);
    if (prepared.pass_masks.empty()) return std::nullopt;
    return cuda::download_plan(prepared.device_passes, prepared.pass_masks, prepared.device);
  }

  void* allocate(const char*, std::size_t bytes, Device device) override {
    return cuda::allocate_device_memory(bytes, device);
  }
  void release(void* data, Device) noexcept override { cuda::free_device_memory(data); }
  void copy_to_device(void* device_data, const void* host, std::size_t bytes,
                      Device device) override {
    cuda::copy_host_to_device(device_data, host, bytes, device);
  }
  void copy_to_host(void* host, const void* device_data, std::size_t bytes,
                    Device device) override {
    cuda::copy_device_to_host(host, device_data, bytes, device);
  }
  void synchronize(Device device) override { cuda::synchronize_device(device); }
  double median_device_milliseconds(const std::function<void()>& work, int warmup, int repeats,
                                    Device device) override {
    return cuda::median_event_milliseconds(work, warmup, repeats, device);
  }
};

const BackendRegistration registration(DeviceType::kCUDA, std::make_unique<CudaBackend>());

}  // namespace
}  // namespace mmsparse::cuda
