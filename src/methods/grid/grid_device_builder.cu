// The grid head's device builder (methods/device_builder.h) over build_grid_plan_on_device: the
// stride search on the last-q estimate of device q and k, then the grid's tiles.

#include "methods/device_builder.h"
#include "methods/estimate/index_builders.h"
#include "methods/grid/grid.h"

namespace mmsparse::detail {
namespace {

// The stride found decides how many runs and tiles a head slot gets, so the plan's runs and tiles
// are capacities (sized for the worst candidate stride): each slot's real tiles first, empty
// tiles after all of them.
class GridDeviceBuilder final : public DeviceBuilder {
 public:
  bool estimates() const override { return true; }
  bool replicates_one_head() const override { return false; }
  bool builds(const PatternSpec& resolved_spec, const PlanShape& shape,
              const ModalityLayout* layout) const override {
    return cuda::builds_grid_on_device(resolved_spec, shape, layout);
  }
  DeviceSection build(const PatternSpec& resolved_spec, const PlanShape& shape,
                      const ModalityLayout* layout, const cuda::EstimateOperands* operands,
                      void* stream) const override {
    DeviceSection section;
    // The real counts live on the device; the section is sized by the build's capacities.
    cuda::GridPlanCapacities capacities;
    section.plan = cuda::build_grid_plan_on_device(resolved_spec, shape, layout, *operands, stream,
                                                   nullptr, &capacities);
    section.max_slot_tiles = capacities.tiles_per_head;
    section.runs = capacities.runs;
    return section;
  }
  std::vector<MaskPolicy> mask_policies(const PatternSpec&, const PlanShape& shape) const override {
    return estimated_plan_masks(shape);
  }
};

const RegisteredDeviceBuilder<GridDeviceBuilder> kBuilder(grid_entry());

}  // namespace
}  // namespace mmsparse::detail
