// Routing heads to their methods' device builders (methods/device_builder.h); CUDA builds only.

#include "methods/device_builder.h"

namespace mmsparse::detail {

const DeviceBuilder* device_builder_for(const PatternSpec& resolved_spec, const PlanShape& shape,
                                        const ModalityLayout* layout, bool device_inputs) {
  const PatternEntry* entry = find_pattern_entry(resolved_spec.name);
  if (entry == nullptr || entry->device == nullptr) return nullptr;
  const DeviceBuilder& builder = *entry->device;
  if (builder.estimates() && !device_inputs) return nullptr;
  return builder.builds(resolved_spec, shape, layout) ? &builder : nullptr;
}

std::vector<MaskPolicy> estimated_plan_masks(const PlanShape& shape) {
  if (shape.q_len == 0) return {};
  return {MaskPolicy{}};  // causal, PlanBuilder's default
}

}  // namespace mmsparse::detail
