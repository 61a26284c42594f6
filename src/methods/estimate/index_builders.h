#pragma once
// Dynamic patterns built on the GPU from device Q and K (MInference's last-q estimate, the line
// selection and the conversion to tiles), for every head slot in one pass of kernels, asynchronous
// on one stream with no host synchronisation. The host builders in src/patterns/ are the oracle
// (docs/dynamic_patterns.md, "Contract for GPU index builders"): wherever the top-k cuts are clear,
// every record of the plan equals the host plan's upload.
//
// Built here: vertical-slash and grid with boundary 0 (none), 1 (K-boundary, the same plan),
// 2 (Q-boundary), 3 (2D-boundary) or 4 (item boundary), and per-item sinks (item_sinks > 0) for
// with any boundary.
//
// Sizes. How many key spans and columns a tile gets depends on the data (for the grid also how
// many runs and tiles a head slot gets: the stride found decides), but the plan buffer must be
// allocated before the data is read, and reading a count back would stall the host. So those
// sections are sized for the most that the shape and parameters allow (docs/index_builders.md),
// and the kernels pack the real records at their front, with the real offsets in the records.
// The layout therefore differs from an upload's in where the sections after the first
// data-dependent one start and in the total size; a grid plan also has empty tiles (no rows, no
// keys) after its real ones, scheduled last, so num_tiles() is the capacity. Every record of the
// real ones is the upload's.

#include <cstdint>
#include <string>
#include <vector>

#include "cuda/runtime/engine.h"
#include "methods/grid/grid.h"
#include "mmsparse/layout.h"
#include "mmsparse/patterns.h"
#include "mmsparse/plan.h"

namespace mmsparse::cuda {

// The device Q and K a dynamic pattern estimates from, validated against the plan shape.
struct EstimateOperands {
  DType dtype = DType::kBFloat16;  // of q and k: bfloat16 or float16
  int64_t batch = 0;
  int64_t q_len = 0;
  int64_t kv_len = 0;
  int64_t q_heads = 0;
  int64_t kv_heads = 0;  // query head h reads KV head h / (q_heads / kv_heads)
  int64_t head_dim = 0;
  float scale = 0.0f;       // resolved softmax scale of the estimate (never 0 here)
  const void* q = nullptr;  // [batch, q_len, q_heads, head_dim]
  Strides4 q_strides{};
  const void* k = nullptr;  // [batch, kv_len, kv_heads, head_dim]
  Strides4 k_strides{};
  // The query heads estimated, ascending, when a plan serves only some heads (a per-head config:
  // config_builder.h); empty means all q_heads. The plan's head slots are then batch element ×
  // heads.size() + the head's index in this list.
  std::vector<int32_t> heads;
  int64_t estimated_heads() const {
    return heads.empty() ? q_heads : static_cast<int64_t>(heads.size());
  }
};

// The most query heads one estimate serves by selection (EstimateOperands::heads): the selection
// travels to the kernels by value.
inline constexpr int64_t kMaxSelectedHeads = 256;

// `operands` restricted to the ascending query heads `heads` (each in [0, q_heads), at most
// kMaxSelectedHeads); throws naming "<pattern> heads" otherwise.
EstimateOperands select_heads(const std::string& pattern, EstimateOperands operands,
                              const std::vector<int32_t>& heads);

// Whether `inputs` hold device tensors (so a dynamic plan is built on the device).
bool inputs_on_device(const PatternInputs& inputs);

// Checks `inputs` (CUDA q and k of one dtype, shapes matching `shape` as build_plan requires,
// head_dim a multiple of 16 up to 128, a contiguous last dimension, 16-byte aligned rows as the
// attention engine needs them) and describes them; errors name "<pattern> input q ...".
EstimateOperands make_estimate_operands(const std::string& pattern, const PatternInputs& inputs,
                                        const PlanShape& shape);

// Whether the resolved spec is a vertical-slash head the GPU estimate builds for this shape and
// layout, whole plans and head subsets alike (per-head configs route their device sections by it):
// boundary none or K, or Q, 2D and item (and item sinks with any boundary) when each query group's
// estimate rows fit the estimate kernels (at most kMaxEstimateSegments runs of consecutive rows;
// index_kernels.h). Specs whose layout does not suit their boundary answer true, so that the build
// reports the layout error.
bool builds_dynamic_on_device(const PatternSpec& resolved_spec, const PlanShape& shape,
                              const ModalityLayout* layout);
// Whether the resolved spec is a grid head build_grid_plan_on_device builds for this shape and
// layout, whole plans and head subsets alike: boundary none or K, or Q, 2D and item (and item sinks
// with any boundary) when each query group's estimate rows fit the estimate kernels, tiles hold at
// most kMaxGroupedGridTileRows rows and (item) there are at most grouped::kMaxGroups query
// groups. Specs whose layout does not suit their boundary answer true,
// so that the build reports the layout error.
bool builds_grid_on_device(const PatternSpec& resolved_spec, const PlanShape& shape,
                           const ModalityLayout* layout);

// The plan build_plan(resolved_spec, shape, layout, inputs) builds, made on the device, for the
// specs builds_dynamic_on_device or builds_grid_on_device accepts. Throws like the host builder on
// bad parameters, shapes and layouts, kUnsupported for specs it does not build;
// asynchronous on `stream` (cudaStream_t). With a head selection, shape.heads must equal the
// number of selected heads.
DevicePlan build_dynamic_plan_on_device(const PatternSpec& resolved_spec, const PlanShape& shape,
                                        const ModalityLayout* layout,
                                        const EstimateOperands& operands, void* stream);

// The grid head's plan (MMInference Alg. 1; with Alg. 2 or 3 for boundary Q or 2D) as
// build_dynamic_plan_on_device builds it, and, when `chosen` is not null, the stride and phase of
// every head slot and (query group, key space) pair written to it in stream order (device memory,
// [pairs, head slots]: pair g * spaces + s, one pair without a Q/2D boundary; see
// grid_selections).
// `capacities`, when not null, gets the plan's sizes the host planned (what a config's assembly
// needs), so that callers need not plan the head again.
struct GridPlanCapacities {
  int64_t tiles_per_head = 0;  // the most tiles of a head slot (real ones first, then empty ones)
  int64_t runs = 0;            // run records of all head slots
};
DevicePlan build_grid_plan_on_device(const PatternSpec& resolved_spec, const PlanShape& shape,
                                     const ModalityLayout* layout, const EstimateOperands& operands,
                                     void* stream, detail::GridLines* chosen = nullptr,
                                     GridPlanCapacities* capacities = nullptr);
// How many (query group, key space) pairs a grid spec searches for this shape and layout: the
// length of build_grid_plan_on_device's `chosen` per head slot.
int64_t grid_selections(const PatternSpec& resolved_spec, const PlanShape& shape,
                        const ModalityLayout* layout);

}  // namespace mmsparse::cuda
