#pragma once
// Static patterns built straight into a DevicePlan by kernels, with no host plan and no host
// synchronisation. The shape alone decides every size (tiles, spans and columns per head), so the
// host computes the buffer layout, allocates it in stream order, and kernels fill it tile by tile.
// The buffer is byte-identical to DevicePlan(build_plan(spec, shape, layout), stream).

#include <vector>

#include "cuda/runtime/engine.h"
#include "mmsparse/patterns.h"
#include "mmsparse/plan.h"

namespace mmsparse::cuda {

// Tri-shape uses two mask policies (A-shape rows, then dense bottom rows); the others use one.
inline constexpr int kMaxStaticMasks = 2;

// `resolved_spec` comes from resolve_pattern (every parameter present; the layout only supplies
// defaults, so it is not needed here). Every head slot of `shape` gets the pattern. Throws like the
// host builder and the upload on bad parameters or shapes; asynchronous on `stream` (cudaStream_t).
DevicePlan build_static_plan_on_device(const PatternSpec& resolved_spec, const PlanShape& shape,
                                       void* stream);

// The mask policies of that plan, in the order its tiles first use them (PlanBuilder's numbering;
// every head slot uses them in this order).
std::vector<MaskPolicy> static_plan_masks(const PatternSpec& resolved_spec, const PlanShape& shape);

}  // namespace mmsparse::cuda
