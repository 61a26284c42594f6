// The static patterns' device builder (methods/device_builder.h) over build_static_plan_on_device,
// attached to the entries of dense, a-shape, tri-shape, sf-fixed and sf-strided.

#include "methods/device_builder.h"
#include "methods/static/static_device.h"
#include "methods/static/static_patterns.h"

namespace mmsparse::detail {
namespace {

// The shape alone decides every record, and every head slot is the same.
class StaticDeviceBuilder final : public ReplicatedDeviceBuilder {
 public:
  std::vector<MaskPolicy> mask_policies(const PatternSpec& resolved_spec,
                                        const PlanShape& shape) const override {
    return cuda::static_plan_masks(resolved_spec, shape);
  }

 protected:
  cuda::DevicePlan build_plan(const PatternSpec& resolved_spec, const PlanShape& shape,
                              const ModalityLayout*, void* stream, int64_t*) const override {
    return cuda::build_static_plan_on_device(resolved_spec, shape, stream);  // no runs: identity
  }
};

// One builder for the static patterns of one pass (grid-mask builds on the host).
const RegisteredDeviceBuilder<StaticDeviceBuilder> kBuilder(
    static_pattern_entry(StaticPattern::kDense), static_pattern_entry(StaticPattern::kAShape),
    static_pattern_entry(StaticPattern::kTriShape), static_pattern_entry(StaticPattern::kSfFixed),
    static_pattern_entry(StaticPattern::kSfStrided));

}  // namespace
}  // namespace mmsparse::detail
