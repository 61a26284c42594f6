#pragma once
// Attention entry points. The backend follows the tensors' device: host tensors run on the CPU
// reference backend (the oracle), CUDA tensors on the CUDA engine when the build has one.
//
// Shapes (any strides; the CUDA engine needs a contiguous last dimension):
//   q   [batch, q_len, q_heads, head_dim]      bf16 / fp16 / fp32
//   k,v [batch, kv_len, kv_heads, head_dim]    same dtype as q; q_heads % kv_heads == 0 (GQA)
//   out [batch, q_len, q_heads, head_dim]      same dtype as q
//   lse [batch, q_heads, q_len]                fp32, natural log; -inf for rows with no keys
// With kv_len > q_len, causal masking is bottom-right aligned: query i sees keys <= i + kv_len - q_len.
// Empty problems: batch == 0 or q_len == 0 is a no-op once the arguments are validated; kv_len == 0
// gives every row O = 0 and LSE = -inf. heads and head_dim must be positive.

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "mmsparse/plan.h"
#include "mmsparse/tensor.h"

namespace mmsparse {

struct PatternSpec;    // patterns.h
struct PatternInputs;  // patterns.h

struct AttentionOptions {
  float scale = 0.0f;     // softmax scale; 0 means 1/sqrt(head_dim)
  bool causal = true;     // dense attention only; a plan carries its own mask policy
  void* stream = nullptr;  // cudaStream_t for CUDA tensors
  int num_threads = 0;    // CPU backend threads; 0 = hardware concurrency
  // Optional progress of a long call, for progress bars: called with the fraction of the call's
  // query rows done, in (0, 1], from the calling thread only (while the backend's own threads
  // work), at most once every progress_interval_ms and once more with 1.0 at the end. Only the CPU
  // reference backend calls it (attention_dense, attention_planned, attention_masked); the CUDA
  // engine's calls are asynchronous and never do. Unset, it costs nothing.
  std::function<void(double fraction)> on_progress;
  int progress_interval_ms = 200;  // >= 1
};

struct AttentionProblem {
  int64_t batch = 0;
  int64_t q_len = 0;
  int64_t kv_len = 0;
  int64_t q_heads = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;
  float scale = 0.0f;
  bool causal = true;
  DType dtype = DType::kFloat32;
  Device device{};
  int64_t group_size() const { return q_heads / kv_heads; }
  int64_t causal_offset() const { return kv_len - q_len; }
};

// Validates q, k, v (and out, lse when given) and describes the problem; throws naming the argument.
AttentionProblem describe_attention(const TensorView& q, const TensorView& k, const TensorView& v,
                                    const AttentionOptions& options);
void check_outputs(const AttentionProblem& problem, const TensorView& out, const TensorView& lse);

void attention_dense(const TensorView& q, const TensorView& k, const TensorView& v,
                     const TensorView& out, const TensorView& lse,
                     const AttentionOptions& options = {});

// The plan's shape must match: heads == q_heads, q_len, kv_len, batch 1 or equal to q's batch.
void attention_planned(const Plan& plan, const TensorView& q, const TensorView& k,
                       const TensorView& v, const TensorView& out, const TensorView& lse,
                       const AttentionOptions& options = {});

// The query-tile height a backend runs fastest: 128 on the CUDA engine for head_dim 128 and 256
// (its wgmma kernel, spans and gathered columns, under positional and token masks alike),
// otherwise kDefaultTileRows. On the CUDA engine, plans whose masks read tokens (same-media,
// modality pairs, bidirectional media) and that have lattice records (strided spans the upload
// merges) run on the mma.sync kernel, which needs tiles of at most kDefaultTileRows rows and
// head_dim 64 or 128; at head_dim 256 such plans are refused (kUnsupported).
int64_t preferred_tile_rows(Device device, int64_t head_dim);

// How prepare_pattern with per-head specs built each head slot's part of the plan, and how long
// that took.
struct HeadBuildTime {
  bool on_device =
      false;  // built by kernels (seconds from GPU events); else on the host (host clock)
  double seconds = 0.0;  // the head slot's share of its builder's time
};
struct PlanBuildTimes {
  std::vector<HeadBuildTime> heads;  // [head_slots]
  double assembly_seconds = 0.0;     // concatenating the builders' parts into one plan (GPU events)
};

// The plan/run split: a plan validated once and, for a CUDA device, uploaded once, so that repeated
// calls (every layer, every benchmark repeat) pay only for attention.
class PreparedPlan {
 public:
  PreparedPlan();
  ~PreparedPlan();
  PreparedPlan(PreparedPlan&&) noexcept;
  PreparedPlan& operator=(PreparedPlan&&) noexcept;

  // The host plan, built on the first call (once, thread-safe) where prepare_pattern built the
  // plan on the device, and kept: attention calls never need it. A static plan is built on the
  // host from the resolved specs and the layout. A plan estimated on the device from device tensors (and a
  // per-head config with such heads, or with dynamic heads built on the host) is downloaded: the
  // device records are copied back and decoded into the plan the host builder makes for the same
  // selection, record for record (docs/index_builders.md: the same wherever the top-k cuts are
  // clear); it costs the records' size in copies (megabytes at 128K tokens), not a host
  // selection. Backends that keep no records to decode throw kUnsupported.
  const Plan& plan() const;
  const PlanShape& shape() const;
  Device device() const;
  // The build times of a plan prepare_pattern built from per-head specs on a CUDA device; waits
  // for the build to finish. Throws kUnsupported for other plans.
  PlanBuildTimes build_times() const;

  struct Impl;  // backend state (the device copy of the plan)

 private:
  std::unique_ptr<Impl> impl_;
  friend PreparedPlan prepare_plan(Plan plan, Device device, void* stream);
  friend PreparedPlan prepare_pattern(const PatternSpec& spec, const PlanShape& shape,
                                      const ModalityLayout* layout, Device device, void* stream,
                                      const PatternInputs* inputs);
  friend PreparedPlan prepare_pattern(const std::vector<PatternSpec>& specs, const PlanShape& shape,
                                      const ModalityLayout* layout, Device device, void* stream,
                                      const PatternInputs* inputs,
                                      const PatternInputs* host_inputs);
  friend void attention_planned(const PreparedPlan& prepared, const TensorView& q,
                                const TensorView& k, const TensorView& v, const TensorView& out,
                                const TensorView& lse, const AttentionOptions& options);
};

// stream: cudaStream_t the upload is ordered on (CUDA devices); calls must run on that stream or
// one that waits for it.
PreparedPlan prepare_plan(Plan plan, Device device, void* stream = nullptr);
// The plan of `spec` (one spec for every head slot; see patterns.h) prepared for `device`: what
// prepare_plan(build_plan(spec, shape, layout, inputs), device, stream) prepares. On a CUDA device,
// static patterns (dense, a-shape, tri-shape, sf-fixed, sf-strided, BlindSight's templates from
// the layout) are built by kernels straight into device memory, asynchronously on `stream`, with
// no host plan and no host synchronisation;
// so are dynamic patterns whose `inputs` are CUDA tensors (vertical-slash and grid, every boundary
// mode; Q/2D-boundary heads whose query groups' last rows form more than 16 runs throw
// kUnsupported for device inputs): the estimate, the line selection and the plan run on the GPU
// for every head slot (docs/index_builders.md). Otherwise the plan is built on the host.
// Dynamic patterns need `inputs`; a device-built dynamic plan's host copy is its download
// (plan()).
PreparedPlan prepare_pattern(const PatternSpec& spec, const PlanShape& shape,
                             const ModalityLayout* layout, Device device, void* stream = nullptr,
                             const PatternInputs* inputs = nullptr);
// Whether prepare_pattern on `device` builds `spec`'s plan for this shape and layout by kernels on
// the device (given device inputs for a dynamic pattern), with no host build: static patterns and
// the dynamic heads docs/index_builders.md lists, on a CUDA device of a build with the CUDA engine.
// False where the plan would be built on the host (CPU devices, CPU-only builds, Q/2D-boundary
// heads whose groups' last rows form more than 16 runs). Reads no tensor and touches no GPU; a spec
// that does not resolve throws as resolve_pattern does.
bool builds_plan_on_device(const PatternSpec& spec, const PlanShape& shape,
                           const ModalityLayout* layout, Device device);
// A per-head config of one layer (specs.size() == shape.heads, e.g. PatternConfig::layer_specs):
// what prepare_plan(build_plan(specs, shape, layout, inputs), device, stream) prepares. On a CUDA
// device the plan is built there, one part per builder, concatenated into one plan with one
// schedule (docs/index_builders.md, "Mixed heads"): static heads by kernels; vertical-slash and
// grid heads estimated on the GPU from `inputs` when they are CUDA tensors, over just those heads
// (builds_plan_on_device says which); every other head built on the host from host tensors
// (`inputs` when they are host tensors, else `host_inputs`) and uploaded as a part of the same
// plan. Dynamic heads without the inputs they need throw kUnsupported naming the head.
// build_times() then says which heads the GPU built and how long each builder took. Elsewhere the
// plan is built on the host.
PreparedPlan prepare_pattern(const std::vector<PatternSpec>& specs, const PlanShape& shape,
                             const ModalityLayout* layout, Device device, void* stream = nullptr,
                             const PatternInputs* inputs = nullptr,
                             const PatternInputs* host_inputs = nullptr);
void attention_planned(const PreparedPlan& prepared, const TensorView& q, const TensorView& k,
                       const TensorView& v, const TensorView& out, const TensorView& lse,
                       const AttentionOptions& options = {});

// Masked-dense oracle: dense attention restricted by an explicit boolean mask
// [batch or 1, q_heads, q_len, kv_len] (uint8, 1 = keep). Small sizes only; cross-checks plans.
// The mask alone decides: options.causal is not applied on top of it.
void attention_masked(const TensorView& q, const TensorView& k, const TensorView& v,
                      const TensorView& mask, const TensorView& out, const TensorView& lse,
                      const AttentionOptions& options = {});

// Combines partial results over disjoint key sets: lse = log(sum exp(lse_i)),
// out = sum exp(lse_i - lse) out_i. Rows where every part is -inf get out = 0, lse = -inf.
// Shapes as for attention ([batch, q_len, heads, head_dim] and [batch, heads, q_len] fp32); the parts
// share one floating dtype, out may have another (fp32 parts can merge into a bf16 out).
void merge_partials(std::span<const TensorView> outs, std::span<const TensorView> lses,
                    const TensorView& out, const TensorView& lse, const AttentionOptions& options = {});

}  // namespace mmsparse
