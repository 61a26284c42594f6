#pragma once
// A method's device builder: builds the plan of a resolved spec into a cuda::DevicePlan with
// kernels, as a whole plan (prepare_pattern) or as one section of a per-head config
// (cuda/runtime/config_builder.h), and tells the concatenation what it needs besides the records.
// Plain C++ (streams are cudaStream_t passed as void*), so that host code may hold and query one.
//
// Registration. The registry entry (methods/registry.h) owns the builder through its `device`
// slot. The method's device file, compiled only in CUDA builds (the DEVICE sources of
// mmsparse_method_sources), defines the builder and one RegisteredDeviceBuilder naming its entries
// through the functions of the method's own header that return them:
//
//   const RegisteredDeviceBuilder<VecDeviceBuilder> kBuilder(vec_entry());
//
// Nothing references that object file; it lives in the mmsparse_cuda library, which consumers link
// whole (mmsparse::cuda, src/CMakeLists.txt), so the registration is kept. A CPU-only build
// compiles no device file: every slot stays null and every head is built on the host.
//
// Contract (docs/adding-a-method.md): every record of the plan equals the upload of the host
// builder's plan (build_plan), except where the method's data-dependent sections are sized as
// capacities (index_builders.h): spans and columns then hold the real records at their front, and
// a builder whose tile count is data-dependent stores each head slot's real tiles slot by slot,
// followed by empty tiles (no rows) that belong to no head slot.

#include <concepts>
#include <cstdint>
#include <string>
#include <vector>

#include "cuda/runtime/engine.h"
#include "methods/estimate/index_builders.h"
#include "methods/registry.h"
#include "mmsparse/layout.h"
#include "mmsparse/patterns.h"
#include "mmsparse/plan.h"

namespace mmsparse::detail {

// A device-built plan and what the concatenation of a per-head config needs besides its records.
struct DeviceSection {
  cuda::DevicePlan plan;
  // Run records the concatenation copies: 0 for the identity query order, the real count or, where
  // it is data-dependent, the capacity.
  int64_t runs = 0;
  // The most tiles one head slot has (the capacity where it is data-dependent): sizes the position
  // field of the schedule's sort keys.
  int64_t max_slot_tiles = 0;
};

class DeviceBuilder {
 public:
  virtual ~DeviceBuilder() = default;

  // Whether the builder estimates from device q and k (cuda::EstimateOperands); false: the spec
  // and the shape alone decide the plan.
  virtual bool estimates() const = 0;
  // Whether every head slot of its plan is the same, so that a per-head config builds one head
  // slot (batch 1, heads 1) and replicates it onto every slot of the heads that share the spec.
  virtual bool replicates_one_head() const = 0;
  // Whether it builds a head of `resolved_spec` (a spec of its entry) for this shape and layout,
  // given device q and k when estimates(). Specs whose layout does not suit them answer true, so
  // that the build reports the layout's error.
  virtual bool builds(const PatternSpec& resolved_spec, const PlanShape& shape,
                      const ModalityLayout* layout) const = 0;
  // The plan of every head slot of `shape`. `operands`: when estimates(), device q and k of the
  // shape's query heads (select_heads restricts them to a section's heads), else null. Throws like
  // the host builder on bad parameters, shapes and layouts; asynchronous on `stream`.
  virtual DeviceSection build(const PatternSpec& resolved_spec, const PlanShape& shape,
                              const ModalityLayout* layout, const cuda::EstimateOperands* operands,
                              void* stream) const = 0;
  // Parameters whose values may differ between the heads of one build (build_heads): a per-head
  // config builds the heads whose specs differ only in these as one section. They must not change
  // the mask policies. Empty: only heads of equal specs share a section.
  virtual std::vector<std::string> per_head_params() const { return {}; }
  // The plan of every head slot of `shape`, query head h built with head_specs[h] (specs that
  // differ only in per_head_params()); otherwise as build(). Builders without per-head
  // parameters get equal specs and build the first.
  virtual DeviceSection build_heads(const std::vector<PatternSpec>& head_specs,
                                    const PlanShape& shape, const ModalityLayout* layout,
                                    const cuda::EstimateOperands* operands, void* stream) const {
    return build(head_specs.front(), shape, layout, operands, stream);
  }
  // Whether build() waits for the device (a readback that sizes the plan): a per-head config
  // queues such sections after the others, so that the wait does not hold back their launches.
  virtual bool waits_for_device() const { return false; }
  // The mask policies every head slot of that plan uses, in first-use order (PlanBuilder's
  // numbering); the same for every slot.
  virtual std::vector<MaskPolicy> mask_policies(const PatternSpec& resolved_spec,
                                                const PlanShape& shape) const = 0;
  // The same for the plan over `layout`, which the per-head config builder asks for: builders
  // whose tiles follow the layout (BlindSight: a prompt that starts with an image uses its image
  // mask first) override it; the others' masks do not depend on it.
  virtual std::vector<MaskPolicy> mask_policies_for_layout(const PatternSpec& resolved_spec,
                                                           const PlanShape& shape,
                                                           const ModalityLayout* layout) const {
    (void)layout;
    return mask_policies(resolved_spec, shape);
  }
};

// The builder of a method whose plan needs no device q and k (the spec, the shape and the layout
// decide it) and is the same for every head slot, so a per-head config builds one slot and
// replicates it. The method supplies the plan and its masks (mask_policies, and
// mask_policies_for_layout where their order follows the layout).
class ReplicatedDeviceBuilder : public DeviceBuilder {
 public:
  bool estimates() const final { return false; }
  bool replicates_one_head() const final { return true; }
  bool builds(const PatternSpec&, const PlanShape&, const ModalityLayout*) const override {
    return true;
  }
  DeviceSection build(const PatternSpec& resolved_spec, const PlanShape& shape,
                      const ModalityLayout* layout, const cuda::EstimateOperands*,
                      void* stream) const final {
    DeviceSection section;
    section.plan = build_plan(resolved_spec, shape, layout, stream, &section.runs);
    // Every head slot holds the same number of tiles.
    const int64_t slots = shape.head_slots();
    section.max_slot_tiles = slots > 0 ? section.plan.num_tiles() / slots : 0;
    return section;
  }

 protected:
  // The plan of every head slot of `shape`, asynchronous on `stream`. `runs`: set to its run
  // record count where its query order is not the identity; left at 0 where it is.
  virtual cuda::DevicePlan build_plan(const PatternSpec& resolved_spec, const PlanShape& shape,
                                      const ModalityLayout* layout, void* stream,
                                      int64_t* runs) const = 0;
};

// Owns one `Builder` and attaches it to every entry given during static initialisation (see
// above), so that one method's builder may serve several entries (the static patterns, the
// BlindSight templates). Entries keep its address: it is neither copied nor moved.
template <std::derived_from<DeviceBuilder> Builder>
class RegisteredDeviceBuilder {
 public:
  template <std::same_as<PatternEntry>... Entries>
  explicit RegisteredDeviceBuilder(Entries&... entries) {
    static_assert(sizeof...(entries) > 0, "name the entries the builder serves");
    ((entries.device = &builder_), ...);
  }
  RegisteredDeviceBuilder(const RegisteredDeviceBuilder&) = delete;
  RegisteredDeviceBuilder& operator=(const RegisteredDeviceBuilder&) = delete;

 private:
  Builder builder_;
};

// The builder that builds a head of `resolved_spec` on the device, or null when the head is built
// on the host: its entry has no device builder, the builder estimates and `device_inputs` is false
// (no device q and k at hand), or it does not build this spec for this shape and layout.
const DeviceBuilder* device_builder_for(const PatternSpec& resolved_spec, const PlanShape& shape,
                                        const ModalityLayout* layout, bool device_inputs);

// The mask policies of an estimated plan: PlanBuilder's default (causal) wherever it has tiles.
std::vector<MaskPolicy> estimated_plan_masks(const PlanShape& shape);

}  // namespace mmsparse::detail
