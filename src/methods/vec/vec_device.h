#pragma once
// VecAttention's plan built on the GPU from device q and k (vec.h defines the selection and its
// arithmetic; the kernels pool as the host does and score on tensor cores, so their kept keys
// equal the host's except within rounding of the threshold). Plain C++: no CUDA types.
//
// Passes (vec_device.cu): the pooled queries; one score pass of TilingSelect + minS that stores a
// 16-bit keep mask per (pooled block, key tile of 16); a run pass over the masks that cuts each
// plan tile's keys (its blocks' masks ORed: vec.h, "Plan tiles") into runs (vec.h: spans and
// columns) and counts them; exclusive sums of both; one read of the two totals back to the host,
// which sizes the plan buffer exactly; the tile, mask and schedule records; the run pass again,
// writing each tile's spans and columns, ascending. Memory: the plan (O(selected records)) and one
// bit per (pooled block, key) of scratch. Deterministic: no atomic decides where a record goes.

#include <cstdint>
#include <vector>

#include "cuda/runtime/engine.h"
#include "methods/estimate/index_builders.h"
#include "mmsparse/patterns.h"
#include "mmsparse/plan.h"

namespace mmsparse::cuda {

// The score pass's kernel: mma.sync fragments per warp (any head_dim up to 128), or warpgroup MMAs
// with both operands in shared memory (head_dim 128 on sm_90). The same selection within the
// rounding bound of vec.h's "Arithmetic".
enum class VecScorePass { kMma, kWgmma };

// The environment variable that picks the score pass: "mma", "wgmma" or unset (wgmma where it is
// compiled for, else mma), so that one build can compare the two.
inline constexpr char kVecScorePassVariable[] = "MMSPARSE_VEC_SCORE";

// The score pass a build of this head_dim runs on the current device under kVecScorePassVariable.
// Throws kInvalidArgument naming the variable for another value, kUnsupported for "wgmma" where
// it is not compiled for (head_dim other than 128, or a device other than sm_90).
VecScorePass vec_score_pass(int64_t head_dim);
const char* vec_score_pass_name(VecScorePass pass);

// Stream milliseconds of each phase of one build, for benchmarks (bench/index_bench.cu): the
// build records an event between phases and synchronises once more at its end to read them.
struct VecBuildTimes {
  float scratch =
      0.0f;           // the scratch's allocation (stream-ordered; host time while the stream idles)
  float pool = 0.0f;  // the pooled queries
  float score = 0.0f;     // the score pass: scores, running maxima, keep masks
  float count = 0.0f;     // the run pass counting spans, columns and kept keys per tile
  float offsets = 0.0f;   // the exclusive sums and the two totals' copy to the host
  float host = 0.0f;      // the host's wait for the totals, and the plan's allocation
  float records = 0.0f;   // tile and mask records, schedule keys
  float write = 0.0f;     // the run pass writing spans and columns
  float schedule = 0.0f;  // the heaviest-first sort
  float total = 0.0f;     // first event to last
  VecScorePass score_pass = VecScorePass::kMma;  // the score pass that ran
};

// Whether build_vec_plan_on_device builds this resolved vec spec for the shape: a pooled block
// fits one tile (shape.tile_rows >= pooling) and there are keys. Other vec heads are built on the
// host.
bool builds_vec_on_device(const PatternSpec& resolved_spec, const PlanShape& shape);

// The plan build_plan(resolved_spec, shape, nullptr, inputs) builds, record for record as the
// upload writes it (RecordForm::kAsDeviceBuilders), except that keys within rounding of the
// threshold may be kept on one side only (vec.h, "Arithmetic"). Synchronises `stream` once, to
// read the column and span counts; throws like the host builder on bad parameters, kUnsupported for
// shapes builds_vec_on_device refuses. With a head selection, shape.heads must equal its size.
// `times`, when not null, receives the phases' stream times (and costs one more synchronisation).
DevicePlan build_vec_plan_on_device(const PatternSpec& resolved_spec, const PlanShape& shape,
                                    const EstimateOperands& operands, void* stream,
                                    VecBuildTimes* times = nullptr);
// The same for heads whose specs differ in alpha_ppm only: the query heads of `shape` (the
// operands' heads) use resolved_specs[h] each (or all the one spec given), in one build, with one
// synchronisation: the per-head config's section of vec heads. At most kMaxSelectedHeads specs.
DevicePlan build_vec_plan_on_device(const std::vector<PatternSpec>& resolved_specs,
                                    const PlanShape& shape, const EstimateOperands& operands,
                                    void* stream, VecBuildTimes* times = nullptr);

}  // namespace mmsparse::cuda
