#pragma once
// BlindSight's templates built into a DevicePlan on the GPU from the layout alone (the host
// builder is blindsight.cpp). The host reads the layout into one head slot's geometry
// (blindsight_geometry.h: tiles, the key runs shared by every image query, each image's own runs,
// the counts and offsets of every record, the query order), uploads it, and kernels write every
// head slot's tile, span and column records, the mask table, the token array (bidirectional
// images) and the heaviest-first schedule. No host synchronisation; memory is the plan plus the geometry
// (O(tiles + images + sinks)) and one record per column piece. Plain C++: no CUDA types.

#include <cstdint>
#include <vector>

#include "cuda/runtime/engine.h"
#include "mmsparse/layout.h"
#include "mmsparse/patterns.h"
#include "mmsparse/plan.h"

namespace mmsparse::cuda {

// The plan build_plan(resolved_spec, shape, layout) builds (a blindsight-* spec), record for
// record as the upload writes it (RecordForm::kAsDeviceBuilders), every head slot the same.
// Throws like the host builder on bad parameters, shapes and layouts; kUnsupported past the
// engine's int32 ranges. Asynchronous on `stream` (cudaStream_t). `run_count`, when given,
// receives the plan's query-order run records over every head slot (0: the identity order).
DevicePlan build_blindsight_plan_on_device(const PatternSpec& resolved_spec, const PlanShape& shape,
                                           const ModalityLayout* layout, void* stream,
                                           int64_t* run_count = nullptr);

}  // namespace mmsparse::cuda
