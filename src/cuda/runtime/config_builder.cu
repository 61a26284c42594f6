// A per-head config built into one DevicePlan (config_builder.h): the host orchestration. The
// steps, on the caller's stream unless said otherwise:
//   host:    group the heads into sections by their methods' device builders
//            (methods/device_builder.h; one section per distinct device-built spec up to the
//            builder's per-head parameters, the rest in one host section), the global mask table
//            (PlanBuilder's first-use order over head slots), the concatenated layout from the
//            sections' sizes
//   device:  each device section's builder (a replicated one, e.g. a static pattern, on one head
//            slot; an estimating one on its heads' estimate), each on a stream of its own forked
//            from the caller's, joined back before the concatenation
//   host:    the host section (PlanBuilder over its heads, masks renumbered to the global table),
//            uploaded
//   device:  the concatenation (config_assembly.cu): every section's records at their rebased
//            places and one heaviest-first schedule over all tiles.

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cuda/common/cuda_check.h"
#include "cuda/common/forked_streams.h"
#include "cuda/runtime/config_builder.h"
#include "cuda/runtime/config_sections.h"
#include "cuda/runtime/plan_view.cuh"
#include "methods/device_builder.h"
#include "methods/registry.h"
#include "mmsparse/status.h"

namespace mmsparse::cuda {

class ConfigBuildTimer {
 public:
  ConfigBuildTimer() = default;
  ~ConfigBuildTimer() {
    // Destructors cannot report errors; a failed destroy leaks an event.
    for (cudaEvent_t event : events_) cudaEventDestroy(event);
  }
  ConfigBuildTimer(const ConfigBuildTimer&) = delete;
  ConfigBuildTimer& operator=(const ConfigBuildTimer&) = delete;

  // Records an event on `stream` and returns its index.
  std::size_t record(cudaStream_t stream) {
    cudaEvent_t event = nullptr;
    check_cuda(cudaEventCreate(&event), "prepare_pattern config: cudaEventCreate");
    events_.push_back(event);
    check_cuda(cudaEventRecord(event, stream), "prepare_pattern config: cudaEventRecord");
    return events_.size() - 1;
  }
  double seconds_between(std::size_t first, std::size_t last) const {
    float milliseconds = 0.0f;
    check_cuda(cudaEventElapsedTime(&milliseconds, events_[first], events_[last]),
               "prepare_pattern config: cudaEventElapsedTime");
    return static_cast<double>(milliseconds) / kMillisecondsPerSecond;
  }
  void wait() const {
    if (!events_.empty()) {
      check_cuda(cudaEventSynchronize(events_.back()),
                 "prepare_pattern config: cudaEventSynchronize");
    }
  }

  // Per global head slot: built on the device, and the event interval or host seconds of its
  // section divided among the section's slots.
  struct SlotSource {
    bool on_device = false;
    std::size_t first_event = 0, last_event = 0;
    int64_t section_slots = 1;
    double host_seconds = 0.0;
  };
  std::vector<SlotSource> slots;
  std::size_t assembly_first = 0, assembly_last = 0;

 private:
  static constexpr double kMillisecondsPerSecond = 1000.0;
  std::vector<cudaEvent_t> events_;
};

PlanBuildTimes config_build_times(const ConfigBuildTimer& timer) {
  timer.wait();
  PlanBuildTimes times;
  for (const ConfigBuildTimer::SlotSource& source : timer.slots) {
    HeadBuildTime head;
    head.on_device = source.on_device;
    head.seconds = source.on_device ? timer.seconds_between(source.first_event, source.last_event) /
                                          static_cast<double>(source.section_slots)
                                    : source.host_seconds;
    times.heads.push_back(head);
  }
  times.assembly_seconds = timer.seconds_between(timer.assembly_first, timer.assembly_last);
  return times;
}

namespace {

void check_section_sizes(const std::vector<Section>& sections, const Section& host) {
  for (const Section& section : sections) {
    if (static_cast<int64_t>(section.heads.size()) > kMaxSectionHeads) {
      throw Error(ErrorCode::kUnsupported,
                  "prepare_pattern specs: at most " + std::to_string(kMaxSectionHeads) +
                      " query heads share a device-built spec, got " +
                      std::to_string(section.heads.size()) + " with " + section.spec.to_string());
    }
  }
  if (static_cast<int64_t>(host.heads.size()) > kMaxSectionHeads) {
    throw Error(ErrorCode::kUnsupported,
                "prepare_pattern specs: at most " + std::to_string(kMaxSectionHeads) +
                    " query heads are built on the host, got " + std::to_string(host.heads.size()));
  }
}

// The part of a spec that heads must share to be built as one section: the spec without the
// parameters its builder takes per head (each head's own spec stays in Section::specs).
std::string section_key(const PatternSpec& spec, const detail::DeviceBuilder& builder) {
  PatternSpec shared = spec;
  for (const std::string& param : builder.per_head_params()) shared.params.erase(param);
  return shared.to_string();
}

// Heads grouped into sections: heads with a device builder by spec (up to the builder's per-head
// parameters), the rest into one host section (last).
std::vector<Section> group_heads(const std::vector<PatternSpec>& specs, const PlanShape& shape,
                                 const ModalityLayout* layout, bool device_inputs) {
  std::vector<Section> sections;
  std::map<std::string, std::size_t> by_spec;
  // Each distinct spec asks for its builder once: a grid builder's answer plans the head
  // (query groups, item sinks, capacities), which a config's heads of one spec would repeat.
  std::map<std::string, const detail::DeviceBuilder*> builder_of;
  Section host;
  for (std::size_t h = 0; h < specs.size(); ++h) {
    const PatternSpec& spec = specs[h];
    const auto head = static_cast<int32_t>(h);
    const auto [known, first_time] = builder_of.emplace(spec.to_string(), nullptr);
    if (first_time) known->second = detail::device_builder_for(spec, shape, layout, device_inputs);
    const detail::DeviceBuilder* builder = known->second;
    if (builder == nullptr) {
      host.heads.push_back(head);
      host.specs.push_back(spec);
      continue;
    }
    const auto [entry, added] = by_spec.emplace(section_key(spec, *builder), sections.size());
    if (added) {
      Section section;
      section.builder = builder;
      section.spec = spec;
      sections.push_back(std::move(section));
    }
    sections[entry->second].heads.push_back(head);
    sections[entry->second].specs.push_back(spec);
  }
  check_section_sizes(sections, host);
  if (!host.heads.empty()) sections.push_back(std::move(host));
  return sections;
}

PlanShape section_shape(const PlanShape& shape, const Section& section) {
  PlanShape result = shape;
  if (section.replicated()) {
    result.batch = 1;  // every head slot of the spec is the same: built once, replicated
    result.heads = 1;
  } else {
    result.heads = static_cast<int64_t>(section.heads.size());
  }
  return result;
}

// Calls visit(section slot, global head slot) for every head slot of the section's heads.
template <class Visit>
void for_each_slot(const Section& section, const PlanShape& shape, Visit&& visit) {
  const auto heads = static_cast<int64_t>(section.heads.size());
  for (int64_t q = 0; q < shape.batch * heads; ++q) {
    visit(q, q / heads * shape.heads + section.heads[static_cast<std::size_t>(q % heads)]);
  }
}

// Queues one device section's builder on `stream`, timed by events; returns whether it estimates.
bool build_device_section(Section& section, const PlanShape& shape, const ConfigInputs& inputs,
                          cudaStream_t stream, ConfigBuildTimer& timer) {
  const PlanShape local = section_shape(shape, section);
  const std::size_t first_event = timer.record(stream);
  const bool estimates = section.builder->estimates();
  std::optional<EstimateOperands> operands;
  if (estimates) operands = select_heads(section.spec.name, *inputs.device, section.heads);
  detail::DeviceSection built = section.builder->build_heads(
      section.specs, local, inputs.layout, operands ? &*operands : nullptr, stream);
  section.plan = std::move(built.plan);
  section.runs = built.runs;
  section.max_slot_tiles = built.max_slot_tiles;
  const std::size_t last_event = timer.record(stream);
  const auto shared_by = static_cast<int64_t>(section.heads.size()) * shape.batch;
  for_each_slot(section, shape, [&](int64_t, int64_t slot) {
    timer.slots[static_cast<std::size_t>(slot)] = {true, first_event, last_event, shared_by, 0.0};
  });
  return estimates;
}

// Queues every device section's builder on a stream of its own (they read only the inputs and
// write only their own plans); returns whether some section was estimated. Builders that wait for
// the device go last, so that their waits hold back no other section's launches.
bool build_device_sections(std::vector<Section>& sections, const PlanShape& shape,
                           const ConfigInputs& inputs, const ForkedStreams& streams,
                           ConfigBuildTimer& timer) {
  bool estimated = false;
  std::size_t next_stream = 0;
  for (const bool waits : {false, true}) {
    for (Section& section : sections) {
      if (section.on_host() || section.builder->waits_for_device() != waits) continue;
      estimated =
          build_device_section(section, shape, inputs, streams[next_stream++], timer) || estimated;
    }
  }
  return estimated;
}

// Builds the host section's plan head slot by head slot, timing each (host clock).
Plan build_host_section(Section& section, const PlanShape& shape, const ConfigInputs& inputs) {
  const PlanShape local = section_shape(shape, section);
  PlanBuilder builder(local);
  detail::StaticHeads statics;
  const auto heads = static_cast<int64_t>(section.heads.size());
  for (int64_t q = 0; q < local.head_slots(); ++q) {
    const std::size_t j = static_cast<std::size_t>(q % heads);
    const PatternSpec& spec = section.specs[j];
    if (is_dynamic(spec) && inputs.host == nullptr) {
      const std::string head = "prepare_pattern specs: head " + std::to_string(section.heads[j]) +
                               " (" + spec.to_string() + ")";
      throw Error(ErrorCode::kUnsupported,
                  detail::device_builder_for(spec, shape, inputs.layout, true) != nullptr
                      ? head +
                            " needs inputs: device q and k to estimate it on the GPU, or host "
                            "q and k (host_inputs) to build it on the host"
                      : head +
                            " is not built on the GPU; pass host q and k (host_inputs) to "
                            "build it on the host");
    }
    const auto start = std::chrono::steady_clock::now();
    if (detail::StaticHeads::serves(spec)) {
      statics.append(builder, spec, shape, inputs.layout);  // built once per spec
    } else {
      append_pattern_head(builder, spec, shape, inputs.layout, inputs.host,
                          q / heads * shape.heads + section.heads[j]);
    }
    section.host_slot_seconds.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return builder.finish();
}

// Builds the host section and records its slots' times, its most tiles per slot and its runs.
Plan build_and_time_host_section(Section& host, const PlanShape& shape, const ConfigInputs& inputs,
                                 ConfigBuildTimer& timer) {
  Plan plan = build_host_section(host, shape, inputs);
  for_each_slot(host, shape, [&](int64_t q, int64_t slot) {
    timer.slots[static_cast<std::size_t>(slot)].host_seconds =
        host.host_slot_seconds[static_cast<std::size_t>(q)];
  });
  for (int64_t q = 0; q < plan.head_slots(); ++q) {
    host.max_slot_tiles =
        std::max(host.max_slot_tiles, plan.head_tile_offsets[q + 1] - plan.head_tile_offsets[q]);
  }
  for (const QueryRun& run : plan.runs) host.runs += run.count > 0 ? 1 : 0;
  return plan;
}

// The mask policies head slot q of the host section uses, in first-use order.
std::vector<MaskPolicy> host_slot_masks(const Plan& host_plan, int64_t q) {
  std::vector<MaskPolicy> used;
  for (int64_t t = host_plan.head_tile_offsets[q]; t < host_plan.head_tile_offsets[q + 1]; ++t) {
    const MaskPolicy& policy = host_plan.masks[host_plan.tile_masks[t]];
    if (std::find(used.begin(), used.end(), policy) == used.end()) used.push_back(policy);
  }
  return used;
}

int32_t mask_index(std::vector<MaskPolicy>& table, const MaskPolicy& policy) {
  const auto found = std::find(table.begin(), table.end(), policy);
  if (found != table.end()) return static_cast<int32_t>(found - table.begin());
  table.push_back(policy);
  return static_cast<int32_t>(table.size() - 1);
}

// A device section's policies (all its slots use them in one order), checked to fit the kernels.
std::vector<MaskPolicy> device_section_masks(const Section& section, const PlanShape& shape,
                                             const ModalityLayout* layout) {
  std::vector<MaskPolicy> policies = section.builder->mask_policies_for_layout(
      section.spec, section_shape(shape, section), layout);
  if (static_cast<int64_t>(policies.size()) > kMaxSectionMasks) {
    throw Error(ErrorCode::kUnsupported,
                "prepare_pattern specs: at most " + std::to_string(kMaxSectionMasks) +
                    " mask policies per device-built spec, got " + std::to_string(policies.size()) +
                    " with " + section.spec.to_string());
  }
  return policies;
}

// The global mask table in PlanBuilder's first-use order over head slots; fills each device
// section's `masks` with the global indices of its policies.
std::vector<MaskPolicy> global_masks(std::vector<Section>& sections, const Plan& host_plan,
                                     const PlanShape& shape, const ModalityLayout* layout) {
  const auto slots = static_cast<std::size_t>(shape.head_slots());
  std::vector<int32_t> slot_section(slots);
  std::vector<int64_t> slot_local(slots);
  std::vector<std::vector<MaskPolicy>> section_policies;
  for (std::size_t s = 0; s < sections.size(); ++s) {
    for_each_slot(sections[s], shape, [&](int64_t q, int64_t slot) {
      slot_section[static_cast<std::size_t>(slot)] = static_cast<int32_t>(s);
      slot_local[static_cast<std::size_t>(slot)] = q;
    });
    section_policies.push_back(sections[s].on_host() ? std::vector<MaskPolicy>{}
                                                     : device_section_masks(sections[s], shape,
                                                                            layout));
  }
  std::vector<MaskPolicy> masks;
  for (std::size_t slot = 0; slot < slots; ++slot) {
    const auto s = static_cast<std::size_t>(slot_section[slot]);
    const std::vector<MaskPolicy> used =
        sections[s].on_host() ? host_slot_masks(host_plan, slot_local[slot]) : section_policies[s];
    for (const MaskPolicy& policy : used) (void)mask_index(masks, policy);
  }
  for (std::size_t s = 0; s < sections.size(); ++s) {
    for (const MaskPolicy& policy : section_policies[s]) {
      sections[s].masks.push_back(mask_index(masks, policy));
    }
  }
  return masks;
}

// Whether a policy of `masks` reads the token arrays (same-media, bidirectional images).
bool any_token_masks(const std::vector<MaskPolicy>& masks) {
  return std::any_of(masks.begin(), masks.end(),
                     [](const MaskPolicy& mask) { return mask.needs_token_arrays(); });
}

// The host section's plan, its masks renumbered to the global table, uploaded (with its key
// orders, which the concatenation carries: the device sections have none). The global table may
// hold token-reading policies of other sections (a device-built bidirectional head beside
// key-ordered ones whose own masks read no tokens); a plan holding such a policy must carry the
// token arrays to validate, so the host plan takes the layout's.
void upload_host_section(Section& host, Plan host_plan, const std::vector<MaskPolicy>& masks,
                         const ModalityLayout* layout, cudaStream_t stream) {
  std::vector<MaskPolicy> table = masks;
  for (int32_t& mask : host_plan.tile_masks) mask = mask_index(table, host_plan.masks[mask]);
  host_plan.masks = masks;
  if (any_token_masks(masks) && host_plan.token_modality.empty() && layout != nullptr) {
    host_plan.attach_layout(*layout);
  }
  host.plan = DevicePlan(host_plan, stream);
}

// Slots of the layer a section's records fill (a replicated section's head slot, once per slot).
int64_t section_copies(const Section& section, const PlanShape& shape) {
  return section.replicated() ? shape.batch * static_cast<int64_t>(section.heads.size()) : 1;
}

// Elements of a section of the buffer, from its byte extent (the capacity a builder sized).
int64_t capacity(std::size_t begin, std::size_t end, std::size_t element_bytes) {
  return static_cast<int64_t>((end - begin) / element_bytes);
}

// The concatenation's sizes, in the upload's section order (device_plan.cu), with the spans and
// columns at the sections' capacities.
struct ConfigSizes {
  DevicePlanLayout layout{};
  int64_t tiles = 0;
  int64_t column_capacity = 0;
  int64_t max_slot_tiles = 0;
  bool covers_every_row = true;
  bool token_masks = false;  // a mask reads the token array (same-media, bidirectional images)
};

// The host section's key orders (the only section with any) in `layout`, after every other
// section as an upload places them: a shift per span of the whole capacity and the orders as the
// host section's upload packed them, so that its spans, rows of the engine's copy, stay valid.
void add_key_order_sections(const DevicePlanLayout& host, int64_t span_capacity,
                            DevicePlanLayout& layout) {
  if (!host.has_key_orders) return;
  layout.has_key_orders = true;
  layout.span_shifts = align_section(layout.bytes);
  layout.key_orders =
      align_section(layout.span_shifts + static_cast<std::size_t>(span_capacity) * sizeof(int32_t));
  layout.key_order_slots = host.key_order_slots;
  layout.key_order_rows = host.key_order_rows;
  layout.bytes = align_section(layout.key_orders +
                               static_cast<std::size_t>(host.key_order_rows) * sizeof(int32_t));
}

ConfigSizes config_sizes(const std::vector<Section>& sections, const PlanShape& shape,
                         const std::vector<MaskPolicy>& masks) {
  ConfigSizes sizes;
  int64_t runs = 0, span_capacity = 0;
  for (const Section& section : sections) {
    const int64_t copies = section_copies(section, shape);
    const DevicePlanLayout& part = section.plan.layout();
    sizes.tiles += copies * section.plan.num_tiles();
    runs += copies * section.runs;
    span_capacity += copies * capacity(part.spans, part.columns, sizeof(SpanRecord));
    sizes.column_capacity += copies * capacity(part.columns, part.token_info, sizeof(int32_t));
    sizes.max_slot_tiles = std::max(sizes.max_slot_tiles, section.max_slot_tiles);
    sizes.covers_every_row = sizes.covers_every_row && section.plan.covers_every_row();
  }
  if (sizes.tiles > std::numeric_limits<int32_t>::max()) {
    throw Error(ErrorCode::kUnsupported, "prepare_pattern specs: " + std::to_string(sizes.tiles) +
                                             " tiles; the schedule indexes tiles in int32");
  }
  // One token array serves every section: a layer has one layout.
  sizes.token_masks = any_token_masks(masks);
  // Zeroed up to the spans: the padding between sections, as the upload has it.
  sizes.layout = plan_layout({shape.head_slots(), runs, sizes.tiles,
                              static_cast<int64_t>(masks.size()), span_capacity,
                              sizes.column_capacity, sizes.token_masks ? shape.kv_len : 0});
  if (!sections.empty() && sections.back().on_host()) {
    add_key_order_sections(sections.back().plan.layout(), span_capacity, sizes.layout);
  }
  return sizes;
}

void check_config(const std::vector<PatternSpec>& resolved_specs, const PlanShape& shape) {
  PlanBuilder shape_check(shape);  // throws on a bad shape as the host build does
  check_int32_ranges(shape);
  if (static_cast<int64_t>(resolved_specs.size()) != shape.heads) {
    throw_invalid_argument(
        "prepare_pattern specs",
        "one pattern spec per query head (heads = " + std::to_string(shape.heads) + ")",
        std::to_string(resolved_specs.size()) + " specs");
  }
}

}  // namespace

ConfigBuild build_config_plan_on_device(const std::vector<PatternSpec>& resolved_specs,
                                        const PlanShape& shape, const ConfigInputs& inputs,
                                        void* stream) {
  check_config(resolved_specs, shape);
  const auto cuda_stream = static_cast<cudaStream_t>(stream);
  // Declared before the sections: a section plan that is not released (an error midway) frees its
  // buffer on its stream when destroyed, so the streams must outlive it.
  std::optional<ForkedStreams> section_streams;
  std::vector<Section> sections =
      group_heads(resolved_specs, shape, inputs.layout, inputs.device != nullptr);
  ConfigBuild result;
  auto timer = std::make_shared<ConfigBuildTimer>();
  timer->slots.resize(static_cast<std::size_t>(shape.head_slots()));

  // The device sections are queued first, so that the GPU builds them while the host builds its
  // part.
  section_streams.emplace(
      static_cast<std::size_t>(std::count_if(sections.begin(), sections.end(),
                                             [](const Section& s) { return !s.on_host(); })),
      cuda_stream, "prepare_pattern config");
  result.estimated_on_device =
      build_device_sections(sections, shape, inputs, *section_streams, *timer);
  Section* host = sections.empty() || !sections.back().on_host() ? nullptr : &sections.back();
  Plan host_plan;
  if (host != nullptr) host_plan = build_and_time_host_section(*host, shape, inputs, *timer);
  const std::vector<MaskPolicy> masks = global_masks(sections, host_plan, shape, inputs.layout);
  if (any_token_masks(masks) && inputs.layout == nullptr) {
    throw_invalid_argument("prepare_pattern layout",
                           "the layout (masks that read tokens need its token array)", "none");
  }
  if (host != nullptr) {
    upload_host_section(*host, std::move(host_plan), masks, inputs.layout, cuda_stream);
  }
  const ConfigSizes sizes = config_sizes(sections, shape, masks);

  section_streams->join();
  timer->assembly_first = timer->record(cuda_stream);
  // The column count is an upper bound where a section was estimated.
  result.plan =
      DevicePlan::for_builder(shape, sizes.layout, sizes.tiles, sizes.column_capacity,
                              sizes.covers_every_row, sizes.layout.spans, cuda_stream);
  assemble_sections(sections, shape, masks,
                    {static_cast<std::byte*>(result.plan.builder_data()), sizes.layout, sizes.tiles,
                     sizes.max_slot_tiles},
                    cuda_stream);
  if (sizes.token_masks) {
    auto* base = static_cast<std::byte*>(result.plan.builder_data());
    write_token_info(*inputs.layout, reinterpret_cast<int32_t*>(base + sizes.layout.token_info),
                     cuda_stream);
  }
  timer->assembly_last = timer->record(cuda_stream);
  result.timer = std::move(timer);
  result.masks = masks;
  // The sections' buffers are freed in the caller's stream order, after the copies.
  for (Section& part : sections) part.plan.release(cuda_stream);
  return result;
}

}  // namespace mmsparse::cuda
