// BlindSight's device builder (methods/device_builder.h) over build_blindsight_plan_on_device,
// attached to the four templates' entries; heads whose image tiles read a key order
// (permutes_keys) are built on the host.

#include "methods/blindsight/blindsight.h"
#include "methods/blindsight/blindsight_device.h"
#include "methods/blindsight/blindsight_geometry.h"
#include "methods/device_builder.h"

namespace mmsparse::detail {
namespace {

// The spec and the layout decide every record, and every head slot is the same. The masks' order
// follows the layout (a prompt that starts with an image uses the image mask first).
class BlindSightDeviceBuilder final : public ReplicatedDeviceBuilder {
 public:
  // Plans with key orders are built on the host and uploaded: they are small (a few spans a tile,
  // no columns), and the device builder writes in-place plans only.
  bool builds(const PatternSpec& resolved_spec, const PlanShape&,
              const ModalityLayout* layout) const override {
    return !permutes_keys(resolved_spec, layout);
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

 protected:
  // Its query order (images, then text) has runs unless that is the identity.
  cuda::DevicePlan build_plan(const PatternSpec& resolved_spec, const PlanShape& shape,
                              const ModalityLayout* layout, void* stream,
                              int64_t* runs) const override {
    return cuda::build_blindsight_plan_on_device(resolved_spec, shape, layout, stream, runs);
  }
};

const RegisteredDeviceBuilder<BlindSightDeviceBuilder> kBuilder(
    blindsight_entry(BlindSightMask::kDense), blindsight_entry(BlindSightMask::kSink),
    blindsight_entry(BlindSightMask::kIntra), blindsight_entry(BlindSightMask::kIntraSink));

}  // namespace
}  // namespace mmsparse::detail
