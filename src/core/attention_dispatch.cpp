// Public attention entry points: validate every argument (errors name the argument, the expected
// value and what was given), then hand the work to the backend of the tensors' device.

#include <algorithm>
#include <cmath>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/backend.h"
#include "mmsparse/attention.h"
#include "mmsparse/layout.h"
#include "mmsparse/patterns.h"
#include "mmsparse/status.h"

namespace mmsparse {
namespace {

constexpr int kAttentionDims = 4;  // [batch, seq, heads, head_dim]
constexpr int kLseDims = 3;        // [batch, heads, seq]

bool is_floating(DType dtype) {
  return dtype == DType::kFloat32 || dtype == DType::kFloat16 || dtype == DType::kBFloat16;
}

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string text = "[";
  for (std::size_t d = 0; d < shape.size(); ++d) {
    text += (d ? ", " : "") + std::to_string(shape[d]);
  }
  return text + "]";
}

// Rank, non-negative extents and a data pointer whenever there are elements.
void check_view(const std::string& name, const TensorView& view, int ndim,
                const std::string& dims_description) {
  if (view.ndim != ndim) {
    throw_invalid_argument(name, std::to_string(ndim) + " dimensions " + dims_description,
                           std::to_string(view.ndim) + " (" + view.shape_string() + ")");
  }
  for (int d = 0; d < ndim; ++d) {
    if (view.shape[d] < 0) {
      throw_invalid_argument(name + " shape", "non-negative extents", view.shape_string());
    }
  }
  if (view.data == nullptr && view.numel() > 0) {
    throw_invalid_argument(name + " data",
                           "a non-null pointer for " + std::to_string(view.numel()) + " elements",
                           "null");
  }
}

void check_floating(const std::string& name, const TensorView& view) {
  if (!is_floating(view.dtype)) {
    throw_invalid_argument(name + " dtype", "float32, float16 or bfloat16",
                           std::string(dtype_name(view.dtype)));
  }
}

void check_dtype(const std::string& name, const TensorView& view, DType expected,
                 const std::string& why) {
  if (view.dtype != expected) {
    throw_invalid_argument(name + " dtype", std::string(dtype_name(expected)) + why,
                           std::string(dtype_name(view.dtype)));
  }
}

void check_device(const std::string& name, const TensorView& view, Device expected,
                  const std::string& why) {
  if (!(view.device == expected)) {
    throw_invalid_argument(name + " device", device_name(expected) + why, device_name(view.device));
  }
}

void check_shape(const std::string& name, const TensorView& view,
                 const std::vector<int64_t>& expected, const std::string& why) {
  if (view.shape_vector() != expected) {
    throw_invalid_argument(name + " shape", shape_string(expected) + why, view.shape_string());
  }
}

void check_extent(const std::string& name, int64_t got, int64_t expected, const std::string& why) {
  if (got != expected) {
    throw_invalid_argument(name, std::to_string(expected) + why, std::to_string(got));
  }
}

void check_options(const AttentionOptions& options) {
  // Softmax scales are positive; the engine folds the scale into the exponent, which needs it so.
  if (!std::isfinite(options.scale) || options.scale < 0.0f) {
    throw_invalid_argument("options.scale", "a finite value >= 0 (0 = 1/sqrt(head_dim))",
                           std::to_string(options.scale));
  }
  if (options.num_threads < 0) {
    throw_invalid_argument("options.num_threads", ">= 0 (0 = hardware concurrency)",
                           std::to_string(options.num_threads));
  }
  if (options.progress_interval_ms < 1) {
    throw_invalid_argument("options.progress_interval_ms", ">= 1",
                           std::to_string(options.progress_interval_ms));
  }
}

// Nothing to compute; validation has run, so the call is a defined no-op (see attention.h).
bool is_empty(const AttentionProblem& problem) { return problem.batch == 0 || problem.q_len == 0; }

void check_plan(const PlanShape& shape, const AttentionProblem& problem) {
  check_extent("plan heads", shape.heads, problem.q_heads, " (q_heads of q)");
  check_extent("plan q_len", shape.q_len, problem.q_len, " (q_len of q)");
  check_extent("plan kv_len", shape.kv_len, problem.kv_len, " (kv_len of k)");
  if (shape.batch != 1 && shape.batch != problem.batch) {
    throw_invalid_argument("plan batch", "1 or " + std::to_string(problem.batch) + " (batch of q)",
                           std::to_string(shape.batch));
  }
}

}  // namespace

AttentionProblem describe_attention(const TensorView& q, const TensorView& k, const TensorView& v,
                                    const AttentionOptions& options) {
  check_options(options);
  check_view("q", q, kAttentionDims, "[batch, q_len, q_heads, head_dim]");
  check_view("k", k, kAttentionDims, "[batch, kv_len, kv_heads, head_dim]");
  check_view("v", v, kAttentionDims, "[batch, kv_len, kv_heads, head_dim]");
  check_floating("q", q);
  check_dtype("k", k, q.dtype, " (the dtype of q)");
  check_dtype("v", v, q.dtype, " (the dtype of q)");
  check_device("k", k, q.device, " (the device of q)");
  check_device("v", v, q.device, " (the device of q)");

  AttentionProblem problem;
  problem.batch = q.shape[0];
  problem.q_len = q.shape[1];
  problem.q_heads = q.shape[2];
  problem.head_dim = q.shape[3];
  problem.kv_len = k.shape[1];
  problem.kv_heads = k.shape[2];
  problem.causal = options.causal;
  problem.dtype = q.dtype;
  problem.device = q.device;

  check_extent("k batch (dimension 0)", k.shape[0], problem.batch, " (batch of q)");
  check_extent("k head_dim (dimension 3)", k.shape[3], problem.head_dim, " (head_dim of q)");
  check_shape("v", v, k.shape_vector(), " (the shape of k)");
  if (problem.head_dim <= 0) {
    throw_invalid_argument("q head_dim (dimension 3)", "> 0", std::to_string(problem.head_dim));
  }
  if (problem.kv_heads <= 0) {
    throw_invalid_argument("k heads (dimension 2)", "> 0", std::to_string(problem.kv_heads));
  }
  if (problem.q_heads <= 0 || problem.q_heads % problem.kv_heads != 0) {
    throw_invalid_argument(
        "q heads (dimension 2)",
        "a positive multiple of kv_heads = " + std::to_string(problem.kv_heads) + " (GQA)",
        std::to_string(problem.q_heads));
  }
  problem.scale = options.scale != 0.0f ? options.scale
                                        : 1.0f / std::sqrt(static_cast<float>(problem.head_dim));
  return problem;
}

void check_outputs(const AttentionProblem& problem, const TensorView& out, const TensorView& lse) {
  check_view("out", out, kAttentionDims, "[batch, q_len, q_heads, head_dim]");
  check_view("lse", lse, kLseDims, "[batch, q_heads, q_len]");
  check_shape("out", out, {problem.batch, problem.q_len, problem.q_heads, problem.head_dim},
              " (the shape of q)");
  check_shape("lse", lse, {problem.batch, problem.q_heads, problem.q_len},
              " ([batch, q_heads, q_len] of q)");
  check_dtype("out", out, problem.dtype, " (the dtype of q)");
  check_dtype("lse", lse, DType::kFloat32, "");
  check_device("out", out, problem.device, " (the device of q)");
  check_device("lse", lse, problem.device, " (the device of q)");
}

void attention_dense(const TensorView& q, const TensorView& k, const TensorView& v,
                     const TensorView& out, const TensorView& lse,
                     const AttentionOptions& options) {
  const AttentionProblem problem = describe_attention(q, k, v, options);
  check_outputs(problem, out, lse);
  if (is_empty(problem)) return;
  backend_for_tensors("attention_dense", problem.device)
      .attention_dense(problem, q, k, v, out, lse, options);
}

void attention_planned(const Plan& plan, const TensorView& q, const TensorView& k,
                       const TensorView& v, const TensorView& out, const TensorView& lse,
                       const AttentionOptions& options) {
  const AttentionProblem problem = describe_attention(q, k, v, options);
  check_outputs(problem, out, lse);
  check_plan(plan.shape, problem);
  if (is_empty(problem)) return;
  backend_for_tensors("attention_planned", problem.device)
      .attention_planned(problem, plan, q, k, v, out, lse, options);
}

int64_t preferred_tile_rows(Device device, int64_t head_dim) {
  const Backend* backend = find_backend(device.type);
  return backend != nullptr ? backend->preferred_tile_rows(head_dim) : kDefaultTileRows;
}

struct PreparedPlan::Impl {
  PlanShape shape;
  Device device;
  // The host plan; for a static plan built on the device, built from `device_built_specs` and
  // `device_built_layout` by the first plan() call.
  mutable std::optional<Plan> plan;
  mutable std::once_flag plan_built;
  std::vector<PatternSpec> device_built_specs;  // resolved: one for every head, or one per head
  // The layout the device build read: templates that follow the images (BlindSight) need it for
  // the host copy too, not only for their defaults.
  std::optional<ModalityLayout> device_built_layout;
  // A plan with a dynamic head (estimated on the device from device tensors, or built on the host
  // from inputs the plan does not keep): the host copy is the backend's download of the device
  // records (Backend::download_plan).
  bool estimated_on_device = false;
  // The backend's own state (a device copy, build timings); never null.
  std::unique_ptr<PreparedState> state;
};

namespace {

std::unique_ptr<PreparedPlan::Impl> make_impl(const PlanShape& shape, Device device,
                                              std::unique_ptr<PreparedState> state) {
  auto impl = std::make_unique<PreparedPlan::Impl>();
  impl->shape = shape;
  impl->device = device;
  impl->state = std::move(state);
  return impl;
}

}  // namespace

PreparedPlan::PreparedPlan() = default;
PreparedPlan::~PreparedPlan() = default;
PreparedPlan::PreparedPlan(PreparedPlan&&) noexcept = default;
PreparedPlan& PreparedPlan::operator=(PreparedPlan&&) noexcept = default;

namespace {

// The host copy of a plan estimated on the device: its records downloaded and decoded by the
// backend that built it.
Plan downloaded_plan(const PreparedPlan::Impl& impl) {
  // A prepared plan's backend is registered (prepare_pattern found it).
  std::optional<Plan> plan = find_backend(impl.device.type)->download_plan(*impl.state);
  if (plan) return *std::move(plan);
  throw Error(ErrorCode::kUnsupported,
              "PreparedPlan::plan: " +
                  (impl.device_built_specs.size() == 1
                       ? impl.device_built_specs.front().to_string() +
                             " was estimated on the device from device tensors"
                       : std::string("the per-head config has dynamic heads")) +
                  " and the backend of " + device_name(impl.device) +
                  " keeps no host copy of it; build it with build_plan from host inputs for one");
}

}  // namespace

const Plan& PreparedPlan::plan() const {
  const PlanShape& prepared_shape = shape();
  // Once, whichever thread asks first; a throw leaves it to the next call.
  std::call_once(impl_->plan_built, [&] {
    if (impl_->plan) return;
    if (impl_->estimated_on_device) {
      impl_->plan = downloaded_plan(*impl_);
    } else {
      const ModalityLayout* layout =
          impl_->device_built_layout ? &*impl_->device_built_layout : nullptr;
      impl_->plan = build_plan(impl_->device_built_specs, prepared_shape, layout);
    }
  });
  return *impl_->plan;
}

PlanBuildTimes PreparedPlan::build_times() const {
  (void)shape();  // throws for an empty plan
  // A prepared plan's backend is registered (prepare_* found it).
  std::optional<PlanBuildTimes> times =
      find_backend(impl_->device.type)->build_times(*impl_->state);
  if (times) return *std::move(times);
  throw Error(ErrorCode::kUnsupported,
              "PreparedPlan::build_times: recorded only for plans prepare_pattern builds from "
              "per-head specs on a CUDA device");
}

const PlanShape& PreparedPlan::shape() const {
  if (!impl_) {
    throw_invalid_argument("PreparedPlan", "a plan made by prepare_plan or prepare_pattern",
                           "an empty one");
  }
  return impl_->shape;
}

Device PreparedPlan::device() const { return impl_ ? impl_->device : Device{}; }

PreparedPlan prepare_plan(Plan plan, Device device, void* stream) {
  std::unique_ptr<PreparedState> state =
      backend_for_tensors("prepare_plan", device).prepare_plan(plan, device, stream);
  PreparedPlan prepared;
  prepared.impl_ = make_impl(plan.shape, device, std::move(state));
  prepared.impl_->plan = std::move(plan);
  return prepared;
}

bool builds_plan_on_device(const PatternSpec& spec, const PlanShape& shape,
                           const ModalityLayout* layout, Device device) {
  const PatternSpec resolved = resolve_pattern(spec, layout);
  const Backend* backend = find_backend(device.type);
  return backend != nullptr && backend->builds_pattern(resolved, shape, layout);
}

namespace {

// A plan the backend built itself from `resolved` (one spec for every head, or one per head) and
// `layout`. Its host copy can be built later from the specs and the layout unless a head is
// dynamic: such a head was estimated from inputs (device ones, or host ones for a head the
// backend built on the host) that the prepared plan does not keep. Static heads built on the host
// inside a device-built config (BlindSight's templates) have a host copy like any static head.
std::unique_ptr<PreparedPlan::Impl> built_impl(BuiltPattern built,
                                               std::vector<PatternSpec> resolved,
                                               const ModalityLayout* layout,
                                               const PlanShape& shape, Device device) {
  std::unique_ptr<PreparedPlan::Impl> impl = make_impl(shape, device, std::move(built.state));
  impl->estimated_on_device = std::any_of(resolved.begin(), resolved.end(),
                                          [](const PatternSpec& spec) { return is_dynamic(spec); });
  impl->device_built_specs = std::move(resolved);
  if (layout != nullptr) impl->device_built_layout = *layout;
  return impl;
}

}  // namespace

PreparedPlan prepare_pattern(const PatternSpec& spec, const PlanShape& shape,
                             const ModalityLayout* layout, Device device, void* stream,
                             const PatternInputs* inputs) {
  PatternSpec resolved = resolve_pattern(spec, layout);
  // Without a backend for the device, prepare_plan says so.
  Backend* backend = find_backend(device.type);
  std::optional<BuiltPattern> built;
  if (backend != nullptr) {
    built = backend->prepare_pattern(resolved, shape, layout, device, stream, inputs);
  }
  if (!built) return prepare_plan(build_plan(resolved, shape, layout, inputs), device, stream);
  PreparedPlan prepared;
  prepared.impl_ = built_impl(*std::move(built), {std::move(resolved)}, layout, shape, device);
  return prepared;
}

PreparedPlan prepare_pattern(const std::vector<PatternSpec>& specs, const PlanShape& shape,
                             const ModalityLayout* layout, Device device, void* stream,
                             const PatternInputs* inputs, const PatternInputs* host_inputs) {
  if (static_cast<int64_t>(specs.size()) != shape.heads) {
    throw_invalid_argument(
        "prepare_pattern specs",
        "one pattern spec per query head (heads = " + std::to_string(shape.heads) + ")",
        std::to_string(specs.size()) + " specs");
  }
  std::vector<PatternSpec> resolved;
  for (const PatternSpec& spec : specs) resolved.push_back(resolve_pattern(spec, layout));
  Backend* backend = find_backend(device.type);
  std::optional<BuiltPattern> built;
  if (backend != nullptr) {
    built = backend->prepare_pattern(resolved, shape, layout, device, stream, inputs, host_inputs);
  }
  if (!built) return prepare_plan(build_plan(resolved, shape, layout, inputs), device, stream);
  PreparedPlan prepared;
  prepared.impl_ = built_impl(*std::move(built), std::move(resolved), layout, shape, device);
  return prepared;
}

void attention_planned(const PreparedPlan& prepared, const TensorView& q, const TensorView& k,
                       const TensorView& v, const TensorView& out, const TensorView& lse,
                       const AttentionOptions& options) {
  const PlanShape& shape = prepared.shape();
  const AttentionProblem problem = describe_attention(q, k, v, options);
  check_outputs(problem, out, lse);
  check_plan(shape, problem);
  if (!(prepared.device() == problem.device)) {
    throw_invalid_argument("prepared plan device",
                           device_name(problem.device) + " (the device of q)",
                           device_name(prepared.device()));
  }
  if (is_empty(problem)) return;
  backend_for_tensors("attention_planned", problem.device)
      .attention_prepared(problem, prepared, *prepared.impl_->state, q, k, v, out, lse, options);
}

void attention_masked(const TensorView& q, const TensorView& k, const TensorView& v,
                      const TensorView& mask, const TensorView& out, const TensorView& lse,
                      const AttentionOptions& options) {
  const AttentionProblem problem = describe_attention(q, k, v, options);
  check_outputs(problem, out, lse);
  check_view("mask", mask, kAttentionDims, "[batch or 1, q_heads, q_len, kv_len]");
  check_dtype("mask", mask, DType::kUInt8, "");
  check_device("mask", mask, problem.device, " (the device of q)");
  if (mask.shape[0] != 1 && mask.shape[0] != problem.batch) {
    throw_invalid_argument("mask batch (dimension 0)",
                           "1 or " + std::to_string(problem.batch) + " (batch of q)",
                           std::to_string(mask.shape[0]));
  }
  check_shape("mask", mask, {mask.shape[0], problem.q_heads, problem.q_len, problem.kv_len},
              " ([batch or 1, q_heads, q_len, kv_len])");
  if (is_empty(problem)) return;
  backend_for_tensors("attention_masked", problem.device)
      .attention_masked(problem, q, k, v, mask, out, lse, options);
}

void merge_partials(std::span<const TensorView> outs, std::span<const TensorView> lses,
                    const TensorView& out, const TensorView& lse, const AttentionOptions& options) {
  check_options(options);
  if (outs.empty()) throw_invalid_argument("outs", "at least one part", "0");
  if (lses.size() != outs.size()) {
    throw_invalid_argument("lses", std::to_string(outs.size()) + " parts (one per out)",
                           std::to_string(lses.size()));
  }
  check_view("out", out, kAttentionDims, "[batch, q_len, heads, head_dim]");
  check_view("lse", lse, kLseDims, "[batch, heads, q_len]");
  check_floating("out", out);
  check_dtype("lse", lse, DType::kFloat32, "");
  const std::vector<int64_t> lse_shape = {out.shape[0], out.shape[2], out.shape[1]};
  check_shape("lse", lse, lse_shape, " ([batch, heads, q_len] of out)");
  check_device("lse", lse, out.device, " (the device of out)");
  for (std::size_t p = 0; p < outs.size(); ++p) {
    const std::string out_name = "outs[" + std::to_string(p) + "]";
    const std::string lse_name = "lses[" + std::to_string(p) + "]";
    check_view(out_name, outs[p], kAttentionDims, "[batch, q_len, heads, head_dim]");
    check_view(lse_name, lses[p], kLseDims, "[batch, heads, q_len]");
    check_floating(out_name, outs[p]);
    check_dtype(out_name, outs[p], outs[0].dtype, " (the dtype of outs[0])");
    check_dtype(lse_name, lses[p], DType::kFloat32, "");
    check_shape(out_name, outs[p], out.shape_vector(), " (the shape of out)");
    check_shape(lse_name, lses[p], lse_shape, " (the shape of lse)");
    check_device(out_name, outs[p], out.device, " (the device of out)");
    check_device(lse_name, lses[p], out.device, " (the device of out)");
  }
  if (out.numel() == 0 && lse.numel() == 0) return;
  backend_for_tensors("merge_partials", out.device).merge_partials(outs, lses, out, lse, options);
}

}  // namespace mmsparse
