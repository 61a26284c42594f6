// Vertical-slash's device builder (methods/device_builder.h) over build_dynamic_plan_on_device:
// the last-q estimate of device q and k, the line selection and the conversion to tiles.

#include "methods/device_builder.h"
#include "methods/estimate/index_builders.h"
#include "methods/estimate/index_kernels.h"
#include "methods/vertical_slash/vertical_slash.h"

namespace mmsparse::detail {
namespace {

// The tile count follows from the shape and the query groups; spans and columns are capacities.
class VerticalSlashDeviceBuilder final : public DeviceBuilder {
 public:
  bool estimates() const override { return true; }
  bool replicates_one_head() const override { return false; }
  bool builds(const PatternSpec& resolved_spec, const PlanShape& shape,
              const ModalityLayout* layout) const override {
    return cuda::builds_dynamic_on_device(resolved_spec, shape, layout);
  }
  DeviceSection build(const PatternSpec& resolved_spec, const PlanShape& shape,
                      const ModalityLayout* layout, const cuda::EstimateOperands* operands,
                      void* stream) const override {
    DeviceSection section;
    section.plan =
        cuda::build_dynamic_plan_on_device(resolved_spec, shape, layout, *operands, stream);
    const int64_t slots = shape.head_slots();
    section.max_slot_tiles = slots > 0 ? section.plan.num_tiles() / slots : 0;
    // A Q-boundary head's query order (the same runs for every slot).
    section.runs = cuda::index::plan_vertical_slash(resolved_spec, shape, layout).runs();
    return section;
  }
  std::vector<MaskPolicy> mask_policies(const PatternSpec&, const PlanShape& shape) const override {
    return estimated_plan_masks(shape);
  }
};

const RegisteredDeviceBuilder<VerticalSlashDeviceBuilder> kBuilder(vertical_slash_entry());

}  // namespace
}  // namespace mmsparse::detail
