// Attention calls and the plan/run split. Every call releases the GIL while the engine works;
// CUDA work is enqueued on the stream the caller passes (torch's current stream).

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "bindings.h"
#include "mmsparse/attention.h"
#include "mmsparse/patterns.h"
#include "mmsparse/plan.h"
#include "mmsparse/status.h"

namespace nb = nanobind;

namespace mmsparse::python {
namespace {

AttentionOptions make_options(float scale, bool causal, uintptr_t stream, int num_threads) {
  AttentionOptions options;
  options.scale = scale;
  options.causal = causal;
  options.stream = reinterpret_cast<void*>(stream);  // NOLINT: cudaStream_t as an integer
  options.num_threads = num_threads;
  return options;
}

std::vector<PatternSpec> parse_specs(const std::vector<std::string>& texts) {
  std::vector<PatternSpec> specs;
  specs.reserve(texts.size());
  for (const std::string& text : texts) specs.push_back(PatternSpec::parse(text));
  return specs;
}

// The arguments of prepare() that describe the plan's problem.
struct PlanRequest {
  PlanShape shape;
  Device device;
};

PlanRequest make_request(int64_t batch, int64_t heads, int64_t q_len, int64_t kv_len,
                         int64_t tile_rows, int device_type, int device_index) {
  PlanRequest request;
  request.shape = PlanShape{batch, heads, q_len, kv_len, tile_rows};
  request.device = Device{static_cast<DeviceType>(device_type), device_index};
  return request;
}

// specs: one spec for every head, or one per query head. q, k: the dynamic patterns' inputs (null
// for static ones); host_q, host_k: host copies for the heads a device build cannot estimate.
PreparedPlan prepare(const std::vector<std::string>& spec_texts, const PlanRequest& request,
                     const ModalityLayout* layout, uintptr_t stream, const TensorView* q,
                     const TensorView* k, const TensorView* host_q, const TensorView* host_k,
                     float scale) {
  if (spec_texts.empty()) {
    throw_invalid_argument("pattern", "at least one spec", "none");
  }
  if ((q == nullptr) != (k == nullptr)) {
    throw_invalid_argument("q, k (pattern inputs)", "both or neither", "one of them");
  }
  void* stream_pointer = reinterpret_cast<void*>(stream);  // NOLINT: cudaStream_t as an integer
  const std::vector<PatternSpec> specs = parse_specs(spec_texts);
  PatternInputs inputs;
  PatternInputs host_inputs;
  if (q != nullptr) inputs = PatternInputs{*q, *k, scale};
  if (host_q != nullptr && host_k != nullptr) host_inputs = PatternInputs{*host_q, *host_k, scale};
  const PatternInputs* inputs_pointer = q != nullptr ? &inputs : nullptr;
  const PatternInputs* host_pointer = host_q != nullptr ? &host_inputs : nullptr;
  if (specs.size() == 1) {
    return prepare_pattern(specs.front(), request.shape, layout, request.device, stream_pointer,
                           inputs_pointer);
  }
  return prepare_pattern(specs, request.shape, layout, request.device, stream_pointer,
                         inputs_pointer, host_pointer);
}

// The plan's records as numpy arrays over the host plan's own vectors (no copy; each array keeps
// the Python PreparedPlan alive), so that tile-level converters (e.g. to a kernel's block map)
// can run vectorised instead of walking every query row.
template <typename Record, typename Field>
nb::ndarray<nb::numpy, const Field> record_array(const std::vector<Record>& records, size_t fields,
                                                 nb::handle owner) {
  static_assert(sizeof(Record) % sizeof(Field) == 0, "records are packed arrays of Field");
  const size_t shape[2] = {records.size(), fields};
  // NOLINTNEXTLINE: the records are standard-layout structs of `fields` Field members
  const auto* data = reinterpret_cast<const Field*>(records.data());
  return nb::ndarray<nb::numpy, const Field>(data, fields == 1 ? 1 : 2, shape, owner);
}

// [masks, 9] int64 in the order of kMaskFields: the policies are few, so they are copied.
constexpr const char* kMaskFields[] = {"causal",       "window",         "window_sink",
                                       "min_distance", "period",         "band",
                                       "same_media",   "modality_pairs", "media_bidirectional"};
constexpr size_t kNumMaskFields = sizeof(kMaskFields) / sizeof(kMaskFields[0]);

nb::ndarray<nb::numpy, int64_t> mask_array(const std::vector<MaskPolicy>& masks) {
  auto* values = new int64_t[masks.size() * kNumMaskFields];
  for (size_t m = 0; m < masks.size(); ++m) {
    const MaskPolicy& mask = masks[m];
    const int64_t row[kNumMaskFields] = {
        mask.causal, mask.window,     mask.window_sink,    mask.min_distance,       mask.period,
        mask.band,   mask.same_media, mask.modality_pairs, mask.media_bidirectional};
    std::copy(row, row + kNumMaskFields, values + m * kNumMaskFields);
  }
  nb::capsule owner(values,
                    [](void* pointer) noexcept { delete[] static_cast<int64_t*>(pointer); });
  const size_t shape[2] = {masks.size(), kNumMaskFields};
  return nb::ndarray<nb::numpy, int64_t>(values, 2, shape, owner);
}

nb::dict pass_arrays(nb::handle_t<PreparedPlan> self, int64_t pass_index) {
  const PreparedPlan& prepared = nb::cast<const PreparedPlan&>(self);
  const Plan* host_plan = nullptr;
  {
    nb::gil_scoped_release release;  // the first call may build or download the host plan
    host_plan = &prepared.plan();
  }
  if (pass_index < 0 || pass_index >= host_plan->num_passes()) {
    throw_invalid_argument("pass_index", "in [0, " + std::to_string(host_plan->num_passes()) + ")",
                           std::to_string(pass_index));
  }
  const Plan& plan = host_plan->pass(pass_index);
  nb::dict arrays;
  arrays["head_run_offsets"] = record_array<int64_t, int64_t>(plan.head_run_offsets, 1, self);
  arrays["runs"] = record_array<QueryRun, int64_t>(plan.runs, 3, self);  // start, count, step
  arrays["head_tile_offsets"] = record_array<int64_t, int64_t>(plan.head_tile_offsets, 1, self);
  arrays["tiles"] = record_array<QueryTile, int64_t>(plan.tiles, 2, self);  // begin, end
  arrays["tile_masks"] = record_array<int32_t, int32_t>(plan.tile_masks, 1, self);
  arrays["tile_span_offsets"] = record_array<int64_t, int64_t>(plan.tile_span_offsets, 1, self);
  arrays["spans"] = record_array<KeySpan, int32_t>(plan.spans, 2, self);  // begin, end
  arrays["tile_strided_offsets"] =
      record_array<int64_t, int64_t>(plan.tile_strided_offsets, 1, self);
  arrays["strided_spans"] = record_array<StridedSpan, int32_t>(plan.strided_spans, 3, self);
  arrays["tile_column_offsets"] = record_array<int64_t, int64_t>(plan.tile_column_offsets, 1, self);
  arrays["columns"] = record_array<int32_t, int32_t>(plan.columns, 1, self);
  // Key orders (plan.h): per tile the order its spans' slots index, kKeysInPlace (-1) for none
  // (empty when every tile reads in place), and each order's original key per slot.
  arrays["tile_key_orders"] = record_array<int32_t, int32_t>(plan.tile_key_orders, 1, self);
  nb::list key_orders;
  for (const std::vector<int32_t>& order : plan.key_orders) {
    key_orders.append(record_array<int32_t, int32_t>(order, 1, self));
  }
  arrays["key_orders"] = key_orders;
  arrays["masks"] = mask_array(plan.masks);
  nb::list fields;
  for (const char* field : kMaskFields) fields.append(field);
  arrays["mask_fields"] = fields;
  return arrays;
}

void bind_prepared_plan(nb::module_& module) {
  nb::class_<PreparedPlan>(module, "PreparedPlan")
      .def_prop_ro("shape",
                   [](const PreparedPlan& prepared) {
                     const PlanShape& shape = prepared.shape();
                     return std::make_tuple(shape.batch, shape.heads, shape.q_len, shape.kv_len,
                                            shape.tile_rows);
                   })
      .def_prop_ro("device",
                   [](const PreparedPlan& prepared) { return device_name(prepared.device()); })
      .def(
          "summary", [](const PreparedPlan& prepared) { return prepared.plan().summary(); },
          nb::call_guard<nb::gil_scoped_release>())
      .def(
          "pair_counts",
          [](const PreparedPlan& prepared) { return count_plan_pairs(prepared.plan()); },
          nb::call_guard<nb::gil_scoped_release>(),
          "(query, key) pairs each head slot computes after masking")
      .def_prop_ro("num_passes",
                   [](const PreparedPlan& prepared) { return prepared.plan().num_passes(); })
      .def("pass_arrays", &pass_arrays, nb::arg("pass_index") = 0,
           "The host plan's records of one pass as numpy arrays (views, no copy): query runs, "
           "tiles, their masks, spans, strided spans and columns in CSR form, and key orders "
           "(plan.h)");
}

}  // namespace

void bind_attention(nb::module_& module) {
  bind_prepared_plan(module);

  module.def(
      "attention_dense",
      [](const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
         const TensorView& lse, float scale, bool causal, uintptr_t stream, int num_threads) {
        attention_dense(q, k, v, out, lse, make_options(scale, causal, stream, num_threads));
      },
      nb::arg("q"), nb::arg("k"), nb::arg("v"), nb::arg("out"), nb::arg("lse"), nb::arg("scale"),
      nb::arg("causal"), nb::arg("stream"), nb::arg("num_threads"),
      nb::call_guard<nb::gil_scoped_release>());

  module.def(
      "attention_planned",
      [](const PreparedPlan& plan, const TensorView& q, const TensorView& k, const TensorView& v,
         const TensorView& out, const TensorView& lse, float scale, uintptr_t stream,
         int num_threads) {
        attention_planned(plan, q, k, v, out, lse, make_options(scale, true, stream, num_threads));
      },
      nb::arg("plan"), nb::arg("q"), nb::arg("k"), nb::arg("v"), nb::arg("out"), nb::arg("lse"),
      nb::arg("scale"), nb::arg("stream"), nb::arg("num_threads"),
      nb::call_guard<nb::gil_scoped_release>());

  module.def(
      "prepare",
      [](const std::vector<std::string>& specs, int64_t batch, int64_t heads, int64_t q_len,
         int64_t kv_len, int64_t tile_rows, const ModalityLayout* layout, int device_type,
         int device_index, uintptr_t stream, const TensorView* q, const TensorView* k,
         const TensorView* host_q, const TensorView* host_k, float scale) {
        const PlanRequest request =
            make_request(batch, heads, q_len, kv_len, tile_rows, device_type, device_index);
        return prepare(specs, request, layout, stream, q, k, host_q, host_k, scale);
      },
      nb::arg("specs"), nb::arg("batch"), nb::arg("heads"), nb::arg("q_len"), nb::arg("kv_len"),
      nb::arg("tile_rows"), nb::arg("layout").none(), nb::arg("device_type"),
      nb::arg("device_index"), nb::arg("stream"), nb::arg("q").none(), nb::arg("k").none(),
      nb::arg("host_q").none(), nb::arg("host_k").none(), nb::arg("scale"),
      nb::call_guard<nb::gil_scoped_release>());

  module.def(
      "builds_plan_on_device",
      [](const std::string& spec, int64_t batch, int64_t heads, int64_t q_len, int64_t kv_len,
         int64_t tile_rows, const ModalityLayout* layout, int device_type, int device_index) {
        const PlanRequest request =
            make_request(batch, heads, q_len, kv_len, tile_rows, device_type, device_index);
        return builds_plan_on_device(PatternSpec::parse(spec), request.shape, layout,
                                     request.device);
      },
      nb::arg("spec"), nb::arg("batch"), nb::arg("heads"), nb::arg("q_len"), nb::arg("kv_len"),
      nb::arg("tile_rows"), nb::arg("layout").none(), nb::arg("device_type"),
      nb::arg("device_index"));

  module.def(
      "preferred_tile_rows",
      [](int device_type, int device_index, int64_t head_dim) {
        return preferred_tile_rows(Device{static_cast<DeviceType>(device_type), device_index},
                                   head_dim);
      },
      nb::arg("device_type"), nb::arg("device_index"), nb::arg("head_dim"));
}

}  // namespace mmsparse::python
