// The static patterns' device builder (methods/device_builder.h) over build_static_plan_on_device,
// attached to the entries of dense, a-shape, tri-shape, sf-fixed and sf-strided.

#include "methods/device_builder.h"
#include "methods/static/static_device.h"
#include "methods/static/static_patterns.h"

namespace mmsparse::detail {
namespace {

// The shape alone decides every record, and every head slot is the same.
class StaticDeviceBuilder final : public DeviceBuilder {
 public:
  bool estimates() const override { return false; }
  bool replicates_one_head() const override { return true; }
  bool builds(const PatternSpec&, const PlanShape&, const ModalityLayout*) const override {
    return true;
  }
  DeviceSection build(const PatternSpec& resolved_spec, const PlanShape& shape,
                      const ModalityLayout*, const cuda::EstimateOperands*,
                      void* stream) const override {
    DeviceSection section;
    section.plan = cuda::build_static_plan_on_device(resolved_spec, shape, stream);
    const int64_t slots = shape.head_slots();
    section.max_slot_tiles = slots > 0 ? section.plan.num_tiles() / slots : 0;
    return section;  // the identity query order: no runs
  }
  std::vector<MaskPolicy> mask_policies(const PatternSpec& resolved_spec,
                                        const PlanShape& shape) const override {
    return cuda::static_plan_masks(resolved_spec, shape);
  }
};

const StaticDeviceBuilder kBuilder;

// One builder for the static patterns of one pass (grid-mask builds on the host).
const DeviceBuilderRegistration kRegistrations[] = {
    {static_pattern_entry(StaticPattern::kDense), kBuilder},
    {static_pattern_entry(StaticPattern::kAShape), kBuilder},
    {static_pattern_entry(StaticPattern::kTriShape), kBuilder},
    {static_pattern_entry(StaticPattern::kSfFixed), kBuilder},
    {static_pattern_entry(StaticPattern::kSfStrided), kBuilder},
};

}  // namespace
}  // namespace mmsparse::detail
