#pragma once
// A per-head config of one layer (every query head its own pattern, docs/search.md) built into one
// DevicePlan on the GPU: each builder on its head subset, then the sections concatenated with
// rebased offsets and one heaviest-first schedule over all tiles (docs/index_builders.md, "Mixed
// heads"). The result equals, record for record, the upload of build_plan(specs, shape, layout,
// inputs); as for vertical-slash alone, the spans and columns sections are sized for the most the
// shape and budgets allow, the real records packed at their front. With grid heads built on the
// device the runs and tiles sections are capacities too (as a grid plan's, index_builders.h): the
// real tiles of every head slot first, then empty tiles (no rows, no keys) scheduled last.
//
// Sections: one per distinct spec whose method's device builder builds it
// (methods/device_builder.h, detail::device_builder_for): a replicating builder (the static
// patterns) for a single head slot, replicated onto every head slot that uses the spec; an
// estimating one (vertical-slash, grid) from device q and k over just its query heads. Every other
// head (one a device builder does not take for its shape and layout, or a dynamic head without
// device inputs) is built in one host section and uploaded; its key orders (plan.h), which only
// host-built heads have, are carried into the concatenation, so the engine copies K and V once per
// order for the whole layer.
// Only the host section reads host memory; the device sections and the concatenation take their
// sizes from the shape and the budgets, with no host synchronisation.

#include <memory>
#include <vector>

#include "cuda/runtime/engine.h"
#include "methods/estimate/index_builders.h"
#include "mmsparse/attention.h"
#include "mmsparse/patterns.h"
#include "mmsparse/plan.h"

namespace mmsparse::cuda {

struct ConfigInputs {
  const ModalityLayout* layout = nullptr;    // host-built heads' layout (boundary modes)
  const EstimateOperands* device = nullptr;  // device q and k for heads estimated on the GPU
  const PatternInputs* host = nullptr;       // host q and k for dynamic heads built on the host
};

// GPU events around each section's build and the concatenation.
class ConfigBuildTimer;

struct ConfigBuild {
  DevicePlan plan;
  std::shared_ptr<const ConfigBuildTimer> timer;
  bool estimated_on_device = false;  // some head's lines were estimated on the GPU
  // The plan's mask table (tile records index it): build_plan's for the same specs.
  std::vector<MaskPolicy> masks;
};

// `resolved_specs`: one per query head (resolve_pattern's output). Throws naming the argument on a
// bad count, head count or spec; kUnsupported naming the head when a dynamic head needs inputs
// that were not given. Asynchronous on `stream` (cudaStream_t), except the host section's build.
ConfigBuild build_config_plan_on_device(const std::vector<PatternSpec>& resolved_specs,
                                        const PlanShape& shape, const ConfigInputs& inputs,
                                        void* stream);

// How long each head slot's builder took (its share of a section) and the concatenation; waits for
// the build to finish on the device.
PlanBuildTimes config_build_times(const ConfigBuildTimer& timer);

}  // namespace mmsparse::cuda
