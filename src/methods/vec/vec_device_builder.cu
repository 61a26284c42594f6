// VecAttention's device builder (methods/device_builder.h) over build_vec_plan_on_device.

#include <string>
#include <vector>

#include "methods/device_builder.h"
#include "methods/vec/vec.h"
#include "methods/vec/vec_device.h"

namespace mmsparse::detail {
namespace {

// One tile per pooled block or per plan-height run of them (vec_tile_count), so the tile count
// follows from the shape; spans and columns are counted on the device before the buffer is sized.
class VecDeviceBuilder final : public DeviceBuilder {
 public:
  bool estimates() const override { return true; }
  bool replicates_one_head() const override { return false; }
  bool builds(const PatternSpec& resolved_spec, const PlanShape& shape,
              const ModalityLayout*) const override {
    return cuda::builds_vec_on_device(resolved_spec, shape);
  }
  DeviceSection build(const PatternSpec& resolved_spec, const PlanShape& shape,
                      const ModalityLayout* layout, const cuda::EstimateOperands* operands,
                      void* stream) const override {
    return build_heads({resolved_spec}, shape, layout, operands, stream);
  }
  // A config's vec heads differ in alpha only (the searched per-head alphas): one build, one
  // synchronisation for all of them.
  std::vector<std::string> per_head_params() const override { return {"alpha_ppm"}; }
  DeviceSection build_heads(const std::vector<PatternSpec>& head_specs, const PlanShape& shape,
                            const ModalityLayout*, const cuda::EstimateOperands* operands,
                            void* stream) const override {
    DeviceSection section;
    section.plan = cuda::build_vec_plan_on_device(head_specs, shape, *operands, stream);
    section.max_slot_tiles = vec_tile_count(shape, vec_params(head_specs.front()));
    return section;
  }
  // It reads the span and column totals back to size the plan.
  bool waits_for_device() const override { return true; }
  std::vector<MaskPolicy> mask_policies(const PatternSpec& resolved_spec,
                                        const PlanShape& shape) const override {
    if (shape.q_len == 0) return {};
    return {vec_mask(vec_params(resolved_spec))};
  }
};

const RegisteredDeviceBuilder<VecDeviceBuilder> kBuilder(vec_entry());

}  // namespace
}  // namespace mmsparse::detail
