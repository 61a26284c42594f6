#pragma once
// The interface between the public entry points (src/core) and the backends that run them: the
// CPU reference (src/cpu, always present) and optional ones such as the CUDA engine (src/cuda, in
// the mmsparse_cuda library). The entry points validate every argument, then hand the work to the
// backend registered for the tensors' device type; a backend receives validated problems only.
// A backend registers itself at static initialisation (BackendRegistration); its library must be
// linked whole (mmsparse::cuda does so), since nothing else refers to the registering object.

#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "mmsparse/attention.h"
#include "mmsparse/build_info.h"
#include "mmsparse/patterns.h"
#include "mmsparse/plan.h"
#include "mmsparse/tensor.h"

namespace mmsparse {

// What a backend keeps of a prepared plan besides the host plan (PreparedPlan::Impl holds both):
// a device copy, build timings. Made and read by one backend only.
class PreparedState {
 public:
  virtual ~PreparedState() = default;
};

// A plan a backend built itself from resolved pattern specs, with no host plan. Whether a host
// copy can be built later follows from the specs (none when a head is dynamic: its inputs are not
// kept), so the backend need not say.
struct BuiltPattern {
  std::unique_ptr<PreparedState> state;
};

class Backend {
 public:
  virtual ~Backend() = default;

  // --- Build information ---
  // The backend's name in BuildInfo::backends ("cpu-reference", "cuda-sm90a").
  virtual std::string name() const = 0;
  // Adds what the backend knows of the build (toolkit versions) to `info`; its name is added by
  // build_info().
  virtual void describe(BuildInfo& info) const { (void)info; }
  // The devices of this backend visible at run time. Never throws.
  virtual std::vector<GpuInfo> visible_gpus() const { return {}; }
  // See preferred_tile_rows in attention.h.
  virtual int64_t preferred_tile_rows(int64_t head_dim) const {
    (void)head_dim;
    return kDefaultTileRows;
  }

  // --- Attention on validated, non-empty problems (describe_attention, check_outputs) ---
  virtual void attention_dense(const AttentionProblem& problem, const TensorView& q,
                               const TensorView& k, const TensorView& v, const TensorView& out,
                               const TensorView& lse, const AttentionOptions& options) = 0;
  // `plan` matches the problem's shape; backends that walk its arrays validate it themselves.
  virtual void attention_planned(const AttentionProblem& problem, const Plan& plan,
                                 const TensorView& q, const TensorView& k, const TensorView& v,
                                 const TensorView& out, const TensorView& lse,
                                 const AttentionOptions& options) = 0;
  // `prepared` was prepared for this backend's device type; `state` is its backend state.
  virtual void attention_prepared(const AttentionProblem& problem, const PreparedPlan& prepared,
                                  const PreparedState& state, const TensorView& q,
                                  const TensorView& k, const TensorView& v, const TensorView& out,
                                  const TensorView& lse, const AttentionOptions& options) = 0;
  // The masked-dense oracle; `mask` is validated. Only the CPU reference serves it.
  virtual void attention_masked(const AttentionProblem& problem, const TensorView& q,
                                const TensorView& k, const TensorView& v, const TensorView& mask,
                                const TensorView& out, const TensorView& lse,
                                const AttentionOptions& options);
  // Parts and result validated (same shapes, dtypes and device), not all empty.
  virtual void merge_partials(std::span<const TensorView> outs, std::span<const TensorView> lses,
                              const TensorView& out, const TensorView& lse,
                              const AttentionOptions& options) = 0;

  // The tile oracle's block sums (mmsparse/tools/metrics.h: tile_mass) for one query head on
  // this backend's device: arguments checked there; `tiles` [sampled] query tile indices, `mass`
  // [sampled, ceil(kv_len / chunk_keys)] host memory, written. The host sums live in the tools
  // library, so only device backends serve it; the default throws kUnsupported.
  virtual void tile_mass(const TensorView& q, const TensorView& k, const TensorView& lse,
                         int64_t batch_index, int64_t head, float scale, int64_t tile_rows,
                         int64_t chunk_keys, std::span<const int64_t> tiles, std::span<double> mass,
                         void* stream);

  // --- Prepared plans ---
  // The backend's state of a host plan (validated here or by an upload); asynchronous on
  // `stream` where the backend has streams.
  virtual std::unique_ptr<PreparedState> prepare_plan(const Plan& plan, Device device,
                                                      void* stream) = 0;
  // Whether prepare_pattern below builds `resolved` (from resolve_pattern) itself.
  virtual bool builds_pattern(const PatternSpec& resolved, const PlanShape& shape,
                              const ModalityLayout* layout) const;
  // `resolved` for every head slot, built by the backend itself; std::nullopt where the host
  // builds the plan (then prepare_plan runs on it).
  virtual std::optional<BuiltPattern> prepare_pattern(const PatternSpec& resolved,
                                                      const PlanShape& shape,
                                                      const ModalityLayout* layout, Device device,
                                                      void* stream, const PatternInputs* inputs);
  // One resolved spec per head slot (the count is checked); arguments as in attention.h.
  virtual std::optional<BuiltPattern> prepare_pattern(const std::vector<PatternSpec>& resolved,
                                                      const PlanShape& shape,
                                                      const ModalityLayout* layout, Device device,
                                                      void* stream, const PatternInputs* inputs,
                                                      const PatternInputs* host_inputs);
  // The build times `state` recorded, if any (waits for the build).
  virtual std::optional<PlanBuildTimes> build_times(const PreparedState& state) const;
  // The host copy of a plan the backend built itself (prepare_pattern above), decoded from the
  // records `state` holds, equal to what the host builder makes for the same selection (waits for
  // the build); std::nullopt where the backend keeps nothing to decode (the default).
  // PreparedPlan::plan() calls it once and keeps the result.
  virtual std::optional<Plan> download_plan(const PreparedState& state) const;

  // --- Device memory and timing (mmsparse/device.h) ---
  // Backends without memory of their own (the CPU reference) throw kInvalidArgument naming
  // `what`'s device. Sizes are in bytes; pointers are device memory of `device` except `host`.
  virtual void* allocate(const char* what, std::size_t bytes, Device device);
  virtual void release(void* data, Device device) noexcept;
  virtual void copy_to_device(void* device_data, const void* host, std::size_t bytes,
                              Device device);
  virtual void copy_to_host(void* host, const void* device_data, std::size_t bytes, Device device);
  virtual void synchronize(Device device);
  // `repeats` >= 1 (checked).
  virtual double median_device_milliseconds(const std::function<void()>& work, int warmup,
                                            int repeats, Device device);
};

// Registers the backend of `type` (one per type; a second registration throws std::logic_error).
// The CPU reference is registered by the registry itself: it lives in the same library.
void register_backend(DeviceType type, std::unique_ptr<Backend> backend);

// A namespace-scope object of a backend's library registers it at static initialisation:
//   const BackendRegistration registration(DeviceType::kCUDA, std::make_unique<CudaBackend>());
struct BackendRegistration {
  BackendRegistration(DeviceType type, std::unique_ptr<Backend> backend) {
    register_backend(type, std::move(backend));
  }
};

// The backend of `type`, or nullptr when this build or link has none.
Backend* find_backend(DeviceType type);
// The backend of `device` for tensors of `entry_point`; throws kUnsupported when there is none,
// saying which engine is missing and that host tensors run the CPU reference.
Backend& backend_for_tensors(const char* entry_point, Device device);
// The backend of `device` for device memory or timing (`what`: "DeviceTensor", "synchronize", ...);
// throws kUnsupported when there is none, saying how to build the engine in.
Backend& backend_for_memory(const char* what, Device device);
// Every registered backend, the CPU reference first, then by device type.
std::vector<const Backend*> registered_backends();

}  // namespace mmsparse
