#pragma once
// The sections of a per-head config (config_builder.h) as the host orchestration
// (config_builder.cu) groups and builds them and the concatenation (config_assembly.cu) reads
// them.

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "cuda/runtime/engine.h"
#include "methods/device_builder.h"
#include "methods/estimate/index_builders.h"
#include "mmsparse/patterns.h"
#include "mmsparse/plan.h"

namespace mmsparse::cuda {

// Query heads of one section, passed to the kernels by value (as the estimate's selection).
inline constexpr int64_t kMaxSectionHeads = kMaxSelectedHeads;
// Mask policies of one device section, passed to the kernels by value (tri-shape uses two).
inline constexpr int kMaxSectionMasks = 2;

// One builder's heads and, once built, its plan.
struct Section {
  const detail::DeviceBuilder* builder = nullptr;  // null: the host section
  PatternSpec spec;                                // resolved: the first head's
  std::vector<int32_t> heads;                      // ascending query heads
  // Each head's resolved spec: the host section's differ; a device section's differ at most in
  // its builder's per-head parameters (DeviceBuilder::per_head_params).
  std::vector<PatternSpec> specs;
  DevicePlan plan;
  int64_t runs = 0;                       // run records (host: the real ones; grid: the capacity)
  int64_t max_slot_tiles = 0;             // the most tiles one head slot has
  std::vector<int32_t> masks;             // device sections: global index of each section mask
  std::vector<double> host_slot_seconds;  // host section: each slot's build on the host clock

  bool on_host() const { return builder == nullptr; }
  // One head slot built and replicated onto every slot of the section's heads.
  bool replicated() const { return builder != nullptr && builder->replicates_one_head(); }
};

// The concatenation's plan buffer and sizes (config_builder.cu decides them).
struct ConfigTarget {
  std::byte* base = nullptr;  // device buffer of `layout`, zeroed up to its spans
  DevicePlanLayout layout{};
  int64_t tiles = 0;           // every section's tiles, replicated ones once per slot
  int64_t max_slot_tiles = 0;  // the most tiles one head slot has, over the sections
};

// Copies every section's records into `target` at their rebased places (with the key orders and
// span shifts of a section that has them, where target.layout has_key_orders: the host section,
// the only one), writes the global mask table `masks`, and sorts the schedule (heaviest first)
// over all tiles; asynchronous on `stream`.
void assemble_sections(const std::vector<Section>& sections, const PlanShape& shape,
                       const std::vector<MaskPolicy>& masks, const ConfigTarget& target,
                       cudaStream_t stream);

}  // namespace mmsparse::cuda
