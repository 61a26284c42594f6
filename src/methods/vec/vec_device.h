#pragma once
// VecAttention's plan built on the GPU from device q and k (vec.h defines the selection and its
// arithmetic; the kernels pool as the host does and score on tensor cores, so their kept keys
// equal the host's except within rounding of the threshold). Plain C++: no CUDA types.
//
// Passes (vec_device.cu): the pooled queries; a count pass of TilingSelect + minS that cuts each
// (tile, key split)'s keys into runs (vec.h: spans and columns); a resolve pass joining the runs
// across splits into span and column counts; exclusive sums of both; one read of the two totals
// back to the host, which sizes the plan buffer exactly (memory O(selected records), no index
// buffer of every key); the tile, mask and schedule records; a write pass that recomputes the same
// scores and runs and writes each tile's spans and columns, ascending. Deterministic: no atomic
// decides where a record goes.

#include <cstdint>

#include "cuda/runtime/engine.h"
#include "methods/estimate/index_builders.h"
#include "mmsparse/patterns.h"
#include "mmsparse/plan.h"

namespace mmsparse::cuda {

// Whether build_vec_plan_on_device builds this resolved vec spec for the shape: a pooled block
// fits one tile (shape.tile_rows >= pooling) and there are keys. Other vec heads are built on the
// host.
bool builds_vec_on_device(const PatternSpec& resolved_spec, const PlanShape& shape);

// The plan build_plan(resolved_spec, shape, nullptr, inputs) builds, record for record as the
// upload writes it (RecordForm::kAsDeviceBuilders), except that keys within rounding of the
// threshold may be kept on one side only (vec.h, "Arithmetic"). Synchronises `stream` once, to read the column
// count; throws like the host builder on bad parameters, kUnsupported for shapes
// builds_vec_on_device refuses. With a head selection, shape.heads must equal its size.
DevicePlan build_vec_plan_on_device(const PatternSpec& resolved_spec, const PlanShape& shape,
                                    const EstimateOperands& operands, void* stream);

}  // namespace mmsparse::cuda
