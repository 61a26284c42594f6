// BlindSight's device builder (methods/device_builder.h) over build_blindsight_plan_on_device,
// attached to the four templates' entries.

#include "methods/blindsight/blindsight.h"
#include "methods/blindsight/blindsight_device.h"
#include "methods/blindsight/blindsight_geometry.h"
#include "methods/device_builder.h"

namespace mmsparse::detail {
namespace {

// The spec and the layout decide every record, and every head slot is the same. The masks' order
// follows the layout (a prompt that starts with an image uses the image mask first).
class BlindSightDeviceBuilder final : public DeviceBuilder {
 public:
  bool estimates() const override { return false; }
  bool replicates_one_head() const override { return true; }
  bool builds(const PatternSpec&, const PlanShape&, const ModalityLayout*) const override {
    return true;
  }
  DeviceSection build(const PatternSpec& resolved_spec, const PlanShape& shape,
                      const ModalityLayout* layout, const cuda::EstimateOperands*,
                      void* stream) const override {
    DeviceSection section;
    // Its query order (images, then text) has runs unless that is the identity.
    section.plan = cuda::build_blindsight_plan_on_device(resolved_spec, shape, layout, stream,
                                                         &section.runs);
    const int64_t slots = shape.head_slots();
    section.max_slot_tiles = slots > 0 ? section.plan.num_tiles() / slots : 0;
    return section;
  }
  std::vector<MaskPolicy> mask_policies(const PatternSpec& resolved_spec,
                                        const PlanShape& shape) const override {
    return mask_policies_for_layout(resolved_spec, shape, nullptr);
  }
  std::vector<MaskPolicy> mask_policies_for_layout(const PatternSpec& resolved_spec,
                                                   const PlanShape& shape,
                                                   const ModalityLayout* layout) const override {
    return blindsight_geometry(resolved_spec, shape, layout).masks;
  }
};

const BlindSightDeviceBuilder kBuilder;

const DeviceBuilderRegistration kRegistrations[] = {
    {blindsight_entry(BlindSightMask::kDense), kBuilder},
    {blindsight_entry(BlindSightMask::kSink), kBuilder},
    {blindsight_entry(BlindSightMask::kIntra), kBuilder},
    {blindsight_entry(BlindSightMask::kIntraSink), kBuilder},
};

}  // namespace
}  // namespace mmsparse::detail
