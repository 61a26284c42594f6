// The GPU index builders' entry points (index_builders.h): operand checks, the plan buffer's layout
// and allocation, and the patterns' kernels (methods/vertical_slash/*_device.cu,
// methods/grid/*_device.cu).

#include "methods/estimate/index_builders.h"

#include <cmath>
#include <cstdint>
#include <cstddef>
#include <limits>
#include <string>
#include <vector>

#include "cuda/common/cuda_check.h"
#include "cuda/runtime/plan_view.cuh"
#include "methods/estimate/index_kernels.h"
#include "methods/estimate/modality_boundary.h"
#include "methods/grid/grid.h"
#include "methods/vertical_slash/vertical_slash.h"
#include "mmsparse/status.h"

namespace mmsparse::cuda {
namespace {

constexpr int kOperandDims = 4;
// Grid dimension y of the estimate kernels: KV heads of the batch, and head slots.
constexpr int64_t kMaxGridY = 65535;

void check_operand(const std::string& name, const TensorView& view, const char* dims) {
  if (view.device.type != DeviceType::kCUDA) {
    throw_invalid_argument(name + " device", "cuda (the plan is built on the GPU)",
                           device_name(view.device));
  }
  if (view.ndim != kOperandDims) {
    throw_invalid_argument(name, std::string("4 dimensions ") + dims,
                           std::to_string(view.ndim) + " (" + view.shape_string() + ")");
  }
  if (view.dtype != DType::kBFloat16 && view.dtype != DType::kFloat16) {
    throw_invalid_argument(name + " dtype", "bfloat16 or float16 (the GPU estimate's MMA)",
                           std::string(dtype_name(view.dtype)));
  }
  if (view.data == nullptr && view.numel() > 0) {
    throw_invalid_argument(name + " data", "a non-null pointer", "null");
  }
}

// The estimate loads rows as 16-byte vectors (as the attention engine does).
void check_vector_rows(const std::string& name, const TensorView& view) {
  if (view.numel() == 0) return;
  const int64_t vector = index::kEstimateVectorElements;
  if (view.strides[3] != 1 || view.strides[0] % vector != 0 || view.strides[1] % vector != 0 ||
      view.strides[2] % vector != 0) {
    throw_invalid_argument(name + " strides",
                           "a contiguous last dimension and other strides multiples of " +
                               std::to_string(vector) + " elements (16-byte rows)",
                           "[" + std::to_string(view.strides[0]) + ", " +
                               std::to_string(view.strides[1]) + ", " +
                               std::to_string(view.strides[2]) + ", " +
                               std::to_string(view.strides[3]) + "]");
  }
  if (reinterpret_cast<std::uintptr_t>(view.data) % index::kEstimateVectorBytes != 0) {
    throw_invalid_argument(name + " data", "a 16-byte aligned pointer", "a misaligned one");
  }
}

void check_extent(const std::string& name, int64_t value, int64_t expected,
                  const std::string& what) {
  if (value != expected) {
    throw_invalid_argument(name, std::to_string(expected) + " (" + what + ")",
                           std::to_string(value));
  }
}

Strides4 strides_of(const TensorView& view) {
  return {view.strides[0], view.strides[1], view.strides[2], view.strides[3]};
}

}  // namespace

bool inputs_on_device(const PatternInputs& inputs) {
  return inputs.q.device.type == DeviceType::kCUDA || inputs.k.device.type == DeviceType::kCUDA;
}

EstimateOperands make_estimate_operands(const std::string& pattern, const PatternInputs& inputs,
                                        const PlanShape& shape) {
  const std::string q = pattern + " input q";
  const std::string k = pattern + " input k";
  check_operand(q, inputs.q, "[batch, q_len, q_heads, head_dim]");
  check_operand(k, inputs.k, "[batch, kv_len, kv_heads, head_dim]");
  if (inputs.k.dtype != inputs.q.dtype) {
    throw_invalid_argument(k + " dtype", std::string(dtype_name(inputs.q.dtype)) + " (q's dtype)",
                           std::string(dtype_name(inputs.k.dtype)));
  }
  if (!(inputs.k.device == inputs.q.device)) {
    throw_invalid_argument(k + " device", device_name(inputs.q.device) + " (q's device)",
                           device_name(inputs.k.device));
  }
  check_extent(q + " batch", inputs.q.shape[0], shape.batch,
               "shape.batch: a dynamic plan has a head slot per batch element");
  check_extent(q + " q_len", inputs.q.shape[1], shape.q_len, "shape.q_len");
  check_extent(q + " heads", inputs.q.shape[2], shape.heads, "shape.heads");
  check_extent(k + " batch", inputs.k.shape[0], inputs.q.shape[0], "q's batch");
  check_extent(k + " kv_len", inputs.k.shape[1], shape.kv_len, "shape.kv_len");
  check_extent(k + " head_dim", inputs.k.shape[3], inputs.q.shape[3], "q's head_dim");
  const int64_t kv_heads = inputs.k.shape[2];
  if (kv_heads < 1 || shape.heads % kv_heads != 0) {
    throw_invalid_argument(k + " heads",
                           "a divisor of q's " + std::to_string(shape.heads) + " heads (GQA)",
                           std::to_string(kv_heads));
  }
  const int64_t head_dim = inputs.q.shape[3];
  if (head_dim < index::kEstimateHeadDimStep || head_dim > index::kMaxEstimateHeadDim ||
      head_dim % index::kEstimateHeadDimStep != 0) {
    throw Error(ErrorCode::kUnsupported,
                q + " head_dim: the GPU estimate takes a multiple of " +
                    std::to_string(index::kEstimateHeadDimStep) + " up to " +
                    std::to_string(index::kMaxEstimateHeadDim) + ", got " +
                    std::to_string(head_dim));
  }
  check_vector_rows(q, inputs.q);
  check_vector_rows(k, inputs.k);
  if (inputs.q.shape[0] * kv_heads > kMaxGridY || inputs.q.shape[0] * shape.heads > kMaxGridY) {
    throw Error(ErrorCode::kUnsupported,
                q + " batch * heads: the GPU estimate takes at most " +
                    std::to_string(kMaxGridY) + " head slots, got " +
                    std::to_string(inputs.q.shape[0] * shape.heads));
  }
  EstimateOperands operands;
  operands.dtype = inputs.q.dtype;
  operands.batch = inputs.q.shape[0];
  operands.q_len = shape.q_len;
  operands.kv_len = shape.kv_len;
  operands.q_heads = shape.heads;
  operands.kv_heads = kv_heads;
  operands.head_dim = head_dim;
  operands.scale = inputs.scale != 0.0f
                       ? inputs.scale
                       : 1.0f / std::sqrt(static_cast<float>(head_dim));
  operands.q = inputs.q.data;
  operands.q_strides = strides_of(inputs.q);
  operands.k = inputs.k.data;
  operands.k_strides = strides_of(inputs.k);
  return operands;
}

EstimateOperands select_heads(const std::string& pattern, EstimateOperands operands,
                              const std::vector<int32_t>& heads) {
  const std::string name = pattern + " heads";
  if (heads.empty() || static_cast<int64_t>(heads.size()) > kMaxSelectedHeads) {
    throw Error(ErrorCode::kUnsupported, name + ": the GPU estimate selects 1 to " +
                                             std::to_string(kMaxSelectedHeads) +
                                             " query heads, got " + std::to_string(heads.size()));
  }
  for (std::size_t i = 0; i < heads.size(); ++i) {
    if (heads[i] < 0 || heads[i] >= operands.q_heads || (i > 0 && heads[i] <= heads[i - 1])) {
      throw_invalid_argument(
          name, "ascending query heads in [0, " + std::to_string(operands.q_heads) + ")",
          "head " + std::to_string(heads[i]) + " at position " + std::to_string(i));
    }
  }
  operands.heads = heads;
  return operands;
}

namespace {

detail::BoundaryMode spec_boundary(const PatternSpec& resolved_spec) {
  const auto boundary = resolved_spec.params.find(detail::kBoundaryParam);
  return boundary == resolved_spec.params.end()
             ? detail::BoundaryMode::kNone
             : static_cast<detail::BoundaryMode>(boundary->second);
}

// Whether the spec asks for per-item sink columns (item_sinks > 0).
bool has_item_sinks(const PatternSpec& resolved_spec) {
  const auto item_sinks = resolved_spec.params.find(detail::kItemSinksParam);
  return item_sinks != resolved_spec.params.end() && item_sinks->second != 0;
}

}  // namespace

namespace {

// Boundary none/K always fit the estimate (with item sinks, where its last rows do); Q/2D/item
// where the query groups' last rows do (`plan_of` makes the method's geometry; a spec or layout
// it rejects is the build's error to report, a geometry the GPU cannot take goes to the host).
template <class PlanOf>
bool fits_boundary_mode(const PatternSpec& resolved_spec, const PlanOf& plan_of) {
  const detail::BoundaryMode mode = spec_boundary(resolved_spec);
  if (mode < detail::BoundaryMode::kNone || mode > detail::BoundaryMode::kItem) {
    return false;  // an out-of-range mode: the host build reports it
  }
  const bool grouped = mode != detail::BoundaryMode::kNone && mode != detail::BoundaryMode::kKey;
  if (!grouped && !has_item_sinks(resolved_spec)) return true;
  try {
    return index::fits_estimate(plan_of());
  } catch (const Error& error) {
    if (error.code() == ErrorCode::kUnsupported && mode == detail::BoundaryMode::kItem) {
      return false;  // more media items than the GPU builder's query groups
    }
    return true;  // the build reports the spec's or the layout's error
  }
}

}  // namespace

bool builds_dynamic_on_device(const PatternSpec& resolved_spec, const PlanShape& shape,
                              const ModalityLayout* layout) {
  if (!detail::is_spec_of(resolved_spec, detail::vertical_slash_entry())) return false;
  return fits_boundary_mode(
      resolved_spec, [&] { return index::plan_vertical_slash(resolved_spec, shape, layout); });
}

bool builds_grid_on_device(const PatternSpec& resolved_spec, const PlanShape& shape,
                           const ModalityLayout* layout) {
  if (!detail::is_spec_of(resolved_spec, detail::grid_entry())) return false;
  const detail::BoundaryMode mode = spec_boundary(resolved_spec);
  // Item sinks take the grouped conversion with any boundary.
  const bool grouped = mode == detail::BoundaryMode::kQuery ||
                       mode == detail::BoundaryMode::kTwoD ||
                       mode == detail::BoundaryMode::kItem || has_item_sinks(resolved_spec);
  if (grouped && shape.tile_rows > index::kMaxGroupedGridTileRows) return false;
  return fits_boundary_mode(resolved_spec,
                            [&] { return index::plan_grid(resolved_spec, shape, layout); });
}

int64_t grid_selections(const PatternSpec& resolved_spec, const PlanShape& shape,
                        const ModalityLayout* layout) {
  const index::GridBuild build = index::plan_grid(resolved_spec, shape, layout);
  return build.grouped() ? static_cast<int64_t>(build.selections.size()) : 1;
}

namespace {

void check_estimated_heads(const EstimateOperands& operands, const PlanShape& shape) {
  if (operands.estimated_heads() != shape.heads) {
    throw_invalid_argument(
        "build_dynamic_plan_on_device shape.heads",
        std::to_string(operands.estimated_heads()) + " (the query heads the operands estimate)",
        std::to_string(shape.heads));
  }
}

void check_tile_count(int64_t tiles) {
  if (tiles > std::numeric_limits<int32_t>::max()) {
    throw Error(ErrorCode::kUnsupported, "build_dynamic_plan_on_device: " + std::to_string(tiles) +
                                             " tiles; the schedule indexes tiles in int32");
  }
}

// A dynamic plan's sections: one mask (causal, PlanBuilder's default policy), the data-dependent
// ones at capacity. The buffer is zeroed up to the spans (the identity order's run offsets, the
// padding, as the upload has them); the kernels write the records, and the spans and columns
// beyond the real counts stay unread.
DevicePlanLayout dynamic_plan_layout(const PlanShape& shape, int64_t runs, int64_t tiles,
                                     int64_t spans, int64_t columns) {
  return plan_layout({shape.head_slots(), runs, tiles, tiles > 0 ? 1 : 0, spans, columns});
}

index::PlanSections plan_sections(void* buffer, const DevicePlanLayout& layout) {
  auto* base = static_cast<std::byte*>(buffer);
  index::PlanSections sections;
  sections.head_run_offsets = reinterpret_cast<int64_t*>(base + layout.head_run_offsets);
  sections.runs = reinterpret_cast<RunRecord*>(base + layout.runs);
  sections.tiles = reinterpret_cast<TileRecord*>(base + layout.tiles);
  sections.schedule = reinterpret_cast<int32_t*>(base + layout.schedule);
  sections.masks = reinterpret_cast<MaskRecord*>(base + layout.masks);
  sections.spans = reinterpret_cast<SpanRecord*>(base + layout.spans);
  sections.columns = reinterpret_cast<int32_t*>(base + layout.columns);
  return sections;
}

}  // namespace

DevicePlan build_dynamic_plan_on_device(const PatternSpec& resolved_spec, const PlanShape& shape,
                                        const ModalityLayout* layout,
                                        const EstimateOperands& operands, void* stream) {
  const detail::PatternEntry& vertical_slash = detail::vertical_slash_entry();
  const detail::PatternEntry& grid = detail::grid_entry();
  if (detail::is_spec_of(resolved_spec, grid)) {
    return build_grid_plan_on_device(resolved_spec, shape, layout, operands, stream);
  }
  PlanBuilder shape_check(shape);  // throws on a bad shape as the host build does
  check_int32_ranges(shape);
  if (!detail::is_spec_of(resolved_spec, vertical_slash)) {
    throw Error(ErrorCode::kUnsupported, "build_dynamic_plan_on_device pattern: expected " +
                                             vertical_slash.info.name + " or " + grid.info.name +
                                             ", got \"" + resolved_spec.name + "\"");
  }
  check_estimated_heads(operands, shape);
  const index::VerticalSlashBuild build = index::plan_vertical_slash(resolved_spec, shape, layout);
  const int64_t tiles = build.tiles();
  check_tile_count(tiles);

  const DevicePlanLayout buffer =
      dynamic_plan_layout(shape, build.runs(), tiles, build.span_capacity, build.column_capacity);
  // The column count is an upper bound (the real one lives on the device); the groups tile every
  // row.
  DevicePlan plan = DevicePlan::for_builder(shape, buffer, tiles, build.column_capacity, true,
                                            buffer.spans, stream);
  index::build_vertical_slash(build, operands, plan_sections(plan.builder_data(), buffer),
                              static_cast<cudaStream_t>(stream));
  return plan;
}

DevicePlan build_grid_plan_on_device(const PatternSpec& resolved_spec, const PlanShape& shape,
                                     const ModalityLayout* layout, const EstimateOperands& operands,
                                     void* stream, detail::GridLines* chosen,
                                     GridPlanCapacities* capacities) {
  PlanBuilder shape_check(shape);  // throws on a bad shape as the host build does
  check_int32_ranges(shape);
  if (!detail::is_spec_of(resolved_spec, detail::grid_entry())) {
    throw Error(ErrorCode::kUnsupported, "build_grid_plan_on_device pattern: expected " +
                                             detail::grid_entry().info.name + ", got \"" +
                                             resolved_spec.name + "\"");
  }
  check_estimated_heads(operands, shape);
  const index::GridBuild build = index::plan_grid(resolved_spec, shape, layout);
  const int64_t tiles = build.tiles();
  check_tile_count(tiles);
  if (capacities != nullptr) *capacities = {build.tiles_per_head, build.runs()};

  const DevicePlanLayout buffer =
      dynamic_plan_layout(shape, build.runs(), tiles, build.span_capacity, build.column_capacity);
  // Tiles and columns at capacity (the tiles beyond the real ones are empty); the groups tile
  // every row.
  DevicePlan plan = DevicePlan::for_builder(shape, buffer, tiles, build.column_capacity, true,
                                            buffer.spans, stream);
  index::build_grid(build, operands, plan_sections(plan.builder_data(), buffer), chosen,
                    static_cast<cudaStream_t>(stream));
  return plan;
}

}  // namespace mmsparse::cuda
